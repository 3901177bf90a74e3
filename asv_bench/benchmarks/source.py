"""asv: byte sources (mmap, pread with ``mmap=False``, fsspec) and row-range slices.

The remote figures against a real S3 API (moto on 127.0.0.1) come from
``scripts/bench_peers.py --format remote``; here the fsspec source runs over ``memory://``, so
what is tracked is the number of requests and bytes, which does not depend on the network.
"""

import os
import shutil
import tempfile

import numpy as np

import tenfold


class SourceSuite:
    params = [["mmap", "pread"]]
    param_names = ["source"]

    def setup(self, source):
        self.tmp = tempfile.mkdtemp(prefix="asv-source-")
        rng = np.random.default_rng(0)
        self.tensors = {
            f"layer{i:02d}.weight": rng.standard_normal((256, 1024), dtype=np.float32)
            for i in range(64)
        }
        self.path = os.path.join(self.tmp, "m.zt")
        tenfold.save(self.path, self.tensors)
        self.big = os.path.join(self.tmp, "big.zt")
        tenfold.save(self.big, {"w": rng.standard_normal((16384, 1024), dtype=np.float32)})
        self.mmap = source == "mmap"

    def teardown(self, source):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_open_and_read_all(self, source):
        with tenfold.open(self.path, mmap=self.mmap, verify_checksums=False) as r:
            for k in r:
                r[k]

    def time_slice_eighth_of_rows(self, source):
        with tenfold.open(self.big, mmap=self.mmap) as r:
            np.array(r.read("w", slice(8192, 10240)))

    def track_slice_bytes_read(self, source):
        if self.mmap:
            return 0  # a map reads what is touched: not counted
        with tenfold.open(self.big, mmap=False) as r:
            b0 = r._mf.stats["bytes"]
            r.read("w", slice(8192, 10240))
            return r._mf.stats["bytes"] - b0

    track_slice_bytes_read.unit = "bytes"


class RemoteSuite:
    """One tensor from a .zt over fsspec's memory filesystem: requests and bytes."""

    def setup(self):
        import fsspec

        rng = np.random.default_rng(0)
        tensors = {
            f"t{i:02d}": rng.standard_normal((1024, 1024), dtype=np.float32) for i in range(16)
        }
        tmp = tempfile.mkdtemp(prefix="asv-remote-")
        path = os.path.join(tmp, "m.zt")
        tenfold.save(path, tensors)
        fsspec.filesystem("memory").pipe("/asv/m.zt", open(path, "rb").read())
        shutil.rmtree(tmp, ignore_errors=True)
        self.url = "memory://asv/m.zt"

    def time_open_and_read_one(self):
        with tenfold.open(self.url) as r:
            r["t08"]

    def track_requests_open_and_read_one(self):
        with tenfold.open(self.url) as r:
            r["t08"]
            return r._mf.stats["requests"]

    def track_bytes_open_and_read_one(self):
        with tenfold.open(self.url) as r:
            r["t08"]
            return r._mf.stats["bytes"]

    track_bytes_open_and_read_one.unit = "bytes"

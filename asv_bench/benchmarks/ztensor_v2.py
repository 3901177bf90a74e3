"""asv: zTensor v2 open + map (manifest scan, plans, views), the manifest kernels, append.

Peer comparisons (ztensor 2.1.2, np.save) are in scripts/bench_peers.py; these track tenfold
alone. Tensor data is small here: opening reads the manifest only, so only the tensor count
matters.
"""

import os
import shutil
import tempfile

import numpy as np

import tenfold
import tenfold.ztensor as zt
from tenfold import _kernels
from tenfold.ztensor import _v2spec, v2reader


class V2OpenSuite:
    params = [[64, 1024]]
    param_names = ["n_tensors"]

    def setup(self, n_tensors):
        self.tmp = tempfile.mkdtemp()
        self.path = os.path.join(self.tmp, "m.zt")
        rng = np.random.default_rng(0)
        zt.save(
            self.path,
            {f"layer{i:04d}.weight": rng.standard_normal(64, np.float32) for i in range(n_tensors)},
            generation=2,
            fsync=False,
        )
        with zt.V2Reader(self.path) as r:
            moff, mlen = r.manifest_blob
            self.raw = r._mf.bytes(moff, mlen)
            self.size = r.size

    def teardown(self, n_tensors):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_open(self, n_tensors):
        zt.open(self.path).close()

    def time_open_and_map_all(self, n_tensors):
        with zt.open(self.path, verify_checksums=False) as r:
            [r[n] for n in r]

    def time_tenfold_open_and_map_all(self, n_tensors):
        # the front door: format detection shares the open with the lean v2 path
        with tenfold.open(self.path, verify_checksums=False) as r:
            [r[n] for n in r]

    def time_open_map_and_verify_all(self, n_tensors):
        with zt.open(self.path) as r:
            [r[n] for n in r]

    def time_decode_manifest_generic(self, n_tensors):
        _kernels.load("dcbor").decode(self.raw, 32)

    def time_scan_manifest(self, n_tensors):
        _kernels.load("ztplan").scan_manifest(
            self.raw,
            32,
            self.size - 40,
            _v2spec.ALIGN,
            _v2spec.MAX_RANK,
            _v2spec.MAX_NAME_BYTES,
            _v2spec.DTYPES,
            _v2spec.DIGESTS,
        )

    def time_scan_table(self, n_tensors):
        _kernels.load("ztplan").scan_table(
            bytes(self.raw),
            32,
            self.size - 40,
            _v2spec.ALIGN,
            _v2spec.MAX_RANK,
            _v2spec.MAX_NAME_BYTES,
            _v2spec.DTYPES,
            _v2spec.DIGESTS,
        )

    def time_load_manifest(self, n_tensors):
        with zt.V2Reader(self.path) as r:
            v2reader.load_manifest(r._mf, r.limits)


class V2AppendSuite:
    def setup(self):
        self.tmp = tempfile.mkdtemp()
        self.path = os.path.join(self.tmp, "a.zt")
        rng = np.random.default_rng(0)
        zt.save(
            self.path,
            {f"t{i:03d}": rng.standard_normal(1024, np.float32) for i in range(32)},
            generation=2,
            fsync=False,
        )
        self.small = np.arange(1024, dtype=np.float32)
        self.k = 0

    def teardown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_append_4k_no_fsync(self):
        self.k += 1
        zt.append(self.path, {f"extra{self.k}": self.small}, fsync=False)

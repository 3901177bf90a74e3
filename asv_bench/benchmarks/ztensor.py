"""asv: zTensor open, map, load, write, zstd; modest sizes (the machines have 2 cores)."""

import os
import shutil
import tempfile

import numpy as np

import tenfold.ztensor as zt
from tenfold.core.compression import zstd_compress, zstd_decompress_into


class OpenSuite:
    params = [[64, 1024]]
    param_names = ["n_tensors"]

    def setup(self, n_tensors):
        self.tmp = tempfile.mkdtemp()
        self.path = os.path.join(self.tmp, "m.zt")
        rng = np.random.default_rng(0)
        zt.save(
            self.path,
            {f"t{i}": rng.standard_normal(256, dtype=np.float32) for i in range(n_tensors)},
            fsync=False,
        )

    def teardown(self, n_tensors):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_open(self, n_tensors):
        zt.Reader(self.path).close()

    def time_open_and_map_all(self, n_tensors):
        with zt.Reader(self.path) as r:
            [r[n] for n in r]


class ReadWriteSuite:
    params = [["raw", "zstd"]]
    param_names = ["encoding"]

    def setup(self, encoding):
        self.tmp = tempfile.mkdtemp()
        self.path = os.path.join(self.tmp, "m.zt")
        rng = np.random.default_rng(1)
        self.tensors = {
            f"layer{i}": rng.standard_normal((512, 256), dtype=np.float32) for i in range(16)
        }  # 8 MiB
        zt.save(self.path, self.tensors, encoding=encoding, fsync=False)

    def teardown(self, encoding):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_load_copy(self, encoding):
        zt.load(self.path, copy=True)

    def time_load_views_and_touch(self, encoding):
        for a in zt.load(self.path).values():
            np.bitwise_or.reduce(a.reshape(-1).view(np.uint32))

    def time_save(self, encoding):
        zt.save(os.path.join(self.tmp, "w.zt"), self.tensors, encoding=encoding, fsync=False)

    def peakmem_load_views(self, encoding):
        zt.load(self.path)

    def track_file_ratio(self, encoding):
        return os.path.getsize(self.path) / sum(a.nbytes for a in self.tensors.values())

    track_file_ratio.unit = "stored/raw"


class ZstdSuite:
    def setup(self):
        rng = np.random.default_rng(2)
        x = rng.standard_normal(4 << 20, dtype=np.float32).view(np.uint32) >> 16
        self.raw = x.astype(np.uint16)  # bfloat16 bit patterns, 8 MiB
        self.frame = zstd_compress(self.raw, 3)
        self.out = np.empty(self.raw.nbytes, np.uint8)

    def time_decompress_into(self):
        zstd_decompress_into(self.frame, self.out)

    def time_compress(self):
        zstd_compress(self.raw, 3)

    def track_ratio(self):
        return self.raw.nbytes / len(self.frame)

"""OINF: bit-packing kernels, writing and opening models."""

import os
import tempfile

import numpy as np

from tenfold import _kernels, oinf


class BitpackSuite:
    params = [[1, 2, 4], ["compiled", "reference"]]
    param_names = ["bits", "impl"]

    def setup(self, bits, impl):
        self.k = _kernels.load("bitpack", impl)
        n = 1 << 20
        rng = np.random.default_rng(0)
        self.src = rng.integers(0, 256, n * bits // 8, dtype=np.uint8)
        self.out = np.empty(n, np.int8)
        self.lo, self.hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        self.vals = rng.integers(self.lo, self.hi, n, endpoint=True).astype(np.int8)
        self.packed = np.empty(n * bits // 8, np.uint8)
        self.bits = bits

    def time_unpack_int(self, bits, impl):
        self.k.unpack_int(self.src, bits, self.out)

    def time_pack_int(self, bits, impl):
        self.k.pack_int(self.vals, bits, self.lo, self.hi, self.packed)

    def track_unpack_gbps(self, bits, impl):
        import time

        t = time.perf_counter()
        self.k.unpack_int(self.src, bits, self.out)
        return self.out.size / max(time.perf_counter() - t, 1e-9) / 1e9

    track_unpack_gbps.unit = "GB/s"


class WriteSuite:
    params = [["f32", "bf16", "f8", "i4", "t2"]]
    param_names = ["dtype"]

    def setup(self, dtype):
        rng = np.random.default_rng(1)
        n = 1 << 18
        if dtype in ("i4", "t2"):
            lo = -1 if dtype == "t2" else -8
            hi = 1 if dtype == "t2" else 7
            self.data = rng.integers(lo, hi, n, endpoint=True).astype(np.int8)
        else:
            self.data = rng.standard_normal(n).astype(np.float32)
        self.dtype = dtype
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "w.oinf")

    def time_write(self, dtype):
        oinf.write(self.path, tensors={"w": oinf.Tensor(self.data, dtype)})

    def peakmem_write(self, dtype):
        oinf.write(self.path, tensors={"w": oinf.Tensor(self.data, dtype)})


class OpenSuite:
    params = [[100, 10_000]]
    param_names = ["n_tensors"]

    def setup(self, n):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "m.oinf")
        oinf.write(self.path, tensors={f"t{i:05d}": np.zeros((2, 3), np.float32) for i in range(n)})

    def time_open(self, n):
        oinf.open(self.path).close()

    def time_read_all(self, n):
        with oinf.open(self.path) as r:
            r.load()

"""asv suites for FOLD: the Reed-Solomon kernel and the reader/writer."""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

import tenfold.fold as fold
from tenfold import _kernels


class RSSuite:
    params = [[16, 32, 64]]
    param_names = ["nsym"]

    def setup(self, nsym):
        rng = np.random.default_rng(0)
        self.rs = _kernels.load("rs")
        self.nsym = nsym
        self.data = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
        k = 255 - nsym
        self.parity = np.empty(-(-self.data.size // k) * nsym, np.uint8)
        self.rs.encode_blocks(self.data, nsym, self.parity)
        small = self.data[: 64 * k]
        self.small_parity = self.parity[: 64 * nsym].copy()
        self.damaged = small.copy()
        for b in range(64):
            pos = rng.choice(k, size=nsym // 2, replace=False)
            self.damaged[b * k + pos] ^= 0x5A
        self.nerr = np.zeros(64, np.int32)

    def time_encode_1mib(self, nsym):
        self.rs.encode_blocks(self.data, nsym, self.parity)

    def time_correct_64_blocks_at_capacity(self, nsym):
        self.rs.decode_blocks(self.damaged.copy(), self.small_parity.copy(), nsym, self.nerr)

    def track_encode_mb_per_s(self, nsym):
        import time

        t = time.perf_counter()
        self.rs.encode_blocks(self.data, nsym, self.parity)
        return self.data.size / (time.perf_counter() - t) / 1e6

    track_encode_mb_per_s.unit = "MB/s"


class FoldFileSuite:
    params = [[None, "zstd"], [None, "rs(32)"]]
    param_names = ["compress", "ecc"]

    def setup(self, compress, ecc):
        self.tmp = tempfile.mkdtemp(prefix="tenfold-asv-fold-")
        rng = np.random.default_rng(1)
        self.data = np.repeat(rng.standard_normal(1 << 19).astype(np.float16), 4)  # 4 MiB
        self.path = os.path.join(self.tmp, "a.fold")
        self._write(compress, ecc)

    def teardown(self, compress, ecc):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _write(self, compress, ecc):
        with fold.Writer(self.path, compress=compress, ecc=ecc, fsync=False) as w:
            w.add_chunk("blob", "BLOB", self.data)

    def time_write(self, compress, ecc):
        self._write(compress, ecc)

    def time_read_verified(self, compress, ecc):
        with fold.Reader(self.path) as r:
            r.read("blob")

    def peakmem_read_verified(self, compress, ecc):
        with fold.Reader(self.path) as r:
            r.read("blob")

    def time_verify(self, compress, ecc):
        fold.verify(self.path)

    def track_file_ratio(self, compress, ecc):
        return os.path.getsize(self.path) / self.data.nbytes


class StoredWriteSuite:
    """Uncompressed write of one 32 MiB chunk (streamed from the caller's buffer), each call to
    a fresh path; with fsync (default durability) and without."""

    params = [[False, True]]
    param_names = ["fsync"]

    def setup(self, fsync):
        self.tmp = tempfile.mkdtemp(prefix="tenfold-asv-fold-w-")
        self.data = np.random.default_rng(2).integers(0, 256, 32 << 20, dtype=np.uint8)
        self.n = 0

    def teardown(self, fsync):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _write(self, fsync):
        self.n += 1
        path = os.path.join(self.tmp, f"w{self.n}.fold")
        with fold.Writer(path, compress=None, fsync=fsync) as w:
            w.add_chunk("blob", "BLOB", self.data)
        os.unlink(path)

    def time_write_stored(self, fsync):
        self._write(fsync)

    def peakmem_write_stored(self, fsync):
        self._write(fsync)

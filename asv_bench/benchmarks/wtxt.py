"""WTXT: write and read+verify throughput, framing kernels, text size ratio."""

import os
import tempfile

import numpy as np
import pybase64

from tenfold import _kernels, wtxt

META = dict(schema="weights/v1", gen=1, ts="2025-10-09T03:12:45Z", build="asv")


class WtxtSuite:
    params = [[1 << 20, 8 << 20], [1, 2]]
    param_names = ["nbytes", "workers"]

    def setup(self, nbytes, workers):
        self.a = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "a.wtxt")
        wtxt.write(self.path, {"x": self.a}, hmac_key=b"k", fsync=False, **META)

    def teardown(self, nbytes, workers):
        for f in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, f))
        os.rmdir(self.dir)

    def time_write(self, nbytes, workers):
        wtxt.write(self.path, {"x": self.a}, hmac_key=b"k", fsync=False, workers=workers, **META)

    def time_read_verify(self, nbytes, workers):
        wtxt.read(self.path, hmac_keys=[b"k"], workers=workers)

    def peakmem_read_verify(self, nbytes, workers):
        wtxt.read(self.path, hmac_keys=[b"k"], workers=workers)

    def track_text_ratio(self, nbytes, workers):
        return os.path.getsize(self.path) / self.a.nbytes


class WtxtRereadSuite:
    """``reader[name]`` after the verifying open: the second decode ``convert`` makes."""

    params = [[8 << 20]]
    param_names = ["nbytes"]

    def setup(self, nbytes):
        a = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
        self.dir = tempfile.mkdtemp()
        path = os.path.join(self.dir, "a.wtxt")
        wtxt.write(path, {"x": a}, fsync=False, **META)
        self.f = wtxt.open(path)

    def teardown(self, nbytes):
        self.f.close()
        for f in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, f))
        os.rmdir(self.dir)

    def time_reread(self, nbytes):
        self.f["x"]


class B64LinesSuite:
    params = [["compiled", "reference"]]
    param_names = ["impl"]

    def setup(self, impl):
        if impl == "compiled" and _kernels.pure_python():
            raise NotImplementedError
        self.k = _kernels.load("b64lines", impl)
        raw = np.random.default_rng(1).integers(0, 256, 32768, dtype=np.uint8)
        self.b64 = pybase64.b64encode(raw)
        self.out = np.empty(self.k.framed_size(len(self.b64)), np.uint8)
        self.k.frame_lines(self.b64, self.out)
        self.scratch = np.empty(575 * 76, np.uint8)
        self.block = np.empty(self.out.size + 256, np.uint8)
        self.head = b"ch ix=000000 off=000000000000 len=32768 sha256=" + b"0" * 64 + b"\n"

    def time_frame(self, impl):
        self.k.frame_lines(self.b64, self.out)

    def time_frame_block(self, impl):
        self.k.frame_block(self.head, self.b64, b"endch\n", self.block, 0)

    def time_unframe(self, impl):
        self.k.unframe_lines(self.out, 575, self.scratch)

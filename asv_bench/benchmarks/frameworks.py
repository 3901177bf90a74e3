"""asv: tenfold.torch against safetensors.torch on the same tensors (64 MiB, modest sizes).

Skipped (NotImplementedError in setup) where PyTorch or safetensors is not installed. Files
are written fresh in ``setup`` and read once there (warm page cache, as for the peer); each
sample is one call (``number = 1``) and asv keeps many samples (``repeat``) and reports their
median, so the two ``library`` values can be compared. asv cannot interleave the two
libraries: for a ratio measured in turns, see ``scripts/peers/frameworks.py``.
"""

import os
import shutil
import tempfile

import numpy as np

import tenfold


def _need(name):
    try:
        return __import__(name, fromlist=["_"])
    except ImportError:
        raise NotImplementedError(f"{name} is not installed") from None


class TorchLoadSuite:
    params = [["tenfold", "safetensors"]]
    param_names = ["library"]
    number = 1
    repeat = (21, 61, 30.0)

    def setup(self, library):
        self.torch = _need("torch")
        self.st = _need("safetensors.torch")
        import tenfold.torch

        self.tt = tenfold.torch
        self.tmp = tempfile.mkdtemp()
        rng = np.random.default_rng(0)
        tensors = {f"layer.{i:02d}.weight": rng.standard_normal((1024, 1024), dtype=np.float32)
                   for i in range(16)}  # fmt: skip
        small = {f"b.{i:04d}": rng.standard_normal((32, 32), dtype=np.float32)
                 for i in range(1024)}  # fmt: skip
        self.big = os.path.join(self.tmp, "m.zt" if library == "tenfold" else "m.safetensors")
        self.small = os.path.join(self.tmp, "s.zt" if library == "tenfold" else "s.safetensors")
        if library == "tenfold":
            tenfold.save(self.big, tensors, checksum=None, fsync=False)
            tenfold.save(self.small, small, checksum=None, fsync=False)
            self.load = self.tt.load_file
            self.open = lambda p: self.tt.safe_open(p, framework="pt")
        else:
            _need("safetensors.numpy").save_file(tensors, self.big)
            _need("safetensors.numpy").save_file(small, self.small)
            self.load = self.st.load_file
            self.open = lambda p: self.st.safe_open(p, framework="pt")
        for p in (self.big, self.small):  # page cache warm for both libraries
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass

    def teardown(self, library):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_load_file(self, library):
        self.load(self.big)

    def time_load_file_and_read(self, library):
        for t in self.load(self.big).values():
            float(t.sum())

    def time_get_tensor_1024_small(self, library):
        with self.open(self.small) as f:
            for k in f.keys():
                f.get_tensor(k)

    def time_get_slice_every_8th_row(self, library):
        with self.open(self.big) as f:
            f.get_slice("layer.00.weight")[::8].clone()


class ShardedSuite:
    def setup(self):
        self.tmp = tempfile.mkdtemp()
        rng = np.random.default_rng(0)
        self.tensors = {f"l{i:03d}": rng.standard_normal(16384, dtype=np.float32)
                        for i in range(128)}  # fmt: skip
        self.path = os.path.join(self.tmp, "m.zt")
        tenfold.save(self.path, self.tensors, max_shard_size="1MB", fsync=False)

    def teardown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_save_sharded(self):
        tenfold.save(os.path.join(self.tmp, "w.zt"), self.tensors, max_shard_size="1MB",
                     fsync=False)  # fmt: skip

    def time_open_index_and_read_all(self):
        with tenfold.open(self.path + ".index.json") as r:
            for k in r:
                r[k]


class TorchSaveSuite:
    """``tenfold.torch.save_file`` (``.zt``, CRC-32C per tensor) against
    ``safetensors.torch.save_file`` on 64 MiB of bf16/float32 tensors, each writing a new file;
    ``durable``: tenfold's default (fsync, rename, directory fsync) against safetensors followed
    by ``os.fsync`` of the file. For the ratio measured in turns: ``scripts/peers/torchsave.py``."""

    params = [["tenfold", "safetensors"], [False, True]]
    param_names = ["library", "durable"]
    number = 1
    repeat = (11, 31, 30.0)

    def setup(self, library, durable):
        torch = _need("torch")
        st = _need("safetensors.torch")
        import tenfold.torch

        gen = torch.Generator().manual_seed(0)
        self.tensors = {
            f"l{i:02d}": torch.randn((256, 2048), generator=gen,
                                     dtype=torch.float32 if i % 3 == 0 else torch.bfloat16)
            for i in range(48)
        }  # fmt: skip
        self.tmp = tempfile.mkdtemp()
        if library == "tenfold":
            self.path = os.path.join(self.tmp, "m.zt")
            self.save = lambda p: tenfold.torch.save_file(self.tensors, p, fsync=durable)
        else:
            self.path = os.path.join(self.tmp, "m.safetensors")

            def save(p):
                st.save_file(self.tensors, p)
                if durable:
                    fd = os.open(p, os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)

            self.save = save
        self.save(self.path)  # imports and first-call costs outside the samples

    def teardown(self, library, durable):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_save_file_new(self, library, durable):
        os.unlink(self.path)  # a new file each sample, as in the peer script (unlink is cheap)
        self.save(self.path)

"""asv: `tenfold convert` between formats, time and peak memory; 64 MiB models (2-core machines).

The 2 GiB comparison with `cp` lives in scripts/peers/convert.py (bench_peers.py).
"""

import os
import shutil
import tempfile

import numpy as np

from tenfold.convert import convert, write_any


class ConvertSuite:
    params = [[".safetensors", ".zt", ".oinf", ".fold", ".npz"], [".zt", ".safetensors"]]
    param_names = ["source", "target"]

    def setup(self, source, target):
        self.tmp = tempfile.mkdtemp()
        rng = np.random.default_rng(0)
        block = rng.standard_normal((1024, 2048), dtype=np.float32)  # 8 MiB
        self.src = os.path.join(self.tmp, "m" + source)
        write_any(self.src, {f"model.layers.{i}.weight": block for i in range(8)}, fsync=False)
        self.dst = os.path.join(self.tmp, "out" + target)

    def teardown(self, source, target):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_convert(self, source, target):
        convert(self.src, self.dst, fsync=False)

    def peakmem_convert(self, source, target):
        convert(self.src, self.dst, fsync=False)

    def track_output_bytes(self, source, target):
        convert(self.src, self.dst, fsync=False)
        return os.path.getsize(self.dst)

"""asv suite for TARIDX exports to other loaders: DALI wds2idx files and a wids shard list.

The issue's target: both exports of a 200,000-member fold (100,000 samples x 2) in under 0.5 s
from the page cache. Payloads are small (1-100 bytes) to keep the shard near 200 MB: the export
reads member headers only, so the payload size does not change what is measured.
"""

import shutil
import tarfile
import tempfile
from pathlib import Path

import numpy as np

import tenfold.taridx as tx
from tenfold.taridx import export as ex


def _fold(root: Path, n_samples: int) -> None:
    rng = np.random.default_rng(0)
    blob = rng.bytes(128)
    with open(root / "f_0000.tar", "wb") as f:
        for i in range(n_samples):
            for ext in ("jpg", "cls"):
                info = tarfile.TarInfo(f"s{i:07d}.{ext}")
                info.size, info.mtime = int(rng.integers(1, 100)), 0
                f.write(info.tobuf(tarfile.USTAR_FORMAT))
                f.write(blob[: info.size] + b"\0" * (-info.size % 512))
        f.write(b"\0" * 1024)


class ExportSuite:
    params = [2000, 100_000]
    param_names = ["samples"]
    timeout = 300

    def setup(self, n):
        self.root = Path(tempfile.mkdtemp(prefix="asv-taridx-export-"))
        _fold(self.root, n)
        tx.build(self.root, "f", show_progress=False)
        (self.root / "f_0000.tar").read_bytes()  # page cache

    def teardown(self, n):
        shutil.rmtree(self.root, ignore_errors=True)

    def time_export_dali_and_wids(self, n):
        ex.export(self.root, "f", dali=self.root, wids=self.root / "f.wids.json", fsync=False)

    def time_export_dali(self, n):
        tx.export_dali(self.root, "f", fsync=False)

    def time_export_wids(self, n):
        tx.export_wids(self.root, "f", fsync=False)

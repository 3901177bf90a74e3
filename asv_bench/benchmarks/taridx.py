"""asv suites for TARIDX: building, opening, lookups and sample reads (modest sizes)."""

import io
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

import tenfold.taridx as tx


def _fold(root: Path, n_samples: int) -> None:
    rng = np.random.default_rng(0)
    blob = rng.bytes(2048)
    with open(root / "f_0000.tar", "wb") as f:
        for i in range(n_samples):
            for ext in ("jpg", "cls"):
                info = tarfile.TarInfo(f"s{i:07d}.{ext}")
                info.size, info.mtime = int(rng.integers(100, 1500)), 0
                f.write(info.tobuf(tarfile.USTAR_FORMAT))
                f.write(blob[: info.size] + b"\0" * (-info.size % 512))
        f.write(b"\0" * 1024)


class TaridxSuite:
    params = [1000, 5000]
    param_names = ["samples"]

    def setup(self, n):
        self.root = Path(tempfile.mkdtemp(prefix="asv-taridx-"))
        _fold(self.root, n)
        self.path = tx.build(self.root, "f", show_progress=False)
        self.ds = tx.Dataset(self.root, "f")
        rng = np.random.default_rng(1)
        self.order = rng.integers(0, n, 2000).tolist()
        self.stems = [f"s{i:07d}" for i in self.order]
        self.ds.index.lookup(self.stems[:1])

    def teardown(self, n):
        self.ds.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def time_build(self, n):
        tx.build(self.root, "f", out=self.root / "b.taridx", show_progress=False)

    def time_build_no_fsync(self, n):
        tx.build(self.root, "f", out=self.root / "c.taridx", show_progress=False, fsync=False)

    def time_open(self, n):
        tx.Index.open(self.path).close()

    def time_first_lookup(self, n):
        # once per opened index: row checks, grouping into samples, hash table
        with tx.Index.open(self.path) as idx:
            idx.lookup(self.stems[:1])

    def time_lookup_2000(self, n):
        self.ds.index.lookup(self.stems)

    def time_read_2000_samples(self, n):
        ds = self.ds
        for i in self.order:
            ds[i]

    def peakmem_build(self, n):
        tx.build(self.root, "f", out=self.root / "b.taridx", show_progress=False)

    def track_index_bytes_per_member(self, n):
        return self.path.stat().st_size / (2 * n)


class TaridxBuild100kSuite:
    """The build of one shard of 100,000 members (50,000 samples x {jpg, cls}), no fsync: the
    size of the figure issue 27 names (43-48 ms, then 62-66 ms once the builder checked each
    member's header and name). Timed in process CPU time (all threads), which waiting for a
    core on a shared machine does not inflate as it does wall time. The shard is written once
    per run (``setup_cache``)."""

    timer = time.process_time
    timeout = 600

    def setup_cache(self):
        root = Path.cwd() / "taridx-100k"
        root.mkdir()
        _fold(root, 50_000)
        return str(root)

    def time_build_no_fsync_cpu(self, root):
        out = Path(root) / "c.taridx"
        tx.build(Path(root), "f", out=out, show_progress=False, fsync=False)


def _pax_headers():
    """2,000 pax members' tar bytes and the tarscan kernel."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(2000):
            info = tarfile.TarInfo(f"{'d' * 120}/m{i}.bin")
            info.size = 100
            tf.addfile(info, io.BytesIO(b"x" * 100))
    from tenfold import _kernels

    return np.frombuffer(bio.getvalue(), np.uint8), _kernels.load("tarscan")


class TarscanSuite:
    def setup(self):
        self.buf, self.k = _pax_headers()
        cap = self.buf.size // 512
        self.outs = [np.empty(cap, np.int64) for _ in range(6)] + [np.empty(cap, np.uint8)]

    def time_scan_pax(self):
        self.k.scan(self.buf, *self.outs)


class TarwalkSuite:
    """The build's walk over the same headers (a suite of its own: allocating the walk's
    outputs in TarscanSuite's setup made time_scan_pax bimodal across processes, 184 us or
    306-321 us, and the regression gate, which runs it, flagged one build against itself)."""

    def setup(self):
        self.buf, self.k = _pax_headers()
        cap = self.buf.size // 512
        self.walk_outs = [np.empty(cap, np.int64) for _ in range(6)]
        self.walk_outs += [np.empty(cap, np.uint64) for _ in range(2)]
        self.walk_outs += [np.empty(cap, np.uint8) for _ in range(2)]

    def time_walk_pax(self):
        """The build's walk: the same headers, names split and hashed in the same pass."""
        self.k.walk(self.buf, 0, 1 << 62, *self.walk_outs)


class TaridxHeaderCheckSuite:
    """Random sample reads with the header check on and off, one at a time and in batches of
    256 (``__getitems__``), payloads untouched (the check's worst case)."""

    params = [[True, False]]
    param_names = ["verify_headers"]

    def setup(self, verify):
        self.root = Path(tempfile.mkdtemp(prefix="asv-taridx-check-"))
        _fold(self.root, 5000)
        tx.build(self.root, "f", show_progress=False)
        self.ds = tx.Dataset(self.root, "f", verify_headers=verify)
        self.ds.__getitems__(list(range(5000)))
        self.order = np.random.default_rng(2).integers(0, 5000, 4096).tolist()
        self.batches = [self.order[k : k + 256] for k in range(0, 4096, 256)]

    def teardown(self, verify):
        self.ds.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def time_getitem_4096(self, verify):
        ds = self.ds
        for i in self.order:
            ds[i]

    def time_getitems_16x256(self, verify):
        ds = self.ds
        for b in self.batches:
            ds.__getitems__(b)

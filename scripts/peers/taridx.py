"""TARIDX vs peers, same data, same run.

* build: index of one generated tar (100,000 samples x {jpg, cls}, payloads 700-1500 bytes,
  ~368 MB, written to /tmp at run time and removed after) vs ``tarfile`` listing
  (``getmembers``) and webdataset's ``tar_file_iterator`` (webdataset 1.0.2 ships no ``wids``;
  its iterator is the library's way through a shard and reads the payloads);
* open: a synthetic 10,000,000-row index (5M samples x 2) vs reading its rows into memory
  (``np.fromfile``);
* lookup: 1,000,000 random stems (hashing included) vs Python ``xxhash`` + ``dict``;
* read: random samples through ``Dataset`` from the page cache vs ``seek`` + ``read`` per member;
  the same with the header check off (``verify_headers=False``), and both again reading the
  first byte of every payload (as any decoder does), runs of the two settings interleaved.

``--quick`` uses 2,000 samples and a 200,000-row index.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
from _timing import best, row

import tenfold.taridx as tx
from tenfold.taridx._spec import ROW_DT
from tenfold.taridx.reader import hash_stems


def make_tar(path: Path, n_samples: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(700, 1500, size=(n_samples, 2))
    blob = rng.bytes(2048)
    with open(path, "wb") as f:
        for i in range(n_samples):
            for j, ext in enumerate(("jpg", "cls")):
                info = tarfile.TarInfo(f"sample{i:08d}.{ext}")
                info.size, info.mtime = int(sizes[i, j]), 1_700_000_000
                f.write(info.tobuf(tarfile.USTAR_FORMAT))
                f.write(blob[: info.size])
                f.write(b"\0" * (-info.size % 512))
        f.write(b"\0" * 1024)


def make_index(path: Path, n_samples: int) -> list[str]:
    stems = [f"s{i:09d}" for i in range(n_samples)]
    kh = hash_stems(stems)
    rows = np.zeros(2 * n_samples, ROW_DT)
    rows["keyhash"] = np.repeat(kh, 2)
    rows["extid"] = np.tile([0, 1], n_samples)
    rows["offset"] = np.arange(2 * n_samples, dtype=np.uint64) * 2048
    rows["size"] = 1000
    tx.write_rows(path, rows, ["jpg", "cls"], n_stems=n_samples, flags=1)
    return stems


def run(quick: bool) -> list[dict]:
    n_samples = 2_000 if quick else 100_000
    n_index = 100_000 if quick else 5_000_000
    n_lookup = 20_000 if quick else 1_000_000
    n_reads = 20_000 if quick else 200_000
    out = []
    tmp = Path(tempfile.mkdtemp(prefix="tenfold-taridx-bench-"))
    try:
        shard = tmp / "bench_0000.tar"
        make_tar(shard, n_samples)
        mb = shard.stat().st_size / 1e6
        shard.read_bytes()  # warm the page cache
        t_build = best(lambda: tx.build(tmp, "bench", show_progress=False), repeat=7)
        t_nosync = best(lambda: tx.build(tmp, "bench", show_progress=False, fsync=False), repeat=7)
        t_tarfile = best(lambda: tarfile.open(shard).getmembers(), repeat=2 if quick else 1)
        out.append(
            row(
                f"build index, {2 * n_samples} members, {mb:.0f} MB (warm)",
                t_build,
                "tarfile getmembers",
                t_tarfile,
                target="<= 0.2 s, >= 25x tarfile",
                note="durable: fsync of the index file and of its directory",
            )
        )
        out.append(
            row(
                "build index, fsync=False (atomic, not durable)",
                t_nosync,
                "tarfile getmembers",
                t_tarfile,
                target="<= 0.2 s",
                note=f"the two fsyncs cost {1000 * (t_build - t_nosync):.0f} ms here",
            )
        )
        try:
            from webdataset.tariterators import tar_file_iterator

            def wds() -> None:
                with open(shard, "rb") as f:
                    for _ in tar_file_iterator(f):
                        pass

            t_wds = best(wds, repeat=2 if quick else 1)
            out.append(
                row(
                    "build index vs webdataset",
                    t_build,
                    "webdataset tar_file_iterator",
                    t_wds,
                    target=">= 4x wids",
                    note="wids is not in webdataset 1.0.2; its tar iterator instead",
                )
            )
        except ImportError:
            out.append(row("build index vs webdataset", t_build, note="webdataset not installed"))

        try:
            import contextlib
            import io

            from ratarmountcore.mountsource.formats.tar import SQLiteIndexedTar

            sqlite = tmp / "ratarmount.sqlite"

            def ratarmount() -> None:
                if sqlite.exists():
                    sqlite.unlink()
                with (
                    contextlib.redirect_stdout(io.StringIO()),
                    contextlib.redirect_stderr(io.StringIO()),
                ):
                    src = SQLiteIndexedTar(str(shard), writeIndex=True, indexFilePath=str(sqlite))
                    with contextlib.suppress(Exception):
                        src.__exit__(None, None, None)

            t_rat = best(ratarmount, repeat=2 if quick else 1)
            out.append(
                row(
                    "build index vs ratarmount",
                    t_build,
                    "ratarmountcore SQLiteIndexedTar",
                    t_rat,
                    target=">= 25x ratarmount",
                    note="its SQLite index written to a new file",
                )
            )
        except ImportError:
            out.append(
                row("build index vs ratarmount", t_build, note="ratarmountcore not installed")
            )

        idx_path = tmp / "big.taridx"
        stems = make_index(idx_path, n_index)
        idx_path.read_bytes()

        def open_close() -> None:
            tx.Index.open(idx_path).close()

        t_open = best(open_close, repeat=7)
        t_read = best(lambda: np.fromfile(idx_path, np.uint8), repeat=3)
        out.append(
            row(
                f"open {2 * n_index:,}-row index",
                t_open,
                "np.fromfile (read rows)",
                t_read,
                target="<= 10 ms",
            )
        )

        rng = np.random.default_rng(1)
        picks = rng.integers(0, n_index, n_lookup)
        query = [stems[i] for i in picks.tolist()]

        def first_lookup() -> None:
            with tx.Index.open(idx_path) as fresh:
                fresh.lookup(query[:1])

        # once per opened Index: row checks, grouping rows into samples, the hash table
        t_first = best(first_lookup, repeat=3)
        idx = tx.Index.open(idx_path)
        t0 = time.perf_counter()
        _ = idx.samples
        t_group = time.perf_counter() - t0
        t0 = time.perf_counter()
        idx.samples.table()
        t_table = time.perf_counter() - t0
        got = idx.lookup(query)
        assert (got == picks).all()
        t_lookup = best(lambda: idx.lookup(query), repeat=5)
        import xxhash

        table = {
            xxhash.xxh64_intdigest(s.encode()): i
            for i, s in enumerate(stems[: max(n_index // 5, 1)])
        }
        sub = query

        def py_lookup() -> None:
            h = xxhash.xxh64_intdigest
            for s in sub:
                table.get(h(s.encode()), -1)

        t_py = best(py_lookup, repeat=3)
        out.append(
            row(
                f"{n_lookup:,} stem lookups (hashing included)",
                t_lookup,
                "xxhash + dict",
                t_py,
                target="<= 0.3 s",
                note="after the first lookup (next row)",
            )
        )
        out.append(
            row(
                f"first lookup on a fresh {n_index:,}-sample index",
                t_first,
                note=f"once per Index: row checks + grouping {t_group:.2f} s, "
                f"hash table {t_table:.2f} s (single runs)",
            )
        )
        idx.close()

        order = rng.integers(0, n_samples, n_reads).tolist()
        sets: dict[bool, tx.Dataset] = {}
        for vh in (True, False):
            sets[vh] = tx.Dataset(tmp, "bench", verify_headers=vh)
            sets[vh][0]

        def read_ds(ds: tx.Dataset) -> None:
            for i in order:
                ds[i]

        def read_touch(ds: tx.Dataset) -> None:
            for i in order:
                for v in ds[i].values():
                    v[0]

        t_ds = {True: float("inf"), False: float("inf")}
        t_touch = dict(t_ds)
        for _ in range(5):  # interleaved: machine load drifts between runs
            for vh, ds in sets.items():
                t_ds[vh] = min(t_ds[vh], best(lambda ds=ds: read_ds(ds), repeat=2))
                t_touch[vh] = min(t_touch[vh], best(lambda ds=ds: read_touch(ds), repeat=2))
        rows_by_sample = sets[True].index.rows

        def read_seek() -> None:
            with open(shard, "rb") as f:
                for i in order:
                    for r in rows_by_sample[2 * i : 2 * i + 2].tolist():
                        f.seek(r[1] + 512)
                        f.read(r[2])

        t_seek = best(read_seek, repeat=3)
        cost = 1 - t_ds[False] / t_ds[True]
        cost_touch = 1 - t_touch[False] / t_touch[True]
        out.append(
            row(
                "random sample reads (page cache)",
                n_reads / t_ds[True],
                "seek + read",
                n_reads / t_seek,
                unit="samples/s",
                higher_is_better=True,
                target=">= 200,000 /s",
                note="header check on (default)",
            )
        )
        out.append(
            row(
                "random sample reads, header check on vs off",
                n_reads / t_ds[True],
                "verify_headers=False",
                n_reads / t_ds[False],
                unit="samples/s",
                higher_is_better=True,
                target="check < 10%",
                note=f"check costs {100 * cost:.0f}%: these reads touch no payload, "
                "so the header lines are the only shard memory they touch",
            )
        )
        out.append(
            row(
                "random reads + 1st byte of each payload, check on vs off",
                n_reads / t_touch[True],
                "verify_headers=False",
                n_reads / t_touch[False],
                unit="samples/s",
                higher_is_better=True,
                target="check < 10%",
                note=f"check costs {100 * cost_touch:.0f}% (header in the payload's page)",
            )
        )
        for ds in sets.values():
            ds.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    import sys

    for r in run("--quick" in sys.argv):
        print(r)
    del io, os

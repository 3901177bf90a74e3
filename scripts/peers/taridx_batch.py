"""TARIDX batched reads (issue 14 item 2) and the cost of the header check (issue 15).

* header check: random samples of one ~368 MB shard from the page cache (the fold of
  ``peers/taridx.py``), ``verify_headers`` on vs off, runs interleaved, for ``ds[i]`` one at a
  time and ``ds.__getitems__`` in batches of 256, each with and without touching the first
  byte of every payload (what any decoder does). Wall-clock best of N, and process CPU time
  (best of N), since the 2-core machine is shared and wall time includes waiting for a core.
* remote: the same kind of fold (4 shards) in a local S3 server (moto's ``ThreadedMotoServer``
  on 127.0.0.1, read through s3fs): ``ds[i]`` per sample (one request each) vs random
  batches of 256 through ``__getitems__`` (one ``cat_ranges`` per batch) vs batches of a
  locality-blocked epoch (``EpochSampler(block=64)``).

``--quick`` uses 2,000 local samples and 2,000 remote samples.
"""

from __future__ import annotations

import gc
import logging
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _timing import row

import tenfold.taridx as tx


def _make_tar(path: Path, n_samples: int, prefix: str, seed: int = 0) -> None:
    """``n_samples`` x {jpg, cls}, payloads 700-1500 bytes, ustar (as ``peers/taridx.py``)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(700, 1500, size=(n_samples, 2))
    blob = rng.bytes(2048)
    with open(path, "wb") as f:
        for i in range(n_samples):
            for j, ext in enumerate(("jpg", "cls")):
                info = tarfile.TarInfo(f"{prefix}{i:08d}.{ext}")
                info.size, info.mtime = int(sizes[i, j]), 1_700_000_000
                f.write(info.tobuf(tarfile.USTAR_FORMAT))
                f.write(blob[: info.size])
                f.write(b"\0" * (-info.size % 512))
        f.write(b"\0" * 1024)


def _best2(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(best wall seconds, best process CPU seconds) of ``repeat`` runs."""
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        gc.collect()
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - w)
        cpu = min(cpu, time.process_time() - c)
    return wall, cpu


def header_check_rows(root: Path, n_samples: int, n_reads: int) -> list[dict]:
    """verify_headers on vs off, per-sample and batched, payload touched or not."""
    _make_tar(root / "bench_0000.tar", n_samples, "sample")
    tx.build(root, "bench", show_progress=False)
    (root / "bench_0000.tar").read_bytes()  # warm the page cache
    order = np.random.default_rng(0).integers(0, n_samples, n_reads).tolist()
    batches = [order[k : k + 256] for k in range(0, len(order), 256)]
    sets = {vh: tx.Dataset(root, "bench", verify_headers=vh) for vh in (True, False)}
    for ds in sets.values():
        ds.__getitems__(list(range(n_samples)))  # map every page once, as a long run has

    def item(ds: tx.Dataset, touch: bool) -> None:
        if touch:
            for i in order:
                for v in ds[i].values():
                    v[0]
        else:
            for i in order:
                ds[i]

    def batch(ds: tx.Dataset, touch: bool) -> None:
        if touch:
            for b in batches:
                for s in ds.__getitems__(b):
                    for v in s.values():
                        v[0]
        else:
            for b in batches:
                ds.__getitems__(b)

    cases = [
        ("ds[i]", item, False),
        ("ds[i] + 1st payload byte", item, True),
        ("__getitems__(256)", batch, False),
        ("__getitems__(256) + 1st payload byte", batch, True),
    ]
    res: dict[tuple[str, bool], tuple[float, float]] = {}
    for _ in range(4):  # interleaved: the machine's load drifts between runs
        for name, fn, touch in cases:
            for vh, ds in sets.items():
                w, c = _best2(lambda ds=ds, fn=fn, touch=touch: fn(ds, touch), repeat=2)
                old = res.get((name, vh), (float("inf"), float("inf")))
                res[name, vh] = (min(old[0], w), min(old[1], c))
    out = []
    for name, _fn, _touch in cases:
        (w_on, c_on), (w_off, c_off) = res[name, True], res[name, False]
        out.append(
            row(
                f"random reads, {name}: header check on vs off (wall)",
                n_reads / w_on,
                "verify_headers=False",
                n_reads / w_off,
                unit="samples/s",
                higher_is_better=True,
                target="check < 10%",
                note=f"check costs {100 * (1 - w_off / w_on):.0f}% wall, "
                f"{100 * (1 - c_off / c_on):.0f}% CPU "
                f"({n_reads / c_on:,.0f} vs {n_reads / c_off:,.0f} samples per CPU-second)",
            )
        )
    for ds in sets.values():
        ds.close()
    return out


def remote_rows(root: Path, n_samples: int, n_per_sample: int) -> list[dict]:
    """A local S3 server: per-sample requests vs one cat_ranges per batch of 256."""
    try:
        import s3fs
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        print(f"remote batch benchmark skipped: {exc}")
        return []
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's request log
    per_shard = n_samples // 4
    for k in range(4):
        _make_tar(root / f"r_{k:04d}.tar", per_shard, f"s{k}_", seed=k)
    tx.build(root, "r", show_progress=False)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        opts = {"key": "bench", "secret": "bench", "endpoint_url": f"http://{host}:{port}"}
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
        fs.mkdir("bench")
        for f in sorted(root.glob("r_*.tar")):
            fs.put_file(str(f), f"bench/{f.name}")
        fs.put_file(str(root / "r.taridx"), "bench/r.taridx")
        ds = tx.Dataset("s3://bench", "r", storage_options=opts)
        n = len(ds)
        rng = np.random.default_rng(1)
        ds.__getitems__(list(range(0, n, max(1, n // 64))))  # shards looked up, client warm
        one = rng.integers(0, n, n_per_sample).tolist()
        t_one = _best2(lambda: [ds[i] for i in one], repeat=2)[0]
        rand = rng.permutation(n).tolist()[: 16 * 256]  # 16 batches: ~1 request per sample
        n_rand = len(rand)

        def batches(d: tx.Dataset, order: list[int]) -> None:
            for k in range(0, len(order), 256):
                d.__getitems__(order[k : k + 256])

        t_rand = _best2(lambda: batches(ds, rand), repeat=2)[0]
        wide = tx.Dataset("s3://bench", "r", storage_options=opts, max_gap=1 << 20)
        wide.__getitems__(list(range(0, n, max(1, n // 64))))
        t_wide = _best2(lambda: batches(wide, rand), repeat=2)[0]
        wide.close()
        blocked = list(tx.EpochSampler(n, seed=2, block=64))
        t_block = _best2(lambda: batches(ds, blocked), repeat=2)[0]
        ds.close()
        shard_mb = sum(f.stat().st_size for f in root.glob("r_*.tar")) / 4e6
    finally:
        server.stop()
    base = n_per_sample / t_one
    return [
        row(
            "remote random batches of 256 (local S3 server, moto + s3fs)",
            n_rand / t_rand,
            "ds[i], one request per sample",
            base,
            unit="samples/s",
            higher_is_better=True,
            target=">= 5x",
            note=f"{n:,} samples in 4 shards of {shard_mb:.0f} MB, 16 batches, default max_gap "
            "(64 KiB): about one range per sample, fetched concurrently by one cat_ranges",
        ),
        row(
            "remote random batches of 256, max_gap=1 MiB",
            n_rand / t_wide,
            "ds[i], one request per sample",
            base,
            unit="samples/s",
            higher_is_better=True,
            note="ranges up to 1 MiB apart merged: here about one range per shard per batch, "
            "i.e. most of each shard read for 64 samples (bytes traded for requests)",
        ),
        row(
            "remote batches of 256, locality-blocked epoch (block=64)",
            n / t_block,
            "ds[i], one request per sample",
            base,
            unit="samples/s",
            higher_is_better=True,
            note="a whole epoch; runs of 64 neighbouring samples, a few ranges per batch",
        ),
    ]


def run(quick: bool) -> list[dict]:
    tmp = Path(tempfile.mkdtemp(prefix="tenfold-taridx-batch-"))
    try:
        local = tmp / "local"
        local.mkdir()
        out = header_check_rows(local, 2_000 if quick else 100_000, 20_000 if quick else 200_000)
        shutil.rmtree(local, ignore_errors=True)
        remote = tmp / "remote"
        remote.mkdir()
        out += remote_rows(remote, 2_000 if quick else 20_000, 200 if quick else 1_000)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    import sys

    for r in run("--quick" in sys.argv):
        print(r)

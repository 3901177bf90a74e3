"""How the TARIDX index build scales with cores, on one large split (issue 28).

Writes a split of ``--members`` tar members (default 2,000,000: half as many samples x {jpg,
cls}) in ``--shards`` ustar shards into a temporary directory, then times ``tenfold.taridx.build``
with 1, 2, 4, 8 and 16 threads (``TENFOLD_THREADS``; counts above the cores this process may use
are left out, and that count itself is added), the thread counts interleaved in each round, and
prints a table of best and median times with the speedup over one thread and its share of the
ideal (the goal: N threads at least 0.6 N times faster than one). The index is written with
``fsync=False``; each build's index must be byte-identical to the first one.

Needs only tenfold and NumPy; no network. Each member is one header block and one payload block
(payload sizes 1-512 bytes), so the default split is about 2 GB on disk and in the page cache.

    python scripts/taridx_scaling.py --out scaling.json
    python scripts/taridx_scaling.py --members 200000 --rounds 3 --threads 1,2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tenfold
import tenfold.taridx as tx
from tenfold.core import parallel

EXTS = (b"jpg", b"cls")


def _octal(values: np.ndarray, width: int) -> np.ndarray:
    """``values`` as ``width`` ASCII octal digits each (n x width uint8)."""
    shifts = 3 * np.arange(width - 1, -1, -1, dtype=np.uint64)
    return ((values.astype(np.uint64)[:, None] >> shifts) & 7).astype(np.uint8) + 48


def shard_image(first_sample: int, n_members: int, rng: np.random.Generator) -> np.ndarray:
    """One ustar shard: ``n_members`` members ``s<9 digits>.<jpg|cls>`` (two per sample from
    ``first_sample`` on), each a header block and a payload block, then two zero blocks."""
    img = np.zeros(n_members * 1024 + 1024, np.uint8)
    h = img[: n_members * 1024].reshape(n_members, 1024)[:, :512]
    sample = first_sample + np.arange(n_members, dtype=np.int64) // 2
    h[:, 0] = ord("s")
    h[:, 1:10] = (sample[:, None] // 10 ** np.arange(8, -1, -1)) % 10 + 48
    h[:, 10] = ord(".")
    h[:, 11:14] = np.frombuffer(b"".join(EXTS), np.uint8).reshape(2, 3)[np.arange(n_members) % 2]
    h[:, 100:107] = np.frombuffer(b"0000644", np.uint8)  # mode
    h[:, 108:115] = np.frombuffer(b"0000000", np.uint8)  # uid
    h[:, 116:123] = np.frombuffer(b"0000000", np.uint8)  # gid
    h[:, 124:135] = _octal(rng.integers(1, 513, n_members), 11)  # size
    h[:, 136:147] = np.frombuffer(b"%011o" % 1_700_000_000, np.uint8)  # mtime
    h[:, 156] = ord("0")
    h[:, 257:263] = np.frombuffer(b"ustar\0", np.uint8)
    h[:, 263:265] = np.frombuffer(b"00", np.uint8)
    h[:, 148:156] = 32  # the checksum counts its own field as spaces
    chk = h.sum(axis=1, dtype=np.int64)
    h[:, 148:154] = _octal(chk, 6)
    h[:, 154] = 0
    h[:, 155] = 32
    return img


def write_split(root: Path, members: int, shards: int, seed: int = 0) -> int:
    """Write ``members`` members (rounded to whole samples per shard) as ``bench_<k>.tar``;
    the bytes written."""
    rng = np.random.default_rng(seed)
    per = [members // shards + (1 if k < members % shards else 0) for k in range(shards)]
    per = [p + (p % 2) for p in per]  # whole samples
    total, sample = 0, 0
    for k, m in enumerate(per):
        img = shard_image(sample, m, rng)
        with open(root / f"bench_{k:04d}.tar", "wb") as f:
            f.write(img.data)
        total += img.size
        sample += m // 2
    return total


def thread_counts(wanted: list[int], cores: int) -> list[int]:
    """``wanted`` capped by ``cores`` (and ``cores`` itself when it is not listed)."""
    got = sorted(
        {t for t in wanted if 1 <= t <= cores} | ({cores} if cores <= max(wanted) else set())
    )
    return got or [1]


def _build(root: Path, out: Path, threads: int) -> float:
    os.environ[parallel.THREADS_ENV] = str(threads)
    t0 = time.perf_counter()
    tx.build(root, "bench", out=out, show_progress=False, fsync=False)
    return time.perf_counter() - t0


def run(args: argparse.Namespace) -> dict:
    saved_env = os.environ.get(parallel.THREADS_ENV)
    os.environ.pop(parallel.THREADS_ENV, None)
    cores = parallel.threads()
    counts = thread_counts([int(t) for t in args.threads.split(",")], cores)
    est = args.members * 1024 + (1 << 20)
    tmp_parent = args.tmp or tempfile.gettempdir()
    free = shutil.disk_usage(tmp_parent).free
    if free < 1.2 * est:
        raise SystemExit(f"needs about {est / 1e9:.1f} GB in {tmp_parent}, {free / 1e9:.1f} free")
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    res: dict = {
        "what": "tenfold.taridx.build of one split, fsync=False, page cache warm",
        "members": args.members,
        "shards": args.shards,
        "cores": cores,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "tenfold": getattr(tenfold, "__version__", "?"),
        "rounds": 0,
        "times": {str(t): [] for t in counts},
    }
    try:
        with tempfile.TemporaryDirectory(prefix="tenfold-taridx-scaling-", dir=tmp_parent) as d:
            root = Path(d)
            t0 = time.perf_counter()
            res["bytes"] = write_split(root, args.members, args.shards)
            res["write_s"] = round(time.perf_counter() - t0, 3)
            out = root / "bench.taridx"
            _build(root, out, counts[-1])  # warm-up (maps every page once)
            digest = hashlib.sha256(out.read_bytes()).hexdigest()
            for r in range(args.rounds):
                order = counts if r % 2 == 0 else counts[::-1]
                for t in order:
                    res["times"][str(t)].append(_build(root, out, t))
                    if hashlib.sha256(out.read_bytes()).hexdigest() != digest:
                        raise SystemExit(f"the index built with {t} threads differs")
                res["rounds"] = r + 1
                if time.perf_counter() - t_start > args.budget:
                    break
    finally:
        if saved_env is None:
            os.environ.pop(parallel.THREADS_ENV, None)
        else:
            os.environ[parallel.THREADS_ENV] = saved_env
    res["load_before"] = [round(x, 2) for x in load_before]
    res["load_after"] = [round(x, 2) for x in os.getloadavg()]
    res["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    one = min(res["times"][str(counts[0])])
    res["table"] = [
        {
            "threads": t,
            "best_s": round(min(ts), 4),
            "median_s": round(statistics.median(ts), 4),
            "speedup": round(one / min(ts), 2),
            "of_ideal": round(one / min(ts) / t, 2),
            "goal_met": bool(one / min(ts) >= 0.6 * t) if t > 1 else None,
        }
        for t, ts in ((t, res["times"][str(t)]) for t in counts)
    ]
    return res


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=2_000_000)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--threads", default="1,2,4,8,16", help="comma-separated thread counts")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=float, default=60.0, help="stop adding rounds after (s)")
    p.add_argument("--tmp", help="where the temporary split goes (default: the temp dir)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    if args.members < 2 or args.shards < 1 or args.rounds < 1:
        p.error("need --members >= 2, --shards >= 1, --rounds >= 1")
    res = run(args)
    print(
        f"TARIDX build, {res['members']:,} members in {res['shards']} shards "
        f"({res['bytes'] / 1e9:.2f} GB), {res['cores']} cores ({res['processor']}), "
        f"best of {res['rounds']} rounds; load {res['load_before'][0]} -> {res['load_after'][0]}"
    )
    print(f"{'threads':>7} {'best s':>8} {'median s':>9} {'speedup':>8} {'of ideal':>9}  goal")
    for r in res["table"]:
        goal = "-" if r["goal_met"] is None else ("met" if r["goal_met"] else "NOT met")
        print(
            f"{r['threads']:>7} {r['best_s']:>8.3f} {r['median_s']:>9.3f} "
            f"{r['speedup']:>7.2f}x {r['of_ideal']:>9.2f}  {goal}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

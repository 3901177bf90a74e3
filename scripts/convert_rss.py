"""Peak RSS of ``tenfold convert`` from every source format to every target format.

Usage: ``python scripts/convert_rss.py [--dir DIR] [--sources wtxt,npz,npz-deflated,...]
[--mib 64] [--count 24]``

The model: ``--count`` float32 tensors of ``--mib`` MiB each (default 24 x 64 MiB = 1.5 GiB),
named ``model.layers.NN.weight``, written once per source format into ``--dir`` (default a new
temporary directory; use a tmpfs such as ``/dev/shm`` when the disk is small). Each conversion
runs in a fresh ``python -c`` child and its peak RSS is the child's ``VmHWM`` (reset by exec;
it counts the file pages the child maps and touches as well as its own memory). The bound is
issue 10's: 1.1 x the largest tensor + 64 MiB. Each output is deleted right after its run.
Prints one Markdown table row per conversion.

``--sample`` instead polls the child's ``/proc/<pid>/status`` every few milliseconds over the
run and reports the peaks of ``RssAnon`` (its own memory) and ``RssFile`` (file pages it
has mapped and touched) separately, against issue 28's bound (largest tensor + 200 MiB for
each), with each target's time as a ratio to the ``.zt`` target's in the same run and the
load average (``/proc/loadavg``) at the end of the kept run. ``--repeat N`` runs N rounds
of every target and keeps each one's fastest time (and its highest peaks); ``--out`` puts
the outputs elsewhere (a tmpfs keeps disk writeback out of the times; keep the source on a
disk, as tmpfs pages count as shared memory, not file pages).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

MiB = 1 << 20
TARGETS = (".zt", ".safetensors", ".oinf", ".fold", ".wtxt", ".npz")

_HWM = (
    "\nfor line in open('/proc/self/status'):\n"
    "    if line.startswith('VmHWM:'):\n"
    "        print(int(line.split()[1]))\n"
)


def _child(code: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", code + _HWM], check=True, capture_output=True, text=True
    )
    return int(out.stdout.split()[-1]) / 1024


def _peaks(pid: int, peak: dict[str, int]) -> None:
    """Fold the child's current RssAnon / RssFile (KiB) into ``peak``."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in peak:
                    peak[key] = max(peak[key], int(line.split()[1]))
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass  # the child has just exited


def _sampled(code: str, every: float = 0.002) -> tuple[float, float, float]:
    """Run ``code`` in a child, polling its resident memory: (seconds, peak RssAnon MiB,
    peak RssFile MiB). The imports run before the clock starts (the child waits for a line
    on stdin), so the time is the conversion's alone."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, tenfold.convert\nsys.stdin.readline()\n" + code,
        ],  # fmt: skip
        stdin=subprocess.PIPE,
    )
    assert child.stdin is not None
    peak = {"RssAnon": 0, "RssFile": 0}
    time.sleep(0.5)  # the imports
    _peaks(child.pid, peak)
    t = time.perf_counter()
    child.stdin.write(b"go\n")
    child.stdin.close()
    while child.poll() is None:
        _peaks(child.pid, peak)
        time.sleep(every)
    dt = time.perf_counter() - t
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, "convert")
    return dt, peak["RssAnon"] / 1024, peak["RssFile"] / 1024


def _load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def _sample(args: argparse.Namespace, tmp: str, tensors: dict[str, np.ndarray]) -> None:
    """The ``--sample`` table: one source file, every target, ratios to ``.zt``."""
    largest = max(a.nbytes for a in tensors.values()) / MiB
    bound = largest + 200
    print(f"model: {args.count} x {args.mib} MiB float32; bound per kind {bound:.0f} MiB")
    print("| source | target | seconds | ratio to .zt | peak RssAnon (MiB) | "
          "peak RssFile (MiB) | within bound | load |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|", flush=True)
    targets = args.targets.split(",")
    if ".zt" in targets:
        targets.remove(".zt")
    targets.insert(0, ".zt")
    for kind in args.sources.split(","):
        src = os.path.join(tmp, f"model-{kind}{_SUFFIX.get(kind, kind)}")
        _make(kind, src, tensors)
        # rounds: every target once per round, so that each is timed next to the .zt run
        # of its round (the box's load drifts); the fastest round per target is kept
        runs: dict[str, list[tuple[float, float, float, str]]] = {t: [] for t in targets}
        for _ in range(args.repeat):
            for suffix in targets:
                dst = os.path.join(args.out or tmp, f"tenfold-rss-{os.getpid()}{suffix}")
                code = (
                    "from tenfold.convert import convert\n"
                    f"convert({src!r}, {dst!r}, fsync=False, progress=False)\n"
                )
                runs[suffix].append((*_sampled(code), _load()))
                os.unlink(dst)
        base = min(r[0] for r in runs[".zt"])
        for suffix in targets:
            best = min(runs[suffix])
            anon = max(r[1] for r in runs[suffix])
            fpages = max(r[2] for r in runs[suffix])
            ok = "yes" if anon <= bound and fpages <= bound else "NO"
            print(f"| {kind} | {suffix} | {best[0]:.2f} | {best[0] / base:.2f} | {anon:.0f} | "
                  f"{fpages:.0f} | {ok} | {best[3]} |", flush=True)  # fmt: skip
        os.unlink(src)


def _make(kind: str, path: str, tensors: dict[str, np.ndarray]) -> None:
    if kind == "wtxt":
        from tenfold import wtxt

        wtxt.save(path, tensors, fsync=False)
    elif kind == "npz":
        from tenfold.interop import write_npz

        write_npz(path, tensors, fsync=False)
    elif kind == "npz-deflated":
        from tenfold.interop import write_npz

        write_npz(path, tensors, compressed=True, fsync=False)
    else:
        from tenfold.convert import write_any

        write_any(path, tensors, fsync=False)


_SUFFIX = {
    "wtxt": ".wtxt",
    "npz": ".npz",
    "npz-deflated": ".npz",
    "safetensors": ".safetensors",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    ap.add_argument("--sources", default="wtxt,npz,npz-deflated", help="comma-separated")
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated suffixes")
    ap.add_argument("--mib", type=int, default=64, help="MiB per tensor")
    ap.add_argument("--count", type=int, default=24, help="number of tensors")
    ap.add_argument(
        "--sample",
        action="store_true",
        help="sample RssAnon / RssFile over each run, with times (issue 28)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="rounds of runs (--sample)")
    ap.add_argument("--out", default=None, help="where outputs go (--sample; default --dir), "
                    "e.g. /dev/shm to keep disk writeback out of the times")  # fmt: skip
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="tenfold-convert-rss-", dir=args.dir)
    each = args.mib * MiB
    bound = 1.1 * each / MiB + 64
    try:
        block = np.random.default_rng(0).standard_normal(each // 4, dtype=np.float32)
        tensors = {f"model.layers.{i:02d}.weight": block for i in range(args.count)}
        if args.sample:
            _sample(args, tmp, tensors)
            return 0
        base = _child("import numpy, tenfold.convert, tenfold.wtxt, tenfold.interop.npz")
        print(f"model: {args.count} x {args.mib} MiB float32; bound {bound:.0f} MiB; "
              f"interpreter + imports alone: {base:.0f} MiB", flush=True)  # fmt: skip
        print("| source | target | peak RSS (MiB) | within bound | seconds |")
        print("|---|---|---|---|---|", flush=True)
        for kind in args.sources.split(","):
            src = os.path.join(tmp, f"model-{kind}{_SUFFIX.get(kind, kind)}")
            _make(kind, src, tensors)
            for suffix in args.targets.split(","):
                dst = os.path.join(tmp, "out" + suffix)
                code = (
                    "from tenfold.convert import convert\n"
                    f"convert({src!r}, {dst!r}, fsync=False, progress=False)\n"
                )
                t = time.monotonic()
                peak = _child(code)
                dt = time.monotonic() - t
                ok = "yes" if peak <= bound else "NO"
                print(f"| {kind} | {suffix} | {peak:.0f} | {ok} | {dt:.1f} |", flush=True)
                os.unlink(dst)
            os.unlink(src)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

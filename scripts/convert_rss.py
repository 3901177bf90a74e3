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


_SUFFIX = {"wtxt": ".wtxt", "npz": ".npz", "npz-deflated": ".npz"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    ap.add_argument("--sources", default="wtxt,npz,npz-deflated", help="comma-separated")
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated suffixes")
    ap.add_argument("--mib", type=int, default=64, help="MiB per tensor")
    ap.add_argument("--count", type=int, default=24, help="number of tensors")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="tenfold-convert-rss-", dir=args.dir)
    each = args.mib * MiB
    bound = 1.1 * each / MiB + 64
    try:
        block = np.random.default_rng(0).standard_normal(each // 4, dtype=np.float32)
        tensors = {f"model.layers.{i:02d}.weight": block for i in range(args.count)}
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

"""Run every asv benchmark once against the installed tenfold (``asv run --python=same``).

Used by CI so the suites cannot rot; real measurements use ``asv run`` / ``asv continuous``.
Exits non-zero when any benchmark fails.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parents[1] / "asv_bench"


def main() -> int:
    subprocess.run(
        [sys.executable, "-m", "asv", "machine", "--yes"],
        cwd=HERE,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "asv",
            "run",
            "--python=same",
            "--quick",
            "--dry-run",
            "--show-stderr",
        ],
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    out = proc.stdout + proc.stderr
    print(out[-6000:])
    failed = proc.returncode != 0 or "failed" in out.lower() or "Traceback" in out
    if failed:
        print("asv quick run: a benchmark failed", file=sys.stderr)
        return 1
    print("asv quick run: all benchmarks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())

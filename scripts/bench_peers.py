"""Measure tenfold against its peers on the same data, in the same run, and print the ratios.

    python scripts/bench_peers.py                     # every format, full sizes
    python scripts/bench_peers.py --format ztensor    # one format
    python scripts/bench_peers.py --quick             # small sizes (smoke test)
    python scripts/bench_peers.py --write-docs        # also store the results, render the page

Each format's cases live in ``scripts/peers/<format>.py`` as ``run(quick) -> list[Row]``. This
script installs nothing: a peer that is not installed is reported as skipped. With
``--write-docs`` the run (date, machine, load average before and after, commit, command and the
rows) is appended to docs/perf_results/<format>.json, a PNG bar chart of the ratios is written to
docs/perf_<format>.png and scripts/perf_docs.py renders the format's table in
docs/performance.md from the stored results (see that script for the page's markers).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import pathlib
import platform
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
PEERS = ROOT / "scripts" / "peers"


def load_cases(fmt: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"peers_{fmt}", PEERS / f"{fmt}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    if str(PEERS) not in sys.path:
        sys.path.append(str(PEERS))  # for _timing; appended so peers.ztensor never shadows ztensor
    spec.loader.exec_module(mod)
    return mod


def _perf_docs() -> Any:
    """scripts/perf_docs.py, which stores the results and renders the page."""
    if "perf_docs" in sys.modules:
        return sys.modules["perf_docs"]
    spec = importlib.util.spec_from_file_location("perf_docs", ROOT / "scripts" / "perf_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["perf_docs"] = mod
    spec.loader.exec_module(mod)
    return mod


def markdown(rows: list[dict]) -> str:
    pd = _perf_docs()
    return pd.markdown_table(pd.PEER_HEAD, [pd.peer_cells(r) for r in rows])


def _commit() -> str | None:
    """HEAD, marked when the working tree has changes (the run measured more than HEAD)."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return None
    dirty = subprocess.run([*git, "status", "--porcelain", "-uno"], capture_output=True, text=True)
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def new_run(
    fmt: str, rows: list[dict], quick: bool, machine: str, load: tuple[float, float]
) -> dict:
    """One run's results as docs/perf_results/<format>.json stores them."""
    import numpy

    import tenfold

    now = datetime.datetime.now(datetime.UTC)
    return {
        "date": now.strftime("%Y-%m-%d"),
        "time": now.strftime("%H:%M UTC"),
        "machine": machine,
        "platform": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "software": f"Python {platform.python_version()}, numpy {numpy.__version__}, "
        f"tenfold {tenfold.__version__}",
        "load_before": round(load[0], 2),
        "load_after": round(load[1], 2),
        "commit": _commit(),
        "command": f"scripts/bench_peers.py --format {fmt}{' --quick' if quick else ''}",
        "rows": rows,
    }


def write_doc(fmt: str, run: dict) -> None:
    """Store the run in docs/perf_results/<format>.json, draw docs/perf_<format>.png and render
    the page (a new format gets its section at the end, before the history)."""
    pd = _perf_docs()
    name = f"perf_{fmt}.png"
    drawn = pd.plot_ratios(fmt, run["rows"], pd.DOC.parent / name)
    pd.store_run(fmt, "main", run, name if drawn else None)
    pd.DOC.write_text(pd.render_tables(pd.DOC.read_text()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", action="append", help="format(s) to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--write-docs", action="store_true", help="store the results, render the page")
    ap.add_argument(
        "--machine",
        default=os.environ.get("TENFOLD_MACHINE") or platform.node(),
        help="the machine's name in the stored results (default: $TENFOLD_MACHINE, or the host)",
    )
    args = ap.parse_args(argv)
    fmts = args.format or sorted(p.stem for p in PEERS.glob("*.py") if not p.stem.startswith("_"))
    for fmt in fmts:
        before = os.getloadavg()[0]
        rows = load_cases(fmt).run(args.quick)
        load = (before, os.getloadavg()[0])
        print(f"\n## {fmt} (load average {load[0]:.1f} -> {load[1]:.1f})\n{markdown(rows)}")
        if args.write_docs:
            write_doc(fmt, new_run(fmt, rows, args.quick, args.machine, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Measure tenfold against its peers on the same data, in the same run, and print the ratios.

    python scripts/bench_peers.py                     # every format, full sizes
    python scripts/bench_peers.py --format ztensor    # one format
    python scripts/bench_peers.py --quick             # small sizes (smoke test)
    python scripts/bench_peers.py --write-docs        # also rewrite docs/performance.md

Each format's cases live in ``scripts/peers/<format>.py`` as ``run(quick) -> list[Row]``. This
script installs nothing: a peer that is not installed is reported as skipped. With
``--write-docs`` the format's section of docs/performance.md (between its BEGIN/END markers) is
replaced by the table, and a PNG bar chart of the ratios is written to docs/perf_<format>.png.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import pathlib
import platform
import re
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
PEERS = ROOT / "scripts" / "peers"
DOC = ROOT / "docs" / "performance.md"


def load_cases(fmt: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"peers_{fmt}", PEERS / f"{fmt}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    if str(PEERS) not in sys.path:
        sys.path.append(str(PEERS))  # for _timing; appended so peers.ztensor never shadows ztensor
    spec.loader.exec_module(mod)
    return mod


def fmt_row(r: dict) -> list[str]:
    def s(x: Any) -> str:
        if x is None:
            return "-"
        if isinstance(x, float):
            return f"{x:.4g}"
        return str(x)

    ratio = r.get("ratio")
    return [
        r["case"],
        s(r.get("tenfold")),
        r.get("peer") or "-",
        s(r.get("peer_value")),
        r.get("unit", "s"),
        f"{ratio:.2f}x" if isinstance(ratio, float) else s(ratio),
        r.get("target", ""),
        r.get("note", ""),
    ]


HEAD = ["case", "tenfold", "peer", "peer value", "unit", "ratio", "target", "note"]


def markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(fmt_row(r)) + " |" for r in rows]
    return "\n".join(lines)


def plot(fmt: str, rows: list[dict]) -> str | None:
    pts = [(r["case"], r["ratio"]) for r in rows if isinstance(r.get("ratio"), float)]
    if not pts:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.4 * len(pts)))
    ax.barh([p[0] for p in pts], [p[1] for p in pts], color="#3b7dd8")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")  # ratios range from ~1x to ~1000x
    ax.set_xlabel("speed-up of tenfold over the peer (x, higher is better)")
    ax.set_title(f"{fmt}: tenfold vs peers (same data, same run)")
    fig.tight_layout()
    name = f"perf_{fmt}.png"
    fig.savefig(ROOT / "docs" / name, dpi=90)
    plt.close(fig)
    return name


def write_doc(fmt: str, rows: list[dict], env: str) -> None:
    text = DOC.read_text()
    img = plot(fmt, rows)
    body = [f"## {fmt}", "", env, "", markdown(rows)]
    if img:
        body += ["", f"![{fmt} ratios]({img})"]
    block = f"<!-- BEGIN {fmt} -->\n" + "\n".join(body) + f"\n<!-- END {fmt} -->"
    pat = re.compile(rf"<!-- BEGIN {fmt} -->.*?<!-- END {fmt} -->", re.S)
    text = pat.sub(lambda _m: block, text) if pat.search(text) else text + "\n" + block + "\n"
    DOC.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", action="append", help="format(s) to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--write-docs", action="store_true", help="rewrite docs/performance.md")
    args = ap.parse_args()
    fmts = args.format or sorted(p.stem for p in PEERS.glob("*.py") if not p.stem.startswith("_"))
    import numpy

    import tenfold

    env = (
        f"Measured {datetime.date.today()} on {platform.machine()} "
        f"({platform.processor() or 'cpu'}), "
        f"Python {platform.python_version()}, numpy {numpy.__version__}, tenfold "
        f"{tenfold.__version__}, by `scripts/bench_peers.py{' --quick' if args.quick else ''}`."
    )
    for fmt in fmts:
        rows = load_cases(fmt).run(args.quick)
        print(f"\n## {fmt}\n{markdown(rows)}")
        if args.write_docs:
            write_doc(fmt, rows, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())

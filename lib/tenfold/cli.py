"""The ``tenfold`` command.

Common commands work on every format (the reader is chosen by magic bytes)::

    tenfold inspect FILE        table of the file's objects
    tenfold verify FILE         structure and checksums; exit 0 ok, 1 damaged or invalid
    tenfold convert SRC DST     between tensor formats, by suffix (.zt .npz .safetensors ...)
    tenfold demo [DIR]          write, inspect and verify a sample of every format

A format adds its own commands with a ``tenfold.<format>._cli`` module that defines
``register(subparsers)``. Errors print one line (no traceback): exit 1 for bad or damaged
input, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .errors import TenfoldError

__all__ = ["main", "build_parser"]


def _table(rows: list[dict], columns: Sequence[str]) -> str:
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(out)


INSPECT_COLUMNS = ("name", "dtype", "shape", "bytes", "encoding", "layout", "checksum")


def cmd_inspect(args: argparse.Namespace) -> int:
    from .formats import detect, module_for

    fmt = detect(args.file)
    rows = module_for(fmt).inspect(args.file)
    extra = [k for r in rows for k in r if k not in INSPECT_COLUMNS]
    cols = list(INSPECT_COLUMNS) + sorted(set(extra), key=extra.index) if rows else INSPECT_COLUMNS
    print(f"{args.file}: {fmt}, {len(rows)} objects, {os.path.getsize(args.file)} bytes")
    if rows:
        print(_table(rows, cols))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from .formats import detect, module_for

    fmt = detect(args.file)
    report = module_for(fmt).verify(args.file)
    print(report.format(verbose=not args.quiet))
    return report.exit_code


def cmd_convert(args: argparse.Namespace) -> int:
    from .convert import convert

    n = convert(args.src, args.dst, zt_generation=args.zt_generation)
    print(f"{args.src} -> {args.dst}: {n} tensors")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .formats import FORMATS

    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tenfold-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    status = 0
    for info in FORMATS:
        try:
            mod = info.load_module()
        except ImportError as exc:
            print(f"== {info.description}: not available ({exc})")
            status = 1
            continue
        path = mod.demo(directory)
        print(f"== {info.description}: wrote {path}")
        cmd_inspect(argparse.Namespace(file=str(path)))
        report = mod.verify(path)
        print(report.format(verbose=False))
        status = max(status, report.exit_code)
    print(f"demo files are in {directory}")
    return status


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tenfold", description="Read, write and verify tensor containers.")
    parser.add_argument("--version", action="version", version=f"tenfold {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("inspect", help="list a file's tensors / chunks / arrays")
    p.add_argument("file")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("verify", help="check structure and checksums (exit 0 ok, 1 damaged)")
    p.add_argument("file")
    p.add_argument("-q", "--quiet", action="store_true", help="print only problems and the verdict")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("convert", help="convert between tensor formats by suffix")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument(
        "--zt-generation",
        choices=["0.1.0", "2", "v2"],
        help="zTensor generation of a .zt destination (default 0.1.0)",
    )
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("demo", help="write, inspect and verify a sample of every format")
    p.add_argument("dir", nargs="?", help="where to write the samples (default: a temp dir)")
    p.set_defaults(func=cmd_demo)

    from .formats import FORMATS

    for info in FORMATS:
        try:
            mod = importlib.import_module(info.module + "._cli")
        except ModuleNotFoundError as exc:
            if exc.name is not None and (info.module + "._cli").startswith(exc.name):
                continue  # this format adds no commands (or is not installed)
            raise
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TenfoldError as exc:
        print(f"tenfold: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except FileNotFoundError as exc:
        print(f"tenfold: error: {exc.filename}: no such file", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"tenfold: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tenfold: interrupted", file=sys.stderr)
        return 130

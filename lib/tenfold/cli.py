"""The ``tenfold`` command.

Common commands work on every format (the reader is chosen by magic bytes)::

    tenfold inspect FILE        table of the file's objects
    tenfold verify FILE         structure and checksums; exit 0 ok, 1 damaged or invalid
    tenfold convert SRC DST     between tensor formats, by suffix (.zt .npz .safetensors ...)
    tenfold demo [DIR]          write, inspect and verify a sample of every format

A format adds its own commands with a ``tenfold.<format>._cli`` module that defines
``register(subparsers)``. A subcommand names its file arguments in its defaults
(``inputs=("file",)``, ``outputs=(...)``, ``suffixed=(...)``, ``dirs=(...)``) and :func:`main`
checks them before the command runs: a missing input, a directory, a FIFO or an unknown output
suffix is a usage error, an empty input a bad file.

Errors print one line (no traceback). Exit status: 0 ok, 1 the file is damaged or invalid, 2 a
usage error (bad arguments, a missing file, a directory, an unknown suffix, a missing optional
dependency).
"""

from __future__ import annotations

import argparse
import importlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from . import __version__
from .core.optional import MissingDependencyError
from .errors import FormatError, TenfoldError, UnsupportedError

__all__ = ["main", "build_parser", "UsageError", "check_input", "check_output"]


class UsageError(Exception):
    """A mistake on the command line (exit status 2), e.g. a missing input file."""


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_input(path: str) -> None:
    """Refuse what cannot be an input file, before any reader opens it (a FIFO would block)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{path}: no such file") from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise UsageError(f"{path}: is {kind}, not a regular file")
    if st.st_size == 0:
        raise FormatError(f"{path}: the file is empty (0 bytes)")


def check_dir(path: str) -> None:
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such directory")
    if not os.path.isdir(path):
        raise UsageError(f"{path}: is not a directory")


def _known_suffix(path: str) -> bool:
    from .formats import by_suffix

    if os.path.splitext(path)[1].lower() in (".npz", ".safetensors"):
        return True  # tenfold convert writes both (tenfold.interop)
    try:
        by_suffix(path)
    except UnsupportedError:
        return False
    return True


def check_output(path: str, *, suffix: bool = False) -> None:
    """Refuse an output path that is a directory, in a missing directory or, with ``suffix``,
    whose suffix names no format tenfold writes."""
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory; give a file name to write")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{path}: no such directory: {os.path.dirname(path) or parent}")
    if suffix and not _known_suffix(path):
        from .formats import FORMATS

        known = " ".join([s for i in FORMATS for s in i.suffixes] + [".npz", ".safetensors"])
        raise UsageError(f"{path}: unknown suffix {os.path.splitext(path)[1]!r}; expected one "
                         f"of {known}")


def _paths(args: argparse.Namespace, kind: str) -> Iterator[str]:
    """The paths given for the arguments a subcommand lists under ``kind`` (any may be a list
    of paths, or None when an optional argument was not given)."""
    for dest in getattr(args, kind, ()):
        value = getattr(args, dest, None)
        yield from value if isinstance(value, list) else [] if value is None else [value]


def _check_args(args: argparse.Namespace) -> None:
    for path in _paths(args, "inputs"):
        check_input(path)
    for path in _paths(args, "dirs"):
        check_dir(path)
    for path in _paths(args, "outputs"):
        check_output(path)
    for path in _paths(args, "suffixed"):
        check_output(path, suffix=True)


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

    n = convert(args.src, args.dst)
    print(f"{args.src} -> {args.dst}: {n} tensors")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .formats import FORMATS

    if args.dir and os.path.exists(args.dir) and not os.path.isdir(args.dir):
        raise UsageError(f"{args.dir}: is not a directory")
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
    p.set_defaults(func=cmd_inspect, inputs=("file",))

    p = sub.add_parser("verify", help="check structure and checksums (exit 0 ok, 1 damaged)")
    p.add_argument("file")
    p.add_argument("-q", "--quiet", action="store_true", help="print only problems and the verdict")
    p.set_defaults(func=cmd_verify, inputs=("file",))

    p = sub.add_parser("convert", help="convert between tensor formats by suffix")
    p.add_argument("src")
    p.add_argument("dst")
    p.set_defaults(func=cmd_convert, inputs=("src",), suffixed=("dst",))

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


def _error(message: object) -> None:
    text = str(message)
    if text.startswith("tenfold: "):  # library messages may carry the prefix already
        text = text[len("tenfold: "):]
    print(f"tenfold: error: {text}", file=sys.stderr)


def _os_error(exc: OSError) -> str:
    if exc.filename is None:
        return str(exc)
    name = exc.filename if exc.filename2 is None else exc.filename2
    return f"{os.fsdecode(name)}: {(exc.strerror or str(exc)).lower()}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_args(args)
        return int(args.func(args) or 0)
    except (UsageError, MissingDependencyError) as exc:
        _error(exc)
        return 2
    except TenfoldError as exc:
        _error(exc)
        return 1
    except ImportError as exc:  # an optional package imported without core.optional.require
        _error(f"this needs the package {exc.name or exc}, which is not installed")
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        _error(_os_error(exc))  # a path on the command line that is not what it must be
        return 2
    except OSError as exc:
        _error(_os_error(exc))
        return 1
    except KeyboardInterrupt:
        print("tenfold: interrupted", file=sys.stderr)
        return 130

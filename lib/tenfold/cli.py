"""The ``tenfold`` command.

Common commands work on every format (the reader is chosen by magic bytes)::

    tenfold inspect FILE        table of the file's objects
    tenfold verify FILE         structure and checksums; exit 0 ok, 1 damaged or invalid
    tenfold convert SRC DST     between tensor formats, by suffix (.zt .npz .safetensors ...)
    tenfold demo [DIR]          write, inspect and verify a sample of every format

A format adds its own commands through its ``cli`` hook in the registry (a
``register(subparsers)``; :mod:`tenfold.registry`); this module names no format and no format
imports it (what they share is :mod:`tenfold.core.cli_support`). A subcommand names its file
arguments in its defaults (``inputs=("file",)``, ``outputs=(...)``, ``suffixed=(...)``,
``dirs=(...)``) and :func:`main` checks them before the command runs: a missing input, a
directory, a FIFO or an unknown output suffix is a usage error, an empty input a bad file.

Errors print one line (no traceback). Exit status: 0 ok, 1 the file is damaged or invalid, 2 a
usage error (bad arguments, a missing file, a directory, an unknown suffix, a missing optional
dependency).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .core.cli_support import (
    REPORT_SCHEMA,
    UsageError,
    add_json,
    add_quiet,
    check_dir,
    check_input,
    check_output,
    human,
    print_json,
)
from .core.optional import MissingDependencyError
from .errors import FormatError, TenfoldError, TruncatedError, UnsupportedError

__all__ = ["main", "build_parser", "UsageError", "check_input", "check_output"]


def _check_suffix(path: str) -> None:
    """Refuse an output whose suffix names no format tenfold writes tensors to."""
    from .registry import by_suffix, targets

    try:
        if by_suffix(path).dtypes:
            return
    except UnsupportedError:
        pass
    known = " ".join(dict.fromkeys(s for f in targets() for s in f.suffixes))
    raise UsageError(
        f"{path}: unknown suffix {os.path.splitext(path)[1]!r}; expected one of {known}"
    )


def _paths(args: argparse.Namespace, kind: str) -> Iterator[str]:
    """The paths given for the arguments a subcommand lists under ``kind`` (any may be a list
    of paths, or None when an optional argument was not given)."""
    for dest in getattr(args, kind, ()):
        value = getattr(args, dest, None)
        yield from value if isinstance(value, list) else [] if value is None else [value]


def _is_url(path: str) -> bool:
    from .core.source import is_remote

    return is_remote(path)


def _open_url(url: str) -> tuple[str, Any, int]:
    """``(format, source, size)`` for a URL given as an input: the source (an opened remote
    file, fetched range by range) goes to the format's ``inspect`` / ``verify`` in place of a
    path. A format with a ``remote_source`` hook turns the opened file into what its
    ``inspect`` / ``verify`` read (or refuses a URL)."""
    from .registry import get, open_remote

    name, mf = open_remote(url, tail_first=False)
    size = int(mf.size)
    hook = get(name).hook("remote_source")
    return name, (mf if hook is None else hook(mf, url)), size


def _close(source: Any) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


def _metadata_values(file: str, fmt: str) -> dict[str, Any] | None:
    """The file metadata of ``file`` (a path or URL) as its format's ``metadata`` hook gives
    it, or None when the format has none."""
    from .registry import get

    hook = get(fmt).hook("metadata")
    if hook is None:
        return None
    source = _open_url(file)[1] if _is_url(file) else file
    try:
        return dict(hook(source))
    finally:
        if source is not file:
            _close(source)


def _version(file: str, fmt: str) -> str | None:
    """The version (generation) of ``file`` its format's ``version`` hook names, or None."""
    from .registry import get

    hook = get(fmt).hook("version")
    if hook is None:
        return None
    source = _open_url(file)[1] if _is_url(file) else file
    try:
        return str(hook(source))
    finally:
        if source is not file:
            _close(source)


def _detect(path: str) -> str:
    """The format of the local file ``path``. Content of no known format is a damaged file
    (exit 1) when the suffix names a format, else a usage error (exit 2: e.g. a ``.txt``)."""
    from .registry import detect, formats

    try:
        return detect(path)
    except TruncatedError:
        raise  # an empty file
    except FormatError as exc:
        low = os.fspath(path).lower()
        if any(f.suffixes and low.endswith(f.suffixes) for f in formats()):
            raise
        raise UsageError(f"{exc}; not a file tenfold reads") from None


def _check_args(args: argparse.Namespace) -> None:
    for path in _paths(args, "inputs"):
        if _is_url(path):
            continue  # fetched by fsspec; what is wrong with it shows when it is opened
        check_input(path)
    for path in _paths(args, "dirs"):
        check_dir(path)
    for path in _paths(args, "outputs"):
        check_output(path)
    for path in _paths(args, "suffixed"):
        check_output(path)
        _check_suffix(path)


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


_META_LAYOUTS = ("metadata", "sizevar")


def _shape_dims(shape: object) -> list[int] | None:
    """The dims of a shape as any format's ``inspect`` gives it (list, tuple, ``"4096x1024"``,
    ``"()"``, ``"(7,)"``), or None when it is not a shape (e.g. ``"-"``)."""
    if isinstance(shape, (list, tuple)):
        return [int(d) for d in shape]
    if not isinstance(shape, str):
        return None
    text = shape.strip()
    if text == "()":
        return []
    if text.startswith("(") and text.endswith(")"):
        parts = [p.strip() for p in text[1:-1].split(",") if p.strip()]
    else:
        parts = text.split("x")
    return [int(p) for p in parts] if parts and all(p.isdigit() for p in parts) else None


def _dims_or(shape: object) -> object:
    dims = _shape_dims(shape)
    return shape if dims is None else dims


def _shape_text(shape: object) -> str:
    """Every format's shape in one notation: ``(4096, 1024)``, ``()``, ``(7,)``."""
    dims = _shape_dims(shape)
    if dims is None:
        return str(shape)
    return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"


def _json_value(v: object) -> object:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    return str(v)


def cmd_inspect(args: argparse.Namespace) -> int:
    fmt, size, objects, meta = _inspect_rows(args.file)
    version = _version(args.file, fmt)
    if args.json:
        _print_inspect_json(args.file, fmt, size, objects, meta, version)
        return 0
    # rows with a "part" (WTXT's chunks and root) describe pieces of an object already
    # counted: listed, not counted again
    whole = [r for r in objects if not r.get("part")]
    total = sum(r["bytes"] for r in whole if isinstance(r.get("bytes"), int))
    shown = (lambda n: f"{n} bytes") if args.bytes else human
    print(f"{args.file}: {fmt}, {len(whole)} objects, {shown(total)} of data, file {shown(size)}"
          + (f", version {version}" if version else ""))  # fmt: skip
    table = []
    for r in objects:
        r = dict(r)
        if r.pop("part", None) == "chunk":
            r["name"] = "  " + str(r["name"])
        r["shape"] = _shape_text(r.get("shape"))
        if isinstance(r.get("bytes"), int):
            r["bytes"] = r["bytes"] if args.bytes else human(r["bytes"])
        table.append(r)
    extra = [k for r in table for k in r if k not in INSPECT_COLUMNS]
    cols = list(INSPECT_COLUMNS) + sorted(set(extra), key=extra.index)
    if table:
        print(_table(table, cols))
    if meta:
        print("\nmetadata and size variables:")
        for r in meta:
            kind = "sizevar" if r.get("layout") == "sizevar" else r.get("dtype", "")
            value = r.get("encoding") if r.get("layout") == "sizevar" else r.get("value", "")
            print(f"  {r['name']} ({kind})" + (f" = {value}" if value not in ("", None) else ""))
    return 0


def _inspect_rows(file: str) -> tuple[str, int, list[dict[str, Any]], list[dict[str, Any]]]:
    """``(format, file size, object rows, metadata rows)`` of a path or URL."""
    from .registry import module_for

    url = _is_url(file)
    if url:
        fmt, source, size = _open_url(file)
        try:
            rows = module_for(fmt).inspect(source)
        finally:
            _close(source)
    else:
        fmt = _detect(file)
        rows = module_for(fmt).inspect(file)
        size = os.path.getsize(file)
    objects = [r for r in rows if r.get("layout") not in _META_LAYOUTS]
    meta = [r for r in rows if r.get("layout") in _META_LAYOUTS]
    values = _metadata_values(file, fmt)
    if values is not None:
        _add_metadata_values(meta, values)
    return fmt, size, objects, meta


def _add_metadata_values(meta: list[dict[str, Any]], values: dict[str, Any]) -> None:
    """Fill the ``value`` of the metadata rows from ``values`` (decoded by the format); when
    the format's rows list no metadata, one row per value."""
    listed = {r["name"]: r for r in meta if r.get("layout") == "metadata"}
    for k, v in values.items():
        text = repr(v.tolist()) if hasattr(v, "tolist") else repr(v)
        text = text if len(text) <= 60 else text[:57] + "..."
        if k in listed:
            listed[k]["value"] = text
        elif not listed:
            meta.append({"name": k, "dtype": type(v).__name__, "layout": "metadata",
                         "value": text})  # fmt: skip


def _print_inspect_json(
    file: str,
    fmt: str,
    size: int,
    objects: list[dict[str, Any]],
    meta: list[dict[str, Any]],
    version: str | None = None,
) -> None:
    import json

    doc = {
        "schema": "tenfold.inspect/1",
        "file": os.fspath(file),
        "format": fmt,
        "size": size,
        **({"version": version} if version else {}),
        "objects": [
            {k: _json_value(v) for k, v in r.items()}
            | {"shape": _json_value(_dims_or(r.get("shape")))}
            for r in objects
        ],
        "metadata": [{k: _json_value(v) for k, v in r.items()} for r in meta],
    }
    print(json.dumps(doc, indent=1))


def cmd_verify(args: argparse.Namespace) -> int:
    from .registry import module_for

    if _is_url(args.file):
        fmt, source, _ = _open_url(args.file)
        try:
            report = module_for(fmt).verify(source)
        finally:
            _close(source)
        report.path = args.file  # not "<buffer>"
    else:
        fmt = _detect(args.file)
        report = module_for(fmt).verify(args.file)
    if args.json:
        print_json(report.to_json() | {"format": fmt})  # the registry's name, as inspect's
    elif not (args.quiet and report.exit_code == 0):  # -q: silent on success
        print(report.format(verbose=not args.quiet))
    return report.exit_code


def _compress_arg(text: str) -> tuple[str | None, int]:
    if text == "none":
        return None, 3
    algo, _, level = text.partition(":")
    if algo != "zstd":
        raise argparse.ArgumentTypeError(f"expected zstd, zstd:LEVEL or none, got {text!r}")
    try:
        lv = int(level) if level else 3
    except ValueError:
        raise argparse.ArgumentTypeError(f"zstd level must be an integer, got {level!r}") from None
    if not 1 <= lv <= 22:
        raise argparse.ArgumentTypeError(f"zstd level must be in 1..22, got {lv}")
    return algo, lv


def _shard_size_arg(text: str) -> int:
    from .sharded import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_convert(args: argparse.Namespace) -> int:
    import time

    from .convert import convert

    start = time.monotonic()
    from .convert import KEEP

    if not _is_url(args.src):
        _detect(args.src)  # a file of no format with no format's suffix: a usage error

    algo, level = args.compress if args.compress else (KEEP, 3)
    checksum = KEEP if args.checksum is None else args.checksum
    n = convert(
        args.src,
        args.dst,
        checksum=None if checksum == "none" else checksum,
        compress=algo,
        level=level,
        threads=args.threads,
        metadata=not args.no_metadata,
        progress=False if args.quiet else None,
        zt_generation=args.zt_generation,
        max_shard_size=args.max_shard_size,
    )
    if not args.quiet:
        if args.max_shard_size is not None and not os.path.exists(args.dst):
            secs = time.monotonic() - start
            print(f"{args.src} -> {args.dst}.index.json: {n} tensors in shards, {secs:.1f} s")
            return 0
        size = os.path.getsize(args.dst)
        secs = time.monotonic() - start
        print(f"{args.src} -> {args.dst}: {n} tensors, {human(size)} in {secs:.1f} s")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .registry import FORMATS

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
        cmd_inspect(argparse.Namespace(file=str(path), json=False, bytes=False))
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
    _add_inspect(sub)
    _add_verify(sub)
    _add_convert(sub)
    _add_demo(sub)
    from ._cli_diff import add_diff  # `tenfold diff`: its own module

    add_diff(sub)
    _add_format_commands(sub)
    return parser


def _add_inspect(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="list a file's tensors / chunks / arrays",
        description="One row per object (tensor, chunk, array) with its dtype, shape as "
        "(d0, d1, ...), size, encoding, layout and checksum; metadata and size variables in "
        "their own section.",
        epilog="--json prints one object (schema tenfold.inspect/1): {schema: "
        "'tenfold.inspect/1', file, format, size (bytes), version (where the format has "
        "one: a zTensor file's generation), objects: [{name, dtype, shape (list of ints or "
        "a string), bytes (int), "
        "encoding, layout, checksum, and format-specific keys; part ('chunk' or 'file') on "
        "rows that describe a piece of an object, not counted in the summary}], "
        "metadata: [{name, dtype, "
        "layout ('metadata' or 'sizevar'), ...}]}",
    )
    p.add_argument("file", help="any file tenfold reads (format detected from its content)")
    p.add_argument("--bytes", action="store_true", help="exact byte counts instead of KiB/MiB")
    add_json(p, "tenfold.inspect/1")
    p.set_defaults(func=cmd_inspect, inputs=("file",))


def _add_verify(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="check structure and checksums (exit 0 ok, 1 damaged)",
        description="Check every structure the reader relies on and every stored checksum "
        "(hash, HMAC, parity) of FILE, whatever its format; one row per object checked. "
        "Exit 0 when the file is as it was written, 1 when it is damaged or only readable "
        "through error correction (REPAIRABLE: the verdict names the command that fixes it).",
        epilog=REPORT_SCHEMA,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", help="any file tenfold reads (format detected from its content)")
    add_quiet(p, "print nothing on success; else the problems")
    add_json(p, "tenfold.verify/1")
    p.set_defaults(func=cmd_verify, inputs=("file",))


def _add_convert(sub: Any) -> None:
    import textwrap

    from .capabilities import TARGETS

    holds = "\n".join(
        textwrap.fill(
            ", ".join(sorted(dts)),
            78,
            initial_indent=f"  {'/'.join(sfx):13} ",
            subsequent_indent=" " * 16,
        )  # fmt: skip
        for sfx, dts in TARGETS.values()
    )
    p = sub.add_parser(
        "convert",
        help="convert between tensor formats by suffix (lossless or refused)",
        description="Copy every tensor and the file metadata of SRC into a new file DST, in "
        "the format DST's suffix names. Names, dtypes, shapes and bits are kept; what DST's "
        "format cannot hold is refused before anything is written.",
        epilog="formats and the element types each can hold:\n"
        + holds
        + "\n\nWTXT stores names outside [A-Za-z0-9_] and 0-d arrays under reversible\n"
        "encoded names (tenfold.load decodes them). Rules: docs/convert.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("src", help="source file (format detected from its content)")
    p.add_argument("dst", help="destination; its suffix chooses the format")
    p.add_argument(
        "--checksum",
        choices=("none", "crc32c", "sha256"),
        help="per-tensor checksum where the format has one (.zt); default: a .zt source's own "
        "(per tensor), else crc32c",
    )
    p.add_argument(
        "--compress",
        type=_compress_arg,
        metavar="zstd[:LEVEL]|none",
        help="compress tensors (.zt per tensor, .fold per chunk, .npz deflate); default: as "
        "the source when it has DST's format (.zt per tensor), else none",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="worker threads, per format: .fold zstd workers per chunk; .zt with --compress "
        "zstd: zstd workers per tensor; .wtxt: N >= 2 hashes on a second thread while the "
        "text is written (2 tensors in memory); -1 = one per CPU; ignored by .safetensors, "
        ".oinf and .npz (raw copies at memory speed; deflate is single-threaded). Default 0: "
        "one thread, the same bytes as pyfolds / ztensor 0.1.4",
    )
    p.add_argument(
        "--no-metadata",
        action="store_true",
        help="drop file metadata (and FOLD non-tensor chunks) instead of refusing",
    )
    add_quiet(p, "no progress bar, no summary line")
    p.add_argument(
        "--zt-generation",
        choices=["0.1.0", "2", "v2"],
        help="zTensor generation of a .zt destination (default 0.1.0)",
    )
    p.add_argument(
        "--max-shard-size",
        type=_shard_size_arg,
        metavar="SIZE",
        help="write DST as Hugging Face shards of at most SIZE (bytes, 500MB, 5GB, 1GiB) "
        "plus DST.index.json (one file when everything fits); SRC may be such an index too",
    )
    p.set_defaults(func=cmd_convert, inputs=("src",), suffixed=("dst",))


def _add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="write, inspect and verify a sample of every format",
        description="Write a small sample file of every registered format into DIR, then "
        "inspect and verify each. Exit 1 when a format is not available or a sample fails "
        "to verify.",
    )
    p.add_argument("dir", nargs="?", help="where to write the samples (default: a temp dir)")
    p.set_defaults(func=cmd_demo)


def _add_format_commands(sub: Any) -> None:
    """Each format's own commands (its ``cli`` hook: ``register(subparsers)``)."""
    from .registry import FORMATS

    for info in FORMATS:
        register = info.hook("cli")
        if register is not None:
            register(sub)


def _error(message: object) -> None:
    text = str(message)
    if text.startswith("tenfold: "):  # the prefix is printed below
        text = text[len("tenfold: ") :]
    print(f"tenfold: error: {text}", file=sys.stderr)


def _naming_file(exc: TenfoldError, file: object) -> object:
    """``exc``'s message, led by the command's input file when it does not name it already
    (so that errors from a loop over many files say which one)."""
    if not isinstance(file, (str, os.PathLike)):
        return exc
    name = os.fsdecode(file)
    text = str(exc)
    if name in text or os.path.basename(name) in text:
        return exc
    if text.startswith("tenfold: "):
        text = text[len("tenfold: ") :]
    return f"{name}: {text}"


def _os_error(exc: OSError) -> str:
    if isinstance(exc.strerror, str) and exc.strerror.startswith("tenfold: "):
        return exc.strerror[len("tenfold: ") :]  # a remote read's error: names the URL
    if exc.filename is None:
        return str(exc)
    name = exc.filename if exc.filename2 is None else exc.filename2
    return f"{os.fsdecode(name)}: {(exc.strerror or str(exc)).lower()}"


class _Front:
    """The front door lent to the formats' commands (``args.front``, see
    :class:`tenfold.core.cli_support.Front`): they import neither it nor :mod:`tenfold.convert`."""

    @staticmethod
    def load(path: str) -> dict[str, Any]:
        from . import load

        return load(path)

    @staticmethod
    def write(path: str, tensors: Any) -> None:
        from .convert import write_any

        write_any(path, tensors)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.front = _Front()
    try:
        _check_args(args)
        return int(args.func(args) or 0)
    except (UsageError, MissingDependencyError) as exc:
        _error(exc)
        return 2
    except TenfoldError as exc:
        _error(_naming_file(exc, getattr(args, "file", None)))
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

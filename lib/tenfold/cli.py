"""The ``tenfold`` command.

Common commands work on every format (the reader is chosen by magic bytes)::

    tenfold inspect FILE        table of the file's objects
    tenfold verify FILE         structure and checksums; exit 0 ok, 1 damaged or invalid
    tenfold convert SRC DST     between tensor formats, by suffix (.zt .npz .safetensors ...)
    tenfold demo [DIR]          write, inspect and verify a sample of every format

What those four do is in :mod:`tenfold._cli_common`; this module registers them, then the
formats' own commands, checks the arguments and turns errors into exit statuses. A format adds
its commands through its ``cli`` hook in the registry (a ``register(subparsers)``;
:mod:`tenfold.registry`); this module names no format and no format imports it (what they
share is :mod:`tenfold.core.cli_support`). Every command takes ``--json``: one object of the
:class:`~tenfold.core.cli_support.Schema` that ends its ``--help``. A subcommand names its file
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
from collections.abc import Iterator, Sequence
from typing import Any

from . import __version__
from ._cli_common import CONVERT, DEMO, INSPECT, cmd_convert, cmd_demo, cmd_inspect, cmd_verify
from .core.cli_support import (
    VERIFY,
    UsageError,
    add_json,
    add_quiet,
    check_dir,
    check_input,
    check_output,
    failed_source,
)
from .core.optional import MissingDependencyError
from .errors import TenfoldError, UnsupportedError

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


def _check_args(args: argparse.Namespace) -> None:
    from .core.source import is_remote
    from .registry import detect_dir

    for path in _paths(args, "inputs"):
        if is_remote(path):
            continue  # fetched by fsspec; what is wrong with it shows when it is opened
        if detect_dir(path) is not None:
            continue  # a directory a format claims (a distributed checkpoint)
        check_input(path)
    for path in _paths(args, "dirs"):
        check_dir(path)
    for path in _paths(args, "outputs"):
        check_output(path)
    for path in _paths(args, "suffixed"):
        check_output(path)
        _check_suffix(path)


def _compress_arg(text: str) -> tuple[str | None, int]:
    if text in ("none", "deflate"):
        return None if text == "none" else text, 3
    algo, _, level = text.partition(":")
    if algo != "zstd":
        raise argparse.ArgumentTypeError(
            f"expected zstd, zstd:LEVEL, deflate or none, got {text!r}"
        )
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
    )
    p.add_argument("file", help="any file tenfold reads (format detected from its content)")
    p.add_argument("--bytes", action="store_true", help="exact byte counts instead of KiB/MiB")
    add_json(p, INSPECT)
    p.set_defaults(func=cmd_inspect, inputs=("file",))


def _add_verify(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="check structure and checksums (exit 0 ok, 1 damaged)",
        description="Check every structure the reader relies on and every stored checksum "
        "(hash, HMAC, parity) of FILE, whatever its format; one row per object checked. "
        "Exit 0 when the file is as it was written, 1 when it is damaged or only readable "
        "through error correction (REPAIRABLE: the verdict names the command that fixes it).",
    )
    p.add_argument("file", help="any file tenfold reads (format detected from its content)")
    add_quiet(p, "print nothing on success; else the problems")
    add_json(p, VERIFY)
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
    add_json(p, CONVERT)
    p.add_argument(
        "--checksum",
        choices=("none", "crc32c", "sha256"),
        help="per-tensor checksum where the format has one (.zt); default: a .zt source's own "
        "(per tensor), else crc32c",
    )
    p.add_argument(
        "--compress",
        type=_compress_arg,
        metavar="zstd[:LEVEL]|deflate|none",
        help="compress tensors (zstd: .zt per tensor, .fold per chunk; deflate: .npz; a "
        "target that cannot is refused); default: as "
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
    add_json(p, DEMO)
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


def _failed_input(exc: TenfoldError, args: argparse.Namespace) -> object:
    """The input file ``exc`` came from: the one a command noted while reading it
    (:func:`tenfold.core.cli_support.reading`: how a command with several inputs says which),
    else the command's ``file``, unless the message names another of its inputs (a key file)."""
    where = failed_source(exc)
    if where is not None:
        return where
    text = str(exc)
    for name in getattr(args, "inputs", ()):
        other = getattr(args, name, None)
        if name != "file" and isinstance(other, (str, os.PathLike)) and os.fsdecode(other) in text:
            return None
    return getattr(args, "file", None)


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
        _error(_naming_file(exc, _failed_input(exc, args)))
        return int(getattr(args, "error_status", 1))  # diff: 1 is "different"
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

"""The commands every format answers (``inspect``, ``verify``, ``convert``, ``demo``): what they
do and the JSON they print (:data:`INSPECT`, :data:`CONVERT`, :data:`DEMO`; ``verify``'s is
:data:`tenfold.core.cli_support.VERIFY`). :mod:`tenfold.cli` registers them beside the formats'
own commands; like it, this module names no format (the registry answers).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .core.cli_support import (
    VERIFY,
    Schema,
    UsageError,
    either,
    human,
    note,
    print_json,
    reading,
)
from .errors import EncodeError, FormatError, TruncatedError

__all__ = ["cmd_inspect", "cmd_verify", "cmd_convert", "cmd_demo", "INSPECT", "CONVERT", "DEMO"]

#: ``inspect --json``
INSPECT = Schema(
    "tenfold.inspect/1",
    {
        "file": note("str", "the path or URL given"),
        "format": note("str", "the format read (by its content)"),
        "size": note("int", "file size in bytes"),
        "version?": note("str", "where the format has one: a zTensor file's generation"),
        "objects": [
            {
                "name": "str",
                "dtype": "str",
                "shape": note(either(["int"], "str"), "dims, or a string where there are none"),
                "bytes": note(either("int", "str"), "stored size; a string where none is stored"),
                "encoding": "str",
                "layout": "str",
                "checksum": "str",
                "part?": note(("chunk", "file"), "a piece of an object: not counted again"),
                "*": note("any", "format-specific keys (offset, ...)"),
            }
        ],
        "metadata": [
            {
                "name": "str",
                "layout": ("metadata", "sizevar"),
                "value?": note("str", "the decoded value, shortened"),
                "*": "any",
            }
        ],
    },
)

#: ``convert --json``
CONVERT = Schema(
    "tenfold.convert/1",
    {
        "src": "str",
        "dst": "str",
        "format": note("str", "the format written"),
        "tensors": note("int", "how many were written"),
        "files": note(["str"], "the files written (DST, or the index and its shards)"),
        "bytes": note("int", "their total size"),
        "seconds": "number",
    },
)

#: ``demo --json``
DEMO = Schema(
    "tenfold.demo/1",
    {
        "dir": note("str", "where the samples are"),
        "exit_code": (0, 1),
        "formats": [
            {
                "format": "str",
                "description": "str",
                "file": note("str?", "the sample, or null when the format is not available"),
                "error": note("str?", "why it is not available"),
                "inspect": either(INSPECT, "null"),
                "verify": either(VERIFY, "null"),
            }
        ],
    },
)


def _is_url(path: str) -> bool:
    from .core.source import is_remote

    return is_remote(path)


def _open_url(url: str) -> tuple[str, Any, int]:
    """``(format, source, size)`` for a URL given as an input: the source (an opened remote
    file, fetched range by range) goes to the format's ``inspect`` / ``verify`` in place of a
    path. A format with a ``remote_source`` hook turns the opened file into what its
    ``inspect`` / ``verify`` read (or refuses a URL)."""
    from .registry import detect_url_dir, get, open_remote

    try:
        name, mf = open_remote(url, tail_first=False)
    except IsADirectoryError:  # a prefix a format of directories owns: its reader takes the URL
        owner = detect_url_dir(url)
        if owner is None:
            raise
        return owner.name, url, _url_dir_size(url)
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


def cmd_inspect(args: argparse.Namespace) -> int:
    fmt, size, objects, meta = _inspect_rows(args.file)
    version = _version(args.file, fmt)
    if args.json:
        print_json(inspect_doc(args.file, fmt, size, objects, meta, version))
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
        size = os.path.getsize(file) if not os.path.isdir(file) else _dir_size(file)
    objects = [r for r in rows if r.get("layout") not in _META_LAYOUTS]
    meta = [r for r in rows if r.get("layout") in _META_LAYOUTS]
    values = _metadata_values(file, fmt)
    if values is not None:
        _add_metadata_values(meta, values)
    return fmt, size, objects, meta


def _url_dir_size(url: str) -> int:
    """The bytes of the objects directly under the prefix ``url``."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    return sum(int(e.get("size") or 0) for e in fs.ls(root, detail=True) if e.get("type") == "file")


def _dir_size(path: str) -> int:
    """The bytes of the files directly in the directory ``path`` (a format's directory)."""
    with os.scandir(path) as it:
        return sum(e.stat().st_size for e in it if e.is_file(follow_symlinks=False))


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


def inspect_doc(
    file: str,
    fmt: str,
    size: int,
    objects: list[dict[str, Any]],
    meta: list[dict[str, Any]],
    version: str | None = None,
) -> dict[str, Any]:
    """What ``inspect --json`` prints (:data:`INSPECT`)."""
    return {
        "schema": INSPECT.name,
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


def cmd_convert(args: argparse.Namespace) -> int:
    import time

    from .convert import KEEP, convert

    start = time.monotonic()
    if not _is_url(args.src):
        _detect(args.src)  # a file of no format with no format's suffix: a usage error
    algo, level = args.compress if args.compress else (KEEP, 3)
    checksum = KEEP if args.checksum is None else args.checksum
    with reading(args.src, unless=(EncodeError,)):  # a read error names the source
        n = convert(
            args.src,
            args.dst,
            checksum=None if checksum == "none" else checksum,
            compress=algo,
            level=level,
            threads=args.threads,
            metadata=not args.no_metadata,
            progress=False if args.quiet or args.json else None,
            zt_generation=args.zt_generation,
            max_shard_size=args.max_shard_size,
        )
    secs = time.monotonic() - start
    files = _written(args.dst, args.max_shard_size is not None)
    size = sum(os.path.getsize(f) for f in files)
    if args.json:
        from .registry import by_suffix

        print_json({"schema": CONVERT.name, "src": args.src, "dst": args.dst,
                    "format": by_suffix(args.dst).name, "tensors": n, "files": files,
                    "bytes": size, "seconds": round(secs, 3)})  # fmt: skip
    elif not args.quiet:
        shown = files[0] + (
            f": {n} tensors in shards" if files[0] != args.dst else f": {n} tensors"
        )
        print(f"{args.src} -> {shown}, {human(size)} in {secs:.1f} s")
    return 0


def _written(dst: str, sharded: bool) -> list[str]:
    """The files a conversion to ``dst`` wrote: ``dst``, or (shards asked for and more than
    one written) the index ``dst.index.json`` and the shards its weight map names."""
    if not sharded or os.path.exists(dst):
        return [dst]
    import json

    index = f"{dst}.index.json"
    with open(index, encoding="utf-8") as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    return [index] + [os.path.join(os.path.dirname(index), s) for s in shards]


def cmd_demo(args: argparse.Namespace) -> int:
    from .registry import FORMATS

    if args.dir and os.path.exists(args.dir) and not os.path.isdir(args.dir):
        raise UsageError(f"{args.dir}: is not a directory")
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tenfold-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    show = print if not args.json else (lambda *a, **k: None)
    status, done = 0, []
    for info in FORMATS:
        row: dict[str, Any] = {"format": info.name, "description": info.description}
        row |= dict.fromkeys(("file", "error", "inspect", "verify"))
        done.append(row)
        try:
            mod = info.load_module()
        except ImportError as exc:
            show(f"== {info.description}: not available ({exc})")
            row["error"], status = str(exc), 1
            continue
        make = getattr(mod, "demo", None)
        if make is None:  # a format tenfold reads and does not write (ONNX, HDF5...)
            show(f"== {info.description}: read only, no demo file")
            continue
        path = row["file"] = str(make(directory))
        show(f"== {info.description}: wrote {path}")
        if args.json:
            row["inspect"] = inspect_doc(path, *_inspect_rows(path))
        else:
            cmd_inspect(argparse.Namespace(file=path, json=False, bytes=False))
        report = mod.verify(path)
        row["verify"] = report.to_json() | {"format": info.name}
        show(report.format(verbose=False))
        status = max(status, report.exit_code)
    show(f"demo files are in {directory}")
    if args.json:
        print_json({"schema": DEMO.name, "dir": str(directory), "exit_code": status,
                    "formats": done})  # fmt: skip
    return status

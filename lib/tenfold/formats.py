"""The table of formats: how each is recognised and which module implements it.

Detection is by content (magic bytes), never by suffix; suffixes only choose the format a
*new* file is written in. Each format module provides ``open``, ``load``, ``save``, ``inspect``
and ``verify`` with the signatures of :mod:`tenfold.ztensor`.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .errors import FormatError, UnsupportedError

__all__ = [
    "FormatInfo",
    "FORMATS",
    "MAGICS",
    "detect_bytes",
    "detect",
    "sniff_sharded",
    "by_suffix",
    "module_for",
    "open_remote",
    "open_local",
]


@dataclasses.dataclass(frozen=True)
class FormatInfo:
    name: str
    suffixes: tuple[str, ...]
    sniff: Callable[[bytes], bool]
    module: str
    description: str

    def load_module(self) -> ModuleType:
        return importlib.import_module(self.module)


#: The magic bytes each format's files start with: the one definition (each format's ``_spec``
#: takes its ``MAGIC`` from here, so that recognising a file needs no format module).
MAGICS: dict[str, tuple[bytes, ...]] = {
    "ztensor": (b"ZTEN0001", b"ZTEN1000", b"\x89ZT2\r\n\x1a\n"),
    "oinf": (b"OINF\0",),
    "fold": (b"FOLDv1\0\0",),
    "wtxt": (b"WTXT ", b"WTXT-DELTA "),
    "taridx": (b"TARIDX\0\0",),
}


def _starts(name: str) -> Callable[[bytes], bool]:
    magics = MAGICS[name]
    return lambda head: head.startswith(magics)


FORMATS: list[FormatInfo] = [
    FormatInfo(
        "ztensor",
        (".zt",),
        _starts("ztensor"),
        "tenfold.ztensor",
        "zTensor 0.1.0",
    ),
    FormatInfo("oinf", (".oinf",), _starts("oinf"), "tenfold.oinf", "OINF"),
    FormatInfo(
        "fold",
        (".fold", ".mind"),
        _starts("fold"),
        "tenfold.fold",
        "FOLD / MIND",
    ),
    FormatInfo(
        "wtxt",
        (".wtxt",),
        _starts("wtxt"),
        "tenfold.wtxt",
        "WTXT/Chunks v1.1",
    ),
    FormatInfo(
        "taridx",
        (".taridx",),
        _starts("taridx"),
        "tenfold.taridx",
        "TARIDX tar-shard index",
    ),
    FormatInfo(
        "safetensors",
        (".safetensors",),
        lambda head: _sniff("safetensors_reader", head),
        "tenfold.interop.safetensors_reader",
        "safetensors",
    ),
    FormatInfo(
        "npz",
        (".npz",),
        lambda head: _sniff("npz_reader", head),
        "tenfold.interop.npz_reader",
        "NumPy npz",
    ),
]

#: A sharded checkpoint's JSON index (Hugging Face layout; :mod:`tenfold.sharded`). It is not
#: in FORMATS: it is a table of other files, not a container tenfold writes by suffix.
SHARDED = "sharded"


def sniff_sharded(head: bytes) -> bool:
    """Whether ``head`` starts like a sharded checkpoint's index (a JSON object naming
    ``weight_map`` or ``metadata``); :func:`tenfold.sharded.sniff` is this one. Here, so that
    recognising a file imports no reader."""
    text = head.lstrip()
    return text[:1] == b"{" and (b'"weight_map"' in text or b'"metadata"' in text)


_sharded_sniff = sniff_sharded  # the name this module's callers use


#: Bytes read from the start of a file to recognise it.
SNIFF_BYTES = 512


def _sniff(module: str, head: bytes) -> bool:
    return bool(importlib.import_module(f"tenfold.interop.{module}").sniff(head))


def detect_bytes(head: bytes) -> FormatInfo | None:
    """The format whose magic ``head`` starts with, or None."""
    for info in FORMATS:
        if info.sniff(head):
            return info
    return None


def detect(path: str | os.PathLike[str]) -> str:
    """Name of the format of the file at ``path`` (by content).

    Raises :class:`FormatError` when no known format matches. An fsspec URL or file is
    recognised from its first block.
    """
    from .core.mapped import open_regular  # never blocks on a FIFO; refuses non-files
    from .core.source import is_remote

    if is_remote(path):
        name, mf = open_remote(path, tail_first=False)  # by the head, whatever the suffix
        mf.close()
        return name

    with os.fdopen(open_regular(path), "rb") as f:
        head = f.read(SNIFF_BYTES)
    return name_of_head(head, path)


def name_of_head(head: bytes, path: Any) -> str:
    """The format whose magic ``head`` (a file's first bytes) starts with, or ``SHARDED`` for a
    sharded checkpoint's JSON index; :class:`FormatError` naming ``path`` otherwise."""
    info = detect_bytes(head)
    if info is not None:
        return info.name
    if _sharded_sniff(head):
        return SHARDED
    known = ", ".join(i.name for i in FORMATS)
    raise FormatError(
        fmt="tenfold",
        obj=os.fspath(path),
        detail="unknown format",
        expected=f"the magic of one of {known}",
        got=head[:8],
    )


def open_local(path: str | os.PathLike[str], *, mmap: bool = True) -> tuple[str, Any]:
    """Open a local file once: ``(format name, opened source)``, the format decided by the
    opened file's first bytes. The source (a :class:`~tenfold.core.mapped.MappedFile`, or a
    ``pread`` source with ``mmap=False``) is handed to the format's reader as it is, so that
    the file is opened, checked and mapped once. A sharded checkpoint's JSON index gives
    ``(SHARDED, None)`` (its reader takes the path).
    """
    from .core.source import open_file

    mf = open_file(path, fmt="tenfold", mmap=mmap)
    try:
        name = name_of_head(mf.bytes(0, min(SNIFF_BYTES, mf.size), "head"), path)
    except BaseException:
        mf.close()
        raise
    if name == SHARDED:
        mf.close()
        return SHARDED, None
    return name, mf


def open_remote(
    source: Any, *, storage_options: dict[str, Any] | None = None, tail_first: bool | None = None
) -> tuple[str, Any]:
    """Open an fsspec URL or file for reading: ``(format name, opened source)``.

    The format is still decided by content. Which end of the object is fetched at open is
    guessed from the suffix: a ``.zt`` object's index sits at its end, so its last block is
    fetched and the magic check rides on the first data request (one request saved);
    anything else gets its first block, where every other format's header sits.
    """
    from .core.source import open_file

    if tail_first is None:
        name = source if isinstance(source, str) else str(getattr(source, "path", ""))
        tail_first = name.split("?", 1)[0].lower().endswith(".zt")
    mf = open_file(source, fmt="tenfold", storage_options=storage_options, tail_first=tail_first)
    try:
        if mf.defer_head:
            return "ztensor", mf
        head = mf.bytes(0, min(SNIFF_BYTES, mf.size), "head")
        info = detect_bytes(head)
        if info is None and _sharded_sniff(head):
            return SHARDED, mf  # a sharded index under another name: tenfold.sharded.open
        if info is None:
            known = ", ".join(i.name for i in FORMATS)
            raise FormatError(
                f"tenfold: {mf.path}: unknown format; expected the magic of one of "
                f"{known}, got {head[:8]!r}"
            )
    except BaseException:
        mf.close()
        raise
    return info.name, mf


def by_suffix(path: str | os.PathLike[str]) -> FormatInfo:
    """The format a new file at ``path`` is written in, chosen by its suffix."""
    name = os.fspath(path).lower()
    for info in FORMATS:
        if any(name.endswith(s) for s in info.suffixes):
            return info
    known = ", ".join(s for i in FORMATS for s in i.suffixes)
    raise UnsupportedError(f"tenfold: {os.fspath(path)}: unknown suffix; expected one of {known}")


def module_for(name: str) -> ModuleType:
    if name == SHARDED:
        return importlib.import_module("tenfold.sharded")
    for info in FORMATS:
        if info.name == name:
            return info.load_module()
    raise UnsupportedError(f"tenfold: unknown format {name!r}")

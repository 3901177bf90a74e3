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

from .errors import FormatError, UnsupportedError

__all__ = ["FormatInfo", "FORMATS", "MAGICS", "detect_bytes", "detect", "by_suffix", "module_for"]


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

    Raises :class:`FormatError` when no known format matches.
    """
    from .core.mapped import open_regular  # never blocks on a FIFO; refuses non-files

    with os.fdopen(open_regular(path), "rb") as f:
        head = f.read(SNIFF_BYTES)
    info = detect_bytes(head)
    if info is None:
        known = ", ".join(i.name for i in FORMATS)
        raise FormatError(
            fmt="tenfold",
            obj=os.fspath(path),
            detail="unknown format",
            expected=f"the magic of one of {known}",
            got=head[:8],
        )
    return info.name


def by_suffix(path: str | os.PathLike[str]) -> FormatInfo:
    """The format a new file at ``path`` is written in, chosen by its suffix."""
    name = os.fspath(path).lower()
    for info in FORMATS:
        if any(name.endswith(s) for s in info.suffixes):
            return info
    known = ", ".join(s for i in FORMATS for s in i.suffixes)
    raise UnsupportedError(f"tenfold: {os.fspath(path)}: unknown suffix; expected one of {known}")


def module_for(name: str) -> ModuleType:
    for info in FORMATS:
        if info.name == name:
            return info.load_module()
    raise UnsupportedError(f"tenfold: unknown format {name!r}")

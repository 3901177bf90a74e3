"""Flat byte views of any buffer-like object, without copying.

``memoryview`` cannot export NumPy arrays of ml_dtypes types (bfloat16, float8) and casts only
contiguous buffers; :func:`byte_view` handles both, so checksums, compression and writers accept
every array a user can hold. :class:`BufferFile` reads a uint8 array as a seekable file,
:class:`SourceIO` an opened source (mapped, ``pread`` or remote) through its checked reads.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

__all__ = ["byte_view", "exact_pieces", "BufferFile", "SourceIO"]


def byte_view(data: object) -> memoryview:
    """A 1-D unsigned-byte ``memoryview`` of ``data`` (copying only non-contiguous arrays).

    >>> import ml_dtypes
    >>> byte_view(np.ones(2, ml_dtypes.bfloat16)).tobytes().hex()
    '803f803f'
    """
    if isinstance(data, np.ndarray):
        a = data if data.flags.c_contiguous else np.ascontiguousarray(data)
        return memoryview(a.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    mv = memoryview(data)  # type: ignore[arg-type]
    if mv.ndim == 1 and mv.format in ("B", "b", "c"):
        return mv if mv.format == "B" else mv.cast("B")
    if mv.c_contiguous:
        return mv.cast("B")
    return memoryview(mv.tobytes())


def exact_pieces(
    pieces: Iterable[Any], size: int, refuse: Callable[[object, bool], Exception]
) -> Iterator[memoryview]:
    """:func:`byte_view` of each of ``pieces``, which must add up to exactly ``size`` bytes: a
    piece that would go past ``size`` is not given, ``refuse(">= N", True)`` is raised (N: the
    bytes with it); fewer bytes in all raise ``refuse(N, False)`` at the end. Each writer
    builds its own error (format, object, field) in ``refuse``.

    >>> [bytes(v) for v in exact_pieces([b"ab", b"c"], 3, lambda got, more: ValueError(got))]
    [b'ab', b'c']
    >>> list(exact_pieces([b"ab"], 3, lambda got, more: ValueError(got, more)))
    Traceback (most recent call last):
    ...
    ValueError: (2, False)
    """
    done = 0
    for piece in pieces:
        mv = byte_view(piece)
        if done + mv.nbytes > size:
            raise refuse(f">= {done + mv.nbytes}", True)
        yield mv
        done += mv.nbytes
    if done != size:
        raise refuse(done, False)


class _ReadOnlyFile(io.RawIOBase):
    """A read-only, seekable file over something of ``_size`` bytes (subclasses read)."""

    _pos = 0
    _size = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


class BufferFile(_ReadOnlyFile):
    """A read-only, seekable file over a uint8 array (no copy of the whole buffer)."""

    def __init__(self, u8: np.ndarray) -> None:
        self._u8 = u8
        self._size = u8.size
        self._pos = 0

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        n = max(0, min(len(mv), self._u8.size - self._pos))
        mv[:n] = self._u8[self._pos : self._pos + n].data
        self._pos += n
        return n

    def detach_buffer(self) -> None:
        """Let go of the array (the map it views can then close)."""
        self._u8 = np.empty(0, np.uint8)
        self._size = 0


class SourceIO(_ReadOnlyFile):
    """A read-only, seekable file over an opened source (a
    :class:`~tenfold.core.mapped.MappedFile`, a ``pread`` or remote one): each read goes
    through its checked ``bytes(offset, n, what)``, so the file need not be mapped whole."""

    def __init__(self, source: Any, what: str = "file") -> None:
        self._src = source
        self._what = what
        self._size = source.size
        self._pos = 0

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), self._size - self._pos))
        if n:
            b[:n] = self._src.bytes(self._pos, n, self._what)
        self._pos += n
        return n

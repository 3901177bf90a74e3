"""Flat byte views of any buffer-like object, without copying.

``memoryview`` cannot export NumPy arrays of ml_dtypes types (bfloat16, float8) and casts only
contiguous buffers; :func:`byte_view` handles both, so checksums, compression and writers accept
every array a user can hold. :class:`BufferFile` reads a uint8 array as a seekable file.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

__all__ = ["byte_view", "BufferFile"]


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


class BufferFile(io.RawIOBase):
    """A read-only, seekable file over a uint8 array (no copy of the whole buffer)."""

    def __init__(self, u8: np.ndarray) -> None:
        self._u8 = u8
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        n = max(0, min(len(mv), self._u8.size - self._pos))
        mv[:n] = self._u8[self._pos : self._pos + n].data
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._u8.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def detach_buffer(self) -> None:
        """Let go of the array (the map it views can then close)."""
        self._u8 = np.empty(0, np.uint8)

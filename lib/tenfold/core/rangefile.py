"""A seekable, read-only binary file over a remote :class:`~tenfold.core.source.SourceFile`,
for parsers that want a file object (``zipfile``, behind the ``.npz`` reader).

Reads go to the source by range; nothing fetches the whole object. The zip directory sits at
the end of an archive, so the last block (:data:`TAIL`) is fetched once when the file is made
(the end record and, for up to about a thousand members, the central directory: one request).
A small read fetches :data:`BLOCK` bytes from where it starts, so that a member's local header,
name and ``.npy`` header come with one request; :meth:`expect` widens the next fetch at an
offset to a whole member (its local header and data in one request). A large read fetches its
range, minus what a cached block already holds.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

__all__ = ["RangeFile", "TAIL", "BLOCK"]

#: Bytes fetched from the end of the object when the file is made.
TAIL = 64 << 10
#: Least bytes fetched for a small read.
BLOCK = 64 << 10


class RangeFile(io.RawIOBase):
    def __init__(self, source: Any) -> None:
        self._src = source
        self.size = int(source.size)
        self._pos = 0
        self._hint: tuple[int, int] | None = None
        n = min(self.size, TAIL)
        if n:
            source.prefetch([(self.size - n, n)], gap=0)  # pinned: the directory lives here

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def expect(self, offset: int, length: int) -> None:
        """The next read starting at ``offset`` fetches at least ``length`` bytes."""
        self._hint = (offset, length)

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        pos = self._pos
        n = max(0, min(len(mv), self.size - pos))
        if n == 0:
            return 0
        src = self._src
        hit = src.cached(pos, n)
        if hit is None:
            want = n
            if self._hint is not None and self._hint[0] == pos:
                want = max(want, self._hint[1])
                self._hint = None
            elif n < BLOCK:
                want = BLOCK
            want = min(want, self.size - pos)
            block: np.ndarray = src.u8(pos, want, "range")
            hit = block[:n]
        mv[:n] = hit.data
        self._pos = pos + n
        return n

    def close(self) -> None:
        super().close()
        self._src = None

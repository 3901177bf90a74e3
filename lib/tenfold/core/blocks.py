"""A file's byte ranges read in blocks into one reused buffer (:class:`BlockReader`): no map,
no copy of the range, each block small enough to stay in the CPU cache between the read and
what the caller does with it (a checksum, a write).

Used where bytes pass through once: ``tenfold convert``'s raw copies
(:meth:`tenfold.tensor_source.Source.blocks`) and FOLD's check of a chunk before copying it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..errors import factory

__all__ = ["BlockReader", "BLOCK"]

#: The default block size: small enough to stay in the CPU cache between read, checksum and
#: write (measured: 1 MiB copies 2 GiB as fast as ``cp``; 64 MiB blocks or a memory map are
#: slower).
BLOCK = 1 << 20


class BlockReader:
    """Reads ranges of the file at ``path`` with ``pread`` in blocks of ``block`` bytes. The
    descriptor and the buffer are made on the first :meth:`blocks`; :meth:`close` gives the
    descriptor back (a later :meth:`blocks` opens another). ``fmt`` names the format in the
    error of a file that ends early."""

    def __init__(self, path: Any, fmt: str, block: int = BLOCK) -> None:
        self.path, self.fmt, self.block = path, fmt, block
        self._fd: int | None = None
        self._buf: memoryview | None = None

    def blocks(self, offset: int, nbytes: int) -> Iterator[memoryview]:
        """The bytes ``[offset, offset + nbytes)`` in blocks (each valid until the next is
        requested); a :class:`~tenfold.errors.TruncatedError` where the file ends first."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        if self._buf is None or len(self._buf) != self.block:
            self._buf = memoryview(bytearray(self.block))
        fd, buf, end = self._fd, self._buf, offset + nbytes
        while offset < end:
            k = os.preadv(fd, [buf[: min(len(buf), end - offset)]], offset)
            if k <= 0:
                raise factory(self.fmt).truncated(
                    os.fspath(self.path),
                    message=f"{self.fmt}: {os.fspath(self.path)}: ends at offset {offset}; "
                    f"expected {end - offset} more bytes",
                    offset=offset,
                    expected=end - offset,
                    got=0,
                )
            yield buf[:k]
            offset += k

    @property
    def opened(self) -> bool:
        """Whether a descriptor is open."""
        return self._fd is not None

    def close(self) -> None:
        """Close the descriptor, if one is open."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> BlockReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

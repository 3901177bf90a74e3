"""The SHA-256 of a chunk written piece by piece, computed on a worker thread behind the writer.

FOLD stores one SHA-256 over a chunk's (compressed) bytes: one sequential stream, which on
most CPUs is the slowest thing in writing an uncompressed chunk (SHA-NI: about 1.8 GB/s,
against several GB/s for reading, CRC-32C and writing together). So the stream runs on a
thread of its own and the writing thread never waits for it while it still has work: each
piece is hashed after the pieces before it, while the writer writes it and reads the next.

A piece is only valid until the writer asks its source for the next one (a block reader
reuses its buffer), so the bytes the hashing thread has not reached by then must live
elsewhere: the last ``slot`` bytes of each piece are copied into a small ring of buffers
(a cheap copy: the bytes are in cache), and a longer piece's head is hashed in place, which
:meth:`Sha256Stream.release` waits for before the writer moves on.

>>> import concurrent.futures, hashlib
>>> with concurrent.futures.ThreadPoolExecutor(1) as pool:
...     s = Sha256Stream(pool, slot=4, slots=2)
...     for piece in (b"ab", b"cdefghij", b"", b"k"):
...         s.update(memoryview(piece))
...         s.release()
...     s.hexdigest() == hashlib.sha256(b"abcdefghijk").hexdigest()
True
"""

from __future__ import annotations

import concurrent.futures
import hashlib
from typing import Any

__all__ = ["Sha256Stream", "SLOT", "SLOTS"]

#: bytes per ring buffer: half of one of the 1 MiB blocks a converted file is read in. The
#: copied tail of a piece covers the time the writer takes to read the next piece (a quarter
#: of the time SHA-256 takes over a piece) with room to spare
SLOT = 512 << 10
#: ring buffers: 1.5 MiB in all, in cache; the writer may run up to this many slots ahead of
#: the hashing thread while the pieces are small
SLOTS = 3


class Sha256Stream:
    """SHA-256 of the pieces given to :meth:`update`, in order, on ``pool``.

    ``pool`` must run its tasks one at a time, in the order submitted (a one-thread
    executor): SHA-256 is one sequential stream. With ``pool=None`` each piece is hashed in
    :meth:`update` (a process allowed one CPU has nothing to overlap it with).
    """

    def __init__(
        self, pool: concurrent.futures.Executor | None, slot: int = SLOT, slots: int = SLOTS
    ) -> None:
        self._sha = hashlib.sha256()
        self._pool = pool
        self._slot = slot
        self._bufs: list[memoryview] = []  # made as the stream reaches them
        self._busy: list[concurrent.futures.Future[Any] | None] = [None] * max(1, slots)
        self._cur = 0  # the ring buffer being filled
        self._fill = 0  # bytes in it so far
        self._direct: concurrent.futures.Future[Any] | None = None

    def update(self, mv: memoryview) -> None:
        """Add ``mv`` (a 1-D byte view) to the stream. It must stay unchanged until
        :meth:`release` returns."""
        if self._pool is None:
            self._sha.update(mv)
            return
        n = mv.nbytes
        if n > self._slot:  # the head in place (after what is queued), the tail copied
            self._flush()
            self._direct = self._pool.submit(self._sha.update, mv[: n - self._slot])
            mv = mv[n - self._slot :]
        while mv.nbytes:
            if self._fill == 0:
                self._take()
            k = min(self._slot - self._fill, mv.nbytes)
            self._bufs[self._cur][self._fill : self._fill + k] = mv[:k]
            self._fill += k
            mv = mv[k:]
            if self._fill == self._slot:
                self._flush()

    def release(self) -> None:
        """Wait until no queued hashing reads the pieces given so far (their tails are
        copied): the caller may then reuse or free them."""
        direct, self._direct = self._direct, None
        if direct is not None:
            direct.result()

    def hexdigest(self) -> str:
        """The digest of everything given (waits for the hashing thread)."""
        self._flush()
        self.release()
        for i, fut in enumerate(self._busy):
            if fut is not None:
                fut.result()
                self._busy[i] = None
        return self._sha.hexdigest()

    def close(self) -> None:
        """Cancel what has not started and wait for what has (after an error: nothing reads
        the caller's pieces or the ring once this returns)."""
        futs = [self._direct, *self._busy]
        self._direct = None
        self._busy = [None] * len(self._busy)
        for fut in futs:
            if fut is not None and not fut.cancel():
                concurrent.futures.wait([fut])

    def _take(self) -> None:
        """Make the current ring buffer free to fill: wait for its last hashing."""
        fut = self._busy[self._cur]
        if fut is not None:
            self._busy[self._cur] = None
            fut.result()
        if self._cur == len(self._bufs):
            self._bufs.append(memoryview(bytearray(self._slot)))

    def _flush(self) -> None:
        """Queue the filled part of the current ring buffer and move to the next."""
        if self._fill == 0:
            return
        assert self._pool is not None
        buf = self._bufs[self._cur][: self._fill]
        self._busy[self._cur] = self._pool.submit(self._sha.update, buf)
        self._cur = (self._cur + 1) % len(self._busy)
        self._fill = 0

"""A :class:`~tenfold.core.mapped.MappedFile` whose ranges are copied into owned memory
(:class:`SourceFile`), the cache of what it fetched, and the local ``pread`` fetcher behind
``mmap=False`` (:class:`Pread`); :func:`tenfold.core.source.open_file` chooses it.

A fetcher (:class:`Pread`, or the remote one of :mod:`tenfold.core.source`) has ``name``,
``size``, ``stats``, ``remote`` (whether speculative blocks are worth fetching at open),
``fetch(offset, length)``, ``fetch_many(ranges)``, ``fetch_into(offset, dst)`` and
``close()``.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import FormatError, TruncatedError, describe
from .bounds import array_numel
from .mapped import MappedFile, open_regular

__all__ = ["SourceFile", "Pread", "HEAD_BLOCK", "TAIL_BLOCK", "COALESCE_GAP", "COALESCE_MAX"]

#: Speculative first block fetched when a remote file's header sits at its start.
HEAD_BLOCK = 64 << 10
#: Speculative last block fetched when a remote file's index sits at its end (zTensor).
TAIL_BLOCK = 128 << 10
#: Ranges at most this far apart are fetched in one request when many are read at once.
COALESCE_GAP = 64 << 10
#: Largest single coalesced request.
COALESCE_MAX = 256 << 20
#: A deferred magic check is folded into a data request that starts at most this far in.
_HEAD_SLACK = 64 << 10
_PREAD_MAX = 1 << 30
_Bytes = bytes  # SourceFile has a method named bytes
_RECENT = 2


class SourceFile(MappedFile):
    """The :class:`MappedFile` interface over a source that copies ranges into owned memory.

    Arrays it returns are read-only (as views of a map are) but own their memory: no file
    mapping stays behind them. ``stats`` counts the requests (``pread`` calls or range
    requests) and bytes fetched, for tests and benchmarks.
    """

    def __init__(self, fetcher: Any, *, fmt: str, tail_first: bool = False) -> None:
        self.fmt = fmt
        self._mm = None
        self._fd = None
        self._f = fetcher
        self.path = fetcher.name
        self.size = fetcher.size
        self.remote = bool(fetcher.remote)
        self._closed = False
        self._lock = threading.Lock()
        self._pinned: list[tuple[int, np.ndarray]] = []
        self._recent: deque[tuple[int, np.ndarray]] = deque(maxlen=_RECENT)
        self._expect: tuple[_Bytes, str] | None = None
        self.defer_head = False
        self.stats = fetcher.stats
        if self.remote:
            self._speculate(tail_first)

    def _speculate(self, tail_first: bool) -> None:
        size = self.size
        if size <= 2 * max(HEAD_BLOCK, TAIL_BLOCK):
            start, end = 0, size
        elif tail_first:
            start, end = size - TAIL_BLOCK, size
            self.defer_head = True
        else:
            start, end = 0, HEAD_BLOCK
        if end > start:
            self._pinned.append((start, self._f.fetch(start, end - start)))

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Drop the cached ranges and release the descriptor or filesystem handle; arrays
        already returned stay valid (they own their memory)."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._pinned.clear()
            self._recent.clear()
        self._f.close()

    def identity(self) -> dict[str, Any] | None:
        """What tells the source from another at the same place (see
        :meth:`MappedFile.identity`): the fetcher's (a local file's size and modification
        time, a remote object's size and validators)."""
        return None if self._closed else self._f.identity()

    def reopen_spec(self) -> tuple[Any, ...] | None:
        """``("path", path, False)`` of a local file, ``("remote", url, storage_options)`` of a
        remote object (see :meth:`MappedFile.reopen_spec`)."""
        return self._f.reopen_spec()  # type: ignore[no-any-return]

    def _arr(self) -> np.ndarray:  # pragma: no cover - MappedFile's internals, unused here
        raise NotImplementedError

    def _live(self) -> None:
        if self._closed:
            raise ValueError(f"{self.fmt}: I/O operation on a closed file")

    # -- the cache ----------------------------------------------------------------------------
    def _blocks(self) -> tuple[tuple[int, np.ndarray], ...]:
        with self._lock:  # another thread may be adding a block
            return (*self._pinned, *self._recent)

    def cached(self, offset: int, length: int) -> np.ndarray | None:
        """The bytes ``[offset, offset+length)`` when one block already fetched holds them
        (a view of it), else None; never a request."""
        return self._cached(offset, length)

    def _cached(self, offset: int, length: int) -> np.ndarray | None:
        end = offset + length
        for start, block in self._blocks():
            if start <= offset and end <= start + block.size:
                return block[offset - start : end - start]
        return None

    def _fetch(self, offset: int, length: int) -> np.ndarray:
        """Fetch ``[offset, offset+length)`` (checking a deferred magic on the way), using a
        cached block that covers one end of it; the result is cached as recent."""
        end = offset + length
        expect = self._expect
        magic: list[tuple[int, int]] = []
        if expect is not None:
            self._expect = None
            if offset <= _HEAD_SLACK:
                length, offset = end, 0
            else:
                magic = [(0, len(expect[0]))]  # one more range in the same batch
        head = tail = None
        for start, block in self._blocks():
            bend = start + block.size
            if offset < start < end <= bend:
                tail = (start, block)  # a block covers the end: fetch only what precedes it
            elif start <= offset < bend < end:
                head = (start, block)  # a block covers the start
        if tail is not None and (head is None or tail[0] - offset >= end - head[0] - head[1].size):
            start, block = tail
            got = self._f.fetch_many([*magic, (offset, start - offset)])
            data = np.empty(length, np.uint8)
            data[: start - offset] = got[-1]
            data[start - offset :] = block[: end - start]
        elif head is not None:
            start, block = head
            bend = start + block.size
            got = self._f.fetch_many([*magic, (bend, end - bend)])
            data = np.empty(length, np.uint8)
            data[: bend - offset] = block[offset - start :]
            data[bend - offset :] = got[-1]
        else:
            got = self._f.fetch_many([*magic, (offset, length)])
            data = got[-1]
        if magic and expect is not None:
            self._check_magic(got[0].tobytes(), *expect)
        data.flags.writeable = False
        if expect is not None and offset == 0:
            self._check_magic(data[: len(expect[0])].tobytes(), *expect)
        with self._lock:
            self._recent.append((offset, data))
        return data

    def _check_magic(self, got: _Bytes, expected: _Bytes, what: str) -> None:
        if got != expected:
            raise FormatError(
                describe(self.fmt, "file", offset=0, field=what, expected=expected, got=got)
            )

    def _view(self, offset: int, length: int) -> np.ndarray:
        self._live()
        if length == 0:
            empty = np.empty(0, np.uint8)
            empty.flags.writeable = False
            return empty
        hit = self._cached(offset, length)
        if hit is not None:
            return hit
        data = self._fetch(offset, length)
        return data[-length:] if data.size != length else data

    def magic(self, expected: _Bytes, what: str = "magic") -> _Bytes:
        """The first ``len(expected)`` bytes, or, when the head was not fetched and the tail
        was (a remote zTensor), ``expected`` itself with the real check deferred to the next
        request (one request saved at open; a mismatch raises :class:`FormatError` then)."""
        n = min(len(expected), self.size)
        if self.defer_head and n == len(expected) and self._cached(0, n) is None:
            self._expect = (expected, what)
            self.defer_head = False
            return expected
        return self.bytes(0, n, what)

    def prefetch(self, ranges: Iterable[tuple[int, int]], gap: int = COALESCE_GAP) -> None:
        """Fetch many ``(offset, length)`` ranges ahead, coalescing neighbours at most ``gap``
        apart into one request; they stay cached until :meth:`release`."""
        self._live()
        todo = sorted(
            (o, o + n)
            for o, n in ranges
            if n > 0 and 0 <= o and o + n <= self.size and self._cached(o, n) is None
        )
        runs: list[list[int]] = []
        for s, e in todo:
            if runs and s - runs[-1][1] <= gap and e - runs[-1][0] <= COALESCE_MAX:
                runs[-1][1] = max(runs[-1][1], e)
            else:
                runs.append([s, e])
        if not runs:
            return
        expect, self._expect = self._expect, None
        if expect is not None:  # the deferred magic check rides along
            if runs[0][0] <= _HEAD_SLACK:
                runs[0][0] = 0
            else:
                runs.insert(0, [0, len(expect[0])])
        blocks = self._f.fetch_many([(s, e - s) for s, e in runs])
        if expect is not None:
            self._check_magic(blocks[0][: len(expect[0])].tobytes(), *expect)
        with self._lock:
            for (s, _e), block in zip(runs, blocks, strict=True):
                block.flags.writeable = False
                self._pinned.append((s, block))

    def release(self) -> None:
        """Drop prefetched ranges (arrays returned from them stay valid)."""
        with self._lock:
            self._pinned = self._pinned[:1] if self.remote else []

    # -- the MappedFile interface -------------------------------------------------------------
    def u8(self, offset: int, length: int, what: str = "range") -> np.ndarray:
        self.check(offset, length, what)
        return self._view(offset, length)

    def bytes(self, offset: int, length: int, what: str = "range") -> bytes:
        return self.u8(offset, length, what).tobytes()

    def array(
        self, offset: int, dtype: Any, shape: tuple[int, ...], what: str = "array"
    ) -> np.ndarray:
        dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        count = array_numel(self.fmt, what, shape, dt.itemsize, offset)
        nbytes = count * dt.itemsize
        self.check(offset, nbytes, what)
        if count == 0:
            self._live()
            return np.empty(shape, dtype=dt)
        return np.ndarray(shape, dtype=dt, buffer=self._view(offset, nbytes))

    def records(
        self, dtype: np.dtype, count: int, offset: int, what: str = "records"
    ) -> np.ndarray:
        n = count * dtype.itemsize
        self.check(offset, n, what)
        return np.frombuffer(self._view(offset, n), dtype=dtype, count=count)

    def pread_into(self, offset: int, dst: np.ndarray, what: str = "range") -> None:
        n = dst.nbytes
        self.check(offset, n, what)
        self._live()
        flat = dst.reshape(-1).view(np.uint8)
        hit = self._cached(offset, n) if n else flat[:0]
        if hit is not None:
            flat[:] = hit
        elif self._expect is not None:
            flat[:] = self._view(offset, n)
        else:
            self._f.fetch_into(offset, flat)

    def buffer(self) -> np.ndarray:
        """The whole file, read into memory once (a text format parsed in full needs it)."""
        return self._view(0, self.size)


class Pread:
    """Local file read with ``pread`` into fresh arrays (descriptor kept open, as the map)."""

    remote = False

    def __init__(self, path: str | os.PathLike[str], fmt: str) -> None:
        self.name = os.fspath(path)
        self.fmt = fmt
        self.fd: int | None = open_regular(path, fmt=fmt)
        try:
            self.size = os.fstat(self.fd).st_size
        except BaseException:
            os.close(self.fd)
            raise
        self.stats = {"requests": 0, "bytes": 0}
        import weakref

        self._release = weakref.finalize(self, os.close, self.fd)

    def close(self) -> None:
        if self.fd is not None:
            self._release()
            self.fd = None

    def identity(self) -> dict[str, Any] | None:
        if self.fd is None:
            return None
        return {"size": self.size, "mtime_ns": os.fstat(self.fd).st_mtime_ns}

    def reopen_spec(self) -> tuple[Any, ...]:
        return ("path", self.name, False)

    def fetch(self, offset: int, length: int) -> np.ndarray:
        out = np.empty(length, np.uint8)
        self.fetch_into(offset, out)
        return out

    def fetch_many(self, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        return [self.fetch(o, n) for o, n in ranges]

    def fetch_into(self, offset: int, dst: np.ndarray) -> None:
        if self.fd is None:
            raise ValueError(f"{self.fmt}: I/O operation on a closed file")
        n = dst.nbytes
        mv = memoryview(dst)  # type: ignore[arg-type]
        done = 0
        while done < n:
            got = os.preadv(self.fd, [mv[done : done + _PREAD_MAX]], offset + done)
            self.stats["requests"] += 1
            if got <= 0:
                raise TruncatedError(
                    describe(
                        self.fmt,
                        "range",
                        offset=offset + done,
                        detail="file shrank while reading",
                        expected=n,
                        got=done,
                    )
                )
            done += got
            self.stats["bytes"] += got

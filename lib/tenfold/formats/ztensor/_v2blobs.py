"""zTensor v2 blobs: where the writer places each part's bytes and how it writes them.

:class:`BlobWriter` (the base of :class:`~tenfold.ztensor.V2Writer`) pads to the writer's
alignment, writes a part from memory (:meth:`BlobWriter.write_part`) or from a stream of
byte chunks (:meth:`BlobWriter.write_stream`), computes its XXH3-64 digest on the way, and lets
a raw part whose bytes equal an earlier raw part's share that blob (compared byte for byte, not
only by hash): the copy just written is cut off again, as the temporary file is the writer's own.

Large raw parts from memory are written with ``pwrite`` straight from the caller's buffer, the
digest computed on a second thread a few blocks ahead (:mod:`._parthash`); with fsync, written
ranges are handed to the disk as the part goes (:func:`~tenfold.core.prealloc.start_writeback`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from ...core import parallel
from ...core.buffers import byte_view, exact_pieces
from ...core.checksums import xxh3_64, xxh3_hasher
from ...core.prealloc import preallocate, start_writeback
from . import _seekable
from ._parthash import PartHasher, pwrite_all
from ._v2values import le_pieces
from ._writerbase import AtomicFileWriter, size_refusal

__all__ = ["BlobWriter"]

FMT = "zt"
_CHUNK = 1 << 20  # bytes written, then hashed while still in cache
_PIPE_MIN = 8 << 20  # raw parts from this size: pwrite, hashed on a second thread
_BLOCK = 4 << 20  # a raw part is written (and hashed) in blocks of this size
_WRITEBACK = 32 << 20  # with fsync, written blocks are handed to the disk in steps of this
_AHEAD = 2  # the hashing thread is given this many blocks before the writing reaches them
_ZEROS = bytes(1 << 16)


def _two_cpus() -> bool:
    """True when this process may run on two CPUs or more (a hashing thread can help):
    :func:`tenfold.core.parallel.threads`, so ``TENFOLD_THREADS=1`` keeps the writer on one."""
    return parallel.threads() > 1


def _use_thread() -> bool:
    """Write large parts with the hashing thread (True) or on this thread alone: the thread
    whenever this process may run on two CPUs. On a quiet machine it hid the hash (best of 8
    pairs of 1 GiB writes: 176-177 ms against 184-195 ms alone, np.save 151-157 ms); with
    every core busy the one-thread way was 5-10 % faster, a smaller loss than that gain."""
    return _two_cpus()


class BlobWriter(AtomicFileWriter):
    """Places and writes the parts of a v2 file (see the module doc); the subclass keeps the
    manifest."""

    align: int
    _pos: int
    _blobs: dict[tuple[int, int], list[tuple[int, int]]]
    _hasher: PartHasher | None

    def _release(self) -> None:
        hasher, self._hasher = getattr(self, "_hasher", None), None
        if hasher is not None:
            hasher.close()

    def _pad_to_align(self) -> int:
        target = -(-self._pos // self.align) * self.align
        gap = target - self._pos
        while gap:
            n = min(gap, len(_ZEROS))
            self._f.write(_ZEROS[:n])
            gap -= n
        self._pos = target
        return target

    def _find(self, key: tuple[int, int], data: list[np.ndarray]) -> int | None:
        """Offset of an earlier blob with exactly these bytes (compared byte for byte)."""
        for off, length in self._blobs.get(key, ()):
            if length == 0:
                return off
            self._f.flush()
            fd = self._f.fileno()
            pos = 0
            same = True
            for piece in data:
                mv = byte_view(piece)
                for i in range(0, mv.nbytes, 4 * _CHUNK):  # bounded reads
                    want = mv[i : i + 4 * _CHUNK]
                    if os.pread(fd, want.nbytes, off + pos + i) != want:
                        same = False
                        break
                if not same:
                    break
                pos += mv.nbytes
            if same:
                return off
        return None

    def _write_part(
        self, arr: np.ndarray, dtype: str, ltype: str | None, enc: str | None
    ) -> dict[str, Any]:
        pieces = list(le_pieces(arr))
        if enc is None and hasattr(self._f, "truncate"):
            nbytes = sum(byte_view(p).nbytes for p in pieces)
            if nbytes:
                return self._write_raw(pieces, nbytes, dtype, ltype)
        h = xxh3_hasher()
        decoded = 0
        for piece in pieces:
            mv = byte_view(piece)
            h.update(mv)
            decoded += mv.nbytes
        digest = h.intdigest()
        if enc is not None:
            stored = [
                np.frombuffer(_seekable.encode(b"".join(byte_view(p) for p in pieces)), np.uint8)
            ]
            length = stored[0].size
            key = (xxh3_64(byte_view(stored[0])), length)
        else:
            stored = pieces
            length = decoded
            key = (digest, length)
        # Raw parts with equal bytes share one blob (as ztensor 2.1.2 does); encoded parts are
        # never shared, which is also what 2.1.2 writes.
        offset = self._find(key, stored) if enc is None else None
        if offset is None:
            offset = self._pad_to_align() if length else -(-self._pos // self.align) * self.align
            if length and hasattr(self._f, "fileno"):
                preallocate(self._f.fileno(), offset, length)
            for piece in stored:
                self._f.write(byte_view(piece))
            self._pos += length
            self._blobs.setdefault(key, []).append((offset, length))
        part: dict[str, Any] = {"dtype": dtype}
        if ltype is not None:
            part["type"] = ltype
        part["blob"] = [offset, length]
        if enc is not None:
            part["encoding"] = enc
            part["decoded_length"] = decoded
        part["digest"] = f"xxh3:{digest:016x}"
        return part

    def _write_raw(
        self, pieces: list[np.ndarray], length: int, dtype: str, ltype: str | None
    ) -> dict[str, Any]:
        """One pass over a raw part's bytes: written and hashed block by block while the block
        is in cache (large parts: :meth:`_write_piped`). If an earlier blob turns out to hold
        the same bytes, the copy is cut off again (the temporary file is ours) and the part
        points at the earlier blob."""
        offset = self._pad_to_align()
        if length >= _PIPE_MIN:
            digest = self._write_piped(pieces, offset, length)
        else:
            preallocate(self._f.fileno(), offset, length)
            h = xxh3_hasher()
            for piece in pieces:
                mv = byte_view(piece)
                for i in range(0, mv.nbytes, _CHUNK):
                    chunk = mv[i : i + _CHUNK]
                    self._f.write(chunk)
                    h.update(chunk)
            digest = h.intdigest()
        self._pos += length
        key = (digest, length)
        earlier = self._find(key, pieces)
        if earlier is not None:
            self._f.flush()
            self._f.seek(offset)
            self._f.truncate()
            self._pos = offset
            offset = earlier
        else:
            self._blobs.setdefault(key, []).append((offset, length))
        part: dict[str, Any] = {"dtype": dtype}
        if ltype is not None:
            part["type"] = ltype
        part["blob"] = [offset, length]
        part["digest"] = f"xxh3:{digest:016x}"
        return part

    def _write_piped(self, pieces: list[np.ndarray], offset: int, length: int) -> int:
        """Write a large raw part at ``offset`` straight from the caller's memory (``pwrite``
        of ``_BLOCK``-sized blocks, no copy through the file object's buffer) and return its
        XXH3-64.

        Either the writer's hashing thread computes the digest, kept ``_AHEAD`` blocks ahead
        of the writing (it reads each block from memory first, and the write then copies it
        from the shared cache), or each block is hashed and then written by this thread (the
        write copies it from cache); the second only with one CPU (:func:`_use_thread`).

        When the file will be fsynced, the written range is handed to the disk every
        ``_WRITEBACK`` bytes (:func:`start_writeback`), so the final fsync has less to wait for.
        """
        f = self._f
        f.flush()
        fd = f.fileno()
        preallocate(fd, offset, length)
        blocks = [
            mv[i : i + _BLOCK] for mv in map(byte_view, pieces) for i in range(0, mv.nbytes, _BLOCK)
        ]
        if _use_thread():
            digest = self._write_threaded(fd, blocks, offset)
        else:
            digest = self._write_inline(fd, blocks, offset, length)
        f.seek(offset + length)
        return digest

    def _write_inline(self, fd: int, blocks: list[memoryview], offset: int, length: int) -> int:
        h = xxh3_hasher()
        pos = offset
        for block in blocks:
            h.update(block)
            pwrite_all(fd, block, pos)
            pos += block.nbytes
        if self._fsync:
            start_writeback(fd, offset, length)
        return h.intdigest()

    def _write_threaded(self, fd: int, blocks: list[memoryview], offset: int) -> int:
        hasher = self._hasher
        if hasher is None or not hasher.alive:
            hasher = self._hasher = PartHasher()
        for block in blocks[:_AHEAD]:
            hasher.update(block)
        pos = flushed = offset  # with fsync: written up to flushed is on its way to the disk
        try:
            for j, block in enumerate(blocks):
                if j + _AHEAD < len(blocks):
                    hasher.update(blocks[j + _AHEAD])
                pwrite_all(fd, block, pos)
                pos += block.nbytes
                if self._fsync and (pos - flushed >= _WRITEBACK or j == len(blocks) - 1):
                    start_writeback(fd, flushed, pos - flushed)
                    flushed = pos
        except BaseException:
            hasher.discard()
            raise
        return hasher.digest()

    def _write_stream(
        self, chunks: Iterable[Any], length: int, what: str, check: Any = None
    ) -> tuple[int, int]:
        """Write a raw part of exactly ``length`` bytes (``length > 0``) from ``chunks``, any
        buffers, each written and hashed as it comes and never joined to another (memory stays
        at one chunk); return ``(offset, XXH3-64)``. ``check(u8_array, start)`` sees every
        chunk before it is written. More or fewer bytes than ``length`` is an
        :class:`EncodeError`, raised before an extra byte is written. A part equal to an earlier
        blob shares it (the bytes are compared in the file, in bounded reads)."""
        offset = self._pad_to_align()
        f = self._f
        preallocate(f.fileno(), offset, length)
        h = xxh3_hasher()
        got = 0
        for mv in exact_pieces(chunks, length, size_refusal(FMT, what, "stream", length)):
            if check is not None:
                check(np.frombuffer(mv, np.uint8), got)
            for i in range(0, mv.nbytes, _CHUNK):
                piece = mv[i : i + _CHUNK]
                f.write(piece)
                h.update(piece)
            got += mv.nbytes
            self._pos += mv.nbytes
        digest = h.intdigest()
        key = (digest, length)
        earlier = self._find_written(key, offset)
        if earlier is None:
            self._blobs.setdefault(key, []).append((offset, length))
            return offset, digest
        f.flush()
        f.seek(offset)
        f.truncate()
        self._pos = offset
        return earlier, digest

    def _find_written(self, key: tuple[int, int], offset: int) -> int | None:
        """Offset of an earlier blob with the bytes just written at ``offset`` (the file's own
        bytes compared, ``4 * _CHUNK`` at a time)."""
        length = key[1]
        candidates = self._blobs.get(key, ())
        if not candidates:
            return None
        self._f.flush()
        fd = self._f.fileno()
        for off, _ in candidates:
            for i in range(0, length, 4 * _CHUNK):
                n = min(4 * _CHUNK, length - i)
                if os.pread(fd, n, off + i) != os.pread(fd, n, offset + i):
                    break
            else:
                return off
        return None

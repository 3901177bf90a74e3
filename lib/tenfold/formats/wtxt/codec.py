"""The chunk codec: a chunk encoded to its ``ch`` line and framed base64 lines
(:class:`ChunkEncoder`); a chunk's base64 lines checked and decoded (line framing, parity,
alphabet and padding in the ``b64lines`` kernel; CRC-32C and SHA-256 of the decoded bytes); an
array decoded again from the text; the array-level digests fed chunk by chunk."""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
from typing import Any

import crc32c as _crc32c
import numpy as np
import pybase64

from ... import _kernels
from ...core import parallel
from ...core.checksums import crc32c
from ...core.release import release
from ...errors import FormatError, IntegrityError, TenfoldError, TruncatedError
from . import _spec as S
from ._text import Cursor, err
from .records import ArrayInfo, ChunkInfo, chunk_spans

__all__ = [
    "RELEASE_SPAN",
    "KERNEL_ERRORS",
    "kernel_error",
    "damaged",
    "decode_chunk",
    "decode_array",
    "ChunkEncoder",
    "BatchWriter",
    "batches",
    "ENDCH",
    "ArrayDigests",
    "FastXor",
    "update_view",
    "update_bytes",
]

#: Text pages already decoded are given back to the OS every this many bytes.
RELEASE_SPAN = 4 << 20
#: crc32c.crc32c is called directly on chunks up to this size (larger: the sliced helper).
_CRC_DIRECT = 64 << 20
#: The line that closes a chunk.
ENDCH = b"endch\n"

KERNEL_ERRORS = {
    1: (TruncatedError, "file ends inside the chunk's base64 lines"),
    2: (FormatError, "base64 line width"),
    3: (FormatError, "base64 line: character not in the base64 alphabet"),
    4: (FormatError, "base64 line: missing ' <parity>' after the text"),
    5: (FormatError, "base64 line: parity is not one lowercase hex digit"),
    6: (FormatError, "base64 line: parity nibble mismatch"),
    7: (FormatError, "base64 line: must end with LF right after the parity digit"),
    8: (FormatError, "base64 line: non-canonical padding bits"),
}


#: Text is assembled in a buffer of about this size and written with one call per batch.
_BATCH = 1 << 20


class ChunkEncoder:
    """Encodes chunks to their ``ch`` line, framed base64 lines and ``endch`` (reused buffer)."""

    def __init__(self) -> None:
        self.kern = _kernels.load("b64lines")
        self.buf = np.empty(0, np.uint8)

    def _room(self, pos: int, need: int) -> None:
        if pos + need > self.buf.size:
            grown = np.empty(max(pos + need, _BATCH + (_BATCH >> 2)), np.uint8)
            grown[:pos] = self.buf[:pos]
            self.buf = grown

    def put(self, pos: int, ix: int, off: int, raw: memoryview) -> int:
        """Append chunk ``ix`` (raw bytes ``raw`` at array offset ``off``) to the buffer at
        ``pos``; returns the new end."""
        ln = raw.nbytes
        crc = _crc32c.crc32c(raw) if ln <= _CRC_DIRECT else crc32c(raw)
        head = (
            f"ch ix={ix:06d} off={off:012d} len={ln} "
            f"sha256={hashlib.sha256(raw).hexdigest()} crc32c={crc:08x} b64=on width=76 "
            f"lines={S.b64_lines(ln)}\n"
        ).encode()
        b64 = pybase64.b64encode(raw)
        n = len(b64)
        self._room(pos, len(head) + n + 3 * (-(-n // S.WIDTH)) + len(ENDCH))
        end: int = self.kern.frame_block(head, b64, ENDCH, self.buf, pos, S.WIDTH)
        return end

    def block(self, ix: int, off: int, raw: memoryview) -> bytes:
        """One chunk's complete text."""
        n = self.put(0, ix, off, raw)
        return self.buf[:n].tobytes()

    def put_range(self, raw: memoryview, layout: list[tuple[int, int]], a: int, b: int) -> int:
        """Encode chunks ``a`` to ``b`` (exclusive) of ``layout`` (``raw``'s chunks) into the
        buffer from its start; returns the end of the text (``self.buf[:end]``)."""
        self._room(0, sum(_text_size(ln) for _, ln in layout[a:b]))
        pos = 0
        for ix in range(a, b):
            off, ln = layout[ix]
            pos = self.put(pos, ix, off, raw[off : off + ln])
        return pos


def _text_size(ln: int) -> int:
    """At least the text size of a chunk of ``ln`` bytes (``ch`` line, framed lines, endch)."""
    n = 4 * -(-ln // 3)
    return 224 + n + 3 * -(-n // S.WIDTH) + len(ENDCH)


def batches(layout: list[tuple[int, int]], size: int = _BATCH) -> list[tuple[int, int]]:
    """Chunk index ranges ``(a, b)`` of ``layout`` holding about ``size`` raw bytes each (at
    least one chunk each).

    >>> batches([(0, 4), (4, 4), (8, 4), (12, 1)], 8)
    [(0, 2), (2, 4)]
    """
    out = []
    a = got = 0
    for ix, (_, ln) in enumerate(layout):
        got += ln
        if got >= size:
            out.append((a, ix + 1))
            a, got = ix + 1, 0
    if a < len(layout):
        out.append((a, len(layout)))
    return out


class BatchWriter:
    """Writes arrays' chunk text: batches of chunks (about 1 MiB of raw bytes each) are
    encoded on ``pool`` (several at once) while the earlier ones are written in file order.
    Each of ``slots`` batches in flight has its own reused buffer, so the text held is
    bounded; an :class:`~tenfold.core.parallel.Inline` pool encodes and writes one by one."""

    def __init__(self, pool: concurrent.futures.Executor, slots: int) -> None:
        self.pool = pool
        self.encs = [ChunkEncoder() for _ in range(max(1, slots))]

    def write(
        self, f: Any, raw: memoryview, clen: int, prefix: bytes = b"", suffix: bytes = b""
    ) -> int:
        """Write ``prefix``, every chunk of ``raw`` (chunk length ``clen``) and ``suffix`` to
        ``f``; returns the number of bytes written."""
        layout = S.chunk_layout(raw.nbytes, clen)
        written = f.write(prefix)
        pending: collections.deque[tuple[ChunkEncoder, concurrent.futures.Future[int]]]
        pending = collections.deque()
        try:
            for k, (a, b) in enumerate(batches(layout)):
                if len(pending) == len(self.encs):
                    written += self._out(f, *pending.popleft())
                enc = self.encs[k % len(self.encs)]
                pending.append((enc, self.pool.submit(enc.put_range, raw, layout, a, b)))
            while pending:
                written += self._out(f, *pending.popleft())
        finally:
            for _, fut in pending:  # a failure: nothing may still use the buffers or ``raw``
                fut.cancel()
            concurrent.futures.wait([fut for _, fut in pending])
        return written + f.write(suffix)

    @staticmethod
    def _out(f: Any, enc: ChunkEncoder, fut: concurrent.futures.Future[int]) -> int:
        end = fut.result()  # first: the encoding may have grown the buffer
        n: int = f.write(S.mview(enc.buf)[:end])
        return n


def kernel_error(
    status: int, text: np.ndarray, pos: int, first_line: int, line: int, base: int
) -> Exception:
    cls, what = KERNEL_ERRORS.get(status, (FormatError, f"base64 line: status {status}"))
    if status in (3, 7) and pos < text.size:
        b = int(text[pos])
        if b == 13:
            what += " (carriage return)"
        elif b == 9:
            what += " (tab)"
        elif b == 32:
            what += " (trailing or extra space)"
        elif b >= 0x80:
            what += f" (non-ASCII byte 0x{b:02x})"
        elif status == 3:
            what += f" ({chr(b)!r})"
    if status == 6:
        # recompute for the message: the nibble the line's characters give
        start = int(text[:pos].tobytes().rfind(b"\n")) + 1
        x = 0
        for c in text[start : pos - 1].tobytes():
            x ^= c
        return err(
            cls,
            first_line + line,
            base + pos,
            what,
            expected=f"'{x & 15:x}'",
            got=f"'{chr(int(text[pos]))}'",
        )
    return err(cls, first_line + line, base + pos, what)


def damaged(ch: ChunkInfo, exc: TenfoldError, collect: bool) -> None:
    """Raise ``exc``, or (collecting) record it as the chunk's damage at the line it names."""
    if not collect:
        raise exc
    ch.damage, ch.damage_line = str(exc), exc.line


def decode_chunk(
    cur: Cursor,
    kern: Any,
    data: np.ndarray,
    ch: ChunkInfo,
    scratch: np.ndarray,
    buf: np.ndarray | None,
    collect: bool,
) -> bytes | None:
    """Decode and check one chunk's base64 lines at ``cur``; its bytes go to ``buf`` (when
    given) and are returned. None: damage recorded in ``ch`` (only with ``collect``)."""
    status, line, p = kern.unframe_lines(cur.mv[cur.pos :], ch.lines, scratch, S.WIDTH)
    if status != 0:
        exc = kernel_error(status, data[cur.pos :], p, ch.lineno + 1, line, cur.pos)
        if not collect or status == 1:
            raise exc
        ch.damage = str(exc)
        ch.damage_line = ch.lineno + 1 + line
        if not cur.skip_lines(ch.lines):
            raise err(TruncatedError, cur.lineno, cur.pos, "file ends inside a chunk")
        return None
    cur.pos += p
    cur.lineno += ch.lines
    n = p - 3 * ch.lines
    want = 4 * -(-ch.length // 3)
    if n != want:
        last = ch.lineno + ch.lines
        w = n - S.WIDTH * (ch.lines - 1)
        exc = err(
            FormatError,
            last,
            cur.pos - w - 3,
            "base64 line width (last line of the chunk)",
            expected=want - S.WIDTH * (ch.lines - 1),
            got=w,
        )
        damaged(ch, exc, collect)
        return None
    # the kernel has checked the alphabet and the padding; validate=True is pybase64's fast path
    raw = pybase64.b64decode(S.mview(scratch)[:n], validate=True)
    crc = f"{_crc32c.crc32c(raw) if n <= _CRC_DIRECT else crc32c(raw):08x}"
    # in that order: the CRC-32C first (cheap), the SHA-256 only when it holds
    for field, stored, digest in (
        ("crc32c", ch.crc32c, lambda: crc),
        ("sha256", ch.sha256, lambda: hashlib.sha256(raw).hexdigest()),
    ):
        seen = digest()
        if seen != stored:
            exc = err(
                IntegrityError,
                ch.lineno,
                ch.offset,
                f"chunk {field} mismatch",
                expected=stored,
                got=seen,
            )
            damaged(ch, exc, collect)
            return None
    if buf is not None:
        S.mview(buf)[ch.off : ch.off + ch.length] = raw
    return raw


def decode_array(data: np.ndarray, a: ArrayInfo) -> np.ndarray:
    """Array ``a``'s bytes decoded again from ``data``, the text ``parse`` indexed it in.

    The first pass verified every chunk (line framing, parity, alphabet, canonical padding,
    CRC-32C, SHA-256) and the array's SHA-256, HMAC and root on top. This pass checks the
    framing again in the kernel that gathers the base64 text, decodes it, and compares each
    chunk's SHA-256 with the digest the first pass verified: bytes that equal every verified
    chunk digest are the verified array, so the array's own SHA-256 and the CRC-32Cs need
    not be recomputed. Text that changed after the file was opened raises what the first
    pass would (FormatError naming the line) or :class:`IntegrityError` naming the chunk.
    The text pages are given back as they are decoded; the result is a new owned array.
    """
    kern = _kernels.load("b64lines")
    buf = np.empty(a.nbytes, np.uint8)
    out = S.mview(buf)
    mv = S.mview(data)
    scratch = np.empty(0, np.uint8)
    released = first = -1
    pos = 0
    for ix, (off, length, text, digest) in enumerate(chunk_spans(a.chunks)):
        if not length:
            continue
        lines = S.b64_lines(length)
        if scratch.size < lines * S.WIDTH:
            scratch = np.empty(lines * S.WIDTH, np.uint8)
        status, _, p = kern.unframe_lines(mv[text:], lines, scratch, S.WIDTH)
        n = p - 3 * lines
        if status != 0 or n != 4 * -(-length // 3):
            _first_pass_error(data, a.chunks[ix], kern, scratch)
        raw = pybase64.b64decode(S.mview(scratch)[:n], validate=True)
        if hashlib.sha256(raw).digest() != digest:
            raise _changed(a.chunks[ix], raw)
        out[off : off + length] = raw
        if first < 0:
            first = released = text
        pos = text + p
        if pos - released >= RELEASE_SPAN:
            release(data[released:pos])
            released = pos
    if first >= 0:
        release(data[released:pos])
    return buf


def _first_pass_error(data: np.ndarray, ch: ChunkInfo, kern: Any, scratch: np.ndarray) -> None:
    """Raise what :func:`decode_chunk` (the first pass) raises on chunk ``ch``'s text now."""
    cur = Cursor(data)
    cur.pos, cur.lineno = ch.text, ch.lineno + 1
    decode_chunk(cur, kern, data, ch, scratch, None, False)
    raise _changed(ch, b"")  # pragma: no cover - the text above failed the same checks


def _changed(ch: ChunkInfo, raw: bytes) -> TenfoldError:
    return err(
        IntegrityError,
        ch.lineno,
        ch.offset,
        "chunk sha256 mismatch (the file changed after it was opened)",
        expected=ch.sha256,
        got=hashlib.sha256(raw).hexdigest(),
    )


class ArrayDigests:
    """Array-level digests fed in order (inline, or on one worker thread)."""

    def __init__(self, workers: int) -> None:
        self.pool = parallel.Pool(1, "wtxt-hash") if workers > 1 else None
        self.futures: list[concurrent.futures.Future[None]] = []
        self.all = hashlib.sha256()

    def submit(self, fn: Any, *args: Any) -> None:
        if self.pool is None:
            fn(*args)
        else:
            self.futures.append(self.pool.submit(fn, *args))

    def wait(self) -> None:
        for f in self.futures:
            f.result()
        self.futures.clear()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def update_view(hashers: list[Any], view: np.ndarray) -> None:
    mv = S.mview(view)
    for h in hashers:
        h.update(mv)


def update_bytes(hashers: list[Any], raw: bytes) -> None:
    for h in hashers:
        h.update(raw)


class FastXor:
    """``fastxor`` of one array fed in chunks of any length (``xor_u64_le`` of the whole
    array: little-endian u64 words, the last one zero-padded)."""

    def __init__(self, scan: Any) -> None:
        self.scan = scan
        self.acc = 0
        self.tail = b""

    def feed(self, raw: bytes) -> None:
        mv = memoryview(raw)
        if self.tail:
            k = 8 - len(self.tail)
            head = self.tail + bytes(mv[:k])
            mv = mv[k:]
            if len(head) < 8:
                self.tail = head
                return
            self.acc = self.scan.xor_u64_le(head, self.acc)
        n = len(mv) - len(mv) % 8
        if n:
            self.acc = self.scan.xor_u64_le(mv[:n], self.acc)
        self.tail = bytes(mv[n:])

    def end(self, acc: int) -> int:
        """The file's running ``fastxor`` ``acc`` with this array folded in; resets."""
        if self.tail:
            self.acc = self.scan.xor_u64_le(self.tail, self.acc)
        out = acc ^ self.acc
        self.acc, self.tail = 0, b""
        return out

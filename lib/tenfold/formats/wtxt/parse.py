"""Strict, line-numbered WTXT parser.

The parser walks the file once: header lines, then per array its ``arr``/``idx`` lines and its
chunks, parsing each chunk *by count* (exactly ``lines=`` base64 lines, then ``endch``). The
``b64lines`` kernel validates widths, alphabet, padding, separators, parity nibbles and line ends
in the same pass that gathers the base64 text; pybase64 decodes it; CRC-32C and SHA-256 of every
chunk and the array-level hashes (SHA-256, HMAC, ``sha256_all``) are computed as the chunks
arrive, optionally on a second thread (:mod:`.codec`). The grammar of one line is in
:mod:`._text`; the records the parser fills are in :mod:`.records`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ... import _kernels
from ...core import parallel
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.release import release
from ...errors import FormatError, IntegrityError, LimitError, TruncatedError, UnsupportedError
from . import _spec as S
from ._crypto import array_macs, hmac_state
from ._text import Cursor, audit_fields, char_problem, err, fields
from .codec import (
    ENDCH,
    RELEASE_SPAN,
    ArrayDigests,
    FastXor,
    damaged,
    decode_chunk,
    update_bytes,
    update_view,
)
from .records import ArrayInfo, ChunkInfo, ChunkTable, Parsed

__all__ = ["parse", "check_ts", "chunk_header"]


def parse(
    data: np.ndarray,
    *,
    collect: bool = False,
    hmac_keys: Iterable[bytes] = (),
    limits: Limits = DEFAULT_LIMITS,
    workers: int | None = None,
    keep: bool = True,
) -> Parsed:
    """Parse and check a whole WTXT text held in ``data`` (a read-only uint8 array).

    Structural violations raise :class:`FormatError` (or a subclass) naming the line. Chunk
    damage (parity, CRC-32C, SHA-256, base64) raises as well unless ``collect`` is true, in
    which case it is recorded in :attr:`ChunkInfo.damage` and parsing continues by count.
    Array hashes are computed, not compared: see :mod:`.checks`.

    ``keep=False`` keeps no decoded bytes: each chunk is decoded, checked and fed to the
    array and file digests, then dropped, and the text pages already parsed are given back
    (:func:`~tenfold.core.release.release`), so parsing needs about one chunk of memory
    whatever the file size; :func:`.codec.decode_array` decodes an array again on demand.

    ``workers`` (default: :func:`tenfold.core.parallel.threads`, the CPUs this process may
    use): with two or more, the array-level digests are computed on a second thread while
    this one checks and decodes the chunks.
    """
    parser = _Parser(data, collect, [bytes(k) for k in hmac_keys], limits, keep)
    return parser.run(parallel.threads() if workers is None else workers)


def check_ts(ts: str, ln: int, off: int) -> None:
    """``ts`` is a real UTC date and time (the grammar checked its shape)."""
    import datetime

    try:
        datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise err(
            FormatError,
            ln,
            off,
            "meta 'ts' is not a valid UTC time",
            expected="YYYY-MM-DDTHH:MM:SSZ",
            got=ts,
        ) from None


def _check_magic(cur: Cursor) -> None:
    """Line 1 is ``WTXT 1``; consumed."""
    first = cur.peek_raw()
    if first is None:
        raise err(TruncatedError, 1, 0, "empty file; expected 'WTXT 1'")
    if first != b"WTXT 1":
        if first.startswith(b"WTXT"):
            bad = char_problem(first)
            if bad is not None:
                raise err(FormatError, 1, bad[0], bad[1])
        if first.startswith(b"WTXT-DELTA"):
            raise err(FormatError, 1, 0, "this is a DELTA file; apply it with apply_delta")
        if first.startswith(S.PREFIX) and first[len(S.PREFIX) :].isdigit():
            raise err(
                UnsupportedError,
                1,
                0,
                "unsupported version",
                expected="'WTXT 1'",
                got=repr(first.decode("latin-1")),
            )
        raise err(
            FormatError,
            1,
            0,
            "bad magic",
            expected="'WTXT 1'",
            got=repr(first[:16].decode("latin-1")),
        )
    cur.line()


def _header(cur: Cursor) -> dict[str, Any]:
    """The ``meta``, ``cap``, ``root`` (or ``root_pending``) and optional ``sign`` lines, as
    the :class:`Parsed` fields they fill."""
    _check_magic(cur)
    text, ln, off = cur.line("meta")
    meta = fields(text, "meta", S.META_FIELDS, ln, off)
    check_ts(meta["ts"], ln, off)
    text, ln, off = cur.line("cap")
    cap = fields(text, "cap", S.CAP_FIELDS, ln, off)["ext"].split(",")
    if len(set(cap)) != len(cap):
        raise err(FormatError, ln, off, "duplicate cap item", got=",".join(cap))
    text, ln, off = cur.line("root")
    head: dict[str, Any] = {"meta": meta, "cap": cap, "root_lineno": ln, "root_offset": off}
    if text.startswith("root_pending"):
        if text != S.PENDING_LINE:
            raise err(
                FormatError,
                ln,
                off,
                "malformed root_pending line",
                expected=repr(S.PENDING_LINE),
                got=repr(text[:120]),
            )
        head.update(root=None, pending=True)
    else:
        head.update(root=fields(text, "root", S.ROOT_FIELDS, ln, off), pending=False)
    head.update(root_end=cur.pos, sign=None, sign_span=None, sign_lineno=None)
    raw = cur.peek_raw()
    if raw is not None and raw.startswith(b"sign"):
        text, ln, off = cur.line()
        if head["pending"]:
            raise err(
                FormatError,
                ln,
                off,
                "a root_pending file carries no sign line (the WSUM sidecar is signed)",
            )
        head.update(
            sign=fields(text, "sign", S.SIGN_FIELDS, ln, off),
            sign_span=(off, cur.pos),
            sign_lineno=ln,
        )
    return head


def _trailer(cur: Cursor) -> tuple[dict[str, str] | None, int | None]:
    """The optional ``audit`` line and ``endwtxt``, the file's last line."""
    audit = None
    audit_ln = None
    text, ln, off = cur.line("'endwtxt'")
    if text.startswith("audit"):
        audit = audit_fields(text, ln, off)
        audit_ln = ln
        text, ln, off = cur.line("'endwtxt'")
    if text != "endwtxt":
        raise err(
            FormatError,
            ln,
            off,
            "unexpected line",
            expected="'arr ...', 'audit ...' or 'endwtxt'",
            got=repr(text[:40]),
        )
    if not cur.at_end():
        raise err(
            FormatError,
            cur.lineno,
            cur.pos,
            "data after 'endwtxt'",
            expected="end of file",
            got=f"{cur.size - cur.pos} more bytes",
        )
    return audit, audit_ln


def _closing_line(cur: Cursor, tag: str, detail: str) -> int:
    """Consume the line ``tag`` (``endch``/``endarr``) that must come now; its line number."""
    text, ln, off = cur.line(tag)
    if text != tag:
        raise err(FormatError, ln, off, detail, expected=tag, got=repr(text[:40]))
    return ln


class _Parser:
    """The state of one pass over a WTXT text: the cursor, the file-level digests, the
    arrays parsed so far and the buffers reused from chunk to chunk."""

    def __init__(
        self, data: np.ndarray, collect: bool, keys: list[bytes], limits: Limits, keep: bool
    ) -> None:
        self.data = data
        self.collect = collect  # record chunk damage and go on (verify, inspect)
        self.keys = keys
        self.limits = limits
        self.keep = keep  # keep the decoded bytes (else digest each chunk and drop it)
        self.cur = Cursor(data)
        self.kern = _kernels.load("b64lines")
        self.scan = _kernels.load("scan")
        self.xor = FastXor(self.scan)
        self.fastxor = 0
        self.arrays: list[ArrayInfo] = []
        self.scratch = np.empty(0, np.uint8)
        self.released = 0  # text before this offset has been given back
        self.total_chunks = 0

    def run(self, workers: int) -> Parsed:
        head = _header(self.cur)
        self.digests = ArrayDigests(workers)
        try:
            while self._next_is_array():
                self.arrays.append(self._array())
        finally:
            self.digests.wait()
            self.digests.close()
        audit, audit_ln = _trailer(self.cur)
        return Parsed(
            arrays=self.arrays,
            audit=audit,
            audit_lineno=audit_ln,
            computed_all=self.digests.all.hexdigest(),
            computed_fastxor=self.fastxor,
            size=self.cur.size,
            data=self.data,
            **head,
        )

    def _next_is_array(self) -> bool:
        raw = self.cur.peek_raw()
        if raw is None:
            raise err(
                TruncatedError, self.cur.lineno, self.cur.pos, "file ends; expected 'endwtxt'"
            )
        return raw.startswith(b"arr ")

    # -- one array ----------------------------------------------------------------------------
    def _array(self) -> ArrayInfo:
        """One ``arr`` block: its header lines, every chunk, ``endarr``; digests folded in."""
        cur = self.cur
        arr_text, ln, off = cur.line()
        a = fields(arr_text, "arr", S.ARR_FIELDS, ln, off)
        self._check_name(a["name"], ln, off)
        shape, nbytes = self._check_size(a, ln, off)
        itemsize = S.DTYPES[a["dtype"]].itemsize
        idx = self._idx(shape, itemsize)
        rpc = int(idx["rows_per_chunk"]) if idx and idx["row_blocking"] == "on" else None
        clen = S.chunk_length(shape, itemsize, rpc)
        if nbytes and clen == 0:
            raise err(FormatError, ln, off, "chunk length is zero for a non-empty array")
        nchunks = 1 if nbytes == 0 else -(-nbytes // clen)
        self._count_chunks(nchunks, ln, off)
        info = ArrayInfo(
            a["name"],
            a["dtype"],
            shape,
            nbytes,
            a["sha256"],
            a["hmac"],
            a["salt"],
            arr_text,
            ln,
            idx,
            [] if self.keep or self.collect else ChunkTable(clen, nbytes),
            offset=off,
        )
        self._chunks(info, clen, nchunks)
        info.end_lineno = _closing_line(cur, "endarr", "expected 'endarr' after the last chunk")
        return info

    def _check_name(self, name: str, ln: int, off: int) -> None:
        arrays, limits = self.arrays, self.limits
        if arrays and name.encode() <= arrays[-1].name.encode():
            what = "duplicate array name" if name == arrays[-1].name else "array name order"
            raise err(
                FormatError,
                ln,
                off,
                what,
                expected=f"a name after {arrays[-1].name!r} (bytewise)",
                got=name,
            )
        if len(arrays) >= limits.max_objects:
            raise err(
                LimitError,
                ln,
                off,
                "too many arrays",
                expected=f"<= {limits.max_objects}",
                got=len(arrays) + 1,
            )

    def _check_size(self, a: dict[str, str], ln: int, off: int) -> tuple[tuple[int, ...], int]:
        """Shape and byte count of an ``arr`` line, checked against each other, the rest of
        the file and the limits."""
        cur, limits = self.cur, self.limits
        shape = tuple(int(d) for d in a["shape"].split(","))
        if len(shape) > limits.max_ndim:
            raise err(
                LimitError,
                ln,
                off,
                "too many dimensions",
                expected=f"<= {limits.max_ndim}",
                got=len(shape),
            )
        nbytes = int(a["bytes"])
        want = math.prod(shape) * S.DTYPES[a["dtype"]].itemsize
        if nbytes != want:
            raise err(
                FormatError,
                ln,
                off,
                "arr 'bytes' does not match shape and dtype",
                expected=want,
                got=nbytes,
            )
        if 4 * -(-nbytes // 3) > cur.size - cur.pos:
            raise err(
                TruncatedError,
                ln,
                off,
                "arr 'bytes' larger than the rest of the file can hold",
                expected=f"<= {(cur.size - cur.pos) * 3 // 4}",
                got=nbytes,
            )
        if nbytes > limits.max_decoded_bytes:
            raise err(
                LimitError,
                ln,
                off,
                "array above max_decoded_bytes",
                expected=f"<= {limits.max_decoded_bytes}",
                got=nbytes,
            )
        return shape, nbytes

    def _idx(self, shape: tuple[int, ...], itemsize: int) -> dict[str, str] | None:
        """The optional ``idx`` line, its ``row_size`` checked against the shape."""
        raw = self.cur.peek_raw()
        if raw is None or not raw.startswith(b"idx"):
            return None
        text, iln, ioff = self.cur.line()
        idx = fields(text, "idx", S.IDX_FIELDS, iln, ioff)
        rs = S.row_size(shape, itemsize)
        if int(idx["row_size"]) != rs:
            raise err(
                FormatError,
                iln,
                ioff,
                "idx 'row_size' mismatch",
                expected=rs,
                got=int(idx["row_size"]),
            )
        if idx["row_blocking"] == "on" and int(idx["rows_per_chunk"]) < 1:
            raise err(FormatError, iln, ioff, "idx 'rows_per_chunk' must be >= 1")
        return idx

    def _count_chunks(self, nchunks: int, ln: int, off: int) -> None:
        self.total_chunks += nchunks
        if self.total_chunks > self.limits.max_objects:
            raise err(
                LimitError,
                ln,
                off,
                "too many chunks",
                expected=f"<= {self.limits.max_objects}",
                got=self.total_chunks,
            )

    # -- the chunks of one array ----------------------------------------------------------------
    def _chunks(self, info: ArrayInfo, clen: int, nchunks: int) -> None:
        """Every chunk of ``info``, decoded, checked and fed to the array's SHA-256 and
        HMACs, ``sha256_all`` and ``fastxor``; sets the array's computed fields."""
        nbytes = info.nbytes
        buf = np.zeros(nbytes, np.uint8) if self.keep else None
        arr_sha = hashlib.sha256()
        macs = array_macs(self.keys, info.salt) if info.hmac != S.ZERO64 and self.keys else []
        self.digests.submit(self.digests.all.update, info.line.encode())
        group = [arr_sha, self.digests.all, *macs]
        span_start = 0  # keep=True: the bytes before this offset have been digested
        for ix in range(nchunks):
            length = min(clen, nbytes - ix * clen) if nbytes else 0
            ch = chunk_header(self.cur, ix, ix * clen, length, self.collect)
            info.chunks.append(ch)
            got = self._decode(ch, buf)
            if buf is None:  # keep=False: digest this chunk now, keep nothing
                self._digest_chunk(group, ch, got)
            elif ch.off + ch.length - span_start >= RELEASE_SPAN or ix == nchunks - 1:
                end = ch.off + ch.length
                self.digests.submit(update_view, group, buf[span_start:end])
                span_start = end
            self._endch(ch)
        self.digests.wait()
        info.raw = buf
        info.computed_sha256 = arr_sha.hexdigest()
        if buf is not None:
            self.fastxor = self.scan.xor_u64_le(buf, self.fastxor)
        else:
            self.fastxor = self.xor.end(self.fastxor)
        info.hmac_state = hmac_state(info.hmac, macs, self.keys)

    def _decode(self, ch: ChunkInfo, buf: np.ndarray | None) -> bytes | None:
        """The chunk's bytes (also copied into ``buf``), or None: empty or damaged."""
        if not ch.length or ch.damage is not None:
            return None
        n = ch.lines * S.WIDTH
        if self.scratch.size < n:
            self.scratch = np.empty(n, np.uint8)
        return decode_chunk(self.cur, self.kern, self.data, ch, self.scratch, buf, self.collect)

    def _digest_chunk(self, group: list[Any], ch: ChunkInfo, got: bytes | None) -> None:
        """keep=False: feed one chunk to the digests and give back the text parsed so far."""
        if got is None:  # damaged (collect): zeros, as keep=True's buffer holds
            got = bytes(ch.length)
        self.digests.submit(update_bytes, group, got)
        self.xor.feed(got)
        if self.cur.pos - self.released >= RELEASE_SPAN:
            release(self.data[self.released : self.cur.pos])
            self.released = self.cur.pos

    def _endch(self, ch: ChunkInfo) -> None:
        cur = self.cur
        if cur.mv[cur.pos : cur.pos + 6] == ENDCH:
            cur.pos += 6
            cur.lineno += 1
            return
        _closing_line(cur, "endch", f"expected 'endch' after the chunk's {ch.lines} base64 lines")


def chunk_header(cur: Cursor, ix: int, off: int, length: int, collect: bool) -> ChunkInfo:
    """The ``ch`` line of chunk ``ix`` (expected at array offset ``off``, ``length`` bytes),
    consumed; an empty chunk's digests are checked here (it has no lines to decode)."""
    lineno, pos = cur.lineno, cur.pos
    # fast path: the regular expression straight on the mapped text, then its LF
    m = S.CH_RE.match(cur.mv, pos)
    if m is None or m.end() >= cur.size or cur.mv[m.end()] != 10:
        raw = cur.peek_raw()
        if raw is None:
            raise err(TruncatedError, lineno, pos, f"file ends; expected chunk {ix:06d}")
        m = S.CH_RE.fullmatch(raw)
        if m is None:
            text, _, _ = cur.line("ch")
            fields(text, "ch", S.CH_FIELDS, lineno, pos)
            # pragma: no cover - fields() raises on whatever CH_RE rejects
            raise AssertionError("unreachable: fields() accepts what CH_RE rejects")
    cur.pos = pos + (m.end() - m.start()) + 1
    cur.lineno += 1
    g_ix, g_off, g_len, g_sha, g_crc, g_lines = m.groups()
    cix, coff, clen, lines = int(g_ix), int(g_off), int(g_len), int(g_lines)
    if cix != ix:
        raise err(
            FormatError,
            lineno,
            pos,
            "ch 'ix' not contiguous",
            expected=f"{ix:06d}",
            got=m.group(1).decode(),
        )
    if coff != off:
        raise err(
            FormatError,
            lineno,
            pos,
            "ch 'off' mismatch",
            expected=f"{off:012d}",
            got=m.group(2).decode(),
        )
    if clen != length:
        raise err(FormatError, lineno, pos, "ch 'len' mismatch", expected=length, got=clen)
    if lines != S.b64_lines(clen):
        raise err(
            FormatError, lineno, pos, "ch 'lines' mismatch", expected=S.b64_lines(clen), got=lines
        )
    ch = ChunkInfo(cix, coff, clen, g_sha.decode(), g_crc.decode(), lines, lineno, pos)
    ch.text = cur.pos
    if clen == 0:
        _check_empty(ch, collect)
    return ch


def _check_empty(ch: ChunkInfo, collect: bool) -> None:
    """An empty chunk has no base64 lines to decode, but its digests are checked all the same."""
    for what, declared, computed in (
        ("crc32c", ch.crc32c, S.EMPTY_CRC32C),
        ("sha256", ch.sha256, S.EMPTY_SHA256),
    ):
        if declared != computed:
            exc = err(
                IntegrityError,
                ch.lineno,
                ch.offset,
                f"chunk {what} mismatch (empty chunk, len=0)",
                expected=declared,
                got=computed,
            )
            damaged(ch, exc, collect)
            return

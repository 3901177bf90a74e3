"""Strict, line-numbered WTXT parser and the reader built on it.

The parser walks the file once: header lines, then per array its ``arr``/``idx`` lines and its
chunks, parsing each chunk *by count* (exactly ``lines=`` base64 lines, then ``endch``). The
``b64lines`` kernel validates widths, alphabet, padding, separators, parity nibbles and line ends
in the same pass that gathers the base64 text; pybase64 decodes it; CRC-32C and SHA-256 of every
chunk and the array-level hashes (SHA-256, HMAC, ``sha256_all``) are computed as the chunks
arrive, optionally on a second thread.
"""

from __future__ import annotations

import array
import concurrent.futures
import dataclasses
import hashlib
import hmac as _hmac
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import crc32c as _crc32c
import numpy as np
import pybase64

from .. import _kernels
from ..core import parallel
from ..core.bounds import DEFAULT_LIMITS, Limits
from ..core.checksums import crc32c
from ..core.reader import MappedReader, TensorInfo
from ..core.release import release
from ..core.report import ERROR, INFO, OK
from ..errors import (
    FormatError,
    IntegrityError,
    LimitError,
    TenfoldError,
    TruncatedError,
    UnsupportedError,
    describe,
)
from . import _spec as S
from ._crypto import check_signature, read_wsum, wsum_path, wsum_signature_state
from ._crypto import keyid_of as keyid_of  # noqa: F401  (public here since before _crypto)
from ._text import Cursor, at_lines, audit_fields, char_problem, err, fields

__all__ = [
    "WtxtFile",
    "open",
    "read",
    "load",
    "ChunkInfo",
    "ArrayInfo",
    "Parsed",
    "parse",
]

_SPAN = 4 << 20
_CRC_DIRECT = 64 << 20
_ENDCH = b"endch\n"


@dataclasses.dataclass
class ChunkInfo:
    """One ``ch`` block: its fields, where it sits in the text, and any damage found."""

    ix: int
    off: int
    length: int
    sha256: str
    crc32c: str
    lines: int
    lineno: int
    offset: int
    damage: str | None = None
    damage_line: int | None = None
    #: offset of the chunk's first base64 line (just after the ``ch`` line)
    text: int = 0


class _Chunks(Sequence[ChunkInfo]):
    """The chunk rows of one array, stored compactly (about 60 bytes a chunk instead of
    about 550 for :class:`ChunkInfo` objects: a 20 GB file has 600 000 chunks) and rebuilt as
    :class:`ChunkInfo` on access. Used by ``parse(keep=False)`` without ``collect`` (no
    chunk can be damaged then: damage raises)."""

    def __init__(self, clen: int, nbytes: int) -> None:
        self.clen, self.nbytes = clen, nbytes
        self.sha = bytearray()
        self.crc = array.array("I")
        self.pos = array.array("q")  # per chunk: lineno, offset, text

    def append(self, ch: ChunkInfo) -> None:
        self.sha += bytes.fromhex(ch.sha256)
        self.crc.append(int(ch.crc32c, 16))
        self.pos.extend((ch.lineno, ch.offset, ch.text))

    def __len__(self) -> int:
        return len(self.crc)

    @overload
    def __getitem__(self, i: int) -> ChunkInfo: ...
    @overload
    def __getitem__(self, i: slice) -> list[ChunkInfo]: ...
    def __getitem__(self, i: int | slice) -> ChunkInfo | list[ChunkInfo]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        off = i * self.clen
        length = min(self.clen, self.nbytes - off) if self.nbytes else 0
        lineno, offset, text = self.pos[3 * i : 3 * i + 3]
        return ChunkInfo(
            i,
            off,
            length,
            self.sha[32 * i : 32 * i + 32].hex(),
            f"{self.crc[i]:08x}",
            S.b64_lines(length),
            lineno,
            offset,
            text=text,
        )


@dataclasses.dataclass
class ArrayInfo:
    """One ``arr`` block: header fields, exact header line, chunks and the decoded bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    sha256: str
    hmac: str
    salt: str
    line: str
    lineno: int
    idx: dict[str, str] | None
    chunks: list[ChunkInfo] | _Chunks
    raw: np.ndarray | None = None
    computed_sha256: str = ""
    hmac_state: str = "unauthenticated"  # "authenticated", "unauthenticated", "unchecked", "bad"
    offset: int = 0
    end_lineno: int = 0  # the ``endarr`` line
    #: decodes the array again from the text (set by :class:`WtxtFile`, which keeps no
    #: decoded bytes: every access decodes and re-checks one array)
    loader: Any = dataclasses.field(default=None, repr=False, compare=False)

    def where(self) -> str:
        """``array 'name' (lines <arr>-<endarr>)``: the object and the lines it spans."""
        return f"array {self.name!r} ({_span(self.lineno, self.end_lineno)})"

    @property
    def damaged(self) -> bool:
        return any(c.damage for c in self.chunks)

    def raw_bytes(self) -> np.ndarray:
        """The decoded little-endian bytes (uint8): kept by ``parse(keep=True)``, else
        decoded afresh (and checked again) on every call."""
        if self.raw is not None:
            return self.raw
        assert self.loader is not None, "parse(keep=False) without a loader"
        out: np.ndarray = self.loader(self)
        return out

    def array(self) -> np.ndarray:
        return self.raw_bytes().view(S.DTYPES[self.dtype]).reshape(self.shape)


@dataclasses.dataclass
class Parsed:
    """Everything a WTXT file says, plus what the parser computed from it."""

    meta: dict[str, str]
    cap: list[str]
    root: dict[str, str] | None
    pending: bool
    sign: dict[str, str] | None
    root_end: int
    sign_span: tuple[int, int] | None
    arrays: list[ArrayInfo]
    audit: dict[str, str] | None
    audit_lineno: int | None
    computed_all: str
    computed_fastxor: int
    size: int
    data: np.ndarray
    root_lineno: int = 4
    root_offset: int = 0
    sign_lineno: int | None = None

    def message(self, sign_all: bool) -> bytes | bytearray:
        """The bytes a signature covers."""
        if sign_all:
            assert self.sign_span is not None
            a, b = self.sign_span
            # one copy of the file's bytes (Ed25519 takes its message in one piece), not three
            out = bytearray(a + self.data.size - b)
            out[:a] = S.mview(self.data[:a])
            out[a:] = S.mview(self.data[b:])
            release(self.data[b:])  # the map's pages: the copy holds them now
            return out
        return self.data[: self.root_end].tobytes()


def _kern() -> Any:
    return _kernels.load("b64lines")


_KERR = {
    1: (TruncatedError, "file ends inside the chunk's base64 lines"),
    2: (FormatError, "base64 line width"),
    3: (FormatError, "base64 line: character not in the base64 alphabet"),
    4: (FormatError, "base64 line: missing ' <parity>' after the text"),
    5: (FormatError, "base64 line: parity is not one lowercase hex digit"),
    6: (FormatError, "base64 line: parity nibble mismatch"),
    7: (FormatError, "base64 line: must end with LF right after the parity digit"),
    8: (FormatError, "base64 line: non-canonical padding bits"),
}


def kernel_error(
    status: int, text: np.ndarray, pos: int, first_line: int, line: int, base: int
) -> Exception:
    cls, what = _KERR.get(status, (FormatError, f"base64 line: status {status}"))
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


class _Hashes:
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


def _update(hashers: list[Any], view: np.ndarray) -> None:
    mv = S.mview(view)
    for h in hashers:
        h.update(mv)


def _update_bytes(hashers: list[Any], raw: bytes) -> None:
    for h in hashers:
        h.update(raw)


class _Xor:
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


def parse(
    data: np.ndarray,
    *,
    collect: bool = False,
    hmac_keys: Iterable[bytes] = (),
    limits: Limits = DEFAULT_LIMITS,
    workers: int = 1,
    keep: bool = True,
) -> Parsed:
    """Parse and check a whole WTXT text held in ``data`` (a read-only uint8 array).

    Structural violations raise :class:`FormatError` (or a subclass) naming the line. Chunk
    damage (parity, CRC-32C, SHA-256, base64) raises as well unless ``collect`` is true, in
    which case it is recorded in :attr:`ChunkInfo.damage` and parsing continues by count.
    Array hashes are computed, not compared: see :func:`check`.

    ``keep=False`` keeps no decoded bytes: each chunk is decoded, checked and fed to the
    array and file digests, then dropped, and the text pages already parsed are given back
    (:func:`~tenfold.core.release.release`), so parsing needs about one chunk of memory
    whatever the file size; :func:`decode_array` decodes an array again on demand.
    """
    kern = _kern()
    keys = [bytes(k) for k in hmac_keys]
    cur = Cursor(data)
    dmv = S.mview(data)
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
    text, ln, off = cur.line("meta")
    meta = fields(text, "meta", S.META_FIELDS, ln, off)
    check_ts(meta["ts"], ln, off)
    text, ln, off = cur.line("cap")
    cap = fields(text, "cap", S.CAP_FIELDS, ln, off)["ext"].split(",")
    if len(set(cap)) != len(cap):
        raise err(FormatError, ln, off, "duplicate cap item", got=",".join(cap))
    text, ln, off = cur.line("root")
    root_ln, root_off = ln, off
    root: dict[str, str] | None = None
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
        pending = True
    else:
        root = fields(text, "root", S.ROOT_FIELDS, ln, off)
        pending = False
    root_end = cur.pos
    sign = None
    sign_span = None
    raw = cur.peek_raw()
    if raw is not None and raw.startswith(b"sign"):
        text, ln, off = cur.line()
        if pending:
            raise err(
                FormatError,
                ln,
                off,
                "a root_pending file carries no sign line (the WSUM sidecar is signed)",
            )
        sign = fields(text, "sign", S.SIGN_FIELDS, ln, off)
        sign_span = (off, cur.pos)
        sign_ln: int | None = ln
    else:
        sign_ln = None

    hashes = _Hashes(workers)
    arrays: list[ArrayInfo] = []
    scratch = np.empty(0, np.uint8)
    fastxor = 0
    scan = _kernels.load("scan")
    xor = _Xor(scan)
    released = 0
    total_chunks = 0
    try:
        while True:
            raw = cur.peek_raw()
            if raw is None:
                raise err(TruncatedError, cur.lineno, cur.pos, "file ends; expected 'endwtxt'")
            if not raw.startswith(b"arr "):
                break
            arr_text, ln, off = cur.line()
            a = fields(arr_text, "arr", S.ARR_FIELDS, ln, off)
            name = a["name"]
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
            dt = S.DTYPES[a["dtype"]]
            nbytes = int(a["bytes"])
            want = math.prod(shape) * dt.itemsize
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
            idx = None
            raw = cur.peek_raw()
            if raw is not None and raw.startswith(b"idx"):
                text, iln, ioff = cur.line()
                idx = fields(text, "idx", S.IDX_FIELDS, iln, ioff)
                rs = S.row_size(shape, dt.itemsize)
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
            rpc = int(idx["rows_per_chunk"]) if idx and idx["row_blocking"] == "on" else None
            clen = S.chunk_length(shape, dt.itemsize, rpc)
            if nbytes and clen == 0:
                raise err(FormatError, ln, off, "chunk length is zero for a non-empty array")
            nchunks = 1 if nbytes == 0 else -(-nbytes // clen)
            total_chunks += nchunks
            if total_chunks > limits.max_objects:
                raise err(
                    LimitError,
                    ln,
                    off,
                    "too many chunks",
                    expected=f"<= {limits.max_objects}",
                    got=total_chunks,
                )
            info = ArrayInfo(
                name,
                a["dtype"],
                shape,
                nbytes,
                a["sha256"],
                a["hmac"],
                a["salt"],
                arr_text,
                ln,
                idx,
                [] if keep or collect else _Chunks(clen, nbytes),
                offset=off,
            )
            buf = np.zeros(nbytes, np.uint8) if keep else None
            arr_sha = hashlib.sha256()
            macs = []
            if a["hmac"] != S.ZERO64 and keys:
                salt = bytes.fromhex(a["salt"])
                macs = [_hmac.new(k, salt, "sha256") for k in keys]
            hashes.submit(hashes.all.update, info.line.encode())
            group = [arr_sha, hashes.all, *macs]
            span_start = 0
            for ix in range(nchunks):
                ch = chunk_header(
                    cur,
                    kern,
                    data,
                    ix,
                    ix * clen,
                    min(clen, nbytes - ix * clen) if nbytes else 0,
                    collect,
                )
                info.chunks.append(ch)
                got = None
                if ch.length:
                    n = ch.lines * S.WIDTH
                    if scratch.size < n:
                        scratch = np.empty(n, np.uint8)
                    if ch.damage is None:
                        got = decode_chunk(cur, kern, data, ch, scratch, buf, collect)
                if buf is None:  # keep=False: digest this chunk now, keep nothing
                    if got is None:  # damaged (collect): zeros, as keep=True's buffer holds
                        got = bytes(ch.length)
                    hashes.submit(_update_bytes, group, got)
                    xor.feed(got)
                    if cur.pos - released >= _SPAN:
                        release(data[released : cur.pos])
                        released = cur.pos
                elif ch.off + ch.length - span_start >= _SPAN or ix == nchunks - 1:
                    end = ch.off + ch.length
                    hashes.submit(_update, group, buf[span_start:end])
                    span_start = end
                if dmv[cur.pos : cur.pos + 6] == _ENDCH:
                    cur.pos += 6
                    cur.lineno += 1
                    continue
                text, eln, eoff = cur.line("endch")
                if text != "endch":
                    raise err(
                        FormatError,
                        eln,
                        eoff,
                        f"expected 'endch' after the chunk's {ch.lines} base64 lines",
                        expected="endch",
                        got=repr(text[:40]),
                    )
            text, eln, eoff = cur.line("endarr")
            if text != "endarr":
                raise err(
                    FormatError,
                    eln,
                    eoff,
                    "expected 'endarr' after the last chunk",
                    expected="endarr",
                    got=repr(text[:40]),
                )
            info.end_lineno = eln
            hashes.wait()
            info.raw = buf
            info.computed_sha256 = arr_sha.hexdigest()
            if buf is not None:
                fastxor = scan.xor_u64_le(buf, fastxor)
            else:
                fastxor = xor.end(fastxor)
            if a["hmac"] == S.ZERO64:
                info.hmac_state = "unauthenticated"
            elif not keys:
                info.hmac_state = "unchecked"
            else:
                mac = bytes.fromhex(a["hmac"])
                ok = any(_hmac.compare_digest(m.digest(), mac) for m in macs)
                info.hmac_state = "authenticated" if ok else "bad"
            arrays.append(info)
    finally:
        hashes.wait()
        hashes.close()
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
    return Parsed(
        meta,
        cap,
        root,
        pending,
        sign,
        root_end,
        sign_span,
        arrays,
        audit,
        audit_ln,
        hashes.all.hexdigest(),
        fastxor,
        cur.size,
        data,
        root_ln,
        root_off,
        sign_ln,
    )


def check_ts(ts: str, ln: int, off: int) -> None:
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


def chunk_header(
    cur: Cursor, kern: Any, data: np.ndarray, ix: int, off: int, length: int, collect: bool
) -> ChunkInfo:
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
        # an empty chunk has no base64 lines to decode, but its digests are checked all the same
        for what, declared, computed in (
            ("crc32c", ch.crc32c, S.EMPTY_CRC32C),
            ("sha256", ch.sha256, S.EMPTY_SHA256),
        ):
            if declared != computed:
                exc = err(
                    IntegrityError,
                    lineno,
                    pos,
                    f"chunk {what} mismatch (empty chunk, len=0)",
                    expected=declared,
                    got=computed,
                )
                _damaged(ch, exc, collect)
                break
    return ch


def _damaged(ch: ChunkInfo, exc: TenfoldError, collect: bool) -> None:
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
        _damaged(ch, exc, collect)
        return None
    # the kernel has checked the alphabet and the padding; validate=True is pybase64's fast path
    raw = pybase64.b64decode(S.mview(scratch)[:n], validate=True)
    crc = f"{_crc32c.crc32c(raw) if n <= _CRC_DIRECT else crc32c(raw):08x}"
    if crc != ch.crc32c:
        exc = err(
            IntegrityError,
            ch.lineno,
            ch.offset,
            "chunk crc32c mismatch",
            expected=ch.crc32c,
            got=crc,
        )
        _damaged(ch, exc, collect)
        return None
    sha = hashlib.sha256(raw).hexdigest()
    if sha != ch.sha256:
        exc = err(
            IntegrityError,
            ch.lineno,
            ch.offset,
            "chunk sha256 mismatch",
            expected=ch.sha256,
            got=sha,
        )
        _damaged(ch, exc, collect)
        return None
    if buf is not None:
        S.mview(buf)[ch.off : ch.off + ch.length] = raw
    return raw


def decode_array(data: np.ndarray, a: ArrayInfo) -> np.ndarray:
    """Array ``a``'s bytes decoded again from ``data``, the text ``parse`` indexed it in.

    Every check of the first pass runs again (line widths, alphabet, parity, canonical
    padding, chunk CRC-32C and SHA-256), and the array's SHA-256 must equal the one the file
    declares (the value ``parse`` verified, and which the HMAC and the root cover): bytes
    that changed after the file was opened raise :class:`IntegrityError`. The text pages
    are given back as they are decoded; the result is a new owned array.
    """
    kern = _kern()
    buf = np.empty(a.nbytes, np.uint8)
    cur = Cursor(data)
    scratch = np.empty(0, np.uint8)
    sha = hashlib.sha256()
    released = -1
    for ch in a.chunks:
        if not ch.length:
            continue
        n = ch.lines * S.WIDTH
        if scratch.size < n:
            scratch = np.empty(n, np.uint8)
        cur.pos, cur.lineno = ch.text, ch.lineno + 1
        if released < 0:
            released = ch.text
        raw = decode_chunk(cur, kern, data, ch, scratch, buf, False)
        assert raw is not None  # collect=False raises on damage
        sha.update(raw)
        if cur.pos - released >= _SPAN:
            release(data[released : cur.pos])
            released = cur.pos
    if released >= 0:
        release(data[released : cur.pos])
    got = sha.hexdigest()
    if got != a.sha256:
        raise at_lines(
            IntegrityError(
                describe(
                    S.FMT,
                    a.where(),
                    offset=a.offset,
                    detail="sha256 mismatch (the file changed after it was opened)",
                    expected=a.sha256,
                    got=got,
                )
            ),
            a.lineno,
            a.end_lineno,
        )
    return buf


# -- checks after parsing -------------------------------------------------------------------


def root_values(p: Parsed, wsum: Mapping[str, str] | None) -> dict[str, str] | None:
    """The root the file (or its WSUM sidecar, for a pending root) claims."""
    if not p.pending:
        return p.root
    return dict(wsum) if wsum is not None else None


class WtxtFile(MappedReader, Mapping[str, np.ndarray]):
    """An open, fully verified WTXT file: a ``Mapping`` of array name to array.

    Attributes: ``meta``, ``cap``, ``root``, ``audit`` and ``arrays`` (the parsed
    :class:`ArrayInfo` rows). Opening checks everything the file carries (every chunk, the
    array hashes and HMACs, the root and the signature) in one pass that keeps no decoded
    bytes; ``reader[name]`` then decodes that one array again, re-checks its chunks and its
    SHA-256 against the verified value, and returns it as a new owned array. Memory: about
    one array, not the file. ``mmap=False`` reads a local file with ``pread`` into owned
    memory; a URL or fsspec file is fetched whole (a text format parsed in full).
    """

    def __init__(
        self,
        source: Any,
        *,
        hmac_keys: Iterable[bytes] = (),
        public_keys: Iterable[Any] = (),
        wsum: str | os.PathLike[str] | None = None,
        allow_pending: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        workers: int = 1,
        mmap: bool = True,
    ) -> None:
        # A text format parsed (and checked) whole at open: a remote file is fetched whole.
        self._map(source, S.FMT, mmap=mmap)
        self._hmac_keys = list(hmac_keys)
        self._public_keys = list(public_keys)
        try:
            keys = self._hmac_keys
            pubs = self._public_keys
            self.parsed = parse(
                self._mf.buffer(), hmac_keys=keys, limits=limits, workers=workers, keep=False
            )
            if wsum is None and self._mf.path is not None and not self._mf.remote:
                wsum = wsum_path(self._mf.path)
            self.wsum = read_wsum(wsum) if self.parsed.pending else None
            _enforce(self.parsed, self.wsum, keys, pubs, allow_pending)
        except BaseException:
            self.close()
            raise
        self.meta = self.parsed.meta
        self.cap = self.parsed.cap
        self.root = root_values(self.parsed, self.wsum)
        self.audit = self.parsed.audit
        self.arrays = self.parsed.arrays
        self._by_name = {a.name: a for a in self.arrays}
        data = self.parsed.data
        for a in self.arrays:
            a.loader = lambda info, data=data: decode_array(data, info)

    # -- the Mapping face (tenfold.core.reader) -----------------------------------------------
    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def _array_info(self, name: str) -> ArrayInfo:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"wtxt: no array named {name!r}") from None

    def read(self, name: str, index: Any = None) -> np.ndarray:
        """Array ``name``, decoded and checked again (a new owned array on every call), or
        its basic slice ``index`` (of the decoded array: base64 text cannot be read in row
        ranges)."""
        a = self._array_info(name).array()
        if index is None:
            return a
        from ..core.slicing import plan

        return plan(S.FMT, f"array {name!r}", tuple(a.shape), index).apply(a)

    def info(self, name: str) -> TensorInfo:
        """The array's ``arr`` line in the common record (``extras`` has the WTXT fields).

        ``byte_range`` is ``None``: an array is base64 text spread over its chunk lines.
        """
        a = self._array_info(name)
        return TensorInfo(
            name=a.name,
            dtype=a.dtype,
            shape=a.shape,
            byte_range=None,
            encoding="base64",
            checksum=f"sha256:{a.sha256}",
            extras={
                "line": a.lineno,
                "nbytes": a.nbytes,
                "chunks": len(a.chunks),
                "hmac_state": a.hmac_state,
                "idx": a.idx,
            },
        )

    @property
    def metadata(self) -> dict[str, Any]:
        """File-level fields: the ``meta`` line, ``cap`` list, ``root`` and ``audit``."""
        return {**self.meta, "cap": list(self.cap), "root": self.root, "audit": self.audit}

    def verify(self) -> Any:
        """Report on every chunk, array, the root and the signature (:func:`wtxt.verify`),
        with the keys this file was opened with."""
        from .verify import verify as _verify

        local = self._mf.path is not None and not self._mf.remote
        src = self._mf.path if local else self._mf.buffer()
        return _verify(src, hmac_keys=self._hmac_keys, public_keys=self._public_keys)

    def to_dict(self) -> dict[str, np.ndarray]:
        return {a.name: a.array() for a in self.arrays}


def _span(first: int, last: int) -> str:
    return f"line {first}" if last <= first else f"lines {first}-{last}"


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of the authentication and integrity policy ``read`` and ``verify`` share.

    ``obj`` names the object and its lines, ``status`` is ``ok``, ``info`` or ``error``;
    ``line``/``last_line`` are the lines an error is about.
    """

    obj: str
    status: str
    message: str
    line: int
    last_line: int

    def error(self) -> IntegrityError:
        exc = IntegrityError(describe(S.FMT, self.obj, detail=self.message))
        return at_lines(exc, self.line, self.last_line)  # type: ignore[return-value]


def array_checks(a: ArrayInfo, keys: list[bytes]) -> list[Check]:
    """The SHA-256 and HMAC rows of one array. Keys given: authentication is mandatory."""
    where, first, last = a.where(), a.lineno, a.end_lineno
    if a.computed_sha256 == a.sha256:
        out = [Check(where, OK, "sha256", first, last)]
    else:
        out = [
            Check(
                where,
                ERROR,
                f"sha256 mismatch; expected {a.sha256}, got {a.computed_sha256}",
                first,
                last,
            )
        ]
    if a.hmac_state == "authenticated":
        out.append(Check(where, OK, "hmac authenticated", first, last))
    elif a.hmac_state == "bad":
        out.append(Check(where, ERROR, "hmac mismatch for every key given", first, last))
    elif a.hmac_state == "unauthenticated":
        if keys:
            out.append(
                Check(
                    where,
                    ERROR,
                    "unauthenticated (hmac is zero) but hmac keys were given",
                    first,
                    last,
                )
            )
        else:
            out.append(Check(where, INFO, "unauthenticated (hmac is zero)", first, last))
    else:  # "unchecked": only without keys
        out.append(
            Check(
                where,
                INFO,
                "unauthenticated (hmac present, not checked: no hmac key given)",
                first,
                last,
            )
        )
    return out


def file_checks(
    p: Parsed,
    wsum: Mapping[str, str] | None,
    keys: list[bytes],
    pubs: list[Any],
    *,
    allow_pending: bool = False,
) -> list[Check]:
    """The root, signature and audit rows. Public keys given: a verified signature is mandatory,
    and it counts only when ``sha256_all``, ``fastxor`` and ``merkle_this`` recomputed from the
    content match the root it signs (DECISIONS, WTXT 11)."""
    out: list[Check] = []
    rl = p.root_lineno
    first = p.arrays[0].lineno if p.arrays else rl
    last = p.arrays[-1].end_lineno if p.arrays else rl
    root = root_values(p, wsum)
    if root is None:
        status = INFO if allow_pending else ERROR
        out.append(
            Check(
                f"root_pending (line {rl})",
                status,
                "no WSUM sidecar to finalize the "
                "root"
                + (
                    ": root not checked (allow_pending)"
                    if allow_pending
                    else " (pass wsum= or allow_pending=True)"
                ),
                rl,
                rl,
            )
        )
    else:
        if p.pending:
            assert wsum is not None
            obj = f"wsum ({_wsum_name(wsum)} line 1: the root of root_pending line {rl})"
        else:
            obj = f"root (line {rl})"
        arrays = "" if not p.arrays else f" lines {first}-{last}"
        cover = {
            "sha256_all": f"covers the arr lines and array bytes of{arrays or ' no lines'}",
            "fastxor": f"covers the array bytes of{arrays or ' no lines'}",
            "merkle_this": f"covers meta line 2 (ts, gen, build), merkle_prev and "
            f"sha256_all of line {rl}",
        }
        this = S.merkle(
            root["merkle_prev"], p.computed_all, p.meta["ts"], p.meta["gen"], p.meta["build"]
        )
        for field, got in (
            ("sha256_all", p.computed_all),
            ("fastxor", f"{p.computed_fastxor:016x}"),
            ("merkle_this", this),
        ):
            if root[field] == got:
                msg = field
                if field == "merkle_this":
                    msg += (
                        " (first generation)"
                        if root["merkle_prev"] == S.ZERO64
                        else f" (merkle_prev {root['merkle_prev'][:16]})"
                    )
                out.append(Check(obj, OK, msg, rl, rl))
            else:
                out.append(
                    Check(
                        obj,
                        ERROR,
                        f"{field} mismatch ({cover[field]}); expected {root[field]}, got {got}",
                        rl,
                        rl if field == "merkle_this" else last,
                    )
                )
    root_ok = root is not None and all(c.status == OK for c in out)
    out += _signature_checks(p, wsum, pubs, root_ok)
    if p.audit_lineno is not None:
        covered = (
            " (its bytes are covered by the sign_all signature)"
            if (p.sign is not None and "sign_all" in p.cap)
            else ""
        )
        out.append(
            Check(
                f"audit (line {p.audit_lineno})",
                INFO,
                "unauthenticated: not covered by any hash" + covered,
                p.audit_lineno,
                p.audit_lineno,
            )
        )
    return out


def _signature_checks(
    p: Parsed, wsum: Mapping[str, str] | None, pubs: list[Any], root_ok: bool
) -> list[Check]:
    rl = p.root_lineno
    if p.pending:
        if wsum is None:
            if not pubs:
                return []
            return [
                Check(
                    f"wsum signature (root_pending line {rl})",
                    ERROR,
                    "public keys were given but there is no WSUM sidecar to carry a signature",
                    rl,
                    rl,
                )
            ]
        obj = f"wsum signature ({_wsum_name(wsum)} line 1)"
        state, keyid, line = wsum_signature_state(wsum, pubs), wsum.get("keyid", ""), rl
        covers = "the WSUM line before ' sign='"
    else:
        line = p.sign_lineno if p.sign_lineno is not None else rl + 1
        obj = f"signature (line {line})"
        if p.sign is None:
            state, keyid = "unsigned", ""
        else:
            keyid = p.sign["keyid"]
            state = check_signature(p.sign["ed25519"], keyid, p.message("sign_all" in p.cap), pubs)
        covers = f"every line but line {line}" if "sign_all" in p.cap else f"lines 1-{rl}"
    if state == "verified":
        if root_ok:
            return [
                Check(obj, OK, f"ed25519 verified (keyid {keyid}); covers {covers}", line, line)
            ]
        return [
            Check(
                obj,
                ERROR,
                f"ed25519 signature by keyid {keyid} is valid over {covers}, "
                "but the root it signs does not match the content: nothing is "
                "authenticated",
                line,
                line,
            )
        ]
    if state == "bad":
        return [Check(obj, ERROR, f"ed25519 signature does not verify (keyid {keyid})", line, line)]
    if state == "unsigned":
        if pubs:
            return [Check(obj, ERROR, "unsigned but public keys were given", line, line)]
        return [Check(obj, INFO, "unsigned", line, line)]
    # "no key"
    if pubs:
        return [
            Check(
                obj,
                ERROR,
                f"signed by keyid {keyid}, which is not the keyid of any public key given",
                line,
                line,
            )
        ]
    return [
        Check(
            obj,
            INFO,
            f"ed25519 present (keyid {keyid}), not verified: no public key given",
            line,
            line,
        )
    ]


def _wsum_name(wsum: Mapping[str, str]) -> str:
    return os.path.basename(wsum.get("_path", "")) or "sidecar"


def _enforce(
    p: Parsed, wsum: dict[str, str] | None, keys: list[bytes], pubs: list[Any], allow_pending: bool
) -> None:
    """Raise on the first failed check (read's contract): the rows ``verify`` reports."""
    for a in p.arrays:
        for c in array_checks(a, keys):
            if c.status == ERROR:
                raise c.error()
    for c in file_checks(p, wsum, keys, pubs, allow_pending=allow_pending):
        if c.status == ERROR:
            raise c.error()


def open(source: Any, **kw: Any) -> WtxtFile:  # noqa: A001 - format API name
    """Open and fully verify a WTXT file; see :class:`WtxtFile` for the options."""
    return WtxtFile(source, **kw)


def read(
    path: Any, *, hmac_keys: Iterable[bytes] = (), public_keys: Iterable[Any] = (), **kw: Any
) -> dict[str, np.ndarray]:
    """Read every array of a WTXT file, checking everything it carries.

    Parity nibbles, chunk CRC-32C and SHA-256, array SHA-256, ``sha256_all``, ``fastxor`` and
    ``merkle_this`` are always checked. Passing ``hmac_keys`` requires every array to be
    authenticated by one of them; passing ``public_keys`` requires a valid Ed25519 signature
    from one of them. A ``root_pending`` file needs its ``.wsum`` sidecar (``wsum=`` to name
    it, ``allow_pending=True`` to read without the root check).

    Raises
    ------
    FormatError
        Any violation of the text rules, naming the line.
    IntegrityError
        A hash, HMAC or signature that does not match.
    """
    with WtxtFile(path, hmac_keys=hmac_keys, public_keys=public_keys, **kw) as f:
        return f.to_dict()


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """``read`` (arrays are always freshly decoded, hence owned and writable)."""
    return read(source, **kw)

"""Reference twin of ``tarscan.pyx``: the tar header walk in plain Python."""

from __future__ import annotations

import numpy as np

from ._cargs import cint, ssize

E_OK = 0
E_TRUNCATED_HEADER = 1
E_CHECKSUM = 2
E_NUMBER = 3
E_PAYLOAD_PAST_END = 4
E_PAX = 5
E_DANGLING_EXTENDED = 6
E_CAPACITY = 7
E_SPARSE = 8


def _number(field: bytes) -> int:
    if field[0] & 0x80:
        if field[0] != 0x80:
            return -1
        v = int.from_bytes(field[1:], "big")
        return -1 if v >> 62 else v
    s = field.split(b"\0", 1)[0].strip(b" ")
    if any(c < 48 or c > 55 for c in s):
        return -1
    return int(s, 8) if s else 0


def _checksum_ok(h: bytes) -> bool:
    want = _number(h[148:156])
    if want < 0:
        return False
    blk = h[:148] + b" " * 8 + h[156:]
    us = sum(blk)
    ss = sum(c - 256 if c > 127 else c for c in blk)
    return want in (us, ss)


def _pax(data: bytes, base: int) -> tuple[int, int, int] | None:
    """(path_off, path_len, size) with -1 for absent; None when malformed."""
    pos, end = 0, len(data)
    path_off, path_len, size = -1, 0, -1
    while pos < end:
        if data[pos] == 0:
            break
        i = pos
        L = 0
        while i < end and 48 <= data[i] <= 57:
            if L > (1 << 40):  # as the compiled walk: a length this long is malformed
                return None
            L = L * 10 + (data[i] - 48)
            i += 1
        if i == pos or i >= end or data[i] != 32:
            return None
        rec_end = pos + L
        if L < 5 or rec_end > end or rec_end <= i + 1 or data[rec_end - 1] != 10:
            return None
        eq = data.find(b"=", i + 1, rec_end - 1)
        if eq < 0:
            return None
        key = data[i + 1 : eq]
        if key == b"path":
            path_off, path_len = base + eq + 1, rec_end - 1 - (eq + 1)
        elif key == b"size":
            val = data[eq + 1 : rec_end - 1]
            if not val or any(c < 48 or c > 57 for c in val):
                return None
            size = 0
            for c in val:
                if size > (1 << 58):
                    return None
                size = size * 10 + (c - 48)
        pos = rec_end
    return path_off, path_len, size


class _Extended:
    """What extended headers say about the members after them: pax ``x`` and GNU ``L``/``K``
    the next member only (``pending`` until it comes), pax ``g`` every later member."""

    __slots__ = ("local_path", "local_size", "glob_path", "glob_size", "pending")

    def __init__(self) -> None:
        self.local_path: tuple[int, int] | None = None
        self.local_size = -1
        self.glob_path: tuple[int, int] | None = None
        self.glob_size = -1
        self.pending = False

    def take(self, t: int, data: bytes, data_off: int) -> bool:
        """Record the extended header of type ``t`` whose payload is ``data`` (at archive
        offset ``data_off``); False for a bad pax record."""
        if t in (0x78, 0x67):
            got = _pax(data, data_off)
            if got is None:
                return False
            p_off, p_len, p_size = got
            if t == 0x78:
                if p_off >= 0:
                    self.local_path = (p_off, p_len)
                if p_size >= 0:
                    self.local_size = p_size
                self.pending = True
            else:
                if p_off >= 0:
                    self.glob_path = (p_off, p_len)
                if p_size >= 0:
                    self.glob_size = p_size
        else:
            if t == 0x4C:
                self.local_path = (data_off, len(data.split(b"\0", 1)[0]))
            self.pending = True
        return True

    def size(self, sz: int) -> int:
        if self.local_size >= 0:
            return self.local_size
        return self.glob_size if self.glob_size >= 0 else sz

    def path(self) -> tuple[int, int] | None:
        return self.local_path if self.local_path is not None else self.glob_path

    def member_done(self) -> None:
        self.local_path, self.local_size, self.pending = None, -1, False

    def carried(self) -> bool:
        """Is there state for the members still to come?"""
        return bool(
            self.pending
            or self.local_path is not None
            or self.local_size >= 0
            or self.glob_path is not None
            or self.glob_size >= 0
        )

    def end(self, pos: int) -> tuple[int, int]:
        """``(code, where)`` of a walk that ends at ``pos``: an extended header with no member
        after it is an error."""
        return (E_DANGLING_EXTENDED, pos) if self.pending else (E_OK, 0)


def scan(buf, hdr_off, size, prefix_off, prefix_len, name_off, name_len, typeflag, lanes=0):
    """Walk the headers of the tar archive in ``buf``; fill the outputs; ``(count, code, where)``.

    Every output must hold ``len(buf) // 512`` entries (the most members a buffer can have).
    ``lanes`` (interleaved walks in the compiled kernel) does not change the result: one walk here.
    """
    lanes = cint(lanes)
    b = memoryview(buf).cast("B")
    n = b.nbytes
    cap = n // 512
    outs = (hdr_off, size, prefix_off, prefix_len, name_off, name_len, typeflag)
    if any(len(o) < cap for o in outs):
        raise ValueError(f"outputs must hold len(buf) // 512 = {cap} entries")
    if lanes < 0:
        raise ValueError(f"lanes must be >= 0, got {lanes}")
    count = 0

    def emit(pos: int, h: bytes, sz: int, t: int, path: tuple[int, int] | None) -> bool:
        nonlocal count
        _record(outs, count, pos, h, sz, t, path)
        count += 1
        return True

    code, where, _end, _status = _walk(b, 0, 1 << 63, emit)
    return count, code, where


#: ``walk``'s ``status`` (see the compiled kernel).
WALK_FINISHED = 0
WALK_STOPPED = 1
WALK_STOPPED_STATE = 2
FLAG_ASCII = 1
FLAG_NEWLINE = 2
REGULAR = (0x30, 0, 0x37)
#: Typeflags ``find_member`` takes for where a member starts: regular files, extended headers.
STARTS = (*REGULAR, 0x78, 0x67, 0x4C, 0x4B)


def _walk(b: memoryview, pos: int, stop: int, emit) -> tuple[int, int, int, int]:
    """The header walk from ``pos``: ``emit(pos, header, size, typeflag, path)`` for each
    member (False: no room, the walk ends with ``E_CAPACITY``); ``(code, where, end,
    status)``."""
    n = b.nbytes
    a = np.frombuffer(b, np.uint8) if n else np.zeros(0, np.uint8)
    ext = _Extended()
    while True:
        if pos >= stop:
            return E_OK, 0, pos, WALK_STOPPED_STATE if ext.carried() else WALK_STOPPED
        if pos + 512 > n:
            if a[pos:].any():
                return E_TRUNCATED_HEADER, pos, pos, WALK_FINISHED
            return (*ext.end(pos), pos, WALK_FINISHED)
        h = bytes(b[pos : pos + 512])
        if not any(h):
            return (*ext.end(pos), pos, WALK_FINISHED)
        if not _checksum_ok(h):
            return E_CHECKSUM, pos, pos, WALK_FINISHED
        sz = _number(h[124:136])
        if sz < 0:
            return E_NUMBER, pos, pos, WALK_FINISHED
        t = h[156]
        if t in (0x78, 0x67, 0x4C, 0x4B):  # x g L K
            if pos + 512 + sz > n:
                return E_PAYLOAD_PAST_END, pos, pos, WALK_FINISHED
            if not ext.take(t, bytes(b[pos + 512 : pos + 512 + sz]), pos + 512):
                return E_PAX, pos, pos, WALK_FINISHED
            pos += 512 + -(-sz // 512) * 512
            continue
        if t == 0x53:
            return E_SPARSE, pos, pos, WALK_FINISHED
        sz = ext.size(sz)
        if not emit(pos, h, sz, t, ext.path()):
            return E_CAPACITY, pos, pos, WALK_FINISHED
        ext.member_done()
        if 0x31 <= t <= 0x36:
            nblocks = 0
        else:
            if pos + 512 + sz > n:
                return E_PAYLOAD_PAST_END, pos, pos, WALK_FINISHED
            nblocks = -(-sz // 512)
        pos += 512 + nblocks * 512


def _split(b: memoryview, n_off: int, n_len: int) -> tuple[int, int, int, int, int]:
    """``(stem_off, stem_len, keyhash, exthash, flags)`` of a name's basename (see the compiled
    ``walk``)."""
    import xxhash

    name = bytes(b[n_off : n_off + n_len])
    cut = name.rfind(b"/") + 1
    base = name[cut:]
    stem, dot, ext = base.partition(b".")
    flags = (FLAG_ASCII if all(c < 128 for c in base) else 0) | (
        FLAG_NEWLINE if b"\n" in base else 0
    )
    low = bytes(c + 32 if 65 <= c <= 90 else c for c in ext)
    return (
        n_off + cut,
        len(stem),
        xxhash.xxh64_intdigest(stem),
        xxhash.xxh64_intdigest(low),
        flags,
    )


def find_member(buf, frm, to):
    """The first block from ``frm`` (rounded up to a block) before ``to`` that looks like where
    a member starts (a regular-file or extended header) with no extended header right before
    it, or -1; see the compiled kernel."""
    frm, to = ssize(frm), ssize(to)
    if frm < 0 or to < frm:
        raise ValueError(f"need 0 <= frm <= to, got frm={frm}, to={to}")
    b = memoryview(buf).cast("B")
    n = b.nbytes
    p = -(-frm // 512) * 512
    while p < to and p + 512 <= n:
        h = bytes(b[p : p + 512])
        if (
            h[257:262] == b"ustar"
            and h[156] in STARTS
            and _number(h[124:136]) >= 0
            and _checksum_ok(h)
            and _extended_before(b, p) < 0
        ):
            return p
        p += 512
    return -1


def walk(
    buf,
    start,
    stop,
    hdr_off,
    size,
    name_off,
    name_len,
    stem_off,
    stem_len,
    keyhash,
    exthash,
    typeflag,
    flags,
    regular_only=True,
):
    """Walk the headers from ``start`` until the archive ends or reaches ``stop``; ``(count,
    code, where, end, status)``. See the compiled kernel."""
    start, stop = ssize(start), ssize(stop)
    b = memoryview(buf).cast("B")
    n = b.nbytes
    outs = (hdr_off, size, name_off, name_len, stem_off, stem_len, keyhash, exthash)
    outs += (typeflag, flags)
    cap = len(hdr_off)
    if any(len(o) != cap for o in outs):
        raise ValueError("outputs must have one length")
    if start < 0 or start > n or start % 512:
        raise ValueError(f"start must be a multiple of 512 in [0, {n}], got {start}")
    if stop < start:
        raise ValueError(f"stop must be >= start, got stop={stop}, start={start}")
    count = 0

    def emit(pos: int, h: bytes, sz: int, t: int, path: tuple[int, int] | None) -> bool:
        nonlocal count
        if regular_only and t not in REGULAR:
            return True
        if count >= cap:
            return False
        n_off, n_len = path if path is not None else (pos, len(h[:100].split(b"\0", 1)[0]))
        hdr_off[count], size[count], typeflag[count] = pos, sz, t
        name_off[count], name_len[count] = n_off, n_len
        s_off, s_len, kh, eh, fl = _split(b, n_off, n_len)
        stem_off[count], stem_len[count], keyhash[count], exthash[count] = s_off, s_len, kh, eh
        flags[count] = fl
        count += 1
        return True

    code, where, end, status = _walk(b, start, stop, emit)
    return count, code, where, end, status


def _record(outs, count, pos, h, sz, t, path) -> None:
    """Fill row ``count`` of the outputs for the member whose header ``h`` is at ``pos``."""
    hdr_off, size, prefix_off, prefix_len, name_off, name_len, typeflag = outs
    hdr_off[count] = pos
    size[count] = sz
    typeflag[count] = t
    if path is not None:
        name_off[count], name_len[count] = path
        prefix_off[count], prefix_len[count] = 0, 0
    else:
        name_off[count] = pos
        name_len[count] = len(h[:100].split(b"\0", 1)[0])
        prefix_off[count] = pos + 345
        ustar = h[257:263] == b"ustar\0"
        prefix_len[count] = len(h[345:500].split(b"\0", 1)[0]) if ustar else 0


# -- checking that a header block names the member a row claims ------------------------------

M_OK = 0
M_PAST_END = 1
M_NO_HEADER = 2
M_NOT_REGULAR = 3
M_NAME = 4
M_SIZE = 5
M_NON_ASCII = 6

LOOKBACK_BLOCKS = 2048
MAX_CHAIN = 8
LOOKBACK = LOOKBACK_BLOCKS * 512


def _extended_before(b: memoryview, pos: int) -> int:
    """Offset of the extended header whose data ends exactly at ``pos``, or -1."""
    for k in range(LOOKBACK_BLOCKS + 1):
        p = pos - 512 * (k + 1)
        if p < 0:
            return -1
        if b[p + 156] in (0x78, 0x67, 0x4C, 0x4B):
            h = bytes(b[p : p + 512])
            sz = _number(h[124:136])
            if sz >= 0 and -(-sz // 512) == k and _checksum_ok(h):
                return p
    return -1


def _header_at(b: memoryview, off: int) -> int:
    if off < 0 or off > len(b) - 512:
        return M_PAST_END
    h = bytes(b[off : off + 512])
    if not any(h) or not _checksum_ok(h) or _number(h[124:136]) < 0:
        return M_NO_HEADER
    return M_OK


def _cstrlen(b: memoryview, off: int, width: int) -> int:
    return len(bytes(b[off : off + width]).split(b"\0", 1)[0])


def _extended_name(b: memoryview, off: int) -> tuple[int, int, int]:
    """(name_off, name_len, size) the scanner gives the member at ``off``; see the kernel."""
    pos = off
    local_path = glob_path = None
    local_size = glob_size = -1
    for _ in range(MAX_CHAIN):
        p = _extended_before(b, pos)
        if p < 0:
            break
        t = b[p + 156]
        sz = _number(bytes(b[p + 124 : p + 136]))
        if t == 0x4C:
            if local_path is None:
                local_path = (p + 512, _cstrlen(b, p + 512, sz))
        elif t in (0x78, 0x67):
            got = _pax(bytes(b[p + 512 : p + 512 + sz]), p + 512)
            if got is None:
                break
            p_off, p_len, p_size = got
            if t == 0x78:
                if local_path is None and p_off >= 0:
                    local_path = (p_off, p_len)
                if local_size < 0 and p_size >= 0:
                    local_size = p_size
            else:
                if glob_path is None and p_off >= 0:
                    glob_path = (p_off, p_len)
                if glob_size < 0 and p_size >= 0:
                    glob_size = p_size
        if local_path is not None:
            break
        pos = p
    path = local_path or glob_path or (off, _cstrlen(b, off, 100))
    if local_size >= 0:
        size = local_size
    elif glob_size >= 0:
        size = glob_size
    else:
        size = _number(bytes(b[off + 124 : off + 136]))
    return path[0], path[1], size


def _name_is(name: bytes, keyhash: int, ext: bytes) -> int:
    import xxhash

    base = name.rsplit(b"/", 1)[-1]
    if any(c >= 128 for c in base):
        return M_NON_ASCII
    stem, dot, e = base.partition(b".")
    if e.lower() != ext or (not dot and ext):
        return M_NAME
    return M_OK if xxhash.xxh64_intdigest(stem) == keyhash else M_NAME


def check_member(
    buf, offset: int, size: int, keyhash: int, ext: bytes, checksum: bool = False
) -> int:
    """Does the tar header block at ``offset`` of ``buf`` belong to the member a row claims?
    ``M_OK`` (0) or an ``M_*`` code; see the compiled kernel."""
    if type(ext) is not bytes:
        raise TypeError(f"ext must be bytes, got {type(ext).__name__}")
    for v in (offset, size, keyhash):
        if not isinstance(v, int):
            raise TypeError(f"expected int, got {type(v).__name__}")
    if (
        not -(1 << 63) <= offset < (1 << 63)
        or not -(1 << 63) <= size < (1 << 63)
        or not 0 <= keyhash < (1 << 64)
    ):
        raise OverflowError("value out of range")
    b = memoryview(buf).cast("B")
    if offset < 0 or offset > len(b) - 512:
        return M_PAST_END
    t = b[offset + 156]
    if (
        not checksum
        and t in (0x30, 0, 0x37)
        and 0 <= size <= len(b) - offset - 512
        and _number(bytes(b[offset + 124 : offset + 136])) == size
        and _name_is(bytes(b[offset : offset + _cstrlen(b, offset, 100)]), keyhash, ext) == M_OK
    ):
        return M_OK  # quick path: no checksum (see the compiled kernel)
    code = _header_at(b, offset)
    if code:
        return code
    if t not in (0x30, 0, 0x37):
        return M_NOT_REGULAR
    if size < 0 or size > len(b) - offset - 512:
        return M_PAST_END
    ustar = bytes(b[offset : offset + _cstrlen(b, offset, 100)])
    if (
        _name_is(ustar, keyhash, ext) == M_OK
        and _number(bytes(b[offset + 124 : offset + 136])) == size
    ):
        return M_OK
    n_off, n_len, e_size = _extended_name(b, offset)
    r = _name_is(bytes(b[n_off : n_off + n_len]), keyhash, ext)
    if r:
        return r
    return M_SIZE if e_size != size else M_OK


def member_name(buf, offset: int, extended: bool) -> tuple[int, int, int, int, int]:
    """``(code, name_off, name_len, size, typeflag)`` of the member header at ``offset``."""
    b = memoryview(buf).cast("B")
    code = _header_at(b, offset)
    if code:
        return code, 0, 0, 0, 0
    t = b[offset + 156]
    if extended:
        n_off, n_len, sz = _extended_name(b, offset)
    else:
        n_off, n_len = offset, _cstrlen(b, offset, 100)
        sz = _number(bytes(b[offset + 124 : offset + 136]))
    return M_OK, n_off, n_len, sz, t


class HeaderMismatch(Exception):
    """``RowCheck.rows``: row ``args[0]`` failed the quick check (look at it closely)."""


class RowCheck:
    """``check_member`` for the rows of one sample at a time; see the compiled kernel."""

    def __init__(self, cols, keyhash, starts, exts: tuple, checksum: bool = False) -> None:
        c, kh, st = np.asarray(cols), np.asarray(keyhash), np.asarray(starts)
        if c.dtype != np.int64 or c.ndim != 2 or c.shape[1] != 4:
            raise ValueError("cols must be an aligned, C-contiguous int64 array of shape (n, 4)")
        if kh.dtype != np.uint64 or kh.shape != (c.shape[0],):
            raise ValueError("keyhash must be an aligned, C-contiguous uint64 array, one per row")
        if st.dtype != np.int64 or st.ndim != 1 or st.size < 1:
            raise ValueError("starts must be an aligned, C-contiguous int64 array, length >= 1")
        if not isinstance(exts, tuple):
            raise TypeError("exts must be a tuple")
        prev = 0
        for k, v in enumerate(st.tolist()):
            if v < prev or v > c.shape[0]:
                raise ValueError(f"starts[{k}] = {v} is not in [{prev}, {c.shape[0]}]")
            prev = v
        self._cols, self._kh, self._starts = c, kh, st
        self.exts, self.checksum = exts, bool(checksum)

    def rows(self, i: int, shards) -> list[list[int]]:
        """Sample ``i``'s rows ``[start, size, fid, extid]``; with ``shards`` a list, its rows
        in the shards there (not ``None``) checked first (``HeaderMismatch(row)``)."""
        if not 0 <= i < self._starts.size - 1:
            raise IndexError(f"sample {i} outside [0, {self._starts.size - 1})")
        recs = self._cols[int(self._starts[i]) : int(self._starts[i + 1])].tolist()
        if shards is not None:
            if type(shards) is not list:
                raise TypeError("shards must be a list or None")
            for fid in dict.fromkeys(r[2] for r in recs):
                if 0 <= fid < len(shards) and shards[fid] is not None:
                    bad = self.sample(shards[fid], i, fid)
                    if bad >= 0:
                        raise HeaderMismatch(bad)
        return recs

    def batch(self, buf, rows, fid: int) -> int:
        """The first of the rows numbered in ``rows`` (int64) in shard ``fid`` whose header
        does not name it, or -1."""
        rw = np.asarray(rows)
        if rw.dtype != np.int64 or rw.ndim != 1:
            raise ValueError("rows must be an aligned, C-contiguous int64 array")
        n, exts = self._cols.shape[0], self.exts
        todo = []
        for k, row in enumerate(rw.tolist()):
            if not 0 <= row < n:
                raise IndexError(f"rows[{k}] = {row} outside [0, {n})")
            start, size, f, extid = (int(v) for v in self._cols[row])
            if not 0 <= extid < len(exts):
                raise ValueError(f"row {row}: extid {extid} outside exts ({len(exts)})")
            e = exts[extid]
            if e is not None and type(e) is not bytes:
                raise TypeError("exts must hold bytes or None")
            if f == fid and e is not None:
                todo.append((row, start, size, e))
        for row, start, size, e in todo:
            if start < 512 or size < 0:
                return row
            if check_member(buf, start - 512, size, int(self._kh[row]), e, self.checksum) != M_OK:
                return row
        return -1

    def sample(self, buf, i: int, fid: int) -> int:
        """The first row of sample ``i`` in shard ``fid`` whose header does not name it, or -1."""
        if not 0 <= i < self._starts.size - 1:
            raise IndexError(f"sample {i} outside [0, {self._starts.size - 1})")
        exts = self.exts
        for k in range(int(self._starts[i]), int(self._starts[i + 1])):
            start, size, f, extid = (int(v) for v in self._cols[k])
            keyhash = int(self._kh[k])
            if f != fid:
                continue
            if not 0 <= extid < len(exts):
                raise ValueError(f"row {k}: extid {extid} outside exts ({len(exts)})")
            e = exts[extid]
            if e is None:
                continue
            if type(e) is not bytes:
                raise TypeError("exts must hold bytes or None")
            if start < 512 or size < 0:
                return k
            if check_member(buf, start - 512, size, keyhash, e, self.checksum) != M_OK:
                return k
        return -1

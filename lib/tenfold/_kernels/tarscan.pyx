# cython: language_level=3
"""Tar header walker: one pass over the 512-byte headers of a (memory-mapped) tar archive.

Knows tar (ustar, pax ``x``/``g`` records ``path`` and ``size``, GNU ``L``/``K`` long names,
base-256 numbers, header checksums); knows nothing of what the members mean. For every member
that is not an extended header it reports the offset of its own header block, its payload size,
its typeflag and where its name lies in the buffer: ``(prefix_off, prefix_len)`` (ustar prefix,
length 0 when absent) and ``(name_off, name_len)`` (the name field, a pax ``path`` value or a GNU
long name, NUL-terminated fields cut at the NUL). The full name is ``prefix + "/" + name`` when
``prefix_len > 0``.

``scan`` returns ``(count, code, where)``: ``code`` is one of the ``E_*`` constants (0 = clean end:
an all-zero block or the end of the buffer at a block boundary) and ``where`` the byte offset of
the header at fault.
"""

from libc.stdint cimport uint8_t, int64_t, uint64_t
from libc.string cimport memmove
cimport cython
from .strhash cimport xxh64

cdef enum:
    C_OK = 0
    C_TRUNCATED_HEADER = 1
    C_CHECKSUM = 2
    C_NUMBER = 3
    C_PAYLOAD_PAST_END = 4
    C_PAX = 5
    C_DANGLING_EXTENDED = 6
    C_CAPACITY = 7
    C_SPARSE = 8

cdef enum:
    F_ASCII = 1
    F_NEWLINE = 2

E_OK = C_OK
E_TRUNCATED_HEADER = C_TRUNCATED_HEADER
E_CHECKSUM = C_CHECKSUM
E_NUMBER = C_NUMBER
E_PAYLOAD_PAST_END = C_PAYLOAD_PAST_END
E_PAX = C_PAX
E_DANGLING_EXTENDED = C_DANGLING_EXTENDED
E_CAPACITY = C_CAPACITY
E_SPARSE = C_SPARSE
FLAG_ASCII = F_ASCII
FLAG_NEWLINE = F_NEWLINE

cdef int64_t NUM_ERR = -1

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define TF_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 3)
    #else
    #define TF_PREFETCH(p) ((void)0)
    #endif
    """
    void TF_PREFETCH(const void* p) noexcept nogil

cdef extern from *:
    """
    /* Sum of the 512 bytes of a header block (unsigned). SSE2 psadbw: 8 bytes per lane. */
    #if defined(__SSE2__) && (defined(__x86_64__) || defined(_M_X64))
    #include <emmintrin.h>
    static inline uint64_t tf_sum512(const uint8_t* p) {
        __m128i acc = _mm_setzero_si128(), z = _mm_setzero_si128();
        int i;
        for (i = 0; i < 512; i += 16)
            acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_loadu_si128((const __m128i*)(p + i)), z));
        return (uint64_t)_mm_cvtsi128_si64(acc)
            + (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc));
    }
    #else
    static inline uint64_t tf_sum512(const uint8_t* p) {
        uint64_t s = 0;
        int i;
        for (i = 0; i < 512; i++) s += p[i];
        return s;
    }
    #endif
    """
    uint64_t tf_sum512(const uint8_t* p) noexcept nogil


cdef inline int64_t parse_number(const uint8_t* p, int w) noexcept nogil:
    """tar numeric field: octal (NUL-terminated, spaces around) or base-256; -1 if invalid."""
    cdef int i, end, start
    cdef uint64_t v = 0
    if p[0] & 0x80:
        if p[0] != 0x80:
            return NUM_ERR  # negative (0xff) or unknown marker
        for i in range(1, w):
            if v >> 55:
                return NUM_ERR
            v = (v << 8) | p[i]
        if v >> 62:
            return NUM_ERR
        return <int64_t>v
    end = 0
    while end < w and p[end] != 0:
        end += 1
    start = 0
    while start < end and p[start] == 32:
        start += 1
    while end > start and p[end - 1] == 32:
        end -= 1
    for i in range(start, end):
        if p[i] < 48 or p[i] > 55:
            return NUM_ERR
        v = (v << 3) | (p[i] - 48)
    return <int64_t>v


cdef inline bint checksum_ok(const uint8_t* h) noexcept nogil:
    cdef int64_t want = parse_number(h + 148, 8)
    cdef uint64_t us = 0
    cdef int64_t ss = 0
    cdef int i
    if want < 0:
        return False
    us = tf_sum512(h)
    for i in range(148, 156):
        us -= h[i]
    us += 8 * 32
    if <int64_t>us == want:
        return True
    for i in range(512):  # historic writers used a signed sum
        ss += <signed char>h[i]
    for i in range(148, 156):
        ss -= <signed char>h[i]
    ss += 8 * 32
    return ss == want


cdef inline bint all_zero(const uint8_t* h, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        if h[i] != 0:
            return False
    return True


cdef inline int64_t cstrlen(const uint8_t* p, int64_t w) noexcept nogil:
    cdef int64_t i = 0
    while i < w and p[i] != 0:
        i += 1
    return i


cdef int parse_pax(const uint8_t* base, int64_t start, int64_t end,
                   int64_t* path_off, int64_t* path_len, int64_t* size_val) noexcept nogil:
    """Parse pax records in base[start:end]; set path/size when present. 0 ok, -1 malformed."""
    cdef int64_t pos = start, L, i, sp, eq, v, rec_end
    cdef int64_t klen
    while pos < end:
        if base[pos] == 0:
            return 0  # NUL padding after the last record
        L = 0
        i = pos
        while i < end and 48 <= base[i] <= 57:
            if L > (<int64_t>1 << 40):
                return -1
            L = L * 10 + (base[i] - 48)
            i += 1
        if i == pos or i >= end or base[i] != 32:
            return -1
        sp = i
        rec_end = pos + L
        if L < 5 or rec_end > end or rec_end <= sp + 1 or base[rec_end - 1] != 10:
            return -1
        eq = sp + 1
        while eq < rec_end - 1 and base[eq] != 61:
            eq += 1
        if eq >= rec_end - 1:
            return -1
        klen = eq - sp - 1
        if klen == 4 and base[sp + 1] == 112 and base[sp + 2] == 97 and base[sp + 3] == 116 \
                and base[sp + 4] == 104:  # "path"
            path_off[0] = eq + 1
            path_len[0] = rec_end - 1 - (eq + 1)
        elif klen == 4 and base[sp + 1] == 115 and base[sp + 2] == 105 \
                and base[sp + 3] == 122 and base[sp + 4] == 101:  # "size"
            v = 0
            if rec_end - 1 == eq + 1:
                return -1
            for i in range(eq + 1, rec_end - 1):
                if base[i] < 48 or base[i] > 57 or v > (<int64_t>1 << 58):
                    return -1
                v = v * 10 + (base[i] - 48)
            size_val[0] = v
        pos = rec_end
    return 0


cdef struct Walk:
    int64_t pos          # next header to read
    int64_t stop         # stop (without reading) once pos >= stop (the next lane's start)
    int64_t base         # first output slot of this walk
    int64_t count        # members written (from base)
    int64_t limit        # output slots available: base + count < limit
    int64_t l_path_off
    int64_t l_path_len
    int64_t l_size
    int64_t g_path_off
    int64_t g_path_len
    int64_t g_size
    bint pending
    bint done            # finished: clean end or error (code, where), or reached stop
    bint reached         # done because pos >= stop
    int code
    int64_t where


cdef struct Outs:
    int64_t* hdr_off
    int64_t* size
    int64_t* prefix_off  # NULL: not recorded (``walk``)
    int64_t* prefix_len
    int64_t* name_off
    int64_t* name_len
    uint8_t* typeflag
    # ``walk`` only (NULL for ``scan``): the basename split at its first dot, hashed
    int64_t* stem_off
    int64_t* stem_len
    uint64_t* keyhash
    uint64_t* exthash
    uint8_t* flags
    bint regular_only    # record regular files only (typeflag '0', NUL, '7')


cdef inline void walk_init(Walk* w, int64_t pos, int64_t stop, int64_t base,
                           int64_t limit) noexcept nogil:
    w.pos = pos
    w.stop = stop
    w.base = base
    w.count = 0
    w.limit = limit
    w.l_path_off = -1
    w.l_path_len = 0
    w.l_size = -1
    w.g_path_off = -1
    w.g_path_len = 0
    w.g_size = -1
    w.pending = False
    w.done = False
    w.reached = False
    w.code = C_OK
    w.where = 0


cdef inline void finish(Walk* w, int code, int64_t where) noexcept nogil:
    w.done = True
    w.code = code
    w.where = where


cdef void step(Walk* w, const uint8_t* b, int64_t n, Outs* o) noexcept nogil:
    """Process the header at ``w.pos`` (or finish the walk)."""
    cdef int64_t pos = w.pos, sz, data_end, nblocks, k
    cdef int64_t tmp_off, tmp_len, tmp_size
    cdef const uint8_t* h
    cdef uint8_t t
    if pos >= w.stop:
        w.done = True
        w.reached = True
        return
    if pos >= n:
        if w.pending:
            finish(w, C_DANGLING_EXTENDED, pos)
        else:
            finish(w, C_OK, 0)
        return
    h = b + pos
    if pos + 512 > n:
        if not all_zero(h, n - pos):
            finish(w, C_TRUNCATED_HEADER, pos)
        elif w.pending:
            finish(w, C_DANGLING_EXTENDED, pos)
        else:
            finish(w, C_OK, 0)
        return
    if all_zero(h, 512):
        if w.pending:
            finish(w, C_DANGLING_EXTENDED, pos)
        else:
            finish(w, C_OK, 0)
        return
    sz = parse_number(h + 124, 12)
    t = h[156]
    if sz >= 0 and pos + 1024 + sz <= n:
        # fetch the (likely) next header while this one is checked: the walk is
        # bound by memory latency, one header per page
        nblocks = pos + 512 + ((sz + 511) // 512) * 512
        for k in range(0, 512, 64):
            TF_PREFETCH(b + nblocks + k)
    if not checksum_ok(h):
        finish(w, C_CHECKSUM, pos)
        return
    if sz < 0:
        finish(w, C_NUMBER, pos)
        return
    if t == 120 or t == 103:  # 'x' / 'g' pax
        data_end = pos + 512 + sz
        if data_end > n:
            finish(w, C_PAYLOAD_PAST_END, pos)
            return
        tmp_off = -1
        tmp_len = 0
        tmp_size = -1
        if parse_pax(b, pos + 512, data_end, &tmp_off, &tmp_len, &tmp_size) != 0:
            finish(w, C_PAX, pos)
            return
        if t == 120:
            if tmp_off >= 0:
                w.l_path_off = tmp_off
                w.l_path_len = tmp_len
            if tmp_size >= 0:
                w.l_size = tmp_size
            w.pending = True
        else:
            if tmp_off >= 0:
                w.g_path_off = tmp_off
                w.g_path_len = tmp_len
            if tmp_size >= 0:
                w.g_size = tmp_size
        w.pos = pos + 512 + ((sz + 511) // 512) * 512
        return
    if t == 76 or t == 75:  # GNU 'L' long name / 'K' long link name
        data_end = pos + 512 + sz
        if data_end > n:
            finish(w, C_PAYLOAD_PAST_END, pos)
            return
        if t == 76:
            w.l_path_off = pos + 512
            w.l_path_len = cstrlen(b + pos + 512, sz)
        w.pending = True
        w.pos = pos + 512 + ((sz + 511) // 512) * 512
        return
    if t == 83:  # 'S' GNU sparse: the payload is not the file
        finish(w, C_SPARSE, pos)
        return
    if w.l_size >= 0:
        sz = w.l_size
    elif w.g_size >= 0:
        sz = w.g_size
    if not o.regular_only or t == 48 or t == 0 or t == 55:
        k = w.base + w.count
        if k >= w.limit:
            finish(w, C_CAPACITY, pos)
            return
        o.hdr_off[k] = pos
        o.size[k] = sz
        o.typeflag[k] = t
        if w.l_path_off >= 0:
            o.name_off[k] = w.l_path_off
            o.name_len[k] = w.l_path_len
        elif w.g_path_off >= 0:
            o.name_off[k] = w.g_path_off
            o.name_len[k] = w.g_path_len
        else:
            o.name_off[k] = pos
            o.name_len[k] = cstrlen(h, 100)
        if o.prefix_off != NULL:
            if w.l_path_off >= 0 or w.g_path_off >= 0:
                o.prefix_off[k] = 0
                o.prefix_len[k] = 0
            else:
                o.prefix_off[k] = pos + 345
                # POSIX ustar ("ustar\0") has a prefix field; GNU ("ustar  \0") does not
                if (h[257] == 117 and h[258] == 115 and h[259] == 116 and h[260] == 97
                        and h[261] == 114 and h[262] == 0):
                    o.prefix_len[k] = cstrlen(h + 345, 155)
                else:
                    o.prefix_len[k] = 0
        if o.keyhash != NULL:
            split_name(b, o, k)
        w.count += 1
    w.l_path_off = -1
    w.l_path_len = 0
    w.l_size = -1
    w.pending = False
    if 49 <= t <= 54:  # '1'..'6': links, devices, directories, FIFOs carry no data
        nblocks = 0
    else:
        if pos + 512 + sz > n:
            finish(w, C_PAYLOAD_PAST_END, pos)
            return
        nblocks = (sz + 511) // 512
    w.pos = pos + 512 + nblocks * 512


cdef inline void split_name(const uint8_t* b, Outs* o, int64_t k) noexcept nogil:
    """Row ``k``'s basename (after the last ``/`` of its name) split at its first ``.``: stem
    range, ``keyhash = xxh64(stem)``, ``exthash = xxh64(ascii-lower-cased extension)``, and
    ``flags`` (``F_ASCII``: the basename is 7-bit ASCII; ``F_NEWLINE``: it holds a newline)."""
    cdef int64_t s = o.name_off[k], e = s + o.name_len[k], j, dot = -1
    cdef uint8_t acc = 0, c
    cdef uint8_t nl = 0
    j = e
    while j > s and b[j - 1] != 47:
        j -= 1
    s = j
    for j in range(s, e):
        c = b[j]
        acc |= c
        if c == 10:
            nl = F_NEWLINE
        elif c == 46 and dot < 0:
            dot = j
    if dot < 0:
        dot = e
    o.stem_off[k] = s
    o.stem_len[k] = dot - s
    o.keyhash[k] = xxh64(b + s, dot - s, 0, False)
    if dot < e:
        o.exthash[k] = xxh64(b + dot + 1, e - dot - 1, 0, True)
    else:
        o.exthash[k] = xxh64(b + e, 0, 0, True)
    o.flags[k] = (F_ASCII if acc < 128 else 0) | nl


cdef inline bint clean(Walk* w) noexcept nogil:
    """No extended-header state carried forward (a walk started at a header has none)."""
    return (not w.pending and w.l_path_off < 0 and w.l_size < 0 and w.g_path_off < 0
            and w.g_size < 0)


cdef int64_t find_start(const uint8_t* b, int64_t n, int64_t frm, int64_t to) noexcept nogil:
    """A block in [frm, to) that looks like a plain member header (ustar magic, valid checksum,
    regular typeflag), or -1. Only a guess: the walk before it confirms it by landing there."""
    cdef int64_t p = frm
    cdef const uint8_t* h
    cdef uint8_t t
    while p + 512 <= n and p < to:
        h = b + p
        t = h[156]
        if (h[257] == 117 and h[258] == 115 and h[259] == 116 and h[260] == 97
                and h[261] == 114 and (t == 48 or t == 0 or t == 55)
                and parse_number(h + 124, 12) >= 0 and checksum_ok(h)):
            return p
        p += 512
    return -1


DEF MAX_LANES = 8
#: ``stop`` of a walk that runs to the end (a walk's position can pass the buffer's end).
DEF NO_STOP = 0x7FFFFFFFFFFFFFFF
#: Bytes per lane when ``lanes=0`` picks the number itself.
DEF AUTO_LANE_BYTES = 8 << 20


@cython.boundscheck(False)
@cython.wraparound(False)
def scan(const uint8_t[::1] buf, int64_t[::1] hdr_off, int64_t[::1] size,
         int64_t[::1] prefix_off, int64_t[::1] prefix_len, int64_t[::1] name_off,
         int64_t[::1] name_len, uint8_t[::1] typeflag, int lanes=0):
    """Walk the headers of the tar archive in ``buf``; fill the outputs; ``(count, code, where)``.

    Every output must hold ``len(buf) // 512`` entries (the most members a buffer can have).

    The walk is a chain of dependent memory reads (each header gives the next one's offset), so
    on a large buffer it runs ``lanes`` walks interleaved in one loop (their cache misses
    overlap): walk ``i`` starts at a block that looks like a member header near
    ``i * len(buf) / lanes`` and its members count only if walk ``i - 1`` lands exactly on that
    block with no extended-header state; otherwise walk ``i - 1`` simply carries on. The result
    is always the one of a single walk. ``lanes=0`` chooses (one per 8 MiB, at most 8); ``1``
    forces one walk.
    """
    cdef int64_t n = buf.shape[0]
    cdef int64_t cap = n // 512
    if (hdr_off.shape[0] < cap or size.shape[0] < cap or prefix_off.shape[0] < cap
            or prefix_len.shape[0] < cap or name_off.shape[0] < cap
            or name_len.shape[0] < cap or typeflag.shape[0] < cap):
        raise ValueError(f"outputs must hold len(buf) // 512 = {cap} entries")
    if lanes < 0:
        raise ValueError(f"lanes must be >= 0, got {lanes}")
    if n == 0:
        return 0, 0, 0
    cdef const uint8_t* b = &buf[0]
    cdef Outs o
    cdef Walk walks[MAX_LANES]
    cdef int nl, i, live, j
    cdef int64_t s, total, frm
    o.hdr_off = &hdr_off[0]
    o.size = &size[0]
    o.prefix_off = &prefix_off[0]
    o.prefix_len = &prefix_len[0]
    o.name_off = &name_off[0]
    o.name_len = &name_len[0]
    o.typeflag = &typeflag[0]
    o.stem_off = NULL
    o.stem_len = NULL
    o.keyhash = NULL
    o.exthash = NULL
    o.flags = NULL
    o.regular_only = False
    if lanes == 0:
        nl = <int>min(<int64_t>MAX_LANES, max(<int64_t>1, n // AUTO_LANE_BYTES))
    else:
        nl = min(lanes, MAX_LANES)
    with nogil:
        # lane starts: a plausible header after each equal split point (strictly increasing)
        walk_init(&walks[0], 0, NO_STOP, 0, cap)
        j = 1
        for i in range(1, nl):
            frm = ((n * i // nl) // 512) * 512
            if frm <= walks[j - 1].pos:
                frm = walks[j - 1].pos + 512
            s = find_start(b, n, frm, frm + (n // nl))
            if s < 0:
                continue
            walks[j - 1].stop = s
            walks[j - 1].limit = s // 512
            walk_init(&walks[j], s, NO_STOP, s // 512, cap)
            j += 1
        nl = j
        live = nl
        while live:
            live = 0
            for i in range(nl):
                if not walks[i].done:
                    step(&walks[i], b, n, &o)
                    live += 1
        # join: walk i-1 must have stopped exactly at walk i's start, with no state
        total = walks[0].count
        i = 0
        while i + 1 < nl:
            if not (walks[i].reached and walks[i].pos == walks[i + 1].base * 512
                    and clean(&walks[i])):
                break
            j = i + 1
            if walks[j].count and walks[j].base != total:
                memmove(o.hdr_off + total, o.hdr_off + walks[j].base, 8 * walks[j].count)
                memmove(o.size + total, o.size + walks[j].base, 8 * walks[j].count)
                memmove(o.prefix_off + total, o.prefix_off + walks[j].base, 8 * walks[j].count)
                memmove(o.prefix_len + total, o.prefix_len + walks[j].base, 8 * walks[j].count)
                memmove(o.name_off + total, o.name_off + walks[j].base, 8 * walks[j].count)
                memmove(o.name_len + total, o.name_len + walks[j].base, 8 * walks[j].count)
                memmove(o.typeflag + total, o.typeflag + walks[j].base, walks[j].count)
            total += walks[j].count
            i = j
        if walks[i].reached:
            # the join failed: walk i carries on alone from where it stopped
            walks[i].stop = NO_STOP
            walks[i].limit = cap
            walks[i].done = False
            walks[i].reached = False
            walks[i].base = total - walks[i].count
            while not walks[i].done:
                step(&walks[i], b, n, &o)
            total = walks[i].base + walks[i].count
    return total, walks[i].code, walks[i].where


#: ``walk``'s ``status``: finished (clean end or error), or stopped at ``stop`` with no
#: extended-header state carried forward, or with some.
WALK_FINISHED = 0
WALK_STOPPED = 1
WALK_STOPPED_STATE = 2


@cython.boundscheck(False)
@cython.wraparound(False)
def find_member(const uint8_t[::1] buf, int64_t frm, int64_t to):
    """The first block at or after ``frm`` (block-aligned upwards), before ``to``, that looks like
    where a member starts: ustar magic, a regular-file or extended-header typeflag (``0``,
    NUL, ``7``, ``x``, ``g``, ``L``, ``K``), valid size and checksum, and no extended header
    whose data ends right before it; -1 when there is none. A guess only (a payload may hold
    such a block): ``walk`` from the block before it confirms it by landing there."""
    cdef int64_t n = buf.shape[0], p, r = -1
    cdef const uint8_t* h
    cdef uint8_t t
    if frm < 0 or to < frm:
        raise ValueError(f"need 0 <= frm <= to, got frm={frm}, to={to}")
    if n == 0:
        return -1
    cdef const uint8_t* b = &buf[0]
    with nogil:
        p = ((frm + 511) // 512) * 512
        while p < to and p + 512 <= n:
            h = b + p
            t = h[156]
            if (h[257] == 117 and h[258] == 115 and h[259] == 116 and h[260] == 97
                    and h[261] == 114
                    and (t == 48 or t == 0 or t == 55 or t == 120 or t == 103 or t == 76
                         or t == 75)
                    and parse_number(h + 124, 12) >= 0 and checksum_ok(h)
                    and extended_before(b, p) < 0):
                r = p
                break
            p += 512
    return r


@cython.boundscheck(False)
@cython.wraparound(False)
def walk(const uint8_t[::1] buf, int64_t start, int64_t stop, int64_t[::1] hdr_off,
         int64_t[::1] size, int64_t[::1] name_off, int64_t[::1] name_len,
         int64_t[::1] stem_off, int64_t[::1] stem_len, uint64_t[::1] keyhash,
         uint64_t[::1] exthash, uint8_t[::1] typeflag, uint8_t[::1] flags,
         bint regular_only=True):
    """Walk the headers from ``start`` (a header block, with no extended-header state) until
    the archive ends or the next header is at or past ``stop``; ``(count, code, where, end,
    status)``.

    Row ``i < count`` of the outputs is the ``i``-th member (only regular files when
    ``regular_only``): header offset, size, name (as ``scan``, without the ustar prefix), the
    basename split at its first ``.`` (``stem_off``/``stem_len``), ``keyhash = xxh64(stem)``,
    ``exthash = xxh64(extension lower-cased, ASCII letters only)``, typeflag, and ``flags``
    (``FLAG_ASCII``: the basename is 7-bit ASCII; ``FLAG_NEWLINE``: it holds a newline).
    Outputs have one length; a walk with more members than that ends with ``E_CAPACITY``.

    ``status`` is ``WALK_FINISHED`` (``code``/``where`` as ``scan``), or ``WALK_STOPPED`` /
    ``WALK_STOPPED_STATE`` when it stopped at ``end >= stop`` without / with extended-header
    state to carry to the header at ``end``. Walks of consecutive ranges whose starts come
    from ``find_member`` give one walk's members when each stopped exactly at the next one's
    start with no state (else walk on from the last good start).
    """
    cdef int64_t n = buf.shape[0], cap = hdr_off.shape[0]
    if (size.shape[0] != cap or name_off.shape[0] != cap or name_len.shape[0] != cap
            or stem_off.shape[0] != cap or stem_len.shape[0] != cap
            or keyhash.shape[0] != cap or exthash.shape[0] != cap
            or typeflag.shape[0] != cap or flags.shape[0] != cap):
        raise ValueError("outputs must have one length")
    if start < 0 or start > n or start % 512:
        raise ValueError(f"start must be a multiple of 512 in [0, {n}], got {start}")
    if stop < start:
        raise ValueError(f"stop must be >= start, got stop={stop}, start={start}")
    cdef Outs o
    cdef Walk w
    cdef const uint8_t* b = &buf[0] if n else NULL
    o.prefix_off = NULL
    o.prefix_len = NULL
    o.regular_only = regular_only
    if cap:
        o.hdr_off = &hdr_off[0]
        o.size = &size[0]
        o.name_off = &name_off[0]
        o.name_len = &name_len[0]
        o.stem_off = &stem_off[0]
        o.stem_len = &stem_len[0]
        o.keyhash = &keyhash[0]
        o.exthash = &exthash[0]
        o.typeflag = &typeflag[0]
        o.flags = &flags[0]
    else:  # never written: the capacity check comes first
        o.hdr_off = o.size = o.name_off = o.name_len = o.stem_off = o.stem_len = NULL
        o.keyhash = o.exthash = NULL
        o.typeflag = o.flags = NULL
    walk_init(&w, start, stop, 0, cap)
    with nogil:
        while not w.done:
            step(&w, b, n, &o)
    if not w.reached:
        return w.count, w.code, w.where, w.pos, WALK_FINISHED
    return w.count, 0, 0, w.pos, WALK_STOPPED if clean(&w) else WALK_STOPPED_STATE


# -- checking that a header block names the member a row claims --------------------------------
# (used on every TARIDX read: one call per member, so the buffer is taken through the buffer
# protocol directly rather than as a typed memoryview, which costs twice as much per call)

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.string cimport memchr, memcpy

cdef enum:
    CM_OK = 0
    CM_PAST_END = 1
    CM_NO_HEADER = 2
    CM_NOT_REGULAR = 3
    CM_NAME = 4
    CM_SIZE = 5
    CM_NON_ASCII = 6

M_OK = CM_OK
M_PAST_END = CM_PAST_END
M_NO_HEADER = CM_NO_HEADER
M_NOT_REGULAR = CM_NOT_REGULAR
M_NAME = CM_NAME
M_SIZE = CM_SIZE
M_NON_ASCII = CM_NON_ASCII

#: How far before a member header an extended header's data may start (blocks): 1 MiB.
DEF LOOKBACK_BLOCKS = 2048
#: Most extended headers followed back from one member.
DEF MAX_CHAIN = 8
LOOKBACK = LOOKBACK_BLOCKS * 512


cdef int64_t extended_before(const uint8_t* b, int64_t pos) noexcept nogil:
    """Offset of the extended header (pax ``x``/``g``, GNU ``L``/``K``) whose data ends exactly
    at ``pos`` (valid checksum, size field giving that many blocks), or -1."""
    cdef int64_t k, p, sz
    cdef uint8_t t
    for k in range(LOOKBACK_BLOCKS + 1):
        p = pos - 512 * (k + 1)
        if p < 0:
            return -1
        t = b[p + 156]
        if t == 120 or t == 103 or t == 76 or t == 75:
            sz = parse_number(b + p + 124, 12)
            if sz >= 0 and (sz + 511) // 512 == k and checksum_ok(b + p):
                return p
    return -1


cdef int header_at(const uint8_t* b, int64_t n, int64_t off) noexcept nogil:
    """0 when ``off`` holds a member header block (in the buffer, not zero, valid checksum and
    size field), else the ``CM_*`` code."""
    if off < 0 or off > n - 512:
        return CM_PAST_END
    if all_zero(b + off, 512) or not checksum_ok(b + off) or parse_number(b + off + 124, 12) < 0:
        return CM_NO_HEADER
    return CM_OK


cdef void extended_name(const uint8_t* b, int64_t off, int64_t* name_off, int64_t* name_len,
                        int64_t* size) noexcept nogil:
    """The name and size the scanner gives the member whose (valid) header is at ``off``.

    Follows adjacent extended headers back (each one's data ends where the next header starts)
    until one gives a local path (pax ``x`` ``path`` or GNU ``L``), at most ``MAX_CHAIN``: the
    nearest local path and size win, then the nearest global (``g``) ones, then the ustar name
    field and size field. A global header that is not in that adjacent chain is not seen.
    """
    cdef int64_t pos = off, p, sz, t_off, t_len, t_size
    cdef int64_t l_off = -1, l_len = 0, l_size = -1, g_off = -1, g_len = 0, g_size = -1
    cdef int i
    cdef uint8_t t
    for i in range(MAX_CHAIN):
        p = extended_before(b, pos)
        if p < 0:
            break
        t = b[p + 156]
        sz = parse_number(b + p + 124, 12)
        if t == 76:  # 'L'
            if l_off < 0:
                l_off = p + 512
                l_len = cstrlen(b + p + 512, sz)
        elif t == 120 or t == 103:  # 'x' / 'g'
            t_off = -1
            t_len = 0
            t_size = -1
            if parse_pax(b, p + 512, p + 512 + sz, &t_off, &t_len, &t_size) != 0:
                break  # not a header the scanner would have accepted: stop here
            if t == 120:
                if l_off < 0 and t_off >= 0:
                    l_off = t_off
                    l_len = t_len
                if l_size < 0 and t_size >= 0:
                    l_size = t_size
            else:
                if g_off < 0 and t_off >= 0:
                    g_off = t_off
                    g_len = t_len
                if g_size < 0 and t_size >= 0:
                    g_size = t_size
        if l_off >= 0:
            break
        pos = p
    if l_off >= 0:
        name_off[0] = l_off
        name_len[0] = l_len
    elif g_off >= 0:
        name_off[0] = g_off
        name_len[0] = g_len
    else:
        name_off[0] = off
        name_len[0] = cstrlen(b + off, 100)
    if l_size >= 0:
        size[0] = l_size
    elif g_size >= 0:
        size[0] = g_size
    else:
        size[0] = parse_number(b + off + 124, 12)


cdef inline int64_t name_len(const uint8_t* h) noexcept nogil:
    """Length of the NUL-terminated 100-byte ustar name field (``memchr``)."""
    cdef const void* z = memchr(h, 0, 100)
    return 100 if z == NULL else <int64_t>(<const uint8_t*>z - h)


cdef int name_is(const uint8_t* p, int64_t n, uint64_t keyhash, const uint8_t* ext,
                 int64_t ext_len) noexcept nogil:
    """Does name ``p[:n]`` give stem hash ``keyhash`` and extension ``ext``, split as the index
    builder splits (basename after the last ``/``, at its first ``.``, extension ASCII-lower-
    cased)? 0 yes, ``CM_NAME`` no, ``CM_NON_ASCII`` when the basename is not 7-bit ASCII."""
    cdef int64_t s = n, j, dot
    cdef uint64_t acc = 0, w
    cdef uint8_t c
    cdef const void* d
    while s > 0 and p[s - 1] != 47:
        s -= 1
    j = s
    while j + 8 <= n:  # 7-bit ASCII, 8 bytes at a time
        memcpy(&w, p + j, 8)
        acc |= w
        j += 8
    while j < n:
        acc |= p[j]
        j += 1
    if acc & <uint64_t>0x8080808080808080ULL:
        return CM_NON_ASCII
    d = memchr(p + s, 46, <size_t>(n - s))
    if d == NULL:
        if ext_len != 0:
            return CM_NAME
        dot = n
    else:
        dot = <int64_t>(<const uint8_t*>d - p)
        if n - dot - 1 != ext_len:
            return CM_NAME
        for j in range(ext_len):
            c = p[dot + 1 + j]
            if 65 <= c <= 90:
                c += 32
            if c != ext[j]:
                return CM_NAME
    if xxh64(p + s, dot - s, 0, False) != keyhash:
        return CM_NAME
    return CM_OK


cdef inline bint size_is(const uint8_t* h, int64_t size) noexcept nogil:
    """Does the size field of header ``h`` say ``size``? (11 octal digits and a NUL or space,
    what writers emit below 8 GiB, parsed inline; anything else by ``parse_number``.)"""
    cdef int i
    cdef int64_t v = 0
    cdef uint8_t c
    if h[135] == 0 or h[135] == 32:
        for i in range(124, 135):
            c = h[i]
            if c < 48 or c > 55:
                return parse_number(h + 124, 12) == size
            v = (v << 3) | (c - 48)
        return v == size
    return parse_number(h + 124, 12) == size


cdef int check_one(const uint8_t* b, int64_t n, int64_t off, int64_t size, uint64_t keyhash,
                   const uint8_t* ext, int64_t ext_len, bint checksum) noexcept nogil:
    cdef int code, r
    cdef const uint8_t* h
    cdef uint8_t t
    cdef int64_t e_off, e_len, e_size
    if off < 0 or off > n - 512:
        return CM_PAST_END
    h = b + off
    t = h[156]
    # quick path: the ustar name and size fields (every plain ustar member, and pax members
    # whose extended header only carries times or ids). It reads bytes 0-191 of the block
    # only: a regular typeflag, the row's size and a name whose stem has the row's 64-bit hash
    # and the row's extension do not happen by chance, so the checksum (all 512 bytes) is
    # left to ``checksum=True`` and to the slow path.
    if (not checksum and (t == 48 or t == 0 or t == 55) and 0 <= size <= n - off - 512
            and size_is(h, size) and name_is(h, name_len(h), keyhash, ext, ext_len) == CM_OK):
        return CM_OK
    code = header_at(b, n, off)
    if code:
        return code
    if not (t == 48 or t == 0 or t == 55):
        return CM_NOT_REGULAR
    if size < 0 or size > n - off - 512:
        return CM_PAST_END
    if name_is(h, cstrlen(h, 100), keyhash, ext, ext_len) == CM_OK \
            and parse_number(h + 124, 12) == size:
        return CM_OK
    # then what the extended headers before it say (long or non-ASCII names, pax sizes)
    extended_name(b, off, &e_off, &e_len, &e_size)
    r = name_is(b + e_off, e_len, keyhash, ext, ext_len)
    if r:
        return r
    if e_size != size:
        return CM_SIZE
    return CM_OK


cdef inline int check_ext(object ext, const uint8_t** p, Py_ssize_t* n) except -1:
    if type(ext) is not bytes:
        raise TypeError(f"ext must be bytes, got {type(ext).__name__}")
    p[0] = <const uint8_t*>(<char*>ext)
    n[0] = len(<bytes>ext)
    return 0


def check_member(object buf, int64_t offset, int64_t size, uint64_t keyhash, object ext,
                 bint checksum=False):
    """Does the tar header block at ``offset`` of ``buf`` belong to the member a row claims:
    a regular file of payload ``size`` whose name splits into a stem with xxh64 ``keyhash``
    and the extension ``ext`` (bytes, lower-case)? Returns ``M_OK`` (0) or an ``M_*`` code.

    The header must be a regular member header and the payload must fit in ``buf``. Its
    ustar name and size fields are tried first (when they match, the header checksum is only
    verified with ``checksum=True``: a 64-bit stem hash, extension and size that match do not
    happen by chance); when they do not match, the header must be valid (checksum, size
    field) and the name and size
    that adjacent extended headers before it give (pax ``path``/``size``, GNU long name,
    looking back at most ``LOOKBACK`` bytes) decide. ``M_NON_ASCII``: the name deciding is
    not 7-bit ASCII; the caller compares it (the builder decodes such names first).
    ``buf`` is any C-contiguous buffer (bytes, memoryview, NumPy array).
    """
    cdef Py_buffer view
    cdef const uint8_t* e
    cdef Py_ssize_t e_len
    cdef int code
    check_ext(ext, &e, &e_len)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        code = check_one(<const uint8_t*>view.buf, view.len, offset, size, keyhash, e, e_len,
                         checksum)
    finally:
        PyBuffer_Release(&view)
    return code


def member_name(object buf, int64_t offset, bint extended):
    """``(code, name_off, name_len, size, typeflag)`` of the member header at ``offset``.

    ``code`` is ``M_OK``, ``M_PAST_END`` (no full block there) or ``M_NO_HEADER`` (zero block,
    bad checksum or size field); the other fields are 0 then. With ``extended`` false the name
    is the ustar name field and the size its size field; with ``extended`` true, what the
    adjacent extended headers before it give, as ``check_member`` reads them.
    """
    cdef Py_buffer view
    cdef int code
    cdef int64_t n_off = 0, n_len = 0, sz = 0
    cdef uint8_t t = 0
    cdef const uint8_t* b
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const uint8_t*>view.buf
        code = header_at(b, view.len, offset)
        if code == CM_OK:
            t = b[offset + 156]
            if extended:
                extended_name(b, offset, &n_off, &n_len, &sz)
            else:
                n_off = offset
                n_len = cstrlen(b + offset, 100)
                sz = parse_number(b + offset + 124, 12)
    finally:
        PyBuffer_Release(&view)
    return code, n_off, n_len, sz, t


from libc.stdint cimport uintptr_t
from cpython.tuple cimport PyTuple_GET_SIZE
from cpython.object cimport PyObject
cdef extern from "Python.h":
    PyObject* PyTuple_GET_ITEM(object o, Py_ssize_t i)
    PyObject* PyList_GET_ITEM(object o, Py_ssize_t i)
    bint PyBytes_CheckExact(PyObject* o)
    char* PyBytes_AS_STRING(PyObject* o)
    Py_ssize_t PyBytes_GET_SIZE(PyObject* o)


DEF CHUNK = 32  # rows whose header lines are loaded ahead together (3 lines each, in L1)


cdef inline uint8_t touch_row(const uint8_t* b, Py_ssize_t n, const int64_t* r) noexcept nogil:
    """Load the three cache lines of a row's header that the quick check reads (name, size,
    typeflag)."""
    cdef const uint8_t* h
    if 512 <= r[0] <= n:
        h = b + r[0] - 512
        return h[0] ^ h[64] ^ h[156]
    return 0


cdef int64_t rows_check(const uint8_t* b, Py_ssize_t n, const int64_t* c, const uint64_t* kh,
                        int64_t lo, int64_t hi, int64_t fid, tuple exts,
                        bint checksum) except -2:
    """The first of rows ``lo..hi-1`` (of fid ``fid``, ``exts[extid]`` not None) whose header
    does not name it, or -1. ``c`` holds the rows (4 int64 each), ``kh`` their key hashes;
    ``hi`` is within both (callers check)."""
    cdef int64_t i, n_ext = PyTuple_GET_SIZE(exts), extid
    cdef const int64_t* r
    cdef PyObject* e
    cdef volatile uint8_t sink = 0
    cdef uint8_t acc = 0
    # the header blocks are scattered (random reads): load their lines first in a tight loop
    # so that the misses overlap, and hint the payload's first line, which the caller reads
    for i in range(lo, hi):
        r = c + 4 * i
        if r[2] == fid:
            acc ^= touch_row(b, n, r)
            if 512 <= r[0] < n:
                TF_PREFETCH(b + r[0])
    sink = acc
    for i in range(lo, hi):
        r = c + 4 * i
        if r[2] != fid:
            continue
        extid = r[3]
        if extid < 0 or extid >= n_ext:
            raise ValueError(f"row {i}: extid {extid} outside exts ({n_ext})")
        e = PyTuple_GET_ITEM(exts, <Py_ssize_t>extid)
        if e == <PyObject*>None:
            continue
        if not PyBytes_CheckExact(e):
            raise TypeError("exts must hold bytes or None")
        if r[0] < 512 or r[1] < 0:
            return i
        if check_one(b, n, r[0] - 512, r[1], kh[i],
                     <const uint8_t*>PyBytes_AS_STRING(e), PyBytes_GET_SIZE(e),
                     checksum) != CM_OK:
            return i
    return -1


cdef int64_t batch_check(const uint8_t* b, Py_ssize_t n, const int64_t* c, const uint64_t* kh,
                         const int64_t* rw, int64_t m, int64_t fid, const uint8_t** ext_p,
                         const Py_ssize_t* ext_n, bint checksum) noexcept nogil:
    """``RowCheck.batch`` on checked arguments (row numbers within ``c``, every extid within
    ``ext_p``/``ext_n``; ``ext_n[e] < 0``: extension not checked)."""
    cdef int64_t k, j, row
    cdef const int64_t* r
    cdef volatile uint8_t sink = 0
    cdef uint8_t acc = 0
    for k in range(m):
        if k % CHUNK == 0:
            # the next CHUNK rows (their columns, key hashes and header lines) first, with plain
            # loads in a tight loop, so that the cache and TLB misses of a random batch overlap
            # instead of adding up (prefetch hints to pages whose translation is not cached
            # may be dropped)
            for j in range(k, min(m, k + CHUNK)):
                r = c + 4 * rw[j]
                if r[2] == fid:
                    acc ^= touch_row(b, n, r) ^ <uint8_t>kh[rw[j]]
            sink = acc
        row = rw[k]
        r = c + 4 * row
        if r[2] != fid or ext_n[r[3]] < 0:
            continue
        if r[0] < 512 or r[1] < 0:
            return row
        if check_one(b, n, r[0] - 512, r[1], kh[row], ext_p[r[3]], ext_n[r[3]],
                     checksum) != CM_OK:
            return row
    return -1


class HeaderMismatch(Exception):
    """``RowCheck.rows``: row ``args[0]`` failed the quick check (look at it closely)."""


from cpython.list cimport PyList_New, PyList_SET_ITEM, PyList_GET_SIZE
from cpython.ref cimport Py_INCREF
from cpython.long cimport PyLong_FromLongLong


cdef class RowCheck:
    """``check_member`` for the rows of one sample at a time, in one call (a read's hot path).

    ``cols``: C-contiguous ``int64`` array ``(n, 4)`` of the rows in sample order: payload
    start (header offset + 512), payload size, fid, extid. ``keyhash``: C-contiguous ``uint64``
    array ``(n,)``, their key hashes. ``starts``: C-contiguous ``int64`` array ``(m + 1,)``,
    sample ``i`` is rows ``starts[i]..starts[i+1]-1``. ``exts``:
    tuple, ``exts[extid]`` the extension (bytes) or ``None`` for rows not to check.
    ``checksum``: as in ``check_member``. The arrays' buffers are held (and the arrays kept
    alive) until the object is freed.
    """

    cdef Py_buffer cv
    cdef Py_buffer kv
    cdef Py_buffer sv
    cdef bint have_c
    cdef bint have_k
    cdef bint have_s
    cdef int64_t n_rows
    cdef int64_t n_samples
    cdef readonly tuple exts
    cdef readonly bint checksum
    cdef object _keep
    # for ``batch``: every row's extid within ``exts`` and every item bytes or None (checked
    # once, here), the items' bytes as C arrays (the tuple keeps them alive)
    cdef bint exts_ok
    cdef const uint8_t** ext_p
    cdef Py_ssize_t* ext_n

    def __cinit__(self, object cols, object keyhash, object starts, tuple exts,
                  bint checksum=False):
        cdef int64_t k, prev = 0, v
        cdef const int64_t* st
        self.have_c = False
        self.have_k = False
        self.have_s = False
        PyObject_GetBuffer(cols, &self.cv, PyBUF_SIMPLE)
        self.have_c = True
        PyObject_GetBuffer(keyhash, &self.kv, PyBUF_SIMPLE)
        self.have_k = True
        PyObject_GetBuffer(starts, &self.sv, PyBUF_SIMPLE)
        self.have_s = True
        if self.cv.len % 32 or (<uintptr_t>self.cv.buf) % 8:
            raise ValueError("cols must be an aligned, C-contiguous int64 array of shape (n, 4)")
        if self.kv.len != self.cv.len // 4 or (<uintptr_t>self.kv.buf) % 8:
            raise ValueError("keyhash must be an aligned, C-contiguous uint64 array, one per row")
        if self.sv.len % 8 or self.sv.len < 8 or (<uintptr_t>self.sv.buf) % 8:
            raise ValueError("starts must be an aligned, C-contiguous int64 array, length >= 1")
        self.n_rows = self.cv.len // 32
        self.n_samples = self.sv.len // 8 - 1
        st = <const int64_t*>self.sv.buf
        for k in range(self.n_samples + 1):  # non-decreasing, inside the rows: no check below
            v = st[k]
            if v < prev or v > self.n_rows:
                raise ValueError(f"starts[{k}] = {v} is not in [{prev}, {self.n_rows}]")
            prev = v
        self.exts = exts
        self.checksum = checksum
        self._keep = (cols, keyhash, starts)
        self.exts_ok = False
        self.ext_p = NULL
        self.ext_n = NULL
        self._prepare_exts()

    cdef int _prepare_exts(self) except -1:
        cdef Py_ssize_t k, n_ext = len(self.exts)
        cdef int64_t r
        cdef const int64_t* c = <const int64_t*>self.cv.buf
        cdef object e
        for k in range(n_ext):
            e = self.exts[k]
            if e is not None and type(e) is not bytes:
                return 0  # ``batch`` raises; ``rows``/``sample`` raise on the rows that use it
        for r in range(self.n_rows):
            if c[4 * r + 3] < 0 or c[4 * r + 3] >= n_ext:
                return 0
        self.ext_p = <const uint8_t**>PyMem_Malloc(max(n_ext, 1) * sizeof(uint8_t*))
        self.ext_n = <Py_ssize_t*>PyMem_Malloc(max(n_ext, 1) * sizeof(Py_ssize_t))
        if self.ext_p == NULL or self.ext_n == NULL:
            raise MemoryError()
        for k in range(n_ext):
            e = self.exts[k]
            if e is None:
                self.ext_p[k] = NULL
                self.ext_n[k] = -1
            else:
                self.ext_p[k] = <const uint8_t*>PyBytes_AS_STRING(<PyObject*>e)
                self.ext_n[k] = PyBytes_GET_SIZE(<PyObject*>e)
        self.exts_ok = True
        return 0

    def __dealloc__(self):
        PyMem_Free(self.ext_p)
        PyMem_Free(self.ext_n)
        if self.have_c:
            PyBuffer_Release(&self.cv)
        if self.have_k:
            PyBuffer_Release(&self.kv)
        if self.have_s:
            PyBuffer_Release(&self.sv)

    def rows(self, int64_t i, object shards):
        """Sample ``i``'s rows as lists ``[start, size, fid, extid]`` (what ``tolist`` of its
        ``cols`` rows gives). With ``shards`` a list (item ``fid``: that shard's buffer, or
        ``None`` when it is not open) the rows whose shard is there are checked first, as
        ``sample`` checks them: ``HeaderMismatch(row)`` for the first that fails; rows of
        shards that are ``None`` or past the list are left to the caller. (The read path: one
        call lists a sample and checks it in the shards already open.)
        """
        cdef Py_buffer bv
        cdef const int64_t* st = <const int64_t*>self.sv.buf
        cdef const int64_t* c = <const int64_t*>self.cv.buf
        cdef int64_t a, b, k, j, fid, n_sh, found = -1, done = -1
        cdef list out
        cdef list rec
        cdef object v
        cdef PyObject* sh
        if i < 0 or i >= self.n_samples:
            raise IndexError(f"sample {i} outside [0, {self.n_samples})")
        a = st[i]
        b = st[i + 1]
        if shards is not None:
            if type(shards) is not list:
                raise TypeError("shards must be a list or None")
            n_sh = PyList_GET_SIZE(shards)
            for k in range(a, b):  # each shard of the sample once (usually there is one)
                fid = c[4 * k + 2]
                if fid == done or fid < 0 or fid >= n_sh:
                    continue
                if k > a and fid == c[4 * (k - 1) + 2]:
                    continue
                sh = PyList_GET_ITEM(shards, <Py_ssize_t>fid)
                if sh == <PyObject*>None:
                    continue
                PyObject_GetBuffer(<object>sh, &bv, PyBUF_SIMPLE)
                try:
                    found = rows_check(<const uint8_t*>bv.buf, bv.len, c,
                                       <const uint64_t*>self.kv.buf, a, b, fid, self.exts,
                                       self.checksum)
                finally:
                    PyBuffer_Release(&bv)
                if found >= 0:
                    raise HeaderMismatch(found)
                done = fid
        out = PyList_New(b - a)
        for k in range(a, b):
            rec = PyList_New(4)
            for j in range(4):
                v = PyLong_FromLongLong(c[4 * k + j])
                Py_INCREF(v)
                PyList_SET_ITEM(rec, j, v)
            Py_INCREF(rec)
            PyList_SET_ITEM(out, k - a, rec)
        return out

    def batch(self, object buf, object rows, int64_t fid):
        """The first of the rows numbered in ``rows`` (C-contiguous ``int64`` row numbers, e.g.
        a ``__getitems__`` batch's rows sorted by offset) that is in shard ``fid`` (``buf``),
        has an extension to check and whose header does not name it, or -1. One pass: the
        header blocks of rows ahead are prefetched while a row is checked, so that the cache
        and TLB misses of a batch of random reads overlap instead of adding up."""
        cdef Py_buffer bv
        cdef Py_buffer rv
        cdef const int64_t* rw
        cdef int64_t k, m, row, found = -1
        cdef object e
        if not self.exts_ok:  # say which row or item is wrong
            for e in self.exts:
                if e is not None and type(e) is not bytes:
                    raise TypeError("exts must hold bytes or None")
            raise ValueError(f"a row's extid is outside exts ({len(self.exts)})")
        PyObject_GetBuffer(rows, &rv, PyBUF_SIMPLE)
        try:
            if rv.len % 8 or (<uintptr_t>rv.buf) % 8:
                raise ValueError("rows must be an aligned, C-contiguous int64 array")
            rw = <const int64_t*>rv.buf
            m = rv.len // 8
            for k in range(m):  # arguments first: the check below trusts them
                row = rw[k]
                if row < 0 or row >= self.n_rows:
                    raise IndexError(f"rows[{k}] = {row} outside [0, {self.n_rows})")
            PyObject_GetBuffer(buf, &bv, PyBUF_SIMPLE)
            try:
                with nogil:
                    found = batch_check(<const uint8_t*>bv.buf, bv.len,
                                        <const int64_t*>self.cv.buf,
                                        <const uint64_t*>self.kv.buf, rw, m, fid,
                                        self.ext_p, self.ext_n, self.checksum)
            finally:
                PyBuffer_Release(&bv)
        finally:
            PyBuffer_Release(&rv)
        return found

    def sample(self, object buf, int64_t i, int64_t fid):
        """The first row of sample ``i`` in shard ``fid`` (``buf``) whose header does not
        name it (``check_member`` not ``M_OK``), or -1."""
        cdef Py_buffer bv
        cdef const int64_t* st = <const int64_t*>self.sv.buf
        cdef int64_t found
        if i < 0 or i >= self.n_samples:
            raise IndexError(f"sample {i} outside [0, {self.n_samples})")
        PyObject_GetBuffer(buf, &bv, PyBUF_SIMPLE)
        try:
            found = rows_check(<const uint8_t*>bv.buf, bv.len, <const int64_t*>self.cv.buf,
                               <const uint64_t*>self.kv.buf, st[i], st[i + 1], fid, self.exts,
                               self.checksum)
        finally:
            PyBuffer_Release(&bv)
        return found

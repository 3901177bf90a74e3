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
cimport cython

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

E_OK = C_OK
E_TRUNCATED_HEADER = C_TRUNCATED_HEADER
E_CHECKSUM = C_CHECKSUM
E_NUMBER = C_NUMBER
E_PAYLOAD_PAST_END = C_PAYLOAD_PAST_END
E_PAX = C_PAX
E_DANGLING_EXTENDED = C_DANGLING_EXTENDED
E_CAPACITY = C_CAPACITY
E_SPARSE = C_SPARSE

cdef int64_t NUM_ERR = -1

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define TF_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 0)
    #else
    #define TF_PREFETCH(p) ((void)0)
    #endif
    """
    void TF_PREFETCH(const void* p) noexcept nogil


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
    for i in range(512):  # branch-free so the compiler vectorises it
        us += h[i]
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


@cython.boundscheck(False)
@cython.wraparound(False)
def scan(const uint8_t[::1] buf, int64_t[::1] hdr_off, int64_t[::1] size,
         int64_t[::1] prefix_off, int64_t[::1] prefix_len, int64_t[::1] name_off,
         int64_t[::1] name_len, uint8_t[::1] typeflag):
    """Walk the headers of the tar archive in ``buf``; fill the outputs; ``(count, code, where)``.

    Every output must hold ``len(buf) // 512`` entries (the most members a buffer can have).
    """
    cdef int64_t n = buf.shape[0]
    cdef int64_t cap = n // 512
    if (hdr_off.shape[0] < cap or size.shape[0] < cap or prefix_off.shape[0] < cap
            or prefix_len.shape[0] < cap or name_off.shape[0] < cap
            or name_len.shape[0] < cap or typeflag.shape[0] < cap):
        raise ValueError(f"outputs must hold len(buf) // 512 = {cap} entries")
    cdef const uint8_t* b
    cdef const uint8_t* h
    cdef int64_t pos = 0, count = 0, sz, data_end, nblocks
    cdef int code = 0
    cdef int64_t where = 0
    cdef uint8_t t
    # pending extended-header state: local (next member only) and global (pax g)
    cdef int64_t l_path_off = -1, l_path_len = 0, l_size = -1
    cdef int64_t g_path_off = -1, g_path_len = 0, g_size = -1
    cdef bint pending = False
    cdef int64_t tmp_off, tmp_len, tmp_size
    if n == 0:
        return 0, 0, 0
    b = &buf[0]
    with nogil:
        while True:
            if pos >= n:
                if pending:
                    code = C_DANGLING_EXTENDED
                    where = pos
                break
            h = b + pos
            if pos + 512 > n:
                if not all_zero(h, n - pos):
                    code = C_TRUNCATED_HEADER
                    where = pos
                elif pending:
                    code = C_DANGLING_EXTENDED
                    where = pos
                break
            if all_zero(h, 512):
                if pending:
                    code = C_DANGLING_EXTENDED
                    where = pos
                break
            sz = parse_number(h + 124, 12)
            t = h[156]
            if sz >= 0 and pos + 1024 + sz <= n:
                # fetch the (likely) next header while this one is checked: the walk is
                # bound by memory latency, one header per page
                nblocks = pos + 512 + ((sz + 511) // 512) * 512
                TF_PREFETCH(b + nblocks)
                TF_PREFETCH(b + nblocks + 128)
                TF_PREFETCH(b + nblocks + 256)
                TF_PREFETCH(b + nblocks + 384)
            if not checksum_ok(h):
                code = C_CHECKSUM
                where = pos
                break
            if sz < 0:
                code = C_NUMBER
                where = pos
                break
            if t == 120 or t == 103:  # 'x' / 'g' pax
                data_end = pos + 512 + sz
                if data_end > n:
                    code = C_PAYLOAD_PAST_END
                    where = pos
                    break
                tmp_off = -1
                tmp_len = 0
                tmp_size = -1
                if parse_pax(b, pos + 512, data_end, &tmp_off, &tmp_len, &tmp_size) != 0:
                    code = C_PAX
                    where = pos
                    break
                if t == 120:
                    if tmp_off >= 0:
                        l_path_off = tmp_off
                        l_path_len = tmp_len
                    if tmp_size >= 0:
                        l_size = tmp_size
                    pending = True
                else:
                    if tmp_off >= 0:
                        g_path_off = tmp_off
                        g_path_len = tmp_len
                    if tmp_size >= 0:
                        g_size = tmp_size
                pos += 512 + ((sz + 511) // 512) * 512
                continue
            if t == 76 or t == 75:  # GNU 'L' long name / 'K' long link name
                data_end = pos + 512 + sz
                if data_end > n:
                    code = C_PAYLOAD_PAST_END
                    where = pos
                    break
                if t == 76:
                    l_path_off = pos + 512
                    l_path_len = cstrlen(b + pos + 512, sz)
                pending = True
                pos += 512 + ((sz + 511) // 512) * 512
                continue
            if t == 83:  # 'S' GNU sparse: the payload is not the file
                code = C_SPARSE
                where = pos
                break
            if l_size >= 0:
                sz = l_size
            elif g_size >= 0:
                sz = g_size
            if count >= cap:
                code = C_CAPACITY
                where = pos
                break
            hdr_off[count] = pos
            size[count] = sz
            typeflag[count] = t
            if l_path_off >= 0:
                name_off[count] = l_path_off
                name_len[count] = l_path_len
                prefix_off[count] = 0
                prefix_len[count] = 0
            elif g_path_off >= 0:
                name_off[count] = g_path_off
                name_len[count] = g_path_len
                prefix_off[count] = 0
                prefix_len[count] = 0
            else:
                name_off[count] = pos
                name_len[count] = cstrlen(h, 100)
                prefix_off[count] = pos + 345
                # POSIX ustar ("ustar\0") has a prefix field; GNU ("ustar  \0") does not
                if (h[257] == 117 and h[258] == 115 and h[259] == 116 and h[260] == 97
                        and h[261] == 114 and h[262] == 0):
                    prefix_len[count] = cstrlen(h + 345, 155)
                else:
                    prefix_len[count] = 0
            count += 1
            l_path_off = -1
            l_path_len = 0
            l_size = -1
            pending = False
            if 49 <= t <= 54:  # '1'..'6': links, devices, directories, FIFOs carry no data
                nblocks = 0
            else:
                if pos + 512 + sz > n:
                    code = C_PAYLOAD_PAST_END
                    where = pos
                    break
                nblocks = (sz + 511) // 512
            pos += 512 + nblocks * 512
    return count, code, where

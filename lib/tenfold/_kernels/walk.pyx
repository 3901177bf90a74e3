# cython: language_level=3
"""Walk a table of variable-length records (length-prefixed name, fixed head, counted items).

Each record is: a u32 little-endian byte length ``L``, ``L`` bytes, zero padding up to a
multiple of ``align`` counted from the record's start, then ``head`` fixed bytes of which the
u32 at ``count_at`` is an item count ``C``, then ``C * item`` bytes, then ``tail`` fixed bytes.
The kernel knows no format: it only finds where each record starts, its ``L`` and its ``C``,
so that the caller can gather the fields with NumPy.
"""

from libc.stdint cimport uint8_t, uint32_t, int64_t
from libc.string cimport memcpy
cimport cython


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | \
        (<uint32_t>p[3] << 24)


@cython.boundscheck(False)
@cython.wraparound(False)
def walk_lp_records(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end,
                    Py_ssize_t count, Py_ssize_t align, Py_ssize_t head, Py_ssize_t count_at,
                    Py_ssize_t item, Py_ssize_t tail, Py_ssize_t max_items,
                    int64_t[::1] starts, int64_t[::1] lengths, int64_t[::1] counts):
    """Walk ``count`` records from ``start`` (all must end by ``end``).

    Fills ``starts``, ``lengths`` (L) and ``counts`` (C) and returns ``(n, pos, status)``:
    ``n`` records were complete; ``pos`` is where record ``n`` starts (or the end of the last
    one when ``status`` is 0). ``status``: 0 ok, 1 the length field or the bytes of record
    ``n`` run past ``end``, 2 its head runs past ``end``, 3 its count is above ``max_items``,
    4 its items or tail run past ``end``.

    Any geometry is accepted (the outcome is the one of exact integer arithmetic): every test
    in the loop compares a size with the room left before ``end``, so no sum can wrap.
    """
    if end > buf.shape[0] or start < 0 or start > end:
        raise ValueError(f"bad range [{start}, {end}) for a buffer of {buf.shape[0]} bytes")
    if align <= 0 or head < 0 or item < 0 or tail < 0 or count_at < 0 or count_at > head - 4:
        raise ValueError("bad record geometry")
    if count < 0 or starts.shape[0] < count or lengths.shape[0] < count or \
            counts.shape[0] < count:
        raise ValueError("outputs shorter than count")
    cdef Py_ssize_t i = 0, pos = start, q, n = 0, room, pad, need
    cdef int status = 0
    cdef int64_t ln, c
    cdef const uint8_t* p
    # C < 2**32, so C * item cannot wrap when item < 2**31; larger items take a division
    cdef bint small_item = item < 0x80000000
    if count == 0:
        return 0, start, 0
    p = &buf[0]
    with nogil:
        while i < count:
            room = end - pos
            if room < 4:
                status = 1
                break
            ln = _u32(p + pos)
            if ln > room - 4:
                status = 1
                break
            # the name ends at pos + 4 + ln; the head starts at the next multiple of align
            room -= 4 + ln
            pad = (4 + ln) % align
            if pad:
                pad = align - pad
            if pad > room or head > room - pad:
                status = 2
                break
            q = pos + 4 + ln + pad
            room -= pad + head
            c = _u32(p + q + count_at)
            if c > max_items:
                status = 3
                break
            if small_item:
                need = c * item
                if need > room:
                    status = 4
                    break
            elif c and item > room // c:
                status = 4
                break
            else:
                need = c * item
            if tail > room - need:
                status = 4
                break
            starts[i] = pos
            lengths[i] = ln
            counts[i] = c
            pos = q + head + need + tail
            i += 1
    return i, pos, status

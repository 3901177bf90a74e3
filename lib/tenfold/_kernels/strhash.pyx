# cython: language_level=3
"""Kernels over many short byte strings held as ``(offset, length)`` ranges of one buffer.

``hash_ranges`` (xxh64 of each range, optionally of its ASCII-lower-cased bytes), ``hash_strs``
(xxh64 of the UTF-8 encoding of each ``str`` of a list, without building the encoded bytes),
``split_basenames`` (the part after the last ``/``, split at its first ``.``), ``gather`` (pack
ranges into one buffer), ``gather_strided`` (pack equally spaced fixed-width ranges, e.g. one
field of fixed-size records at any alignment) and ``ranges_equal`` (pairwise byte comparison).
"""

from libc.stdint cimport uint8_t, int64_t, uint64_t, uintptr_t
from libc.string cimport memcmp, memcpy
from cpython.object cimport PyObject
from libc.stdint cimport INT64_MAX
cimport cython

cdef extern from "Python.h":
    bint PyUnicode_Check(PyObject* o)
    bint PyUnicode_IS_COMPACT_ASCII(PyObject* o)
    void* PyUnicode_DATA(PyObject* o)
    Py_ssize_t PyUnicode_GET_LENGTH(PyObject* o)
    PyObject* PyList_GET_ITEM(object o, Py_ssize_t i)
    PyObject* PyTuple_GET_ITEM(object o, Py_ssize_t i)
    bytes PyUnicode_AsEncodedString(object o, const char* encoding, const char* errors)

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define TF_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 3)
    #else
    #define TF_PREFETCH(p) ((void)0)
    #endif
    """
    void TF_PREFETCH(const void* p) noexcept nogil

#: How many list items ahead ``hash_strs`` prefetches the string objects.
DEF AHEAD = 12

cdef uint64_t P1 = 11400714785074694791ULL
cdef uint64_t P2 = 14029467366897019727ULL
cdef uint64_t P3 = 1609587929392839161ULL
cdef uint64_t P4 = 9650029242287828579ULL
cdef uint64_t P5 = 2870177450012600261ULL


cdef inline uint64_t rotl(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef inline uint64_t rd64(const uint8_t* p, bint lower) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    cdef uint8_t c
    for i in range(8):
        c = p[i]
        if lower and 65 <= c <= 90:
            c += 32
        v |= (<uint64_t>c) << (8 * i)
    return v


cdef inline uint64_t rd32(const uint8_t* p, bint lower) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    cdef uint8_t c
    for i in range(4):
        c = p[i]
        if lower and 65 <= c <= 90:
            c += 32
        v |= (<uint64_t>c) << (8 * i)
    return v


cdef inline uint64_t rnd(uint64_t acc, uint64_t inp) noexcept nogil:
    acc += inp * P2
    acc = rotl(acc, 31)
    return acc * P1


cdef inline uint64_t merge(uint64_t acc, uint64_t val) noexcept nogil:
    acc ^= rnd(0, val)
    return acc * P1 + P4


cdef uint64_t xxh64(const uint8_t* p, int64_t n, uint64_t seed, bint lower) noexcept nogil:
    cdef const uint8_t* end = p + n
    cdef uint64_t h, v1, v2, v3, v4
    cdef uint8_t c
    if n >= 32:
        v1 = seed + P1 + P2
        v2 = seed + P2
        v3 = seed
        v4 = seed - P1
        while p + 32 <= end:
            v1 = rnd(v1, rd64(p, lower))
            v2 = rnd(v2, rd64(p + 8, lower))
            v3 = rnd(v3, rd64(p + 16, lower))
            v4 = rnd(v4, rd64(p + 24, lower))
            p += 32
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)
        h = merge(h, v1)
        h = merge(h, v2)
        h = merge(h, v3)
        h = merge(h, v4)
    else:
        h = seed + P5
    h += <uint64_t>n
    while p + 8 <= end:
        h ^= rnd(0, rd64(p, lower))
        h = rotl(h, 27) * P1 + P4
        p += 8
    if p + 4 <= end:
        h ^= rd32(p, lower) * P1
        h = rotl(h, 23) * P2 + P3
        p += 4
    while p < end:
        c = p[0]
        if lower and 65 <= c <= 90:
            c += 32
        h ^= c * P5
        h = rotl(h, 11) * P1
        p += 1
    h ^= h >> 33
    h *= P2
    h ^= h >> 29
    h *= P3
    h ^= h >> 32
    return h


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int check_ranges(Py_ssize_t size, const int64_t[::1] off, const int64_t[::1] length) except -1:
    """Every ``(off[i], length[i])`` lies inside a buffer of ``size`` bytes (no sum can wrap).

    One branch-free pass (as unsigned numbers a negative offset or length is above ``size``;
    ``size - off`` is only trusted when ``off <= size``, which the first test covers); the
    scalar pass that names the first bad range runs only when there is one.
    """
    cdef Py_ssize_t i, n = off.shape[0]
    cdef uint64_t usize = <uint64_t>size, o, ln
    cdef bint bad = 0
    if n != length.shape[0]:
        raise ValueError("offsets and lengths differ in length")
    for i in range(n):
        o = <uint64_t>off[i]
        ln = <uint64_t>length[i]
        bad |= (o > usize) | (ln > usize - o)
    if not bad:
        return 0
    for i in range(n):
        if off[i] < 0 or length[i] < 0 or off[i] > size or length[i] > size - off[i]:
            raise ValueError(f"range {i} ({off[i]}, {length[i]}) outside the buffer of {size}")
    return 0


cdef int check_apart(const void* out, Py_ssize_t nout, const void* src, Py_ssize_t nsrc,
                     str what) except -1:
    """ValueError when the ``nout`` bytes at ``out`` (written by a kernel) overlap the ``nsrc``
    bytes at ``src`` (read by it, e.g. the offsets that say where to read)."""
    cdef uintptr_t a = <uintptr_t>out, b = <uintptr_t>src
    if nout > 0 and nsrc > 0 and a < b + <uintptr_t>nsrc and b < a + <uintptr_t>nout:
        raise ValueError(f"{what} overlap")
    return 0


cdef int check_split_outputs(Py_ssize_t n, const void* off, const void* length,
                             const void* stem_off, const void* stem_len, const void* ext_off,
                             const void* ext_len, const void* ascii) except -1:
    """``split_basenames``: no output overlaps the ranges (``n`` > 0 of each)."""
    cdef const void* outs[5]
    cdef int k
    outs[0] = stem_off
    outs[1] = stem_len
    outs[2] = ext_off
    outs[3] = ext_len
    outs[4] = ascii
    for k in range(5):
        check_apart(outs[k], n if k == 4 else 8 * n, off, 8 * n, "outputs and ranges")
        check_apart(outs[k], n if k == 4 else 8 * n, length, 8 * n, "outputs and ranges")
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
def hash_ranges(const uint8_t[::1] buf, const int64_t[::1] off, const int64_t[::1] length,
                uint64_t seed, uint64_t[::1] out, bint ascii_lower=False):
    """``out[i] = xxh64(buf[off[i]:off[i]+length[i]], seed)`` (of the ASCII-lower-cased bytes
    when ``ascii_lower``)."""
    cdef Py_ssize_t n = off.shape[0], i
    cdef const uint8_t* b
    if out.shape[0] != n:
        raise ValueError("out must have one entry per range")
    check_ranges(buf.shape[0], off, length)
    if n == 0:
        return
    check_apart(&out[0], 8 * n, &off[0], 8 * n, "out and offsets")
    check_apart(&out[0], 8 * n, &length[0], 8 * n, "out and lengths")
    if buf.shape[0] == 0:
        for i in range(n):
            out[i] = xxh64(<const uint8_t*>"", 0, seed, ascii_lower)
        return
    b = &buf[0]
    with nogil:
        for i in range(n):
            if i + AHEAD < n:  # ranges scattered over a large buffer: fetch ahead
                TF_PREFETCH(b + off[i + AHEAD])
            out[i] = xxh64(b + off[i], length[i], seed, ascii_lower)


cdef uint64_t hash_slow(object s, uint64_t seed) except? 0:
    cdef bytes b
    if not isinstance(s, str):
        raise TypeError(f"expected str, got {type(s).__name__}")
    # the C API, not a method call: a str subclass cannot run code (and change the list)
    b = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass")
    return xxh64(<const uint8_t*>(<char*>b), len(b), seed, False)


@cython.boundscheck(False)
@cython.wraparound(False)
def hash_strs(strs, uint64_t seed, uint64_t[::1] out):
    """``out[i] = xxh64(strs[i].encode("utf-8", "surrogatepass"), seed)`` for a list (or
    tuple) of ``str``.

    ASCII strings are hashed in place (no encoded copy); the others are encoded one by one.
    The loop is bound by memory latency (the string objects are scattered over the heap), so it
    prefetches the objects a few items ahead. The GIL is held: the strings are Python objects.
    """
    cdef object seq = strs if type(strs) is list or type(strs) is tuple else list(strs)
    cdef bint is_list = type(seq) is list
    cdef Py_ssize_t n = len(seq), i
    cdef PyObject* o
    cdef PyObject* ahead
    if out.shape[0] != n:
        raise ValueError("out must have one entry per string")
    for i in range(n):
        if i + AHEAD < n:
            ahead = PyList_GET_ITEM(seq, i + AHEAD) if is_list else PyTuple_GET_ITEM(seq, i + AHEAD)
            TF_PREFETCH(ahead)
            TF_PREFETCH(<const char*>ahead + 64)
        o = PyList_GET_ITEM(seq, i) if is_list else PyTuple_GET_ITEM(seq, i)
        if PyUnicode_Check(o) and PyUnicode_IS_COMPACT_ASCII(o):
            out[i] = xxh64(<const uint8_t*>PyUnicode_DATA(o), PyUnicode_GET_LENGTH(o), seed,
                           False)
        else:
            out[i] = hash_slow(<object>o, seed)


@cython.boundscheck(False)
@cython.wraparound(False)
def split_basenames(const uint8_t[::1] buf, const int64_t[::1] off, const int64_t[::1] length,
                    int64_t[::1] stem_off, int64_t[::1] stem_len, int64_t[::1] ext_off,
                    int64_t[::1] ext_len, uint8_t[::1] ascii):
    """Split each range's basename (after the last ``/``) at its first ``.``.

    ``stem`` is the part before the dot, ``ext`` the part after it (empty, at the end of the
    basename, when there is no dot). ``ascii[i]`` is 1 when the basename is 7-bit ASCII.
    """
    cdef Py_ssize_t n = off.shape[0], i
    cdef int64_t s, e, j, dot
    cdef const uint8_t* b
    cdef uint8_t acc
    if (stem_off.shape[0] != n or stem_len.shape[0] != n or ext_off.shape[0] != n
            or ext_len.shape[0] != n or ascii.shape[0] != n):
        raise ValueError("outputs must have one entry per range")
    check_ranges(buf.shape[0], off, length)
    if n == 0:
        return
    # each output is written before the next range is read
    check_split_outputs(n, &off[0], &length[0], &stem_off[0], &stem_len[0], &ext_off[0],
                        &ext_len[0], &ascii[0])
    if buf.shape[0] == 0:
        for i in range(n):
            stem_off[i] = 0
            stem_len[i] = 0
            ext_off[i] = 0
            ext_len[i] = 0
            ascii[i] = 1
        return
    b = &buf[0]
    with nogil:
        for i in range(n):
            if i + AHEAD < n:
                TF_PREFETCH(b + off[i + AHEAD])
                TF_PREFETCH(b + off[i + AHEAD] + length[i + AHEAD])
            s = off[i]
            e = s + length[i]
            j = e
            while j > s and b[j - 1] != 47:
                j -= 1
            s = j
            dot = -1
            acc = 0
            for j in range(s, e):
                acc |= b[j]
                if dot < 0 and b[j] == 46:
                    dot = j
            ascii[i] = 1 if acc < 128 else 0
            stem_off[i] = s
            if dot < 0:
                stem_len[i] = e - s
                ext_off[i] = e
                ext_len[i] = 0
            else:
                stem_len[i] = dot - s
                ext_off[i] = dot + 1
                ext_len[i] = e - dot - 1


@cython.boundscheck(False)
@cython.wraparound(False)
def gather(const uint8_t[::1] buf, const int64_t[::1] off, const int64_t[::1] length,
           uint8_t[::1] out):
    """Concatenate the ranges into ``out`` (whose length must be their total length)."""
    cdef Py_ssize_t n = off.shape[0], i
    cdef int64_t pos = 0, total = 0
    check_ranges(buf.shape[0], off, length)
    for i in range(n):
        if length[i] > INT64_MAX - total:
            raise ValueError(f"out holds {out.shape[0]} bytes; the ranges total more than "
                             f"{INT64_MAX}")
        total += length[i]
    if total != out.shape[0]:
        raise ValueError(f"out holds {out.shape[0]} bytes; the ranges total {total}")
    if total == 0:
        return
    check_apart(&out[0], total, &off[0], 8 * n, "out and offsets")
    check_apart(&out[0], total, &length[0], 8 * n, "out and lengths")
    check_apart(&out[0], total, &buf[0], buf.shape[0], "out and buf")
    with nogil:
        for i in range(n):
            if i + AHEAD < n:
                TF_PREFETCH(&buf[off[i + AHEAD]])
            if length[i]:
                memcpy(&out[pos], &buf[off[i]], length[i])
                pos += length[i]


@cython.boundscheck(False)
@cython.wraparound(False)
def gather_strided(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t stride,
                   Py_ssize_t width, uint8_t[::1] out):
    """``out[i*width:(i+1)*width] = buf[start + i*stride:][:width]`` for every ``i`` of
    ``len(out) // width`` (``len(out)`` must be a multiple of ``width``)."""
    cdef Py_ssize_t n, i, size
    cdef const uint8_t* src
    cdef uint8_t* dst
    if width <= 0 or stride < width or start < 0:
        raise ValueError(f"bad layout: start {start}, stride {stride}, width {width}")
    if out.shape[0] % width:
        raise ValueError(f"out holds {out.shape[0]} bytes, not a multiple of {width}")
    n = out.shape[0] // width
    if n == 0:
        return
    size = buf.shape[0]
    # start + (n - 1) * stride + width <= size, without computing a sum that could wrap
    if start > size or width > size - start or n - 1 > (size - start - width) // stride:
        raise ValueError(f"{n} items of {width} bytes every {stride} from {start} overrun the "
                         f"buffer of {buf.shape[0]}")
    check_apart(&out[0], out.shape[0], &buf[0], size, "out and buf")
    src = &buf[start]
    dst = &out[0]
    with nogil:
        if width == 8:
            for i in range(n):
                memcpy(dst + 8 * i, src + stride * i, 8)
        elif width == 4:
            for i in range(n):
                memcpy(dst + 4 * i, src + stride * i, 4)
        elif width == 2:
            for i in range(n):
                memcpy(dst + 2 * i, src + stride * i, 2)
        else:
            for i in range(n):
                memcpy(dst + width * i, src + stride * i, width)


@cython.boundscheck(False)
@cython.wraparound(False)
def ranges_equal(const uint8_t[::1] buf, const int64_t[::1] a_off, const int64_t[::1] a_len,
                 const int64_t[::1] b_off, const int64_t[::1] b_len, uint8_t[::1] out):
    """``out[i] = 1`` when range ``a[i]`` and range ``b[i]`` hold the same bytes, else 0."""
    cdef Py_ssize_t n = a_off.shape[0], i
    cdef const uint8_t* b
    if b_off.shape[0] != n or out.shape[0] != n:
        raise ValueError("a, b and out must have the same length")
    check_ranges(buf.shape[0], a_off, a_len)
    check_ranges(buf.shape[0], b_off, b_len)
    if n == 0:
        return
    check_apart(&out[0], n, &a_off[0], 8 * n, "out and ranges")
    check_apart(&out[0], n, &a_len[0], 8 * n, "out and ranges")
    check_apart(&out[0], n, &b_off[0], 8 * n, "out and ranges")
    check_apart(&out[0], n, &b_len[0], 8 * n, "out and ranges")
    if buf.shape[0] == 0:
        for i in range(n):
            out[i] = 1
        return
    b = &buf[0]
    with nogil:
        for i in range(n):
            out[i] = 1 if (a_len[i] == b_len[i]
                           and memcmp(b + a_off[i], b + b_off[i], a_len[i]) == 0) else 0

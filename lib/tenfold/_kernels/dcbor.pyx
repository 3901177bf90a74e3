# cython: language_level=3
"""Strict decoder of deterministic CBOR (RFC 8949 §4.2.1, "core deterministic encoding").

Accepts exactly the bytes the deterministic encoder produces for some value: definite lengths,
shortest heads, map keys strictly increasing in bytewise order of their encodings, each float in
the narrowest of half/single/double holding it exactly (NaN only as ``f9 7e00``), no tags, no
simple values but false/true/null. Anything else raises ``CborReject(rule, offset, detail)``
with the same rule, offset and detail as the reference twin ``_ref_dcbor.py``.

The kernel knows CBOR, not any format built on it. Every read is preceded by a comparison of
the bytes it needs with the bytes left (a head's argument is compared as an unsigned 64-bit
number with the room left, so no length can wrap); a container's count is checked against the
bytes left before any element is decoded, so allocation is bounded by the input's size;
recursion is bounded by ``max_depth`` (<= 256). The C-level pieces are exported in
``dcbor.pxd`` for ``ztplan``.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcmp, memcpy
from libc.math cimport isnan, isinf, frexp, ldexp, floor, fabs, NAN, INFINITY
cimport cython

from ._cbortypes import (
    CborReject as _Reject,
    Key as _Key,
    SYNTAX as _SYNTAX,
    DETERMINISM as _DETERMINISM,
    DUPLICATE as _DUPLICATE,
    DEPTH as _DEPTH,
)

cdef int MAX_DEPTH_LIMIT = 256


cdef inline uint64_t _be(const uint8_t* p, int width) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(width):
        v = (v << 8) | p[i]
    return v


cdef inline bint _fits_single(double x) noexcept nogil:
    """``x`` (not NaN) is exactly a binary32 value (infinities are)."""
    if isinf(x):
        return True
    if fabs(x) > 3.4028234663852886e38:
        return False
    return <double>(<float>x) == x


cdef inline bint _fits_half(double x) noexcept nogil:
    """``x`` (not NaN) is exactly a binary16 value: at most 11 significant bits, a multiple of
    2**-24, at most 65504 in magnitude (infinities and zeros are)."""
    cdef double a, s
    cdef int e
    if isinf(x) or x == 0.0:
        return True
    a = fabs(x)
    if a > 65504.0 or a < 5.9604644775390625e-08:
        return False
    frexp(a, &e)
    s = ldexp(a, 11 - e)
    if s != floor(s):
        return False
    s = ldexp(a, 24)
    return s == floor(s)


cdef inline double _half(uint16_t h) noexcept nogil:
    cdef int ex = (h >> 10) & 0x1F
    cdef int mant = h & 0x3FF
    cdef double v
    if ex == 0:
        v = ldexp(<double>mant, -24)
    elif ex == 31:
        v = INFINITY if mant == 0 else NAN
    else:
        v = ldexp(<double>(mant + 1024), ex - 25)
    return -v if h & 0x8000 else v


cdef list start(Ctx* c, const uint8_t* d, Py_ssize_t n, int max_depth):
    """Set up ``c`` for one decode of ``d[:n]``; return the list that holds the cached str."""
    cdef Py_ssize_t i
    c.d = d
    c.n = n
    c.max_depth = max_depth
    for i in range(CACHE_SLOTS):
        c.length[i] = -1
        c.key[i] = 0
    return [None] * CACHE_SLOTS


cdef bint peek_head(Ctx* c, Py_ssize_t pos, Head* h) noexcept:
    """Like :func:`read_head`, but False (nothing raised) where that would raise."""
    cdef uint8_t ib
    cdef int width
    cdef uint64_t smallest
    if pos >= c.n:
        return False
    ib = c.d[pos]
    h.major = ib >> 5
    h.info = ib & 31
    if h.info < 24:
        h.arg = h.info
        h.next = pos + 1
        return True
    if h.info > 27:
        return False
    width = 1 << (h.info - 24)
    if width > c.n - pos - 1:
        return False
    h.arg = _be(c.d + pos + 1, width)
    if h.major != 7:
        smallest = 24 if width == 1 else (<uint64_t>1) << (4 * width)
        if h.arg < smallest:
            return False
    h.next = pos + 1 + width
    return True


cdef int read_head(Ctx* c, Py_ssize_t pos, Head* h) except -1:
    """The head at ``pos``: major type, additional information, argument, next position;
    refuses indefinite lengths, reserved values, truncation and non-shortest arguments."""
    cdef uint8_t ib
    cdef int width
    if peek_head(c, pos, h):
        return 0
    if pos >= c.n:
        raise _Reject(_SYNTAX, pos, "truncated: expected a data item")
    ib = c.d[pos]
    if h.info == 31:
        raise _Reject(
            _SYNTAX, pos,
            "break code outside an indefinite item" if ib == 0xFF else "indefinite length",
        )
    if h.info > 27:
        raise _Reject(_SYNTAX, pos, f"reserved additional information {h.info}")
    width = 1 << (h.info - 24)
    if width > c.n - pos - 1:
        raise _Reject(_SYNTAX, pos, "truncated head")
    raise _Reject(_DETERMINISM, pos, f"non-shortest head: {h.arg} encoded in {width} bytes")


cdef int check_container(Ctx* c, Head* h, Py_ssize_t pos, int depth) except -1:
    """Depth and count checks of the array or map whose head ``h`` is at ``pos``."""
    if depth > c.max_depth:
        raise _Reject(_DEPTH, pos, f"nested deeper than {c.max_depth} levels")
    if h.major == 4:
        if h.arg > <uint64_t>(c.n - h.next):  # every element takes at least one byte
            raise _Reject(_SYNTAX, pos, f"array of {h.arg} items runs past the end")
    elif h.arg > <uint64_t>((c.n - h.next) // 2):
        raise _Reject(_SYNTAX, pos, f"map of {h.arg} pairs runs past the end")
    return 0


cdef int check_key_order(Ctx* c, Py_ssize_t kpos, Py_ssize_t klen, Py_ssize_t prev_pos,
                         Py_ssize_t prev_len, object k) except -1:
    """A map key (encoded at ``kpos``) must sort strictly after the previous one."""
    cdef int r = memcmp(c.d + kpos, c.d + prev_pos, klen if klen < prev_len else prev_len)
    if r == 0 and klen == prev_len:
        raise _Reject(_DUPLICATE, kpos, f"duplicate map key {k!r}"[:120])
    if r < 0 or (r == 0 and klen < prev_len):
        raise _Reject(_DETERMINISM, kpos, f"map key {k!r} out of order"[:120])
    return 0


cdef object map_key(Ctx* c, object k, Py_ssize_t kpos, Py_ssize_t klen):
    """A decoded map key as a dict key: text as is, anything else as a ``Key``."""
    if type(k) is str:
        return k
    return _Key(k, PyBytes_FromStringAndSize(<const char*>(c.d + kpos), klen))


cdef object _text(Ctx* c, Py_ssize_t start, Py_ssize_t length, Py_ssize_t pos):
    try:
        return PyUnicode_DecodeUTF8(<const char*>(c.d + start), length, "strict")
    except UnicodeDecodeError:
        raise _Reject(_SYNTAX, pos, "text string is not valid UTF-8") from None


@cython.boundscheck(False)
@cython.wraparound(False)
cdef object short_text(Ctx* c, list strings, Py_ssize_t start, Py_ssize_t length,
                       Py_ssize_t pos):
    """Text of ``length`` <= 8 bytes at ``start`` (head at ``pos``). Short strings repeat in a
    manifest (map keys, type names): the last one seen in each of ``CACHE_SLOTS`` slots,
    chosen by a hash of its bytes, is handed out again (a str is immutable)."""
    cdef uint64_t key = 0
    cdef Py_ssize_t slot
    memcpy(&key, c.d + start, length)
    slot = <Py_ssize_t>(((key ^ <uint64_t>length) * 0x9E3779B97F4A7C15ULL) >> 58)
    if c.length[slot] == length and c.key[slot] == key:
        return strings[slot]
    s = _text(c, start, length, pos)
    c.key[slot] = key
    c.length[slot] = length
    strings[slot] = s
    return s


cdef object decode_item(Ctx* c, list strings, Py_ssize_t pos, int depth, Py_ssize_t* end):
    """The item at ``pos`` (``depth`` 1 for the root); its end goes to ``end``."""
    cdef Head h
    cdef Py_ssize_t p, kpos, prev_pos = 0, prev_len = 0, klen, i
    cdef int b
    cdef uint32_t u32
    cdef uint64_t u64
    cdef float f32
    cdef double value
    cdef bint narrower
    cdef list out
    cdef dict result
    # shortcuts for the commonest items of a manifest (same results as the general path)
    if pos < c.n:
        b = c.d[pos]
        if b < 0x18:
            end[0] = pos + 1
            return b
        if 0x60 <= b < 0x78 and b - 0x5F <= c.n - pos:
            end[0] = pos + b - 0x5F
            if b <= 0x68:
                return short_text(c, strings, pos + 1, b - 0x60, pos)
            return _text(c, pos + 1, b - 0x60, pos)
    read_head(c, pos, &h)
    p = h.next
    if h.major == 0:
        end[0] = p
        return h.arg
    if h.major == 1:
        end[0] = p
        if h.arg < (<uint64_t>1) << 63:
            return -1 - <int64_t>h.arg
        return -1 - <object>h.arg
    if h.major == 2 or h.major == 3:
        if h.arg > <uint64_t>(c.n - p):
            raise _Reject(_SYNTAX, pos, f"string of {h.arg} bytes runs past the end")
        end[0] = p + <Py_ssize_t>h.arg
        if h.major == 2:
            return PyBytes_FromStringAndSize(<const char*>(c.d + p), <Py_ssize_t>h.arg)
        return _text(c, p, <Py_ssize_t>h.arg, pos)
    if h.major == 4:
        check_container(c, &h, pos, depth)
        out = []
        for i in range(<Py_ssize_t>h.arg):
            out.append(decode_item(c, strings, p, depth + 1, &p))
        end[0] = p
        return out
    if h.major == 5:
        check_container(c, &h, pos, depth)
        result = {}
        for i in range(<Py_ssize_t>h.arg):
            kpos = p
            k = decode_item(c, strings, p, depth + 1, &p)
            klen = p - kpos
            if i:
                check_key_order(c, kpos, klen, prev_pos, prev_len, k)
            prev_pos = kpos
            prev_len = klen
            result[map_key(c, k, kpos, klen)] = decode_item(c, strings, p, depth + 1, &p)
        end[0] = p
        return result
    if h.major == 6:
        raise _Reject(_SYNTAX, pos, f"tag {h.arg} (tags are not allowed)")
    # major 7: simple values and floats
    if h.info < 24:
        end[0] = p
        if h.info == 20:
            return False
        if h.info == 21:
            return True
        if h.info == 22:
            return None
        raise _Reject(_SYNTAX, pos, f"simple value {h.info} is not allowed")
    if h.info == 24:
        raise _Reject(_SYNTAX, pos, f"simple value {h.arg} is not allowed")
    end[0] = p
    if h.info == 25:
        value = _half(<uint16_t>h.arg)
        if isnan(value) and h.arg != 0x7E00:
            raise _Reject(_DETERMINISM, pos, "NaN other than f9 7e00")
        return value
    if h.info == 26:
        u32 = <uint32_t>h.arg
        memcpy(&f32, &u32, 4)
        value = f32
        narrower = not isnan(value) and _fits_half(value)
    else:
        u64 = h.arg
        memcpy(&value, &u64, 8)
        narrower = not isnan(value) and (_fits_half(value) or _fits_single(value))
    if isnan(value) or narrower:
        raise _Reject(_DETERMINISM, pos, f"float {value!r} not in its shortest form")
    return value


def decode(const uint8_t[::1] data, int max_depth):
    """Decode the one deterministic CBOR item that fills ``data`` (a bytes-like object).

    Containers nested deeper than ``max_depth`` (the root item is at depth 1; 1..256) are
    refused. Text strings become ``str``, byte strings ``bytes``, arrays ``list``, maps
    ``dict``; a map key that is not a text string becomes a ``Key``.
    """
    if max_depth < 1 or max_depth > MAX_DEPTH_LIMIT:
        raise ValueError(f"max_depth must be in 1..{MAX_DEPTH_LIMIT}, got {max_depth}")
    cdef Py_ssize_t n = data.shape[0], end = 0
    if n == 0:
        raise _Reject(_SYNTAX, 0, "empty input")
    cdef Ctx c
    strings = start(&c, &data[0], n, max_depth)
    value = decode_item(&c, strings, 0, 1, &end)
    if end != n:
        raise _Reject(_SYNTAX, end, f"{n - end} trailing bytes after the item")
    return value

# cython: language_level=3
"""The common case of a zTensor 0.1.0 index, parsed straight from its CBOR bytes.

``parse_dense(buf, ...)`` walks the bytes of an index (a CBOR array of maps, definite or
indefinite lengths, heads not necessarily shortest) and accepts it only when every entry is a
well-formed dense tensor that ``tenfold.ztensor._index`` would accept on its fast path: keys
from ``name offset size dtype layout shape encoding data_endianness`` (each at most once),
``name`` text, ``offset``/``size`` unsigned integers, ``dtype`` a name of ``dtypes``,
``layout`` (if present) ``"dense"``, ``shape`` an array of at most ``max_ndim`` unsigned
integers none zero, ``encoding`` ``"raw"``/``"zstd"``, ``data_endianness`` (if present)
``"little"``/``"big"``, decoded size in ``1 .. max_nbytes``, a raw tensor's ``size`` equal to
it, the blob 64-byte aligned, past the magic and before ``index_start``, names distinct, at most
``max_objects`` entries, no byte after the array.

It then returns ``(records, ordered)``: ``records`` the ``make(...)`` of each entry (called
with the 17 positional fields of ``tenfold.ztensor._index.TensorInfo``; with ``make`` None,
the compact tuple ``(name, dtype, np_dtype, shape, encoding, offset, size, endianness,
position)`` of the fields that vary, for a caller that builds records when asked for),
``ordered`` True when
each non-empty blob starts at or after the end of every earlier one (so none overlap; when
False the caller checks overlaps). Anything else (a tag, a float, a negative or missing
value, an unknown key, a sparse layout, a bad size, a duplicate, truncation...) returns
``None`` and nothing else: the caller then runs the full parse, which reports what is wrong.
So this kernel never raises for bad input, it only declines; every read is bounds-checked
against the buffer first. The reference twin is ``_ref_zt01idx.py``.
"""

from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcmp

cdef uint64_t FAIL = 0xFFFFFFFFFFFFFFFF

# key bits
cdef int K_NAME = 1, K_OFFSET = 2, K_SIZE = 4, K_DTYPE = 8, K_LAYOUT = 16, K_SHAPE = 32
cdef int K_ENCODING = 64, K_ENDIAN = 128
cdef int REQUIRED = 1 | 2 | 4 | 8 | 32 | 64


cdef struct Cur:
    const uint8_t* p
    Py_ssize_t n
    Py_ssize_t i


cdef inline int _head(Cur* c, int want_major, uint64_t* val) noexcept:
    """Read one head of major type ``want_major``: 0 definite (``val`` set), 1 indefinite
    (containers only), -1 anything else or truncated."""
    cdef int ib, ai, w, k
    cdef uint64_t v
    if c.i >= c.n:
        return -1
    ib = c.p[c.i]
    if (ib >> 5) != want_major:
        return -1
    ai = ib & 31
    c.i += 1
    if ai < 24:
        val[0] = ai
        return 0
    if ai == 31:
        return 1 if want_major == 4 or want_major == 5 else -1
    if ai == 24:
        w = 1
    elif ai == 25:
        w = 2
    elif ai == 26:
        w = 4
    elif ai == 27:
        w = 8
    else:
        return -1
    if c.n - c.i < w:
        return -1
    v = 0
    for k in range(w):
        v = (v << 8) | c.p[c.i + k]
    c.i += w
    val[0] = v
    return 0


cdef inline const uint8_t* _text(Cur* c, Py_ssize_t* length) noexcept:
    """A definite text string: its bytes (NULL if not one, or truncated)."""
    cdef uint64_t n
    cdef const uint8_t* s
    if _head(c, 3, &n) != 0:
        return NULL
    if n > <uint64_t>(c.n - c.i):
        return NULL
    s = c.p + c.i
    c.i += <Py_ssize_t>n
    length[0] = <Py_ssize_t>n
    return s


cdef inline bint _is(const uint8_t* s, Py_ssize_t n, const char* lit, Py_ssize_t m) noexcept:
    return n == m and memcmp(s, lit, m) == 0


cdef inline bint _end(Cur* c) noexcept:
    """At an indefinite container's break byte (consumed)."""
    if c.i < c.n and c.p[c.i] == 0xFF:
        c.i += 1
        return True
    return False


def parse_dense(
    const uint8_t[::1] buf,
    uint64_t index_start,
    Py_ssize_t max_objects,
    Py_ssize_t max_ndim,
    uint64_t max_nbytes,
    dict dtypes not None,
    object make,
):
    """``(records, ordered)`` for an index of well-formed dense entries, else None (see the
    module doc)."""
    cdef Cur c
    cdef uint64_t count, npairs, v, off, size, numel, cap, d, ndim_n, itemsize, prev_end = 0
    cdef int kind, mkind, skind, seen, bit
    cdef Py_ssize_t pos = 0, ln, k, ndim
    cdef const uint8_t* s
    cdef bint ordered = True, indef, mindef, is_raw
    cdef list out = []
    cdef set names = set()
    cdef list shape_items
    cdef object name, got, dtype_name, np_dtype, encoding, endian
    cdef object last_name = None, last_np = None
    cdef uint64_t last_itemsize = 0
    cdef const uint8_t* last_dt = NULL
    cdef Py_ssize_t last_dt_len = -1
    cdef tuple fields
    c.p = &buf[0] if buf.shape[0] else NULL
    c.n = buf.shape[0]
    c.i = 0
    kind = _head(&c, 4, &count)
    if kind < 0:
        return None
    indef = kind == 1
    if not indef and count > <uint64_t>(c.n - c.i):  # each entry takes at least one byte
        return None
    while True:
        if indef:
            if _end(&c):
                break
        elif <uint64_t>pos == count:
            break
        if pos >= max_objects:
            return None
        mkind = _head(&c, 5, &npairs)
        if mkind < 0:
            return None
        mindef = mkind == 1
        seen = 0
        name = dtype_name = np_dtype = None
        encoding = None
        endian = "little"
        off = size = 0
        shape_items = None
        k = 0
        while True:
            if mindef:
                if _end(&c):
                    break
            elif <uint64_t>k == npairs:
                break
            k += 1
            s = _text(&c, &ln)
            if s == NULL:
                return None
            if _is(s, ln, b"name", 4):
                bit = K_NAME
            elif _is(s, ln, b"offset", 6):
                bit = K_OFFSET
            elif _is(s, ln, b"size", 4):
                bit = K_SIZE
            elif _is(s, ln, b"dtype", 5):
                bit = K_DTYPE
            elif _is(s, ln, b"layout", 6):
                bit = K_LAYOUT
            elif _is(s, ln, b"shape", 5):
                bit = K_SHAPE
            elif _is(s, ln, b"encoding", 8):
                bit = K_ENCODING
            elif _is(s, ln, b"data_endianness", 15):
                bit = K_ENDIAN
            else:
                return None
            if seen & bit:
                return None
            seen |= bit
            if bit == K_OFFSET or bit == K_SIZE:
                if _head(&c, 0, &v) != 0:
                    return None
                if bit == K_OFFSET:
                    off = v
                else:
                    size = v
            elif bit == K_SHAPE:
                skind = _head(&c, 4, &ndim_n)
                if skind < 0:
                    return None
                if skind == 0 and ndim_n > <uint64_t>max_ndim:
                    return None
                shape_items = []
                ndim = 0
                while True:
                    if skind == 1:
                        if _end(&c):
                            break
                    elif <uint64_t>ndim == ndim_n:
                        break
                    if ndim >= max_ndim:
                        return None
                    if _head(&c, 0, &v) != 0:
                        return None
                    shape_items.append(v)
                    ndim += 1
            else:
                s = _text(&c, &ln)
                if s == NULL:
                    return None
                if bit == K_NAME:
                    try:
                        name = PyUnicode_DecodeUTF8(<const char*>s, ln, NULL)
                    except UnicodeDecodeError:
                        return None
                elif bit == K_DTYPE:
                    # entries mostly share a dtype: the last one's bytes are compared first
                    if last_dt == NULL or ln != last_dt_len or memcmp(s, last_dt, ln) != 0:
                        try:
                            got = dtypes.get(PyUnicode_DecodeUTF8(<const char*>s, ln, NULL))
                        except UnicodeDecodeError:
                            return None
                        if got is None:
                            return None
                        last_name, last_np = got
                        last_itemsize = last_np.itemsize
                        last_dt = s
                        last_dt_len = ln
                    dtype_name = last_name
                    np_dtype = last_np
                    itemsize = last_itemsize
                elif bit == K_LAYOUT:
                    if not _is(s, ln, b"dense", 5):
                        return None
                elif bit == K_ENCODING:
                    if _is(s, ln, b"raw", 3):
                        encoding = "raw"
                    elif _is(s, ln, b"zstd", 4):
                        encoding = "zstd"
                    else:
                        return None
                else:
                    if _is(s, ln, b"little", 6):
                        endian = "little"
                    elif _is(s, ln, b"big", 3):
                        endian = "big"
                    else:
                        return None
        if seen & REQUIRED != REQUIRED:
            return None
        # decoded size: 1 .. max_nbytes (no zero dim: it would hide the others' extent)
        cap = max_nbytes // itemsize
        numel = 1
        for item in shape_items:
            d = item
            if d == 0 or d > cap // numel:
                return None
            numel *= d
        is_raw = encoding == "raw"
        if is_raw and size != numel * itemsize:
            return None
        if off % 64 or (off < 64 and size != 0) or off > index_start or size > index_start - off:
            return None
        if name in names:
            return None
        names.add(name)
        if size:
            if off < prev_end:
                ordered = False
            if off + size > prev_end:
                prev_end = off + size
        if make is None:  # the compact record (see the module doc)
            out.append((name, dtype_name, np_dtype, tuple(shape_items), encoding, off, size,
                        endian, pos))
        else:
            out.append(make(name, dtype_name, np_dtype, tuple(shape_items), "dense", encoding,
                            off, size, endian, None, None, None, None, None, {}, {}, pos))
        pos += 1
    if c.i != c.n:
        return None
    return out, ordered

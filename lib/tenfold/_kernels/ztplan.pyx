# cython: language_level=3
"""Decode a zTensor v2 manifest with a fast path for plain dense objects (twin: ``_ref_ztplan.py``).

Knows the shape of one kind of object in a zTensor v2 manifest (as ``tarscan`` knows tar
headers) and nothing of files. ``scan_manifest`` decodes the manifest's deterministic CBOR with
the ``dcbor`` kernel's C functions (same checks, same ``CborReject`` for the same bytes), except
that an object of the commonest form (``layout`` "dense", a ``shape``, one raw local ``data``
part of a storage type, an optional digest, nothing else) is recognised from its bytes, checked
against every rule the full Python validation applies, and returned as a small plan tuple
instead of a tree of dicts. Every other object is decoded in full and left to that validation,
which names the rule it breaks: the fast path only ever accepts.

Manifest numbers are handled as ``uint64_t`` with explicit range and overflow checks; every
byte is read after a comparison with the bytes left.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport (
    PyUnicode_AsUTF8AndSize, PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8,
)
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uint8_t, uint64_t
from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.string cimport memchr, memcmp
cimport cython

cdef extern from "numpy/arrayobject.h":
    ctypedef Py_ssize_t npy_intp
    ctypedef struct PyArray_Descr:
        pass
    ctypedef struct PyArrayObject:
        pass
    PyTypeObject PyArray_Type
    bint PyArray_CheckExact(object)
    bint PyArray_DescrCheck(object)
    int PyArray_NDIM(PyArrayObject*)
    void* PyArray_DATA(PyArrayObject*)
    npy_intp PyArray_NBYTES(PyArrayObject*)
    int PyArray_ISCARRAY_RO(PyArrayObject*)
    int PyArray_ITEMSIZE(PyArrayObject*)
    object PyArray_NewFromDescr(PyTypeObject*, PyArray_Descr*, int, npy_intp*, npy_intp*, void*,
                                int, PyObject*)
    int PyArray_SetBaseObject(PyArrayObject*, PyObject*) except -1
    int _import_array() except -1

from .dcbor cimport (
    Ctx, Head, start, read_head, peek_head, check_container, check_key_order, map_key,
    short_text, decode_item,
)
from ._cbortypes import CborReject as _Reject, SYNTAX as _SYNTAX

cdef extern from *:
    """
    #include <stdint.h>
    static inline int tf_mul_u64(uint64_t a, uint64_t b, uint64_t* out) {
        return __builtin_mul_overflow(a, b, out);
    }
    """
    int tf_mul_u64(uint64_t a, uint64_t b, uint64_t* out) noexcept nogil

cdef int MAX_DEPTH_LIMIT = 256
cdef int MAX_RANK_LIMIT = 64
# the deepest container of a plain dense object: root 1, objects 2, object 3, parts 4,
# data 5, blob 6
cdef int PLAN_DEPTH = 6


cdef struct Limits:
    Py_ssize_t region
    uint64_t align
    Py_ssize_t max_rank
    Py_ssize_t max_name_bytes
    # the last digest accepted: where its text is in the manifest (-1: none yet), the length
    # of its algorithm name and of the whole text (a digest with the same algorithm bytes and
    # length passes the algorithm checks the same way, so they are not repeated)
    Py_ssize_t dig_pos
    Py_ssize_t dig_colon
    Py_ssize_t dig_n


# Objects of one manifest mostly share a dtype, shape and length: the last ones are kept
# (immutable Python objects: handing the same one out again is safe), saving allocations.
cdef struct Reuse:
    Py_ssize_t shape_pos     # the last shape's CBOR array (head included); -1: none yet
    Py_ssize_t shape_len
    uint64_t length
    bint has_length


cdef bint _digest_ok(const uint8_t* d, Py_ssize_t at, Py_ssize_t n, dict digests, Limits* lim):
    """``d[at:at + n]`` is ``<[a-z0-9][a-z0-9._-]*>:<[0-9a-f]+>`` (ASCII, so its str is the
    same characters), with the known algorithms' hex lengths."""
    cdef const uint8_t* s = d + at
    cdef Py_ssize_t i, colon = -1, kn
    cdef const char* ks
    cdef uint8_t ch
    cdef const void* found = memchr(s, 0x3A, n)  # ':'
    if found == NULL:
        return False
    colon = <const uint8_t*>found - s
    if colon < 1 or colon == n - 1:
        return False
    for i in range(colon + 1, n):
        ch = s[i]
        if not ((0x61 <= ch <= 0x66) or (0x30 <= ch <= 0x39)):
            return False
    if lim.dig_pos >= 0 and colon == lim.dig_colon and n == lim.dig_n \
            and memcmp(s, d + lim.dig_pos, colon) == 0:
        return True  # the same algorithm and length as the last digest accepted
    ch = s[0]
    if not ((0x61 <= ch <= 0x7A) or (0x30 <= ch <= 0x39)):
        return False
    for i in range(1, colon):
        ch = s[i]
        if not ((0x61 <= ch <= 0x7A) or (0x30 <= ch <= 0x39) or ch == 0x2E or ch == 0x5F
                or ch == 0x2D):
            return False
    for key, want in digests.items():  # a handful of known algorithms
        if type(key) is not str:
            continue
        try:
            ks = PyUnicode_AsUTF8AndSize(key, &kn)
        except UnicodeEncodeError:
            continue
        if kn == colon and memcmp(ks, s, colon) == 0:
            if not (want is None or want == n - colon - 1):
                return False
            break
    lim.dig_pos = at
    lim.dig_colon = colon
    lim.dig_n = n
    return True


cdef bint _name_ok(object name, Py_ssize_t max_name_bytes):
    """Text, non-empty, no U+0000, at most ``max_name_bytes`` in UTF-8."""
    cdef Py_ssize_t n
    cdef const char* s
    if type(name) is not str:
        return False
    try:
        s = PyUnicode_AsUTF8AndSize(name, &n)
    except UnicodeEncodeError:
        return False
    return 0 < n <= max_name_bytes and memchr(s, 0, n) == NULL


cdef inline bint _ascii(const uint8_t* s, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    for i in range(n):
        if s[i] >= 0x80:
            return False
    return True


cdef inline bint _lit(Ctx* c, Py_ssize_t* p, bytes lit) noexcept:
    """The bytes at ``p`` are ``lit`` (then step over them)."""
    cdef Py_ssize_t length = PyBytes_GET_SIZE(lit)
    if length > c.n - p[0] or memcmp(c.d + p[0], PyBytes_AS_STRING(lit), length) != 0:
        return False
    p[0] += length
    return True


# the fixed bytes of a plain dense object, in canonical key order
cdef bytes PARTS_DATA = b"\x65parts\xa1\x64data"
cdef bytes BLOB = b"\x64blob\x82"
cdef bytes DTYPE = b"\x65dtype"
cdef bytes DIGEST = b"\x66digest"
cdef bytes SHAPE = b"\x65shape"
cdef bytes LAYOUT_DENSE = b"\x66layout\x65dense"


cdef inline bint _uint(Ctx* c, Py_ssize_t* p, uint64_t* out) noexcept:
    cdef Head h
    if not peek_head(c, p[0], &h) or h.major != 0:
        return False
    out[0] = h.arg
    p[0] = h.next
    return True


cdef inline bint _text_at(Ctx* c, Py_ssize_t* p, Py_ssize_t* start, Py_ssize_t* length) noexcept:
    cdef Head h
    if not peek_head(c, p[0], &h) or h.major != 3 or h.arg > <uint64_t>(c.n - h.next):
        return False
    start[0] = h.next
    length[0] = <Py_ssize_t>h.arg
    p[0] = h.next + <Py_ssize_t>h.arg
    return True


cdef struct PlanRec:
    uint64_t offset
    uint64_t length
    Py_ssize_t shape_pos  # the shape's CBOR array (head included) in the manifest
    Py_ssize_t shape_len
    Py_ssize_t rank
    Py_ssize_t digest_pos  # the digest text in the manifest; -1: no digest
    Py_ssize_t digest_len


cdef bint _check(Ctx* c, list strings, Py_ssize_t pos, Py_ssize_t* end, object name,
                 Limits* lim, dict dtypes, dict digests, list kept, PlanRec* rec):
    """Whether the object encoded at ``pos`` is plain dense and keeps every rule (nothing
    raised); if so its fields go to ``rec`` and ``kept[2:5]`` (dtype str, np dtype, itemsize,
    reused from the last plan when the same)."""
    cdef Py_ssize_t p = pos, ts, tl, ds = 0, dl = 0, i, rank, shape_pos
    cdef Head h
    cdef bint has_digest, zero = False, overflow = False
    cdef uint64_t offset, length, dim, numel = 1, itemsize, nbytes
    if c.max_depth < PLAN_DEPTH:
        return False
    if not (peek_head(c, p, &h) and h.major == 5 and h.arg == 3):
        return False
    p = h.next
    if not (_lit(c, &p, PARTS_DATA) and peek_head(c, p, &h) and h.major == 5
            and (h.arg == 2 or h.arg == 3)):
        return False
    has_digest = h.arg == 3
    p = h.next
    if not (_lit(c, &p, BLOB) and _uint(c, &p, &offset) and _uint(c, &p, &length)
            and _lit(c, &p, DTYPE) and _text_at(c, &p, &ts, &tl)):
        return False
    if has_digest and not (_lit(c, &p, DIGEST) and _text_at(c, &p, &ds, &dl)):
        return False
    if not (_lit(c, &p, SHAPE) and peek_head(c, p, &h) and h.major == 4):
        return False
    shape_pos = p
    if h.arg > <uint64_t>lim.max_rank:  # <= 64
        return False
    rank = <Py_ssize_t>h.arg
    p = h.next
    for i in range(rank):
        if not _uint(c, &p, &dim):
            return False
        if dim == 0:
            zero = True
        elif not overflow and tf_mul_u64(numel, dim, &numel):
            overflow = True
    rec.shape_pos = shape_pos
    rec.shape_len = p - shape_pos
    rec.rank = rank
    if not _lit(c, &p, LAYOUT_DENSE):
        return False
    if zero:
        numel = 0
    elif overflow:
        return False  # the element count overflows u64
    if lim.region < 0 or offset % lim.align or offset < lim.align \
            or offset > <uint64_t>lim.region or length > <uint64_t>lim.region - offset:
        return False
    if tl <= 8 and _ascii(c.d + ts, tl):
        dtype = short_text(c, strings, ts, tl, ts - 1)  # ASCII: cannot fail
    else:
        try:
            dtype = PyUnicode_DecodeUTF8(<const char*>(c.d + ts), tl, "strict")
        except UnicodeDecodeError:
            return False  # not UTF-8: the full decode names it
    if dtype is kept[2]:  # the same cached str: the same type as the last plan's
        itemsize = kept[4]
    else:
        np_dtype = dtypes.get(dtype)
        if np_dtype is None:
            return False
        itemsize_o = np_dtype.itemsize
        if type(itemsize_o) is not int:
            return False
        try:
            itemsize = itemsize_o
        except OverflowError:
            return False
        kept[2] = dtype
        kept[3] = np_dtype
        kept[4] = itemsize
    if tf_mul_u64(numel, itemsize, &nbytes) or nbytes != length:
        return False
    if has_digest:
        if not _digest_ok(c.d, ds, dl, digests, lim):
            return False
        rec.digest_pos = ds
        rec.digest_len = dl
    else:
        rec.digest_pos = -1
        rec.digest_len = 0
    if not _name_ok(name, lim.max_name_bytes):
        return False
    rec.offset = offset
    rec.length = length
    end[0] = p
    return True


cdef tuple _shape(const uint8_t* d, Py_ssize_t n, PlanRec* rec):
    """The shape tuple of a checked plan, decoded again from its CBOR array."""
    cdef Ctx c
    cdef Head h
    cdef Py_ssize_t p, i
    cdef object dim_o
    c.d = d
    c.n = n
    peek_head(&c, rec.shape_pos, &h)
    p = h.next
    shape = PyTuple_New(rec.rank)
    for i in range(rec.rank):
        peek_head(&c, p, &h)
        p = h.next
        dim_o = h.arg
        Py_INCREF(dim_o)
        PyTuple_SET_ITEM(shape, i, dim_o)
    return shape


cdef object _plan(Ctx* c, list strings, Py_ssize_t pos, Py_ssize_t* end, object name,
                  Limits* lim, dict dtypes, dict digests, Reuse* re, list kept):
    """The plan of the plain dense object encoded at ``pos``, or None (nothing raised).
    ``kept`` holds ``[shape tuple, length int, dtype str, np dtype, itemsize]`` of the last
    plan (see :c:type:`Reuse`)."""
    cdef PlanRec rec
    if not _check(c, strings, pos, end, name, lim, dtypes, digests, kept, &rec):
        return None
    digest = None
    if rec.digest_pos >= 0:  # checked: ASCII
        digest = PyUnicode_DecodeASCII(<const char*>(c.d + rec.digest_pos), rec.digest_len, NULL)
    if re.shape_pos >= 0 and re.shape_len == rec.shape_len \
            and memcmp(c.d + re.shape_pos, c.d + rec.shape_pos, rec.shape_len) == 0:
        shape = kept[0]
    else:
        shape = _shape(c.d, c.n, &rec)
        kept[0] = shape
        re.shape_pos = rec.shape_pos
        re.shape_len = rec.shape_len
    if re.has_length and re.length == rec.length:
        length_o = kept[1]
    else:
        length_o = rec.length
        kept[1] = length_o
        re.length = rec.length
        re.has_length = True
    return (rec.offset, length_o, kept[2], kept[3], shape, digest)


cdef Py_ssize_t _objects(Ctx* c, list strings, Py_ssize_t pos, Limits* lim, dict dtypes,
                         dict digests, dict plans, dict others, list order,
                         PlanTable table) except -1:
    """Decode the objects map at ``pos`` (depth 2) into ``plans`` (or ``table`` when it is not
    None) and ``others``; ``order`` gets ``[in_order, lo, hi]``; return the end of the map."""
    cdef Head h
    cdef Py_ssize_t p, kpos, klen, prev_pos = 0, prev_len = 0, i, vend = 0
    cdef bint in_order = True, any_span = False
    cdef uint64_t offset, length, lo = 0, hi = 0
    cdef Reuse re
    cdef PlanRec rec
    cdef list kept = [None, None, None, None, 0]
    re.shape_pos = -1
    re.shape_len = 0
    re.length = 0
    re.has_length = False
    read_head(c, pos, &h)
    check_container(c, &h, pos, 2)
    p = h.next
    for i in range(<Py_ssize_t>h.arg):
        kpos = p
        k = decode_item(c, strings, p, 3, &p)
        klen = p - kpos
        if i:
            check_key_order(c, kpos, klen, prev_pos, prev_len, k)
        prev_pos = kpos
        prev_len = klen
        k = map_key(c, k, kpos, klen)
        if table is not None:
            if not _check(c, strings, p, &vend, k, lim, dtypes, digests, kept, &rec):
                others[k] = decode_item(c, strings, p, 3, &p)
                in_order = False
                continue
            table._add(k, &rec, kept)
            offset = rec.offset
            length = rec.length
        else:
            plan = _plan(c, strings, p, &vend, k, lim, dtypes, digests, &re, kept)
            if plan is None:
                others[k] = decode_item(c, strings, p, 3, &p)
                in_order = False
                continue
            plans[k] = plan
            offset = (<tuple>plan)[0]
            length = (<tuple>plan)[1]
        p = vend
        if length:
            if any_span and offset < hi:
                in_order = False
            if not any_span or offset < lo:
                lo = offset
            if not any_span or offset + length > hi:
                hi = offset + length
            any_span = True
    order[0] = in_order
    if any_span:
        order[1] = lo
        order[2] = hi
    return p


cdef object _scan(const uint8_t[::1] data, int max_depth, Py_ssize_t region, Py_ssize_t align,
                  Py_ssize_t max_rank, Py_ssize_t max_name_bytes, dict dtypes, dict digests,
                  PlanTable table):
    """The body of :func:`scan_manifest` and :func:`scan_table`."""
    if max_depth < 1 or max_depth > MAX_DEPTH_LIMIT:
        raise ValueError(f"max_depth must be in 1..{MAX_DEPTH_LIMIT}, got {max_depth}")
    if align <= 0:
        raise ValueError(f"align must be positive, got {align}")
    if max_rank < 0 or max_rank > MAX_RANK_LIMIT or max_name_bytes < 0:
        raise ValueError(f"max_rank must be in 0..{MAX_RANK_LIMIT} and max_name_bytes >= 0")
    cdef Py_ssize_t n = data.shape[0], p, kpos, klen, prev_pos = 0, prev_len = 0, i, end = 0
    cdef Ctx c
    cdef Head h
    cdef Limits lim
    cdef dict plans = {}, others = {}, rest = {}
    cdef list order = [False, -1, -1]
    cdef bint found = False
    if n == 0:
        raise _Reject(_SYNTAX, 0, "empty input")
    strings = start(&c, &data[0], n, max_depth)
    lim.region = region
    lim.align = <uint64_t>align
    lim.max_rank = max_rank
    lim.max_name_bytes = max_name_bytes
    lim.dig_pos = -1
    lim.dig_colon = 0
    lim.dig_n = 0
    if data[0] >> 5 != 5:  # not a map: decode it all (for the errors), there is no plan
        decode_item(&c, strings, 0, 1, &end)
        if end != n:
            raise _Reject(_SYNTAX, end, f"{n - end} trailing bytes after the item")
        return None
    read_head(&c, 0, &h)
    check_container(&c, &h, 0, 1)
    p = h.next
    for i in range(<Py_ssize_t>h.arg):
        kpos = p
        k = decode_item(&c, strings, p, 2, &p)
        klen = p - kpos
        if i:
            check_key_order(&c, kpos, klen, prev_pos, prev_len, k)
        prev_pos = kpos
        prev_len = klen
        k = map_key(&c, k, kpos, klen)
        if type(k) is str and k == "objects" and p < n and c.d[p] >> 5 == 5:
            found = True
            p = _objects(&c, strings, p, &lim, dtypes, digests, plans, others, order, table)
        else:
            rest[k] = decode_item(&c, strings, p, 2, &p)
    if p != n:
        raise _Reject(_SYNTAX, p, f"{n - p} trailing bytes after the item")
    if not found:
        return None
    return (plans if table is None else table), others, rest, order[0], order[1], order[2]


def scan_manifest(const uint8_t[::1] data, int max_depth, Py_ssize_t region, Py_ssize_t align,
                  Py_ssize_t max_rank, Py_ssize_t max_name_bytes, dict dtypes not None,
                  dict digests not None):
    """Decode a zTensor v2 manifest (see the twin's doc for the contract).

    Raises ``CborReject`` exactly when ``dcbor.decode(data, max_depth)`` does. Returns None
    unless the root is a map holding a map under ``"objects"``; else
    ``(plans, others, rest, in_order, lo, hi)``.
    """
    return _scan(data, max_depth, region, align, max_rank, max_name_bytes, dtypes, digests,
                 None)


def scan_table(bytes data not None, int max_depth, Py_ssize_t region, Py_ssize_t align,
               Py_ssize_t max_rank, Py_ssize_t max_name_bytes, dict dtypes not None,
               dict digests not None):
    """:func:`scan_manifest` with the plans kept in a :class:`PlanTable` (compact records;
    a plan's tuple is built when asked for): ``(table, others, rest, in_order, lo, hi)`` or
    None.
    """
    if not PyBytes_GET_SIZE(data):
        raise _Reject(_SYNTAX, 0, "empty input")
    return _scan(data, max_depth, region, align, max_rank, max_name_bytes, dtypes, digests,
                 PlanTable(data))


cdef class PlanTable:
    """The plans of one manifest as compact records (see :func:`scan_table`).

    ``index`` maps each planned object's name to its record number, in manifest order;
    :meth:`plan` gives the tuple :func:`scan_manifest` would have given, :meth:`view` the array
    of a name straight from its record.
    """

    cdef bytes data  # the manifest: digests and shapes are read from it again
    cdef PlanRec* recs
    cdef Py_ssize_t n, cap
    cdef list types  # per record: (dtype str, np dtype), shared between equal ones
    cdef readonly dict index

    def __cinit__(self, bytes data not None):
        self.data = data
        self.recs = NULL
        self.n = 0
        self.cap = 0
        self.types = []
        self.index = {}

    def __dealloc__(self):
        PyMem_Free(self.recs)

    cdef int _add(self, object name, PlanRec* rec, list kept) except -1:
        cdef PlanRec* grown
        cdef Py_ssize_t cap
        if self.n == self.cap:
            cap = 16 if self.cap == 0 else 2 * self.cap
            grown = <PlanRec*>PyMem_Realloc(self.recs, cap * sizeof(PlanRec))
            if grown == NULL:
                raise MemoryError()
            self.recs = grown
            self.cap = cap
        self.recs[self.n] = rec[0]
        last = self.types[-1] if self.n else None
        if last is None or (<tuple>last)[0] is not kept[2]:
            last = (kept[2], kept[3])
        self.types.append(last)
        self.index[name] = self.n
        self.n += 1
        return 0

    def __len__(self):
        return self.n

    cdef PlanRec* _rec(self, Py_ssize_t i) except NULL:
        if i < 0 or i >= self.n:
            raise IndexError(f"plan {i} of {self.n}")
        return &self.recs[i]

    def plan(self, Py_ssize_t i):
        """Plan ``i`` as :func:`scan_manifest` gives it."""
        cdef PlanRec* rec = self._rec(i)
        cdef const uint8_t* d = <const uint8_t*>PyBytes_AS_STRING(self.data)
        digest = None
        if rec.digest_pos >= 0:
            digest = PyUnicode_DecodeASCII(<const char*>(d + rec.digest_pos), rec.digest_len,
                                           NULL)
        t = <tuple>self.types[i]
        return (rec.offset, rec.length, t[0], t[1],
                _shape(d, PyBytes_GET_SIZE(self.data), rec), digest)

    def has_digest(self, Py_ssize_t i):
        """Whether plan ``i`` has a digest."""
        return self._rec(i).digest_pos >= 0

    def view(self, object base, object name, bint verify, verified):
        """The read-only array of the planned object ``name`` over ``base`` (as
        :func:`view`), or None when there is none to give: no plan of that name, ``base`` is
        None, the blob is empty, or its digest is to be checked first (``verify`` and
        ``(name, "data")`` not in ``verified``)."""
        return self._view(base, name, verify, verified)

    cdef object _view(self, object base, object name, bint verify, object verified):
        cdef npy_intp dims[64]
        cdef Ctx c
        cdef Head h
        cdef Py_ssize_t i, p, nbytes, k
        cdef PlanRec* rec
        cdef PyArrayObject* b
        idx = self.index.get(name)
        if idx is None or base is None:
            return None
        k = idx
        rec = &self.recs[k]
        if rec.length == 0 or (verify and rec.digest_pos >= 0 and (name, "data") not in verified):
            return None
        if not PyArray_CheckExact(base):
            raise ValueError("base must be a C-contiguous 1-d uint8 ndarray")
        b = <PyArrayObject*>base
        if not (PyArray_NDIM(b) == 1 and PyArray_ITEMSIZE(b) == 1 and PyArray_ISCARRAY_RO(b)):
            raise ValueError("base must be a C-contiguous 1-d uint8 ndarray")
        nbytes = PyArray_NBYTES(b)
        if rec.length > <uint64_t>nbytes or rec.offset > <uint64_t>nbytes - rec.length:
            raise ValueError(f"range [{rec.offset}, +{rec.length}) outside the {nbytes} bytes "
                             "of base")
        c.d = <const uint8_t*>PyBytes_AS_STRING(self.data)
        c.n = PyBytes_GET_SIZE(self.data)
        peek_head(&c, rec.shape_pos, &h)  # checked by the scan: length = count x itemsize
        p = h.next
        for i in range(rec.rank):
            peek_head(&c, p, &h)
            p = h.next
            dims[i] = <npy_intp>h.arg  # <= length (the count is not 0): fits
        descr = (<tuple>self.types[k])[1]
        Py_INCREF(descr)  # NewFromDescr steals it
        arr = PyArray_NewFromDescr(&PyArray_Type, <PyArray_Descr*>descr, <int>rec.rank, dims,
                                   NULL, <char*>PyArray_DATA(b) + rec.offset, 0, NULL)
        Py_INCREF(base)  # SetBaseObject steals it
        PyArray_SetBaseObject(<PyArrayObject*>arr, <PyObject*>base)
        return arr


cdef class TableReader:
    """Base of a reader whose plain dense objects are views built straight from a
    :class:`PlanTable`: ``reader[name]`` (in C) is ``_table.view(_base, name,
    verify_checksums, _verified)`` unless ``copy`` is set, and the subclass's
    ``_lookup(name)`` for a name that gives no view that way.

    The attributes are the reader's own (a subclass sets them in Python as it would plain
    attributes); their defaults: no table, no base, ``copy`` False, ``verify_checksums``
    True, ``_verified`` None.
    """

    cdef public PlanTable _table
    cdef public object _base
    cdef public object _verified
    cdef public bint copy
    cdef public bint verify_checksums

    def __cinit__(self, *args, **kwargs):
        self._table = None
        self._base = None
        self._verified = None
        self.copy = False
        self.verify_checksums = True

    def __getitem__(self, name):
        if self._table is not None and not self.copy:
            arr = self._table._view(self._base, name, self.verify_checksums, self._verified)
            if arr is not None:
                return arr
        return self._lookup(name)


_import_array()


def view(object base, tuple plan not None):
    """The read-only array a plan describes, over the bytes of ``base`` (a C-contiguous 1-d
    ``uint8`` ndarray: a file's map), without copying; ``base`` is the array's ``.base``.

    ``plan`` is ``(offset, length, dtype, np_dtype, shape, digest)`` as ``scan_manifest`` gives
    it; the range must lie in ``base`` and ``length`` must be the shape's element count times
    the itemsize (``ValueError`` otherwise).
    """
    cdef npy_intp dims[64]
    cdef Py_ssize_t rank, i, nbytes, offset, length
    cdef uint64_t total = 1, dim
    cdef PyArrayObject* b
    if not PyArray_CheckExact(base):
        raise ValueError("base must be a C-contiguous 1-d uint8 ndarray")
    b = <PyArrayObject*>base
    if not (PyArray_NDIM(b) == 1 and PyArray_ITEMSIZE(b) == 1 and PyArray_ISCARRAY_RO(b)):
        raise ValueError("base must be a C-contiguous 1-d uint8 ndarray")
    if len(plan) != 6:
        raise ValueError(f"a plan has 6 fields, got {len(plan)}")
    offset = plan[0]
    length = plan[1]
    descr = plan[3]
    shape = <tuple?>plan[4]
    if not PyArray_DescrCheck(descr):
        raise ValueError("plan[3] must be a numpy dtype")
    rank = len(shape)
    if rank > 64:
        raise ValueError(f"rank above 64: {rank}")
    for i in range(rank):
        dim = shape[i]
        if dim > <uint64_t>PY_SSIZE_T_MAX or tf_mul_u64(total, dim, &total):
            raise ValueError(f"shape {shape} too large")
        dims[i] = <npy_intp>dim
    nbytes = PyArray_NBYTES(b)
    if offset < 0 or length < 0 or length > nbytes or offset > nbytes - length:
        raise ValueError(f"range [{offset}, +{length}) outside the {nbytes} bytes of base")
    if tf_mul_u64(total, <uint64_t>descr.itemsize, &total) or total != <uint64_t>length:
        raise ValueError(f"length {length} is not {shape} x the itemsize of {descr}")
    Py_INCREF(descr)  # NewFromDescr steals it
    arr = PyArray_NewFromDescr(&PyArray_Type, <PyArray_Descr*>descr, <int>rank, dims, NULL,
                               <char*>PyArray_DATA(b) + offset, 0, NULL)  # flags 0: read-only
    Py_INCREF(base)  # SetBaseObject steals it
    PyArray_SetBaseObject(<PyArrayObject*>arr, <PyObject*>base)
    return arr


def map_spans(const uint8_t[::1] data, Py_ssize_t pos, int max_depth):
    """Where the entries of the deterministic-CBOR map whose head is at ``pos`` lie.

    Returns ``(spans, end)``: one ``(key_start, value_start, value_end)`` per entry, in the
    order they are encoded, and the end of the map. Each key and value is decoded on the way
    (``CborReject`` for anything ``dcbor.decode`` refuses, nesting counted from the map at
    depth 1); keys are not checked for order (the caller decoded the whole item before).
    Lets a writer copy the encodings of entries it does not change instead of encoding them
    again.
    """
    if max_depth < 1 or max_depth > MAX_DEPTH_LIMIT:
        raise ValueError(f"max_depth must be in 1..{MAX_DEPTH_LIMIT}, got {max_depth}")
    cdef Py_ssize_t n = data.shape[0], p, kpos, vpos, i
    cdef Ctx c
    cdef Head h
    if pos < 0 or pos >= n:
        raise ValueError(f"pos {pos} outside the {n} bytes")
    strings = start(&c, &data[0], n, max_depth)
    read_head(&c, pos, &h)
    if h.major != 5:
        raise _Reject(_SYNTAX, pos, "not a map")
    check_container(&c, &h, pos, 1)
    p = h.next
    spans = []
    for i in range(<Py_ssize_t>h.arg):
        kpos = p
        decode_item(&c, strings, p, 2, &p)
        vpos = p
        decode_item(&c, strings, p, 2, &p)
        spans.append((kpos, vpos, p))
    return spans, p

# cython: language_level=3
"""XXH3-64: one-shot, streaming, and copy-while-hashing, with the GIL released.

The same values as the ``xxhash`` package's ``xxh3_64`` (XXH3-64 with the default secret and
an optional 64-bit seed). The C is in ``_xxh3_impl.h``: the stripe loop of long inputs runs on
AVX-512, AVX2 or SSE2 registers on x86-64, chosen at import, and in plain 64-bit arithmetic
elsewhere; ``TENFOLD_XXH3`` (read at import: ``scalar``, ``sse2``, ``avx2`` or ``avx512``) or
:func:`_force` (tests) lowers it. Every level gives the same values.

Inputs are any C-contiguous buffer (bytes, bytearray, memoryview, a NumPy array of any dtype),
read as its bytes, as the package reads them. Calls on more than :data:`NOGIL_BYTES` bytes
release the GIL, so threads hash in parallel. A
:class:`Xxh3State` holds a lock while it works, so threads sharing one are serialised (the
bytes they give are hashed in the order the calls take the lock).
"""

import os

from cpython.pythread cimport (
    PyThread_type_lock, PyThread_allocate_lock, PyThread_free_lock, PyThread_acquire_lock,
    PyThread_release_lock, WAIT_LOCK, NOWAIT_LOCK,
)
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from libc.stdint cimport uint8_t, uint64_t, uintptr_t

cdef extern from "_xxh3_impl.h":
    ctypedef struct tf_x3_state:
        uint64_t total
        uint64_t seed
    int tf_x3_best
    int tf_x3_level
    const char* const tf_x3_names[4]
    void tf_x3_init() noexcept nogil
    uint64_t tf_xxh3_64(const uint8_t* p, uint8_t* dst, size_t n, uint64_t seed) noexcept nogil
    void tf_x3_reset(tf_x3_state* st, uint64_t seed) noexcept nogil
    void tf_x3_update(tf_x3_state* st, const uint8_t* p, uint8_t* dst, size_t n) noexcept nogil
    uint64_t tf_x3_digest(const tf_x3_state* st) noexcept nogil

tf_x3_init()

#: Inputs above this many bytes are hashed with the GIL released.
NOGIL_BYTES = 1 << 14
cdef size_t _NOGIL = NOGIL_BYTES

_NAMES = tuple(tf_x3_names[i].decode() for i in range(4))


def _force(name=None):
    """Use the level ``name`` (one of the names :func:`implementation` gives, at most the
    CPU's best), or the best one with None; returns the previous name. Not thread-safe: for
    tests and benchmarks."""
    global tf_x3_level
    old = _NAMES[tf_x3_level]
    if name is None:
        tf_x3_level = tf_x3_best
        return old
    if name not in _NAMES:
        raise ValueError(f"xxh3: implementation {name!r}: expected one of {_NAMES}")
    level = _NAMES.index(name)
    if level > tf_x3_best:
        raise ValueError(
            f"xxh3: implementation {name!r} needs a CPU feature this one lacks; "
            f"the best here is {_NAMES[tf_x3_best]!r}"
        )
    tf_x3_level = level
    return old


def _available():
    """The implementations this CPU runs, slowest first."""
    return _NAMES[: tf_x3_best + 1]


_env = os.environ.get("TENFOLD_XXH3", "").strip().lower()
if _env:
    _force(_env)


def implementation():
    """The stripe loop in use: ``"avx512"``, ``"avx2"``, ``"sse2"`` or ``"scalar"``."""
    return _NAMES[tf_x3_level]


def xxh3_64(data, uint64_t seed=0):
    """XXH3-64 of ``data`` with ``seed`` (``xxhash.xxh3_64_intdigest(data, seed)``)."""
    cdef Py_buffer v
    cdef uint64_t h
    PyObject_GetBuffer(data, &v, PyBUF_SIMPLE)
    try:
        if <size_t>v.len > _NOGIL:
            with nogil:
                h = tf_xxh3_64(<const uint8_t*>v.buf, NULL, <size_t>v.len, seed)
        else:
            h = tf_xxh3_64(<const uint8_t*>v.buf, NULL, <size_t>v.len, seed)
    finally:
        PyBuffer_Release(&v)
    return h


cdef class Xxh3State:
    """A running XXH3-64, as ``xxhash.xxh3_64(seed=...)``: :meth:`update` with bytes in order,
    then :meth:`intdigest` (or :meth:`hexdigest`, :meth:`digest`) at any time. ``update`` of
    more than :data:`NOGIL_BYTES` bytes releases the GIL."""

    cdef tf_x3_state st
    cdef PyThread_type_lock lock

    def __cinit__(self, uint64_t seed=0):
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError("xxh3: no lock for the state")
        tf_x3_reset(&self.st, seed)

    def __init__(self, uint64_t seed=0):
        pass  # __cinit__ did the work; this gives the signature

    def __dealloc__(self):
        if self.lock != NULL:
            PyThread_free_lock(self.lock)

    @property
    def seed(self):
        """The seed the state was made (or last reset) with."""
        return self.st.seed

    @property
    def total(self):
        """Bytes given so far."""
        return self.st.total

    cdef void _lock(self) noexcept:
        if not PyThread_acquire_lock(self.lock, NOWAIT_LOCK):
            with nogil:
                PyThread_acquire_lock(self.lock, WAIT_LOCK)

    def update(self, data):
        """Add ``data`` (any C-contiguous buffer, read as its bytes) to the hash."""
        cdef Py_buffer v
        PyObject_GetBuffer(data, &v, PyBUF_SIMPLE)
        try:
            if v.len:
                self._lock()
                if <size_t>v.len > _NOGIL:
                    with nogil:
                        tf_x3_update(&self.st, <const uint8_t*>v.buf, NULL, <size_t>v.len)
                else:
                    tf_x3_update(&self.st, <const uint8_t*>v.buf, NULL, <size_t>v.len)
                PyThread_release_lock(self.lock)
        finally:
            PyBuffer_Release(&v)

    def intdigest(self):
        """The XXH3-64 of the bytes given so far, as an int."""
        cdef uint64_t h
        self._lock()
        h = tf_x3_digest(&self.st)
        PyThread_release_lock(self.lock)
        return h

    def hexdigest(self):
        """:meth:`intdigest` as 16 lowercase hex digits."""
        return f"{self.intdigest():016x}"

    def digest(self):
        """:meth:`intdigest` as 8 bytes, most significant first (``xxhash``'s canonical form)."""
        return self.intdigest().to_bytes(8, "big")

    def copy(self):
        """An independent state with the same bytes given."""
        cdef Xxh3State out = Xxh3State.__new__(Xxh3State, self.st.seed)
        self._lock()
        out.st = self.st
        PyThread_release_lock(self.lock)
        return out

    def reset(self):
        """Forget the bytes given (keep the seed)."""
        self._lock()
        tf_x3_reset(&self.st, self.st.seed)
        PyThread_release_lock(self.lock)


def copy_xxh3(src, dst, Xxh3State state not None):
    """Copy ``src`` into ``dst`` (C-contiguous buffers of the same size in bytes, not
    overlapping; ``dst`` writable) and add the bytes to ``state``: one pass over the source,
    stripe by stripe (what ``state.update(src)`` and a copy give)."""
    cdef Py_buffer s, d
    cdef size_t n
    cdef uintptr_t a, b
    PyObject_GetBuffer(src, &s, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(dst, &d, PyBUF_WRITABLE)
        try:
            n = <size_t>s.len
            if <size_t>d.len != n:
                raise ValueError(f"copy_xxh3: dst of {d.len} bytes; expected {n} (as src)")
            if n == 0:
                return
            a = <uintptr_t>s.buf
            b = <uintptr_t>d.buf
            if a < b + n and b < a + n:
                raise ValueError("copy_xxh3: src and dst overlap")
            state._lock()
            if n > _NOGIL:
                with nogil:
                    tf_x3_update(&state.st, <const uint8_t*>s.buf, <uint8_t*>d.buf, n)
            else:
                tf_x3_update(&state.st, <const uint8_t*>s.buf, <uint8_t*>d.buf, n)
            PyThread_release_lock(state.lock)
        finally:
            PyBuffer_Release(&d)
    finally:
        PyBuffer_Release(&s)

# cython: language_level=3
"""CRC-32C (Castagnoli): checksum, copy-and-checksum in one pass, and the CRC of two joined;
CRC-32 (IEEE 802.3, the zip and zlib one: :func:`crc32` is ``zlib.crc32``) through the same loops.

The C is in ``_crc32c_impl.h``: carry-less-multiply folding (VPCLMULQDQ on AVX-512 or AVX2
registers, or PCLMULQDQ) where the CPU has it, the SSE4.2 ``crc32`` instruction on three
interleaved streams where it has only that, slice-by-8 tables anywhere else (any
architecture). The best level is chosen at import; ``TENFOLD_CRC32C`` (read at import:
``table``, ``sse4.2``, ``pclmul``, ``avx2-vpclmul`` or ``avx512-vpclmul``) or :func:`_force`
(tests) lowers it. Every level gives the same values. CRC-32 has no instruction of its own: at
``sse4.2`` and ``table`` it runs the tables (:func:`crc32_implementation`). CRC-32C at the
``pclmul`` level (a CPU without VPCLMULQDQ) runs the ``crc32`` instruction on three streams,
as at ``sse4.2``: 128-bit folding measured half its speed (14.6 vs 27.7 GB/s in cache, Zen 4);
:func:`copy_crc32c` still folds there (storing while folding beats a copy then the instruction).

Calls on more than :data:`NOGIL_BYTES` bytes release the GIL, so threads check in parallel.
"""

import os

from libc.stdint cimport uint8_t, uint32_t, uint64_t, uintptr_t
cimport cython

cdef extern from "_crc32c_impl.h":
    int tf_crc_best
    int tf_crc_level
    int tf_crc_copy_fused
    int tf_crc_nt
    const char* const tf_crc_names[5]
    void tf_crc_init() noexcept nogil
    uint32_t tf_crc32c(uint32_t value, const uint8_t* p, size_t n) noexcept nogil
    uint32_t tf_copy_crc32c(uint32_t value, const uint8_t* src, uint8_t* dst,
                            size_t n) noexcept nogil
    uint32_t tf_copy_crc32c_nt(uint32_t value, const uint8_t* src, uint8_t* dst,
                               size_t n, int stream) noexcept nogil
    uint32_t tf_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) noexcept nogil
    uint32_t tf_crc32(uint32_t value, const uint8_t* p, size_t n) noexcept nogil
    uint32_t tf_crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) noexcept nogil

tf_crc_init()

#: Inputs above this many bytes are checked with the GIL released.
NOGIL_BYTES = 1 << 15
cdef size_t _NOGIL = NOGIL_BYTES

_NAMES = tuple(tf_crc_names[i].decode() for i in range(5))


def _force(name=None):
    """Use the level ``name`` (one of the names :func:`implementation` gives, at most the
    CPU's best), or the best one with None; returns the previous name. Not thread-safe: for
    tests and benchmarks."""
    global tf_crc_level
    old = _NAMES[tf_crc_level]
    if name is None:
        tf_crc_level = tf_crc_best
        return old
    if name not in _NAMES:
        raise ValueError(f"crc32c: implementation {name!r}: expected one of {_NAMES}")
    level = _NAMES.index(name)
    if level > tf_crc_best:
        raise ValueError(
            f"crc32c: implementation {name!r} needs a CPU feature this one lacks; "
            f"the best here is {_NAMES[tf_crc_best]!r}"
        )
    tf_crc_level = level
    return old


def _copy_strategy(fused=None):
    """Whether :func:`copy_crc32c` stores while folding (True) or copies a block then checks
    it (False); sets it when given. For benchmarks."""
    global tf_crc_copy_fused
    old = bool(tf_crc_copy_fused)
    if fused is not None:
        tf_crc_copy_fused = 1 if fused else 0
    return old


def _stream_stores(on=None):
    """Whether the AVX-512 copy stores to 64-byte-aligned destinations bypass the cache
    (non-temporal stores) on this thread; sets it when given. Off by default; for benchmarks
    (a call asks for it with ``copy_crc32c(..., stream=True)``)."""
    global tf_crc_nt
    old = bool(tf_crc_nt)
    if on is not None:
        tf_crc_nt = 1 if on else 0
    return old


def _available():
    """The implementations this CPU runs, slowest first."""
    return _NAMES[: tf_crc_best + 1]


_env = os.environ.get("TENFOLD_CRC32C", "").strip().lower()
if _env:
    _force(_env)


def implementation():
    """The implementation level in use: ``"avx512-vpclmul"``, ``"avx2-vpclmul"``, ``"pclmul"``
    (for CRC-32C: the ``crc32`` instruction, as ``"sse4.2"``), ``"sse4.2"`` or ``"table"``."""
    return _NAMES[tf_crc_level]


ctypedef uint32_t (*crc_fn)(uint32_t, const uint8_t*, size_t) noexcept nogil


@cython.boundscheck(False)
@cython.wraparound(False)
cdef uint32_t _run(crc_fn fn, const uint8_t[::1] data, uint32_t value):
    """``fn`` over ``data`` from ``value``, without the GIL above :data:`NOGIL_BYTES`."""
    cdef size_t n = data.shape[0]
    cdef uint32_t v = value
    if n == 0:
        return v
    if n > _NOGIL:
        with nogil:
            v = fn(v, &data[0], n)
    else:
        v = fn(v, &data[0], n)
    return v


def crc32c(const uint8_t[::1] data, uint32_t value=0):
    """CRC-32C of ``data``, continuing from ``value`` (the CRC of the bytes before it)."""
    return _run(tf_crc32c, data, value)


@cython.boundscheck(False)
@cython.wraparound(False)
def copy_crc32c(const uint8_t[::1] src, uint8_t[::1] dst, uint32_t value=0, bint stream=False):
    """Copy ``src`` into ``dst`` (the same length, not overlapping) and return the CRC-32C of
    the bytes, continuing from ``value``: one pass over the source. ``stream=True`` stores to
    the destination past the CPU caches where the CPU can (AVX-512; for a buffer the CPU does not
    read again, such as a pinned buffer a device copies from); the bytes are visible to other
    threads and devices when the call returns."""
    cdef size_t n = src.shape[0]
    cdef uint32_t v = value
    cdef uintptr_t s, d
    if <size_t>dst.shape[0] != n:
        raise ValueError(f"copy_crc32c: dst of {dst.shape[0]} bytes; expected {n} (as src)")
    if n == 0:
        return v
    s = <uintptr_t>&src[0]
    d = <uintptr_t>&dst[0]
    if s < d + n and d < s + n:
        raise ValueError("copy_crc32c: src and dst overlap")
    if n > _NOGIL:
        with nogil:
            v = tf_copy_crc32c_nt(v, &src[0], &dst[0], n, stream)
    else:
        v = tf_copy_crc32c(v, &src[0], &dst[0], n)
    return v


def crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2):
    """The CRC-32C of ``A + B`` from ``crc1`` of ``A``, ``crc2`` of ``B`` and ``len(B)``."""
    return tf_crc32c_combine(crc1, crc2, len2)


def crc32_implementation():
    """What :func:`crc32` runs at the level in use: the level's name, or ``"table"`` below
    ``"pclmul"``."""
    return _NAMES[tf_crc_level] if tf_crc_level >= 2 else _NAMES[0]


def crc32(const uint8_t[::1] data, uint32_t value=0):
    """CRC-32 (``zlib.crc32``) of ``data``, continuing from ``value`` (the CRC of the bytes
    before it)."""
    return _run(tf_crc32, data, value)


def crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2):
    """The CRC-32 of ``A + B`` from ``crc1`` of ``A``, ``crc2`` of ``B`` and ``len(B)``."""
    return tf_crc32_combine(crc1, crc2, len2)

# cython: language_level=3
"""C-level exports of ``strhash`` for other kernel families (``cimport``)."""

from libc.stdint cimport uint8_t, int64_t, uint64_t

cdef uint64_t xxh64(const uint8_t* p, int64_t n, uint64_t seed, bint lower) noexcept nogil

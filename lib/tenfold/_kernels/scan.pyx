# cython: language_level=3
"""Byte-scanning kernels shared by the verifiers (padding and reserved-field checks)."""

from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcpy
cimport cython


@cython.boundscheck(False)
@cython.wraparound(False)
def first_nonzero(const uint8_t[::1] buf):
    """Index of the first non-zero byte of ``buf``, or -1 when every byte is zero."""
    cdef Py_ssize_t n = buf.shape[0]
    cdef Py_ssize_t i = 0
    cdef uint64_t word
    cdef const uint8_t* p
    if n == 0:
        return -1
    p = &buf[0]
    with nogil:
        while i + 8 <= n:
            memcpy(&word, p + i, 8)
            if word != 0:
                break
            i += 8
        while i < n:
            if p[i] != 0:
                break
            i += 1
    return i if i < n else -1


@cython.boundscheck(False)
@cython.wraparound(False)
def xor_u64_le(const uint8_t[::1] buf, uint64_t acc=0):
    """XOR of ``buf`` read as little-endian u64 words, zero-padded to a multiple of 8 bytes.

    Starts from ``acc``; returns the new accumulator.
    """
    cdef Py_ssize_t n = buf.shape[0]
    cdef Py_ssize_t i = 0, j
    cdef uint64_t word, tail
    cdef const uint8_t* p
    if n == 0:
        return acc
    p = &buf[0]
    with nogil:
        while i + 8 <= n:
            memcpy(&word, p + i, 8)
            acc ^= word
            i += 8
        if i < n:
            tail = 0
            for j in range(n - i):
                tail |= (<uint64_t>p[i + j]) << (8 * j)
            acc ^= tail
    return acc

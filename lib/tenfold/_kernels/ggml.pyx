# cython: language_level=3
"""GGML block dequantisation kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) to float32.

The layouts and the arithmetic are those of the reference twin (``_ref_ggml.py``): every block
holds 32 elements and starts with ``d``, an IEEE half (and ``m``, a second half, for the types
with a minimum); a value is ``q * d`` (``q * d + m``) computed in float32. The kernels know no
file format: the caller passes whole blocks and a float32 output of 32 elements per block.
"""

from libc.stdint cimport int8_t, uint8_t, uint16_t, uint32_t
from libc.string cimport memcpy
cimport cython


cdef inline float _half(const uint8_t* p) noexcept nogil:
    """An IEEE binary16 (little-endian at ``p``) as a float, exactly (subnormals, inf, NaN)."""
    cdef uint16_t h = <uint16_t>(p[0] | (p[1] << 8))
    cdef uint32_t sign = (<uint32_t>(h & 0x8000)) << 16
    cdef uint32_t exp = (h >> 10) & 0x1F
    cdef uint32_t man = h & 0x3FF
    cdef uint32_t bits
    cdef float f
    if exp == 0x1F:  # inf / NaN (payload kept)
        bits = sign | 0x7F800000 | (man << 13)
    elif exp != 0:
        bits = sign | ((exp + 112) << 23) | (man << 13)
    elif man == 0:
        bits = sign
    else:  # subnormal: normalise
        exp = 113
        while not (man & 0x400):
            man <<= 1
            exp -= 1
        bits = sign | (exp << 23) | ((man & 0x3FF) << 13)
    memcpy(&f, &bits, 4)
    return f


cdef Py_ssize_t _check(Py_ssize_t nsrc, Py_ssize_t nout, Py_ssize_t size) except -1:
    if nsrc % size:
        raise ValueError(f"src is {nsrc} bytes, not whole blocks of {size}")
    if nout != (nsrc // size) * 32:
        raise ValueError(f"out has {nout} elements, expected {(nsrc // size) * 32}")
    return nsrc // size


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


@cython.boundscheck(False)
@cython.wraparound(False)
def dequantize_q4_0(const uint8_t[::1] src, float[::1] out):
    cdef Py_ssize_t n = _check(src.shape[0], out.shape[0], 18), i, j
    cdef const uint8_t* b
    cdef float d
    with nogil:
        for i in range(n):
            b = &src[i * 18]
            d = _half(b)
            for j in range(16):
                out[i * 32 + j] = <float>((b[2 + j] & 0x0F) - 8) * d
                out[i * 32 + j + 16] = <float>((b[2 + j] >> 4) - 8) * d


@cython.boundscheck(False)
@cython.wraparound(False)
def dequantize_q4_1(const uint8_t[::1] src, float[::1] out):
    cdef Py_ssize_t n = _check(src.shape[0], out.shape[0], 20), i, j
    cdef const uint8_t* b
    cdef float d, m, v
    with nogil:
        for i in range(n):
            b = &src[i * 20]
            d = _half(b)
            m = _half(b + 2)
            for j in range(16):
                v = <float>(b[4 + j] & 0x0F) * d
                out[i * 32 + j] = v + m
                v = <float>(b[4 + j] >> 4) * d
                out[i * 32 + j + 16] = v + m


@cython.boundscheck(False)
@cython.wraparound(False)
def dequantize_q5_0(const uint8_t[::1] src, float[::1] out):
    cdef Py_ssize_t n = _check(src.shape[0], out.shape[0], 22), i, j
    cdef const uint8_t* b
    cdef float d
    cdef uint32_t qh
    cdef int lo, hi
    with nogil:
        for i in range(n):
            b = &src[i * 22]
            d = _half(b)
            qh = _u32(b + 2)
            for j in range(16):
                lo = (b[6 + j] & 0x0F) | <int>(((qh >> j) & 1) << 4)
                hi = (b[6 + j] >> 4) | <int>(((qh >> (j + 16)) & 1) << 4)
                out[i * 32 + j] = <float>(lo - 16) * d
                out[i * 32 + j + 16] = <float>(hi - 16) * d


@cython.boundscheck(False)
@cython.wraparound(False)
def dequantize_q5_1(const uint8_t[::1] src, float[::1] out):
    cdef Py_ssize_t n = _check(src.shape[0], out.shape[0], 24), i, j
    cdef const uint8_t* b
    cdef float d, m, v
    cdef uint32_t qh
    cdef int lo, hi
    with nogil:
        for i in range(n):
            b = &src[i * 24]
            d = _half(b)
            m = _half(b + 2)
            qh = _u32(b + 4)
            for j in range(16):
                lo = (b[8 + j] & 0x0F) | <int>(((qh >> j) & 1) << 4)
                hi = (b[8 + j] >> 4) | <int>(((qh >> (j + 16)) & 1) << 4)
                v = <float>lo * d
                out[i * 32 + j] = v + m
                v = <float>hi * d
                out[i * 32 + j + 16] = v + m


@cython.boundscheck(False)
@cython.wraparound(False)
def dequantize_q8_0(const uint8_t[::1] src, float[::1] out):
    cdef Py_ssize_t n = _check(src.shape[0], out.shape[0], 34), i, j
    cdef const uint8_t* b
    cdef float d
    with nogil:
        for i in range(n):
            b = &src[i * 34]
            d = _half(b)
            for j in range(32):
                out[i * 32 + j] = <float>(<int8_t>b[2 + j]) * d

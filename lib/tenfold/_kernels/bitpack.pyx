# cython: language_level=3
"""Bit-packing kernels: sub-byte integers and bitsets, LSB-first.

Element ``i`` of a stream of ``bits``-wide fields (``bits`` in 1, 2, 4) occupies bits
``[i*bits, (i+1)*bits)`` counted from the least significant bit of byte 0. The kernels know no
file format: the caller chooses the decoding (unsigned, two's complement, or the two-value
"pm1" code where bit 0 means -1 and bit 1 means +1), allocates the outputs and maps a reported
bad index to its own error.

Unpacking runs 16 source bytes at a time with SSE2 shifts, masks and byte interleaves where the
compiler targets it (``_bitpack_impl.h``; every x86-64), and through 256-entry lookup tables (one
input byte -> ``8/bits`` output bytes) for the rest and elsewhere; packing merges ``8/bits`` inputs per output byte while checking their range.
"""

from libc.stdint cimport int8_t, uint8_t, int64_t
from libc.string cimport memcpy
cimport cython

cdef extern from "_bitpack_impl.h":
    Py_ssize_t tf_unpack_sse2(const uint8_t* src, Py_ssize_t nbytes, int mode, int lb,
                              uint8_t* out) noexcept nogil

cdef enum:
    MODE_UINT = 0
    MODE_INT = 1
    MODE_PM1 = 2

# _LUT[((mode*3 + log2(bits))*256 + byte)*8 + k] = field k of that byte (8/bits fields).
cdef uint8_t _LUT[3 * 3 * 256 * 8]


cdef inline const uint8_t* _table(int mode, int lb) noexcept nogil:
    return &_LUT[(mode * 3 + lb) * 256 * 8]


cdef int _log2(int bits) except -1:
    if bits == 1:
        return 0
    if bits == 2:
        return 1
    if bits == 4:
        return 2
    raise ValueError(f"bits must be 1, 2 or 4, got {bits}")


cdef void _build_tables() noexcept:
    cdef int mode, lb, b, per, byte, k, field, mask
    for mode in range(3):
        for lb in range(3):
            b = 1 << lb
            per = 8 // b
            mask = (1 << b) - 1
            for byte in range(256):
                for k in range(8):
                    _LUT[((mode * 3 + lb) * 256 + byte) * 8 + k] = 0
                for k in range(per):
                    field = (byte >> (k * b)) & mask
                    if mode == MODE_INT and field >= (1 << (b - 1)):
                        field -= 1 << b
                    elif mode == MODE_PM1:
                        field = (field & 1) * 2 - 1
                    _LUT[((mode * 3 + lb) * 256 + byte) * 8 + k] = <uint8_t>(field & 0xFF)


_build_tables()


cdef Py_ssize_t _packed_len(Py_ssize_t count, int bits) noexcept:
    """``ceil(count * bits / 8)`` for ``count >= 0``, without a product that could wrap."""
    cdef int shift = 3 if bits == 1 else (2 if bits == 2 else 1)  # log2(8 // bits)
    return (count >> shift) + (1 if count & ((1 << shift) - 1) else 0)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _unpack(const uint8_t* src, Py_ssize_t count, int mode, int lb,
                  uint8_t* out) noexcept nogil:
    cdef int per = 8 >> lb
    cdef Py_ssize_t full = count >> (3 - lb)
    cdef Py_ssize_t i
    cdef Py_ssize_t rem = count - full * per
    cdef const uint8_t* lut = _table(mode, lb)
    cdef Py_ssize_t done = tf_unpack_sse2(src, full, mode, lb, out)
    if per == 8:
        for i in range(done, full):
            memcpy(out + 8 * i, lut + 8 * src[i], 8)
    elif per == 4:
        for i in range(done, full):
            memcpy(out + 4 * i, lut + 8 * src[i], 4)
    else:
        for i in range(done, full):
            memcpy(out + 2 * i, lut + 8 * src[i], 2)
    if rem:
        memcpy(out + full * per, lut + 8 * src[full], rem)


cdef int _check_unpack(Py_ssize_t nsrc, Py_ssize_t count, int bits) except -1:
    if nsrc < _packed_len(count, bits):
        raise ValueError(
            f"src holds {nsrc} bytes; {count} fields of {bits} bits need {_packed_len(count, bits)}")
    return 0


def unpack_uint(const uint8_t[::1] src, int bits, uint8_t[::1] out):
    """Unpack ``out.shape[0]`` unsigned ``bits``-wide fields of ``src`` into ``out``."""
    cdef int lb = _log2(bits)
    cdef Py_ssize_t n = out.shape[0]
    _check_unpack(src.shape[0], n, bits)
    if n == 0:
        return
    with nogil:
        _unpack(&src[0], n, MODE_UINT, lb, &out[0])


def unpack_int(const uint8_t[::1] src, int bits, int8_t[::1] out):
    """Unpack ``out.shape[0]`` two's-complement ``bits``-wide fields of ``src`` into ``out``."""
    cdef int lb = _log2(bits)
    cdef Py_ssize_t n = out.shape[0]
    _check_unpack(src.shape[0], n, bits)
    if n == 0:
        return
    with nogil:
        _unpack(&src[0], n, MODE_INT, lb, <uint8_t*>&out[0])


def unpack_pm1(const uint8_t[::1] src, int8_t[::1] out):
    """Unpack ``out.shape[0]`` one-bit fields of ``src``: bit 0 -> -1, bit 1 -> +1."""
    cdef Py_ssize_t n = out.shape[0]
    _check_unpack(src.shape[0], n, 1)
    if n == 0:
        return
    with nogil:
        _unpack(&src[0], n, MODE_PM1, 0, <uint8_t*>&out[0])


def unpack_bitset(const uint8_t[::1] src, uint8_t[::1] out):
    """Unpack ``out.shape[0]`` bits of ``src`` as 0/1 bytes (a bool array viewed as uint8)."""
    cdef Py_ssize_t n = out.shape[0]
    _check_unpack(src.shape[0], n, 1)
    if n == 0:
        return
    with nogil:
        _unpack(&src[0], n, MODE_UINT, 0, &out[0])


cdef int _check_pack(Py_ssize_t count, Py_ssize_t nout, int bits) except -1:
    if nout != _packed_len(count, bits):
        raise ValueError(
            f"out holds {nout} bytes; {count} fields of {bits} bits need exactly "
            f"{_packed_len(count, bits)}")
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _pack(const uint8_t* v, Py_ssize_t count, int bits, uint8_t lo_bias,
                      uint8_t span, uint8_t* out) noexcept nogil:
    # A value is in range when (uint8)(v - lo_bias) <= span; lo_bias/span encode the range.
    cdef int per = 8 // bits
    cdef uint8_t mask = <uint8_t>((1 << bits) - 1)
    cdef Py_ssize_t full = count // per
    cdef Py_ssize_t i, j
    cdef int k
    cdef uint8_t acc, bad, x
    bad = 0
    if bits == 2:
        for i in range(full):
            x = v[4 * i] ; bad |= <uint8_t>(<uint8_t>(x - lo_bias) > span) ; acc = x & 3
            x = v[4 * i + 1] ; bad |= <uint8_t>(<uint8_t>(x - lo_bias) > span) ; acc |= (x & 3) << 2
            x = v[4 * i + 2] ; bad |= <uint8_t>(<uint8_t>(x - lo_bias) > span) ; acc |= (x & 3) << 4
            x = v[4 * i + 3] ; bad |= <uint8_t>(<uint8_t>(x - lo_bias) > span) ; acc |= (x & 3) << 6
            out[i] = acc
    elif bits == 4:
        for i in range(full):
            x = v[2 * i] ; bad |= <uint8_t>(<uint8_t>(x - lo_bias) > span) ; acc = x & 15
            x = v[2 * i + 1] ; bad |= <uint8_t>(<uint8_t>(x - lo_bias) > span) ; acc |= (x & 15) << 4
            out[i] = acc
    else:
        for i in range(full):
            acc = 0
            for k in range(8):
                x = v[8 * i + k]
                bad |= <uint8_t>(<uint8_t>(x - lo_bias) > span)
                acc |= (x & 1) << k
            out[i] = acc
    if full * per < count:
        acc = 0
        k = 0
        for j in range(full * per, count):
            x = v[j]
            bad |= <uint8_t>(<uint8_t>(x - lo_bias) > span)
            acc |= (x & mask) << (k * bits)
            k += 1
        out[full] = acc
    if not bad:
        return -1
    for j in range(count):
        if <uint8_t>(v[j] - lo_bias) > span:
            return j
    return -1


def pack_uint(const uint8_t[::1] values, int bits, uint8_t[::1] out):
    """Pack unsigned ``values`` (each < 2**bits) into ``out``; unused tail bits are zero.

    Returns -1, or the index of the first value out of range (``out`` is then unspecified).
    """
    _log2(bits)
    cdef Py_ssize_t n = values.shape[0]
    _check_pack(n, out.shape[0], bits)
    cdef Py_ssize_t r
    if n == 0:
        return -1
    with nogil:
        r = _pack(&values[0], n, bits, 0, <uint8_t>((1 << bits) - 1), &out[0])
    return r


def pack_int(const int8_t[::1] values, int bits, int lo, int hi, uint8_t[::1] out):
    """Pack two's-complement ``values`` into ``bits``-wide fields of ``out``.

    Every value must lie in ``[lo, hi]`` (a sub-range of the ``bits``-wide two's complement
    range, e.g. -1..1 for a ternary code). Returns -1, or the index of the first value out of
    range (``out`` is then unspecified).
    """
    _log2(bits)
    if not (-(1 << (bits - 1)) <= lo <= hi <= (1 << (bits - 1)) - 1):
        raise ValueError(f"range [{lo}, {hi}] does not fit {bits}-bit two's complement")
    cdef Py_ssize_t n = values.shape[0]
    _check_pack(n, out.shape[0], bits)
    cdef Py_ssize_t r
    if n == 0:
        return -1
    with nogil:
        r = _pack(<const uint8_t*>&values[0], n, bits, <uint8_t>(lo & 0xFF),
                  <uint8_t>(hi - lo), &out[0])
    return r


@cython.boundscheck(False)
@cython.wraparound(False)
def pack_pm1(const int8_t[::1] values, uint8_t[::1] out):
    """Pack values in {-1, +1} as one bit each (-1 -> 0, +1 -> 1).

    Returns -1, or the index of the first value that is neither -1 nor +1.
    """
    cdef Py_ssize_t n = values.shape[0]
    _check_pack(n, out.shape[0], 1)
    cdef Py_ssize_t i, bad = -1
    cdef int8_t x
    cdef uint8_t acc = 0
    if n == 0:
        return -1
    with nogil:
        for i in range(n):
            x = values[i]
            if x != 1 and x != -1:
                bad = i
                break
            acc |= <uint8_t>((x > 0) << (i & 7))
            if (i & 7) == 7:
                out[i >> 3] = acc
                acc = 0
        if bad < 0 and (n & 7):
            out[n >> 3] = acc
    return bad


@cython.boundscheck(False)
@cython.wraparound(False)
def pack_bitset(const uint8_t[::1] values, uint8_t[::1] out):
    """Pack one bit per value (non-zero -> 1) into ``out``; unused tail bits are zero."""
    cdef Py_ssize_t n = values.shape[0]
    _check_pack(n, out.shape[0], 1)
    cdef Py_ssize_t i, full = n >> 3
    cdef int k
    cdef uint8_t acc
    with nogil:
        for i in range(full):
            acc = 0
            for k in range(8):
                acc |= <uint8_t>((values[8 * i + k] != 0) << k)
            out[i] = acc
        if n & 7:
            acc = 0
            for k in range(n & 7):
                acc |= <uint8_t>((values[8 * full + k] != 0) << k)
            out[full] = acc


@cython.boundscheck(False)
@cython.wraparound(False)
def find_code(const uint8_t[::1] src, int bits, Py_ssize_t count, int code):
    """Index of the first of ``count`` ``bits``-wide fields of ``src`` equal to ``code``, or -1."""
    cdef int lb = _log2(bits)
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if not (0 <= code < (1 << bits)):
        raise ValueError(f"code {code} does not fit {bits} bits")
    _check_unpack(src.shape[0], count, bits)
    cdef int per = 8 >> lb
    cdef Py_ssize_t i, full = count // per, found = -1
    cdef int k, limit
    cdef const uint8_t* lut = _table(MODE_UINT, lb)
    cdef uint8_t hit[256]
    cdef uint8_t c = <uint8_t>code
    for i in range(256):
        hit[i] = 0
        for k in range(per):
            if lut[8 * i + k] == c:
                hit[i] = 1
    with nogil:
        for i in range(full + (1 if full * per < count else 0)):
            if hit[src[i]]:
                limit = per if i < full else <int>(count - full * per)
                for k in range(limit):
                    if lut[8 * src[i] + k] == c:
                        found = i * per + k
                        break
                if found >= 0:
                    break
    return found

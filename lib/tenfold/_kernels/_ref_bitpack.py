"""Reference twins of ``bitpack.pyx`` (NumPy shift-and-mask; the executable specification).

Element ``i`` of a stream of ``bits``-wide fields (``bits`` in 1, 2, 4) occupies bits
``[i*bits, (i+1)*bits)`` counted from the least significant bit of byte 0 (LSB-first).
"""

from __future__ import annotations

import numpy as np

from ._cargs import cint, ssize

_BITS = (1, 2, 4)


def _check_bits(bits: int) -> None:
    if cint(bits) not in _BITS:
        raise ValueError(f"bits must be 1, 2 or 4, got {bits}")


def _packed_len(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


def _u8(buf: object) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]


def _out(buf: object, dtype: str) -> np.ndarray:
    mv = memoryview(buf)  # type: ignore[arg-type]
    if mv.readonly:
        raise ValueError("out must be writable")
    want = np.dtype(dtype)
    if mv.format != want.char or mv.ndim != 1:
        raise ValueError(f"out must be a 1-d {want} buffer, got format {mv.format!r}")
    return np.frombuffer(mv, dtype=want)


def _fields(src: np.ndarray, bits: int, count: int) -> np.ndarray:
    if src.size < _packed_len(count, bits):
        raise ValueError(
            f"src holds {src.size} bytes; {count} fields of {bits} bits need "
            f"{_packed_len(count, bits)}"
        )
    per = 8 // bits
    shifts = np.arange(per, dtype=np.uint8) * bits
    mask = np.uint8((1 << bits) - 1)
    nbytes = _packed_len(count, bits)
    f = (src[:nbytes, None] >> shifts[None, :]) & mask
    return f.reshape(-1)[:count]


def unpack_uint(src: object, bits: int, out: object) -> None:
    """Unpack ``len(out)`` unsigned ``bits``-wide fields of ``src`` into ``out`` (uint8)."""
    _check_bits(bits)
    o = _out(out, "u1")
    o[:] = _fields(_u8(src), bits, o.size)


def unpack_int(src: object, bits: int, out: object) -> None:
    """Unpack ``len(out)`` two's-complement ``bits``-wide fields of ``src`` into ``out`` (int8)."""
    _check_bits(bits)
    o = _out(out, "i1")
    f = _fields(_u8(src), bits, o.size).astype(np.int16)
    f[f >= (1 << (bits - 1))] -= 1 << bits
    o[:] = f


def unpack_pm1(src: object, out: object) -> None:
    """Unpack one-bit fields: bit 0 -> -1, bit 1 -> +1 (``out`` is int8)."""
    o = _out(out, "i1")
    o[:] = _fields(_u8(src), 1, o.size).astype(np.int8) * 2 - 1


def unpack_bitset(src: object, out: object) -> None:
    """Unpack ``len(out)`` bits of ``src`` as 0/1 bytes."""
    o = _out(out, "u1")
    o[:] = _fields(_u8(src), 1, o.size)


def _pack_fields(fields: np.ndarray, bits: int, out: np.ndarray) -> None:
    per = 8 // bits
    n = fields.size
    padded = np.zeros(_packed_len(n, bits) * per, dtype=np.uint8)
    padded[:n] = fields
    shifts = np.arange(per, dtype=np.uint8) * bits
    out[:] = np.bitwise_or.reduce(padded.reshape(-1, per) << shifts[None, :], axis=1)


def _check_pack(n: int, nout: int, bits: int) -> None:
    if nout != _packed_len(n, bits):
        raise ValueError(
            f"out holds {nout} bytes; {n} fields of {bits} bits need exactly {_packed_len(n, bits)}"
        )


def _first(mask: np.ndarray) -> int:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else -1


def pack_uint(values: object, bits: int, out: object) -> int:
    """Pack unsigned ``values`` (uint8, each < 2**bits) into ``out``; tail bits zero.

    Returns -1, or the index of the first value out of range.
    """
    _check_bits(bits)
    v = _u8(values)
    o = _out(out, "u1")
    _check_pack(v.size, o.size, bits)
    bad = _first(v >= (1 << bits))
    if bad >= 0:
        return bad
    _pack_fields(v, bits, o)
    return -1


def pack_int(values: object, bits: int, lo: int, hi: int, out: object) -> int:
    """Pack two's-complement ``values`` (int8, each in ``[lo, hi]``) into ``out``.

    Returns -1, or the index of the first value out of range.
    """
    bits, lo, hi = cint(bits), cint(lo), cint(hi)
    _check_bits(bits)
    if not (-(1 << (bits - 1)) <= lo <= hi <= (1 << (bits - 1)) - 1):
        raise ValueError(f"range [{lo}, {hi}] does not fit {bits}-bit two's complement")
    v = np.frombuffer(values, dtype=np.int8)  # type: ignore[call-overload]
    o = _out(out, "u1")
    _check_pack(v.size, o.size, bits)
    bad = _first((v < lo) | (v > hi))
    if bad >= 0:
        return bad
    _pack_fields(v.view(np.uint8) & np.uint8((1 << bits) - 1), bits, o)
    return -1


def pack_pm1(values: object, out: object) -> int:
    """Pack values in {-1, +1} as one bit each (-1 -> 0, +1 -> 1).

    Returns -1, or the index of the first value that is neither -1 nor +1.
    """
    v = np.frombuffer(values, dtype=np.int8)  # type: ignore[call-overload]
    o = _out(out, "u1")
    _check_pack(v.size, o.size, 1)
    bad = _first((v != 1) & (v != -1))
    if bad >= 0:
        return bad
    _pack_fields((v > 0).astype(np.uint8), 1, o)
    return -1


def pack_bitset(values: object, out: object) -> None:
    """Pack one bit per value (non-zero -> 1) into ``out``; tail bits zero."""
    v = _u8(values)
    o = _out(out, "u1")
    _check_pack(v.size, o.size, 1)
    _pack_fields((v != 0).astype(np.uint8), 1, o)


def find_code(src: object, bits: int, count: int, code: int) -> int:
    """Index of the first of ``count`` ``bits``-wide fields of ``src`` equal to ``code``, or -1."""
    bits, count, code = cint(bits), ssize(count), cint(code)
    _check_bits(bits)
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if not 0 <= code < (1 << bits):
        raise ValueError(f"code {code} does not fit {bits} bits")
    return _first(_fields(_u8(src), bits, count) == code)

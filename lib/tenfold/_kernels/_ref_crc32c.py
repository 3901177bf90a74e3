"""Reference twin of ``crc32c.pyx``: CRC-32C and CRC-32 one byte at a time from a 256-entry
table.

The executable specification and the test oracle, in plain Python (about 10 MB/s): the library
never checks large payloads with it (``tenfold.core.checksums`` uses the ``crc32c`` package
when the compiled kernel is not in use).
"""

from __future__ import annotations

from ._cargs import u32, u64

__all__ = [
    "crc32c",
    "copy_crc32c",
    "crc32c_combine",
    "implementation",
    "crc32",
    "crc32_combine",
    "crc32_implementation",
    "NOGIL_BYTES",
]

#: Same name as the compiled kernel's (there is no GIL to release here).
NOGIL_BYTES = 1 << 15

_POLY = 0x82F63B78  # the Castagnoli polynomial, reflected
_POLY32 = 0xEDB88320  # CRC-32's (IEEE 802.3, zip, zlib), reflected


def _table(poly: int) -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (poly if c & 1 else 0)
        out.append(c)
    return out


_TABLE = _table(_POLY)
_TABLE32 = _table(_POLY32)


def _bytes(data: object, what: str, writable: bool = False) -> memoryview:
    mv = memoryview(data)  # type: ignore[arg-type]
    if mv.ndim != 1 or mv.format != "B" or not mv.c_contiguous:
        raise ValueError(f"{what}: expected a contiguous 1-d buffer of bytes")
    if writable and mv.readonly:
        raise BufferError(f"{what}: object is not writable")  # as Cython's memoryview says
    return mv.cast("B")


def _u32(value: object, what: str) -> int:
    return u32(value)


def implementation() -> str:
    """``"python"``: this table, one byte at a time."""
    return "python"


def _crc(t: list[int], data: object, value: int) -> int:
    c = _u32(value, "value") ^ 0xFFFFFFFF
    for b in _bytes(data, "data").tobytes():
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def crc32c(data: object, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (the CRC of the bytes before it)."""
    return _crc(_TABLE, data, value)


def crc32(data: object, value: int = 0) -> int:
    """CRC-32 (``zlib.crc32``) of ``data``, continuing from ``value``."""
    return _crc(_TABLE32, data, value)


def crc32_implementation() -> str:
    """``"python"``: the CRC-32 table, one byte at a time."""
    return "python"


def copy_crc32c(src: object, dst: object, value: int = 0, stream: bool = False) -> int:
    """Copy ``src`` into ``dst`` (the same length, not overlapping) and return their CRC-32C,
    continuing from ``value`` (``stream`` is a store hint with no effect here)."""
    s = _bytes(src, "src")
    d = _bytes(dst, "dst", writable=True)
    if len(d) != len(s):
        raise ValueError(f"copy_crc32c: dst of {len(d)} bytes; expected {len(s)} (as src)")
    value = _u32(value, "value")
    if not len(s):
        return value
    import numpy as np

    a = np.frombuffer(s, np.uint8)
    b = np.frombuffer(d, np.uint8)
    if np.shares_memory(a, b):
        raise ValueError("copy_crc32c: src and dst overlap")
    d[:] = s
    return crc32c(s, value)


def _mulmod(a: int, b: int, poly: int = _POLY) -> int:
    """``a * b`` modulo ``poly`` (reflected: bit 31 is the coefficient of x^0)."""
    p = 0
    for _ in range(32):
        if a & 0x80000000:
            p ^= b
        a = (a << 1) & 0xFFFFFFFF
        b = (b >> 1) ^ (poly if b & 1 else 0)
    return p


def _combine(poly: int, crc1: int, crc2: int, len2: int) -> int:
    crc1, crc2 = _u32(crc1, "crc1"), _u32(crc2, "crc2")
    n = u64(len2)
    p = 0x80000000  # x^0
    sq = 0x40000000  # x^1, squared up to x^(2^k)
    n *= 8
    while n:
        if n & 1:
            p = _mulmod(sq, p, poly)
        sq = _mulmod(sq, sq, poly)
        n >>= 1
    return _mulmod(p, crc1, poly) ^ crc2


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32C of ``A + B`` from ``crc1`` of ``A``, ``crc2`` of ``B`` and ``len(B)``."""
    return _combine(_POLY, crc1, crc2, len2)


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``A + B`` from ``crc1`` of ``A``, ``crc2`` of ``B`` and ``len(B)``."""
    return _combine(_POLY32, crc1, crc2, len2)

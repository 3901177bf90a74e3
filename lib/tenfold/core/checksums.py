"""CRC-32C, SHA-256 and xxh64 over any buffer, without copying it.

CRC-32C comes from the ``crc32c`` package (SSE4.2 / ARMv8 instructions where present), SHA-256
from :mod:`hashlib`, xxh64 from ``xxhash``. Large buffers are fed in slices so no call copies a
payload.
"""

from __future__ import annotations

import xxhash

from .buffers import byte_view as _bytes_view

__all__ = ["crc32c", "sha256", "sha256_hex", "xxh64", "xxh64_hex", "CRC32C_CHECK"]

#: CRC-32C of ``b"123456789"`` (the catalogue check value).
CRC32C_CHECK = 0xE3069283

_SLICE = 64 << 20


def crc32c(data: object, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value``.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    import crc32c as _crc32c  # here: importing the package costs ~20 ms (importlib.metadata)

    mv = _bytes_view(data)
    for i in range(0, len(mv), _SLICE):
        value = _crc32c.crc32c(mv[i : i + _SLICE], value)
    return value


def sha256(data: object) -> bytes:
    """SHA-256 digest of ``data`` (32 raw bytes)."""
    import hashlib

    h = hashlib.sha256()
    h.update(_bytes_view(data))
    return h.digest()


def sha256_hex(data: object) -> str:
    """SHA-256 of ``data`` as 64 lowercase hex digits.

    >>> sha256_hex(b"")[:16]
    'e3b0c44298fc1c14'
    """
    import hashlib

    h = hashlib.sha256()
    h.update(_bytes_view(data))
    return h.hexdigest()


def xxh64(data: object, seed: int = 0) -> int:
    """xxHash64 of ``data``.

    >>> hex(xxh64(b""))
    '0xef46db3751d8e999'
    """
    return xxhash.xxh64_intdigest(_bytes_view(data), seed)


def xxh64_hex(data: object, seed: int = 0) -> str:
    """xxHash64 of ``data`` as 16 lowercase hex digits."""
    return f"{xxh64(data, seed):016x}"

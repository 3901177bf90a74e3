"""CRC-32C, SHA-256 and xxh64 over any buffer, without copying it.

CRC-32C comes from tenfold's own ``crc32c`` kernel (carry-less-multiply folding, about as fast
as xxh3; the GIL is released) when the compiled kernels are in use, and from the ``crc32c``
package (SSE4.2 / ARMv8 instructions) when they are not: under ``TENFOLD_PUREPYTHON=1``, or
when the build is missing (reported with a :class:`RuntimeWarning`). The kernel's pure-Python
twin is its test oracle, never used on payloads. SHA-256 comes from :mod:`hashlib`, xxh64 from
``xxhash``. Large buffers are fed to the package in slices so no call copies a payload.
"""

from __future__ import annotations

from collections.abc import Callable

import xxhash

from .buffers import byte_view as _bytes_view

__all__ = [
    "crc32c",
    "crc32c_implementation",
    "sha256",
    "sha256_hex",
    "xxh64",
    "xxh64_hex",
    "CRC32C_CHECK",
]

#: CRC-32C of ``b"123456789"`` (the catalogue check value).
CRC32C_CHECK = 0xE3069283

_SLICE = 64 << 20


_CRC: dict[bool, tuple[Callable[[memoryview, int], int], str]] = {}


def _crc_backend() -> tuple[Callable[[memoryview, int], int], str]:
    """The CRC-32C function and its name, chosen once per ``TENFOLD_PUREPYTHON`` setting."""
    from .._kernels import load, pure_python

    pure = pure_python()
    got = _CRC.get(pure)
    if got is None:
        mod = None if pure else load("crc32c")  # a missing build warns there
        if mod is not None and mod.implementation() != "python":
            got = (mod.crc32c, f"tenfold kernel ({mod.implementation()})")
        else:
            import crc32c as pkg  # here: importing the package costs ~20 ms (importlib.metadata)

            def sliced(mv: memoryview, value: int) -> int:
                for i in range(0, len(mv), _SLICE):
                    value = pkg.crc32c(mv[i : i + _SLICE], value)
                return value

            got = (sliced, "crc32c package")
        _CRC[pure] = got
    return got


def crc32c(data: object, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value``.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    return _crc_backend()[0](_bytes_view(data), value)


def crc32c_implementation() -> str:
    """What :func:`crc32c` runs: ``"tenfold kernel (<level>)"`` or ``"crc32c package"``.

    >>> crc32c_implementation().startswith(("tenfold kernel", "crc32c package"))
    True
    """
    return _crc_backend()[1]


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

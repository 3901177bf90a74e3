"""CRC-32C, CRC-32, XXH3-64, SHA-256 and xxh64 over any buffer, without copying it.

CRC-32C comes from tenfold's own ``crc32c`` kernel (carry-less-multiply folding, about as fast
as xxh3; the GIL is released) when the compiled kernels are in use, and from the ``crc32c``
package (SSE4.2 / ARMv8 instructions) when they are not: under ``TENFOLD_PUREPYTHON=1``, or
when the build is missing (reported with a :class:`RuntimeWarning`). The kernel's pure-Python
twin is its test oracle, never used on payloads. CRC-32 (zip's, ``zlib.crc32``'s) comes from
the same kernel (the same folding loops with CRC-32's constants) where the CPU can fold
(carry-less multiply), else from :mod:`zlib` (faster than the kernel's tables). XXH3-64
likewise comes from tenfold's own ``xxh3`` kernel (GIL released, a streaming state, a copy
that hashes) when the compiled kernels are in use, else from the ``xxhash`` package. SHA-256
comes from :mod:`hashlib`, xxh64 from ``xxhash``. Large buffers are fed to the package in
slices so no call copies a payload.

A buffer of at least :data:`PARALLEL_BYTES` is checked in blocks on several threads (as many
as :func:`tenfold.core.parallel.threads` allows: the CPUs this process may use, capped by
``TENFOLD_THREADS``), their CRCs joined with :func:`crc32c_combine` (:func:`crc32_combine`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import xxhash

from .buffers import byte_view as _bytes_view

__all__ = [
    "crc32c",
    "crc32c_combine",
    "copy_crc32c",
    "crc32c_implementation",
    "crc32",
    "crc32_combine",
    "crc32_implementation",
    "sha256",
    "sha256_hex",
    "xxh3_64",
    "xxh3_hex",
    "xxh3_hasher",
    "copy_xxh3",
    "xxh3_implementation",
    "xxh64",
    "xxh64_hex",
    "CRC32C_CHECK",
    "CRC32_CHECK",
]

#: CRC-32C of ``b"123456789"`` (the catalogue check value).
CRC32C_CHECK = 0xE3069283
#: CRC-32 of ``b"123456789"``.
CRC32_CHECK = 0xCBF43926

_SLICE = 64 << 20

#: :func:`crc32c` of at least this many bytes runs on several threads.
PARALLEL_BYTES = 32 << 20
#: ... each given at least this many bytes.
_PART_MIN = 8 << 20


_CRC: dict[bool, tuple[Callable[[memoryview, int], int], str]] = {}


def _crc_backend() -> tuple[Callable[[memoryview, int], int], str]:
    """The CRC-32C function and its name, chosen once per ``TENFOLD_PUREPYTHON`` setting."""
    from .._kernels import pure_python

    pure = pure_python()
    got = _CRC.get(pure)
    if got is None:
        mod = crc_kernel()  # a missing build warns there
        if mod is not None:
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


def crc32c(data: object, value: int = 0, *, threads: int | None = None) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value``.

    ``threads`` caps the threads a large buffer is checked on (default
    :func:`tenfold.core.parallel.threads`; ``1`` from code that is already parallel).

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    return _in_parts(_crc_backend()[0], crc32c_combine, data, value, threads)


def _in_parts(
    fn: Callable[[memoryview, int], int],
    combine: Callable[[int, int, int], int],
    data: object,
    value: int,
    threads: int | None,
) -> int:
    """``fn(data, value)``, on several threads when ``data`` is large: the parts' CRCs joined
    with ``combine``."""
    mv = _bytes_view(data)
    n = len(mv)
    if n < PARALLEL_BYTES or threads == 1:
        return fn(mv, value)
    from . import parallel

    parts = min(parallel.threads() if threads is None else max(1, threads), n // _PART_MIN)
    if parts < 2:
        return fn(mv, value)
    cuts = [n * i // parts for i in range(parts + 1)]
    spans = list(zip(cuts[:-1], cuts[1:], strict=True))
    crcs = parallel.each(lambda ab: fn(mv[ab[0] : ab[1]], 0), spans, parts)
    for crc, (a, b) in zip(crcs, spans, strict=True):
        value = combine(value, crc, b - a)
    return value


def copy_crc32c(src: np.ndarray, dst: np.ndarray, value: int = 0) -> int:
    """Copy the ``uint8`` array ``src`` into ``dst`` (same size) and return the CRC-32C of
    the bytes, continuing from ``value``: one pass with the GIL released (the compiled
    kernel), or a copy then :func:`crc32c` of it. One thread (callers split large inputs).
    """
    mod = crc_kernel()
    if mod is not None:
        return int(mod.copy_crc32c(src, dst, value))
    np.copyto(dst, src)
    return crc32c(dst, value, threads=1)


def crc_kernel() -> Any:
    """The compiled ``crc32c`` kernel module, or None where the kernels are not in use
    (``TENFOLD_PUREPYTHON``, or a missing build: reported by :func:`tenfold._kernels.load`);
    its pure-Python twin is never used on payloads."""
    from .._kernels import load, pure_python

    if pure_python():
        return None
    mod = load("crc32c")
    return mod if mod.implementation() != "python" else None


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32C of ``A + B`` from ``crc1`` of ``A``, ``crc2`` of ``B`` and ``len(B)``
    (the compiled kernel's when the kernels are in use, else in Python).

    >>> crc32c_combine(crc32c(b"12345"), crc32c(b"6789"), 4) == crc32c(b"123456789")
    True
    """
    return int(_combiner().crc32c_combine(crc1, crc2, len2))


def _combiner() -> Any:
    """The module whose ``crc32c_combine`` / ``crc32_combine`` to use: the compiled kernel, or
    its twin (O(log len2) whatever the payload: fast enough)."""
    from .._kernels import load

    mod = crc_kernel()
    return mod if mod is not None else load("crc32c", "reference")


def crc32c_implementation() -> str:
    """What :func:`crc32c` runs: ``"tenfold kernel (<level>)"`` or ``"crc32c package"``.

    >>> crc32c_implementation().startswith(("tenfold kernel", "crc32c package"))
    True
    """
    return _crc_backend()[1]


_CRC32: dict[bool, tuple[Callable[[memoryview, int], int], str]] = {}


def _crc32_backend() -> tuple[Callable[[memoryview, int], int], str]:
    """The CRC-32 function and its name, chosen once per ``TENFOLD_PUREPYTHON`` setting."""
    from .._kernels import pure_python

    pure = pure_python()
    got = _CRC32.get(pure)
    if got is None:
        mod = crc_kernel()
        # the kernel's tables (no carry-less multiply: off x86-64) are half zlib's speed
        if mod is not None and mod.crc32_implementation() != "table":
            got = (mod.crc32, f"tenfold kernel ({mod.crc32_implementation()})")
        else:
            import zlib

            got = (zlib.crc32, "zlib")
        _CRC32[pure] = got
    return got


def crc32(data: object, value: int = 0, *, threads: int | None = None) -> int:
    """CRC-32 of ``data`` as ``zlib.crc32(data, value)`` gives it (the zip member checksum),
    continuing from ``value``; ``threads`` as for :func:`crc32c`.

    >>> hex(crc32(b"123456789"))
    '0xcbf43926'
    """
    return _in_parts(_crc32_backend()[0], crc32_combine, data, value, threads)


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``A + B`` from ``crc1`` of ``A``, ``crc2`` of ``B`` and ``len(B)``.

    >>> crc32_combine(crc32(b"12345"), crc32(b"6789"), 4) == crc32(b"123456789")
    True
    """
    return int(_combiner().crc32_combine(crc1, crc2, len2))


def crc32_implementation() -> str:
    """What :func:`crc32` runs: ``"tenfold kernel (<level>)"`` or ``"zlib"``.

    >>> crc32_implementation().startswith(("tenfold kernel", "zlib"))
    True
    """
    return _crc32_backend()[1]


_X3: dict[bool, Any] = {}
#: bytes hashed then copied at a time by :func:`copy_xxh3` without the kernel
_COPY_BLOCK = 1 << 20


def xxh3_kernel() -> Any:
    """The compiled ``xxh3`` kernel module, or None where the kernels are not in use
    (``TENFOLD_PUREPYTHON``, or a missing build: reported by :func:`tenfold._kernels.load`);
    its pure-Python twin is never used on payloads: the ``xxhash`` package is."""
    from .._kernels import load, pure_python

    pure = pure_python()
    if pure not in _X3:
        mod = None if pure else load("xxh3")  # a missing build warns there
        _X3[pure] = mod if mod is not None and mod.implementation() != "python" else None
    return _X3[pure]


def xxh3_64(data: object, seed: int = 0) -> int:
    """XXH3-64 of ``data`` (any buffer, read as its bytes), as ``xxhash.xxh3_64_intdigest``.

    >>> hex(xxh3_64(b""))
    '0x2d06800538d394c2'
    """
    mod = xxh3_kernel()
    if mod is not None:
        return int(mod.xxh3_64(_bytes_view(data), seed))
    return xxhash.xxh3_64_intdigest(_bytes_view(data), seed)


def xxh3_hex(data: object, seed: int = 0) -> str:
    """:func:`xxh3_64` as 16 lowercase hex digits."""
    return f"{xxh3_64(data, seed):016x}"


def xxh3_hasher(seed: int = 0) -> Any:
    """A running XXH3-64 (``update``, ``intdigest``, ``hexdigest``, ``digest``, ``copy``,
    ``reset``): the kernel's ``Xxh3State`` (``update`` releases the GIL) or an
    ``xxhash.xxh3_64``. Give it C-contiguous buffers.

    >>> h = xxh3_hasher(); h.update(b"ab"); h.update(b"c"); h.intdigest() == xxh3_64(b"abc")
    True
    """
    mod = xxh3_kernel()
    if mod is not None:
        return mod.Xxh3State(seed)
    return xxhash.xxh3_64(seed=seed)


def copy_xxh3(src: np.ndarray, dst: np.ndarray, hasher: Any) -> None:
    """Copy the ``uint8`` array ``src`` into ``dst`` (same size) and add the bytes to
    ``hasher`` (from :func:`xxh3_hasher`): one pass with the GIL released (the compiled
    kernel), or block by block, each hashed then copied while it is in the cache."""
    mod = xxh3_kernel()
    if mod is not None and isinstance(hasher, mod.Xxh3State):
        mod.copy_xxh3(src, dst, hasher)
        return
    if src.shape != dst.shape:
        raise ValueError(f"copy_xxh3: dst of shape {dst.shape}; expected {src.shape} (as src)")
    for start in range(0, src.size, _COPY_BLOCK):
        block = src[start : start + _COPY_BLOCK]
        hasher.update(block)
        dst[start : start + _COPY_BLOCK] = block


def xxh3_implementation() -> str:
    """What :func:`xxh3_64` runs: ``"tenfold kernel (<level>)"`` or ``"xxhash package"``.

    >>> xxh3_implementation().startswith(("tenfold kernel", "xxhash package"))
    True
    """
    mod = xxh3_kernel()
    return f"tenfold kernel ({mod.implementation()})" if mod is not None else "xxhash package"


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

"""Reference twins of ``scan.pyx``."""

from __future__ import annotations

import numpy as np

from ._cargs import u64


def first_nonzero(buf: object) -> int:
    """Index of the first non-zero byte of ``buf``, or -1 when every byte is zero."""
    a = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    nz = np.flatnonzero(a)
    return int(nz[0]) if nz.size else -1


def xor_u64_le(buf: object, acc: int = 0) -> int:
    """XOR of ``buf`` as little-endian u64 words, zero-padded to a multiple of 8 bytes."""
    acc = u64(acc)
    a = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    pad = (-a.size) % 8
    if pad:
        a = np.concatenate([a, np.zeros(pad, np.uint8)])
    words = a.view("<u8")
    return int(np.bitwise_xor.reduce(words, initial=np.uint64(acc)))

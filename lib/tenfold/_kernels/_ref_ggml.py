"""Reference twin of the ``ggml`` kernels: GGML block dequantisation in NumPy.

Each ``dequantize_<type>(src, out)`` reads whole blocks of 32 elements from ``src`` (bytes)
and writes their float32 values to ``out`` (``len(out) == 32 * blocks``); a length that is not
whole blocks, or an ``out`` of the wrong length, is a ``ValueError``. Every block starts with
``d``, an IEEE half; ``m`` (where there is one) is a second half. Values are computed in
float32 as ``q * d`` (``q * d + m`` with a minimum), element ``j`` of a block from the low
nibble of byte ``j`` and element ``j + 16`` from its high nibble:

==== ===== ===============================================================================
type bytes layout
==== ===== ===============================================================================
Q4_0 18    d, 16 bytes of nibbles; q = nibble - 8
Q4_1 20    d, m, 16 bytes of nibbles; q = nibble
Q5_0 22    d, u32 qh (bit j: the fifth bit of element j), 16 bytes of nibbles; q = v - 16
Q5_1 24    d, m, u32 qh, 16 bytes of nibbles; q = v
Q8_0 34    d, 32 signed bytes; q = byte
==== ===== ===============================================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["dequantize_q4_0", "dequantize_q4_1", "dequantize_q5_0", "dequantize_q5_1",
           "dequantize_q8_0"]  # fmt: skip

_QK = 32


def _quiet(fn: Any) -> Any:
    """Run ``fn`` without NumPy's warnings for inf * 0 and NaN: a half may be either, and the
    product is what IEEE float32 arithmetic gives, as in C."""

    def run(src: Any, out: Any) -> None:
        with np.errstate(all="ignore"):
            fn(src, out)

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def _blocks(src: Any, out: Any, size: int) -> tuple[np.ndarray, np.ndarray]:
    raw = np.frombuffer(src, np.uint8)
    dst = np.frombuffer(out, np.float32) if not isinstance(out, np.ndarray) else out
    if raw.size % size:
        raise ValueError(f"src is {raw.size} bytes, not whole blocks of {size}")
    n = raw.size // size
    if dst.size != n * _QK:
        raise ValueError(f"out has {dst.size} elements, expected {n * _QK}")
    return raw.reshape(n, size), dst.reshape(n, _QK)


def _half(b: np.ndarray, at: int) -> np.ndarray:
    return b[:, at : at + 2].copy().view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)


def _high(b: np.ndarray, at: int) -> np.ndarray:
    qh = b[:, at : at + 4].copy().view("<u4").astype(np.uint32)
    return (((qh >> np.arange(_QK, dtype=np.uint32)) & 1) << 4).astype(np.int32)


@_quiet
def dequantize_q4_0(src: Any, out: Any) -> None:
    b, y = _blocks(src, out, 18)
    y[:] = (_nibbles(b[:, 2:]) - 8).astype(np.float32) * _half(b, 0)


@_quiet
def dequantize_q4_1(src: Any, out: Any) -> None:
    b, y = _blocks(src, out, 20)
    y[:] = _nibbles(b[:, 4:]).astype(np.float32) * _half(b, 0) + _half(b, 2)


@_quiet
def dequantize_q5_0(src: Any, out: Any) -> None:
    b, y = _blocks(src, out, 22)
    q = (_nibbles(b[:, 6:]) | _high(b, 2)) - 16
    y[:] = q.astype(np.float32) * _half(b, 0)


@_quiet
def dequantize_q5_1(src: Any, out: Any) -> None:
    b, y = _blocks(src, out, 24)
    q = _nibbles(b[:, 8:]) | _high(b, 4)
    y[:] = q.astype(np.float32) * _half(b, 0) + _half(b, 2)


@_quiet
def dequantize_q8_0(src: Any, out: Any) -> None:
    b, y = _blocks(src, out, 34)
    y[:] = b[:, 2:].view(np.int8).astype(np.float32) * _half(b, 0)

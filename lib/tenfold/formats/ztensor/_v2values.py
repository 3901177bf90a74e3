"""zTensor v2 values as the writer stores them: the storage dtype and logical type of a NumPy
dtype (:func:`storage_of`), an array's little-endian C-order bytes in bounded pieces
(:func:`le_pieces`, which the 0.1.0 writer streams too), ``f4_e2m1`` codes packed two to a
byte (:func:`pack_f4`), and the 40-byte footer (:func:`footer_bytes`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import ml_dtypes
import numpy as np

from ...core.dtypes import BFLOAT16
from ...errors import EncodeError, describe
from ._v2spec import DTYPES, LOGICAL, MAGIC, VERSION

__all__ = ["storage_of", "footer_bytes", "le_pieces", "pack_f4"]

FMT = "zt"
_SLICE = 32 << 20  # bytes converted at a time for non-contiguous / big-endian input

#: NumPy dtype -> (storage dtype, logical type).
_NP_TO_V2: dict[np.dtype, tuple[str, str | None]] = {
    dt: (name, None) for name, dt in DTYPES.items()
}
_NP_TO_V2[np.dtype("?")] = ("u8", "bool")
_NP_TO_V2[BFLOAT16] = ("bf16", None)
for _lt in LOGICAL.values():
    _NP_TO_V2.setdefault(_lt.np_dtype, (_lt.dtype, _lt.name))


def storage_of(dtype: np.dtype, what: str) -> tuple[str, str | None]:
    """``(dtype, type)`` a NumPy dtype is stored as (byte order ignored)."""
    dt = np.dtype(dtype)
    if dt.itemsize > 1 and dt.byteorder == ">":
        dt = dt.newbyteorder("<")
    if dt.byteorder == "=" and dt.itemsize > 1:
        dt = dt.newbyteorder("<")
    try:
        return _NP_TO_V2[dt]
    except KeyError:
        raise EncodeError(
            describe(
                FMT, what, field="dtype", detail="cannot be stored in zTensor v2", got=str(dtype)
            )
        ) from None


def footer_bytes(moff: int, mlen: int, mhash: int) -> bytes:
    return struct.pack("<QQQII", moff, mlen, mhash, VERSION, 0) + MAGIC


def le_pieces(a: np.ndarray) -> Iterator[np.ndarray]:
    """``a``'s bytes, little-endian, C order; no copy when it already is (bounded slices
    otherwise)."""
    le = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    if a.flags.c_contiguous and a.dtype.byteorder != ">":
        if a.size:
            yield a.reshape(-1)
        return
    if a.ndim == 0:
        yield np.ascontiguousarray(a, dtype=le).reshape(-1)
        return
    if a.size == 0:
        return
    row = (a.size // a.shape[0]) * a.dtype.itemsize
    step = max(1, _SLICE // max(1, row))
    for i in range(0, a.shape[0], step):
        yield np.ascontiguousarray(a[i : i + step], dtype=le).reshape(-1)


def pack_f4(a: np.ndarray) -> np.ndarray:
    """4-bit codes (the low nibble of each uint8 of ``a``) packed two to a byte, the first in
    the low nibble, as v2's ``f4_e2m1`` storage holds them."""
    u = np.ascontiguousarray(a).reshape(-1).view(np.uint8) & 0x0F
    n = u.size
    out = np.zeros((n + 1) // 2, np.uint8)
    out[:] = u[0::2]
    out[: n // 2] |= u[1::2] << 4
    return out


_ = ml_dtypes  # ml_dtypes registers the float8/float4 NumPy types used above

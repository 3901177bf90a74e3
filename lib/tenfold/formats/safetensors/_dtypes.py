"""safetensors' element types: the dtype tags, their layout order and the packed ``F4`` type.

Shared by the parser (:mod:`._parse`) and the writer (:mod:`.writer`), which re-exports them.
"""

from __future__ import annotations

import numpy as np

from ...core.dtypes import (
    BFLOAT16,
    FLOAT4_E2M1,
    FLOAT8_E4M3FN,
    FLOAT8_E4M3FNUZ,
    FLOAT8_E5M2,
    FLOAT8_E5M2FNUZ,
    FLOAT8_E8M0,
    canonical,
)

__all__ = ["FMT", "DTYPES", "RANK", "PACKED_BITS", "TAG_OF_DTYPE", "stored_nbytes", "pack_f4",
           "unpack_f4"]  # fmt: skip

FMT = "safetensors"

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": BFLOAT16,
    "F8_E5M2": FLOAT8_E5M2, "F8_E4M3": FLOAT8_E4M3FN, "F8_E8M0": FLOAT8_E8M0,
    "F8_E4M3FNUZ": FLOAT8_E4M3FNUZ, "F8_E5M2FNUZ": FLOAT8_E5M2FNUZ, "F4": FLOAT4_E2M1,
    "C64": np.dtype("<c8"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}  # fmt: skip
#: The ``safetensors`` package lays tensors out by decreasing rank of their dtype in its Rust
#: ``Dtype`` enum, then by name (byte order); this is that enum's order (measured with
#: safetensors 0.8: ``F6_*`` sit between ``F4`` and ``U8`` and are not supported here).
RANK: dict[str, int] = {
    tag: i
    for i, tag in enumerate(
        "BOOL F4 F6_E2M3 F6_E3M2 U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 F8_E4M3FNUZ F8_E5M2FNUZ "
        "I16 U16 F16 BF16 I32 U32 F32 C64 F64 I64 U64".split()
    )
}
#: Sub-byte types: bits per element (``F4`` packs two elements per byte, element 2i in the
#: low nibble, 2i+1 in the high nibble: the layout of PyTorch's ``float4_e2m1fn_x2``).
PACKED_BITS = {"F4": 4}


def stored_nbytes(tag: str, numel: int) -> int:
    """Bytes ``numel`` elements of ``tag`` take in the file."""
    bits = PACKED_BITS.get(tag)
    return numel * DTYPES[tag].itemsize if bits is None else (numel * bits + 7) // 8


def unpack_f4(raw: np.ndarray, numel: int) -> np.ndarray:
    """Packed ``F4`` bytes -> one ``float4_e2m1fn`` element per byte (a new array)."""
    out = np.empty(raw.size * 2, np.uint8)
    out[0::2] = raw & 0x0F
    out[1::2] = raw >> 4
    return out[:numel].view(FLOAT4_E2M1)


def pack_f4(a: np.ndarray) -> np.ndarray:
    """``float4_e2m1fn`` elements -> packed ``F4`` bytes (a new array)."""
    u = np.ascontiguousarray(a).reshape(-1).view(np.uint8) & 0x0F
    if u.size % 2:
        u = np.concatenate([u, np.zeros(1, np.uint8)])
    return (u[0::2] | (u[1::2] << 4)).astype(np.uint8)


TAG_OF_DTYPE = {canonical(dt): tag for tag, dt in DTYPES.items()}

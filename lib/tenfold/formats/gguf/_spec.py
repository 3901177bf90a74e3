"""GGUF byte layout and constants (versions 2 and 3, little-endian).

Every integer is little-endian; a *string* is a u64 byte count then that many UTF-8 bytes (no
terminator)::

    offset  field
    0       magic              4s  b"GGUF"
    4       version            u4  2 or 3 (1 used u32 counts and lengths: refused)
    8       tensor_count       u8
    16      kv_count           u8
    24      kv_count key/values, each:
                key            string
                value_type     u4  VALUE_TYPES
                value          by type: a scalar; a string; an array = u4 element type,
                               u8 count, the elements (arrays may nest)
    ...     tensor_count tensor infos, each:
                name           string
                n_dims         u4
                ne             u8[n_dims]  element counts, innermost (fastest) dimension first
                type           u4  GGML_TYPES
                offset         u8  from the start of the data section; a multiple of the
                                   alignment
    ...     zero padding to a multiple of the alignment (``general.alignment``, a u32 power of
            two; 32 when absent): the data section starts there

A tensor's bytes are ``prod(ne) / block_size * type_size``; ``ne[0]`` is a multiple of its
type's block size. The NumPy shape of a tensor is ``ne`` reversed (C order: ``ne[0]`` is the
last axis), as the ``gguf`` package's reader gives its arrays.

A big-endian file (which llama.cpp's scripts can write) stores every integer big-endian, its
version too: read little-endian it has zero low 16 bits. tenfold refuses it (its block-quantised
payloads have no defined byte order to swap).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...core.dtypes import BFLOAT16
from ._format import MAGIC

__all__ = [
    "MAGIC",
    "VERSIONS",
    "DEFAULT_ALIGNMENT",
    "ALIGNMENT_KEY",
    "MAX_DEPTH",
    "VALUE_TYPES",
    "SCALARS",
    "STRING",
    "ARRAY",
    "BOOL",
    "GGMLType",
    "GGML_TYPES",
    "REMOVED_TYPES",
    "BY_NAME",
]

#: Versions read (v1's 32-bit counts are refused).
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
ALIGNMENT_KEY = "general.alignment"
#: Deepest nesting of arrays in a metadata value (array of arrays of ...).
MAX_DEPTH = 16

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL = range(8)
STRING, ARRAY, UINT64, INT64, FLOAT64 = range(8, 13)

#: Metadata value type code -> name.
VALUE_TYPES = {
    UINT8: "uint8",
    INT8: "int8",
    UINT16: "uint16",
    INT16: "int16",
    UINT32: "uint32",
    INT32: "int32",
    FLOAT32: "float32",
    BOOL: "bool",
    STRING: "string",
    ARRAY: "array",
    UINT64: "uint64",
    INT64: "int64",
    FLOAT64: "float64",
}

#: Scalar value type code -> NumPy dtype of one value (bool: one byte, 0 or 1).
SCALARS: dict[int, np.dtype] = {
    UINT8: np.dtype("u1"),
    INT8: np.dtype("i1"),
    UINT16: np.dtype("<u2"),
    INT16: np.dtype("<i2"),
    UINT32: np.dtype("<u4"),
    INT32: np.dtype("<i4"),
    FLOAT32: np.dtype("<f4"),
    BOOL: np.dtype("u1"),
    UINT64: np.dtype("<u8"),
    INT64: np.dtype("<i8"),
    FLOAT64: np.dtype("<f8"),
}


@dataclasses.dataclass(frozen=True)
class GGMLType:
    """One GGML tensor type: its code, name, elements per block and bytes per block, and the
    NumPy dtype of its elements when it is not block-quantised (``block == 1``)."""

    code: int
    name: str
    block: int
    size: int
    dtype: np.dtype | None = None

    @property
    def quantized(self) -> bool:
        return self.dtype is None

    @property
    def block_dtype(self) -> np.dtype:
        """What a read gives for one element or block: the element dtype, or for a
        block-quantised type a record of ``size`` bytes whose one field is named after the
        type (so that the array says what it holds: ``dtype([('Q4_0', 'u1', (18,))])``)."""
        if self.dtype is not None:
            return self.dtype
        return np.dtype([(self.name, "u1", (self.size,))])


def _t(code: int, name: str, block: int, size: int, dtype: object = None) -> GGMLType:
    return GGMLType(code, name, block, size, None if dtype is None else np.dtype(dtype))  # type: ignore[call-overload]


_QK = 256  # elements per K-quant (and most i-quant) super-block

#: Type code -> type. Block sizes are ggml's (``ggml-common.h``): Q8_1 is two halves and
#: 32 quants, 36 bytes (the ``gguf`` package's table still says 40, an older layout).
GGML_TYPES: dict[int, GGMLType] = {
    t.code: t
    for t in (
        _t(0, "F32", 1, 4, "<f4"),
        _t(1, "F16", 1, 2, "<f2"),
        _t(2, "Q4_0", 32, 2 + 16),
        _t(3, "Q4_1", 32, 2 + 2 + 16),
        _t(6, "Q5_0", 32, 2 + 4 + 16),
        _t(7, "Q5_1", 32, 2 + 2 + 4 + 16),
        _t(8, "Q8_0", 32, 2 + 32),
        _t(9, "Q8_1", 32, 2 + 2 + 32),
        _t(10, "Q2_K", _QK, 2 + 2 + _QK // 16 + _QK // 4),
        _t(11, "Q3_K", _QK, 2 + _QK // 4 + _QK // 8 + 12),
        _t(12, "Q4_K", _QK, 2 + 2 + 12 + _QK // 2),
        _t(13, "Q5_K", _QK, 2 + 2 + 12 + _QK // 8 + _QK // 2),
        _t(14, "Q6_K", _QK, 2 + _QK // 2 + _QK // 4 + _QK // 16),
        _t(15, "Q8_K", _QK, 4 + _QK + _QK // 8),
        _t(16, "IQ2_XXS", _QK, 2 + _QK // 4),
        _t(17, "IQ2_XS", _QK, 2 + _QK // 4 + _QK // 32),
        _t(18, "IQ3_XXS", _QK, 2 + _QK // 4 + _QK // 8),
        _t(19, "IQ1_S", _QK, 2 + _QK // 8 + _QK // 16),
        _t(20, "IQ4_NL", 32, 2 + 16),
        _t(21, "IQ3_S", _QK, 2 + _QK // 4 + _QK // 8 + _QK // 32 + 4),
        _t(22, "IQ2_S", _QK, 2 + _QK // 4 + _QK // 16),
        _t(23, "IQ4_XS", _QK, 2 + 2 + _QK // 2 + _QK // 64),
        _t(24, "I8", 1, 1, "i1"),
        _t(25, "I16", 1, 2, "<i2"),
        _t(26, "I32", 1, 4, "<i4"),
        _t(27, "I64", 1, 8, "<i8"),
        _t(28, "F64", 1, 8, "<f8"),
        _t(29, "IQ1_M", _QK, _QK // 8 + _QK // 16 + _QK // 32),
        _t(30, "BF16", 1, 2, BFLOAT16),
        _t(34, "TQ1_0", _QK, 2 + 4 * 13),
        _t(35, "TQ2_0", _QK, 2 + 64),
        _t(39, "MXFP4", 32, 1 + 16),
        _t(40, "NVFP4", 64, 4 + 32),
        _t(41, "Q1_0", 128, 2 + 16),
    )
}

#: Codes ggml once had and removed (their files no longer load in llama.cpp either).
REMOVED_TYPES = {
    4: "Q4_2",
    5: "Q4_3",
    31: "Q4_0_4_4",
    32: "Q4_0_4_8",
    33: "Q4_0_8_8",
    36: "IQ4_NL_4_4",
    37: "IQ4_NL_4_8",
    38: "IQ4_NL_8_8",
}

BY_NAME = {t.name: t for t in GGML_TYPES.values()}

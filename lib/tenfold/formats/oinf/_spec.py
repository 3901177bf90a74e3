"""OINF byte layout, constants and records.

All integers are little-endian. Every section and every payload starts at a multiple of 8 and
is followed by zero bytes up to the next multiple of 8::

    offset 0   header, 69 bytes (HEADER), then 3 zero bytes (72)
    string     u32 length (STRING_LEN), ASCII bytes matching [A-Za-z0-9._-]+, zero padding to a
               multiple of 8 counted from the string's own start
    sizevar    string name, u64 value (SIZEVAR_VALUE)
    metadata   string key, then METADATA_ENTRY
    tensor     string name, then TENSOR_ENTRY, u64 dims[ndim], then TENSOR_DATA (v2:
               TENSOR_DATA_V2). Tensor entries are NOT padded: each takes 8*ceil((4+len)/8) + 12
               + 8*ndim + 16 (v2: + 32) bytes, so fields can sit at 4 mod 8.
    data       all metadata payloads then all tensor payloads, in table order, 8-aligned.

Header (69 bytes, HEADER)::

    0   magic            5s  b"OINF\\0"
    5   version          u4  1 (openinfer-oinf 0.1.1) or 2 (quantization)
    9   flags            u4  0
    13  n_sizevars       u4  entries of the sizevar table
    17  n_metadata       u4  entries of the metadata table
    21  n_tensors        u4  entries of the tensor table
    25  reserved         u4  0
    29  offset_sizevars  u8  72
    37  offset_metadata  u8  ascending, 8-aligned
    45  offset_tensors   u8  ascending, 8-aligned
    53  offset_data      u8  ascending, 8-aligned
    61  file_size        u8  the file's length

String length (4 bytes, STRING_LEN)::

    0   length  u4  bytes of the name that follow

Sizevar value after the name (8 bytes, SIZEVAR_VALUE)::

    0   value  u8  the size variable's value

Metadata entry after the key (24 bytes, METADATA_ENTRY)::

    0   value_type    u4  a ValueType tag
    4   value_flags   u4  0
    8   value_nbytes  u8  payload size
    16  value_offset  u8  payload offset

Tensor entry after the name (12 bytes, TENSOR_ENTRY)::

    0   dtype  u4  a ValueType tag
    4   ndim   u4  number of u64 dims that follow
    8   flags  u4  bit 0 HAS_DATA; v2 bit 1 HAS_QUANT

Tensor entry after the dims, version 1 (16 bytes, TENSOR_DATA)::

    0   data_nbytes   u8  payload size
    8   data_offset   u8  payload offset

Tensor entry after the dims, version 2 (32 bytes, TENSOR_DATA_V2)::

    0   data_nbytes   u8  payload size
    8   data_offset   u8  payload offset
    16  quant_nbytes  u8  v2: quantization block size (padded)
    24  quant_offset  u8  v2: quantization block offset

Metadata payloads: scalars are their raw little-endian bytes (``value_nbytes`` exact: 1, 2, 4
or 8; packed scalar types take 1 byte); STRING is a string as above (``value_nbytes`` = padded
length); BITSET is BITSET_HEAD (``u32 bit_count, u32 byte_count``) + bytes (LSB-first),
padded; NDARRAY is NDARRAY_HEAD (``u32 element_type, u32 ndim``), ``u64 dims[ndim]`` + data
encoded as tensor data, padded.

Tensor payloads: row-major; byte-aligned types as little-endian elements (BOOL one byte 0/1,
BF16 the upper half of a float32, F8 = float8 E5M2); packed types (I4 I2 I1 U4 U2 U1 T2 T1)
LSB-first, element i at bit i*bits, ``data_nbytes = ceil(numel*bits/8)``, unused tail bits 0.
T2 is two's complement in 2 bits (0b10 invalid); T1 stores -1 as 0 and +1 as 1.
HAS_DATA=0: ``data_nbytes = data_offset = 0``.

BITSET payload head (8 bytes, BITSET_HEAD)::

    0   bit_count   u4  number of bits
    4   byte_count  u4  bytes of bits that follow

NDARRAY payload head (8 bytes, NDARRAY_HEAD)::

    0   element_type  u4  a tensor ValueType tag
    4   ndim          u4  number of u64 dims that follow

Version 2 quantization payload (HAS_QUANT): QUANT, then scale_count f32 scales and zp_count
i32 zero points, padded to 8 (``quant_nbytes`` is the padded size).

Quantization header (48 bytes, QUANT)::

    0   scheme       u4  1 symmetric, 2 asymmetric
    4   scale_mode   u4  1 per-tensor, 2 per-channel
    8   zp_mode      u4  0 none, 1 per-tensor, 2 per-channel
    12  reserved     u4  0
    16  scale_axis   u8  axis of per-channel scales
    24  scale_count  u8  number of f32 scales
    32  zp_axis      u8  axis of per-channel zero points
    40  zp_count     u8  number of i32 zero points
"""

from __future__ import annotations

import re

import numpy as np

from ...core.dtypes import BFLOAT16, FLOAT8_E5M2
from ...core.records import Record
from ...errors import factory
from ._format import MAGIC as MAGIC  # the one definition, beside the descriptor

FMT = "oinf"
#: This format's errors: ``raise E.format(obj, field=..., ...)`` (:func:`~tenfold.errors.factory`)
E = factory(FMT)
VERSIONS = (1, 2)
WRITE_VERSION = 1
HEADER_SIZE = 69
HEADER_PADDED = 72
ALIGN = 8

HEADER = Record(
    "oinf header",
    [
        ("magic", "S5"),
        ("version", "<u4"),
        ("flags", "<u4"),
        ("n_sizevars", "<u4"),
        ("n_metadata", "<u4"),
        ("n_tensors", "<u4"),
        ("reserved", "<u4"),
        ("offset_sizevars", "<u8"),
        ("offset_metadata", "<u8"),
        ("offset_tensors", "<u8"),
        ("offset_data", "<u8"),
        ("file_size", "<u8"),
    ],
    HEADER_SIZE,
)

QUANT = Record(
    "oinf quant header",
    [
        ("scheme", "<u4"),
        ("scale_mode", "<u4"),
        ("zp_mode", "<u4"),
        ("reserved", "<u4"),
        ("scale_axis", "<u8"),
        ("scale_count", "<u8"),
        ("zp_axis", "<u8"),
        ("zp_count", "<u8"),
    ],
    48,
)
QUANT_HEADER_SIZE = 48

STRING_LEN = Record("oinf string length", [("length", "<u4")], 4)
SIZEVAR_VALUE = Record("oinf sizevar value", [("value", "<u8")], 8)
METADATA_ENTRY = Record(
    "oinf metadata entry",
    [
        ("value_type", "<u4"),
        ("value_flags", "<u4"),
        ("value_nbytes", "<u8"),
        ("value_offset", "<u8"),
    ],
    24,
)
TENSOR_ENTRY = Record(
    "oinf tensor entry", [("dtype", "<u4"), ("ndim", "<u4"), ("flags", "<u4")], 12
)
TENSOR_DATA = Record("oinf tensor data", [("data_nbytes", "<u8"), ("data_offset", "<u8")], 16)
TENSOR_DATA_V2 = Record(
    "oinf tensor data v2",
    [
        ("data_nbytes", "<u8"),
        ("data_offset", "<u8"),
        ("quant_nbytes", "<u8"),
        ("quant_offset", "<u8"),
    ],
    32,
)
BITSET_HEAD = Record("oinf bitset head", [("bit_count", "<u4"), ("byte_count", "<u4")], 8)
NDARRAY_HEAD = Record("oinf ndarray head", [("element_type", "<u4"), ("ndim", "<u4")], 8)

HAS_DATA = 1
HAS_QUANT = 2

# ValueType tags.
I8, I16, I32, I64, U8, U16, U32, U64 = 1, 2, 3, 4, 5, 6, 7, 8
F16, F32, F64, BOOL, BITSET, STRING, NDARRAY = 9, 10, 11, 12, 13, 14, 15
BF16, F8, I4, I2, I1, U4, U2, U1, T2, T1 = 16, 17, 18, 19, 20, 21, 22, 23, 24, 25

TAG_NAME: dict[int, str] = {
    I8: "i8",
    I16: "i16",
    I32: "i32",
    I64: "i64",
    U8: "u8",
    U16: "u16",
    U32: "u32",
    U64: "u64",
    F16: "f16",
    F32: "f32",
    F64: "f64",
    BOOL: "bool",
    BITSET: "bitset",
    STRING: "str",
    NDARRAY: "ndarray",
    BF16: "bf16",
    F8: "f8",
    I4: "i4",
    I2: "i2",
    I1: "i1",
    U4: "u4",
    U2: "u2",
    U1: "u1",
    T2: "t2",
    T1: "t1",
}
NAME_TAG: dict[str, int] = {v: k for k, v in TAG_NAME.items()}
NAME_TAG.update(
    {
        "string": STRING,
        "f8e5m2": F8,
        "float8e5m2": F8,
        "float8_e5m2": F8,
        "bfloat16": BF16,
        "float16": F16,
        "float32": F32,
        "float64": F64,
        "int8": I8,
        "int16": I16,
        "int32": I32,
        "int64": I64,
        "uint8": U8,
        "uint16": U16,
        "uint32": U32,
        "uint64": U64,
    }
)

#: Byte-aligned element types and their NumPy dtypes (payload = raw little-endian elements).
NUMPY_DTYPE: dict[int, np.dtype] = {
    I8: np.dtype("i1"),
    I16: np.dtype("<i2"),
    I32: np.dtype("<i4"),
    I64: np.dtype("<i8"),
    U8: np.dtype("u1"),
    U16: np.dtype("<u2"),
    U32: np.dtype("<u4"),
    U64: np.dtype("<u8"),
    F16: np.dtype("<f2"),
    F32: np.dtype("<f4"),
    F64: np.dtype("<f8"),
    BOOL: np.dtype("?"),
    BF16: BFLOAT16,
    F8: FLOAT8_E5M2,
}

#: Packed types: bits per element.
PACKED_BITS: dict[int, int] = {I4: 4, I2: 2, I1: 1, U4: 4, U2: 2, U1: 1, T2: 2, T1: 1}
#: Value range of each packed type (T1 allows only the two ends).
PACKED_RANGE: dict[int, tuple[int, int]] = {
    I4: (-8, 7),
    I2: (-2, 1),
    I1: (-1, 0),
    U4: (0, 15),
    U2: (0, 3),
    U1: (0, 1),
    T2: (-1, 1),
    T1: (-1, 1),
}
PACKED_SIGNED = frozenset({I4, I2, I1, T2, T1})
#: NumPy dtype a packed type is unpacked to.
UNPACKED_DTYPE: dict[int, np.dtype] = {
    t: np.dtype("i1") if t in PACKED_SIGNED else np.dtype("u1") for t in PACKED_BITS
}

#: Element types of tensors (BITSET is read as one byte per element, never written).
TENSOR_TAGS = frozenset(set(NUMPY_DTYPE) | set(PACKED_BITS) | {BITSET})
WRITABLE_TENSOR_TAGS = frozenset(set(NUMPY_DTYPE) | set(PACKED_BITS))
#: Element types of NDARRAY metadata.
NDARRAY_ELEMENT_TAGS = WRITABLE_TENSOR_TAGS
#: Scalar metadata types and their exact payload size.
SCALAR_NBYTES: dict[int, int] = {t: NUMPY_DTYPE[t].itemsize for t in NUMPY_DTYPE}
SCALAR_NBYTES.update({t: 1 for t in PACKED_BITS})
METADATA_TAGS = frozenset(set(SCALAR_NBYTES) | {BITSET, STRING, NDARRAY})

NAME_RE = re.compile(rb"[A-Za-z0-9._-]+")
NAME_RE_STR = re.compile(r"[A-Za-z0-9._-]+")

#: Smallest encoded sizes, used to bound entry counts by table sizes before parsing.
MIN_SIZEVAR_ENTRY = 8 + SIZEVAR_VALUE.size
MIN_METADATA_ENTRY = 8 + METADATA_ENTRY.size
MIN_TENSOR_ENTRY = 8 + TENSOR_ENTRY.size + TENSOR_DATA.size


def align8(n: int) -> int:
    """Round ``n`` up to a multiple of 8."""
    return (n + 7) & ~7


def element_nbytes(tag: int, numel: int) -> int:
    """Payload size of ``numel`` elements of ``tag`` (packed types rounded up to bytes)."""
    bits = PACKED_BITS.get(tag)
    if bits is not None:
        return (numel * bits + 7) // 8
    if tag == BITSET:
        return numel
    return numel * NUMPY_DTYPE[tag].itemsize


def tag_of(dtype: object) -> int | None:
    """The tag named by ``dtype`` (a tag int, a name such as ``"i4"``, or a NumPy dtype)."""
    if isinstance(dtype, bool):
        return None
    if isinstance(dtype, int):
        return dtype if dtype in TAG_NAME else None
    if isinstance(dtype, str):
        key = dtype.strip().lower()
        if key in NAME_TAG:
            return NAME_TAG[key]
    try:
        dt = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        return None
    if dt == BFLOAT16:
        return BF16
    if dt == FLOAT8_E5M2:
        return F8
    if dt.kind == "b":
        return BOOL
    if dt.kind in "iuf":
        le = dt.newbyteorder("<") if dt.itemsize > 1 else dt
        for tag, ref in NUMPY_DTYPE.items():
            if tag not in (BF16, F8, BOOL) and ref == le:
                return tag
    return None

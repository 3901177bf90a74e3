"""ONNX's layout, as far as tenfold reads it: the messages and fields of ``onnx.proto``
(``onnx/onnx.proto`` of the ONNX project, IR version 3 to 11) that lead to the weights, and
the element types.

An ``.onnx`` file is one serialized ``ModelProto`` (protobuf, no magic, no framing)::

    ModelProto          1 ir_version (int64)      2 producer_name      3 producer_version
                        4 domain                  5 model_version      6 doc_string
                        7 graph (GraphProto)      8 opset_import (OperatorSetIdProto: 1 domain,
                                                    2 version)         14 metadata_props
    GraphProto          2 name   5 initializer (TensorProto)   15 sparse_initializer
                        (SparseTensorProto)       1 node, 11 input, 12 output ... (skipped)
    TensorProto         1 dims (int64)   2 data_type   8 name   9 raw_data
                        4 float_data   5 int32_data   6 string_data   7 int64_data
                        10 double_data   11 uint64_data   13 external_data (key/value)
                        14 data_location (0 DEFAULT, 1 EXTERNAL)   3 segment (refused)
    SparseTensorProto   1 values (TensorProto)   2 indices (TensorProto)   3 dims
    StringStringEntryProto  1 key   2 value

Where an element lives (one of, per the comments of ``onnx.proto``):

* ``raw_data``: fixed width, little-endian; ``BOOL`` one byte per element; the 4-bit types
  two per byte (first element in the low nibble), the 2-bit types four per byte (from the
  least significant bits), the 6-bit floats four per three bytes (an LSB-first bit stream);
* ``float_data``: FLOAT, COMPLEX64 (real, imaginary pairs); ``double_data``: DOUBLE,
  COMPLEX128; ``int64_data``: INT64; ``uint64_data``: UINT32, UINT64;
* ``int32_data``: INT32, INT16, INT8, UINT16, UINT8, BOOL, one element each; FLOAT16,
  BFLOAT16 and the 8-bit floats as their bit patterns, one each; the 4-bit types two per
  entry and the 2-bit types four per entry, packed as in ``raw_data`` (one byte per entry);
  the 6-bit floats one per entry (bits 0-5);
* external data (``data_location = EXTERNAL``): the ``raw_data`` bytes in another file
  (``location``, relative to the model's directory; ``offset``, ``length`` as decimal strings;
  ``checksum``, the SHA-1 of that file).
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

from ...core.dtypes import (
    BFLOAT16,
    FLOAT4_E2M1,
    FLOAT8_E4M3FN,
    FLOAT8_E4M3FNUZ,
    FLOAT8_E5M2,
    FLOAT8_E5M2FNUZ,
    FLOAT8_E8M0,
)

# ModelProto
M_IR_VERSION, M_PRODUCER, M_PRODUCER_VERSION, M_DOMAIN, M_MODEL_VERSION = 1, 2, 3, 4, 5
M_DOC, M_GRAPH, M_OPSET, M_PROPS = 6, 7, 8, 14
# GraphProto
G_NAME, G_INITIALIZER, G_SPARSE = 2, 5, 15
# TensorProto
T_DIMS, T_DATA_TYPE, T_SEGMENT, T_FLOAT, T_INT32, T_STRING, T_INT64 = 1, 2, 3, 4, 5, 6, 7
T_NAME, T_RAW, T_DOUBLE, T_UINT64, T_EXTERNAL, T_LOCATION = 8, 9, 10, 11, 13, 14
# SparseTensorProto
S_VALUES, S_INDICES, S_DIMS = 1, 2, 3

#: typed fields by number (what errors call them)
TYPED_NAMES = {
    T_FLOAT: "float_data",
    T_INT32: "int32_data",
    T_STRING: "string_data",
    T_INT64: "int64_data",
    T_DOUBLE: "double_data",
    T_UINT64: "uint64_data",
}

DATA_LOCATION_EXTERNAL = 1


@dataclasses.dataclass(frozen=True)
class Elem:
    """One ONNX element type: its name, the NumPy dtype of the arrays read (None: no NumPy
    type here), bits per element in ``raw_data``, and the typed field that holds it."""

    code: int
    name: str
    dtype: np.dtype | None
    bits: int
    typed: int

    @property
    def packed(self) -> bool:
        """Whether elements share bytes in ``raw_data`` (fewer than 8 bits each)."""
        return self.bits < 8

    def nbytes(self, numel: int) -> int:
        """Bytes ``numel`` elements take in ``raw_data``."""
        return (numel * self.bits + 7) // 8


def _opt(name: str) -> np.dtype | None:
    t = getattr(ml_dtypes, name, None)
    return None if t is None else np.dtype(t)


_TABLE = [
    (1, "FLOAT", np.dtype("<f4"), 32, T_FLOAT),
    (2, "UINT8", np.dtype("u1"), 8, T_INT32),
    (3, "INT8", np.dtype("i1"), 8, T_INT32),
    (4, "UINT16", np.dtype("<u2"), 16, T_INT32),
    (5, "INT16", np.dtype("<i2"), 16, T_INT32),
    (6, "INT32", np.dtype("<i4"), 32, T_INT32),
    (7, "INT64", np.dtype("<i8"), 64, T_INT64),
    (8, "STRING", None, 0, T_STRING),
    (9, "BOOL", np.dtype("?"), 8, T_INT32),
    (10, "FLOAT16", np.dtype("<f2"), 16, T_INT32),
    (11, "DOUBLE", np.dtype("<f8"), 64, T_DOUBLE),
    (12, "UINT32", np.dtype("<u4"), 32, T_UINT64),
    (13, "UINT64", np.dtype("<u8"), 64, T_UINT64),
    (14, "COMPLEX64", np.dtype("<c8"), 64, T_FLOAT),
    (15, "COMPLEX128", np.dtype("<c16"), 128, T_DOUBLE),
    (16, "BFLOAT16", BFLOAT16, 16, T_INT32),
    (17, "FLOAT8E4M3FN", FLOAT8_E4M3FN, 8, T_INT32),
    (18, "FLOAT8E4M3FNUZ", FLOAT8_E4M3FNUZ, 8, T_INT32),
    (19, "FLOAT8E5M2", FLOAT8_E5M2, 8, T_INT32),
    (20, "FLOAT8E5M2FNUZ", FLOAT8_E5M2FNUZ, 8, T_INT32),
    (21, "UINT4", _opt("uint4"), 4, T_INT32),
    (22, "INT4", _opt("int4"), 4, T_INT32),
    (23, "FLOAT4E2M1", FLOAT4_E2M1, 4, T_INT32),
    (24, "FLOAT8E8M0", FLOAT8_E8M0, 8, T_INT32),
    (25, "UINT2", _opt("uint2"), 2, T_INT32),
    (26, "INT2", _opt("int2"), 2, T_INT32),
    (27, "FLOAT6E2M3", _opt("float6_e2m3fn"), 6, T_INT32),
    (28, "FLOAT6E3M2", _opt("float6_e3m2fn"), 6, T_INT32),
]
#: every element type by its ``data_type`` code
ELEMS: dict[int, Elem] = {c: Elem(c, n, d, b, f) for c, n, d, b, f in _TABLE}
#: the element types read as arrays (a NumPy dtype here, not STRING)
READABLE = frozenset(c for c, e in ELEMS.items() if e.dtype is not None)

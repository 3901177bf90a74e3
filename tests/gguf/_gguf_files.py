"""GGUF files for the tests: written by the ``gguf`` package (the llama.cpp project's writer),
or built byte by byte here (:func:`build`, which knows where each field lies, for the
corruption tests; it follows the spec in docs/formats/gguf.md, independently of tenfold)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# value type codes (the spec's)
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
           BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}  # fmt: skip


@dataclass
class Built:
    """A file built by :func:`build`: its bytes and ``fields``: ``(label, start, end)`` of every
    header field in order (``data_start`` where the data section begins)."""

    data: bytes
    fields: list[tuple[str, int, int]] = field(default_factory=list)
    data_start: int = 0

    def at(self, label: str) -> int:
        return next(s for name, s, _ in self.fields if name == label)


class _Out:
    def __init__(self) -> None:
        self.buf = bytearray()
        self.fields: list[tuple[str, int, int]] = []

    def put(self, label: str, raw: bytes) -> None:
        self.fields.append((label, len(self.buf), len(self.buf) + len(raw)))
        self.buf += raw

    def string(self, label: str, s: str | bytes) -> None:
        raw = s.encode() if isinstance(s, str) else s
        self.put(f"{label}.len", struct.pack("<Q", len(raw)))
        self.put(label, raw)

    def value(self, label: str, vtype: int, v: Any, etype: Any = None) -> None:
        if vtype == STR:
            self.string(label, v)
        elif vtype == ARR:
            et, inner = etype if isinstance(etype, tuple) else (etype, None)
            self.put(f"{label}.etype", struct.pack("<I", et))
            self.put(f"{label}.count", struct.pack("<Q", len(v)))
            for i, x in enumerate(v):
                self.value(f"{label}[{i}]", et, x, inner)
        else:
            self.put(label, struct.pack(_SCALAR[vtype], v))


def build(
    kvs: list[tuple[str, int, Any] | tuple[str, int, Any, Any]] = (),  # type: ignore[assignment]
    tensors: list[tuple[str, tuple[int, ...], int, bytes]] = (),  # type: ignore[assignment]
    *,
    version: int = 3,
    alignment: int = 32,
    offsets: list[int] | None = None,
) -> Built:
    """A GGUF file: ``kvs`` as ``(key, type, value[, element type])`` (an array's element type
    may be ``(ARR, inner)`` for nested arrays), ``tensors`` as ``(name, ne, type code,
    data)``, placed one after another at multiples of ``alignment`` (or at ``offsets``)."""
    o = _Out()
    o.put("magic", b"GGUF")
    o.put("version", struct.pack("<I", version))
    o.put("tensor_count", struct.pack("<Q", len(tensors)))
    o.put("kv_count", struct.pack("<Q", len(kvs)))
    for kv in kvs:
        key, vtype, v = kv[:3]
        o.string(f"kv {key}.key", key)
        o.put(f"kv {key}.type", struct.pack("<I", vtype))
        o.value(f"kv {key}.value", vtype, v, kv[3] if len(kv) > 3 else None)
    rel, placed = 0, []
    for i, (_name, _ne, _t, data) in enumerate(tensors):
        at = offsets[i] if offsets is not None else rel
        placed.append(at)
        rel = -(-(at + len(data)) // alignment) * alignment
    for (name, ne, t, _data), at in zip(tensors, placed, strict=True):
        o.string(f"tensor {name}.name", name)
        o.put(f"tensor {name}.n_dims", struct.pack("<I", len(ne)))
        o.put(f"tensor {name}.ne", struct.pack(f"<{len(ne)}Q", *ne))
        o.put(f"tensor {name}.type", struct.pack("<I", t))
        o.put(f"tensor {name}.offset", struct.pack("<Q", at))
    start = -(-len(o.buf) // alignment) * alignment
    o.buf += bytes(start - len(o.buf))
    end = start + max((a + len(t[3]) for t, a in zip(tensors, placed, strict=True)), default=0)
    body = bytearray(end - start)
    for (_n, _ne, _t, data), at in zip(tensors, placed, strict=True):
        body[at : at + len(data)] = data
    return Built(bytes(o.buf + body), o.fields, start)


def write_gguf(path: Any, tensors: dict[str, Any], kv: Any = None, alignment: int | None = None):
    """Write ``tensors`` (``name -> array`` or ``(raw array, GGMLQuantizationType)``) and the
    key/values ``kv(writer)`` adds with the ``gguf`` package's writer."""
    import gguf

    w = gguf.GGUFWriter(str(path), "test")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    if kv is not None:
        kv(w)
    for name, t in tensors.items():
        if isinstance(t, tuple):
            w.add_tensor(name, t[0], raw_dtype=t[1])
        else:
            w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def all_value_types(w: Any) -> None:
    """Add one key/value of every GGUF value type (arrays of each, nested, empty) to ``w``."""
    import gguf

    V = gguf.GGUFValueType
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 2**32 - 1)
    w.add_int32("t.i32", -(2**31))
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo \u2603")
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", -0.1)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, -1.25])
    w.add_array("t.arr_str", ["a", "", "\u00e9t\u00e9"])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_nested", [[1, 2], [3]])
    w.add_key_value("t.arr_u8", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("t.arr_i64", [-(2**63), 2**63 - 1], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("t.arr_u64", [0, 2**64 - 1], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("t.arr_f64", [1e300, -2.5], V.ARRAY, sub_type=V.FLOAT64)
    w.add_key_value("t.arr_u16", [65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("t.arr_i16", [-1], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("t.arr_u32", [7], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("t.arr_i8", [-7], V.ARRAY, sub_type=V.INT8)


def nested_flat(v: Any) -> list:
    """A nested list flattened (how the ``gguf`` package's reader shows nested arrays)."""
    if not isinstance(v, list):
        return [v]
    return [x for item in v for x in nested_flat(item)]


def f32(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)

"""Run inside an interpreter that has ztensor==2.1.2 (never imported by the test process).

python _zt2_corpus.py OUT_DIR SRC_DIR

Writes one ``.zt`` file per case below into OUT_DIR with ztensor 2.1.2's own Python API (every
storage dtype, every logical type, raw and ``zt.zstd-seekable/1`` parts, canonical and aligned
placement, publish and append, streamed objects, ``ingest``, every layout it writes, attributes
of every CBOR type, and ``ztensor.convert`` of each source file found in SRC_DIR), then reads each
back with ztensor and prints, as JSON, what it read: for every file its attributes, whether
``verify(deep=True)`` passed, and for every object its layout, shape, the attributes the case
gave it, and for every part its dtype, logical type, encoding and decoded bytes (hex).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import ztensor

ZSTD = "zt.zstd-seekable/1"
DTYPES = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "bf16": np.uint16,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
    "u64": np.uint64,
    "u32": np.uint32,
    "u16": np.uint16,
    "u8": np.uint8,
}
SHAPES = [[3, 5], [17], [2, 3, 4], [1], [], [0], [4, 0, 2]]

CASES: dict[str, Callable[[str], None]] = {}
#: file -> object -> the attributes the case gave it (ztensor has no getter for them)
OBJECT_ATTRS: dict[str, dict[str, Any]] = {}


def case(fn: Callable[[str], None]) -> Callable[[str], None]:
    CASES[fn.__name__] = fn
    return fn


def u8(a: Any) -> np.ndarray:
    return np.frombuffer(np.ascontiguousarray(a).tobytes(), np.uint8)


def rand(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def part(dtype: str, data: Any, **kw: Any) -> dict[str, Any]:
    return {"dtype": dtype, "data": u8(data), **kw}


def add_object(w: Any, path: str, name: str, shape: list[int], parts: dict, **kw: Any) -> None:
    w.add_object(name, shape, parts, **kw)
    OBJECT_ATTRS.setdefault(os.path.basename(path), {})[name] = kw.get("attributes")


def numel(shape: list[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def all_dtypes(w: Any, seed: int, encoding: str | None = None, order: int = 1) -> None:
    names = sorted(DTYPES)[::order]
    for i, dt in enumerate(names):
        shape = SHAPES[i % len(SHAPES)]
        n = numel(shape) * np.dtype(DTYPES[dt]).itemsize
        w.add(f"t_{dt}", rand(seed + i, n), shape=shape, dtype=dt, encoding=encoding)


# -- dense, every storage dtype ------------------------------------------------------------------
@case
def dtypes_canonical(path: str) -> None:
    with ztensor.Writer(path) as w:
        all_dtypes(w, 1)


@case
def dtypes_align4k(path: str) -> None:
    with ztensor.Writer(path, canonical=False, align=4096) as w:
        all_dtypes(w, 2, order=-1)


@case
def dtypes_align8k(path: str) -> None:
    with ztensor.Writer(path, canonical=False, align=8192) as w:
        all_dtypes(w, 3)


@case
def dtypes_noncanonical(path: str) -> None:
    with ztensor.Writer(path, canonical=False) as w:
        all_dtypes(w, 4, order=-1)


@case
def dtypes_zstd(path: str) -> None:
    with ztensor.Writer(path, canonical=False) as w:
        all_dtypes(w, 5, encoding=ZSTD)


@case
def dtypes_publish(path: str) -> None:
    with ztensor.Writer(path, publish=True) as w:
        all_dtypes(w, 6)


@case
def zstd_large(path: str) -> None:
    """Several MiB per part: more than one seekable frame, compressible and not."""
    big = (np.arange(3 << 20, dtype=np.uint32) // 7).astype(np.float32)
    with ztensor.Writer(path, canonical=False, align=4096) as w:
        w.add("smooth", u8(big), shape=[3 << 10, 1 << 10], dtype="f32", encoding=ZSTD)
        w.add("noise", rand(7, 5 << 20), shape=[5, 1 << 20], dtype="u8", encoding=ZSTD)
        w.add("raw", u8(big[: 1 << 20]), shape=[1 << 20], dtype="f32")


# -- logical types ------------------------------------------------------------------------------
def logical_objects(w: Any, encoding: str | None) -> None:
    every = np.arange(256, dtype=np.uint8)
    w.add("bool", rand(8, 37) & 1, shape=[37], dtype="u8", logical="bool", encoding=encoding)
    for t in ("f8_e4m3fn", "f8_e5m2", "f8_e4m3fnuz", "f8_e5m2fnuz", "f8_e8m0"):
        w.add(t, every, shape=[16, 16], dtype="u8", logical=t, encoding=encoding)
    w.add("f4_even", every, shape=[2, 256], dtype="u8", logical="f4_e2m1", encoding=encoding)
    odd = every[:8].copy()
    odd[-1] &= 0x0F  # the final odd nibble is zero
    w.add("f4_odd", odd, shape=[15], dtype="u8", logical="f4_e2m1", encoding=encoding)
    c64 = np.arange(24, dtype=np.float32) - 7.5
    w.add("complex64", u8(c64), shape=[3, 4], dtype="f32", logical="complex64", encoding=encoding)
    c128 = np.linspace(-1, 1, 10)
    w.add("complex128", u8(c128), shape=[5], dtype="f64", logical="complex128", encoding=encoding)
    w.add("bool_scalar", np.ones(1, np.uint8), shape=[], dtype="u8", logical="bool")
    w.add("f4_empty", every[:0], shape=[0, 3], dtype="u8", logical="f4_e2m1")


@case
def logical_canonical(path: str) -> None:
    with ztensor.Writer(path, canonical=False) as w:
        logical_objects(w, None)


@case
def logical_zstd(path: str) -> None:
    with ztensor.Writer(path, canonical=False) as w:
        logical_objects(w, ZSTD)


@case
def logical_unknown(path: str) -> None:
    """Logical types 2.1.2 does not register: it writes, opens and verifies them."""
    with ztensor.Writer(path, canonical=False) as w:
        w.add("acme", rand(9, 16), shape=[4], dtype="f32", logical="acme.int3/1")
        w.add("int4", rand(10, 8), shape=[8], dtype="u8", logical="int4")
        w.add("zstd", rand(11, 64), shape=[2, 16], dtype="u16", logical="x.y/2", encoding=ZSTD)


# -- shapes and names ---------------------------------------------------------------------------
@case
def shapes(path: str) -> None:
    with ztensor.Writer(path, canonical=False) as w:
        w.add("scalar_f64", u8(np.float64(-2.5)), shape=[], dtype="f64")
        w.add("scalar_i8", u8(np.int8(-3)), shape=[], dtype="i8")
        w.add("empty", rand(0, 0), shape=[0], dtype="f32")
        w.add("empty_2d", rand(0, 0), shape=[5, 0], dtype="i16")
        w.add("empty_zstd", rand(0, 0), shape=[0, 7], dtype="u32", encoding=ZSTD)
        w.add("huge_empty", rand(0, 0), shape=[0, 1 << 40], dtype="f32")
        w.add("rank64", rand(12, 2), shape=[1] * 63 + [2], dtype="u8")
        w.add("ones", rand(13, 48), shape=[2, 1, 3, 1, 2], dtype="i32")


@case
def names(path: str) -> None:
    with ztensor.Writer(path) as w:
        for i, n in enumerate(
            sorted(["café", "模型.权重", "a/b.c:d", " lead", "A", "a", "🙂", "x" * 1024, "é" * 512])
        ):
            w.add(n, rand(14 + i, 4), shape=[2], dtype="i16")


# -- attributes ---------------------------------------------------------------------------------
def nested(depth: int) -> Any:
    v: Any = "leaf"
    for i in range(depth):
        v = [v] if i % 2 else {"k": v}
    return v


ATTRS = {
    "int": 1,
    "zero": 0,
    "neg": -5,
    "u64_max": 2**64 - 1,
    "i64_min": -(2**63),
    "f16": 1.5,
    "f32": 0.1,
    "f64": 1e300,
    "tiny": 5e-324,
    "negzero": -0.0,
    "nan": float("nan"),
    "inf": float("inf"),
    "ninf": float("-inf"),
    "text": "héllo 模型",
    "empty_text": "",
    "true": True,
    "false": False,
    "null": None,
    "list": [1, "a", [2.5, None], {"x": True}],
    "empty_list": [],
    "empty_map": {},
    "map": {"b": {"c": [1, 2, 3]}, "a": "z"},
}


@case
def attributes(path: str) -> None:
    with ztensor.Writer(path, canonical=False) as w:
        w.set_attributes({**ATTRS, "deep": nested(27)})
        data = {"data": part("f32", np.arange(6, dtype=np.float32))}
        add_object(w, path, "dense_attrs", [2, 3], data, layout="dense", attributes=ATTRS)
        add_object(
            w, path, "deep_attrs", [2, 3], data, layout="dense", attributes={"d": nested(26)}
        )
        add_object(
            w,
            path,
            "acme",
            [4],
            {"p": part("u8", rand(15, 4))},
            layout="acme.x/1",
            attributes=ATTRS,
        )


@case
def attributes_canonical(path: str) -> None:
    with ztensor.Writer(path) as w:
        w.set_attributes({"format": "pt", "step": 1000, "lr": 3e-4, "tags": ["a", "b"]})
        w.add("w", u8(np.ones(4, np.float32)), shape=[4], dtype="f32")


@case
def empty(path: str) -> None:
    with ztensor.Writer(path):
        pass


@case
def attributes_only(path: str) -> None:
    with ztensor.Writer(path, canonical=False) as w:
        w.set_attributes({"only": "attributes"})


# -- blob sharing -------------------------------------------------------------------------------
@case
def dedup_canonical(path: str) -> None:
    same = rand(16, 64)
    with ztensor.Writer(path) as w:
        w.add("a", same, shape=[16], dtype="f32")
        w.add("b", same, shape=[16], dtype="f32")
        w.add("c", same, shape=[4, 8], dtype="u16")
        w.add("d", same, shape=[64], dtype="u8", logical="f8_e4m3fn")
        w.add("e", rand(17, 64), shape=[64], dtype="i8")


# -- append, stream, ingest ---------------------------------------------------------------------
@case
def append(path: str) -> None:
    with ztensor.Writer(path, canonical=False) as w:
        w.set_attributes({"generation": 1})
        w.add("first", rand(18, 16), shape=[4], dtype="f32")
    with ztensor.Writer(path, canonical=False, append=True) as w:
        w.add("second", rand(19, 24), shape=[3], dtype="i64", encoding=ZSTD)
    with ztensor.Writer(path, canonical=False, append=True) as w:
        w.set_attributes({"generation": 3})
        w.add("third", np.array([1, 0, 1], np.uint8), shape=[3], dtype="u8", logical="bool")


@case
def stream(path: str) -> None:
    data = rand(20, 3 * 1000 * 4)
    with ztensor.Writer(path, canonical=False) as w:
        with w.stream("dense", [3, 1000], {"data": {"dtype": "f32", "nbytes": data.size}}) as s:
            for i in range(0, data.size, 777):
                s.write(data[i : i + 777])
        q = rand(21, 16)
        scales = u8(np.linspace(0.5, 4.0, 8, dtype=np.float32))
        parts = {"data": {"dtype": "u8", "nbytes": 16}, "scales": {"dtype": "f32", "nbytes": 32}}
        attrs = {"group_size": 4, "bits": 4, "axis": 1}
        with w.stream("q", [4, 8], parts, layout="zt.quant_group/1", attributes=attrs) as s:
            s.write(q)
            s.write(scales)
        OBJECT_ATTRS.setdefault(os.path.basename(path), {})["q"] = attrs
        z = {"data": {"dtype": "u8", "nbytes": 5000, "encoding": ZSTD}}
        with w.stream("zstd", [5000], z) as s:
            s.write(rand(22, 5000))


@case
def ingest(path: str) -> None:
    base = path + ".base.zt"
    dtypes_canonical(base)
    with ztensor.open(base) as src, ztensor.Writer(path, canonical=False, align=4096) as w:
        w.ingest(src)
        w.add("extra", rand(23, 8), shape=[8], dtype="u8")
    os.remove(base)


# -- layouts ------------------------------------------------------------------------------------
def csr(indices: list[int], indptr: list[int], dt: str = "u32") -> dict[str, Any]:
    npd = DTYPES[dt]
    return {
        "indices": part(dt, np.array(indices, npd)),
        "indptr": part(dt, np.array(indptr, npd)),
    }


@case
def sparse_csr(path: str) -> None:
    f32 = part("f32", np.array([1.5, -2, 3], np.float32))
    with ztensor.Writer(path, canonical=False) as w:
        add_object(
            w,
            path,
            "u32",
            [3, 4],
            {"values": f32, **csr([1, 0, 3], [0, 1, 3, 3])},
            layout="zt.sparse_csr/1",
        )
        add_object(
            w,
            path,
            "u64",
            [3, 4],
            {"values": f32, **csr([1, 0, 3], [0, 1, 3, 3], "u64")},
            layout="zt.sparse_csr/1",
        )
        zv = part("f32", np.array([1.5, -2, 3], np.float32), encoding=ZSTD)
        add_object(
            w,
            path,
            "zstd",
            [3, 4],
            {"values": zv, **csr([1, 0, 3], [0, 1, 3, 3])},
            layout="zt.sparse_csr/1",
        )
        bv = part("u8", np.array([1, 0, 1], np.uint8), logical="bool")
        add_object(
            w,
            path,
            "bool",
            [3, 4],
            {"values": bv, **csr([1, 0, 3], [0, 1, 3, 3])},
            layout="zt.sparse_csr/1",
        )
        fv = part("u8", np.array([0x21, 0x03], np.uint8), logical="f4_e2m1")
        add_object(
            w,
            path,
            "f4",
            [3, 4],
            {"values": fv, **csr([1, 0, 3], [0, 1, 3, 3])},
            layout="zt.sparse_csr/1",
        )
        e = part("f64", np.zeros(0))
        add_object(
            w, path, "no_rows", [0, 4], {"values": e, **csr([], [0])}, layout="zt.sparse_csr/1"
        )
        add_object(
            w,
            path,
            "no_values",
            [2, 4],
            {"values": e, **csr([], [0, 0, 0])},
            layout="zt.sparse_csr/1",
        )


@case
def sparse_csr_bad_data(path: str) -> None:
    """CSR objects 2.1.2 writes and verifies though their data breaks the profile's rules."""
    f32 = part("f32", np.array([1, 2, 3], np.float32))
    with ztensor.Writer(path, canonical=False) as w:
        for name, ind, ptr in [
            ("column_out_of_range", [9, 0, 3], [0, 1, 3, 3]),
            ("indptr_decreasing", [1, 0, 3], [0, 2, 1, 3]),
            ("unsorted_row", [1, 3, 0], [0, 1, 3, 3]),
            ("indptr_not_from_zero", [1, 0, 3], [1, 1, 3, 3]),
        ]:
            add_object(
                w, path, name, [3, 4], {"values": f32, **csr(ind, ptr)}, layout="zt.sparse_csr/1"
            )
        w.add("dense", rand(24, 4), shape=[4], dtype="u8")


def coo(coords: list[int], dt: str = "u64") -> dict[str, Any]:
    return part(dt, np.array(coords, DTYPES.get(dt, np.int64)))


@case
def sparse_coo(path: str) -> None:
    f32 = part("f32", np.array([1.5, -2, 3], np.float32))
    with ztensor.Writer(path, canonical=False) as w:
        add_object(
            w,
            path,
            "u64",
            [3, 4],
            {"values": f32, "coords": coo([0, 1, 2, 1, 0, 3])},
            layout="zt.sparse_coo/1",
        )
        c32 = coo([0, 1, 2, 1, 0, 3, 4, 4, 0], "u32")
        add_object(
            w,
            path,
            "u32_rank3",
            [3, 4, 5],
            {"values": f32, "coords": c32},
            layout="zt.sparse_coo/1",
        )
        bv = part("u8", np.array([1, 1], np.uint8), logical="bool")
        add_object(
            w,
            path,
            "rank1_bool",
            [9],
            {"values": bv, "coords": coo([8, 0])},
            layout="zt.sparse_coo/1",
        )
        zv = part("f32", np.array([1.5, -2, 3], np.float32), encoding=ZSTD)
        zc = part("u64", np.array([0, 1, 2, 1, 0, 3], np.uint64), encoding=ZSTD)
        add_object(w, path, "zstd", [3, 4], {"values": zv, "coords": zc}, layout="zt.sparse_coo/1")
        add_object(
            w,
            path,
            "empty",
            [3, 4],
            {"values": part("f32", np.zeros(0, np.float32)), "coords": coo([])},
            layout="zt.sparse_coo/1",
        )


@case
def sparse_coo_lax(path: str) -> None:
    """COO objects that break the profile's metadata rules: 2.1.2 checks none of them (it
    writes, opens and verifies each)."""
    f32 = part("f32", np.array([1, 2, 3], np.float32))
    with ztensor.Writer(path, canonical=False) as w:
        for name, shape, parts in [
            ("coords_i64", [3, 4], {"values": f32, "coords": coo([0, 1, 2, 1, 0, 3], "i64")}),
            ("coords_u16", [3, 4], {"values": f32, "coords": coo([0, 1, 2, 1, 0, 3], "u16")}),
            (
                "coords_typed",
                [3, 4],
                {"values": f32, "coords": {**coo([0, 1, 2, 1, 0, 3]), "logical": "acme.idx/1"}},
            ),
            ("rank0", [], {"values": part("f32", np.ones(1, np.float32)), "coords": coo([])}),
            ("ragged_coords", [3, 4], {"values": f32, "coords": coo([0, 1, 2, 1, 0])}),
            (
                "values_size",
                [3, 4],
                {"values": part("f32", np.ones(2, np.float32)), "coords": coo([0, 1, 2, 1, 0, 3])},
            ),
            ("wrong_parts", [3, 4], {"values": f32, "idx": coo([0, 1, 2, 1, 0, 3])}),
        ]:
            add_object(w, path, name, shape, parts, layout="zt.sparse_coo/1")
        w.add("dense", rand(25, 4), shape=[4], dtype="u8")


@case
def sparse_coo_bad_data(path: str) -> None:
    f32 = part("f32", np.array([1, 2, 3], np.float32))
    with ztensor.Writer(path, canonical=False) as w:
        add_object(
            w,
            path,
            "duplicate",
            [3, 4],
            {"values": f32, "coords": coo([0, 0, 2, 1, 1, 3])},
            layout="zt.sparse_coo/1",
        )
        add_object(
            w,
            path,
            "out_of_range",
            [3, 4],
            {"values": f32, "coords": coo([0, 1, 2, 1, 0, 9])},
            layout="zt.sparse_coo/1",
        )
        w.add("dense", rand(26, 4), shape=[4], dtype="u8")


QUANT = "zt.quant_group/1"
MX = "zt.mx/1"


@case
def quant_group(path: str) -> None:
    data = rand(27, 16)
    f32s = part("f32", np.linspace(0.5, 4.0, 8, dtype=np.float32))
    full = {
        "bits": 4,
        "group_size": 4,
        "axis": 1,
        "scale_form": "f32_factors",
        "packing": {"word": "u8", "order": "lsb_first", "per_word": 2},
        "zero_point": {"form": "implied", "value": 8},
    }
    zeros = {"form": "tensor", "packing": "plain"}
    with ztensor.Writer(path, canonical=False) as w:
        add_object(
            w,
            path,
            "full",
            [4, 8],
            {"data": part("u8", data), "scales": f32s},
            layout=QUANT,
            attributes=full,
        )
        add_object(
            w,
            path,
            "zeros",
            [4, 8],
            {"data": part("u8", data), "scales": f32s, "zeros": part("u8", rand(28, 8))},
            layout=QUANT,
            attributes={**full, "zero_point": zeros},
        )
        add_object(
            w,
            path,
            "group_size_only",
            [4, 8],
            {"data": part("u8", data), "scales": f32s},
            layout=QUANT,
            attributes={"group_size": 4},
        )
        add_object(
            w,
            path,
            "no_attributes",
            [4, 8],
            {"data": part("u8", data), "scales": f32s},
            layout=QUANT,
        )
        add_object(
            w,
            path,
            "odd",
            [4, 8],
            {"data": part("u8", data[:3])},
            layout=QUANT,
            attributes={"bits": 7, "zero_point": "x"},
        )
        add_object(
            w,
            path,
            "zstd_parts",
            [4, 8],
            {"data": part("u8", data, encoding=ZSTD), "scales": {**f32s, "encoding": ZSTD}},
            layout=QUANT,
            attributes=full,
        )


@case
def mx(path: str) -> None:
    attrs = {"block_size": 32, "axis": 1, "scale_form": "e8m0_exponent"}
    scales = part("u8", np.array([127, 128, 126, 130], np.uint8), logical="f8_e8m0")
    with ztensor.Writer(path, canonical=False) as w:
        add_object(
            w,
            path,
            "fp4",
            [2, 64],
            {"data": part("u8", rand(29, 64), logical="f4_e2m1"), "scales": scales},
            layout=MX,
            attributes=attrs,
        )
        add_object(
            w,
            path,
            "fp8",
            [2, 64],
            {"data": part("u8", rand(30, 128), logical="f8_e4m3fn"), "scales": scales},
            layout=MX,
            attributes=attrs,
        )
        add_object(
            w,
            path,
            "int8",
            [2, 64],
            {"data": part("i8", rand(31, 128)), "scales": scales},
            layout=MX,
            attributes=attrs,
        )
        add_object(
            w,
            path,
            "lax",
            [2, 64],
            {"data": part("u8", rand(32, 64), logical="f4_e2m1"), "scales": scales},
            layout=MX,
            attributes={"group_size": 32},
        )


@case
def unknown_layout(path: str) -> None:
    parts = {
        "pages": part("bf16", rand(33, 64)),
        "table": part("i32", np.arange(8, dtype=np.int32), encoding=ZSTD),
        "mask": part("u8", np.array([1, 0, 1, 1], np.uint8), logical="bool"),
        "scale": part("f64", np.float64(0.125)),
    }
    with ztensor.Writer(path, canonical=False) as w:
        add_object(
            w,
            path,
            "kv",
            [2, 16],
            parts,
            layout="acme.paged_kv/3",
            attributes={"page": 16, "heads": [1, 2]},
        )
        add_object(w, path, "bare", [1], {"x": part("u8", rand(34, 1))}, layout="b.c/1")


# -- conversions from other formats (sources written by the test) ------------------------------
def convert_case(src_name: str) -> Callable[[str], None]:
    def run(path: str) -> None:
        ztensor.convert(os.path.join(SRC_DIR, src_name), path)

    return run


def convert_zt_aligned(path: str) -> None:
    base = path + ".base.zt"
    logical_canonical(base)
    ztensor.convert(base, path, align=4096)
    os.remove(base)


CASES["convert_zt_aligned"] = convert_zt_aligned
SRC_DIR = ""


# -- what ztensor reads back --------------------------------------------------------------------
def describe(path: str) -> dict[str, Any]:
    out: dict[str, Any] = {"objects": {}}
    with ztensor.open(path) as src:
        out["attributes"] = src.attributes
        for name in src:
            t = src[name]
            parts = {}
            for p in t.parts:
                tp = t[p]
                parts[p] = {
                    "dtype": tp.dtype,
                    "logical": tp.logical,
                    "hex": tp.tobytes().hex(),
                }
            out["objects"][name] = {
                "layout": t.layout,
                "shape": list(t.shape),
                "attributes": OBJECT_ATTRS.get(os.path.basename(path), {}).get(name, "unknown"),
                "parts": parts,
            }
    try:
        out["verified"] = list(ztensor.verify(path, deep=True))
    except Exception as exc:  # noqa: BLE001  (a file 2.1.2 writes but does not verify)
        out["verified"] = None
        out["verify_error"] = str(exc)
    return out


def main(out_dir: str, src_dir: str) -> None:
    global SRC_DIR
    SRC_DIR = src_dir
    for src in sorted(os.listdir(src_dir)):
        CASES["convert_" + src.replace(".", "_")] = convert_case(src)
    result: dict[str, Any] = {}
    for name, fn in CASES.items():
        path = os.path.join(out_dir, name + ".zt")
        try:
            fn(path)
        except Exception as exc:  # noqa: BLE001  (reported, so the test names what failed)
            result[name] = {"write_error": f"{type(exc).__name__}: {exc}"}
            continue
        result[name] = describe(path)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

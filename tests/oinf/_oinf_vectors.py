"""Helpers shared by the OINF tests: the conformance vectors and models rebuilt from them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import ml_dtypes
import numpy as np

from tenfold.oinf import Bitset, Scalar, Tensor, Uninitialized

VALID_V1 = [
    "01_empty",
    "02_sizevars",
    "03_metadata_scalars",
    "04_metadata_string_bitset",
    "05_metadata_ndarray",
    "06_tensors_numeric",
    "07_tensors_lowp_float",
    "08_tensors_packed",
    "09_tensors_scalar_nodata",
    "10_spec_example_mlp",
    "11_spec_worked_alignment",
    "12_full_model",
    "90_valid_but_verifier_crashes_bool_2d",
    "91_valid_but_verifier_crashes_nonfinite",
]
VALID_V2 = (
    VALID_V1[:12]
    + ["13_v2_quant_per_tensor", "14_v2_quant_per_channel", "15_v2_quant_symmetric_i4"]
    + VALID_V1[12:]
)
CORRUPT_V1 = [f"c{i:02d}" for i in range(1, 41)]
CORRUPT_V2 = CORRUPT_V1 + ["c41", "c42", "c43", "w01"]


def corrupt_path(conformance: Path, version: str, prefix: str) -> Path:
    (p,) = sorted((conformance / "oinf" / version / "corrupt").glob(prefix + "_*.oinf"))
    return p


def sidecar(path: Path) -> dict:
    return json.loads(path.with_suffix(".json").read_text())


def _num(x):
    if isinstance(x, list):
        return [_num(v) for v in x]
    if isinstance(x, str):
        return float(x)  # "nan", "inf", "-inf"
    return x


def _array(values, dims, tname):
    values = _num(values)
    if tname in ("f16", "f32", "f64", "bf16", "f8"):
        arr = np.array(values, dtype=np.float64)
    elif tname == "bool":
        arr = np.array(values, dtype=bool)
    else:
        arr = np.array(values, dtype=np.uint64 if tname == "u64" else np.int64)
    return arr.reshape(dims)


def model_from_vector(j: dict) -> dict:
    """sizevars / metadata / tensors for tenfold.oinf.write, from a vector's sidecar: the values
    handed to the reference writer (``writer_inputs``) with the types the file records."""
    wi = j.get("writer_inputs") or {}
    wi_t, wi_m = wi.get("tensors", {}), wi.get("metadata", {})
    sizevars = {s["name"]: s["value"] for s in j["sizevars"]}
    metadata = {}
    for m in j["metadata"]:
        key, tname, val = m["key"], m["value_type_name"], m["value"]
        src = wi_m.get(key)
        if tname == "str":
            metadata[key] = val["text"]
        elif tname == "bitset":
            metadata[key] = Bitset(val["bits"])
        elif tname == "ndarray":
            et = val["element_type_name"]
            data = src if src is not None else val["values"]
            metadata[key] = Tensor(_array(data, val["dims"], et), et)
        else:
            metadata[key] = Scalar(_num(src if src is not None else val["scalar"]), tname)
    tensors = {}
    for t in j["tensors"]:
        name, tname = t["name"], t["dtype_name"]
        if not t["has_data"]:
            tensors[name] = Uninitialized(tname, t["dims"])
        else:
            data = wi_t.get(name, t["values"])
            tensors[name] = Tensor(_array(data, t["dims"], tname), tname)
    return {"sizevars": sizevars, "metadata": metadata, "tensors": tensors}


def f8_regions(j: dict) -> list[tuple[int, int, list]]:
    """(start, end, input values) of every F8 payload of a vector."""
    wi = j.get("writer_inputs") or {}
    out = []
    for t in j["tensors"]:
        if t["dtype_name"] == "f8" and t["has_data"]:
            vals = wi.get("tensors", {}).get(t["name"], t["values"])
            out.append((t["data_offset"], t["data_offset"] + t["data_nbytes"], vals))
    for m in j["metadata"]:
        v = m["value"]
        src = wi.get("metadata", {}).get(m["key"])
        if m["value_type_name"] == "f8":
            out.append((m["value_offset"], m["value_offset"] + 1, [src]))
        elif m["value_type_name"] == "ndarray" and v["element_type_name"] == "f8":
            s = m["value_offset"] + v["data_start_in_payload"]
            out.append((s, s + v["data_nbytes"], src if src is not None else v["values"]))
    return out


def e5m2_nearest_even(x: float) -> int:
    """Oracle: the E5M2 code nearest to float32(x), ties to even, overflow to inf; NaN 0x7D."""
    x = float(np.float32(x))
    if math.isnan(x):
        return 0x7D
    if x == 0:
        return 0x80 if math.copysign(1, x) < 0 else 0x00
    if math.isinf(x):
        return 0xFC if x < 0 else 0x7C
    best, best_d = None, None
    for code in range(256):
        v = float(np.array([code], np.uint8).view(ml_dtypes.float8_e5m2)[0])
        if math.isnan(v):
            continue
        if math.isinf(v):
            v = math.copysign(65536.0, v)
        d = abs(v - x)
        if best_d is None or d < best_d or (d == best_d and code % 2 == 0 and best % 2 == 1):
            best, best_d = code, d
    return best


def rebuild_diff(conformance: Path, name: str, tmp: Path, version: str = "v1"):
    """Write the model of vector ``name`` with tenfold; return (ours, reference, sidecar)."""
    from tenfold.oinf import write

    p = conformance / "oinf" / version / (name + ".oinf")
    j = sidecar(p)
    out = tmp / (name + ".oinf")
    write(out, sort=False, **model_from_vector(j))
    return out.read_bytes(), p.read_bytes(), j

"""tenfold reads every file ztensor 2.1.2 writes and verifies, exactly.

``_zt2_corpus.py`` (run in an interpreter with ztensor==2.1.2) writes one file per kind it can
produce through its Python API (every storage dtype and logical type, raw and zstd-seekable parts,
canonical, aligned, published, appended, streamed and ingested files, every layout, attributes of
every CBOR type, and ``ztensor.convert`` from safetensors, PyTorch, npz, HDF5, ONNX and GGUF)
and reports what ztensor reads back. Each file is then read by tenfold: the file's and each
object's attributes, each part's dtype, logical type and decoded bytes, each object's value
(decoded here by an independent reference), and ``verify``.

Objects whose parts break the rules of a layout tenfold interprets (``zt.sparse_csr/1`` data
rules, every ``zt.sparse_coo/1`` rule: 2.1.2 checks none of COO's) open with their file, give
their parts exactly, and are refused loudly (``FormatError``) when assembled into a sparse
tensor, as the profile requires; ``verify`` reports them.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.errors import FormatError, UnsupportedError

PEER = os.environ.get("TENFOLD_ZTENSOR2_PYTHON")
CORPUS = Path(__file__).with_name("_zt2_corpus.py")
pytestmark = pytest.mark.peer

#: every case of _zt2_corpus.py (the conversions come from the sources this module writes)
CASES = [
    "dtypes_canonical", "dtypes_align4k", "dtypes_align8k", "dtypes_noncanonical",
    "dtypes_zstd", "dtypes_publish", "zstd_large", "logical_canonical", "logical_zstd",
    "logical_unknown", "shapes", "names", "attributes", "attributes_canonical", "empty",
    "attributes_only", "dedup_canonical", "append", "stream", "ingest", "sparse_csr",
    "sparse_csr_bad_data", "sparse_coo", "sparse_coo_lax", "sparse_coo_bad_data",
    "quant_group", "mx", "unknown_layout", "convert_zt_aligned",
    "convert_m_safetensors", "convert_m_pt", "convert_m_npz", "convert_m_h5",
    "convert_m_onnx", "convert_m_gguf",
]  # fmt: skip
#: objects whose data or metadata breaks a rule of the sparse profile they name
REFUSED = {"sparse_csr_bad_data", "sparse_coo_lax", "sparse_coo_bad_data"}

STORAGE = {
    "f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
    "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
    "u64": np.uint64, "u32": np.uint32, "u16": np.uint16, "u8": np.uint8,
}  # fmt: skip
BYTE_TYPES = {
    "bool": np.bool_, "f8_e4m3fn": ml_dtypes.float8_e4m3fn, "f8_e5m2": ml_dtypes.float8_e5m2,
    "f8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "f8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "f8_e8m0": ml_dtypes.float8_e8m0fnu,
}  # fmt: skip


# -- sources for ztensor.convert ---------------------------------------------------------------
def _sources(d: Path) -> None:
    """One small file per format ztensor converts from, each with what that format can hold."""
    rng = np.random.default_rng(23)
    f32 = rng.standard_normal((2, 3)).astype(np.float32)
    np.savez(d / "m.npz", a=f32, b=np.array([True, False]), u=np.arange(3, dtype=np.uint16),
             s=np.float64(2.0), e=np.zeros((0, 4), np.int8))  # fmt: skip
    _optional_sources(d, rng, f32)


def _optional_sources(d: Path, rng: np.random.Generator, f32: np.ndarray) -> None:
    try:
        import torch
        from safetensors.torch import save_file
    except ImportError:
        pass
    else:
        t = {
            "a": torch.from_numpy(f32), "bf16": torch.ones(3, dtype=torch.bfloat16) / 3,
            "bool": torch.tensor([True, False]),
            "e4m3": torch.full((4,), 0.5).to(torch.float8_e4m3fn),
            "e5m2": torch.full((2,), -2.0).to(torch.float8_e5m2), "i64": torch.arange(3),
            "empty": torch.zeros((0, 3), dtype=torch.float16), "scalar": torch.tensor(3.0),
        }  # fmt: skip
        save_file(t, str(d / "m.safetensors"), metadata={"format": "pt", "k": "v"})
        # 2.1.2 reads typed storages only: torch's float8 tensors pickle as UntypedStorage
        torch.save({k: v for k, v in t.items() if "e4m3" not in k and "e5m2" not in k}, d / "m.pt")
    try:
        import h5py
    except ImportError:
        pass
    else:
        with h5py.File(d / "m.h5", "w") as f:
            f["a"] = f32
            f.create_dataset("z", data=np.arange(1000, dtype=np.int32), chunks=(100,))
            f["g/x"] = np.ones(3)
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        pass
    else:
        init = [
            numpy_helper.from_array(f32, "w"),
            numpy_helper.from_array(np.arange(4, dtype=np.int8), "q"),
        ]
        onnx.save(helper.make_model(helper.make_graph([], "g", [], [], init)), str(d / "m.onnx"))
    try:
        import gguf
        from gguf import GGMLQuantizationType as Q
    except ImportError:
        pass
    else:
        w = gguf.GGUFWriter(str(d / "m.gguf"), "llama")
        w.add_tensor("f", np.arange(64, dtype=np.float32))
        w.add_tensor("h", np.arange(64, dtype=np.float16))
        x = rng.standard_normal((2, 256)).astype(np.float32)
        for q in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.BF16):
            w.add_tensor("q_" + q.name, gguf.quants.quantize(x, q), raw_dtype=q)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    if not PEER:
        pytest.skip("TENFOLD_ZTENSOR2_PYTHON (an interpreter with ztensor==2.1.2) not set")
    out, src = tmp_path_factory.mktemp("zt2"), tmp_path_factory.mktemp("src")
    _sources(src)
    r = subprocess.run(
        [PEER, str(CORPUS), str(out), str(src)], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr
    return out, json.loads(r.stdout)


# -- an independent decoding of what ztensor read ------------------------------------------------
def _numel(shape: list[int]) -> int:
    return math.prod(shape)


def reference(raw: bytes, dtype: str, logical: str | None, count: int) -> np.ndarray:
    """``count`` elements of a part, decoded by the spec's Appendix A."""
    b = np.frombuffer(raw, np.uint8)
    if logical is None:
        return b.view(STORAGE[dtype])
    if logical in BYTE_TYPES:
        return b.view(BYTE_TYPES[logical])
    if logical == "f4_e2m1":  # two per byte, low nibble first
        nib = np.stack([b & 0x0F, b >> 4], axis=1).reshape(-1)[:count]
        return nib.view(ml_dtypes.float4_e2m1fn)
    if logical in ("complex64", "complex128"):
        return b.view(np.complex64 if logical == "complex64" else np.complex128)
    raise AssertionError(f"no reference decoding for {logical}")


def same_value(a: Any, b: Any) -> bool:
    """Equal, of the same type (int, float, bool, ...), NaN equal to NaN, -0.0 apart from 0.0
    (map keys in any order: a writer is given them in any)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or (a != a and b != b))
    if isinstance(a, dict):
        return sorted(a) == sorted(b) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _bytes_equal(arr: np.ndarray, want: np.ndarray) -> bool:
    return arr.dtype == want.dtype and arr.shape == want.shape and arr.tobytes() == want.tobytes()


def check_object(r: Any, name: str, want: dict[str, Any], refused: bool) -> list[str]:
    problems = []
    info = r.info(name)
    if info.layout != want["layout"] or list(info.shape) != want["shape"]:
        problems.append(f"{name}: layout/shape {info.layout} {info.shape}")
    if want["attributes"] != "unknown" and not same_value(
        dict(info.attributes or {}), dict(want["attributes"] or {})
    ):
        problems.append(f"{name}: attributes {info.attributes!r}")
    ref = {}
    for role, p in want["parts"].items():
        got = info.parts[role]
        if (got.dtype, got.type) != (p["dtype"], p["logical"]):
            problems.append(f"{name}/{role}: dtype {got.dtype}/{got.type}")
        if r.decoded(name, role).tobytes().hex() != p["hex"]:
            problems.append(f"{name}/{role}: decoded bytes differ")
        ref[role] = (bytes.fromhex(p["hex"]), p["dtype"], p["logical"])
    if refused:
        with pytest.raises(FormatError):
            r[name]
        return problems
    try:
        value = r[name]
    except UnsupportedError:
        types = {p["logical"] for p in want["parts"].values()} - {None}
        if want["layout"] == "dense" and not types <= set(BYTE_TYPES) | {"f4_e2m1", "complex64",
                                                                        "complex128"}:  # fmt: skip
            return problems  # an unknown logical type: refused, its bytes given by decoded()
        raise
    problems += _check_value(name, want, ref, value)
    shape = want["shape"]
    if want["layout"] == "dense" and shape and shape[0] >= 3:  # rows read alone (zstd: frames)
        rows = r.read(name, slice(1, shape[0] - 1))
        if not _bytes_equal(rows, np.asarray(value)[1:-1]):
            problems.append(f"{name}: rows 1:-1 differ")
    return problems


def _check_value(name: str, want: dict[str, Any], ref: dict[str, Any], value: Any) -> list[str]:
    layout, shape = want["layout"], want["shape"]
    if layout == "dense":
        raw, dt, lg = ref["data"]
        exp = reference(raw, dt, lg, _numel(shape)).reshape(shape)
        return [] if _bytes_equal(np.asarray(value), exp) else [f"{name}: value {value!r}"]
    if layout in ("zt.sparse_csr/1", "zt.sparse_coo/1"):
        t = value if isinstance(value, zt.SparseTensor) else None
        return [] if t is not None and _sparse_ok(t, ref, shape) else [f"{name}: sparse {value}"]
    if not isinstance(value, zt.PartsObject) or sorted(value) != sorted(ref):
        return [f"{name}: parts object {value!r}"]
    bad = []
    for role, (raw, dt, _lg) in ref.items():
        if not _bytes_equal(value[role], np.frombuffer(raw, np.uint8).view(STORAGE[dt])):
            bad.append(f"{name}/{role}: part value")
    return bad


def _sparse_ok(t: Any, ref: dict[str, Any], shape: list[int]) -> bool:
    raw, dt, lg = ref["values"]
    if t.format == "csr":
        ind = reference(*ref["indices"], 0).astype(np.uint64)
        ptr = reference(*ref["indptr"], 0).astype(np.uint64)
        vals = reference(raw, dt, lg, ind.size)
        return bool(
            np.array_equal(t.indices, ind) and np.array_equal(t.indptr, ptr)
            and _bytes_equal(t.data, vals)
        )  # fmt: skip
    coords = reference(*ref["coords"], 0).astype(np.uint64).reshape(len(shape), -1)
    vals = reference(raw, dt, lg, coords.shape[1])
    return bool(np.array_equal(t.coords, coords) and _bytes_equal(t.data, vals))


def check_file(path: Path, want: dict[str, Any], refused: bool) -> list[str]:
    """What tenfold reads of ``path`` that differs from what ztensor read (``[]``: exact)."""
    problems = []
    with zt.open(path, sparse="raw") as r:
        if sorted(r) != sorted(want["objects"]):
            problems.append(f"names {sorted(r)}")
        if not same_value(r.metadata, dict(want["attributes"] or {})):
            problems.append(f"attributes {r.metadata!r}")
        for name, obj in want["objects"].items():
            bad_object = refused and name != "dense"
            problems += check_object(r, name, obj, bad_object)
        report = r.verify()
    if report.ok != (not refused):  # 2.1.2 verified it; refused objects are reported
        problems.append("verify: " + report.format())
    return problems


def test_every_case_written(corpus: tuple[Path, dict[str, Any]]) -> None:
    _, result = corpus
    made = {k for k, v in result.items() if "write_error" not in v}
    optional = {c for c in CASES if c.startswith("convert_m_") and c != "convert_m_npz"}
    assert set(CASES) - optional <= made, {k: v for k, v in result.items() if "write_error" in v}
    assert made <= set(CASES), made - set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_tenfold_reads_reference_file(corpus: tuple[Path, dict[str, Any]], case: str) -> None:
    out, result = corpus
    if case not in result or "write_error" in result[case]:
        pytest.skip(f"{case}: the source format's writer is not installed")
    want = result[case]
    assert want["verified"] is not None, want.get("verify_error")  # 2.1.2 wrote and verified it
    assert check_file(out / f"{case}.zt", want, case in REFUSED) == []

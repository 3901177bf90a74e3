"""Round trips through openinfer-oinf 0.1.1 (the reference tooling), when it is installed."""

from __future__ import annotations

import contextlib
import dataclasses
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenfold import oinf

enc = pytest.importorskip("oinf_encoder", reason="openinfer-oinf 0.1.1 is not installed")
ref_verify = pytest.importorskip("oinf_verify", reason="openinfer-oinf 0.1.1 is not installed")

pytestmark = pytest.mark.peer

KINDS = [
    "i8",
    "i16",
    "i32",
    "i64",
    "u8",
    "u16",
    "u32",
    "u64",
    "f16",
    "f32",
    "f64",
    "bool",
    "bf16",
    "i4",
    "i2",
    "i1",
    "u4",
    "u2",
    "u1",
    "t2",
    "t1",
]
NP = {
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "bool": np.bool_,
}
RANGES = {
    "i4": (-8, 7),
    "i2": (-2, 1),
    "i1": (-1, 0),
    "u4": (0, 15),
    "u2": (0, 3),
    "u1": (0, 1),
    "t2": (-1, 1),
}


@dataclasses.dataclass
class _Model:
    sizevars: dict
    metadata: dict
    tensors: dict


def _random_model(rng, specs):
    """(reference inputs, tenfold inputs) for the same model."""
    ref_t, our_t = {}, {}
    for i, (kind, shape) in enumerate(specs):
        name = f"t.{i}"
        if kind in NP:
            if kind == "bool":
                a = rng.integers(0, 2, shape).astype(bool)
            elif kind.startswith(("f",)):
                a = rng.standard_normal(shape).astype(NP[kind])
            else:
                info = np.iinfo(NP[kind])
                a = rng.integers(info.min, info.max, shape, endpoint=True, dtype=NP[kind])
            ref_t[name], our_t[name] = a, a
        elif kind == "bf16":
            a = rng.standard_normal(shape).astype(np.float32)
            ref_t[name], our_t[name] = enc.TensorSpec(a, dtype="bf16"), oinf.Tensor(a, "bf16")
        else:
            if kind == "t1":
                a = rng.choice(np.array([-1, 1], np.int8), shape)
            else:
                lo, hi = RANGES[kind]
                a = rng.integers(lo, hi, shape, endpoint=True).astype(np.int8)
            ref_t[name], our_t[name] = enc.TensorSpec(a, dtype=kind), oinf.Tensor(a, kind)
    sizevars = {"B": int(rng.integers(0, 2**63)), "seq.len": 7}
    metadata = {
        "n": int(rng.integers(-(2**40), 2**40)),
        "eps": 0.25,
        "mode": "x-y_z.1",
        "flag": True,
        "lst": [int(v) for v in rng.integers(-300, 300, 4)],
        "arr": rng.standard_normal(3),
    }
    ref_m = dict(metadata)
    our_m = dict(metadata)
    return (
        _Model(sizevars, ref_m, ref_t),
        {"sizevars": sizevars, "metadata": our_m, "tensors": our_t},
    )


specs_st = st.lists(
    st.tuples(
        st.sampled_from(KINDS), st.lists(st.integers(1, 4), min_size=0, max_size=2).map(tuple)
    ),
    max_size=5,
)


@settings(max_examples=40)
@given(specs_st, st.integers(0, 2**32 - 1))
def test_reference_writer_to_tenfold_reader_and_byte_identity(tmp_path_factory, specs, seed):
    ref_model, ours = _random_model(np.random.default_rng(seed), specs)
    ref_bytes = enc.dataclass_to_oinf(ref_model)
    with oinf.open(ref_bytes) as r:
        assert r.sizevars == ours["sizevars"]
        md = r.metadata
        assert md["mode"] == "x-y_z.1" and md["flag"] is True and md["n"] == ours["metadata"]["n"]
        assert md["lst"].tolist() == ours["metadata"]["lst"]
        for name, value in ours["tensors"].items():
            data = value.data if isinstance(value, oinf.Tensor) else value
            got = r[name]
            if isinstance(value, oinf.Tensor) and value.dtype == "bf16":
                want = np.asarray(data).astype(np.float32).astype(got.dtype)
                assert got.view(np.uint16).tolist() == want.view(np.uint16).tolist()
            else:
                assert got.tolist() == np.asarray(data).tolist()
    p = tmp_path_factory.mktemp("peer") / "m.oinf"
    oinf.write(p, **ours)
    assert p.read_bytes() == ref_bytes  # no F8 in these models: identical bytes


@settings(max_examples=25)
@given(specs_st, st.integers(0, 2**32 - 1))
def test_tenfold_writer_to_reference_verifier(tmp_path_factory, specs, seed):
    _, ours = _random_model(np.random.default_rng(seed), specs)
    ours["tensors"] = {
        k: v
        for k, v in ours["tensors"].items()
        if not (isinstance(v, np.ndarray) and v.dtype == bool and v.ndim > 1)
    }
    ours["tensors"]["f8"] = oinf.Tensor([0.5, -2.0, 3.0], "f8")
    ours["tensors"]["none"] = oinf.Uninitialized("f32", (2, 3))
    p = tmp_path_factory.mktemp("peer") / "m.oinf"
    oinf.write(p, **ours)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ref_verify.parse_file(str(p))  # raises OinfError on anything it rejects
    assert 'mode: str = "x-y_z.1"' in out.getvalue()
    assert oinf.verify(p).ok

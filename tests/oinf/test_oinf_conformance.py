"""Reader and verifier against the conformance vectors of tests/conformance (read in place)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from _oinf_vectors import CORRUPT_V1, CORRUPT_V2, VALID_V1, VALID_V2, corrupt_path, sidecar

from tenfold import oinf
from tenfold.errors import FormatError, LimitError, TruncatedError, UnsupportedError

VALID = [("v1", n) for n in VALID_V1] + [("v2", n) for n in VALID_V2]


def _expected_array(t_or_v, dname):
    vals = t_or_v["values"]
    if dname in ("f16", "f32", "f64", "bf16", "f8"):
        bits = np.array(t_or_v["bits"], dtype=np.uint64)
        dt = {"f16": "<u2", "bf16": "<u2", "f8": "u1", "f32": "<u4", "f64": "<u8"}[dname]
        return bits.astype(dt)
    return np.array(vals)


def _flat(x):
    if not isinstance(x, list):
        return [x]
    return [v for item in x for v in _flat(item)]


def _bits_of(arr, dname):
    dt = {"f16": "<u2", "bf16": "<u2", "f8": "u1", "f32": "<u4", "f64": "<u8"}[dname]
    return np.ascontiguousarray(arr).view(dt)


@pytest.mark.parametrize("version, name", VALID)
def test_valid_vector_tables_and_values(conformance, version, name):
    path = conformance / "oinf" / version / f"{name}.oinf"
    j = sidecar(path)
    with oinf.open(path) as r:
        assert r.version == j["header"]["version"]
        assert r.sizevars == {s["name"]: s["value"] for s in j["sizevars"]}
        assert r.names == [t["name"] for t in j["tensors"]]
        assert r.uninitialized == [t["name"] for t in j["tensors"] if not t["has_data"]]
        for t in j["tensors"]:
            info = r.info(t["name"])
            assert (info.dtype, info.tag, list(info.shape)) == (
                t["dtype_name"],
                t["dtype"],
                t["dims"],
            )
            assert (info.has_data, info.data_offset, info.data_nbytes) == (
                t["has_data"],
                t["data_offset"],
                t["data_nbytes"],
            )
            assert info.entry_offset == t["entry_pos"]
            if not t["has_data"]:
                with pytest.raises(KeyError, match="declared without data"):
                    r[t["name"]]
                assert t["name"] not in r.tensors
                continue
            arr = r[t["name"]]
            assert list(arr.shape) == t["dims"]
            assert r.tensor(t["name"], packed=True).tobytes().hex() == t["payload_hex"]
            d = t["dtype_name"]
            if d in ("f16", "f32", "f64", "bf16", "f8"):
                assert (
                    _bits_of(arr, d).reshape(-1).tolist()
                    == _expected_array(t, d).reshape(-1).tolist()
                )
            else:
                assert arr.reshape(-1).tolist() == _flat(t["values"])
            if not info.packed:  # zero-copy, read-only
                assert not arr.flags.writeable
                assert not arr.flags.owndata or arr.size == 0
            else:
                assert arr.dtype == (np.int8 if d in ("i4", "i2", "i1", "t2", "t1") else np.uint8)
            if t.get("has_quant"):
                q, jq = info.quant, t["quant"]
                assert (q.scheme, q.scale_mode, q.zp_mode, q.scale_axis, q.zp_axis) == (
                    jq["scheme"],
                    jq["scale_mode"],
                    jq["zp_mode"],
                    jq["scale_axis"],
                    jq["zp_axis"],
                )
                assert q.scales.tolist() == jq["scale_values"]
                assert q.zero_points.tolist() == jq["zp_values"]
            else:
                assert info.quant is None
        md = r.metadata
        assert list(md) == [m["key"] for m in j["metadata"]]
        for m in j["metadata"]:
            got, v, tname = md[m["key"]], m["value"], m["value_type_name"]
            assert r.metadata_info(m["key"]).dtype == tname
            if tname == "str":
                assert got == v["text"]
            elif tname == "bitset":
                assert got.bit_count == v["bit_count"] and got.data.hex() == v["bytes_hex"]
                assert got.to_numpy().astype(int).tolist() == v["bits"]
            elif tname == "ndarray":
                et = v["element_type_name"]
                assert list(got.shape) == v["dims"]
                if et in ("f16", "f32", "f64", "bf16", "f8"):
                    assert (
                        _bits_of(got, et).reshape(-1).tolist()
                        == np.array(v["bits"], dtype=np.uint64).reshape(-1).tolist()
                    )
                else:
                    assert got.reshape(-1).tolist() == _flat(v["values"])
            elif tname in ("f16", "f32", "f64", "bf16", "f8"):
                assert isinstance(got, float)
                s = v["scalar"]
                assert got == s or (math.isnan(got) and s == "nan")
            else:
                assert got == v["scalar"] and type(got) is type(v["scalar"])


def test_f8_decode_is_bit_exact_including_nan(conformance):
    with oinf.open(conformance / "oinf/v1/91_valid_but_verifier_crashes_nonfinite.oinf") as r:
        for name in r:
            if r.info(name).dtype == "f8":
                arr = r[name]
                assert arr.dtype == ml_dtypes.float8_e5m2
                raw = r.tensor(name, packed=True)
                assert (arr.view(np.uint8) == raw).all()
                assert np.isnan(arr.astype(np.float32)).any()  # 0x7D is NaN, not inf


@pytest.mark.parametrize("version, name", VALID)
def test_valid_vectors_verify_clean(conformance, version, name):
    rep = oinf.verify(conformance / "oinf" / version / f"{name}.oinf")
    assert rep.ok, rep.format()
    assert not rep.warnings
    j = sidecar(conformance / "oinf" / version / f"{name}.oinf")
    for t in j["tensors"]:
        if t["has_data"]:
            st = rep.stats[t["name"]]
            assert st["dtype"] == t["dtype_name"] and st["shape"] == t["dims"]
            vals = (
                np.array(
                    [float(x) for x in np.array(t["values"], dtype=object).reshape(-1)],
                    dtype=np.float64,
                )
                if t["numel"]
                else np.zeros(0)
            )
            fin = vals[np.isfinite(vals)]
            assert st["nan"] == int(np.isnan(vals).sum())
            assert st["inf"] == int(np.isinf(vals).sum())
            if fin.size:
                assert st["min"] == fin.min() and st["max"] == fin.max()
                assert st["mean"] == pytest.approx(fin.mean(), rel=1e-9, abs=1e-12)
                assert st["std"] == pytest.approx(fin.std(), rel=1e-9, abs=1e-12)


# rule each corrupt vector must be reported under, and the reader's exception (None: opens).
RULES = {
    "c01": ("magic", FormatError),
    "c02": ("version", UnsupportedError),
    "c03": (None, FormatError),
    "c04": ("header-size", TruncatedError),
    "c05": ("file-size", TruncatedError),
    "c06": ("file-size", FormatError),
    "c07": ("section-aligned", FormatError),
    "c08": ("offsets-ascending", FormatError),
    "c09": ("data-offset-aligned", FormatError),
    "c10": ("data-bounds", TruncatedError),
    "c11": ("data-offset-region", FormatError),
    "c12": ("value-bounds", TruncatedError),
    "c13": ("value-offset-aligned", FormatError),
    "c14": ("name-charset", FormatError),
    "c15": ("name-charset", FormatError),
    "c16": ("name-charset", FormatError),
    "c17": ("name-charset", FormatError),
    "c18": ("name-empty", FormatError),
    "c19": ("data-nbytes", FormatError),
    "c20": ("data-nbytes", FormatError),
    "c21": ("data-nbytes", FormatError),
    "c22": ("duplicate-name", FormatError),
    "c23": ("nodata-zero", FormatError),
    "c24": ("metadata-flags", FormatError),
    "c25": ("bitset-tensor", None),
    "c26": ("tensor-dtype", UnsupportedError),
    "c27": ("metadata-type", UnsupportedError),
    "c28": ("string-nbytes", FormatError),
    "c29": ("bitset-byte-count", FormatError),
    "c30": ("ndarray-nbytes", FormatError),
    "c31": ("metadata-nbytes", FormatError),
    "c32": ("tensor-flags", None),
    "c33": ("padding", None),
    "c34": ("header-flags", None),
    "c35": ("t2-code", "access"),
    "c36": ("duplicate-name", FormatError),
    "c37": ("table-bounds", TruncatedError),
    "c38": ("tensor-ndim", LimitError),
    "c39": ("section-bounds", FormatError),
    "c40": ("tail-bits", None),
    "c41": ("quant-reserved", FormatError),
    "c42": ("quant-axis", FormatError),
    "c43": ("noquant-zero", FormatError),
    "w01": ("quant-reserved", FormatError),
}
CORRUPT = [("v1", c) for c in CORRUPT_V1] + [("v2", c) for c in CORRUPT_V2]


@pytest.mark.parametrize("version, prefix", CORRUPT)
def test_corrupt_vectors_flagged_with_rule_entry_offset(conformance, version, prefix):
    rule, _ = RULES[prefix]
    rep = oinf.verify(corrupt_path(conformance, version, prefix))
    flagged = [f for f in rep.findings if f.status in ("error", "warning")]
    assert flagged, rep.format()
    if prefix != "c25":
        assert not rep.ok
    for f in flagged:
        assert f.offset is not None and f.obj and f.obj != "file"
        assert "[" in f.message and "]" in f.message
    if rule is not None:
        assert any(f"[{rule}]" in f.message for f in flagged), rep.format()
    if prefix == "c33":  # header, string and payload padding each reported
        assert {f.obj.split()[0] for f in flagged} >= {"header", "tensor", "data"} or len(
            flagged
        ) >= 3
    if prefix == "c34":
        assert any("[header-reserved]" in f.message for f in flagged)


@pytest.mark.parametrize("version, prefix", CORRUPT)
def test_corrupt_vectors_reader(conformance, version, prefix):
    _, exc = RULES[prefix]
    if version == "v2" and prefix == "c32":
        exc = FormatError  # v2 defines the flag bits: unknown ones are rejected
    path = corrupt_path(conformance, version, prefix)
    if exc is None:
        with oinf.open(path) as r:
            r.load()
            assert isinstance(r.metadata, dict)
    elif exc == "access":
        with oinf.open(path) as r, pytest.raises(FormatError, match=r"0b10 \[t2-code\]"):
            r.load()
    else:
        with pytest.raises(exc):
            oinf.open(path)


def test_c25_bitset_tensor_is_read_one_byte_per_element(conformance):
    with oinf.open(corrupt_path(conformance, "v1", "c25")) as r:
        info = r.info("c.mask")
        assert info.dtype == "bitset"
        arr = r["c.mask"]
        assert arr.dtype == np.uint8 and arr.size == info.numel == info.data_nbytes


def test_messages_name_entry_offset_and_values(conformance):
    with pytest.raises(FormatError) as ei:
        oinf.open(corrupt_path(conformance, "v1", "c19"))
    msg = str(ei.value)
    assert msg.startswith("oinf: tensor 'i4_9' at offset 0x")
    assert "expected 5, got 4" in msg
    assert ei.value.rule == "data-nbytes"

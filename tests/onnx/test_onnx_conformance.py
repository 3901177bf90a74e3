"""ONNX initializers read by tenfold's own protobuf walk, differential against ``onnx``
(``numpy_helper.to_array``) on models ``onnx.helper`` builds: every element type in
``raw_data`` and in its typed field, unpacked typed fields (which ``onnx`` never writes but a
protobuf reader must accept), external data, sparse initializers, metadata, and the front door
(detect, open, load, safe_open, tenfold.torch, inspect, verify, convert, diff)."""

from __future__ import annotations

import json
import struct

import _onnx_models as M
import numpy as np
import pytest

import tenfold
import tenfold.convert
import tenfold.registry as registry
from tenfold.cli import main as cli
from tenfold.errors import FormatError, UnsupportedError
from tenfold.formats import onnx as onnx_reader

onnx = M.onnx
helper, numpy_helper, TensorProto = M.helper, M.numpy_helper, M.TensorProto


def _save(m, path, **kw):
    onnx.save_model(m, str(path), **kw)
    return path


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed"])
@pytest.mark.parametrize("type_name", M.ALL_TYPES)
def test_every_element_type(tmp_path, type_name, raw):
    shapes = {"t0": [3, 5], "t1": [7], "t2": [], "t3": [2, 0, 4]}
    m = M.model([M.tensor(n, type_name, d, raw, seed=i) for i, (n, d) in enumerate(shapes.items())])
    assert bool(m.graph.initializer[0].raw_data) == raw
    p = _save(m, tmp_path / "m.onnx")
    want = M.reference(m)
    with tenfold.open(p) as r:
        assert list(r) == list(shapes)
        for n in shapes:
            M.same(r[n], want[n], n)
            assert r.info(n).dtype == type_name
            assert r.info(n).np_dtype == want[n].dtype


def test_unpacked_and_mixed_typed_fields(tmp_path):
    # onnx writes [packed = true] fields packed; a protobuf reader must take both forms
    f32 = [1.5, -2.0, 3.25]
    floats = b"".join(M.field(4, 5, struct.pack("<f", v)) for v in f32)
    ints = M.field(7, 2, M.varint(5) + M.varint(-7)) + M.field(7, 0, 2**63 - 1)
    i8 = M.field(5, 0, -128) + M.field(5, 2, M.varint(127) + M.varint(0))
    dbl = M.field(10, 1, struct.pack("<d", 0.5)) + M.field(10, 2, struct.pack("<2d", 1, 2))
    u32 = M.field(11, 0, 2**32 - 1) + M.field(11, 2, M.varint(0))
    dims_packed = M.field(1, 2, M.varint(1) + M.varint(3)) + M.field(2, 0, 1) + M.field(8, 2, b"p")
    data = M.raw_model(
        M.raw_tensor("f", 1, [3], floats),
        M.raw_tensor("i", 7, [3], ints),
        M.raw_tensor("b", 3, [3], i8),
        M.raw_tensor("d", 11, [3], dbl),
        M.raw_tensor("u", 12, [2], u32),
        dims_packed + M.field(4, 2, struct.pack("<3f", 1, 2, 3)),
    )
    got = tenfold.load(data)
    assert got["f"].tolist() == f32 and got["f"].dtype == np.float32
    assert got["i"].tolist() == [5, -7, 2**63 - 1] and got["i"].dtype == np.int64
    assert got["b"].tolist() == [-128, 127, 0] and got["b"].dtype == np.int8
    assert got["d"].tolist() == [0.5, 1.0, 2.0]
    assert got["u"].tolist() == [2**32 - 1, 0] and got["u"].dtype == np.uint32
    assert got["p"].shape == (1, 3)
    # what onnx reads from the same bytes
    m = onnx.load_from_string(data)
    for t in m.graph.initializer:
        M.same(got[t.name], numpy_helper.to_array(t), t.name)


def test_external_data_and_large_initializers(tmp_path):
    big = np.random.default_rng(3).standard_normal((1024, 1031)).astype(np.float32)
    inits = [
        numpy_helper.from_array(big, "big"),
        M.tensor("bf", "BFLOAT16", [300, 7], True),
        M.tensor("i4", "INT4", [301], True),
        M.tensor("small", "INT64", [3], True),
    ]
    m = M.model(inits)
    p = _save(
        m,
        tmp_path / "m.onnx",
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=64,
    )
    want = M.reference(onnx.load(str(p)))
    with tenfold.open(p) as r:
        assert r.info("big").encoding == "external" and r.info("small").encoding == "raw"
        assert r.info("big").extras["external_location"] == "weights.bin"
        for n in want:
            M.same(r[n], want[n], n)
        v = r["big"]
        assert not v.flags.writeable
        assert not v.flags.owndata  # a view of the mapped external file (onnx aligns it)
        assert r.verify().ok
    M.same(tenfold.load(p, copy=True)["big"], big, "big")
    # a large initializer inside the model file itself
    q = _save(M.model([numpy_helper.from_array(big, "big")]), tmp_path / "inline.onnx")
    with tenfold.open(q) as r:
        M.same(r["big"], big, "big")
        span = r.span("big")
        assert span is not None and span.shape == big.shape
        assert r.read_raw("big").tobytes() == big.tobytes()


def test_zero_copy_only_when_aligned(tmp_path):
    a = np.arange(16, dtype=np.float32)
    for pad in range(4):  # the name's length moves raw_data's offset
        name = "w" + "x" * pad
        data = M.raw_model(M.raw_tensor(name, 1, [16], M.field(9, 2, a.tobytes())))
        p = tmp_path / f"m{pad}.onnx"
        p.write_bytes(data)
        with tenfold.open(p) as r:
            off = r.info(name).byte_range[0]
            v = r[name]
            assert v.tolist() == a.tolist() and not v.flags.writeable or off % 4
            assert v.flags.owndata == bool(off % 4), (off, pad)


def test_sparse_initializers(tmp_path):
    vals = numpy_helper.from_array(np.array([1.5, 2.5, -1], np.float32), "s")
    linear = helper.make_sparse_tensor(
        vals, numpy_helper.from_array(np.array([1, 7, 9], np.int64), "i"), [2, 5]
    )
    vals2 = numpy_helper.from_array(np.array([4, 5], np.int32), "c")
    coords = helper.make_sparse_tensor(
        vals2, numpy_helper.from_array(np.array([[0, 1], [2, 0]], np.int64), "j"), [3, 2]
    )
    m = M.model([M.tensor("d", "FLOAT", [2], True)], [linear, coords])
    p = _save(m, tmp_path / "m.onnx")
    want = M.reference(m)
    with tenfold.open(p) as r:
        assert list(r) == ["d", "s", "c"]
        for n in want:
            M.same(r[n], want[n], n)
        assert r.info("s").encoding == "sparse" and r.info("s").extras["nnz"] == 3


def test_metadata(tmp_path):
    m = M.model(
        [M.tensor("w", "FLOAT", [2], True)],
        props={"author": "me", "ir_version": "x"},
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.x", 2)],
    )
    m.doc_string = "a test model"
    m.model_version = 3
    m.producer_version = "1.0"
    p = _save(m, tmp_path / "m.onnx")
    with tenfold.open(p) as r:
        md = r.metadata
    assert md == {
        "ir_version": str(m.ir_version),
        "producer_name": "tenfold-test",
        "producer_version": "1.0",
        "model_version": "3",
        "doc_string": "a test model",
        "graph_name": "g",
        "opset_import": "ai.onnx:17,ai.x:2",
        "author": "me",
        "metadata_props:ir_version": "x",
    }


def test_front_door(tmp_path, capsys):
    inits = [
        M.tensor("w", "FLOAT", [4, 3], True),
        M.tensor("h", "FLOAT16", [5], False),
        M.tensor("b", "BFLOAT16", [2, 2], True),
        M.tensor("n", "INT64", [], False),
    ]
    m = M.model(inits, props={"author": "me"})
    p = _save(m, tmp_path / "m.onnx")
    want = M.reference(m)
    assert tenfold.detect(p) == "onnx"
    misnamed = tmp_path / "model.bin"
    misnamed.write_bytes(p.read_bytes())
    assert tenfold.detect(misnamed) == "onnx"
    got = tenfold.load(p)
    for n in want:
        M.same(got[n], want[n], n)
    with tenfold.safe_open(p, framework="np") as f:
        assert sorted(f.keys()) == sorted(want)
        M.same(f.get_tensor("w"), want["w"], "w")
        assert f.metadata()["author"] == "me"
        assert f.get_slice("w")[1:3].tolist() == want["w"][1:3].tolist()
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import tenfold.torch as tt

    sd = tt.load_file(p)
    assert sd["b"].dtype == torch.bfloat16 and sd["w"].shape == (4, 3)
    assert cli(["inspect", "--json", str(p)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "onnx" and {o["name"] for o in doc["objects"]} == set(want)
    assert cli(["verify", str(p)]) == 0
    capsys.readouterr()
    for dst in ("c.safetensors", "c.zt"):
        out = tmp_path / dst
        tenfold.convert.convert(p, out)
        back = tenfold.load(out)
        for n in want:
            M.same(back[n], want[n], f"{dst}:{n}")
        with tenfold.open(out) as r:
            assert r.metadata["author"] == "me" and r.metadata["producer_name"] == "tenfold-test"
        assert tenfold.diff(p, out).identical
    assert cli(["convert", str(p), str(tmp_path / "d.safetensors")]) == 0


def test_external_data_conversion_is_bit_exact(tmp_path):
    inits = [
        M.tensor(f"w{i}", t, [33, 17], True, seed=i)
        for i, t in enumerate(["FLOAT", "FLOAT16", "INT8", "DOUBLE"])
    ]
    p = _save(
        M.model(inits),
        tmp_path / "m.onnx",
        save_as_external_data=True,
        location="m.data",
        size_threshold=0,
    )
    want = M.reference(onnx.load(str(p)))
    for dst in ("x.safetensors", "x.zt"):
        tenfold.convert.convert(p, tmp_path / dst)
        back = tenfold.load(tmp_path / dst)
        assert sorted(back) == sorted(want)
        for n in want:
            M.same(back[n], want[n], n)


def test_string_initializers_are_refused_by_name(tmp_path):
    s = helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"b"])
    p = _save(M.model([s, M.tensor("w", "FLOAT", [2], True)]), tmp_path / "m.onnx")
    with tenfold.open(p) as r:
        assert r["w"].shape == (2,)
        assert r.info("s").dtype == "STRING"
        with pytest.raises(UnsupportedError, match="initializer 's'.*STRING"):
            r["s"]
        assert not r.verify().ok


def test_sniff_claims_no_other_format(tmp_path):
    fmt = registry.get("onnx")
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.int64)}
    for target in registry.targets():
        for suffix in target.suffixes:
            out = tmp_path / f"x{suffix}"
            try:
                tenfold.save(out, tensors)
            except Exception:  # noqa: BLE001 - a format that holds other things
                continue
            head = out.read_bytes()[: registry.SNIFF_BYTES]
            assert not fmt.sniff(head), suffix
            assert tenfold.detect(out) == target.name
    assert not fmt.sniff(b"\x08\x00rest of it")  # ir_version 0 is no model
    assert not fmt.sniff(b"\x08\x08\x08\x01")  # ir_version twice: not a model's order
    assert fmt.sniff(M.raw_model(M.raw_tensor("w", 1, [1], M.field(4, 5, b"\0" * 4))))


def test_buffer_and_remote_sources_refuse_external_data(tmp_path):
    p = _save(
        M.model([M.tensor("w", "FLOAT", [64], True)]),
        tmp_path / "m.onnx",
        save_as_external_data=True,
        location="m.data",
        size_threshold=0,
    )
    with onnx_reader.open(p.read_bytes()) as r:
        with pytest.raises(UnsupportedError, match="not opened from a local path"):
            r["w"]


def test_save_is_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="writes none"):
        onnx_reader.save(tmp_path / "x.onnx", {"a": np.ones(2)})
    with pytest.raises(FormatError):
        tenfold.save(tmp_path / "y.onnx", {"a": np.ones(2)})
    assert not (tmp_path / "y.onnx").exists()


def test_follows_links_descriptor():
    assert registry.get("onnx").follows_links
    assert registry.get("onnx").package == "tenfold.formats.onnx"

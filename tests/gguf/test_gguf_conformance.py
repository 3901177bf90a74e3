"""GGUF files written by the ``gguf`` package (llama.cpp's writer), read by tenfold and compared
with the package's own reader (``gguf.GGUFReader``): names, shapes, types, bytes, metadata."""

from __future__ import annotations

import numpy as np
import pytest
from _gguf_files import all_value_types, f32, nested_flat, write_gguf

import tenfold
from tenfold.core.dtypes import BFLOAT16

gguf = pytest.importorskip("gguf", reason="the gguf package (the peers extra) is not installed")
G = gguf.GGMLQuantizationType

UNQUANTISED = {
    "f32": np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5,
    "f16": np.linspace(-2, 2, 10, dtype=np.float16).reshape(5, 2),
    "f64": np.array([[1e300, -0.0, np.inf]], np.float64),
    "i8": np.array([-128, 0, 127], np.int8),
    "i16": np.array([[-32768], [32767]], np.int16),
    "i32": np.arange(-3, 3, dtype=np.int32).reshape(3, 2),
    "i64": np.array([-(2**63), 2**63 - 1], np.int64),
    "scalar": np.array(2.5, np.float32),
    "empty": np.zeros((0, 4), np.float32),
}
#: types the gguf package quantises itself (the others are written as random blocks)
QUANTISABLE = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4"]
RAW_ONLY = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS",
            "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "IQ1_M"]  # fmt: skip


def _bf16() -> tuple[np.ndarray, np.ndarray]:
    x = (np.arange(64, dtype=np.float32) - 20).reshape(2, 32) / 8
    return x.astype(BFLOAT16), gguf.quants.quantize(x, G.BF16)


def _quantised(name: str, rows: int = 2, seed: int = 0) -> np.ndarray:
    qt = getattr(G, name)
    block, size = gguf.GGML_QUANT_SIZES[qt]
    if name in QUANTISABLE:
        return gguf.quants.quantize(f32(rows * block * 2, seed).reshape(rows, 2 * block), qt)
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (rows, 2 * size), dtype=np.uint8)


@pytest.fixture
def model(tmp_path):
    want_bf16, raw_bf16 = _bf16()
    tensors = dict(UNQUANTISED)
    tensors["bf16"] = (raw_bf16, G.BF16)
    for i, name in enumerate(QUANTISABLE + RAW_ONLY):
        tensors[f"q.{name}"] = (_quantised(name, seed=i), getattr(G, name))
    path = write_gguf(tmp_path / "m.gguf", tensors, all_value_types)
    return path, want_bf16


def test_every_unquantised_type_is_a_view(model):
    path, want_bf16 = model
    with tenfold.open(path) as r:
        assert r.version == 3 and tenfold.detect(path) == "gguf"
        for name, want in UNQUANTISED.items():
            got = r[name]
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert got.tobytes() == want.tobytes(), name
            assert not got.flags.writeable
            if got.size:
                assert r.span(name) == (r.info(name).byte_range[0], want.dtype, want.shape)
        assert r["bf16"].dtype == BFLOAT16
        assert r["bf16"].tobytes() == want_bf16.tobytes()
        assert r.info("bf16").dtype == "BF16" and r.info("f16").dtype == "F16"


@pytest.mark.parametrize("name", QUANTISABLE + RAW_ONLY)
def test_quantised_blocks_are_their_raw_bytes(model, name):
    path, _ = model
    peer = gguf.GGUFReader(str(path))
    theirs = next(t for t in peer.tensors if t.name == f"q.{name}")
    with tenfold.open(path) as r:
        got = r[f"q.{name}"]
        info = r.info(f"q.{name}")
        qt = getattr(G, name)
        block, size = gguf.GGML_QUANT_SIZES[qt]
        # one record per block, the dtype named after the type: never bytes of another dtype
        assert got.dtype.names == (name,) and got.dtype.itemsize == size
        assert got.shape == (2, 2) and info.shape == (2, 2)
        assert info.dtype == name and info.extras["shape"] == (2, 2 * block)
        assert info.extras["ne"] == tuple(int(d) for d in theirs.shape)
        assert np.array_equal(got.view(np.uint8), theirs.data)
        assert r.span(f"q.{name}") is None
        assert info.byte_range == (theirs.data_offset, theirs.data_offset + theirs.n_bytes)


def test_differential_against_gguf_reader(model):
    path, _ = model
    peer = gguf.GGUFReader(str(path))
    with tenfold.open(path) as r:
        assert list(r) == [t.name for t in peer.tensors]
        assert r.data_offset == peer.data_offset and r.alignment == peer.alignment
        for t in peer.tensors:
            info = r.info(t.name)
            assert info.dtype == t.tensor_type.name
            assert info.extras["ne"] == tuple(int(d) for d in t.shape)
            assert info.extras["shape"] == tuple(int(d) for d in reversed(t.shape))
            assert r.read_raw(t.name).tobytes() == t.data.tobytes()
        md = r.metadata
        peer_keys = [k for k in peer.fields if not k.startswith("GGUF.")]
        assert list(md) == peer_keys
        for k in peer_keys:
            f = peer.fields[k]
            want = f.contents()
            got = md[k]
            if r.metadata_type(k).startswith("array[array"):
                got = nested_flat(got)
            if _floats(want):
                assert np.array_equal(np.float64(got), np.float64(want)), k
            else:
                assert got == want, k
            assert r.metadata_type(k) == _peer_type(f.types), k


def _floats(v) -> bool:
    return isinstance(v, float) or bool(v) and isinstance(v, list) and isinstance(v[0], float)


def _peer_type(types) -> str:
    t = types[0].name.lower()
    return f"array[{_peer_type(types[1:])}]" if t == "array" else t


def test_metadata_of_every_value_type(model):
    path, _ = model
    with tenfold.open(path) as r:
        md, types = r.metadata, {k: r.metadata_type(k) for k in r.metadata}
    assert md["t.u8"] == 255 and types["t.u8"] == "uint8"
    assert md["t.i8"] == -128 and types["t.i8"] == "int8"
    assert md["t.u16"] == 65535 and types["t.u16"] == "uint16"
    assert md["t.i16"] == -32768 and types["t.i16"] == "int16"
    assert md["t.u32"] == 2**32 - 1 and types["t.u32"] == "uint32"
    assert md["t.i32"] == -(2**31) and types["t.i32"] == "int32"
    assert md["t.f32"] == 1.5 and types["t.f32"] == "float32"
    assert md["t.bool"] is True and types["t.bool"] == "bool"
    assert md["t.str"] == "héllo \u2603" and types["t.str"] == "string"
    assert md["t.u64"] == 2**64 - 1 and types["t.u64"] == "uint64"
    assert md["t.i64"] == -(2**63) and types["t.i64"] == "int64"
    assert md["t.f64"] == -0.1 and types["t.f64"] == "float64"
    assert md["t.arr_i32"] == [1, -2, 3] and types["t.arr_i32"] == "array[int32]"
    assert md["t.arr_str"] == ["a", "", "\u00e9t\u00e9"] and types["t.arr_str"] == "array[string]"
    assert md["t.arr_bool"] == [True, False, True] and types["t.arr_bool"] == "array[bool]"
    assert md["t.arr_nested"] == [[1, 2], [3]]
    assert types["t.arr_nested"] == "array[array[int32]]"
    assert md["t.arr_u64"] == [0, 2**64 - 1] and md["t.arr_f64"] == [1e300, -2.5]
    assert md["general.architecture"] == "test"
    import json

    json.dumps(md)  # JSON values throughout


@pytest.mark.parametrize("alignment", [1, 8, 64, 4096])
def test_other_alignments(tmp_path, alignment):
    tensors = {"a": np.arange(3, dtype=np.float32), "b": np.arange(5, dtype=np.int16)}
    path = write_gguf(tmp_path / "a.gguf", tensors, alignment=alignment)
    peer = gguf.GGUFReader(str(path))
    with tenfold.open(path) as r:
        assert r.alignment == alignment and r.metadata["general.alignment"] == alignment
        assert r.data_offset == peer.data_offset and r.data_offset % alignment == 0
        for name, want in tensors.items():
            assert r[name].tobytes() == want.tobytes()
            assert r.info(name).byte_range[0] % alignment == 0


def test_version_2_reads_as_version_3(tmp_path):
    """The gguf writer writes v3; v2's layout is the same for a little-endian file, so the
    version field is set to 2 (the gguf package reads that too)."""
    path = write_gguf(tmp_path / "v3.gguf", {"w": np.arange(4, dtype=np.float32)}, all_value_types)
    data = bytearray(path.read_bytes())
    data[4:8] = (2).to_bytes(4, "little")
    v2 = tmp_path / "v2.gguf"
    v2.write_bytes(bytes(data))
    assert gguf.GGUFReader(str(v2)).fields["GGUF.version"].contents() == 2
    with tenfold.open(v2) as r2, tenfold.open(path) as r3:
        assert (r2.version, r3.version) == (2, 3)
        assert r2.metadata == r3.metadata
        assert r2["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_dequantize(tmp_path):
    names = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K")
    tensors = {name: (_quantised(name), getattr(G, name)) for name in names}
    tensors["f"] = np.arange(4, dtype=np.float16)
    path = write_gguf(tmp_path / "q.gguf", tensors)
    peer = gguf.GGUFReader(str(path))
    with tenfold.open(path, dequantize=True) as r:
        for t in peer.tensors:
            if t.name in ("f", "Q2_K"):
                continue
            want = gguf.quants.dequantize(t.data, t.tensor_type)
            got = r[t.name]
            assert got.dtype == np.float32 and got.shape == want.shape == (2, 64)
            assert got.tobytes() == want.astype(np.float32).tobytes(), t.name
            assert r.info(t.name).np_dtype == np.float32 and r.info(t.name).shape == (2, 64)
            assert r.read(t.name, (1, slice(0, 3))).tolist() == want[1, :3].tolist()
        assert r["f"].dtype == np.float16  # unquantised: as stored
        with pytest.raises(tenfold.errors.UnsupportedError, match="Q2_K"):
            r["Q2_K"]
    seen = []

    def mine(type_name, blocks, shape):
        seen.append((type_name, blocks.dtype, blocks.size, shape))
        return np.zeros(shape, np.float32)

    with tenfold.open(path, dequantize=mine) as r:
        assert r["Q2_K"].shape == (2, 512)
    assert seen == [("Q2_K", np.uint8, 2 * 2 * 84, (2, 512))]

"""tenfold's safetensors writer against ``safetensors.numpy.save`` (byte identity)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenfold.core.dtypes import FLOAT4_E2M1, FLOAT8_E8M0
from tenfold.errors import EncodeError
from tenfold.interop import read_safetensors, write_safetensors
from tenfold.interop.safetensors import DTYPES, PACKED_BITS, pack_f4, parse, to_bytes

peer = pytest.importorskip("safetensors.numpy", reason="safetensors (peer) not installed")

TAGS = [t for t in DTYPES if t not in PACKED_BITS]


@st.composite
def models(draw):
    out = {}
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.text(max_size=10))
        if name == "__metadata__":
            continue
        dt = DTYPES[draw(st.sampled_from(TAGS))]
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        numel = int(np.prod(shape))
        raw = draw(st.binary(min_size=numel * dt.itemsize, max_size=numel * dt.itemsize))
        out[name] = np.frombuffer(raw, np.uint8).view(dt).reshape(shape)
        if draw(st.booleans()) and dt.itemsize > 1:  # big-endian input: both byte-swap
            out[name] = out[name].astype(dt.newbyteorder(">"))
    md = draw(st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=1))
    return out, md


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(models())
def test_bytes_identical_to_the_package(model):
    tensors, md = model
    if not tensors and md == {}:
        return  # the package writes `{},"__metadata__":{}}` here: invalid JSON (its bug)
    ours = to_bytes(tensors, md)
    assert ours == peer.save(tensors, metadata=md)
    back = parse(ours)
    for k, v in tensors.items():
        assert back[k].shape == v.shape
        assert back[k].dtype == v.dtype.newbyteorder("<") or back[k].dtype == v.dtype
        assert back[k].tobytes() == np.ascontiguousarray(v, back[k].dtype).tobytes()


def test_order_by_dtype_rank_then_name():
    # same item size, different dtypes: the package orders by its dtype enum, not by name
    t = {"a": np.zeros(2, np.int16), "b": np.zeros(2, np.float16), "c": np.zeros(2, np.uint16)}
    assert to_bytes(t) == peer.save(t)
    head = to_bytes(t)[8:].split(b"}}")[0]
    assert head.index(b'"b"') < head.index(b'"c"') < head.index(b'"a"')


def test_zero_d_keeps_its_shape(tmp_path):
    t = {"num_batches_tracked": np.array(7, np.int64), "e": np.zeros((0, 3), np.float32)}
    write_safetensors(tmp_path / "s.safetensors", t)
    back = read_safetensors(tmp_path / "s.safetensors")
    assert back["num_batches_tracked"].shape == ()
    assert back["e"].shape == (0, 3)
    assert (tmp_path / "s.safetensors").read_bytes() == peer.save(t)


def test_metadata_many_keys_same_content():
    # the package emits __metadata__ in hash order (varies per run); tenfold sorts the keys
    import json

    t = {"x": np.ones(3, np.float32)}
    md = {"b": "1", "a": "2", "zz": "3"}
    ours, theirs = to_bytes(t, md), peer.save(t, metadata=md)
    assert len(ours) == len(theirs) and ours[-12:] == theirs[-12:]
    n = int.from_bytes(ours[:8], "little")
    assert json.loads(ours[8 : 8 + n]) == json.loads(theirs[8 : 8 + n])
    assert list(json.loads(ours[8 : 8 + n])["__metadata__"]) == ["a", "b", "zz"]


def test_f4_and_e8m0_read_and_write_like_the_package(tmp_path):
    from safetensors import TensorSpec, serialize

    vals = np.arange(12, dtype=np.uint8).view(FLOAT4_E2M1).reshape(2, 6)
    scales = np.array([1, 2, 127, 254], np.uint8).view(FLOAT8_E8M0)
    packed = pack_f4(vals)
    assert packed.tolist() == [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA]
    specs = {
        "w": TensorSpec(dtype="float4_e2m1fn_x2", shape=[2, 3], data_ptr=packed.ctypes.data,
                        data_len=6),
        "s": TensorSpec(dtype="float8_e8m0fnu", shape=[4], data_ptr=scales.ctypes.data,
                        data_len=4),
    }  # fmt: skip
    theirs = bytes(serialize(specs, None))
    assert to_bytes({"w": vals, "s": scales}) == theirs
    p = tmp_path / "mx.safetensors"
    p.write_bytes(theirs)
    back = read_safetensors(p)
    assert back["w"].dtype == FLOAT4_E2M1 and back["w"].shape == (2, 6)
    assert back["w"].view(np.uint8).tolist() == vals.view(np.uint8).tolist()
    assert back["s"].dtype == FLOAT8_E8M0 and back["s"].view(np.uint8).tolist() == [1, 2, 127, 254]


def test_f4_odd_count_refused_before_writing(tmp_path):
    with pytest.raises(EncodeError, match="F4 packs 2 elements per byte"):
        write_safetensors(tmp_path / "x.safetensors", {"w": np.zeros(3, FLOAT4_E2M1)})
    assert not (tmp_path / "x.safetensors").exists()


def test_unsupported_dtype_names_the_formats_that_can(tmp_path):
    # (it said "no format tenfold writes can": zTensor v2 holds complex128)
    can = r"formats that can: \.zt \(zt_generation=2\)$"
    with pytest.raises(EncodeError, match=r"tensor 'c' has dtype complex128.*" + can):
        write_safetensors(tmp_path / "x.safetensors", {"c": np.zeros(2, np.complex128)})
    assert list(tmp_path.iterdir()) == []


@st.composite
def models_with_f4(draw):
    out = {}
    for i in range(draw(st.integers(1, 5))):
        tag = draw(st.sampled_from(["F4", "F4", "BF16", "F8_E8M0", "U8", "I64", "BOOL"]))
        dt = DTYPES[tag]
        rows, half = draw(st.integers(0, 3)), draw(st.integers(0, 3))
        shape = (rows, 2 * half)  # F4 needs whole bytes: an even last dimension
        numel = rows * 2 * half
        raw = np.frombuffer(
            draw(st.binary(min_size=numel * dt.itemsize, max_size=numel * dt.itemsize)), np.uint8
        ).copy()
        if tag == "F4":
            raw &= 0x0F
        if tag == "BOOL":
            raw &= 1
        out[f"t{i}.{tag}"] = raw.view(dt).reshape(shape)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(models_with_f4())
def test_f4_models_identical_to_the_package_serializer(tensors):
    from safetensors import TensorSpec, serialize

    keep, specs = [], {}
    for name, a in tensors.items():
        if a.dtype == FLOAT4_E2M1:
            buf = pack_f4(a)
            shape = list(a.shape[:-1]) + [a.shape[-1] // 2]
            dtype = "float4_e2m1fn_x2"
        else:
            buf, shape, dtype = np.ascontiguousarray(a), list(a.shape), a.dtype.name
        keep.append(buf)
        specs[name] = TensorSpec(dtype=dtype, shape=shape, data_ptr=buf.ctypes.data,
                                 data_len=buf.nbytes)  # fmt: skip
    ours = to_bytes(tensors)
    assert ours == bytes(serialize(specs, None))
    back = parse(ours)
    for k, v in tensors.items():
        assert back[k].shape == v.shape and back[k].tobytes() == v.tobytes()

"""Differential tests: every tensor tenfold reads from a file ``torch.save`` wrote equals what
``torch.load(path, weights_only=True)`` gives (dtype, shape, strides as a view, bytes), for
state dicts of real ``torch.nn`` models, optimizer state, non-contiguous views, every dtype
torch.save writes that NumPy holds, both layouts and every pickle protocol; and the names and
metadata follow the documented flattening."""

from __future__ import annotations

import base64
import math
import warnings

import numpy as np
import pytest

import tenfold
import tenfold.convert
from tenfold.errors import EncodeError, UnsupportedError

torch = pytest.importorskip("torch", reason="the differential tests need torch (the peer)")


def _bytes(t) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _ref_flatten(obj, path=None, tensors=None, meta=None):
    """The documented naming rules, applied to what torch.load gives."""
    tensors = {} if tensors is None else tensors
    meta = {} if meta is None else meta

    def holds(v):
        if torch.is_tensor(v):
            return True
        if isinstance(v, dict):
            return any(holds(c) for c in v.values())
        if isinstance(v, (list, tuple)):
            return any(holds(c) for c in v)
        return False

    def js(v):
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if v != v else ("inf" if v > 0 else "-inf")
        if isinstance(v, bytes):
            return {"base64": base64.b64encode(v).decode()}
        if isinstance(v, torch.dtype):
            return str(v)
        if isinstance(v, dict):
            return {(k if isinstance(k, str) else str(k)): js(c) for k, c in v.items()}
        if isinstance(v, (list, tuple, set, frozenset)):
            return [js(c) for c in v]
        return v

    if torch.is_tensor(obj):
        tensors["tensor" if path is None else path] = obj
    elif isinstance(obj, (dict, list, tuple)) and holds(obj):
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for k, c in items:
            part = k if isinstance(k, str) else str(k)
            _ref_flatten(c, part if path is None else f"{path}.{part}", tensors, meta)
    else:
        meta["value" if path is None else path] = js(obj)
    return tensors, meta


def _check(path, *, ours=False):
    """tenfold's reading of ``path`` against torch.load's; returns the reader's arrays.

    ``ours``: a file this test wrote with a pickle protocol above 2, whose FRAME and
    SHORT_BINBYTES opcodes torch's weights-only unpickler does not take (torch 2.13): the
    reference is then torch.load(weights_only=False) of that file, which the test made."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
        want = torch.load(path, weights_only=not ours)
    ref_tensors, ref_meta = _ref_flatten(want)
    assert tenfold.detect(path) == "torchpickle"
    with tenfold.open(path) as r:
        assert list(r) == list(ref_tensors)
        assert r.metadata == ref_meta
        got = {}
        for name, t in ref_tensors.items():
            a = r[name]
            info = r.info(name)
            assert info.dtype == str(t.dtype).removeprefix("torch."), name
            assert a.shape == tuple(t.shape), name
            assert not a.flags.writeable, name
            if t.numel():
                assert a.strides == tuple(s * a.itemsize for s in t.stride()), name
            assert np.ascontiguousarray(a).tobytes() == _bytes(t), name
            got[name] = a
    return got


def test_a_transformer_with_tied_weights(tmp_path):
    torch.manual_seed(0)

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 16)
            self.block = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
            self.norm = torch.nn.LayerNorm(16)
            self.head = torch.nn.Linear(16, 50, bias=False)
            self.head.weight = self.embed.weight  # tied

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested-tensor advice of TransformerEncoderLayer
        m = LM()
    p = tmp_path / "pytorch_model.bin"
    torch.save(m.state_dict(), p)
    got = _check(p)
    assert np.shares_memory(got["embed.weight"], got["head.weight"])  # one storage, one view
    with tenfold.open(p) as r:  # torch.save aligns every storage to 64 bytes: aligned views
        assert all(r.span(k).offset % 64 == 0 for k in r) and all(
            a.flags.aligned for a in got.values()
        )
        assert r.verify().ok
    assert got["block.self_attn.in_proj_weight"].shape == (48, 16)


def test_a_conv_net_with_batchnorm(tmp_path):
    torch.manual_seed(1)
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10),
    )  # fmt: skip
    m(torch.randn(2, 3, 6, 6))  # running stats move, num_batches_tracked is a 0-d int64
    p = tmp_path / "conv.pth"
    torch.save(m.state_dict(), p)
    got = _check(p)
    assert got["1.num_batches_tracked"].shape == () and got["1.num_batches_tracked"] == 1


def test_non_contiguous_views_stay_views(tmp_path):
    x = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    sd = {
        "t": x.t(), "rows": x[1:4], "cols": x[:, 2:7], "step": x[::2, ::3],
        "flat": x.reshape(-1)[7:31:5], "base": x, "expanded": x[0].expand(3, 10),
        "scalar_view": x[2, 3],
    }  # fmt: skip
    p = tmp_path / "views.pt"
    torch.save(sd, p)
    got = _check(p)
    assert all(np.shares_memory(got[k], got["base"]) for k in sd if k != "base")
    with tenfold.open(p) as r:
        assert r.span("base") is not None and r.span("rows") is not None
        assert r.span("t") is None and r.span("step") is None  # not one raw range
        assert r.info("flat").extras["storage_offset"] == 7


DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
    torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
    torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_numpy_holds(tmp_path, dtype):
    g = torch.Generator().manual_seed(3)
    if dtype.is_complex:
        base = torch.randn(4, 5, generator=g, dtype=dtype)
    elif dtype == torch.bool:
        base = torch.randint(0, 2, (4, 5), generator=g).bool()
    elif dtype.is_floating_point:
        base = (torch.randn(4, 5, generator=g) * 4).to(dtype)
    else:
        base = torch.randint(0, 100, (4, 5), generator=g).to(dtype)
    sd = {"w": base, "t": base.t(), "zero_d": base[1, 2].clone(), "empty": base[:0],
          "empty_cols": base[:, 5:]}  # fmt: skip
    p = tmp_path / "d.pt"
    torch.save(sd, p)
    got = _check(p)
    assert got["zero_d"].shape == () and got["empty"].shape == (0, 5)
    assert got["empty_cols"].shape == (4, 0)


@pytest.mark.parametrize("dtype", [torch.complex32, torch.float4_e2m1fn_x2], ids=str)
def test_dtypes_numpy_cannot_hold_are_refused_by_name(tmp_path, dtype):
    t = torch.zeros(2, dtype=torch.uint8).view(dtype) if dtype.itemsize == 1 else None
    if t is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
            t = torch.zeros(2, dtype=dtype)
    p = tmp_path / "odd.pt"
    torch.save({"x": t}, p)
    with pytest.raises(UnsupportedError, match=str(dtype).removeprefix("torch.")):
        tenfold.open(p)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_pickle_protocol(tmp_path, protocol):
    x = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    obj = {"x": x, "xt": x.t(), "b": b"\x00raw\xff", "s": {1, 2},
           "size": torch.Size([2, 3]), "dt": torch.float16, "nan": float("nan"),
           "big": 2**70, "neg": -5, "none": None, "pair": (1.5, "two")}  # fmt: skip
    p = tmp_path / f"p{protocol}.pt"
    torch.save(obj, p, pickle_protocol=protocol)
    _check(p, ours=protocol > 2)


@pytest.mark.parametrize("protocol", [2, 4])
def test_the_legacy_layout(tmp_path, protocol):
    torch.manual_seed(2)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    x = torch.arange(30, dtype=torch.float64).reshape(5, 6)
    obj = {"model": m.state_dict(), "x": x.t(), "slice": x[1:, 2:], "h": torch.ones(3).half(),
           "bf": torch.ones(2, dtype=torch.bfloat16)}  # fmt: skip
    p = tmp_path / "legacy.pt"
    torch.save(obj, p, _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    assert p.read_bytes()[:2] != b"PK"
    got = _check(p, ours=protocol > 2)
    assert np.shares_memory(got["x"], got["slice"])
    with tenfold.open(p) as r:
        assert r.layout.kind == "legacy" and r.verify().ok


def test_a_training_checkpoint_with_optimizer_state(tmp_path):
    torch.manual_seed(4)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95))
    m(torch.randn(3, 4)).sum().backward()
    opt.step()
    ck = {
        "model": m.state_dict(),
        "optimizer": opt.state_dict(),
        "epoch": 3,
        "config": {"name": "run", "lr": 1e-3, "layers": [4, 4, 1]},
        "best": float("inf"),
    }
    p = tmp_path / "ckpt.pt"
    torch.save(ck, p)
    _check(p)
    with tenfold.open(p) as r:
        assert "optimizer.state.0.exp_avg" in r and "optimizer.state.0.step" in r
        md = r.metadata
        assert md["epoch"] == 3 and md["best"] == "inf"
        assert md["config"] == {"name": "run", "lr": 1e-3, "layers": [4, 4, 1]}
        group = md["optimizer.param_groups"][0]
        assert group["betas"] == [0.9, 0.95] and group["params"] == [0, 1, 2, 3]


def test_parameters_and_shared_storages_with_offsets(tmp_path):
    base = torch.arange(20, dtype=torch.float32)
    obj = {
        "p": torch.nn.Parameter(torch.ones(3, 2)),
        "frozen": torch.nn.Parameter(torch.zeros(2), requires_grad=False),
        "a": base[2:7], "b": base[10:].view(2, 5), "alone": torch.tensor(7.0),
        "layers": [torch.ones(2), torch.zeros(1)],
    }  # fmt: skip
    p = tmp_path / "params.pt"
    torch.save(obj, p)
    got = _check(p)
    assert set(got) >= {"layers.0", "layers.1", "p", "frozen"}
    with tenfold.open(p) as r:
        a, b = r.info("a").extras, r.info("b").extras
        assert a["storage"] == b["storage"]
        assert (a["storage_offset"], b["storage_offset"]) == (2, 10)


def test_a_lone_tensor_and_a_lone_value(tmp_path):
    p = tmp_path / "t.pt"
    torch.save(torch.arange(4), p)
    assert list(_check(p)) == ["tensor"]
    q = tmp_path / "v.pt"
    torch.save([1, "x"], q)
    with tenfold.open(q) as r:
        assert list(r) == [] and r.metadata == {"value": [1, "x"]}


def test_the_demo_is_what_torch_reads(tmp_path):
    from tenfold.formats.torchpickle import reader

    p = reader.demo(tmp_path)
    _check(p)


def test_tenfold_torch_gives_torch_tensors(tmp_path):
    import tenfold.torch as tt

    x = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)
    sd = {"x": x, "xt": x.t(), "tied": x}
    p = tmp_path / "m.pt"
    torch.save(sd, p)
    got = tt.load_file(p)
    for k, v in sd.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k


@pytest.mark.parametrize("suffix", [".safetensors", ".zt"])
def test_convert_is_bit_exact(tmp_path, suffix):
    torch.manual_seed(5)
    m = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.BatchNorm2d(4))
    sd = dict(m.state_dict())
    sd["half"] = torch.randn(3, 5).half().t()
    sd["bf16"] = torch.randn(6).bfloat16()[::2]
    sd["flags"] = torch.tensor([True, False])
    p = tmp_path / "m.pt"
    torch.save(sd, p)
    dst = tmp_path / f"m{suffix}"
    tenfold.convert.convert(p, dst)
    back = tenfold.load(dst)
    assert list(back) == list(sd) or sorted(back) == sorted(sd)
    for k, v in sd.items():
        a = back[k]
        assert a.shape == tuple(v.shape), k
        assert np.ascontiguousarray(a).tobytes() == _bytes(v), k


def test_convert_refuses_non_string_metadata_loudly(tmp_path):
    ck = {"model": {"w": torch.ones(2, 2)}, "epoch": 3, "tag": "best"}
    p = tmp_path / "ck.pt"
    torch.save(ck, p)
    dst = tmp_path / "ck.zt"
    with pytest.raises(EncodeError, match="metadata 'epoch'"):
        tenfold.convert.convert(p, dst)
    assert not dst.exists()
    tenfold.convert.convert(p, dst, metadata=False)
    with tenfold.open(dst) as r:
        assert list(r) == ["model.w"] and "epoch" not in r.metadata
    torch.save({"w": torch.ones(2), "tag": "best"}, p)  # string metadata is kept
    tenfold.convert.convert(p, tmp_path / "s.safetensors")
    with tenfold.open(tmp_path / "s.safetensors") as r:
        assert r.metadata == {"tag": "best"}

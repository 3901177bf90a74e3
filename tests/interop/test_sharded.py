"""Sharded checkpoints in the Hugging Face layout: save with max_shard_size, open an index as
one Mapping (lazily), convert and verify through an index, and hostile indexes refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tenfold
import tenfold.convert
from tenfold import sharded
from tenfold.core.reader import TensorReader
from tenfold.errors import EncodeError, FormatError

ROOT = Path(__file__).resolve().parents[2]


def _model(n: int = 5, size: int = 64) -> dict[str, np.ndarray]:
    return {f"layer.{i}.weight": np.full((size,), i, np.float32) for i in range(n)}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(Path(tenfold.__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, "-m", "tenfold", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("5GB", 5 * 10**9),
        ("500MB", 500 * 10**6),
        ("1GiB", 1 << 30),
        ("10KiB", 10240),
        ("2kb", 2000),
        ("1.5GB", 1_500_000_000),
        ("123", 123),
        (4096, 4096),
    ],
)
def test_parse_size(text, want):
    assert sharded.parse_size(text) == want


@pytest.mark.parametrize("bad", ["", "GB", "5 GBs", "-1", "0", "5PB", 0, -3])
def test_parse_size_refuses(bad):
    with pytest.raises(ValueError, match="max_shard_size"):
        sharded.parse_size(bad)


def test_plan_is_huggingface_hubs_rule():
    sizes = [("a", 4), ("b", 4), ("c", 9), ("d", 2), ("e", 3), ("f", 8)]
    # a new shard when the next tensor would pass the limit; a larger tensor alone, closed
    # at once (before the shard still being filled, as huggingface_hub orders them)
    assert sharded.plan(sizes, 8) == [["c"], ["a", "b"], ["d", "e"], ["f"]]
    assert sharded.plan(sizes, 100) == [["a", "b", "c", "d", "e", "f"]]
    assert sharded.plan([], 8) == [[]]


def test_save_writes_shards_and_the_index(tmp_path):
    t = _model()
    tenfold.save(tmp_path / "model.zt", t, max_shard_size=600)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "model-00001-of-00003.zt",
        "model-00002-of-00003.zt",
        "model-00003-of-00003.zt",
        "model.zt.index.json",
    ]
    doc = json.loads((tmp_path / "model.zt.index.json").read_text())
    assert set(doc) == {"metadata", "weight_map"}
    assert doc["metadata"] == {"total_size": 5 * 64 * 4}
    assert doc["weight_map"] == {
        "layer.0.weight": "model-00001-of-00003.zt",
        "layer.1.weight": "model-00001-of-00003.zt",
        "layer.2.weight": "model-00002-of-00003.zt",
        "layer.3.weight": "model-00002-of-00003.zt",
        "layer.4.weight": "model-00003-of-00003.zt",
    }
    assert tenfold.detect(tmp_path / "model.zt.index.json") == "sharded"


def test_one_shard_is_one_plain_file(tmp_path):
    tenfold.save(tmp_path / "model.safetensors", _model(), max_shard_size="5GB")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    assert tenfold.detect(tmp_path / "model.safetensors") == "safetensors"


def test_dtype_refused_before_any_file_is_written(tmp_path):
    import ml_dtypes

    t = _model() | {"h": np.zeros(4, ml_dtypes.bfloat16)}
    with pytest.raises(EncodeError, match="'h'.*bfloat16"):
        tenfold.save(tmp_path / "m.npz", t, max_shard_size=300)
    assert list(tmp_path.iterdir()) == []


def test_open_index_is_one_lazy_mapping(tmp_path):
    t = _model()
    tenfold.save(tmp_path / "m.safetensors", t, max_shard_size=600)
    with tenfold.open(tmp_path / "m.safetensors.index.json") as r:
        assert isinstance(r, TensorReader)
        assert r._shards == {}  # nothing opened yet
        assert len(r) == 5 and list(r) == sorted(t) and "layer.3.weight" in r
        np.testing.assert_array_equal(r["layer.3.weight"], t["layer.3.weight"])
        assert list(r._shards) == ["m-00002-of-00003.safetensors"]
        assert r.info("layer.0.weight").shape == (64,)
        assert r.metadata == {"total_size": 1280}
        assert r.read("layer.4.weight", (slice(0, 3),)).tolist() == [4.0, 4.0, 4.0]
        assert r.verify().ok
    assert r.closed
    loaded = tenfold.load(tmp_path / "m.safetensors.index.json")
    assert {k: v.tolist() for k, v in loaded.items()} == {k: v.tolist() for k, v in t.items()}


# -- the Hugging Face tools -----------------------------------------------------------------------
def test_opens_a_hub_layout_written_by_safetensors(tmp_path):
    """The layout of a Hub repository: model-0000k-of-0000n.safetensors files written by the
    safetensors package and model.safetensors.index.json beside them."""
    st = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed")
    t = _model(4)
    files = {"model-00001-of-00002.safetensors": ["layer.0.weight", "layer.1.weight"],
             "model-00002-of-00002.safetensors": ["layer.2.weight", "layer.3.weight"]}  # fmt: skip
    for f, names in files.items():
        st.save_file({n: t[n] for n in names}, str(tmp_path / f), metadata={"format": "pt"})
    index = {"metadata": {"total_size": 1024, "total_parameters": 256},
             "weight_map": {n: f for f, ns in files.items() for n in ns}}  # fmt: skip
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    with tenfold.safe_open(tmp_path / "model.safetensors.index.json") as f:
        assert sorted(f.keys()) == sorted(t)
        assert f.metadata()["total_size"] == 1024
        np.testing.assert_array_equal(
            f.get_slice("layer.2.weight")[::16], t["layer.2.weight"][::16]
        )
    report = sharded.verify(tmp_path / "model.safetensors.index.json")
    assert report.ok, report.format()


def _hub():
    return pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (peer)")


def test_same_split_and_index_as_huggingface_hub(tmp_path):
    hub = _hub()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import tenfold.torch

    rng = np.random.default_rng(0)
    sizes = [(40,), (300,), (12, 12), (8,), (500,), (64,), (64,), (3,)]
    state = {f"m.{i}.w": torch.from_numpy(rng.standard_normal(s).astype(np.float32))
             for i, s in enumerate(sizes)}  # fmt: skip
    for limit in (600, "1KB", 2000, 10**9):
        split = hub.split_torch_state_dict_into_shards(state, max_shard_size=limit)
        out = tmp_path / str(limit)
        out.mkdir()
        tenfold.save(out / "model.safetensors", {k: v.numpy() for k, v in state.items()},
                     max_shard_size=limit)  # fmt: skip
        written = sorted(p.name for p in out.iterdir())
        if split.is_sharded:
            assert written == sorted([*split.filename_to_tensors, "model.safetensors.index.json"])
            doc = json.loads((out / "model.safetensors.index.json").read_text())
            assert doc["metadata"] == split.metadata
            assert doc["weight_map"] == split.tensor_to_filename
        else:
            assert written == ["model.safetensors"]
        # and the hub loads what tenfold wrote into a module, tensor by tensor
        model = torch.nn.Module()
        for k, v in state.items():
            model.register_buffer(k.replace(".", "_"), torch.zeros_like(v))
        back = tenfold.torch.load_file(
            out / ("model.safetensors.index.json" if split.is_sharded else "model.safetensors")
        )
        for k, v in state.items():
            assert torch.equal(back[k], v)


def test_opens_what_huggingface_hub_saved(tmp_path):
    hub = _hub()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import tenfold.torch

    state = {f"l{i}.weight": torch.full((64,), float(i)) for i in range(5)}
    state["big"] = torch.arange(300, dtype=torch.float32)
    hub.save_torch_state_dict(state, tmp_path, max_shard_size=600)
    back = tenfold.torch.load_file(tmp_path / "model.safetensors.index.json")
    assert sorted(back) == sorted(state)
    for k, v in state.items():
        assert torch.equal(back[k], v)
    with tenfold.torch.safe_open(tmp_path / "model.safetensors.index.json") as f:
        assert torch.equal(f.get_slice("big")[10:20:3], state["big"][10:20:3])


def test_huggingface_hub_loads_what_tenfold_saved(tmp_path):
    hub = _hub()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    tenfold.save(tmp_path / "model.safetensors", state, max_shard_size=1000)
    assert (tmp_path / "model.safetensors.index.json").exists()
    fresh = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    result = hub.load_torch_model(fresh, tmp_path, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    for k, v in fresh.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k])


# -- convert and verify through the CLI --------------------------------------------------------
def test_cli_convert_single_to_shards_and_back_and_verify(tmp_path):
    t = _model()
    tenfold.save(tmp_path / "one.safetensors", t, metadata={"format": "pt"})
    r = _cli("convert", "one.safetensors", "out.zt", "--max-shard-size", "600B", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out-00003-of-00003.zt").exists()
    assert (tmp_path / "out.zt.index.json").exists()
    r = _cli("verify", "out.zt.index.json", cwd=tmp_path)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
    r = _cli("convert", "out.zt.index.json", "back.safetensors", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    back = tenfold.load(tmp_path / "back.safetensors")
    assert {k: v.tolist() for k, v in back.items()} == {k: v.tolist() for k, v in t.items()}
    with tenfold.open(tmp_path / "back.safetensors") as rd:
        assert rd.metadata == {"format": "pt"}  # shard metadata travels
    r = _cli("inspect", "out.zt.index.json", cwd=tmp_path)
    assert r.returncode == 0 and "out-00002-of-00003.zt" in r.stdout
    r = _cli("convert", "one.safetensors", "x.zt", "--max-shard-size", "5XB", cwd=tmp_path)
    assert r.returncode == 2 and "max_shard_size" in r.stderr


def test_convert_index_to_index(tmp_path):
    t = _model(6)
    tenfold.save(tmp_path / "a.safetensors", t, max_shard_size=600)
    n = tenfold.convert.convert(tmp_path / "a.safetensors.index.json", tmp_path / "b.npz",
                                max_shard_size=1000, metadata=False)  # fmt: skip
    assert n == 6
    doc = json.loads((tmp_path / "b.npz.index.json").read_text())
    assert set(doc["weight_map"].values()) == {"b-00001-of-00002.npz", "b-00002-of-00002.npz"}
    back = tenfold.load(tmp_path / "b.npz.index.json")
    assert {k: v.tolist() for k, v in back.items()} == {k: v.tolist() for k, v in t.items()}


# -- hostile indexes ---------------------------------------------------------------------------
def _index(tmp_path: Path, weight_map: dict, metadata: dict | None = None) -> Path:
    p = tmp_path / "model.zt.index.json"
    doc = {"metadata": metadata or {"total_size": 0}, "weight_map": weight_map}
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize(
    "shard",
    ["../x.zt", "/etc/passwd", "a/../../x.zt", "..", "sub\\..\\x.zt", "", "C:/x.zt", "\ud800.zt"],
)
def test_path_traversal_refused_before_opening_anything(tmp_path, monkeypatch, shard):
    inner = tmp_path / "inner"
    inner.mkdir()
    tenfold.save(tmp_path / "x.zt", _model(1))  # a real file the traversal would reach
    opened = []
    monkeypatch.setattr(tenfold, "open", lambda *a, **k: opened.append(a))
    p = _index(inner, {"w": shard})
    with pytest.raises(FormatError, match="stay in the index's directory") as exc:
        sharded.open(p)
    assert repr(shard) in str(exc.value)
    assert opened == []
    assert not sharded.verify(p).ok


def test_missing_shard_file_names_shard_and_tensors(tmp_path):
    tenfold.save(tmp_path / "model.zt", _model(), max_shard_size=600)
    os.unlink(tmp_path / "model-00002-of-00003.zt")
    with pytest.raises(FormatError, match=r"missing shard files: 'model-00002-of-00003.zt' "
                       r"\(tensors 'layer.2.weight', 'layer.3.weight'\)"):  # fmt: skip
        tenfold.open(tmp_path / "model.zt.index.json")
    r = _cli("verify", "model.zt.index.json", cwd=tmp_path)
    assert r.returncode == 1 and "missing shard files" in r.stdout
    with pytest.raises(FormatError, match="missing shard"):
        tenfold.convert.convert(tmp_path / "model.zt.index.json", tmp_path / "o.zt")
    assert not (tmp_path / "o.zt").exists()


def test_tensor_missing_from_its_shard(tmp_path):
    tenfold.save(tmp_path / "model.zt", _model(), max_shard_size=600)
    doc = json.loads((tmp_path / "model.zt.index.json").read_text())
    doc["weight_map"]["ghost"] = "model-00001-of-00003.zt"
    (tmp_path / "model.zt.index.json").write_text(json.dumps(doc))
    with tenfold.open(tmp_path / "model.zt.index.json") as r:
        assert r["layer.4.weight"][0] == 4  # other shards work
        with pytest.raises(FormatError, match=r"shard 'model-00001-of-00003.zt'.*'ghost'"):
            r["layer.0.weight"]
    report = sharded.verify(tmp_path / "model.zt.index.json")
    assert not report.ok and "ghost" in report.format()
    with pytest.raises(FormatError, match="'ghost'"):
        tenfold.convert.convert(tmp_path / "model.zt.index.json", tmp_path / "o.zt")


def test_total_size_mismatch_is_reported(tmp_path):
    tenfold.save(tmp_path / "model.zt", _model(), max_shard_size=600)
    doc = json.loads((tmp_path / "model.zt.index.json").read_text())
    doc["metadata"]["total_size"] = 7
    (tmp_path / "model.zt.index.json").write_text(json.dumps(doc))
    report = sharded.verify(tmp_path / "model.zt.index.json")
    assert not report.ok and "total_size mismatch; expected 1280, got 7" in report.format()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b'{"metadata": {}, "weight_map": [1]}', "weight_map"),
        (b'{"metadata": {}, "weight_map": {"w": 3}}', "shard names must be strings"),
        (b'{"metadata": 5, "weight_map": {}}', "metadata"),
        (b'{"metadata": {}, "weight_map": {"w": "a.zt"', "invalid JSON"),
        (b'{"metadata": {}, "weight_map": {"w": "\xff.zt"}}', "UTF-8"),
        (b'{"metadata": {"total_size": 1}}', "weight_map"),
    ],
)
def test_malformed_index(tmp_path, text, match):
    p = tmp_path / "m.zt.index.json"
    p.write_bytes(text)
    with pytest.raises(FormatError, match=match):
        tenfold.open(p)


def test_shards_of_several_formats_and_threads(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    t = _model(8)
    tenfold.save(tmp_path / "m.zt", {k: t[k] for k in list(t)[:4]})
    tenfold.save(tmp_path / "m.safetensors", {k: t[k] for k in list(t)[4:]})
    wm = {k: ("m.zt" if i < 4 else "m.safetensors") for i, k in enumerate(t)}
    p = _index(tmp_path, wm, {"total_size": 8 * 256})
    with tenfold.open(p) as r, ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda k: float(r[k][0]), list(t) * 4))
    assert got == [float(i) for i in range(8)] * 4
    assert sharded.verify(p).ok


def test_the_index_holds_the_checkpoints_metadata(tmp_path):
    """A sharded save or convert gives every shard the metadata and now the index too, so
    the index's reader tells it without opening a shard (before: only ``total_size``, and a
    sharded checkpoint compared against its one-file source showed the metadata as lost)."""
    from tenfold.convert import convert

    t = {"a": np.ones((64, 64), np.float32), "b": np.zeros((64, 64), np.float32)}
    src = tmp_path / "one.safetensors"
    tenfold.save(src, t, metadata={"step": "1000"})
    convert(src, tmp_path / "c.safetensors", max_shard_size="20KB")
    sharded.save(tmp_path / "s.zt", t, max_shard_size="20KB", metadata={"step": "1000"})
    for index in ("c.safetensors.index.json", "s.zt.index.json"):
        doc = json.loads((tmp_path / index).read_text())
        assert doc["metadata"] == {"step": "1000", "total_size": 32768}
        with tenfold.open(tmp_path / index) as r:
            assert r.metadata == {"step": "1000", "total_size": 32768}
            assert r.open_shard_readers() == {}  # no shard opened for it
        assert tenfold.diff(tmp_path / index, src).identical
    # metadata JSON cannot hold stays in the shards only (the index is still written)
    assert json.loads(sharded.index_document({"a": "x"}, 4, {"k": float("nan")}))["metadata"] == {
        "total_size": 4
    }


def test_metadata_key_total_size_is_refused_not_replaced(tmp_path):
    """The index's ``metadata`` holds the checkpoint's metadata and the ``total_size`` it
    computes, in one object: a user key ``total_size`` was silently replaced there by the
    computed value while the shards kept the user's. Now an EncodeError naming the key, and
    no index is written (save and convert alike)."""
    from tenfold.convert import convert

    t = {f"t{i}": np.ones(25000, np.float32) for i in range(4)}
    with pytest.raises(EncodeError, match=r"metadata: total_size: .*got 'mine'"):
        tenfold.save(tmp_path / "m.safetensors", t, max_shard_size=150000,
                     metadata={"total_size": "mine"})  # fmt: skip
    assert not (tmp_path / "m.safetensors.index.json").exists()
    assert os.listdir(tmp_path) == []  # refused before the first shard
    src = tmp_path / "one.safetensors"
    tenfold.save(src, t, metadata={"total_size": "mine"})  # one file: nothing computes it
    with pytest.raises(EncodeError, match="total_size"):
        convert(src, tmp_path / "c.zt", max_shard_size=150000)
    assert not (tmp_path / "c.zt.index.json").exists()
    assert sorted(os.listdir(tmp_path)) == ["one.safetensors"]
    with pytest.raises(EncodeError, match="total_size"):
        sharded.index_document({"a": "x"}, 4, {"total_size": 5})
    # the value the index computes is no clash: a sharded checkpoint's metadata read back
    # (it holds total_size) saves again with its tensors
    assert json.loads(sharded.index_document({"a": "x"}, 4, {"total_size": 4}))["metadata"] == {
        "total_size": 4
    }
    tenfold.save(tmp_path / "a.zt", t, max_shard_size=150000, metadata={"k": "v"})
    with tenfold.open(tmp_path / "a.zt.index.json") as r:
        md, back = dict(r.metadata), {k: np.array(r[k]) for k in r}
    tenfold.save(tmp_path / "b.zt", back, max_shard_size=150000, metadata=md)
    with tenfold.open(tmp_path / "b.zt.index.json") as r:
        assert r.metadata == md == {"k": "v", "total_size": 4 * 25000 * 4}
    sharded.check_index_metadata({"step": "1"})  # other keys pass


@pytest.mark.parametrize("suffix", [".npz", ".oinf", ".fold", ".safetensors", ".zt"])
def test_a_sharded_source_converts_each_tensor_from_its_own_shard(tmp_path, suffix):
    """Raw block copies from a sharded source read the shard holding the tensor being written,
    whatever order a writer asks for ranges in (before: a writer that asked for every tensor's
    range first copied them all from the last shard asked: silently wrong values)."""
    t = {f"layer.{i}.weight": np.full((16, 16), i, np.float32) for i in range(6)}
    tenfold.save(tmp_path / "a.safetensors", t, max_shard_size=2200)
    assert len(json.loads((tmp_path / "a.safetensors.index.json").read_text())["weight_map"]) == 6
    out = tmp_path / f"b{suffix}"
    tenfold.convert.convert(tmp_path / "a.safetensors.index.json", out, metadata=False)
    back = tenfold.load(out)
    assert {k: np.asarray(v).tolist() for k, v in back.items()} == {
        k: v.tolist() for k, v in t.items()
    }

"""GGUF behind tenfold's front door: detect, open/load, safe_open, tenfold.torch, inspect and
verify (Python and the CLI), convert (bit-exact to .safetensors and .zt; quantised tensors and
non-string metadata refused loudly), diff, and save (refused: tenfold does not write GGUF)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _gguf_files import build, write_gguf

import tenfold
import tenfold.convert
from tenfold.cli import main as cli
from tenfold.core.dtypes import BFLOAT16
from tenfold.errors import EncodeError, UnsupportedError

TENSORS = {
    "tok_embd.weight": np.arange(32, dtype=np.float32).reshape(4, 8) / 3,
    "norm.weight": np.linspace(-1, 1, 8).astype(np.float16),
    "bf": (np.arange(6, dtype=np.float32) - 2).astype(BFLOAT16).reshape(2, 3),
    "f64": np.array([1e-300, -2.0]),
    "ids": np.arange(-3, 3, dtype=np.int64),
    "i8": np.array([[-1, 2]], np.int8),
    "scalar": np.array(3.5, np.float32),
}
# F32 F16 BF16 F64 I64 I8 codes of the spec
CODES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, BFLOAT16: 30, np.dtype(np.float64): 28,
         np.dtype(np.int64): 27, np.dtype(np.int8): 24}  # fmt: skip


@pytest.fixture
def plain(tmp_path):
    """A GGUF of unquantised tensors and string metadata only (built here, no gguf needed)."""
    tensors = [(n, a.shape[::-1], CODES[a.dtype], a.tobytes()) for n, a in TENSORS.items()]
    b = build([("general.architecture", 8, "llama"), ("general.name", 8, "tiny")], tensors)
    path = tmp_path / "m.gguf"
    path.write_bytes(b.data)
    return path


def _same(got, want=TENSORS):
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        a = np.asarray(got[k])
        assert a.dtype == v.dtype and a.shape == v.shape and a.tobytes() == v.tobytes(), k


def test_open_load_detect(plain, tmp_path):
    assert tenfold.detect(plain) == "gguf"
    misnamed = tmp_path / "model.bin"
    misnamed.write_bytes(plain.read_bytes())
    assert tenfold.detect(misnamed) == "gguf"
    with tenfold.open(plain) as r:
        assert list(r) == list(TENSORS)  # file order
        _same(r)
        assert r.metadata == {"general.architecture": "llama", "general.name": "tiny"}
        assert r.verify().ok
    _same(tenfold.load(plain))
    copied = tenfold.load(plain, copy=True)
    _same(copied)
    assert copied["ids"].flags.writeable
    _same(tenfold.load(plain.read_bytes()))  # a buffer
    _same(tenfold.load(plain, mmap=False))  # pread, no map


def test_sliced_reads(plain):
    with tenfold.open(plain) as r:
        w = TENSORS["tok_embd.weight"]
        assert r.read("tok_embd.weight", (slice(1, 3), 2)).tolist() == w[1:3, 2].tolist()
        assert r.read("scalar", ()).tolist() == 3.5


def test_safe_open_and_torch(plain):
    with tenfold.safe_open(plain, framework="np") as f:
        assert sorted(f.keys()) == sorted(TENSORS)
        _same({k: f.get_tensor(k) for k in f.keys()})
        assert (
            f.get_slice("tok_embd.weight")[1:2].tolist() == TENSORS["tok_embd.weight"][1:2].tolist()
        )
        assert f.metadata() == {"general.architecture": "llama", "general.name": "tiny"}
    torch = pytest.importorskip("torch", reason="PyTorch (the torch extra) is not installed")
    import tenfold.torch as tt

    got = tt.load_file(plain)
    assert got["bf"].dtype == torch.bfloat16
    assert got["bf"].float().numpy().tolist() == TENSORS["bf"].astype(np.float32).tolist()
    assert got["ids"].tolist() == TENSORS["ids"].tolist()


@pytest.mark.parametrize("dst", ["out.safetensors", "out.zt"])
def test_convert_is_bit_exact(plain, tmp_path, dst):
    out = tmp_path / dst
    tenfold.convert.convert(plain, out)
    _same(tenfold.load(out))
    with tenfold.open(out) as r:
        md = {k: v for k, v in r.metadata.items() if k not in r.own_metadata}
        assert md == {"general.architecture": "llama", "general.name": "tiny"}
    assert tenfold.diff(plain, out).identical


def test_diff_between_a_gguf_and_its_conversion(plain, tmp_path, capsys):
    out = tmp_path / "c.safetensors"
    tenfold.convert.convert(plain, out)
    changed = tmp_path / "changed.safetensors"
    t = dict(TENSORS, f64=np.array([1e-300, -2.5]))
    tenfold.save(changed, t, metadata={"general.architecture": "llama", "general.name": "tiny"})
    r = tenfold.diff(plain, changed)
    assert {x.name: x.status for x in r.tensors}["f64"] == "different"
    assert r.tensors[3].max_abs == 0.5 and r.exit_code == 1
    assert cli(["diff", str(plain), str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"A: {plain} (gguf, 7 tensors)"


def test_convert_refuses_quantised_tensors(tmp_path):
    blocks = np.zeros(18 * 2, np.uint8).tobytes()
    b = build([], [("w", (64,), 2, blocks)])
    src = tmp_path / "q.gguf"
    src.write_bytes(b.data)
    with pytest.raises(EncodeError, match=r"tensor 'w' is GGML Q4_0 \(block-quantised\)"):
        tenfold.convert.convert(src, tmp_path / "q.safetensors")
    assert not (tmp_path / "q.safetensors").exists()
    with pytest.raises(EncodeError, match="Q4_0"):
        tenfold.convert.convert(src, tmp_path / "q.zt")
    assert not (tmp_path / "q.zt").exists()


def test_convert_refuses_non_string_metadata_unless_dropped(tmp_path):
    b = build([("llama.context_length", 4, 2048)], [("w", (2,), 0, bytes(8))])
    src = tmp_path / "m.gguf"
    src.write_bytes(b.data)
    with pytest.raises(EncodeError, match="llama.context_length.*only string metadata"):
        tenfold.convert.convert(src, tmp_path / "m.safetensors")
    tenfold.convert.convert(src, tmp_path / "m.safetensors", metadata=False)
    assert tenfold.load(tmp_path / "m.safetensors")["w"].tolist() == [0.0, 0.0]


def test_save_is_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="does not write it"):
        tenfold.save(tmp_path / "x.gguf", {"w": np.zeros(2, np.float32)})
    assert not (tmp_path / "x.gguf").exists()


def test_cli_inspect_and_verify(plain, tmp_path, capsys):
    assert cli(["inspect", "--json", str(plain)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "gguf"
    rows = {o["name"]: o for o in doc["objects"]}
    assert rows["tok_embd.weight"]["dtype"] == "F32" and rows["bf"]["dtype"] == "BF16"
    assert cli(["inspect", str(plain)]) == 0
    assert "v3" in capsys.readouterr().out
    assert cli(["verify", str(plain)]) == 0
    damaged = tmp_path / "bad.gguf"
    damaged.write_bytes(plain.read_bytes()[:60])
    assert cli(["verify", str(damaged)]) == 1
    report = tenfold.formats.gguf.verify(damaged)
    assert not report.ok


def test_quantised_through_the_front_door(tmp_path):
    gguf = pytest.importorskip("gguf", reason="the gguf package (the peers extra) is not installed")
    x = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    path = write_gguf(tmp_path / "q.gguf", {"q": (q, gguf.GGMLQuantizationType.Q8_0)})
    got = tenfold.load(path)["q"]
    assert got.dtype.names == ("Q8_0",) and got.shape == (2, 2)
    deq = tenfold.load(path, dequantize=True)["q"]
    assert deq.dtype == np.float32 and deq.shape == (2, 64)
    assert np.abs(deq - x).max() < 0.05
    assert tenfold.diff(path, path).identical


def test_demo(tmp_path):
    from tenfold.formats import gguf as tg

    path = tg.demo(tmp_path)
    with tenfold.open(path) as r:
        assert list(r) == ["token_embd.weight", "output_norm.weight", "blk.0.attn_q.weight"]
        assert r["token_embd.weight"].shape == (4, 8) and r.verify().ok
        assert r.metadata["tokenizer.ggml.tokens"] == ["<s>", "hello", "world"]
    deq = tenfold.load(path, dequantize=True)["blk.0.attn_q.weight"]
    assert deq.shape == (2, 32) and set(np.unique(deq % 0.25)) == {0.0}
    gguf = pytest.importorskip("gguf", reason="the gguf package (the peers extra) is not installed")
    peer = gguf.GGUFReader(str(path))
    assert [t.name for t in peer.tensors] == list(tenfold.load(path))

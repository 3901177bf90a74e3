"""A new format is one package plus one registration (issue #22): a small format defined in
this test, registered through the public API, works through every front-door operation with
no edit anywhere else in tenfold: ``detect``, ``open``, ``load``, ``save``, ``convert`` (both
ways), ``inspect``, ``verify`` and ``diff`` (Python and the CLI), ``safe_open`` and
``tenfold.torch``.

The format ("tiny"): the magic ``TINY\\0``, a little-endian u32 header length, a JSON header
``{"metadata": {...}, "tensors": {name: [dtype, shape, offset]}}``, then the raw tensors, each
at a multiple of 64 bytes.
"""

from __future__ import annotations

import json
import struct
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import tenfold
import tenfold.convert
import tenfold.registry as registry
from tenfold.cli import main as cli
from tenfold.core.reader import MappedReader, Span, TensorInfo
from tenfold.core.report import ERROR, OK, Report
from tenfold.errors import EncodeError, FormatError

MAGIC = b"TINY\0"
PKG = "tenfold_test_tiny_format"


class TinyReader(MappedReader):
    fmt = "tiny"

    def __init__(self, source, **options):
        mf = self._map(source, mmap=options.get("mmap", True))
        try:
            mf.magic(MAGIC)
            (n,) = struct.unpack("<I", mf.bytes(len(MAGIC), 4, "header length"))
            doc = json.loads(mf.bytes(len(MAGIC) + 4, n, "header"))
            data = _aligned(len(MAGIC) + 4 + n)
            self._meta = doc["metadata"]
            self._table = {
                k: (np.dtype(d), tuple(s), data + o) for k, (d, s, o) in doc["tensors"].items()
            }
        except BaseException:
            self.close()
            raise

    def _keys(self):
        return self._table.keys()

    @property
    def metadata(self):
        return dict(self._meta)

    def info(self, name):
        dt, shape, off = self._table[name]
        n = dt.itemsize * int(np.prod(shape))
        return TensorInfo(name, str(dt), shape, (off, off + n), "raw", None, np_dtype=dt)

    def span(self, name):
        dt, shape, off = self._table[name]
        return Span(off, dt, shape)

    def read(self, name, index=None):
        dt, shape, off = self._table[name]
        a = self.file.array(off, dt, shape, f"tensor {name!r}")
        return a if index is None else a[index]


def _open(source, **options):
    return TinyReader(source, **options)


def _load(source, copy=False, **options):
    with TinyReader(source, **options) as r:
        return {k: (np.array(r[k]) if copy else r[k]) for k in r}


def _save(path, tensors, metadata=None, **options):
    table, off = {}, 0
    arrays = {k: np.asarray(v, order="C") for k, v in tensors.items()}
    for k, a in arrays.items():  # offsets from the start of the data (after the header)
        table[k] = [a.dtype.str, list(a.shape), off]
        off += -(-a.nbytes // 64) * 64
    head = json.dumps({"metadata": dict(metadata or {}), "tensors": table}).encode()
    out = bytearray(MAGIC + struct.pack("<I", len(head)) + head)
    out += bytes(_aligned(len(out)) - len(out))
    for a in arrays.values():
        out += bytes(_aligned(len(out)) - len(out))
        out += a.tobytes()
    Path(path).write_bytes(bytes(out))


def _aligned(n):
    return -(-n // 64) * 64


def _inspect(source):
    with TinyReader(source) as r:
        return [{"name": k, "dtype": r.info(k).dtype, "shape": list(r.info(k).shape)} for k in r]


def _verify(source):
    report = Report("tiny", str(source))
    try:
        with TinyReader(source) as r:
            for k in r:
                np.asarray(r[k]).sum()
                report.add(f"tensor {k!r}", OK, "readable")
    except FormatError as exc:
        report.add("file", ERROR, str(exc))
    return report


TinyReader.use_verifier(lambda r: _verify(r.path))


@pytest.fixture
def tiny():
    mod = types.ModuleType(PKG)
    TinyReader.__module__ = PKG  # the format's reader lives in its package
    mod.TinyReader = TinyReader
    mod.open, mod.load, mod.save, mod.inspect, mod.verify = _open, _load, _save, _inspect, _verify
    sys.modules[PKG] = mod
    fmt = registry.register(
        registry.Format(
            name="tiny",
            description="tiny test format",
            suffixes=(".tiny",),
            magics=(MAGIC,),
            package=PKG,
            dtypes=frozenset({"float32", "float64", "int64"}),
            metadata="str",
            save_checksum="refuse",
        )
    )
    try:
        yield fmt
    finally:
        registry.unregister("tiny")
        del sys.modules[PKG]


TENSORS = {
    "w": np.arange(12, dtype=np.float32).reshape(3, 4),
    "b": np.array([1.5, -2.0], np.float64),
    "step": np.array(7, np.int64),
}


def _same(got, want=TENSORS):
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        a = np.asarray(got[k])
        assert a.dtype == v.dtype and a.shape == v.shape and a.tobytes() == v.tobytes(), k


def test_the_front_door(tmp_path, tiny):
    p = tmp_path / "m.tiny"
    tenfold.save(p, TENSORS, metadata={"who": "test"})  # chosen by the suffix
    assert tenfold.detect(p) == "tiny"  # by content
    q = tmp_path / "misnamed.bin"
    q.write_bytes(p.read_bytes())
    assert tenfold.detect(q) == "tiny"
    with tenfold.open(p) as r:
        assert isinstance(r, TinyReader)
        _same(r)
        assert r.metadata == {"who": "test"}
        assert r.verify().ok
    _same(tenfold.load(p))
    _same(tenfold.load(p, copy=True))
    # what it cannot hold is refused before anything is written, naming who can hold it
    with pytest.raises(EncodeError, match="'h' has dtype float16, which tiny cannot hold"):
        tenfold.save(tmp_path / "x.tiny", {"h": np.ones(2, np.float16)})
    assert not (tmp_path / "x.tiny").exists()


def test_convert_both_ways(tmp_path, tiny):
    src = tmp_path / "a.safetensors"
    tenfold.save(src, TENSORS, metadata={"who": "test"})
    tenfold.convert.convert(src, tmp_path / "b.tiny")
    _same(tenfold.load(tmp_path / "b.tiny"))
    for dst in ("c.zt", "d.npz", "e.safetensors"):
        tenfold.convert.convert(tmp_path / "b.tiny", tmp_path / dst, metadata=dst != "d.npz")
        _same(tenfold.load(tmp_path / dst))


def test_inspect_and_verify_from_the_cli(tmp_path, tiny, capsys):
    p = tmp_path / "m.tiny"
    tenfold.save(p, TENSORS)
    assert cli(["inspect", "--json", str(p)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "tiny" and {o["name"] for o in doc["objects"]} == set(TENSORS)
    assert cli(["verify", str(p)]) == 0
    damaged = tmp_path / "bad.tiny"
    damaged.write_bytes(p.read_bytes()[:20])
    assert cli(["verify", str(damaged)]) == 1


def test_diff_from_python_and_the_cli(tmp_path, tiny, capsys):
    p, q = tmp_path / "m.tiny", tmp_path / "n.tiny"
    tenfold.save(p, TENSORS, metadata={"who": "test"})
    tenfold.save(q, {**TENSORS, "b": np.array([1.5, -2.5])}, metadata={"who": "test"})
    r = tenfold.diff(p, q)
    assert (r.a.format, r.b.format) == ("tiny", "tiny")
    assert {t.name: t.status for t in r.tensors} == {
        "w": "identical",
        "b": "different",
        "step": "identical",
    }
    assert r.tensors[1].max_abs == 0.5 and r.exit_code == 1
    s = tmp_path / "m.safetensors"  # against another format
    tenfold.save(s, TENSORS, metadata={"who": "test"})
    assert tenfold.diff(p, s).identical
    assert cli(["diff", str(p), str(s)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"A: {p} (tiny, 3 tensors)"
    assert cli(["diff", "--json", str(q), str(s)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["a"]["format"] == "tiny" and doc["summary"]["different"] == 1


def test_frameworks(tmp_path, tiny):
    p = tmp_path / "m.tiny"
    tenfold.save(p, TENSORS)
    with tenfold.safe_open(p, framework="np") as f:
        assert sorted(f.keys()) == sorted(TENSORS)
        _same({k: f.get_tensor(k) for k in f.keys()})
        assert f.get_slice("w")[1:3].tolist() == TENSORS["w"][1:3].tolist()
    torch = pytest.importorskip("torch", reason="PyTorch (the torch extra) is not installed")
    import tenfold.torch as tt

    got = tt.load_file(p)
    _same({k: v.numpy() for k, v in got.items()})
    got["w"].add_(1)  # independent, writable memory
    assert tt.load_file(p)["w"][0, 0].item() == 0.0
    assert isinstance(got["step"], torch.Tensor)

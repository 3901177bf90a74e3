"""``tenfold convert`` asks the registry, never a format's name (issue #22): each format's part
is behind the ``convert_*`` hooks of its descriptor, and a format registered from outside
converts to and from every other with no edit to convert."""

from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import tenfold
import tenfold.registry as reg
from tenfold.conversion import Target
from tenfold.convert import convert, read_any, write_any
from tenfold.errors import EncodeError

LIB = Path(tenfold.__file__).resolve().parent
MAGIC = b"TSTFMT\0\0"


def _format_words() -> set[str]:
    out = set()
    for f in reg.formats():
        out.add(f.name)
        out.update(f.suffixes)
    return out


@pytest.mark.parametrize("module", ["convert.py", "conversion.py"])
def test_the_generic_convert_names_no_format(module):
    words = _format_words()
    tree = ast.parse((LIB / module).read_text(encoding="utf-8"))
    found = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words
    ]
    assert not found, f"{module} names formats: {found}"


# -- a small format defined here: a magic, then one JSON line per tensor ----------------------
class _Reader(dict):
    metadata: dict = {}
    closed = False

    def close(self) -> None:
        self.closed = True


def _open(path):
    data = Path(path).read_bytes()
    assert data.startswith(MAGIC)
    doc = json.loads(data[len(MAGIC) :])
    r = _Reader()
    for name, (dt, shape, hexed) in doc["tensors"].items():
        r[name] = np.frombuffer(bytes.fromhex(hexed), dt).reshape(shape)
    r.metadata = doc["metadata"]
    return r


def _save(path, tensors, metadata=None):
    doc = {"tensors": {}, "metadata": dict(metadata or {})}
    for name, v in tensors.items():
        a = np.asarray(v)  # tobytes() is C order
        doc["tensors"][name] = [a.dtype.str, list(a.shape), a.tobytes().hex()]
    Path(path).write_bytes(MAGIC + json.dumps(doc).encode())


class _PickyTarget(Target):
    def check_key(self, key):
        if key == "reserved":
            raise EncodeError(f"{self.name}: metadata {key!r}: reserved by the test format")

    def write(self, dst, s, md, bar, opts):
        _save(dst, {n: s.get(n) for n in s.names}, md)


def _target(fmt, dst, generation=None):
    return _PickyTarget(fmt, dst, generation)


@pytest.fixture(params=[False, True], ids=["package", "hook"])
def tst_format(request):
    name = f"tenfold_test_convert_fmt_{request.param:d}"
    mod = types.ModuleType(name)
    mod.open, mod.save, mod.target = _open, _save, _target
    sys.modules[name] = mod
    fmt = reg.Format(
        name="tstfmt",
        description="test format",
        suffixes=(".tst",),
        magics=(MAGIC,),
        package=name,
        dtypes=frozenset({"float32", "int64"}),
        metadata="str",
        hooks={"convert_target": f"{name}:target"} if request.param else {},
    )
    reg.register(fmt)
    try:
        yield request.param
    finally:
        reg.unregister("tstfmt")
        del sys.modules[name]


def test_a_registered_format_converts_both_ways(tmp_path, tst_format):
    # Before: a format with dtypes reached convert's "no writer" branch, and a file of it was
    # "not a tensor format" as a source.
    want = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.array(7, np.int64)}
    write_any(tmp_path / "a.safetensors", want, metadata={"who": "me"})
    assert convert(tmp_path / "a.safetensors", tmp_path / "b.tst") == 2
    assert convert(tmp_path / "b.tst", tmp_path / "c.npz", metadata=False) == 2
    assert convert(tmp_path / "b.tst", tmp_path / "d.zt") == 2
    for p in ("b.tst", "c.npz", "d.zt"):
        got = read_any(tmp_path / p)
        assert sorted(got) == sorted(want)
        for k, v in want.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape, (p, k)
            assert got[k].tobytes() == v.tobytes()
    assert _open(tmp_path / "b.tst").metadata == {"who": "me"}
    with tenfold.open(tmp_path / "d.zt") as r:
        assert r.metadata["who"] == "me"


def test_a_registered_format_is_checked_before_writing(tmp_path, tst_format):
    write_any(tmp_path / "a.npz", {"h": np.ones(2, np.float16)})
    with pytest.raises(EncodeError, match="tensor 'h' has dtype float16, which tstfmt cannot"):
        convert(tmp_path / "a.npz", tmp_path / "b.tst")
    assert not (tmp_path / "b.tst").exists()
    write_any(tmp_path / "m.safetensors", {"w": np.ones(2, np.float32)}, metadata={"reserved": "1"})
    if tst_format:  # its own target's rule
        with pytest.raises(EncodeError, match="'reserved': reserved by the test format"):
            convert(tmp_path / "m.safetensors", tmp_path / "m.tst")
        assert not (tmp_path / "m.tst").exists()
    else:
        convert(tmp_path / "m.safetensors", tmp_path / "m.tst")
        assert _open(tmp_path / "m.tst").metadata == {"reserved": "1"}

"""The tensors of a FOLD file are named once (issue #22): :func:`tenfold.fold.load`,
:func:`tenfold.open` (the ``TensorView``) and ``tenfold convert`` read the same tensor chunks
(``STEN`` and ``NPZ0``: one definition) with the same names and the same refusals; a ``TSAV``
chunk stays the chunk API's (``fold.Reader``), as DECISIONS.md's payload kinds say."""

from __future__ import annotations

import numpy as np
import pytest

import tenfold
from tenfold import fold
from tenfold.convert import convert, read_any
from tenfold.errors import EncodeError, UnsupportedError
from tenfold.formats.fold import reader as fold_reader
from tenfold.formats.fold import tensors as fold_tensors


def test_one_definition_of_the_tensor_chunk_types():
    # Before: reader.py said ("STEN", "NPZ0", "TSAV"), tensors.py and load ("STEN", "NPZ0").
    assert fold_tensors.TENSOR_CTYPES is fold_reader.TENSOR_CTYPES == ("STEN", "NPZ0")
    assert fold_reader.ARRAY_CTYPES == ("STEN", "NPZ0", "TSAV")
    assert not hasattr(fold, "_TENSOR_CTYPES")


def _refusal(call, path):
    with pytest.raises(UnsupportedError) as info:
        call(path)
    return info.value


def test_no_tensor_chunk_is_the_same_refusal_for_load_and_open(tmp_path):
    p = tmp_path / "j.fold"
    with fold.Writer(p) as w:
        w.add_json("cfg", {"a": 1})
        w.finalize()
    loaded, opened = _refusal(fold.load, p), _refusal(tenfold.open, p)
    assert str(loaded) == str(opened) == f"fold: {p}: no tensor chunk (STEN or NPZ0)"
    assert (loaded.fmt, loaded.obj) == ("fold", str(p))


def test_a_name_given_twice_is_the_same_refusal_for_load_open_and_convert(tmp_path):
    p = tmp_path / "c.fold"
    with fold.Writer(p, compress=None) as w:
        w.add_state_dict("x", {"y/z": np.ones(2, np.float32)})
        w.add_arrays("x/y", {"z": np.zeros(3)})
        w.finalize()
    errors = [_refusal(f, p) for f in (fold.load, tenfold.open)]
    errors.append(_refusal(lambda q: convert(q, tmp_path / "o.zt"), p))
    want = (
        "fold: chunk 'x/y' array 'z': named 'x/y/z', as chunk 'x' array 'y/z' is; read one "
        "chunk at a time (tenfold.fold.load(path, chunk=...))"
    )
    assert [str(e) for e in errors] == [want] * 3


def test_two_chunks_are_named_alike_everywhere(tmp_path):
    p = tmp_path / "two.fold"
    with fold.Writer(p, compress=None) as w:
        w.add_state_dict("a", {"w": np.arange(3, dtype=np.float32)})
        w.add_arrays("b", {"w": np.arange(2)})
        w.finalize()
    want = ["a/w", "b/w"]
    assert list(fold.load(p)) == want and sorted(read_any(p)) == want
    with tenfold.open(p) as r:
        assert list(r) == want


def test_a_tsav_chunk_is_the_chunk_apis_not_a_tensor_chunk(tmp_path):
    torch = pytest.importorskip("torch", reason="torch not installed (TSAV needs torch)")
    p = tmp_path / "t.fold"
    with fold.Writer(p, compress=None) as w:
        w.add_state_dict("tensors", {"w": np.arange(4, dtype=np.float32)})
        w.add_torch("torch_state", {"t": torch.ones(2)})
        w.finalize()
    with fold.Reader(p) as r:
        assert sorted(r["torch_state"]) == ["t"]  # a dict of arrays, through the chunk API
        assert r.read_tensor("torch_state", "t").tolist() == [1.0, 1.0]
    assert list(fold.load(p)) == ["w"]
    with tenfold.open(p) as r:
        assert list(r) == ["w"]
    with pytest.raises(EncodeError, match=r"chunk 'torch_state' \(TSAV\)"):
        convert(p, tmp_path / "o.zt")
    assert convert(p, tmp_path / "o.zt", metadata=False) == 1
    assert list(read_any(tmp_path / "o.zt")) == ["w"]

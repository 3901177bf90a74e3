"""FOLD ``TSAV`` chunks (``torch.save`` payloads): real torch round trips, ``weights_only`` refusal.

Without torch, writing or reading a TSAV chunk raises ``UnsupportedError`` (tested by hiding
torch); the round trips skip with a reason.
"""

from __future__ import annotations

import io
import sys

import ml_dtypes
import numpy as np
import pytest

import tenfold.fold as fold
from tenfold.errors import FormatError, UnsupportedError

_CALLS: list[str] = []


def _side_effect(tag: str) -> str:
    _CALLS.append(tag)
    return tag


class _Evil:
    """Pickles as a call to a module-level function: a plain unpickler would run it."""

    def __reduce__(self):
        return (_side_effect, ("unpickled",))


def _torch():
    return pytest.importorskip("torch", reason="torch not installed (TSAV needs torch)")


def _state_dict(torch):
    g = torch.Generator().manual_seed(0)
    return {
        "weight": torch.randn(4, 3, generator=g),
        "bias": torch.arange(3, dtype=torch.int64),
        "half": torch.ones(2, 2, dtype=torch.bfloat16),
        "steps": torch.tensor(11),
    }


@pytest.mark.parametrize("compress", [None, "zstd"])
@pytest.mark.parametrize("ecc", [None, "rs(32)"])
def test_tsav_roundtrip(tmp_path, compress, ecc):
    torch = _torch()
    sd = _state_dict(torch)
    p = tmp_path / "t.fold"
    with fold.Writer(p, compress=compress, ecc=ecc) as w:
        info = w.add_torch("torch_state", sd)
        w.finalize({})
    assert info["ctype"] == "TSAV"
    with fold.Reader(p, strict=True) as r:
        as_torch = r.read_state_dict("torch_state", framework="torch")
        as_numpy = r.read_state_dict("torch_state")
        raw = r.read_bytes("torch_state")
    assert set(as_torch) == set(sd) == set(as_numpy)
    for k, v in sd.items():
        assert as_torch[k].dtype == v.dtype and torch.equal(as_torch[k], v)
        assert isinstance(as_numpy[k], np.ndarray) and as_numpy[k].shape == tuple(v.shape)
        assert as_numpy[k].tobytes() == v.reshape(-1).view(torch.uint8).numpy().tobytes()
    assert as_numpy["half"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert as_numpy["bias"].dtype == np.int64
    # the payload really is a torch.save archive
    direct = torch.load(io.BytesIO(raw), weights_only=True)
    assert all(torch.equal(direct[k], sd[k]) for k in sd)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float16"])
def test_sten_and_tsav_exotic_dtypes(tmp_path, dtype):
    """bfloat16 / float8 cross between torch and NumPy (ml_dtypes) bit for bit, both ways."""
    torch = _torch()
    t = torch.tensor([[0.5, -2.0, 3.0], [1.0, 0.0, -0.25]]).to(getattr(torch, dtype))
    a = np.array([[0.5, -2.0, 3.0], [1.0, 0.0, -0.25]]).astype(
        getattr(ml_dtypes, dtype, np.float16)
    )
    p = tmp_path / "t.fold"
    with fold.Writer(p) as w:
        w.add_torch("tsav", {"t": t})
        w.add_state_dict("sten", {"t": a})
    with fold.Reader(p) as r:
        from_tsav = r.read_state_dict("tsav")["t"]
        from_sten = r.read_state_dict("sten", framework="torch")["t"]
    assert from_tsav.dtype == a.dtype and from_tsav.tobytes() == a.tobytes()
    assert from_sten.dtype == t.dtype and torch.equal(from_sten.float(), t.float())


def test_tsav_pyfolds_wrapper(tmp_path):
    """pyfolds stores ``{"state_dict": {...}, ...}``: read_state_dict returns the inner dict."""
    torch = _torch()
    sd = _state_dict(torch)
    p = tmp_path / "t.fold"
    with fold.Writer(p) as w:
        w.add_torch("torch_state", {"state_dict": sd, "epoch": 3})
    with fold.Reader(p) as r:
        got = r.read_state_dict("torch_state", framework="torch")
    assert set(got) == set(sd) and torch.equal(got["weight"], sd["weight"])


def test_tsav_refuses_arbitrary_objects(tmp_path):
    torch = _torch()
    p = tmp_path / "t.fold"
    with fold.Writer(p) as w:
        w.add_torch("torch_state", {"weight": torch.zeros(2), "evil": _Evil()})
        w.add_torch("not_a_dict", [torch.zeros(2)])
    _CALLS.clear()
    with fold.Reader(p) as r:
        with pytest.raises(FormatError, match="torch payload refused") as ei:
            r.read_state_dict("torch_state")
        assert "torch_state" in str(ei.value)
        with pytest.raises(FormatError, match="not a dict"):
            r.read_state_dict("not_a_dict")
    assert _CALLS == []  # the reduce function never ran


def test_tsav_without_torch(tmp_path, monkeypatch):
    torch = _torch()
    p = tmp_path / "t.fold"
    with fold.Writer(p) as w:
        w.add_torch("torch_state", {"w": torch.ones(2)})
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with fold.Reader(p) as r, pytest.raises(UnsupportedError, match="needs PyTorch"):
        r.read_state_dict("torch_state")
    with pytest.raises(UnsupportedError, match="needs PyTorch"):
        with fold.Writer(tmp_path / "u.fold") as w:
            w.add_torch("x", {"w": 1})

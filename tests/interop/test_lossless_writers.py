"""Lossless or loud in the writers themselves (issue 10 item 1)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tenfold
from tenfold.errors import EncodeError
from tenfold.interop import write_npz


@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, ml_dtypes.float8_e5m2])
def test_oinf_writes_every_bit_pattern(tmp_path, dt):
    n = 256 if np.dtype(dt).itemsize == 1 else 65536
    raw = np.arange(n, dtype=np.uint8 if n == 256 else np.uint16)
    t = {"all": raw.view(dt), "s": raw[:1].view(dt).reshape(()), "e": np.zeros((0, 3), dt)}
    tenfold.save(tmp_path / "m.oinf", t)
    back = tenfold.load(tmp_path / "m.oinf")
    for k, v in t.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert back[k].tobytes() == v.tobytes()


def test_oinf_refuses_e4m3_naming_the_formats(tmp_path):
    can = r"formats that can: \.zt \(zt_generation=2\), \.fold/\.mind, \.safetensors"
    with pytest.raises(EncodeError, match=r"'q'.*" + can):
        tenfold.save(tmp_path / "m.oinf", {"q": np.zeros(2, ml_dtypes.float8_e4m3fn)})
    assert not (tmp_path / "m.oinf").exists()


@pytest.mark.parametrize(
    "dt", [ml_dtypes.bfloat16, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn,
           ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn]
)  # fmt: skip
def test_npz_never_writes_opaque_records(tmp_path, dt):
    with pytest.raises(EncodeError, match=r"tensor 'w' has dtype .*npz cannot hold"):
        write_npz(tmp_path / "x.npz", {"ok": np.ones(2), "w": np.zeros(2, dt)})
    assert list(tmp_path.iterdir()) == []


def test_fold_npz0_chunk_refuses_bfloat16(tmp_path):
    from tenfold import fold

    with pytest.raises(EncodeError, match=r"fold: tensor 'w' has dtype bfloat16, which a NPZ0"):
        with fold.Writer(tmp_path / "x.fold") as w:
            w.add_arrays("arrays", {"w": np.zeros(2, ml_dtypes.bfloat16)})
            w.finalize()
    assert not (tmp_path / "x.fold").exists()


def test_fold_sten_keeps_0d(tmp_path):
    sd = {"num_batches_tracked": np.array(3, np.int64), "w": np.ones((2, 2), np.float32)}
    tenfold.save(tmp_path / "m.fold", sd)
    back = tenfold.load(tmp_path / "m.fold")
    assert back["num_batches_tracked"].shape == () and int(back["num_batches_tracked"]) == 3
    from tenfold import fold

    with fold.Writer(tmp_path / "n.fold") as w:
        w.add_state_dict("torch_state", sd)
        w.finalize()
    assert fold.load(tmp_path / "n.fold")["num_batches_tracked"].shape == ()


def test_one_refusal_names_every_tensor_the_target_cannot_hold(tmp_path):
    # a new-user trial: converting to WTXT named only the first refused tensor, so each fix
    # took another run
    t = {"a": np.ones(2, np.float16), "b": np.ones(2, bool), "c": np.ones(2, np.float32)}
    with pytest.raises(EncodeError, match=r"tensor 'a' has dtype float16.*also refused: 'b' bool"):
        tenfold.save(tmp_path / "x.wtxt", t)
    assert not (tmp_path / "x.wtxt").exists()

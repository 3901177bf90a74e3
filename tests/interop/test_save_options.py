"""What ``tenfold.save`` / ``convert`` accept and refuse: dtypes by generation, options a
target cannot honour, metadata, tensor names (a new user's trial)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tenfold
from tenfold.capabilities import check_dtype, holders
from tenfold.errors import EncodeError

V2_ONLY = [
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2fnuz,
    ml_dtypes.float8_e8m0fnu,
    ml_dtypes.float4_e2m1fn,
    np.complex64,
    np.complex128,
]


# -- A: the dtype check knows the zTensor generation -----------------------------------------
@pytest.mark.parametrize("dt", V2_ONLY)
@pytest.mark.parametrize("gen", [2, "v2", "2"])
def test_save_v2_takes_what_v2_holds(tmp_path, dt, gen):
    a = np.arange(4).astype(dt)
    tenfold.save(tmp_path / "b.zt", {"x": a}, zt_generation=gen)
    back = tenfold.load(tmp_path / "b.zt")["x"]
    assert back.dtype == a.dtype and back.tobytes() == a.tobytes()


def test_save_v2_by_format_name_takes_float8(tmp_path):
    a = np.arange(4).astype(ml_dtypes.float8_e4m3fn)
    fmt = tenfold.detect(_written(tmp_path, "w.zt"))
    tenfold.save(tmp_path / "b.bin", {"x": a}, format=fmt, zt_generation=2)
    assert tenfold.load(tmp_path / "b.bin")["x"].tobytes() == a.tobytes()


def _written(tmp_path, name):
    tenfold.save(tmp_path / name, {"a": np.zeros(1, np.float32)})
    return tmp_path / name


def test_default_generation_still_refuses_float8_and_names_v2(tmp_path):
    with pytest.raises(EncodeError) as exc:
        tenfold.save(tmp_path / "b.zt", {"f8": np.zeros(4, ml_dtypes.float8_e4m3fn)})
    msg = str(exc.value)
    assert "formats that can: .zt (zt_generation=2), .fold/.mind, .safetensors" in msg
    assert not (tmp_path / "b.zt").exists()


def test_complex128_names_the_one_format_that_holds_it(tmp_path):
    with pytest.raises(EncodeError, match=r"formats that can: \.zt \(zt_generation=2\)$"):
        tenfold.save(tmp_path / "c.safetensors", {"c": np.zeros(2, np.complex128)})
    assert holders(np.complex128) == [".zt (zt_generation=2)"]
    assert holders(np.float32)[0] == ".zt"  # held by the default: no option named


def test_check_dtype_takes_the_option_as_given():
    # what sharded.save's check needs: the raw option value (its one-line change)
    from tenfold.capabilities import dtypes_of, target_of

    zt = target_of("m.zt")
    for gen in (2, "2", "v2"):
        check_dtype(zt, "x", np.dtype(ml_dtypes.float8_e4m3fn), generation=gen)
    for gen in (None, 0, "0.1.0", "bogus"):  # default, or refused later by the writer
        with pytest.raises(EncodeError, match="formats that can"):
            check_dtype(zt, "x", np.dtype(ml_dtypes.float8_e4m3fn), generation=gen)
    sten = target_of("m.safetensors")
    assert dtypes_of(sten, 2) == dtypes_of(sten)  # a format without generations


def test_v2_dtype_list_is_what_the_v2_writer_stores():
    from tenfold.core.dtypes import canonical
    from tenfold.formats.ztensor import _v2values
    from tenfold.formats.ztensor._format import generation_dtypes

    def name(dt):
        try:
            return canonical(dt)
        except Exception:
            return np.dtype(dt).name

    stored = {name(dt) for dt in _v2values._NP_TO_V2}
    assert generation_dtypes()[2] == stored

"""WTXT name mapping (tenfold.wtxt.names): reversible, spec-valid stored names, 0-d marker."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenfold
from tenfold.errors import FormatError
from tenfold.wtxt import _spec as S
from tenfold.wtxt import names


@given(st.text(max_size=40), st.booleans())
def test_round_trip_and_stored_name_is_valid(name, scalar):
    stored = names.encode(name, scalar)
    assert S.NAME_RE.fullmatch(stored)
    assert names.decode(stored) == (name, scalar)


@given(st.text(max_size=12), st.text(max_size=12))
def test_injective(a, b):
    if a != b:
        assert names.encode(a) != names.encode(b)


@pytest.mark.parametrize(
    "name, stored",
    [
        ("layer00.weight", "_Zlayer00_dweight"),
        ("running_mean", "running_mean"),
        ("a/b-c_d", "_Za_sb_hc__d"),
        ("é", "_Z_u0000e9"),
        ("_Zx", "_Z__Zx"),
        ("", "_Z"),
    ],
)
def test_known_answers(name, stored):
    assert names.encode(name) == stored


@pytest.mark.parametrize("bad", ["_Z_q", "_Z_u12", "_Z_Sx", "_Z_u110000", "_Z_u00002e"])
def test_malformed_encodings_are_refused(bad):
    with pytest.raises(FormatError, match="encoded name"):
        names.decode(bad)


def test_state_dict_round_trips_through_wtxt(tmp_path):
    sd = {
        "features.0.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "bn1.num_batches_tracked": np.array(17, np.int64),
        "bn1.running_mean": np.zeros(4),
        "blocks/0/ünï": np.zeros((0, 2), np.int8),
        "plain_name": np.ones(2, np.int32),
    }
    p = tmp_path / "sd.wtxt"
    tenfold.save(p, sd)
    text = p.read_text()
    assert "cap ext=crc32c,line_parity,tenfold_names\n" in text
    assert "arr name=_Zfeatures_d0_dweight " in text
    back = tenfold.load(p)
    assert sorted(back) == sorted(sd)
    for k, v in sd.items():
        assert back[k].shape == v.shape and back[k].dtype == v.dtype
        assert back[k].tobytes() == v.tobytes()
    # what a plain WTXT reader sees: valid names, the scalar as shape (1,)
    with tenfold.wtxt.open(p) as f:
        assert f["_Zbn1_dnum__batches__tracked_S"].shape == (1,)
    assert tenfold.wtxt.verify(p).ok


def test_plain_names_write_the_same_bytes_as_before(tmp_path):
    t = {"W": np.ones((2, 2)), "ids": np.arange(3, dtype=np.int32)}
    tenfold.save(tmp_path / "a.wtxt", t)
    tenfold.wtxt.write(tmp_path / "b.wtxt", t, schema="tenfold/v1", gen=0,
                       ts="1970-01-01T00:00:00Z", build="tenfold")  # fmt: skip
    assert (tmp_path / "a.wtxt").read_bytes() == (tmp_path / "b.wtxt").read_bytes()
    assert b"tenfold_names" not in (tmp_path / "a.wtxt").read_bytes()


def test_names_are_not_decoded_without_the_cap_item(tmp_path):
    p = tmp_path / "x.wtxt"
    tenfold.wtxt.write(p, {"_Zlayer_dw": np.ones(2)}, schema="s", gen=0,
                       ts="1970-01-01T00:00:00Z", build="b")  # fmt: skip
    assert list(tenfold.load(p)) == ["_Zlayer_dw"]

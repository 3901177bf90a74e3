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
    with tenfold.wtxt.open(p, raw_names=True) as f:
        assert f["_Zbn1_dnum__batches__tracked_S"].shape == (1,)
        assert f.stored_name("_Zbn1_dnum__batches__tracked_S") == "_Zbn1_dnum__batches__tracked_S"
    assert tenfold.wtxt.verify(p).ok


def test_open_keys_are_the_decoded_names(tmp_path):
    """tenfold.open / wtxt.open / wtxt.read key a tenfold_names file by the tensor names, as
    load and safe_open do (a new-user trial found open() handing out the encoded names)."""
    sd = {
        "features.0.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "bn1.num_batches_tracked": np.array(17, np.int64),
        "_Zodd": np.ones(2, np.int8),  # a name that looks encoded is itself encoded
        "plain_name": np.ones(2, np.int32),
    }
    p = tmp_path / "sd.wtxt"
    tenfold.save(p, sd)
    with tenfold.open(p) as f:
        assert sorted(f) == sorted(sd)
        assert "_Zfeatures_d0_dweight" not in f
        assert f["bn1.num_batches_tracked"].shape == ()
        assert int(f["bn1.num_batches_tracked"]) == 17
        info = f.info("bn1.num_batches_tracked")
        assert info.name == "bn1.num_batches_tracked" and info.shape == ()
        assert info.extras["stored_name"] == "_Zbn1_dnum__batches__tracked_S"
        assert f.stored_name("features.0.weight") == "_Zfeatures_d0_dweight"
        assert f.read("features.0.weight", (slice(1, 2),)).tolist() == [[4, 5, 6, 7]]
        assert f["_Zodd"].tolist() == [1, 1]
    assert sorted(tenfold.wtxt.read(p)) == sorted(sd)
    assert sorted(tenfold.wtxt.read(p, raw_names=True)) == sorted(
        names.encode(k, np.ndim(v) == 0) for k, v in sd.items()
    )
    with tenfold.safe_open(p, "np") as g:
        assert sorted(g.keys()) == sorted(sd)
        assert g.get_tensor("bn1.num_batches_tracked").shape == ()
        assert g.get_slice("features.0.weight")[1:2].tolist() == [[4, 5, 6, 7]]


def test_a_malformed_encoded_name_names_its_line(tmp_path):
    p = tmp_path / "bad.wtxt"
    tenfold.wtxt.write(p, {"_Zx_q": np.ones(2)}, schema="s", gen=0, ts="1970-01-01T00:00:00Z",
                       build="b", cap_extra=[names.CAP_ITEM])  # fmt: skip
    with pytest.raises(tenfold.FormatError, match=r"line 5 .*'_Zx_q'.*unknown escape"):
        tenfold.open(p)
    with tenfold.wtxt.open(p, raw_names=True) as f:
        assert list(f) == ["_Zx_q"]


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


def test_sharded_wtxt_with_encoded_names_opens(tmp_path):
    """The index names the tensors; the shards store them encoded: opening the index looked
    them up by the shards' (then encoded) keys and refused every shard."""
    sd = {f"layer{i}.weight": np.full((64, 64), i, np.float32) for i in range(4)}
    sd["bn.n"] = np.array(3, np.int64)
    p = tmp_path / "m.wtxt"
    tenfold.save(p, sd, max_shard_size=40000)
    assert (tmp_path / "m-00002-of-00002.wtxt").exists()
    with tenfold.open(tmp_path / "m.wtxt.index.json") as f:
        assert sorted(f) == sorted(sd)
        assert f["layer3.weight"][0, 0] == 3 and f["bn.n"].shape == ()


def test_inspect_lists_the_decoded_names(tmp_path, capsys):
    """`tenfold inspect` lists arrays under the names open/load give them (the stored name
    beside it), 0-d arrays with shape (); a file without the cap item is listed as stored."""
    import json

    from tenfold import wtxt
    from tenfold.cli import main

    p = tmp_path / "sd.wtxt"
    tenfold.save(
        p,
        {
            "layer0.weight": np.ones((2, 3), np.float32),
            "bn.n": np.int64(7),
            "b": np.ones(2, np.int32),
        },
    )
    rows = {r["name"]: r for r in wtxt.inspect(p) if not r.get("part")}
    assert set(rows) >= {"layer0.weight", "bn.n", "b"}
    assert rows["layer0.weight"]["stored"] == "_Zlayer0_dweight"
    assert tuple(rows["layer0.weight"]["shape"]) == (2, 3)
    assert rows["bn.n"]["shape"] == () and rows["bn.n"]["stored"] == "_Zbn_dn_S"
    assert "stored" not in rows["b"]
    chunks = [r["name"] for r in wtxt.inspect(p) if r.get("part") == "chunk"]
    assert "layer0.weight[000000]" in chunks
    assert main(["inspect", "--json", str(p)]) == 0
    doc = json.loads(capsys.readouterr().out)
    names_listed = {o["name"] for o in doc["objects"] if not o.get("part")}
    assert {"layer0.weight", "bn.n", "b"} <= names_listed
    with tenfold.open(p) as r:
        assert {"layer0.weight", "bn.n", "b"} <= set(r)
    plain = tmp_path / "plain.wtxt"
    tenfold.save(plain, {"w": np.zeros(3, np.float32)})
    assert [r["name"] for r in wtxt.inspect(plain) if not r.get("part")] == ["w"]

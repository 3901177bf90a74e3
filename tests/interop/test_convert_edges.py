"""Lossless or loud at the edges of convert (issue 21): names an npz member cannot carry back,
FOLD tensor names that collide once joined as ``<chunk>/<array>``, zTensor v2 file attributes
and v2 sources and targets streamed one tensor at a time."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

import tenfold
from tenfold import fold
from tenfold.convert import convert
from tenfold.errors import EncodeError, UnsupportedError
from tenfold.interop import write_npz

# -- npz member names -------------------------------------------------------------------------


@pytest.mark.parametrize("src_sfx", [".zt", ".safetensors"])
def test_nul_in_a_name_is_refused_for_npz_before_anything_is_written(tmp_path, src_sfx):
    # Before: zipfile cut the member name at the NUL, so 'a\x00b' came back as 'a' (and two
    # such names as one duplicate member).
    src, dst = tmp_path / ("s" + src_sfx), tmp_path / "d.npz"
    tenfold.save(src, {"a\x00b": np.arange(3, dtype=np.int32), "c": np.ones(2)})
    assert "a\x00b" in tenfold.load(src)  # the source holds it
    with pytest.raises(EncodeError, match=r"npz: array 'a\\x00b'.*U\+0000"):
        convert(src, dst)
    assert not dst.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s" + src_sfx]


@pytest.mark.parametrize(
    "name, why",
    [
        ("a\x00b", r"U\+0000"),
        ("a\ud800", "UTF-8"),
        ("x" * 65532, "65535"),  # + ".npy": one byte over the 16-bit length field
    ],
)
def test_names_a_zip_member_cannot_carry_are_refused(tmp_path, name, why):
    dst = tmp_path / "d.npz"
    with pytest.raises(EncodeError, match=why):
        write_npz(dst, {name: np.arange(2)}, fsync=False)
    assert not dst.exists()
    with pytest.raises(EncodeError, match=why):
        tenfold.save(dst, {name: np.arange(2)})
    assert not dst.exists()
    with fold.Writer(tmp_path / "c.fold") as w:  # a FOLD NPZ0 chunk is an npz archive too
        with pytest.raises(EncodeError, match=why):
            w.add_arrays("arrays", {name: np.arange(2)})
        w.finalize()


def test_longest_member_name_and_odd_names_round_trip(tmp_path):
    names = ["a\\b", "../up", "/abs", "ü/é", "x.npy", "", "x" * 65531]
    dst = tmp_path / "d.npz"
    write_npz(dst, {n: np.arange(i + 1) for i, n in enumerate(names)}, fsync=False)
    back = tenfold.load(dst)
    assert list(back) == names
    with zipfile.ZipFile(dst) as z:
        assert [i.filename for i in z.infolist()] == [n + ".npy" for n in names]
    assert list(np.load(dst).keys()) == names


# -- FOLD <chunk>/<array> names ---------------------------------------------------------------


def _colliding_fold(path):
    with fold.Writer(path) as w:
        w.add_state_dict("x", {"y/z": np.arange(2, dtype=np.int16)})
        w.add_state_dict("x/y", {"z": np.arange(3, dtype=np.int16)})
        w.finalize()


def test_fold_chunk_array_names_that_collide_are_refused(tmp_path):
    # Before: chunk 'x' array 'y/z' and chunk 'x/y' array 'z' both became 'x/y/z' and the
    # second silently replaced the first in load() and convert().
    src = tmp_path / "c.fold"
    _colliding_fold(src)
    both = r"chunk 'x/y' array 'z'.*'x/y/z'.*chunk 'x' array 'y/z'"
    with pytest.raises(UnsupportedError, match=both):
        fold.load(src)
    with pytest.raises(UnsupportedError, match=both):
        tenfold.load(src)
    for sfx in (".safetensors", ".zt", ".npz"):
        dst = tmp_path / ("d" + sfx)
        with pytest.raises(UnsupportedError, match=both):
            convert(src, dst)
        assert not dst.exists()
    # one chunk at a time is still readable
    assert fold.load(src, chunk="x")["y/z"].tolist() == [0, 1]
    assert fold.load(src, chunk="x/y")["z"].tolist() == [0, 1, 2]


def test_fold_chunks_without_collision_keep_every_name(tmp_path):
    src = tmp_path / "c.fold"
    with fold.Writer(src) as w:
        w.add_state_dict("x", {"y/z": np.arange(2, dtype=np.int16)})
        w.add_state_dict("x/y", {"w": np.arange(3, dtype=np.int16)})
        w.finalize()
    assert sorted(fold.load(src)) == ["x/y/w", "x/y/z"]
    convert(src, tmp_path / "d.safetensors")
    assert sorted(tenfold.load(tmp_path / "d.safetensors")) == ["x/y/w", "x/y/z"]

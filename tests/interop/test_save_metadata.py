"""``tenfold.save(..., metadata=...)`` keeps file metadata wherever the format has a place for
it and refuses it loudly where it has none (a new-user trial found it silently dropped for
.zt and a bare TypeError for .npz/.wtxt)."""

from __future__ import annotations

import numpy as np
import pytest

import tenfold
import tenfold.convert as conv
from tenfold.errors import EncodeError, FormatError

T = {"a": np.arange(6, dtype=np.float32), "b": np.ones((2, 2), np.int16)}
MD = {"format": "pt", "who": "me"}


@pytest.mark.parametrize("suffix", [".zt", ".safetensors", ".fold", ".oinf"])
def test_metadata_is_kept(tmp_path, suffix):
    p = tmp_path / f"m{suffix}"
    tenfold.save(p, T, metadata=MD)
    with conv.open_source(p) as s:
        assert {k: s.metadata[k] for k in MD} == MD


def test_zt_reader_metadata_shows_it(tmp_path):
    p = tmp_path / "m.zt"
    tenfold.save(p, T, metadata=MD)
    with tenfold.open(p) as r:
        assert r.metadata == MD and r.generation == "0.1.0"


@pytest.mark.parametrize("generation", [0, 2])
def test_zt_metadata_key_version_is_the_writers(tmp_path, generation):
    """A user key ``version`` comes back as written through both read APIs (the 0.1.0 reader
    used to put its own ``"0.1.0"`` over it) and through a conversion."""
    from tenfold import safe_open

    md = {"version": "my-model-v3", "format": "pt"}
    p = tmp_path / "ver.zt"
    tenfold.save(p, T, metadata=md, generation=generation)
    with tenfold.open(p) as r:
        assert r.metadata == md
    with safe_open(p, framework="np") as f:
        assert f.metadata() == md
    conv.convert(p, tmp_path / "ver.safetensors")
    with safe_open(tmp_path / "ver.safetensors", framework="np") as f:
        assert f.metadata() == md


def test_zt_v2_metadata_is_the_file_attributes(tmp_path):
    p = tmp_path / "m.zt"
    tenfold.save(p, T, metadata=MD, generation=2)
    with tenfold.open(p) as r:
        assert r.metadata == MD


def test_zt_refuses_unknown_keywords_and_metadata_without_tensors(tmp_path):
    with pytest.raises(TypeError, match="bogus"):
        tenfold.save(tmp_path / "x.zt", T, bogus=1)
    with pytest.raises(EncodeError, match="metadata"):
        tenfold.save(tmp_path / "y.zt", {}, metadata=MD)
    assert not (tmp_path / "x.zt").exists() and not (tmp_path / "y.zt").exists()


@pytest.mark.parametrize("suffix", [".npz", ".wtxt"])
def test_formats_without_metadata_refuse_it(tmp_path, suffix):
    p = tmp_path / f"m{suffix}"
    with pytest.raises(EncodeError, match="no file metadata"):
        tenfold.save(p, T, metadata=MD)
    assert not p.exists()
    tenfold.save(p, T, metadata={})  # nothing to lose: accepted
    assert sorted(tenfold.load(p)) == ["a", "b"]


def test_npz_member_dropped_from_the_directory_is_an_error(tmp_path):
    # a flipped bit in a central-directory entry made zipfile skip it: verify said OK with one
    # array of two; the end record's entry count now has to match
    p = tmp_path / "m.npz"
    tenfold.save(p, T)
    data = bytearray(p.read_bytes())
    first = data.find(b"PK\x01\x02")  # the first central-directory entry
    data[first + 29] ^= 0x01  # its file-name length + 256: zipfile steps over the second
    p.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="entry count"):
        tenfold.load(p)
    from tenfold.cli import main

    assert main(["verify", str(p)]) != 0

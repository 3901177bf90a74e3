"""Every writer refuses a tensor name it cannot store in the same form: the format the user
asked for, the tensor, the field, and meaningful expected/actual values."""

from __future__ import annotations

import numpy as np
import pytest

import tenfold
from tenfold.convert import convert
from tenfold.errors import EncodeError

# suffix -> the format name an error must start with (.fold/.mind: FOLD, though its tensors
# sit in a safetensors chunk)
WRITERS = {
    "safetensors": "safetensors",
    "fold": "fold",
    "mind": "fold",
    "wtxt": "wtxt",
    "npz": "npz",
    "zt": "zt",
    "oinf": "oinf",
}


@pytest.mark.parametrize("ext", sorted(WRITERS))
def test_non_string_name_is_expected_str_got_int(tmp_path, ext):
    path = tmp_path / f"k.{ext}"
    with pytest.raises(EncodeError) as ei:
        tenfold.save(path, {1: np.ones(2, np.float32)})
    msg = str(ei.value)
    assert msg.startswith(f"{WRITERS[ext]}: "), msg
    assert "name: not a string; expected str, got int" in msg, msg
    assert "expected None" not in msg
    assert not path.exists()


@pytest.mark.parametrize("ext", ["safetensors", "fold", "mind"])
def test_reserved_metadata_name_says_why(tmp_path, ext):
    path = tmp_path / f"k.{ext}"
    with pytest.raises(EncodeError) as ei:
        tenfold.save(path, {"__metadata__": np.ones(2, np.float32)})
    msg = str(ei.value)
    assert msg.startswith(f"{WRITERS[ext]}: tensor '__metadata__': name: reserved"), msg
    assert "expected any other string, got '__metadata__'" in msg, msg
    assert "expected None" not in msg
    assert not path.exists()


@pytest.mark.parametrize("ext", ["wtxt", "npz", "zt", "oinf"])
def test_metadata_name_is_an_ordinary_name_elsewhere(tmp_path, ext):
    # only a safetensors header reserves "__metadata__": these formats keep it as a name
    path = tmp_path / f"k.{ext}"
    arr = np.arange(3, dtype=np.float32)
    tenfold.save(path, {"__metadata__": arr})
    back = tenfold.load(path)
    assert list(back) == ["__metadata__"]
    np.testing.assert_array_equal(back["__metadata__"], arr)


def test_convert_to_fold_names_fold(tmp_path):
    src = tmp_path / "m.zt"
    tenfold.save(src, {"__metadata__": np.ones(2, np.float32)})
    with pytest.raises(EncodeError, match=r"^fold: tensor '__metadata__': name: reserved"):
        convert(src, tmp_path / "m.fold")
    assert not (tmp_path / "m.fold").exists()


def test_oinf_invalid_name_shows_it_quoted(tmp_path):
    # an empty name was shown as nothing at all ("got ")
    with pytest.raises(EncodeError, match=r"invalid name; expected \[A-Za-z0-9._-\]\+, got ''$"):
        tenfold.save(tmp_path / "k.oinf", {"": np.ones(2, np.float32)})

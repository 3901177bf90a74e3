"""Issue 21 (TARIDX edges): a batch index beyond int64 is an IndexError as ``ds[i]`` says, and
the sampler refuses a state or an argument out of range when it is given, naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenfold.taridx as tx
from tenfold.errors import FormatError, IntegrityError

_HUGE = [2**63, 2**64, 2**63 - 1, -(2**63), -(2**63) - 1, -(2**64), 2**200, -(2**200)]


@pytest.fixture(scope="module")
def ds(conformance):
    with tx.Dataset(conformance / "taridx" / "basic_ustar", "train") as d:
        yield d


def _outcome(fn):
    """``("ok", value)`` or ``(exception class name, message)``."""
    try:
        return "ok", fn()
    except Exception as exc:  # the class and message are what is compared
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("i", _HUGE)
def test_getitems_beyond_int64_is_index_error(ds, i):
    """``ds.__getitems__([2**63])`` raised OverflowError (NumPy's int64 conversion) where
    ``ds[2**63]`` raises IndexError; both now say the same."""
    with pytest.raises(IndexError, match="out of range for a split of 10"):
        ds.__getitems__([i])
    with pytest.raises(IndexError, match="out of range for a split of 10"):
        ds.__getitems__([0, i, 1])
    assert _outcome(lambda: ds.__getitems__([i])) == _outcome(lambda: ds[i])


def test_getitems_first_bad_index_is_named(ds):
    """The first index out of range (in batch order) is the one named, in or beyond int64."""
    with pytest.raises(IndexError, match="^sample 11 out"):
        ds.__getitems__([3, 11, 2**70])
    with pytest.raises(IndexError, match=f"^sample {2**70} out"):
        ds.__getitems__([3, 2**70, 11])
    assert [s["cls"] for s in ds.__getitems__([np.uint64(9), -1])] == [ds[9]["cls"]] * 2


@given(st.one_of(st.integers(-(2**70), 2**70), st.sampled_from(_HUGE), st.integers(-12, 12)))
def test_getitems_agrees_with_getitem(ds, i):
    """For any integer, the batch of one gives ``ds[i]``'s outcome: same class and message,
    or the same sample."""
    got = _outcome(lambda: ds.__getitems__([i]))
    want = _outcome(lambda: ds[i])
    if want[0] == "ok":
        assert got[0] == "ok"
        assert {k: bytes(v) for k, v in got[1][0].items()} == {
            k: bytes(v) for k, v in want[1].items()
        }
    else:
        assert got == want


# -- EpochSampler -----------------------------------------------------------------------------


def _state(**changes):
    s = tx.EpochSampler(10, seed=3, rank=1, world_size=2)
    st_ = s.state_dict()
    st_.update(changes)
    return s, st_


@pytest.mark.parametrize(
    "field,value,expected",
    [
        ("epoch", -1, ">= 0"),
        ("epoch", -(2**70), ">= 0"),
        ("seed", -1, ">= 0"),
        ("n", -1, ">= 0"),
        ("world_size", 0, ">= 1"),
        ("world_size", -2, ">= 1"),
        ("rank", -1, "0 <= rank < 2"),
        ("rank", 2, "0 <= rank < 2"),
        ("block", 0, ">= 1"),
        ("block", -3, ">= 1"),
    ],
)
def test_load_state_dict_refuses_out_of_range(field, value, expected):
    """``epoch=-1`` was accepted and iteration then raised NumPy's ValueError; every field's
    range is now checked on load (FormatError naming the field, expected and got), and the
    sampler is left as it was."""
    s, state = _state(**{field: value})
    before = s.state_dict()
    with pytest.raises(
        FormatError, match=f"{field}: out of range; expected {expected}, got {value}$"
    ):
        s.load_state_dict(state)
    assert s.state_dict() == before
    assert list(s) == s.indices().tolist()


@pytest.mark.parametrize("value", [True, 1.0, "1", None, np.float64(1), [1]])
@pytest.mark.parametrize("field", ["epoch", "position", "seed", "n", "rank", "block"])
def test_load_state_dict_refuses_wrong_types(field, value):
    s, state = _state(**{field: value})
    with pytest.raises(FormatError, match=f"{field}: wrong type; expected int"):
        s.load_state_dict(state)


def test_load_state_dict_huge_values():
    """A huge epoch is a valid epoch (its order is seeded with it); a huge position or a
    huge n is refused, never an overflow."""
    s, state = _state(epoch=2**70, position=2)
    s.load_state_dict(state)
    assert len(list(s)) == len(s) - 2
    for field, value in (("position", 2**70), ("position", -1)):
        s, state = _state(**{field: value})
        with pytest.raises(FormatError, match=f"{field}: out of range"):
            s.load_state_dict(state)
    s, state = _state(n=2**70)
    with pytest.raises(IntegrityError, match="n: saved for another number of samples"):
        s.load_state_dict(state)


@pytest.mark.parametrize("value", [-1, -(2**70)])
def test_set_epoch_and_arguments_refuse_negatives(value):
    """``set_epoch(-1)`` (and a negative seed) failed later, inside NumPy, on iteration."""
    s = tx.EpochSampler(10)
    with pytest.raises(ValueError, match=f"epoch must be >= 0, got {value}"):
        s.set_epoch(value)
    assert s.epoch == 0 and len(list(s)) == 10
    with pytest.raises(ValueError, match=f"seed must be >= 0, got {value}"):
        tx.EpochSampler(10, seed=value)
    with pytest.raises(ValueError, match=f"seed must be >= 0, got {value}"):
        tx.epoch_order(10, seed=value)
    with pytest.raises(ValueError, match=f"epoch must be >= 0, got {value}"):
        tx.epoch_order(10, epoch=value)
    with pytest.raises(ValueError, match=f"n must be >= 0, got {value}"):
        tx.EpochSampler(value)


@pytest.mark.parametrize("value", [1.5, True, "2"])
def test_set_epoch_and_arguments_refuse_non_integers(value):
    """A float epoch or seed was truncated silently by ``int()``."""
    s = tx.EpochSampler(10)
    with pytest.raises(TypeError, match="epoch must be an int"):
        s.set_epoch(value)
    with pytest.raises(TypeError, match="seed must be an int"):
        tx.EpochSampler(10, seed=value)
    with pytest.raises(TypeError, match="block must be an int"):
        tx.EpochSampler(10, block=value)


def test_numpy_integers_still_accepted():
    s = tx.EpochSampler(np.int64(10), seed=np.uint32(3), rank=np.int64(0), world_size=1)
    s.set_epoch(np.int64(2))
    assert s.epoch == 2 and sorted(s) == list(range(10))
    assert s.state_dict()["n"] == 10 and type(s.state_dict()["seed"]) is int

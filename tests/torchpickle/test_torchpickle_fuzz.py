"""Hypothesis on the pickle reader: what Python's own pickler writes for plain data (every
protocol torch.save can use) comes back equal; mutated pickles and mutated checkpoints give a
value made only of the accepted types, or a tenfold error, never anything else."""

from __future__ import annotations

import math
import pickle

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tenfold.errors import TenfoldError
from tenfold.formats.torchpickle import reader
from tenfold.formats.torchpickle._demo import pickle_of, write_checkpoint
from tenfold.formats.torchpickle._pickle import (
    ODict,
    PickledSet,
    Storage,
    Tensor,
    TorchDtype,
    Unpickler,
)  # fmt: skip

scalars = (
    st.none() | st.booleans() | st.integers(-(2**200), 2**200)
    | st.floats(allow_nan=False) | st.text(max_size=20) | st.binary(max_size=20)
)  # fmt: skip
keys = st.text(max_size=8) | st.integers(-1000, 1000)
values = st.recursive(
    scalars,
    lambda kids: (
        st.lists(kids, max_size=5)
        | st.tuples(kids, kids)
        | st.lists(kids, max_size=6).map(tuple)
        | st.dictionaries(keys, kids, max_size=5)
        | st.sets(st.integers(-50, 50) | st.text(max_size=4), max_size=5)
    ),
    max_leaves=30,
)


def _same(got, want) -> bool:
    if isinstance(want, set):
        return isinstance(got, PickledSet) and len(got) == len(want) and set(got) == want
    if isinstance(want, dict):
        return (type(got) in (dict, ODict) and list(got) == list(want)
                and all(_same(got[k], want[k]) for k in want))  # fmt: skip
    if isinstance(want, (list, tuple)):
        return (type(got) is type(want) and len(got) == len(want)
                and all(_same(a, b) for a, b in zip(got, want, strict=True)))  # fmt: skip
    if isinstance(want, float):
        return type(got) is float and (got == want or (math.isnan(got) and math.isnan(want)))
    return type(got) is type(want) and got == want


@given(values, st.sampled_from([2, 3, 4, 5]))
def test_what_pickle_writes_comes_back_equal(obj, protocol):
    data = pickle.dumps(obj, protocol=protocol)
    got, end = Unpickler(data).load()
    assert end == len(data)
    assert _same(got, obj), (got, obj)


ACCEPTED = (type(None), bool, int, float, str, bytes, TorchDtype, Tensor, Storage)


def _only_accepted(v, depth=0) -> None:
    """Every object in ``v`` is one the module doc lists (the parser built nothing else)."""
    assert depth < 2000
    if isinstance(v, dict):
        assert type(v) in (dict, ODict)
        for k, c in v.items():
            assert isinstance(k, (str, int, float, bool, bytes, type(None), tuple))
            _only_accepted(c, depth + 1)
    elif isinstance(v, (list, tuple)):
        assert type(v) in (list, tuple, PickledSet)
        for c in v:
            if c is not v:
                _only_accepted(c, depth + 1)
    else:
        assert isinstance(v, ACCEPTED) or type(v).__name__ == "Global", type(v)


SEED, _ = pickle_of({
    "w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": [1, 2.5, "x", None, (True, -7)],
    "b": np.zeros(0, np.int64),
})  # fmt: skip


@given(st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), max_size=6),
       st.integers(0, len(SEED)))  # fmt: skip
def test_mutated_pickles_give_accepted_values_or_tenfold_errors(flips, cut):
    data = bytearray(SEED)
    for at, v in flips:
        data[at] = v
    try:
        got, _ = Unpickler(bytes(data[:cut] if cut < len(data) else data)).load()
    except TenfoldError as exc:
        assert exc.fmt == "torchpickle" and exc.obj
        return
    _only_accepted(got)


def _checkpoint() -> bytes:
    import os
    import tempfile

    p = os.path.join(tempfile.mkdtemp(), "seed.pt")
    write_checkpoint(p, {"a": np.arange(12, dtype=np.float32).reshape(3, 4),
                         "b": {"c": np.ones(2, np.int16)}, "epoch": 3})  # fmt: skip
    with open(p, "rb") as f:
        return f.read()


FILE = _checkpoint()


@given(st.lists(st.tuples(st.integers(0, len(FILE) - 1), st.integers(0, 255)), min_size=1,
                max_size=4))  # fmt: skip
def test_mutated_checkpoints_read_or_refuse(flips):
    data = bytearray(FILE)
    for at, v in flips:
        data[at] = v
    try:
        with reader.open(bytes(data)) as r:
            for k in r:
                a = r[k]
                assert isinstance(a, np.ndarray) and not a.flags.writeable
                np.asarray(a).sum()
            r.verify()
    except TenfoldError as exc:
        assert exc.fmt and exc.obj

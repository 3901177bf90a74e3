"""Hypothesis: random and mutated files give only tenfold.errors exceptions, never a crash,
a hang or an allocation past the limits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenfold.ztensor as zt
from tenfold.core import Limits
from tenfold.errors import TenfoldError

LIMITS = Limits(max_decoded_bytes=1 << 24, max_index_bytes=1 << 20)


def _seed_file() -> bytes:
    import os
    import shutil
    import tempfile

    from tenfold.ztensor.sparse import SparseTensor

    d = tempfile.mkdtemp()
    p = os.path.join(d, "seed.zt")
    with zt.Writer(p, fsync=False) as w:
        w.add("a", np.arange(12, dtype=np.float32).reshape(3, 4), checksum="crc32c")
        w.add("b", np.arange(50, dtype=np.int16), encoding="zstd", checksum="sha256")
        w.add("c", np.array(True))
        w.add("be", np.arange(3, dtype=np.float64))
        w.add(
            "sp",
            SparseTensor(
                "csr",
                (2, 3),
                np.ones(2, np.float32),
                indices=np.array([0, 2], np.uint64),
                indptr=np.array([0, 1, 2], np.uint64),
            ),
        )
        w.add(
            "coo",
            SparseTensor(
                "coo", (2, 2, 2), np.ones(1, np.int8), coords=np.array([[1], [0], [1]], np.uint64)
            ),
            encoding="zstd",
        )
    with open(p, "rb") as f:
        data = f.read()
    shutil.rmtree(d)  # made at import time, before any tmp_path exists
    return data


SEED = _seed_file()


def exercise(data: bytes) -> None:
    try:
        with zt.Reader(data, limits=LIMITS, sparse="raw") as r:
            for name in r:
                try:
                    r.read(name)
                    r.read(name, copy=True)
                except TenfoldError:
                    pass
    except TenfoldError:
        pass
    report = zt.verify(data, limits=LIMITS)  # never raises
    assert isinstance(report.ok, bool)


@given(st.binary(max_size=400))
def test_random_bytes(data):
    exercise(data)
    exercise(b"ZTEN0001" + data)


@given(
    st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), min_size=1, max_size=8)
)
def test_mutated_bytes(edits):
    data = bytearray(SEED)
    for pos, val in edits:
        data[pos] = val
    exercise(bytes(data))


@given(st.integers(0, len(SEED)), st.binary(max_size=64))
def test_truncated_and_extended(cut, tail):
    exercise(SEED[:cut])
    exercise(SEED + tail)
    exercise(SEED[:cut] + tail)


@given(st.integers(len(SEED) - 400, len(SEED) - 9), st.integers(0, 255))
def test_index_mutations(pos, val):
    """Concentrate on the CBOR index, where the interesting lies are."""
    data = bytearray(SEED)
    data[pos] = val
    exercise(bytes(data))


def test_seed_is_valid():
    assert zt.verify(SEED).ok
    with pytest.raises(TenfoldError):
        zt.Reader(SEED[:-1])

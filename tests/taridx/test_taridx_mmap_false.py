"""``mmap=False`` on a TARIDX index (issue 13: every reader takes it; the index used to raise a
bare ``TypeError`` for the unknown keyword): the index is read with ``pread`` into owned
memory and answers exactly as the mapped one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tenfold
from tenfold import taridx


def test_open_mmap_false_reads_the_same_rows_and_samples(tmp_path: Path) -> None:
    path = taridx.demo(tmp_path)
    with tenfold.open(path) as mapped, tenfold.open(path, mmap=False) as owned:
        assert owned._mf._mm is None  # not mapped: pread into owned memory
        assert list(owned) == list(mapped)
        for col in mapped.rows.dtype.names:
            assert np.array_equal(owned.rows[col], mapped.rows[col])
        for key in mapped:
            assert owned[key] == mapped[key]
    assert owned.closed


def test_load_mmap_false(tmp_path: Path) -> None:
    path = taridx.demo(tmp_path)
    a = tenfold.load(path)
    b = tenfold.load(path, mmap=False, copy=True)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k])

"""Hostile numbers in WTXT files: bounded before parsing or allocating."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tenfold.wtxt as w
from tenfold.errors import FormatError, TruncatedError
from tenfold.wtxt import _spec as S

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "wtxt"


def test_delta_chunk_len_is_bounded_before_allocation(tmp_path):
    s = (VECTORS / "delta.wtxtdelta").read_bytes()
    m = re.search(rb"len=(\d+) (.*?) lines=(\d+)", s)
    assert m is not None
    big = 10**11
    bad = s[: m.start()] + b"len=%d " % big + m.group(2) + b" lines=%d" % S.b64_lines(big)
    p = tmp_path / "x.wtxtdelta"
    p.write_bytes(bad + s[m.end() :])
    with pytest.raises(TruncatedError, match="larger than the rest of the file"):
        w.inspect(p)
    assert not w.verify(p).ok


@pytest.mark.parametrize("field", [b"bytes=", b"shape="])
def test_huge_numbers_are_format_errors(tmp_path, field):
    s = (VECTORS / "all_dtypes.wtxt").read_bytes()
    i = s.index(field) + len(field)
    j = i
    while s[j : j + 1].isdigit():
        j += 1
    p = tmp_path / "h.wtxt"
    p.write_bytes(s[:i] + b"9" * 5000 + s[j:])
    with pytest.raises(FormatError):
        w.load(p)
    assert not w.verify(p).ok

"""Rows whose offset or size would overflow int64 arithmetic are refused, never wrapped."""

from __future__ import annotations

import pytest

import tenfold.taridx as tx
from tenfold.errors import FormatError
from tenfold.taridx.dataset import Dataset


@pytest.mark.parametrize("field_at, name", [(2, "offset"), (10, "size")])
def test_huge_row_fields(tmp_path, field_at, name):
    p = tx.demo(tmp_path)
    data = bytearray(p.read_bytes())
    with tx.Index.open(p) as idx:
        off = idx.off_arr
    data[off + field_at : off + field_at + 8] = (2**64 - 1).to_bytes(8, "little")
    p.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=rf"row 0 at offset {off:#x}: {name}: out of range"):
        Dataset(tmp_path, p.stem)[0]
    report = tx.verify(p)  # reports, never raises
    assert not report.ok


def test_inspect_totals_are_exact(tmp_path):
    p = tx.demo(tmp_path)
    rows = tx.inspect(p)
    per_ext = {r["name"]: r["bytes"] for r in rows if r["name"].startswith("ext ")}
    with tx.Index.open(p) as idx:
        for i, e in enumerate(idx.ext):
            want = int(idx.rows["size"][idx.rows["extid"] == i].astype("u8").sum())
            assert per_ext[f"ext {e!r}"] == want

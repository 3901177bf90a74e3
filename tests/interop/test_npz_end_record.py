"""The npz reader compares the end record's entry count with the entries zipfile found (a
damaged entry must not drop a member silently). The count comes from tenfold's own reader of
the record (``_endrecord.read_end_record``), which must give the answers of zipfile's private
``_EndRecData`` and must not need it: with it gone or changed, as a later Python may have it,
npz files still read and a dropped member is still found."""

from __future__ import annotations

import io
import types
import zipfile

import numpy as np
import pytest

import tenfold
from tenfold.errors import FormatError
from tenfold.formats.npz import archive
from tenfold.formats.npz._endrecord import read_end_record
from tenfold.formats.npz.writer import write_npz

ARRAYS = {"a": np.arange(10, dtype=np.int64), "b": np.eye(3), "c": np.zeros((0, 2), np.uint8)}


def _dropped_member(path) -> None:
    """An archive whose first central-directory entry claims a 256-byte longer name: zipfile
    steps over the second entry and finds one member of two."""
    data = bytearray(path.read_bytes())
    first = data.find(b"PK\x01\x02")
    data[first + 29] ^= 0x01
    path.write_bytes(bytes(data))


def _other_zipfile(monkeypatch, kind: str) -> None:
    """The npz reader sees zipfile as a later Python might have it: no _EndRecData, no
    _ECD_ENTRIES_TOTAL, or an _EndRecData answering in another shape. (zipfile itself keeps
    its own: its ZipFile reads the directory with them.)"""
    seen = types.ModuleType("zipfile")
    seen.__dict__.update(vars(zipfile))
    if kind == "no _EndRecData":
        del seen._EndRecData
    elif kind == "no _ECD_ENTRIES_TOTAL":
        del seen._ECD_ENTRIES_TOTAL
    elif kind == "a record of another shape":
        seen._EndRecData = lambda f: {"entries": 99}
    monkeypatch.setattr(archive, "zipfile", seen)


KINDS = ["no _EndRecData", "no _ECD_ENTRIES_TOTAL", "a record of another shape"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("compressed", [False, True])
def test_npz_reads_where_zipfile_has_no_end_record_reader(tmp_path, monkeypatch, kind, compressed):
    p = tmp_path / "m.npz"
    write_npz(p, ARRAYS, compressed=compressed, fsync=False)
    _other_zipfile(monkeypatch, kind)
    got = tenfold.load(p)
    assert sorted(got) == sorted(ARRAYS)
    for k, v in ARRAYS.items():
        assert got[k].dtype == v.dtype and got[k].tobytes() == v.tobytes()
    with tenfold.open(p) as r:
        assert r.verify().ok


@pytest.mark.parametrize("kind", KINDS)
def test_a_dropped_member_is_still_found_without_zipfiles_reader(tmp_path, monkeypatch, kind):
    p = tmp_path / "m.npz"
    write_npz(p, ARRAYS, fsync=False)
    _dropped_member(p)
    _other_zipfile(monkeypatch, kind)
    with pytest.raises(FormatError, match="entry count"):
        tenfold.load(p)


def _zipfile_answer(data: bytes) -> tuple[int, int] | None:
    end = zipfile._EndRecData(io.BytesIO(data))
    return None if end is None else (end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_LOCATION])


def _archive(members: int, comment: bytes = b"", zip64: bool = False) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for i in range(members):
            with z.open(f"m{i}.npy", "w", force_zip64=zip64) as m:
                m.write(bytes([i]) * i)
        z.comment = comment
    return buf.getvalue()


@pytest.mark.parametrize(
    "case",
    [
        "empty",
        "three",
        "comment",
        "longest comment",
        "zip64 members",
        "zip64 count",
        "65535 bytes after",
        "65536 bytes after",
    ],
)
def test_read_end_record_agrees_with_zipfile(monkeypatch, case):
    if case == "zip64 count":  # more members than the classic record counts: ZIP64 end record
        monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 3)
    data = {
        "empty": lambda: _archive(0),
        "three": lambda: _archive(3),
        "comment": lambda: _archive(2, b"made by a test"),
        "longest comment": lambda: _archive(2, b"c" * 0xFFFF),
        "zip64 members": lambda: _archive(4, zip64=True),
        "zip64 count": lambda: _archive(5),
        # bytes after the record that no comment declares: zipfile looks 64 KiB + 22 back
        "65535 bytes after": lambda: _archive(3) + b"t" * 0xFFFF,
        "65536 bytes after": lambda: _archive(3) + b"t" * 0x10000,
    }[case]()
    if case == "zip64 count":
        assert b"PK\x06\x06" in data
    want = _zipfile_answer(data)
    assert want is not None and read_end_record(io.BytesIO(data)) == want


@pytest.mark.parametrize("data", [b"", b"PK\x05\x06", b"not a zip at all" * 10, b"\0" * 100])
def test_read_end_record_finds_nothing_where_zipfile_finds_nothing(data):
    assert _zipfile_answer(data) is None
    assert read_end_record(io.BytesIO(data)) is None

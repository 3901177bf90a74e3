"""The zip CRC-32 of npz members comes from tenfold's kernel (issue 28: ``zlib.crc32`` was a
quarter of a conversion to ``.npz``), and the archives written are byte for byte what
:mod:`zipfile` writes (ZIP64 records included)."""

from __future__ import annotations

import io
import zipfile
import zlib

import numpy as np
import pytest

from tenfold.core import checksums
from tenfold.errors import IntegrityError
from tenfold.formats.npz import _zipmember
from tenfold.formats.npz._npy import write_npy, write_npy_pieces
from tenfold.formats.npz._zipmember import StoredMember, open_member
from tenfold.formats.npz.archive import Archive
from tenfold.formats.npz.writer import _ZIP_DATE, write_npz
from tenfold.formats.torchpickle import reader as tp_reader
from tenfold.formats.torchpickle._demo import write_checkpoint

ARRAYS = {
    "a": np.arange(10),
    "layers.0/w": np.arange(3 << 18, dtype=np.float32).reshape(-1, 256),  # 3 MiB: slices
    "é/ü": np.ones((3, 4), ">f8"),  # a UTF-8 name (flag bit 11)
    "f": np.asfortranarray(np.ones((70, 50), np.int16)),
    "empty": np.zeros((0, 3), np.uint8),
    "s": np.array(2.5),
}


class Pieces:
    """An array whose bytes come in blocks (what a conversion's RawTensor gives)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a, self.dtype, self.shape = a, a.dtype, a.shape

    def raw_pieces(self):
        b = self.a.reshape(-1).view(np.uint8)
        return (b[i : i + 100_003] for i in range(0, b.size, 100_003))


def _zipfile_npz(path, tensors, compressed=False) -> None:
    """What write_npz wrote before: every member through zipfile's own writer."""
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with open(path, "wb") as f, zipfile.ZipFile(f, "w", method, allowZip64=True) as zf:
        for k, v in tensors.items():
            info = zipfile.ZipInfo(k + ".npy", date_time=_ZIP_DATE)
            info.compress_type = method
            info.external_attr = 0o600 << 16
            with zf.open(info, "w", force_zip64=True) as m:
                if isinstance(v, Pieces):
                    write_npy_pieces(m, v.dtype, v.shape, v.raw_pieces())
                else:
                    write_npy(m, np.asarray(v))


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize(
    "limits",
    [None, (1000, 0xFFFF), (1 << 20, 3)],  # default; ZIP64 sizes and offsets; ZIP64 end record
    ids=["plain", "zip64-sizes", "zip64-count"],
)
def test_npz_bytes_are_zipfiles(tmp_path, monkeypatch, compressed, limits):
    """write_npz gives the bytes zipfile's own member writer gives, for every array kind, a
    UTF-8 name, pieces, and the ZIP64 paths (zipfile's limits lowered so small files reach
    them: sizes and offsets over ZIP64_LIMIT, more members than ZIP_FILECOUNT_LIMIT)."""
    if limits is not None:
        monkeypatch.setattr(zipfile, "ZIP64_LIMIT", limits[0])
        monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", limits[1])
    tensors = dict(ARRAYS, pieces=Pieces(np.arange(300_001, dtype=np.int64)))
    ours, theirs = tmp_path / "o.npz", tmp_path / "t.npz"
    write_npz(ours, tensors, compressed=compressed, fsync=False)
    _zipfile_npz(theirs, tensors, compressed)
    assert ours.read_bytes() == theirs.read_bytes()
    if limits is not None:
        assert b"PK\x06\x06" in ours.read_bytes() or limits[1] > len(tensors)
    monkeypatch.undo()
    with zipfile.ZipFile(ours) as z:
        assert z.testzip() is None  # every CRC-32, by zlib
    back = np.load(ours)
    for k, v in ARRAYS.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)


def _kernel_crc32() -> None:
    if checksums.crc32_implementation() == "zlib":
        pytest.skip("zlib is core.checksums.crc32 here (TENFOLD_PUREPYTHON, or no folding)")


def test_stored_npz_writer_checks_with_the_kernel_not_zlib(tmp_path, monkeypatch):
    """zipfile's member writer calls zlib.crc32 on every byte; the stored path must not."""
    _kernel_crc32()

    def fail(*a):
        raise AssertionError("zlib.crc32 on a stored member")

    p = tmp_path / "o.npz"
    with monkeypatch.context() as m:
        m.setattr(zipfile, "crc32", fail)
        m.setattr(zlib, "crc32", fail)
        write_npz(p, ARRAYS, fsync=False)
    with zipfile.ZipFile(p) as z:
        assert z.testzip() is None
        for k in ARRAYS:
            info = z.getinfo(k + ".npy")
            assert info.CRC == zlib.crc32(z.read(info))


def test_a_stored_member_on_a_file_that_cannot_seek_goes_through_zipfile():
    class Stream(io.RawIOBase):
        def __init__(self) -> None:
            self.out = bytearray()

        def writable(self) -> bool:
            return True

        def write(self, b) -> int:
            self.out += bytes(b)
            return len(b)

    s = Stream()
    with zipfile.ZipFile(s, "w") as zf:
        info = zipfile.ZipInfo("x.npy", date_time=_ZIP_DATE)
        with open_member(zf, s, info) as m:
            assert not isinstance(m, StoredMember)
            write_npy(m, np.arange(5))
    assert np.array_equal(np.load(io.BytesIO(bytes(s.out)))["x"], np.arange(5))


def test_a_member_appended_to_an_archive_goes_through_zipfile(tmp_path):
    """An archive opened to append: zipfile writes its central directory again only for
    members it wrote itself (the fast path wrote over the old directory and left none)."""
    path = tmp_path / "a.npz"
    write_npz(path, {"x": np.arange(5)}, fsync=False)
    with open(path, "r+b") as f, zipfile.ZipFile(f, "a") as zf:
        info = zipfile.ZipInfo("y.npy", date_time=_ZIP_DATE)
        with open_member(zf, f, info) as m:
            assert not isinstance(m, StoredMember)
            write_npy(m, np.arange(3.0))
    got = np.load(path)
    assert np.array_equal(got["x"], np.arange(5)) and np.array_equal(got["y"], np.arange(3.0))


def test_a_zipfile_that_writes_other_bytes_gets_its_own_writer(tmp_path, monkeypatch):
    """StoredMember writes what zipfile's own member writer writes on the Pythons tested; a
    zipfile that writes something else (here one whose member writer records another 'version
    made by', as a later Python might) must not get an archive that differs from its own: the
    check done once per process sees it, and every member goes through ZipFile.open."""
    real = zipfile.ZipFile._open_to_write

    def made_by_63(self, zinfo, force_zip64=False):
        zinfo.create_version = 63
        return real(self, zinfo, force_zip64=force_zip64)

    monkeypatch.setattr(zipfile.ZipFile, "_open_to_write", made_by_63)
    _zipmember._same_as_zipfile.cache_clear()
    try:
        ours, theirs = tmp_path / "o.npz", tmp_path / "t.npz"
        write_npz(ours, ARRAYS, fsync=False)
        _zipfile_npz(theirs, ARRAYS)
        assert ours.read_bytes() == theirs.read_bytes()
    finally:
        monkeypatch.undo()
        _zipmember._same_as_zipfile.cache_clear()
    assert _zipmember._same_as_zipfile()  # this Python's own zipfile: the fast path again
    with zipfile.ZipFile(ours) as z:
        assert z.testzip() is None and {i.create_version for i in z.infolist()} == {63}
    back = np.load(ours)
    for k, v in ARRAYS.items():
        assert back[k].dtype == v.dtype and back[k].tobytes() == v.tobytes()


def test_a_member_opened_while_another_is_written_is_refused(tmp_path):
    """zipfile refuses a second member while one is being written; the fast path wrote its
    header where the first member's data was going."""
    with open(tmp_path / "x.zip", "wb") as f, zipfile.ZipFile(f, "w") as zf:
        with zf.open(zipfile.ZipInfo("a", date_time=_ZIP_DATE), "w") as first:
            first.write(b"abc")
            with pytest.raises(ValueError, match="another write handle"):
                open_member(zf, f, zipfile.ZipInfo("b", date_time=_ZIP_DATE))
            first.write(b"def")
    with zipfile.ZipFile(tmp_path / "x.zip") as z:
        assert z.namelist() == ["a"] and z.read("a") == b"abcdef" and z.testzip() is None


def test_a_member_opened_while_a_stored_member_is_written_is_refused(tmp_path):
    """The other order: the first member is tenfold's own (zipfile does not know of it), the
    second would go through ZipFile.open, which wrote its header over the first member."""
    with open(tmp_path / "x.zip", "wb") as f, zipfile.ZipFile(f, "w") as zf:
        first = open_member(zf, f, zipfile.ZipInfo("a", date_time=_ZIP_DATE))
        assert isinstance(first, StoredMember)
        first.write(b"abc")
        for info in (
            zipfile.ZipInfo("b", date_time=_ZIP_DATE),
            zipfile.ZipInfo("a", date_time=_ZIP_DATE),  # its own name: not the fast path
        ):
            with pytest.raises(ValueError, match="another write handle"):
                open_member(zf, f, info)
        first.write(b"def")
        first.close()
        with open_member(zf, f, zipfile.ZipInfo("b", date_time=_ZIP_DATE)) as second:
            second.write(b"gh")  # once the first is closed, the next one is taken
    with zipfile.ZipFile(tmp_path / "x.zip") as z:
        assert z.namelist() == ["a", "b"] and z.read("a") == b"abcdef" and z.testzip() is None


def test_stored_member_write_after_close_is_refused(tmp_path):
    with open(tmp_path / "x.zip", "wb") as f, zipfile.ZipFile(f, "w") as zf:
        m = open_member(zf, f, zipfile.ZipInfo("a", date_time=_ZIP_DATE))
        assert isinstance(m, StoredMember)
        assert m.write(b"abc") == 3
        m.close()
        m.close()  # idempotent
        with pytest.raises(ValueError, match="closed"):
            m.write(b"d")
    with zipfile.ZipFile(tmp_path / "x.zip") as z:
        assert z.read("a") == b"abc" and z.testzip() is None


@pytest.mark.parametrize("copy", [True, False])
def test_npz_reader_checks_the_crc_with_the_kernel(tmp_path, monkeypatch, copy):
    """The archive's map reads (a copy, and the view of a stored member) check the CRC-32
    without zlib.crc32, and still catch a flipped byte."""
    _kernel_crc32()
    p = tmp_path / "o.npz"
    w = np.arange(1 << 18, dtype=np.float32)
    np.savez(p, w=w)
    raw = bytearray(p.read_bytes())

    def fail(*a):
        raise AssertionError("zlib.crc32 on a member")

    monkeypatch.setattr(zlib, "crc32", fail)
    u8 = np.frombuffer(bytes(raw), np.uint8)
    with Archive(u8) as a:
        assert np.array_equal(a.read("w", copy=copy), w)
    raw[-200_000] ^= 1  # inside w's data
    with Archive(np.frombuffer(bytes(raw), np.uint8)) as a:
        with pytest.raises(IntegrityError, match="CRC-32"):
            a.read("w", copy=copy)


def test_torch_zip_crc_with_the_kernel(tmp_path, monkeypatch):
    _kernel_crc32()
    p = tmp_path / "demo.pt"
    write_checkpoint(p, {"a": np.arange(1 << 16, dtype=np.float32)})

    def fail(*a):
        raise AssertionError("zlib.crc32 on a member")

    monkeypatch.setattr(zlib, "crc32", fail)
    assert tp_reader.verify(p).ok

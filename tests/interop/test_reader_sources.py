"""One conversion source for every format (issue #22 item 2): ``tenfold convert`` reads any
reader of the protocol (:mod:`tenfold.core.reader`) through
:func:`tenfold.tensor_source.reader_source`, so a format with a reader and no convert hook
gets raw copies from its ``checked_span`` (its checksum checked on the way)."""

from __future__ import annotations

import json
import struct
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import tenfold
import tenfold.convert
import tenfold.registry as reg
from tenfold.core.checksums import crc32c
from tenfold.core.mapped import MappedFile
from tenfold.core.reader import CheckedSpan, MappedReader, Span, TensorInfo
from tenfold.errors import IntegrityError, TruncatedError
from tenfold.tensor_source import RawRange, Source, reader_source

MAGIC = b"SPANFMT\0"
PKG = "tenfold_test_span_format"
T = {
    "w": np.arange(5000, dtype=np.float32).reshape(50, 100),
    "b": np.array([1.5, -2.0], np.float64),
    "step": np.array(7, np.int64),
    "empty": np.zeros((0, 3), np.int32),
}


class SpanReader(MappedReader):
    """A reader of the protocol and nothing else: its format has no convert hook."""

    fmt = "spanfmt"
    reads: list[str] = []  # what was read through read(): raw copies never are

    def __init__(self, source, **options):
        mf = self._map(source)
        try:
            (n,) = struct.unpack("<I", mf.bytes(len(MAGIC), 4, "header length"))
            self._table = json.loads(mf.bytes(len(MAGIC) + 4, n, "header"))
            self._data = len(MAGIC) + 4 + n
        except BaseException:
            self.close()
            raise

    def _keys(self):
        return self._table

    @property
    def metadata(self):
        return {}

    def _entry(self, name):
        dt, shape, off, crc = self._table[name]
        return np.dtype(dt), tuple(shape), self._data + off, crc

    def info(self, name):
        dt, shape, off, crc = self._entry(name)
        n = dt.itemsize * int(np.prod(shape))
        return TensorInfo(name, dt.name, shape, (off, off + n), "raw", f"crc32c:{crc}",
                          np_dtype=dt)  # fmt: skip

    def checked_span(self, name):
        dt, shape, off, crc = self._entry(name)
        return CheckedSpan(Span(off, dt, shape), "crc32c", crc)

    def read(self, name, index=None):
        SpanReader.reads.append(name)
        dt, shape, off, _ = self._entry(name)
        return self.file.array(off, dt, shape, f"tensor {name!r}")


def _write(path: Path, tensors, damage: str | None = None) -> None:
    """MAGIC, u32 header length, a JSON header ``{name: [dtype, shape, offset from the data,
    crc32c]}``, then the tensors; ``damage`` names a tensor whose first byte is flipped after
    its CRC was taken."""
    blobs = {k: np.ascontiguousarray(v).tobytes() for k, v in tensors.items()}
    table, off = {}, 0
    for k, v in tensors.items():
        table[k] = [v.dtype.str, list(v.shape), off, f"{crc32c(blobs[k]):08x}"]
        off += len(blobs[k])
    data = bytearray(b"".join(blobs.values()))
    if damage is not None:
        data[table[damage][2]] ^= 1
    head = json.dumps(table).encode()
    path.write_bytes(MAGIC + struct.pack("<I", len(head)) + head + bytes(data))


@pytest.fixture
def spanfmt():
    mod = types.ModuleType(PKG)
    mod.open = lambda source, **options: SpanReader(source, **options)
    sys.modules[PKG] = mod
    fmt = reg.register(reg.Format(name="spanfmt", description="span test format",
                                  suffixes=(".span",), magics=(MAGIC,), package=PKG))  # fmt: skip
    SpanReader.reads = []
    try:
        yield fmt
    finally:
        reg.unregister("spanfmt")
        del sys.modules[PKG]


def _same(got, want=T):
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        a = np.asarray(got[k])
        assert a.dtype == v.dtype and a.shape == v.shape and a.tobytes() == v.tobytes(), k


def test_the_test_format_reads_back(tmp_path, spanfmt):
    _write(tmp_path / "a.span", T)
    with tenfold.open(tmp_path / "a.span") as r:
        _same(r)


@pytest.mark.parametrize("dst", ["b.zt", "b.safetensors"])
def test_a_reader_only_format_is_copied_as_raw_ranges(tmp_path, spanfmt, dst):
    # Before: a format without a convert hook was read value by value (a dict source over
    # its reader), however its reader could give the byte ranges.
    _write(tmp_path / "a.span", T)
    assert tenfold.convert.convert(tmp_path / "a.span", tmp_path / dst) == len(T)
    assert SpanReader.reads == []
    _same(tenfold.convert.read_any(tmp_path / dst))


@pytest.mark.parametrize("dst", ["b.zt", "b.safetensors"])
def test_the_checked_span_checksum_is_checked_on_the_way(tmp_path, spanfmt, dst):
    _write(tmp_path / "a.span", T, damage="w")
    with pytest.raises(IntegrityError, match="'w'") as info:
        tenfold.convert.convert(tmp_path / "a.span", tmp_path / dst)
    assert (info.value.fmt, info.value.obj) == ("spanfmt", "tensor 'w'")
    assert not (tmp_path / dst).exists()


def test_reader_source_closes_the_reader_it_could_not_read(tmp_path, spanfmt):
    _write(tmp_path / "a.span", T)
    r = SpanReader(tmp_path / "a.span")
    r._table["bad"] = ["<f4", [2], 10**12, "0"]
    r.info = lambda n: 1 / 0
    with pytest.raises(ZeroDivisionError):
        reader_source(spanfmt, r)
    assert r.closed


def test_reader_source_takes_the_metadata_only_where_the_format_keeps_some(tmp_path):
    tenfold.save(tmp_path / "a.wtxt", {"x": np.arange(3.0)})
    with tenfold.open(tmp_path / "a.wtxt") as r:
        assert r.metadata  # the file's own fields (meta line, root ...): not user metadata
    with tenfold.convert.open_source(tmp_path / "a.wtxt") as s:
        assert s.metadata == {}
    tenfold.save(tmp_path / "a.safetensors", {"x": np.arange(3.0)}, metadata={"who": "me"})
    with tenfold.convert.open_source(tmp_path / "a.safetensors") as s:
        assert s.metadata == {"who": "me"} and s.spec("x") == (np.dtype("<f8"), (3,))


def test_a_raw_copy_past_the_end_names_the_source_file(tmp_path):
    p = tmp_path / "short.bin"
    p.write_bytes(b"x" * 10)
    mf = MappedFile(p, fmt="spanfmt")
    s = Source("spanfmt", ["a"], lambda n: (np.dtype("u1"), (20,)), lambda n: None, path=p,
               raw=lambda n: RawRange(0, 20, None, mf), close=mf.close)  # fmt: skip
    with s, pytest.raises(TruncatedError, match="ends at offset 10; expected 10 more") as info:
        list(s.blocks(s.raw("a")))
    assert (info.value.fmt, info.value.obj, info.value.offset) == ("spanfmt", str(p), 10)


def test_a_raw_range_without_its_file_is_refused(tmp_path):
    # A range is a range of one opened file: a source that gives bare (offset, nbytes,
    # checksum) tuples, whose file a copy would have to guess, fails loudly.
    s = Source("spanfmt", ["a"], lambda n: (np.dtype("u1"), (4,)), lambda n: None,
               raw=lambda n: (0, 4, None))  # fmt: skip
    with s, pytest.raises(TypeError, match="must name the file it is in"):
        s.raw("a")


def test_convert_reads_a_safetensors_file_as_open_does(tmp_path):
    # Before: convert parsed safetensors on its own, without the tiling rule tenfold.open
    # (and the safetensors library) enforce: a file with a gap between tensors converted.
    import json
    import struct

    from tenfold.errors import FormatError

    head = json.dumps(
        {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [1], "data_offsets": [16, 20]},
        }
    ).encode()
    p = tmp_path / "gap.safetensors"
    p.write_bytes(struct.pack("<Q", len(head)) + head + np.ones(5, np.float32).tobytes())
    with pytest.raises(FormatError, match="gap before it") as opened:
        tenfold.open(p)
    with pytest.raises(FormatError, match="gap before it") as converted:
        tenfold.convert.convert(p, tmp_path / "gap.zt")
    assert str(converted.value) == str(opened.value)
    assert not (tmp_path / "gap.zt").exists()

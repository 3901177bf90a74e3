"""Damaged and hostile GGUF files: each is a tenfold error naming the field, its offset, and what
was expected and found (never a crash, a hang, a huge allocation or a wrong value)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _gguf_files import ARR, BOOL, F32, I32, STR, U8, U32, U64, build

import tenfold
from tenfold.core.bounds import Limits
from tenfold.errors import FormatError, LimitError, TruncatedError, UnsupportedError
from tenfold.formats.gguf import Reader

KVS = [
    ("general.architecture", STR, "llama"),
    ("general.alignment", U32, 32),
    ("tokens", ARR, ["a", "bc", ""], STR),
    ("nested", ARR, [[1, 2], [3]], (ARR, I32)),
    ("flag", BOOL, 1),
    ("scale", F32, 0.5),
]
DATA = np.arange(8, dtype=np.float32)
TENSORS = [
    ("a", (4, 2), 0, DATA.tobytes()),
    ("b", (32,), 8, bytes(range(34))),  # one Q8_0 block
    ("c", (3,), 26, np.arange(3, dtype=np.int32).tobytes()),
]


def _base(**kw):
    return build(KVS, TENSORS, **kw)


def _open(data: bytes, **kw):
    with Reader(data, **kw) as r:
        return {k: r[k] for k in r}


def _named(exc, field=None):
    """The error names its format, object, field, offset, expected and actual values."""
    assert exc.fmt == "gguf" and exc.obj, exc
    assert exc.field and exc.offset is not None, exc
    assert exc.expected is not None and exc.got is not None, exc
    if field is not None:
        assert exc.field == field, exc
    return exc


def test_the_base_file_reads():
    got = _open(_base().data)
    assert got["a"].tolist() == DATA.reshape(2, 4).tolist()
    assert got["b"].dtype.names == ("Q8_0",) and got["c"].tolist() == [0, 1, 2]


def test_truncated_at_every_byte():
    b = _base()
    for cut in range(len(b.data)):
        with pytest.raises(TruncatedError) as ei:
            _open(b.data[:cut])
        _named(ei.value)


@pytest.mark.parametrize(
    "label,field",
    [
        ("version", "version"),
        ("kv general.architecture.key", "key"),
        ("kv general.alignment.type", "value_type"),
        ("kv tokens.value.count", "array count"),
        ("kv tokens.value[1]", "array value"),
        ("kv nested.value[1].etype", "array element type"),
        ("kv flag.value", "value"),
        ("tensor b.n_dims", "n_dims"),
        ("tensor b.ne", "ne"),
        ("tensor c.type", "type"),
        ("tensor c.offset", "offset"),
    ],
)
def test_truncation_names_the_field(label, field):
    """Cut inside a field, with enough bytes claimed by the counts before it, the error names
    that field and its offset."""
    b = _base()
    start = b.at(label)
    # the counts say how many items follow: pad the cut file so only this field is short
    cut = b.data[: start + 1]
    with pytest.raises(TruncatedError) as ei:
        _open(cut, limits=Limits())
    exc = ei.value
    if exc.field != field:  # a count before it saw too few bytes left: that is named instead
        assert exc.field.endswith("count") or exc.field.endswith("length"), exc
    else:
        assert exc.offset == start, exc
    _named(exc)


def _patch(data: bytes, at: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


@pytest.mark.parametrize(
    "label,fmt,value,cls,field",
    [
        ("tensor_count", "<Q", 2**63, LimitError, "tensor_count"),
        ("tensor_count", "<Q", 1000, TruncatedError, "tensor_count"),
        ("kv_count", "<Q", 2**64 - 1, LimitError, "kv_count"),
        ("kv_count", "<Q", 500, TruncatedError, "kv_count"),
        ("kv general.architecture.key.len", "<Q", 2**64 - 1, TruncatedError, "key length"),
        ("kv tokens.value[0].len", "<Q", 2**40, TruncatedError, "array value length"),
        ("kv tokens.value.count", "<Q", 2**62, LimitError, "array count"),
        ("kv tokens.value.count", "<Q", 10**6, TruncatedError, "array count"),
        ("kv tokens.value.etype", "<I", 13, FormatError, "array element type"),
        ("kv general.architecture.type", "<I", 99, FormatError, "value_type"),
        ("kv flag.value", "<B", 2, FormatError, "bool value"),
        ("tensor a.name.len", "<Q", 2**63, TruncatedError, "name length"),
        ("tensor a.n_dims", "<I", 2**31, LimitError, "n_dims"),
        ("tensor a.type", "<I", 99, UnsupportedError, "type"),
        ("tensor a.type", "<I", 31, UnsupportedError, "type"),
        ("tensor a.type", "<I", 2, FormatError, "ne[0]"),  # Q4_0 rows of 4 elements
        ("tensor c.offset", "<Q", 2**64 - 32, TruncatedError, "offset"),
        ("tensor c.offset", "<Q", 4096, TruncatedError, "offset"),
        ("tensor c.offset", "<Q", 33, FormatError, "offset"),
        ("tensor c.offset", "<Q", 0, FormatError, "offset"),
        ("kv general.alignment.value", "<I", 0, FormatError, "alignment"),
        ("kv general.alignment.value", "<I", 48, FormatError, "alignment"),
        ("version", "<I", 1, UnsupportedError, "version"),
        ("version", "<I", 4, UnsupportedError, "version"),
        ("version", "<I", 3 << 24, UnsupportedError, "version"),
    ],
)
def test_lying_fields(label, fmt, value, cls, field):
    b = _base()
    data = _patch(b.data, b.at(label), fmt, value)
    with pytest.raises(cls) as ei:
        _open(data)
    assert type(ei.value) is cls
    _named(ei.value, field)


def test_messages_say_what_is_wrong():
    b = _base()
    with pytest.raises(UnsupportedError, match="big-endian"):
        _open(_patch(b.data, 4, "<I", 3 << 24))
    with pytest.raises(UnsupportedError, match="GGUF v1"):
        _open(_patch(b.data, 4, "<I", 1))
    with pytest.raises(UnsupportedError, match=r"GGML type 31 \(Q4_0_4_4\) was removed"):
        _open(_patch(b.data, b.at("tensor a.type"), "<I", 31))
    with pytest.raises(FormatError, match="overlaps tensor 'a'"):
        _open(_patch(b.data, b.at("tensor c.offset"), "<Q", 0))
    with pytest.raises(FormatError, match="misaligned tensor offset; expected a multiple of 32"):
        _open(_patch(b.data, b.at("tensor c.offset"), "<Q", 33))


def test_ne0_must_be_whole_blocks():
    # tensor b declared Q4_0 (block 32) with ne (33,)
    b = build(KVS, [("b", (33,), 2, bytes(18))])
    with pytest.raises(FormatError) as ei:
        _open(b.data)
    _named(ei.value, "ne[0]")


def test_shape_too_large_for_any_array():
    b = build([], [("w", (2**62, 2**62), 0, b"")])
    with pytest.raises(LimitError) as ei:
        _open(b.data)
    assert ei.value.field == "shape" and ei.value.offset == b.at("tensor w.ne")


def test_bad_magic_and_empty():
    b = _base()
    with pytest.raises(FormatError) as ei:
        _open(b"GGUX" + b.data[4:])
    _named(ei.value, "magic")
    with pytest.raises(TruncatedError):
        _open(b"")


def test_not_utf8():
    b = build([(b"k\xff", STR, "v")], [])
    with pytest.raises(FormatError) as ei:
        _open(b.data)
    _named(ei.value, "key")


@pytest.mark.parametrize("mmap", [True, False])
def test_string_array_errors_name_the_value(mmap):
    """A string array is read in a tight loop: a value that is not UTF-8, or that crosses the
    index-size limit, in the middle of the array is still refused with its own offset (map
    and pread sources alike), and the values before it were read in place."""
    values: list = [f"tok{i}" for i in range(50)]
    values[37] = b"ok\xffno"
    b = build([("tokens", ARR, values, STR)], [])
    with pytest.raises(FormatError) as ei:
        Reader(b.data, mmap=mmap)
    assert ei.value.field == "array value" and ei.value.offset == b.at("kv tokens.value[37]") + 2
    values[37] = "x" * 3000
    b = build([("tokens", ARR, values, STR)], [])
    limit = b.at("kv tokens.value[37]") + 100
    with pytest.raises(LimitError) as ei:
        Reader(b.data, mmap=mmap, limits=Limits(max_index_bytes=limit))
    assert ei.value.field == "header bytes" and ei.value.offset == b.at("kv tokens.value[37]")
    with Reader(b.data, mmap=mmap, limits=Limits(max_index_bytes=len(b.data))) as r:
        assert r.metadata["tokens"] == values


def test_duplicates():
    with pytest.raises(FormatError, match="duplicate key"):
        _open(build([("k", U8, 1), ("k", U8, 2)], []).data)
    with pytest.raises(FormatError, match="duplicate tensor name"):
        _open(build([], [("t", (1,), 0, bytes(4)), ("t", (1,), 0, bytes(4))]).data)


def test_alignment_of_another_type():
    with pytest.raises(FormatError) as ei:
        _open(build([("general.alignment", U64, 32)], []).data)
    _named(ei.value, "value_type")


def test_arrays_nested_too_deep():
    etype, value = I32, [1]
    for _ in range(17):
        etype, value = (ARR, etype), [value]
    b = build([("deep", ARR, value, etype)], [])
    with pytest.raises(LimitError) as ei:
        _open(b.data)
    assert ei.value.field == "array depth"
    ok = [1]
    etype = I32
    for _ in range(15):
        etype, ok = (ARR, etype), [ok]
    with Reader(build([("deep", ARR, ok, etype)], []).data) as r:
        assert r.metadata_type("deep").count("array") == 16


def test_header_above_the_index_limit():
    b = build([("big", STR, "x" * 5000)], [])
    with pytest.raises(LimitError) as ei:
        _open(b.data, limits=Limits(max_index_bytes=1024))
    assert ei.value.field == "header bytes"
    with Reader(b.data, mmap=False, limits=Limits(max_index_bytes=1 << 20)) as r:
        assert r.metadata["big"] == "x" * 5000


def test_pread_source_grows_its_window(tmp_path):
    """A file read without a map (mmap=False) parses the same, with a header over 64 KiB."""
    tokens = [f"tok{i}" for i in range(20000)]
    b = build([("tokens", ARR, tokens, STR)], TENSORS)
    path = tmp_path / "big.gguf"
    path.write_bytes(b.data)
    with tenfold.open(path, mmap=False) as r, tenfold.open(path) as m:
        assert r.metadata == m.metadata and r.metadata["tokens"] == tokens
        assert r["a"].tolist() == m["a"].tolist()
    with pytest.raises(TruncatedError):
        path.write_bytes(b.data[: len(b.data) // 2])
        tenfold.open(path, mmap=False)


def test_verify_never_raises(tmp_path):
    b = _base()
    path = tmp_path / "bad.gguf"
    path.write_bytes(_patch(b.data, b.at("tensor c.offset"), "<Q", 0))
    report = tenfold.formats.gguf.verify(path)
    assert not report.ok and "overlaps" in str(report.findings[0].message)


def test_big_endian_file_from_the_gguf_writer(tmp_path):
    gguf = pytest.importorskip("gguf", reason="the gguf package (the peers extra) is not installed")
    w = gguf.GGUFWriter(str(tmp_path / "be.gguf"), "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_tensor("w", np.arange(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedError, match="big-endian") as ei:
        tenfold.open(tmp_path / "be.gguf")
    _named(ei.value, "version")

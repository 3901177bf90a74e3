"""Damaged files: flips, truncation at every region, extension, lying fields, fuzzing."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenfold import oinf
from tenfold.core.report import Report
from tenfold.errors import FormatError, LimitError, TenfoldError, TruncatedError


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> bytes:
    p = tmp_path_factory.mktemp("m") / "m.oinf"
    oinf.write(
        p,
        sizevars={"B": 4, "seq.len": 7},
        metadata={
            "mode": "fast",
            "lut": oinf.Tensor([1, 2, 3], "u4"),
            "mask": oinf.Bitset([1, 0, 1]),
            "eps": 0.5,
        },
        tensors={
            "w": np.arange(12, dtype=np.float32).reshape(3, 4),
            "q": oinf.Tensor([1, -1, 0, 1, 1], "t2"),
            "z": oinf.Uninitialized("f16", (2,)),
        },
    )
    return p.read_bytes()


def _read_all(buf: bytes) -> None:
    with oinf.open(buf) as r:
        r.load()
        assert isinstance(r.metadata, dict)
        for n in r.names:
            r.info(n)


def _header(buf: bytes) -> tuple:
    return struct.unpack_from("<5sIIIIIIQQQQQ", buf, 0)


def test_model_is_clean(model):
    _read_all(model)
    assert oinf.verify(model).ok


def test_truncated_at_every_length(model):
    for n in range(len(model)):
        with pytest.raises(TenfoldError) as ei:
            _read_all(model[:n])
        assert isinstance(ei.value, (TruncatedError, FormatError))
        assert not oinf.verify(model[:n]).ok


def test_extended(model):
    with pytest.raises(FormatError, match=r"file_size field"):
        oinf.open(model + bytes(8))


@pytest.mark.parametrize(
    "field, value, cls, match",
    [
        (7, 72 + 3, FormatError, r"\[section-aligned\]"),
        (8, 10**6, FormatError, r"\[offsets-ascending\]"),
        (3, 1000, FormatError, r"\[table-bounds\]"),
        (3, 2**31, LimitError, r"\[limit\]"),
        (5, 10**5, FormatError, r"\[table-bounds\]"),
        (11, 2**63, TruncatedError, r"\[file-size\]"),
        (1, 7, FormatError, r"\[version\]"),
    ],
)
def test_lying_header_fields(model, field, value, cls, match):
    h = list(_header(model))
    h[field] = value
    buf = struct.pack("<5sIIIIIIQQQQQ", *h) + model[69:]
    with pytest.raises(cls, match=match):
        _read_all(buf)


def _tensor_entry(model: bytes, name: str) -> int:
    with oinf.open(model) as r:
        return r.info(name).entry_offset


@pytest.mark.parametrize(
    "rel, value, fmt, cls, match",
    [
        (28, 44, "<Q", FormatError, r"\[data-nbytes\]"),  # data_nbytes of 'w' (ndim 2)
        (28, 2**63, "<Q", TruncatedError, r"\[data-bounds\]"),
        (36, 2**64 - 8, "<Q", TruncatedError, r"\[data-bounds\]"),  # data_offset
        (36, 0, "<Q", FormatError, r"\[data-offset-region\]"),
        (36, 4, "<Q", FormatError, r"\[data-offset-aligned\]"),
        (8, 0, "<I", FormatError, r"\[nodata-zero\]"),  # flags: HAS_DATA cleared
        (0, 2**32 - 1, "<I", FormatError, r"\[tensor-dtype\]"),  # dtype
        (4, 65, "<I", LimitError, r"\[tensor-ndim\]"),  # ndim above the limit
        (4, 40, "<I", TruncatedError, r"\[table-bounds\]"),  # ndim: dims run past the table
    ],
)
def test_lying_tensor_fields(model, rel, value, fmt, cls, match):
    entry = _tensor_entry(model, "w")
    fields = entry + 8  # 'w' name: 4 + 1 bytes padded to 8
    buf = bytearray(model)
    struct.pack_into(fmt, buf, fields + rel, value)
    with pytest.raises(cls, match=match):
        _read_all(bytes(buf))
    assert not oinf.verify(bytes(buf)).ok


def test_every_single_byte_flip_is_caught_or_harmless(model):
    """Flip each byte: the reader raises a tenfold error or reads; verify never raises."""
    for i in range(len(model)):
        buf = bytearray(model)
        buf[i] ^= 0xFF
        try:
            _read_all(bytes(buf))
        except TenfoldError:
            pass
        rep = oinf.verify(bytes(buf))
        assert isinstance(rep, Report)


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data):
    for buf in (data, b"OINF\x00" + data):
        try:
            _read_all(buf)
        except TenfoldError:
            pass
        assert isinstance(oinf.verify(buf), Report)


@settings(max_examples=300)
@given(st.data())
def test_fuzz_mutated_model(model, data):
    buf = bytearray(model)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(buf)))
        buf = buf[:cut]
    try:
        _read_all(bytes(buf))
    except TenfoldError:
        pass
    assert isinstance(oinf.verify(bytes(buf)), Report)


def test_verify_missing_file(tmp_path):
    rep = oinf.verify(tmp_path / "nope.oinf")
    assert not rep.ok and "cannot read" in rep.errors[0].message

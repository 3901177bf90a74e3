"""``OinfReader.span``: where a tensor lies raw in the file, as the other readers say it
(:mod:`tenfold.core.reader`), so that a framework builds it over the file and ``tenfold
convert`` copies it in blocks. Before, OINF had none (the default: None for every tensor):
frameworks copied every tensor, and its convert hook kept a raw-range rule of its own, which
copied ``bool`` payloads without the 0/1 check a read makes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tenfold
import tenfold.convert
from tenfold.errors import FormatError
from tenfold.oinf import OinfReader, Tensor, Uninitialized, write

PLAIN = {
    "f": np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6),
    "i": np.arange(-5, 5, dtype=np.int16),
    "u": np.arange(7, dtype=np.uint64),
    "s": np.array(3.5, np.float64),
    "e": np.zeros((0, 3), np.int32),
}


def _file(tmp_path, declared=True):
    p = tmp_path / "a.oinf"
    extra = {"later": Uninitialized("f32", (2, 2))} if declared else {}
    write(p, tensors={
        **PLAIN,
        "flag": np.array([True, False, True]),
        "packed": Tensor(np.array([-8, 7, 0, 1], np.int8), "i4"),
        **extra,
    })  # fmt: skip
    return p


def test_a_byte_aligned_tensor_has_its_span(tmp_path):
    with OinfReader(_file(tmp_path)) as r:
        for n, v in PLAIN.items():
            span = r.span(n)
            assert span is not None, n
            assert span.dtype == v.dtype and span.shape == v.shape
            nbytes = math.prod(span.shape) * span.dtype.itemsize
            assert r.file.u8(span.offset, nbytes).tobytes() == v.tobytes(), n
        assert r.spans(list(PLAIN)) == [r.span(n) for n in PLAIN]


def test_no_span_where_a_read_does_more_than_view_the_bytes(tmp_path):
    with OinfReader(_file(tmp_path)) as r:
        assert r.span("flag") is None  # a read checks every byte is 0 or 1
        assert r.span("packed") is None  # a read unpacks it
        assert r.span("later") is None  # declared without data
        with pytest.raises(KeyError, match="nope"):
            r.span("nope")


def test_a_damaged_bool_is_refused_by_convert_not_copied(tmp_path):
    p = _file(tmp_path, declared=False)
    with OinfReader(p) as r:
        at = r.info("flag").data_offset
    data = bytearray(p.read_bytes())
    data[at] = 2  # not a bool
    p.write_bytes(bytes(data))
    with tenfold.open(p) as r, pytest.raises(FormatError, match="BOOL byte is not 0 or 1"):
        r["flag"]
    for dst in ("b.safetensors", "b.zt"):
        with pytest.raises(FormatError, match="BOOL byte is not 0 or 1"):
            tenfold.convert.convert(p, tmp_path / dst)
        assert not (tmp_path / dst).exists()


def test_convert_copies_the_spans_and_gives_the_same_values(tmp_path):
    p = _file(tmp_path, declared=False)
    with tenfold.convert.open_source(p) as s:
        assert {n for n in s.names if s.raw(n) is not None} == set(PLAIN)
    tenfold.convert.convert(p, tmp_path / "b.safetensors", metadata=False)
    got = tenfold.load(tmp_path / "b.safetensors")
    for n, v in PLAIN.items():
        assert got[n].dtype == v.dtype and got[n].tobytes() == v.tobytes(), n
    assert got["flag"].tolist() == [True, False, True]
    assert got["packed"].tolist() == [-8, 7, 0, 1]

"""Damaged and hostile ONNX models: each refusal a tenfold error naming the field, the offset
and the expected and actual values; external data that would leave the model's directory or
run past its file refused; and a Hypothesis fuzz of the protobuf reader."""

from __future__ import annotations

import os

import _onnx_models as M
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenfold
from tenfold.errors import FormatError, LimitError, TenfoldError, TruncatedError, UnsupportedError
from tenfold.formats import onnx as onnx_reader
from tenfold.formats.onnx import _wire

F32 = np.arange(4, dtype=np.float32)


def _model(*rest: bytes, dims=(4,), code=1, name="w") -> bytes:
    return M.raw_model(M.raw_tensor(name, code, list(dims), *rest))


def _read_all(data) -> dict:
    with onnx_reader.open(data) as r:
        return {k: r[k] for k in r}


def test_truncated_varint():
    data = M.field(1, 0, 8) + b"\x3a\x85"  # the graph's length varint cut after one byte
    with pytest.raises(TruncatedError) as ei:
        _read_all(data)
    e = ei.value
    assert e.field == "varint" and e.offset == 3 and e.obj == "model"
    assert "runs past the end" in str(e) and e.got == "1 byte(s)"


def test_length_past_the_end():
    good = _model(M.field(9, 2, F32.tobytes()))
    cut = good[:-3]  # the graph's length now runs past the file
    with pytest.raises(TruncatedError) as ei:
        _read_all(cut)
    e = ei.value
    assert e.field == "field 7 length" and e.offset == 2
    assert e.expected == f"<= {len(cut) - 4}" and e.got == len(good) - 4


@pytest.mark.parametrize("cut", range(1, 31))
def test_every_truncation_is_a_tenfold_error_or_a_shorter_valid_model(cut):
    data = _model(M.field(9, 2, F32.tobytes()))
    assert cut < len(data)
    try:
        got = _read_all(data[:cut])
    except TenfoldError as exc:
        assert exc.fmt == "onnx" and exc.obj
    else:  # a cut at a field boundary of the model is a model with fewer fields
        assert got == {}


def test_huge_and_negative_dims():
    with pytest.raises(LimitError) as ei:
        _read_all(_model(dims=(2**40, 2**40)))
    assert ei.value.field == "shape" and ei.value.offset is not None
    with pytest.raises(FormatError, match="negative dimension") as ei:
        _read_all(_model(dims=(3, -1)))
    assert ei.value.field == "dims" and ei.value.got == [3, -1]
    with pytest.raises(LimitError, match="ndim"):
        _read_all(_model(dims=[1] * 100))


def test_raw_data_length_mismatch():
    data = _model(M.field(9, 2, F32.tobytes()[:-4]))
    with pytest.raises(FormatError) as ei:
        _read_all(data)
    e = ei.value
    assert e.field == "raw_data length" and e.expected == 16 and e.got == 12
    assert e.offset == data.index(F32.tobytes()[:-4])


def test_typed_count_and_range():
    with pytest.raises(FormatError, match="float_data count") as ei:
        _read_all(_model(M.field(4, 2, F32.tobytes()[:8])))
    assert ei.value.expected == 4 and ei.value.got == 2
    with pytest.raises(FormatError, match="out of range for INT8") as ei:
        _read_all(_model(M.field(5, 2, M.varint(1) + M.varint(300)), dims=(2,), code=3))
    assert ei.value.field == "int32_data" and ei.value.got == 300
    with pytest.raises(FormatError, match="present for data_type FLOAT"):
        _read_all(_model(M.field(7, 0, 1), dims=(1,)))
    with pytest.raises(FormatError, match="present beside raw_data"):
        _read_all(_model(M.field(9, 2, F32.tobytes()), M.field(4, 2, F32.tobytes())))
    with pytest.raises(FormatError, match="no raw_data, typed field or external data"):
        _read_all(_model())


def test_varint_and_wire_type_lies():
    with pytest.raises(FormatError, match="too long") as ei:
        _read_all(M.field(1, 0, 8) + b"\x28" + b"\xff" * 10 + b"\x01")
    assert ei.value.field == "varint" and ei.value.offset == 3
    with pytest.raises(FormatError, match="above 64 bits"):
        _read_all(M.field(1, 0, 8) + b"\x28" + b"\xff" * 9 + b"\x7f")
    with pytest.raises(FormatError, match="groups are refused") as ei:
        _read_all(M.field(1, 0, 8) + b"\x0b")  # field 1, wire type 3
    assert ei.value.got == 3 and ei.value.offset == 2
    with pytest.raises(FormatError, match="wrong wire type") as ei:
        _read_all(M.field(1, 0, 8) + M.field(7, 0, 5))
    assert ei.value.field == "graph" and ei.value.expected == 2 and ei.value.got == 0
    with pytest.raises(FormatError, match="ir_version: missing"):
        _read_all(M.field(7, 2, b""))
    with pytest.raises(FormatError, match="packed varint"):
        _read_all(_model(M.field(7, 2, b"\x80"), dims=(1,), code=7))


def test_duplicate_and_empty_names_and_unknown_types():
    t = M.raw_tensor("w", 1, [1], M.field(9, 2, b"\0" * 4))
    with pytest.raises(FormatError, match="appears twice") as ei:
        _read_all(M.raw_model(t, t))
    assert ei.value.field == "name"
    with pytest.raises(FormatError, match="must be named"):
        _read_all(_model(M.field(9, 2, F32.tobytes()), name=""))
    with onnx_reader.open(_model(M.field(9, 2, b"\0" * 4), dims=(1,), code=99)) as r:
        assert r.info("w").dtype == "UNKNOWN(99)"
        with pytest.raises(UnsupportedError) as ei:
            r["w"]
        assert ei.value.field == "data_type" and ei.value.got == 99
        assert not r.verify().ok
    with pytest.raises(UnsupportedError, match="segment"):
        _read_all(_model(M.field(3, 2, M.field(1, 0, 0))))


F32_BYTES = F32.tobytes()


def _external(tmp_path, location: str, offset=None, length=None, data=F32_BYTES):
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    ext = b"".join(
        M.field(13, 2, M.field(1, 2, k.encode()) + M.field(2, 2, v.encode())) for k, v in entries
    )
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "data.bin").write_bytes(data)
    p = model / "m.onnx"
    p.write_bytes(_model(ext, M.field(14, 0, 1)))
    return p


def test_external_data_reads(tmp_path):
    p = _external(tmp_path, "data.bin", 0, 16)
    assert tenfold.load(p)["w"].tolist() == F32.tolist()
    p = _external(tmp_path, "data.bin", 8, data=b"\0" * 8 + F32.tobytes())
    assert tenfold.load(p)["w"].tolist() == F32.tolist()


@pytest.mark.parametrize(
    "location", ["../data.bin", "/etc/passwd", "a/../../x", "a\\b", "C:data.bin", "a//b"]
)
def test_external_paths_escaping_the_folder(tmp_path, location):
    p = _external(tmp_path, location)
    with pytest.raises(FormatError) as ei:
        tenfold.load(p)
    e = ei.value
    assert e.field == "external_data location" and e.got == location
    assert "must stay in the model's directory" in str(e)


def test_external_symlink_out_of_the_folder(tmp_path):
    outside = tmp_path / "secret.bin"
    outside.write_bytes(F32.tobytes())
    p = _external(tmp_path, "link.bin")
    os.symlink(outside, p.parent / "link.bin")
    with pytest.raises(FormatError, match="symbolic link leading outside") as ei:
        tenfold.load(p)
    assert ei.value.field == "external_data location" and "trust_links=True" in str(ei.value)
    assert tenfold.load(p, trust_links=True)["w"].tolist() == F32.tolist()
    # a link inside the folder is followed
    os.remove(p.parent / "link.bin")
    os.symlink(p.parent / "data.bin", p.parent / "link.bin")
    assert tenfold.load(p)["w"].tolist() == F32.tolist()


def test_external_ranges_past_the_file(tmp_path):
    with pytest.raises(TruncatedError) as ei:
        tenfold.load(_external(tmp_path, "data.bin", 8, 16))
    e = ei.value
    assert e.field == "external_data offset + length" and e.expected == "<= 16" and e.got == 24
    with pytest.raises(TruncatedError):
        tenfold.load(_external(tmp_path, "data.bin", 2**64 - 1))
    with pytest.raises(FormatError) as ei:
        tenfold.load(_external(tmp_path, "data.bin", 0, 12))
    assert ei.value.field == "external_data length" and ei.value.expected == 16
    with pytest.raises(FormatError, match="not a decimal integer"):
        tenfold.load(_external(tmp_path, "data.bin", "-4"))
    with pytest.raises(FormatError, match="no such file"):
        tenfold.load(_external(tmp_path, "missing.bin"))


def test_external_checksum_is_verified(tmp_path):
    import hashlib

    p = _external(tmp_path, "data.bin")
    data = p.parent / "data.bin"
    # the model names the SHA-1 of its data file: rewrite the model with one
    good = hashlib.sha1(data.read_bytes()).hexdigest()
    for digest, ok in ((good, True), ("0" * 40, False)):
        entries = [("location", "data.bin"), ("checksum", digest)]
        ext = b"".join(
            M.field(13, 2, M.field(1, 2, k.encode()) + M.field(2, 2, v.encode()))
            for k, v in entries
        )
        p.write_bytes(_model(ext, M.field(14, 0, 1)))
        report = onnx_reader.verify(p)
        assert report.ok == ok
        if not ok:
            assert any("checksum mismatch" in f.message for f in report.errors)


# -- Hypothesis -----------------------------------------------------------------------------
FIELD = st.tuples(
    st.integers(1, 2**29 - 1),
    st.sampled_from([0, 1, 2, 5]),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=40),
)


def _encode(number, wire, n, blob) -> tuple[bytes, object]:
    if wire == 0:
        return M.field(number, 0, n), n
    if wire == 2:
        return M.field(number, 2, blob), blob
    size = 8 if wire == 1 else 4
    return M.field(number, wire, (n % (1 << 8 * size)).to_bytes(size, "little")), n % (
        1 << 8 * size
    )


@given(st.lists(FIELD, max_size=12))
def test_wire_reader_round_trips_any_message(spec):
    encoded = [_encode(*f) for f in spec]
    data = b"".join(e for e, _ in encoded)
    got = list(_wire.fields(data, 0, len(data), "m"))
    assert len(got) == len(spec)
    for (number, wire, value, _at), (want_n, want_w, *_), (_, want_v) in zip(
        got, spec, encoded, strict=True
    ):
        assert (number, wire) == (want_n, want_w)
        if wire == 2:
            assert data[value[0] : value[0] + value[1]] == want_v
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            assert int.from_bytes(data[value : value + size], "little") == want_v
        else:
            assert value == want_v


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50))
def test_packed_varints_match_one_at_a_time(values):
    data = b"".join(M.varint(v) for v in values)
    got = _wire.packed_varints(np.frombuffer(data, np.uint8), "x", 0)
    assert got.tolist() == values
    pos, one = 0, []
    while pos < len(data):
        v, pos = _wire.varint(data, pos, len(data), "x")
        one.append(v)
    assert one == values


@given(st.binary(max_size=200), st.integers(0, 2**32))
def test_mutated_models_give_tenfold_errors_or_checked_values(noise, where):
    # a valid model with its bytes overwritten somewhere: every outcome is a tenfold error, or
    # arrays whose size is their shape's (nothing read from outside the file)
    base = bytearray(
        M.raw_model(
            M.raw_tensor("w", 1, [4], M.field(9, 2, F32.tobytes())),
            M.raw_tensor("i", 7, [3], M.field(7, 2, b"\x01\x02\x03")),
            M.raw_tensor("q", 22, [5], M.field(5, 2, b"\x21\x43\x05")),
        )
    )
    at = where % len(base)
    base[at : at + len(noise)] = noise
    try:
        with onnx_reader.open(bytes(base)) as r:
            for k in r:
                a = r[k]
                assert a.shape == r.info(k).shape and a.dtype == r.info(k).np_dtype
    except TenfoldError as exc:
        assert exc.fmt == "onnx" and exc.obj

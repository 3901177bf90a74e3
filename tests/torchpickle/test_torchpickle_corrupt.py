"""Damaged and lying checkpoints (no torch needed): views outside their storage, members
shorter than their storage, missing members, byte order, deflated and bit-flipped members,
truncation at every length, the legacy layout's counts and tail; and detection beside npz."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _tp_build import (
    legacy,
    legacy_tensor,
    rezip,
    state_dict,
    storage,
    tensor,
    text,
    write_zip,
)  # fmt: skip

import tenfold
from tenfold.errors import (
    FormatError,
    LimitError,
    TenfoldError,
    TruncatedError,
    UnsupportedError,
)  # fmt: skip
from tenfold.formats.torchpickle import reader
from tenfold.formats.torchpickle._demo import write_checkpoint

F32 = np.arange(1, 13, dtype="<f4")


def _one(tmp_path, t: bytes, data: bytes = F32.tobytes(), **kw):
    return write_zip(tmp_path / "c.pt", state_dict({"x": t}), {"0": data}, **kw)


def test_a_good_hand_made_file_reads(tmp_path):
    p = _one(tmp_path, tensor("0", 12, 2, (2, 3), (1, 2)))
    got = tenfold.load(p)["x"]
    assert np.array_equal(got, np.lib.stride_tricks.as_strided(F32[2:], (2, 3), (4, 8)))


@pytest.mark.parametrize(
    "offset, shape, stride, words",
    [
        (10, (3,), (1,), "reaches past storage"),  # 10 + 3 > 12
        (0, (2, 2), (11, 1), "reaches past storage"),  # last element at 12
        (12, (1,), (1,), "reaches past storage"),
        (0, (3,), (-1,), "stride"),
        (0, (3, 1), (1,), "stride"),
        (0, (-3,), (1,), "dimension out of range"),
        (-1, (3,), (1,), "storage offset"),
    ],
)
def test_views_outside_their_storage_are_refused(tmp_path, offset, shape, stride, words):
    with pytest.raises(FormatError, match=words):
        tenfold.open(_one(tmp_path, tensor("0", 12, offset, shape, stride)))


def test_an_astronomical_shape_is_a_limit_not_an_allocation(tmp_path):
    with pytest.raises(LimitError):
        tenfold.open(_one(tmp_path, tensor("0", 12, 0, (2**30, 2**30, 2**30), (0, 0, 0))))


def test_empty_tensors_with_any_offset_and_zero_strides(tmp_path):
    p = write_zip(tmp_path / "e.pt", state_dict({
        "empty": tensor("0", 12, 12, (0, 4), (4, 1)),
        "bcast": tensor("0", 12, 11, (3, 2), (0, 0)),
    }), {"0": F32.tobytes()})  # fmt: skip
    got = tenfold.load(p)
    assert got["empty"].shape == (0, 4) and not got["empty"].flags.writeable
    assert got["bcast"].tolist() == [[12.0, 12.0]] * 3


def test_a_member_shorter_than_its_storage(tmp_path):
    with pytest.raises(FormatError, match="member size") as e:
        tenfold.open(_one(tmp_path, tensor("0", 12, 0, (12,), (1,)), F32.tobytes()[:-4]))
    assert e.value.expected.startswith("48") and e.value.got == 44


def test_a_missing_storage_member(tmp_path):
    p = write_zip(tmp_path / "m.pt", state_dict({"x": tensor("7", 12, 0, (12,), (1,))}), {})
    with pytest.raises(FormatError, match="no member 'archive/data/7'"):
        tenfold.open(p)


def test_one_storage_announced_with_two_sizes(tmp_path):
    pkl = state_dict({"a": tensor("0", 12, 0, (3,), (1,)), "b": tensor("0", 6, 0, (3,), (1,))})
    with pytest.raises(FormatError, match="announced twice"):
        tenfold.open(write_zip(tmp_path / "t.pt", pkl, {"0": F32.tobytes()}))


def test_bytes_after_stop(tmp_path):
    pkl = state_dict({"x": tensor("0", 12, 0, (12,), (1,))}) + b"junk"
    with pytest.raises(FormatError, match="4 bytes after its STOP"):
        tenfold.open(write_zip(tmp_path / "j.pt", pkl, {"0": F32.tobytes()}))


def test_two_archives_in_one_zip(tmp_path):
    import zipfile

    p = tmp_path / "two.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("a/data.pkl", state_dict({}))
        z.writestr("b/data.pkl", state_dict({}))
    with pytest.raises(FormatError, match="one such member"):
        tenfold.open(p)


@pytest.mark.parametrize(
    "cls, dt",
    [("FloatStorage", "<f4"), ("ComplexFloatStorage", "<c8"), ("BFloat16Storage", None),
     ("LongStorage", "<i8"), ("BoolStorage", "?")],
)  # fmt: skip
def test_a_big_endian_checkpoint_gives_native_copies(tmp_path, cls, dt):
    if dt is None:
        from tenfold.core.dtypes import BFLOAT16

        want = np.arange(6, dtype=np.float32).astype(BFLOAT16)
        big = want.view("<u2").astype(">u2").tobytes()
    else:
        want = (np.arange(6) * 3 % 5).astype(dt)
        big = want.astype(np.dtype(dt).newbyteorder(">")).tobytes()
    pkl = state_dict({"x": tensor("0", 6, 1, (2, 2), (1, 2), cls)})
    p = write_zip(tmp_path / "be.pt", pkl, {"0": big}, byteorder=b"big")
    with tenfold.open(p) as r:
        got = r["x"]
        assert r.span("x") is None and r.layout.big_endian
    expect = np.lib.stride_tricks.as_strided(want[1:], (2, 2), (want.itemsize, 2 * want.itemsize))
    assert got.dtype == want.dtype and got.tobytes() == np.ascontiguousarray(expect).tobytes()
    assert not got.flags.writeable


def test_a_bad_byteorder(tmp_path):
    with pytest.raises(FormatError, match="byteorder"):
        tenfold.open(_one(tmp_path, tensor("0", 12, 0, (12,), (1,)), byteorder=b"middle"))


def test_no_byteorder_member_is_little_endian(tmp_path):
    p = _one(tmp_path, tensor("0", 12, 0, (12,), (1,)), byteorder=None)
    assert tenfold.load(p)["x"].tolist() == F32.tolist()


def test_a_deflated_checkpoint_reads_the_same(tmp_path):
    src = tmp_path / "demo.pt"
    write_checkpoint(src, {"a": np.arange(20, dtype=np.float32).reshape(4, 5), "n": 1})
    dst = rezip(src, tmp_path / "deflated.pt", deflate=True)
    with tenfold.open(dst) as r, tenfold.open(src) as s:
        assert r.info("a").encoding == "deflate" and r.span("a") is None
        assert r["a"].tolist() == s["a"].tolist() and r.metadata == {"n": 1}
        assert r.verify().ok
    raw = bytearray(dst.read_bytes())
    at = raw.index(b"archive/data/0") + len("archive/data/0") + 4  # inside the deflate stream
    raw[at] ^= 0xFF
    (tmp_path / "bad.pt").write_bytes(bytes(raw))
    with pytest.raises(TenfoldError):  # inflate error or CRC mismatch, never other bytes
        with tenfold.open(tmp_path / "bad.pt") as r:
            r["a"]


def test_verify_finds_a_flipped_byte_in_a_stored_member(tmp_path):
    p = tmp_path / "demo.pt"
    write_checkpoint(p, {"a": np.arange(16, dtype=np.float32)})
    assert reader.verify(p).ok
    with tenfold.open(p) as r:
        at = r.span("a").offset
    raw = bytearray(p.read_bytes())
    raw[at + 5] ^= 1
    p.write_bytes(bytes(raw))
    report = reader.verify(p)
    assert not report.ok and "crc32 mismatch" in report.format()


def test_verify_checks_the_pickle_member_too(tmp_path):
    p = tmp_path / "demo.pt"
    write_checkpoint(p, {"a": np.arange(4, dtype=np.float32), "note": "abcdefgh"})
    raw = bytearray(p.read_bytes())
    at = raw.index(b"abcdefgh")
    raw[at] = ord("x")  # still a valid pickle: only the CRC-32 can tell
    p.write_bytes(bytes(raw))
    with tenfold.open(p) as r:
        assert r.metadata == {"note": "xbcdefgh"}
    report = reader.verify(p)
    assert not report.ok and "member 'archive/data.pkl'" in report.format()


def test_every_truncation_is_a_tenfold_error(tmp_path):
    p = tmp_path / "demo.pt"
    write_checkpoint(p, {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "meta": "x"})
    raw = p.read_bytes()
    for n in list(range(0, len(raw), 7)) + [len(raw) - 1]:
        q = tmp_path / "cut.pt"
        q.write_bytes(raw[:n])
        with pytest.raises(TenfoldError):
            with reader.open(q) as r:
                for k in r:
                    r[k]


# -- the legacy layout ----------------------------------------------------------------------
def _legacy_obj(n=12):
    body = text("x") + legacy_tensor("k1", n, 1, (2, 2), (2, 1)) + text("meta") + b"K\x05"
    return b"\x80\x02}(" + body + b"u."


def test_a_hand_made_legacy_file(tmp_path):
    p = tmp_path / "l.pt"
    p.write_bytes(legacy(_legacy_obj(), ["k1"], {"k1": F32.tobytes()}))
    assert tenfold.detect(p) == "torchpickle"
    with tenfold.open(p) as r:
        assert r["x"].tolist() == [[2.0, 3.0], [4.0, 5.0]] and r.metadata == {"meta": 5}
        assert r.layout.kind == "legacy" and r.verify().ok


@pytest.mark.parametrize(
    "kw, cls, words",
    [
        (dict(counts={"k1": 11}), FormatError, "numel mismatch"),
        (dict(tail=b"x"), FormatError, "1 bytes after the last storage"),
        (dict(little=False), UnsupportedError, "big-endian legacy"),
        (dict(version=1000), UnsupportedError, "protocol version"),
    ],
)
def test_legacy_lies(tmp_path, kw, cls, words):
    p = tmp_path / "l.pt"
    p.write_bytes(legacy(_legacy_obj(), ["k1"], {"k1": F32.tobytes()}, **kw))
    with pytest.raises(cls, match=words):
        tenfold.open(p)


def test_legacy_keys_must_be_the_storages(tmp_path):
    p = tmp_path / "l.pt"
    p.write_bytes(legacy(_legacy_obj(), ["k1", "k2"], {"k1": F32.tobytes(), "k2": b""}))
    with pytest.raises(FormatError, match="storage keys"):
        tenfold.open(p)


def test_legacy_truncated_storage(tmp_path):
    raw = legacy(_legacy_obj(), ["k1"], {"k1": F32.tobytes()})
    for cut in (1, 4, 47, 50):
        p = tmp_path / "l.pt"
        p.write_bytes(raw[:-cut])
        with pytest.raises(TruncatedError):
            tenfold.open(p)


def test_a_legacy_pickle_longer_than_the_index_limit(tmp_path):
    p = tmp_path / "l.pt"
    p.write_bytes(legacy(_legacy_obj(), ["k1"], {"k1": F32.tobytes()}))
    with pytest.raises(LimitError, match="max_index_bytes"):
        tenfold.open(p, limits=tenfold.core.Limits(max_index_bytes=200))


# -- detection beside npz -------------------------------------------------------------------
def test_detection_leaves_npz_and_other_zips_alone(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.arange(3))
    assert tenfold.detect(tmp_path / "a.npz") == "npz"
    write_checkpoint(tmp_path / "w.npz", {"x": np.arange(3)})  # a checkpoint, whatever its name
    assert tenfold.detect(tmp_path / "w.npz") == "torchpickle"
    import zipfile

    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("notes.txt", b"hello")
        z.writestr("archive/data.pkl", b"\x80\x02N.")
    with pytest.raises(FormatError):
        tenfold.detect(tmp_path / "other.zip")
    assert storage  # the builder module's names stay importable
    struct.calcsize("<q")

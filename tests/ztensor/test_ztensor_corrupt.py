"""Bad input: every region truncated, lying fields, garbage; each its own error class."""

from __future__ import annotations

import numpy as np
import pytest
import zstandard
from _zt_build import build, entry, write

import tenfold.ztensor as zt
from tenfold.core import Limits
from tenfold.errors import (
    FormatError,
    IntegrityError,
    LimitError,
    TruncatedError,
    UnsupportedError,
)

X = np.arange(6, dtype=np.float32).tobytes()


def read_all(path, **kw):
    with zt.Reader(path, **kw) as r:
        return {n: r.read(n, copy=True) for n in r}


@pytest.fixture
def sample(tmp_path):
    p = tmp_path / "s.zt"
    with zt.Writer(p) as w:
        w.add("a", np.arange(6, dtype=np.float32).reshape(2, 3), checksum="crc32c")
        w.add("b", np.arange(40, dtype=np.int64), encoding="zstd", checksum="sha256")
        w.add("c", np.ones(3, np.uint8))
    return p


def test_truncated_at_every_length(sample, tmp_path):
    data = sample.read_bytes()
    for n in range(len(data)):
        p = write(tmp_path, data[:n], "t.zt")
        if n == 16:  # magic + 8 zero padding bytes is, by coincidence, the 16-byte empty file
            assert read_all(p) == {}
            continue
        with pytest.raises(FormatError) as ei:
            read_all(p)
        if n < 16:
            assert isinstance(ei.value, TruncatedError), n
        assert not zt.verify(p).ok


def test_extended_file_is_rejected(sample, tmp_path):
    p = write(tmp_path, sample.read_bytes() + b"\0" * 5)
    with pytest.raises(FormatError):
        read_all(p)


def test_bad_magic(tmp_path):
    p = write(tmp_path, b"ZTEN0002" + b"\x80" + (1).to_bytes(8, "little"))
    with pytest.raises(FormatError, match=r"magic mismatch; expected b'ZTEN0001', got b'ZTEN0002'"):
        zt.Reader(p)


def test_size_field_too_large(tmp_path):
    p = write(tmp_path, build([entry()], {64: X}, size_field=10_000))
    with pytest.raises(TruncatedError, match=r"truncated: the file has \d+ bytes, its footer"):
        zt.Reader(p)


def test_size_field_too_small(tmp_path):
    good = build([entry()], {64: X})
    n = int.from_bytes(good[-8:], "little")
    p = write(tmp_path, good[:-8] + (n - 3).to_bytes(8, "little"))
    with pytest.raises(FormatError, match=r"invalid CBOR|not a CBOR array|trailing"):
        zt.Reader(p)


def test_size_field_zero_in_nonempty_file(tmp_path):
    p = write(tmp_path, build([entry()], {64: X}, size_field=0))
    with pytest.raises(FormatError, match="zero in a file with data"):
        zt.Reader(p)


def test_cbor_garbage(tmp_path):
    p = write(tmp_path, build([], {}, index=b"\xff\xfe\x1f\x00garbage"))
    with pytest.raises(FormatError, match=r"zt: index at offset 0x8: invalid CBOR"):
        zt.Reader(p)


def test_cbor_trailing_bytes(tmp_path):
    p = write(tmp_path, build([], {}, index=b"\x80\x80"))
    with pytest.raises(FormatError, match="trailing bytes after CBOR item"):
        zt.Reader(p)


def test_index_not_an_array(tmp_path):
    p = write(tmp_path, build([], {}, index=b"\xa0"))
    with pytest.raises(FormatError, match="not a CBOR array; expected array, got dict"):
        zt.Reader(p)


def test_index_over_limit(tmp_path):
    p = write(tmp_path, build([entry()], {64: X}))
    with pytest.raises(LimitError, match="index at offset 0x58: size: above limit"):
        zt.Reader(p, limits=Limits(max_index_bytes=16))


def test_too_many_tensors(tmp_path):
    ents = [entry(name=f"t{i}", offset=64, size=0, shape=[0]) for i in range(5)]
    p = write(tmp_path, build(ents, {}))
    with pytest.raises(LimitError, match="tensor count"):
        zt.Reader(p, limits=Limits(max_objects=4))


def test_misaligned_offset(tmp_path):
    p = write(tmp_path, build([entry(offset=72)], {72: X}))
    with pytest.raises(FormatError, match=r"offset 0x48: data offset: not 64-byte aligned"):
        zt.Reader(p)


def test_blob_overlapping_index(tmp_path):
    p = write(tmp_path, build([entry(size=24, shape=[2, 3])], {64: X[:8]}))
    with pytest.raises(TruncatedError, match="runs into the index"):
        zt.Reader(p)


def test_blob_past_end_of_file(tmp_path):
    p = write(tmp_path, build([entry(offset=1 << 40)], {64: X}))
    with pytest.raises(TruncatedError, match=r"expected end <= \d+, got 1099511627800"):
        zt.Reader(p)


def test_blob_over_magic(tmp_path):
    p = write(tmp_path, build([entry(offset=0)], {64: X}))
    with pytest.raises(FormatError, match="overlaps the magic"):
        zt.Reader(p)


def test_overlapping_blobs(tmp_path):
    ents = [entry("a"), entry("b")]
    p = write(tmp_path, build(ents, {64: X}))
    with pytest.raises(FormatError, match="overlaps the data blob of tensor 'a'"):
        zt.Reader(p)


def test_size_not_numel_times_itemsize(tmp_path):
    p = write(tmp_path, build([entry(size=20)], {64: X}))
    with pytest.raises(
        FormatError, match=r"size: does not match shape x itemsize; expected 24, got 20"
    ):
        zt.Reader(p)


@pytest.mark.parametrize(
    "field, value, cls, text",
    [
        ("dtype", "float8", UnsupportedError, "dtype: unknown"),
        ("encoding", "lz4", UnsupportedError, "encoding: unknown"),
        ("layout", "ragged", UnsupportedError, "layout: unknown"),
        ("data_endianness", "middle", UnsupportedError, "data_endianness: unknown"),
        ("checksum", "md5:00", UnsupportedError, "checksum: unknown algorithm"),
        ("checksum", "crc32c:0x12", FormatError, "checksum: malformed"),
        ("dtype", 7, FormatError, "dtype: wrong type"),
        ("shape", "2x3", FormatError, "shape: wrong type"),
        ("offset", -64, FormatError, "offset: out of range"),
        ("name", None, FormatError, "name: missing required field"),
    ],
)
def test_bad_field_values(tmp_path, field, value, cls, text):
    e = entry()
    if value is None:
        del e[field]
    else:
        e[field] = value
    p = write(tmp_path, build([e], {64: X}))
    with pytest.raises(cls, match=text):
        zt.Reader(p)


@pytest.mark.parametrize("shape", [[-1, 3], [2, 3.0], [True, 6], [2**64, 1]])
def test_bad_shapes(tmp_path, shape):
    import cbor2  # encodes 2**64 as a bignum, which tenfold's own encoder refuses

    p = write(tmp_path, build([], {64: X}, index=cbor2.dumps([entry(shape=shape)])))
    with pytest.raises(FormatError, match="shape"):
        zt.Reader(p)


def test_overflowing_shape_hits_limit(tmp_path):
    p = write(tmp_path, build([entry(shape=[2**32, 2**32])], {64: X}))
    with pytest.raises(LimitError, match="shape: too large for any array"):
        zt.Reader(p)


def test_rank_over_limit(tmp_path):
    p = write(tmp_path, build([entry(shape=[1] * 65, size=4)], {64: X[:4]}))
    with pytest.raises(LimitError, match="ndim"):
        zt.Reader(p)


def test_duplicate_names(tmp_path):
    p = write(tmp_path, build([entry("a"), entry("a", offset=128)], {64: X, 128: X}))
    with pytest.raises(FormatError, match="duplicate name"):
        zt.Reader(p)


def test_non_map_entry_and_non_string_key(tmp_path):
    p = write(tmp_path, build([[1, 2]], {}))
    with pytest.raises(FormatError, match="not a CBOR map"):
        zt.Reader(p)
    e = entry()
    e[5] = "x"
    p = write(tmp_path, build([e], {64: X}))
    with pytest.raises(FormatError, match="non-string key"):
        zt.Reader(p)


def test_zstd_bomb_is_bounded(tmp_path):
    big = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(1 << 20))
    e = entry(size=len(big), encoding="zstd")
    p = write(tmp_path, build([e], {64: big}))
    with (
        zt.Reader(p) as r,
        pytest.raises(IntegrityError, match="decoded size.*expected 24, got more than 24"),
    ):
        r["x"]


def test_zstd_declared_size_lies(tmp_path):
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(32))
    p = write(tmp_path, build([entry(size=len(frame), encoding="zstd")], {64: frame}))
    with (
        zt.Reader(p) as r,
        pytest.raises(IntegrityError, match="zstd content size mismatch; expected 24, got 32"),
    ):
        r["x"]


def test_zstd_too_short_and_garbage(tmp_path):
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(16))
    p = write(tmp_path, build([entry(size=len(frame), encoding="zstd")], {64: frame}))
    with (
        zt.Reader(p) as r,
        pytest.raises(IntegrityError, match="decoded size mismatch; expected 24, got 16"),
    ):
        r["x"]
    p = write(tmp_path, build([entry(size=10, encoding="zstd")], {64: b"0123456789"}))
    with zt.Reader(p) as r, pytest.raises(FormatError, match="not a zstd frame"):
        r["x"]
    cctx = zstandard.ZstdCompressor(write_checksum=True)
    bad = bytearray(
        cctx.compress(np.random.default_rng(1).integers(0, 9, 1000, np.int32).tobytes())
    )
    bad[len(bad) // 2] ^= 0x01
    e = entry(size=len(bad), encoding="zstd", dtype="int32", shape=[1000])
    p = write(tmp_path, build([e], {64: bytes(bad)}))
    with zt.Reader(p) as r, pytest.raises(IntegrityError, match="corrupt zstd data"):
        r["x"]


def test_checksum_mismatch(tmp_path):
    e = entry(checksum="crc32c:0x00000000")
    p = write(tmp_path, build([e], {64: X}))
    with (
        zt.Reader(p) as r,
        pytest.raises(
            IntegrityError,
            match=r"tensor 'x' at offset 0x40: crc32c checksum mismatch; expected 00000000",
        ),
    ):
        r["x"]
    with zt.Reader(p, verify_checksums=False) as r:
        np.testing.assert_array_equal(r["x"].ravel(), np.arange(6, dtype=np.float32))
    rep = zt.verify(p)
    assert not rep.ok and "crc32c checksum mismatch" in rep.errors[0].message


def test_sha256_lowercase_and_uppercase_accepted(tmp_path):
    import hashlib

    h = hashlib.sha256(X).hexdigest()
    for text in (
        f"sha256:{h}",
        f"sha256:{h.upper()}",
        "crc32c:0x" + f"{__import__('crc32c').crc32c(X):08x}",
    ):
        p = write(tmp_path, build([entry(checksum=text)], {64: X}))
        read_all(p)


def test_bad_sparse_structures(tmp_path):
    vals = np.array([1.0, 2.0], np.float32).tobytes()
    base = dict(
        sparse_format="csr",
        nnz=2,
        indptr_offset=128,
        indptr_size=24,
        indices_offset=192,
        indices_size=16,
    )
    cases = [
        (np.array([0, 1, 3], "<u8"), np.array([0, 1], "<u8"), "indptr ends"),
        (np.array([0, 2, 1], "<u8"), np.array([0, 1], "<u8"), "indptr ends"),
        (np.array([0, 2, 2], "<u8"), np.array([0, 9], "<u8"), "column index out of range"),
    ]
    for indptr, indices, text in cases:
        e = entry(size=8, shape=[2, 3], layout="sparse", **base)
        p = write(tmp_path, build([e], {64: vals, 128: indptr.tobytes(), 192: indices.tobytes()}))
        with zt.Reader(p) as r, pytest.raises(FormatError, match=text):
            r["x"]
    e = entry(
        size=8,
        shape=[2, 3],
        layout="sparse",
        sparse_format="coo",
        nnz=2,
        coords_offset=128,
        coords_size=32,
    )
    coords = np.array([[0, 1], [0, 3]], "<u8")
    p = write(tmp_path, build([e], {64: vals, 128: coords.tobytes()}))
    with zt.Reader(p) as r, pytest.raises(FormatError, match=r"coords\[1\]: index out of range"):
        r["x"]
    e = entry(size=8, shape=[2, 3], layout="sparse", sparse_format="bsr", nnz=2)
    p = write(tmp_path, build([e], {64: vals}))
    with pytest.raises(UnsupportedError, match="sparse_format: unknown"):
        zt.Reader(p)
    e = entry(
        size=8,
        shape=[2, 3],
        layout="sparse",
        sparse_format="csr",
        nnz=2,
        indptr_offset=128,
        indptr_size=16,
        indices_offset=192,
        indices_size=16,
    )
    p = write(tmp_path, build([e], {64: vals, 128: bytes(24), 192: bytes(16)}))
    with pytest.raises(FormatError, match="indptr_size: does not match"):
        zt.Reader(p)


def test_definite_length_maps_are_read(tmp_path):
    p = write(tmp_path, build([entry()], {64: X}, indefinite=False))
    np.testing.assert_array_equal(read_all(p)["x"].ravel(), np.arange(6, dtype=np.float32))


def test_missing_layout_means_dense(tmp_path):
    e = entry()
    del e["layout"]
    p = write(tmp_path, build([e], {64: X}))
    with zt.Reader(p) as r:
        assert r.info("x").layout == "dense"


def test_custom_keys_are_kept_and_ignored(tmp_path):
    p = write(tmp_path, build([entry(note="hi", x_version=7)], {64: X}))
    with zt.Reader(p) as r:
        assert r.info("x").attrs == {"note": "hi", "x_version": 7}


def test_huge_zstd_claim_is_not_a_memory_error(tmp_path):
    blob = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * 1000)
    e = entry(size=len(blob), encoding="zstd", dtype="uint64", shape=[1 << 42])
    p = write(tmp_path, build([e], {64: blob}))
    with pytest.raises(LimitError, match="decoded size: above limit"):
        zt.Reader(p)
    e = entry(size=len(blob), encoding="zstd", dtype="uint64", shape=[1 << 37])  # 1 TiB < limit?
    p = write(tmp_path, build([e], {64: blob}))
    with zt.Reader(p, limits=Limits(max_decoded_bytes=1 << 50)) as r:
        with pytest.raises((LimitError, IntegrityError)):
            r["x"]
    assert not zt.verify(p, limits=Limits(max_decoded_bytes=1 << 50)).ok
    framed = zstandard.ZstdCompressor(write_content_size=True).compress(b"\0" * 1000)
    e = entry(size=len(framed), encoding="zstd", dtype="uint64", shape=[1 << 37])
    p = write(tmp_path, build([e], {64: framed}))
    with zt.Reader(p, limits=Limits(max_decoded_bytes=1 << 50)) as r:
        with pytest.raises(IntegrityError, match="zstd content size mismatch"):
            r["x"]  # refused from the frame header, before any allocation

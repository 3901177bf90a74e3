"""Writer: round trips, determinism, atomicity, streaming memory, bad input."""

from __future__ import annotations

import os
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tenfold
import tenfold.ztensor as zt
from tenfold.errors import EncodeError

DTYPES = [
    np.float64,
    np.float32,
    np.float16,
    ml_dtypes.bfloat16,
    np.int64,
    np.int32,
    np.int16,
    np.int8,
    np.uint64,
    np.uint32,
    np.uint16,
    np.uint8,
    np.bool_,
]


def arrays_of(dtype):
    dt = np.dtype(dtype)
    if dt == np.dtype(ml_dtypes.bfloat16):
        return hnp.arrays(
            np.uint16, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
        ).map(lambda a: a.view(dt))
    return hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))


tensor_dicts = st.dictionaries(
    st.text(min_size=1, max_size=12),
    st.sampled_from(DTYPES).flatmap(arrays_of),
    max_size=6,
)


@given(
    tensors=tensor_dicts,
    encoding=st.sampled_from(["raw", "zstd"]),
    checksum=st.sampled_from([None, "crc32c", "sha256"]),
)
def test_round_trip(tmp_path_factory, tensors, encoding, checksum):
    path = tmp_path_factory.mktemp("rt") / "r.zt"
    zt.save(path, tensors, encoding=encoding, checksum=checksum, fsync=False)
    back = zt.load(path)
    assert list(back) == list(tensors)
    for name, a in tensors.items():
        b = back[name]
        assert b.dtype == a.dtype and b.shape == a.shape
        assert b.tobytes() == a.tobytes()
    assert zt.verify(path).ok


def test_deterministic(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"a": rng.standard_normal((7, 5)), "b": rng.integers(0, 9, 33).astype(np.int16)}
    for enc in ("raw", "zstd"):
        zt.save(tmp_path / "1.zt", tensors, encoding=enc, checksum="crc32c")
        zt.save(tmp_path / "2.zt", tensors, encoding=enc, checksum="crc32c")
        assert (tmp_path / "1.zt").read_bytes() == (tmp_path / "2.zt").read_bytes()


def test_non_contiguous_and_big_endian_input(tmp_path):
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    tensors = {
        "strided": base[::2, ::3],
        "fortran": np.asfortranarray(base),
        "big": base.astype(">f8"),
        "big_strided": base.astype(">i4")[:, ::2],
    }
    zt.save(tmp_path / "n.zt", tensors)
    back = zt.load(tmp_path / "n.zt")
    for name, a in tensors.items():
        np.testing.assert_array_equal(back[name], a)
        assert back[name].dtype.byteorder in "=<|"


def test_scalar_and_zero_size(tmp_path):
    tensors = {"s": np.float32(3.5), "z": np.zeros((2, 0, 3), np.int16), "one": np.ones(1, "u1")}
    zt.save(tmp_path / "s.zt", {k: np.asarray(v) for k, v in tensors.items()})
    with zt.Reader(tmp_path / "s.zt") as r:
        assert r["s"].shape == () and float(r["s"]) == 3.5
        assert r["z"].shape == (2, 0, 3)
        assert r.info("z").size == 0


def test_attrs_round_trip_and_reserved(tmp_path):
    with zt.Writer(tmp_path / "a.zt") as w:
        w.add("x", np.ones(2), attrs={"unit": "m", "scale": 0.5, "tags": [1, 2]})
    with zt.Reader(tmp_path / "a.zt") as r:
        assert r.info("x").attrs == {"unit": "m", "scale": 0.5, "tags": [1, 2]}
    with (
        pytest.raises(EncodeError, match="key 'offset' is reserved"),
        zt.Writer(tmp_path / "b.zt") as w,
    ):
        w.add("x", np.ones(2), attrs={"offset": 1})
    with pytest.raises(EncodeError, match="not CBOR-encodable"), zt.Writer(tmp_path / "b.zt") as w:
        w.add("x", np.ones(2), attrs={"f": object()})


def test_refuses_duplicates_and_bad_names(tmp_path):
    with pytest.raises(EncodeError, match="duplicate name"), zt.Writer(tmp_path / "d.zt") as w:
        w.add("x", np.ones(2))
        w.add("x", np.ones(2))
    assert not (tmp_path / "d.zt").exists()
    with pytest.raises(EncodeError, match="name: not a string"):
        zt.save(tmp_path / "d.zt", {1: np.ones(2)})
    with pytest.raises(EncodeError, match="must be a mapping"):
        zt.save(tmp_path / "d.zt", [np.ones(2)])


@pytest.mark.parametrize(
    "value",
    [
        np.ones(2, np.complex64),
        np.array(["a"]),
        np.ones(2, ml_dtypes.float8_e5m2),
        np.array([object()]),
        np.zeros(2, [("a", "<i4")]),
    ],
)
def test_refuses_dtypes_the_format_lacks(tmp_path, value):
    with pytest.raises(EncodeError, match="dtype"):
        zt.save(tmp_path / "x.zt", {"x": value})


def test_bad_options(tmp_path):
    with pytest.raises(EncodeError, match="encoding: unknown"):
        zt.save(tmp_path / "x.zt", {"x": np.ones(2)}, encoding="lz4")
    with pytest.raises(EncodeError, match="checksum: unknown algorithm"):
        zt.save(tmp_path / "x.zt", {"x": np.ones(2)}, checksum="md5")


def test_failure_keeps_previous_file(tmp_path):
    path = tmp_path / "keep.zt"
    zt.save(path, {"old": np.arange(3)})
    before = path.read_bytes()

    class Boom(Exception):
        pass

    with pytest.raises(Boom), zt.Writer(path) as w:
        w.add("new", np.ones(1000))
        raise Boom
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["keep.zt"]  # no temp file left behind
    w2 = zt.Writer(path)
    w2.add("x", np.ones(3))
    w2.abort()
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["keep.zt"]


def test_no_partial_file_visible_while_writing(tmp_path):
    path = tmp_path / "p.zt"
    with zt.Writer(path) as w:
        w.add("a", np.ones(100))
        assert not path.exists()
    assert path.exists()


def test_writer_streams_without_copying(tmp_path):
    big = np.ones(32 << 20, np.uint8)  # 32 MiB contiguous
    strided = np.ones((2048, 2 * 8192), np.uint8)[:, ::2]  # 16 MiB, non-contiguous
    tracemalloc.start()
    try:
        with zt.Writer(tmp_path / "m.zt", fsync=False) as w:
            tracemalloc.reset_peak()
            w.add("big", big, checksum="crc32c")
            contiguous_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            w.add("strided", strided)
            strided_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert contiguous_peak < 1 << 20
    assert strided_peak < 34 << 20  # bounded by one slice (32 MiB), not by the tensor


def test_sparse_inputs(tmp_path):
    sp = pytest.importorskip("scipy.sparse", reason="scipy not installed")
    rng = np.random.default_rng(3)
    dense = (rng.random((6, 9)) < 0.3) * rng.standard_normal((6, 9))
    dense3 = np.zeros((3, 4, 5), np.float32)
    dense3[1, 2, 3] = 7
    dense3[2, 0, 4] = -1
    for enc in ("raw", "zstd"):
        with zt.Writer(tmp_path / "s.zt") as w:
            w.add("csr", sp.csr_array(dense), encoding=enc, checksum="crc32c")
            w.add("coo", sp.coo_array(dense), encoding=enc)
            w.add(
                "coo3",
                zt.SparseTensor(
                    "coo",
                    (3, 4, 5),
                    np.array([7, -1], np.float32),
                    coords=np.array([[1, 2], [2, 0], [3, 4]]),
                ),
                encoding=enc,
            )
            w.add("empty", sp.csr_array((4, 4), dtype=np.float32))
        with zt.Reader(tmp_path / "s.zt") as r:
            np.testing.assert_array_equal(r["csr"].toarray(), dense)
            np.testing.assert_array_equal(r["coo"].toarray(), dense)
            np.testing.assert_array_equal(r["coo3"].toarray(), dense3)
            assert r["empty"].nnz == 0
            assert r.info("csr").layout == "sparse" and r.info("csr").sparse_format == "csr"
        with zt.Reader(tmp_path / "s.zt", sparse="raw") as r:
            np.testing.assert_array_equal(r["coo3"].todense(), dense3)
        assert zt.verify(tmp_path / "s.zt").ok


def test_bad_sparse_input(tmp_path):
    bad = zt.SparseTensor(
        "csr", (2, 2), np.ones(1), indices=np.array([5]), indptr=np.array([0, 1, 1])
    )
    with pytest.raises(EncodeError, match="column index out of range"):
        zt.save(tmp_path / "b.zt", {"x": bad})
    bad = zt.SparseTensor("coo", (2, 2), np.ones(1), coords=np.array([[-1], [0]]))
    with pytest.raises(EncodeError, match="non-negative integers"):
        zt.save(tmp_path / "b.zt", {"x": bad})


def test_public_api(tmp_path):
    path = tmp_path / "api.zt"
    tenfold.save(path, {"w": np.arange(4.0)})
    assert tenfold.detect(path) == "ztensor"
    with tenfold.open(path) as r:
        assert isinstance(r, zt.Reader)
    assert tenfold.load(path)["w"].tolist() == [0, 1, 2, 3]
    assert tenfold.load(path, copy=True)["w"].flags.writeable
    renamed = tmp_path / "model.bin"
    path.rename(renamed)
    assert tenfold.detect(renamed) == "ztensor"  # by magic, not suffix


def test_views_survive_close(tmp_path):
    path = tmp_path / "v.zt"
    zt.save(path, {"w": np.arange(10.0)})
    r = zt.Reader(path)
    v = r["w"]
    r.close()
    assert v.sum() == 45.0 and r.closed
    with pytest.raises(ValueError, match="closed"):
        r["w"]


def test_read_into_out(tmp_path):
    path = tmp_path / "o.zt"
    zt.save(path, {"w": np.arange(10.0).reshape(2, 5)}, encoding="zstd")
    out = np.empty((2, 5))
    with zt.Reader(path) as r:
        assert r.read("w", out=out) is out
        with pytest.raises(ValueError, match="must be C-contiguous"):
            r.read("w", out=np.empty(10))
    np.testing.assert_array_equal(out, np.arange(10.0).reshape(2, 5))


def test_load_copy_reads_into_one_buffer_and_checks_sums(tmp_path):
    rng = np.random.default_rng(5)
    tensors = {
        "a": rng.standard_normal((3, 7)).astype(np.float32),
        "s": np.asarray(np.int8(-3)),
        "z": np.zeros((0, 4), np.float16),
        "c": np.arange(9, dtype=">i4"),
        "q": rng.integers(0, 5, 50).astype(np.uint16),
    }
    path = tmp_path / "c.zt"
    with zt.Writer(path) as w:
        for k, v in tensors.items():
            w.add(k, v, checksum="crc32c", encoding="zstd" if k == "q" else "raw")
    back = zt.load(path, copy=True)
    for k, v in tensors.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].flags.writeable
    back["a"][0, 0] = 42  # writable, and does not touch the file
    assert zt.load(path)["a"][0, 0] != 42
    data = bytearray(path.read_bytes())
    data[64] ^= 1  # first byte of tensor 'a'
    path.write_bytes(bytes(data))
    with pytest.raises(tenfold.IntegrityError, match="tensor 'a' at offset 0x40: crc32c"):
        zt.load(path, copy=True)


def test_add_sparse_explicit_and_reader_verify(tmp_path):
    path = tmp_path / "e.zt"
    with zt.Writer(path) as w:
        w.add_sparse(
            "m",
            "csr",
            (2, 3),
            np.array([1, 2], np.int32),
            indptr=[0, 1, 2],
            indices=[2, 0],
            checksum="sha256",
        )
        w.add_sparse("c", "coo", (2, 2, 2), np.array([5.0]), coords=[[1], [1], [0]])
    with zt.Reader(path, sparse="raw") as r:
        assert r["m"].todense().tolist() == [[0, 0, 1], [2, 0, 0]]
        assert r["c"].todense()[1, 1, 0] == 5.0
        report = r.verify()
        assert report.ok and len(report.findings) == 2


def test_writer_refuses_more_after_a_failed_write(tmp_path, monkeypatch):
    path = tmp_path / "f.zt"
    zt.save(path, {"old": np.arange(3)})
    before = path.read_bytes()
    w = zt.Writer(path)
    w.add("a", np.ones(4))
    calls = {"n": 0}
    real_write = w._f.write

    def failing_write(data):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real_write(data)

    monkeypatch.setattr(w._f, "write", failing_write)
    with pytest.raises(OSError, match="No space left"):
        w.add("b", np.ones(1000))
    monkeypatch.setattr(w._f, "write", real_write)
    with pytest.raises(ValueError, match="failed earlier"):
        w.add("c", np.ones(2))
    with pytest.raises(ValueError, match="file discarded"):
        w.close()
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["f.zt"]


def test_copy_reads_come_from_the_opened_file(tmp_path):
    path = tmp_path / "r.zt"
    zt.save(path, {"w": np.arange(4, dtype="f4")}, checksum="crc32c")
    with zt.Reader(path) as r:
        zt.save(path, {"w": np.full(4, 7, "f4")}, checksum="crc32c")  # replaced by rename
        assert r.read("w", copy=True).tolist() == [0, 1, 2, 3]
        assert zt.load(path)["w"].tolist() == [7, 7, 7, 7]
        assert r.read_all(copy=True)["w"].tolist() == [0, 1, 2, 3]

"""Every v0.1.0 conformance vector reads to exactly the values of its sidecar, and the
reference-written files are rebuilt byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from _zt_vectors import expected_array, sidecar

import tenfold
import tenfold.ztensor as zt
from tenfold.core.dtypes import numpy_dtype
from tenfold.errors import UnsupportedError

V010 = [
    "dense_all_dtypes",
    "dense_scalar",
    "dense_zero_size_and_padding",
    "empty",
    "synth_big_endian",
    "synth_zstd_crc32c",
    "synth_sparse_rust_reader_convention",
]


@pytest.fixture
def v010(conformance: Path) -> Path:
    return conformance / "ztensor" / "v0_1_0"


def test_vector_list_is_complete(v010):
    assert sorted(p.stem for p in v010.glob("*.zt")) == sorted(V010)


@pytest.mark.parametrize("stem", V010)
def test_reads_every_vector(v010, stem):
    path = v010 / f"{stem}.zt"
    meta = sidecar(path)
    assert path.stat().st_size == meta["file_size"]
    with zt.Reader(path, sparse="raw") as r:
        assert list(r) == [t["name"] for t in meta["tensors"]]
        for t in meta["tensors"]:
            got = r[t["name"]]
            if t["layout"] in ("sparsecsr", "sparsecoo"):
                comps = t["components"]
                vals = np.frombuffer(
                    bytes.fromhex(comps["values"]["raw_le_hex"]), numpy_dtype(t["dtype"])
                )
                np.testing.assert_array_equal(got.data, vals)
                assert got.data.tobytes() == vals.tobytes()
                dense = np.asarray(t["dense_equivalent"], dtype=np.float64).reshape(t["shape"])
                np.testing.assert_array_equal(got.todense().astype(np.float64), dense)
                continue
            assert got.dtype == numpy_dtype(t["dtype"])
            assert list(got.shape) == t["shape"]
            digest = hashlib.sha256(np.ascontiguousarray(got).tobytes()).hexdigest()
            assert digest == t["raw_le_sha256"], t["name"]
            if t.get("raw_le_hex"):
                assert got.tobytes() == bytes.fromhex(t["raw_le_hex"])
            info = r.info(t["name"])
            assert info.encoding == t["encoding"]
            if "checksum" in t:
                assert info.checksum == t["checksum"]


def test_sparse_vectors_as_scipy(v010):
    sp = pytest.importorskip("scipy.sparse", reason="scipy not installed")
    path = v010 / "synth_sparse_rust_reader_convention.zt"
    meta = sidecar(path)
    with zt.Reader(path) as r:
        for t in meta["tensors"]:
            got = r[t["name"]]
            assert sp.issparse(got)
            dense = np.asarray(t["dense_equivalent"], dtype=np.float32).reshape(t["shape"])
            np.testing.assert_array_equal(got.toarray(), dense)


def test_zero_copy_views(v010):
    with zt.Reader(v010 / "dense_all_dtypes.zt") as r:
        v = r["t_float32"]
        assert not v.flags.writeable and not v.flags.owndata
        assert np.shares_memory(v, r.stored("t_float32").view(np.float32))
        c = r.read("t_float32", copy=True)
        assert c.flags.writeable and c.flags.owndata
        np.testing.assert_array_equal(c, v)


def test_big_endian_is_decoded_to_owned_native(v010):
    path = v010 / "synth_big_endian.zt"
    meta = sidecar(path)
    with zt.Reader(path) as r:
        for t in meta["tensors"]:
            a = r[t["name"]]
            assert a.flags.owndata and a.dtype.byteorder in "=|<"
            assert r.stored(t["name"]).tobytes().hex() == t["on_disk_hex"]


# -- byte-identical writer --------------------------------------------------------------------
@pytest.mark.parametrize(
    "stem", ["dense_all_dtypes", "dense_zero_size_and_padding", "dense_scalar", "empty"]
)
def test_rebuild_reference_files_byte_for_byte(v010, tmp_path, stem):
    ref = v010 / f"{stem}.zt"
    meta = sidecar(ref)
    tensors = {t["name"]: expected_array(t) for t in meta["tensors"]}
    out = tmp_path / f"{stem}.zt"
    zt.save(out, tensors)
    assert out.read_bytes() == ref.read_bytes()
    assert hashlib.sha256(out.read_bytes()).hexdigest() == meta["file_sha256"]


def test_rebuild_zstd_crc_vector_index(v010, tmp_path):
    """The synthetic zstd/crc32c vector: same index fields as we write (zstd bytes differ by
    compressor version, so compare the decoded values and our own round trip)."""
    ref = v010 / "synth_zstd_crc32c.zt"
    meta = sidecar(ref)
    with zt.Reader(ref) as r:
        tensors = {n: r.read(n, copy=True) for n in r}
        infos = {n: r.info(n) for n in r}
    out = tmp_path / "again.zt"
    with zt.Writer(out) as w:
        for t in meta["tensors"]:
            info = infos[t["name"]]
            w.add(
                t["name"],
                tensors[t["name"]],
                encoding=info.encoding,
                checksum=info.checksum_algo,
                attrs=info.attrs,
            )
    with zt.Reader(out) as r2:
        for name, a in tensors.items():
            np.testing.assert_array_equal(r2[name], a)
            assert r2.info(name).attrs == infos[name].attrs
        assert r2.info("raw_crc_f32_3x5").checksum == infos["raw_crc_f32_3x5"].checksum
        assert r2.info("raw_crc_bool_9").checksum == "crc32c:0x0EA3EED3"


@pytest.mark.parametrize("gen", ["v1", "v2"])
def test_later_generations_are_named_not_misread(conformance, gen):
    for path in sorted((conformance / "ztensor" / gen).glob("*.zt")):
        assert tenfold.detect(path) == "ztensor"
        with pytest.raises(UnsupportedError, match=r"zTensor v[12].*0\.1\.0 reader.*every gen"):
            zt.Reader(path)


def test_sixteen_byte_empty_variant(tmp_path):
    p = tmp_path / "e16.zt"
    p.write_bytes(b"ZTEN0001" + bytes(8))
    with zt.Reader(p) as r:
        assert len(r) == 0
    assert zt.verify(p).ok

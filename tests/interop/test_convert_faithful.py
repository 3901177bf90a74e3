"""A conversion within one format is faithful by default: zTensor keeps each tensor's encoding
and checksum, FOLD its zstd chunks, npz its deflate; explicit options still override."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

import tenfold.fold as fold
import tenfold.ztensor as zt
from tenfold import convert as conv
from tenfold.cli import main

A = np.arange(4096, dtype=np.float32).reshape(64, 64)
B = np.arange(500, dtype=np.int16)
C = np.ones(10, np.float64)
D = np.arange(6, dtype=np.uint8)


def _zt_source(path):
    with zt.Writer(path, fsync=False) as w:
        w.add("a", A, encoding="zstd", checksum="sha256")
        w.add("b", B, encoding="zstd")
        w.add("c", C, checksum="crc32c")
        w.add("d", D)
        w.add(
            "sp",
            zt.SparseTensor(
                "csr",
                (2, 3),
                np.ones(2, np.float32),
                indices=np.array([0, 2], np.uint64),
                indptr=np.array([0, 1, 2], np.uint64),
            ),
            encoding="zstd",
            checksum="sha256",
        )
    return path


def _stored(path):
    with zt.Reader(path, sparse="raw") as r:
        return {i.name: (i.encoding, i.checksum_algo) for i in r.infos()}


def _same_values(a_path, b_path):
    with zt.Reader(a_path, sparse="raw") as a, zt.Reader(b_path, sparse="raw") as b:
        assert list(a) == list(b)
        for n in ("a", "b", "c", "d"):
            np.testing.assert_array_equal(a.read(n, copy=True), b.read(n, copy=True))


def test_zt_to_zt_keeps_each_tensors_encoding_and_checksum(tmp_path):
    src = _zt_source(tmp_path / "s.zt")
    dst = tmp_path / "d.zt"
    assert conv.convert(src, dst) == 5
    assert (
        _stored(dst)
        == _stored(src)
        == {
            "a": ("zstd", "sha256"),
            "b": ("zstd", None),
            "c": ("raw", "crc32c"),
            "d": ("raw", None),
            "sp": ("zstd", "sha256"),
        }
    )
    _same_values(src, dst)
    assert zt.verify(dst).ok


def test_zt_to_zt_cli_keeps_them_too(tmp_path, capsys):
    src = _zt_source(tmp_path / "s.zt")
    dst = tmp_path / "d.zt"
    assert main(["convert", "-q", str(src), str(dst)]) == 0
    assert _stored(dst) == _stored(src)


def test_explicit_options_override(tmp_path):
    src = _zt_source(tmp_path / "s.zt")
    conv.convert(src, tmp_path / "plain.zt", checksum=None, compress=None)
    assert set(_stored(tmp_path / "plain.zt").values()) == {("raw", None)}
    conv.convert(src, tmp_path / "crc.zt", checksum="crc32c")  # encodings kept
    got = _stored(tmp_path / "crc.zt")
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in _stored(src).items()}
    assert {v[1] for v in got.values()} == {"crc32c"}
    _same_values(src, tmp_path / "crc.zt")
    conv.convert(src, tmp_path / "z.zt", compress="zstd")  # checksums kept
    got = _stored(tmp_path / "z.zt")
    assert {v[0] for v in got.values()} == {"zstd"}
    assert {k: v[1] for k, v in got.items()} == {k: v[1] for k, v in _stored(src).items()}


@pytest.mark.parametrize(
    "args, want",
    [
        (["--checksum", "none", "--compress", "none"], {("raw", None)}),
        (["--checksum", "sha256", "--compress", "zstd:5"], {("zstd", "sha256")}),
    ],
)
def test_cli_flags_override(tmp_path, args, want):
    src = _zt_source(tmp_path / "s.zt")
    dst = tmp_path / "d.zt"
    assert main(["convert", "-q", *args, str(src), str(dst)]) == 0
    assert set(_stored(dst).values()) == want


def test_other_sources_into_zt_keep_the_old_defaults(tmp_path):
    src = tmp_path / "s.safetensors"
    conv.write_any(src, {"a": A, "d": D})
    conv.convert(src, tmp_path / "d.zt")
    assert set(_stored(tmp_path / "d.zt").values()) == {("raw", "crc32c")}


def test_zt_into_other_formats_is_unchanged(tmp_path):
    src = _zt_source(tmp_path / "s.zt")
    conv.convert(src, tmp_path / "d.fold", metadata=False)  # "keep" is no compression here
    with fold.Reader(tmp_path / "d.fold") as r:
        assert {c.compression for c in r.chunks} == {"none"}


def test_fold_to_fold_keeps_zstd_chunks(tmp_path):
    fold.save(tmp_path / "z.fold", {"a": A, "b": B}, compress="zstd")
    fold.save(tmp_path / "n.fold", {"a": A, "b": B}, compress=None)
    for name, want in (("z", "zstd"), ("n", "none")):
        conv.convert(tmp_path / f"{name}.fold", tmp_path / f"{name}2.fold")
        with fold.Reader(tmp_path / f"{name}2.fold") as r:
            assert {c.compression for c in r.chunks if c.ctype == "STEN"} == {want}
    conv.convert(tmp_path / "z.fold", tmp_path / "forced.fold", compress=None)
    with fold.Reader(tmp_path / "forced.fold") as r:
        assert {c.compression for c in r.chunks if c.ctype == "STEN"} == {"none"}


def test_npz_to_npz_keeps_deflate(tmp_path):
    np.savez_compressed(tmp_path / "c.npz", a=A, b=B)
    np.savez(tmp_path / "s.npz", a=A, b=B)
    for name, want in (("c", zipfile.ZIP_DEFLATED), ("s", zipfile.ZIP_STORED)):
        conv.convert(tmp_path / f"{name}.npz", tmp_path / f"{name}2.npz")
        with zipfile.ZipFile(tmp_path / f"{name}2.npz") as z:
            assert {i.compress_type for i in z.infolist()} == {want}
        with np.load(tmp_path / f"{name}2.npz") as f:
            np.testing.assert_array_equal(f["a"], A)


def test_bad_values_are_refused(tmp_path):
    src = _zt_source(tmp_path / "s.zt")
    with pytest.raises(ValueError, match="compress must be None, 'zstd', 'deflate' or 'keep'"):
        conv.convert(src, tmp_path / "x.zt", compress="lz4")
    with pytest.raises(ValueError, match="checksum must be None, 'crc32c', 'sha256' or 'keep'"):
        conv.convert(src, tmp_path / "x.zt", checksum="md5")

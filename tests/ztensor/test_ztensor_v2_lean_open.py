"""The lean open of a local v2 file (``V2Reader.open_fd``): what it gives equals the general
path's, anything unusual is refused with the general path's error, and the file it owns is
released once, on close or when the reader is collected."""

from __future__ import annotations

import gc
import os
import struct
import warnings

import numpy as np
import pytest
import xxhash

import tenfold.ztensor as zt
from tenfold.core.bounds import Limits
from tenfold.errors import TenfoldError
from tenfold.ztensor import _dcbor
from tenfold.ztensor._spec import MAGIC_V2 as MAGIC

FOOTER = 40


def _plain(tmp_path, n=5):
    tensors = {f"t{i}": np.arange(6 * (i + 1), dtype=np.float32).reshape(-1, 3) for i in range(n)}
    tensors["t0"] = np.arange(6144, dtype=np.float32).reshape(-1, 3)  # 24 KiB: overlappable
    tensors["t9"] = np.arange(4, dtype=np.int16)
    path = tmp_path / "p.zt"
    zt.save(path, tensors, generation=2)
    return path, tensors


def _footer(buf: bytes) -> tuple[int, int]:
    moff, mlen = struct.unpack_from("<QQ", buf, len(buf) - FOOTER)
    return moff, mlen


def _with_manifest(buf: bytes, manifest: object) -> bytes:
    """``buf`` with its manifest replaced by ``manifest`` (footer and hash made to match)."""
    return _with_raw(buf, _dcbor.encode(manifest))


def _with_raw(buf: bytes, raw: bytes) -> bytes:
    moff, _ = _footer(buf)
    foot = struct.pack("<QQQII", moff, len(raw), xxhash.xxh3_64_intdigest(raw), 2, 0) + MAGIC
    return buf[:moff] + raw + foot


def test_lean_open_builds_no_record_until_asked(tmp_path):
    path, tensors = _plain(tmp_path)
    with zt.open(path) as r:
        assert "_infos" not in r.__dict__ and "_plans" not in r.__dict__
        assert list(r) == sorted(tensors) and len(r) == len(tensors)
        assert "t1" in r and "nope" not in r
        for name, a in tensors.items():
            np.testing.assert_array_equal(r[name], a)
            assert not r[name].flags.writeable
        info = r.info("t2")
        assert info.shape == (6, 3) and info.dtype == "f32"
        assert "_infos" in r.__dict__
        assert [i.name for i in r.infos()] == sorted(tensors)
        with pytest.raises(KeyError, match="nope"):
            r.info("nope")


def test_lean_and_general_paths_agree(tmp_path):
    """Plain objects only, and a file with others (bool, 0-d, attributes): the same records."""
    path, _ = _plain(tmp_path)
    mixed = tmp_path / "m.zt"
    zt.save(
        mixed,
        {"a": np.ones((2, 2), np.float32), "c": np.array([True, False]), "e": np.float64(2.5)},
        generation=2,
    )
    for p in (path, mixed):
        data = p.read_bytes()
        with zt.open(p) as lean, zt.V2Reader(data) as general:
            assert list(lean) == list(general)
            assert lean.manifest_blob == general.manifest_blob
            assert lean.shards == general.shards and lean.metadata == general.metadata
            for name in general:
                assert lean.info(name) == general.info(name)
                np.testing.assert_array_equal(lean[name], general[name])


def _damaged(buf: bytes) -> dict[str, bytes]:
    moff, mlen = _footer(buf)
    end = len(buf)

    def patch(at: int, new: bytes) -> bytes:
        return buf[:at] + new + buf[at + len(new) :]

    manifest = _dcbor.decode(buf[moff : moff + mlen])
    objs = manifest["objects"]
    first, second = sorted(objs)[:2]
    data = objs[first]["parts"]["data"]
    shifted = {
        **objs[first],
        "parts": {"data": {**data, "blob": [data["blob"][0] + 4096, data["blob"][1]]}},
    }
    overlap = {**manifest, "objects": {**objs, second: shifted}}
    raw = buf[moff : moff + mlen]
    return {
        "footer magic": patch(end - 8, b"XXXXXXXX"),
        "version": patch(end - 16, struct.pack("<I", 3)),
        "manifest hash": patch(end - 24, struct.pack("<Q", 1)),
        "manifest offset not aligned": patch(end - 40, struct.pack("<Q", moff + 1)),
        "manifest past the footer": patch(end - 32, struct.pack("<Q", mlen + 1)),
        "manifest length 0": patch(end - 32, struct.pack("<Q", 0)),
        "manifest byte": patch(moff + 3, bytes([buf[moff + 3] ^ 0x01])),
        "overlapping blobs": _with_manifest(buf, overlap),
        "objects not a map": _with_manifest(buf, {"objects": 3}),
        "trailing manifest byte": _with_raw(buf, raw + b"\x00"),
        "truncated": buf[: end - 1],
        "too small": buf[:40],
    }


def test_damaged_files_raise_the_general_paths_errors(tmp_path):
    path, _ = _plain(tmp_path)
    buf = path.read_bytes()
    for case, bad in _damaged(buf).items():
        p = tmp_path / "bad.zt"
        p.write_bytes(bad)
        with pytest.raises(TenfoldError) as general:
            zt.V2Reader(bad)
        with pytest.raises(TenfoldError) as lean:
            zt.open(p)
        assert type(lean.value) is type(general.value), case
        assert str(lean.value) == str(general.value), case


def test_limits_are_applied_on_the_lean_path(tmp_path):
    path, tensors = _plain(tmp_path)
    with pytest.raises(TenfoldError, match="too many objects"):
        zt.open(path, limits=Limits(max_objects=len(tensors) - 1))
    with pytest.raises(TenfoldError, match="manifest_length"):
        zt.open(path, limits=Limits(max_index_bytes=16))
    with pytest.raises(ValueError, match="sparse"):
        zt.open(path, sparse="dense")


def test_options_are_kept(tmp_path):
    path, tensors = _plain(tmp_path)
    with zt.open(path, copy=True, verify_checksums=False, sparse="raw") as r:
        assert (r.copy, r.verify_checksums, r.sparse) == (True, False, "raw")
        a = r["t0"]
        assert a.flags.writeable and a.flags.owndata  # copy=True: owned
        np.testing.assert_array_equal(a, tensors["t0"])
    with zt.open(path) as r:
        assert (r.copy, r.verify_checksums, r.sparse) == (False, True, "auto")


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_close_releases_the_descriptor_once_and_views_survive(tmp_path):
    path, tensors = _plain(tmp_path)
    r = zt.open(path)
    fd = r._mf._fd
    views = [r[n] for n in r]
    assert _fd_open(fd)
    r.close()
    r.close()
    r._mf._release()  # a second release (another thread's close) closes nothing
    assert r.closed and not _fd_open(fd)
    for name, v in zip(sorted(tensors), views, strict=True):
        np.testing.assert_array_equal(v, tensors[name])
    with pytest.raises(ValueError, match="closed"):
        r.stored_bytes()


def test_an_unclosed_lean_reader_warns_and_releases(tmp_path):
    path, _ = _plain(tmp_path)
    r = zt.open(path)
    fd = r._mf._fd
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        del r
        gc.collect()
    assert not _fd_open(fd)
    assert any(
        issubclass(w.category, ResourceWarning) and "unclosed tenfold.ztensor" in str(w.message)
        for w in got
    )


def test_a_manifest_larger_than_the_tail_read(tmp_path):
    """Over 16 KiB of manifest: read with a second ``pread``; the same records."""
    from tenfold.ztensor import v2reader

    tensors = {f"t{i:03d}": np.full(3, i, np.float32) for i in range(400)}
    path = tmp_path / "many.zt"
    zt.save(path, tensors, generation=2)
    moff, mlen = _footer(path.read_bytes())
    assert mlen > v2reader.TAIL_READ
    with zt.open(path) as r, zt.V2Reader(path.read_bytes()) as general:
        assert "_infos" not in r.__dict__ and r.manifest_blob == (moff, mlen)
        assert list(r) == list(general) == sorted(tensors)
        for name in ("t000", "t399"):
            np.testing.assert_array_equal(r[name], tensors[name])
            assert r.info(name) == general.info(name)

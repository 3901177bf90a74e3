"""The v2 reader's fast path (manifest scan with plans, views built on first access) gives
exactly what the general path gives, refuses what it refuses, and fixes what it exposed."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import xxhash

import tenfold.ztensor as zt
from tenfold.errors import FormatError, IntegrityError, UnsupportedError
from tenfold.ztensor import _dcbor, _generations
from tenfold.ztensor._spec import MAGIC_V2 as MAGIC
from tenfold.ztensor._v2spec import ObjectInfo, plan_info


def _v2_file(manifest: dict, blobs: dict[int, bytes]) -> bytes:
    raw = _dcbor.encode(manifest)
    end = max([off + len(b) for off, b in blobs.items()] + [4096])
    moff = -(-end // 4096) * 4096
    buf = bytearray(moff)
    buf[:8] = MAGIC
    for off, b in blobs.items():
        buf[off : off + len(b)] = b
    footer = struct.pack("<QQQII", moff, len(raw), xxhash.xxh3_64_intdigest(raw), 2, 0) + MAGIC
    return bytes(buf) + raw + footer


def _dense(offset: int, shape: list[int], dtype: str = "f32", digest: str | None = None) -> dict:
    n = int(np.prod(shape)) * 4 if dtype == "f32" else int(np.prod(shape))
    part: dict = {"dtype": dtype, "blob": [offset, n]}
    if digest:
        part["digest"] = digest
    return {"shape": shape, "layout": "dense", "parts": {"data": part}}


@pytest.fixture
def mixed(tmp_path):
    """A file with plain dense tensors (planned) and others (bool, attributes)."""
    rng = np.random.default_rng(0)
    tensors = {
        "a": rng.standard_normal((3, 4), dtype=np.float32),
        "b": np.arange(5, dtype=np.int64),
        "c": np.array([True, False, True]),
        "d": np.zeros((0, 3), np.float32),
        "e": np.float64(2.5),
    }
    path = tmp_path / "m.zt"
    zt.save(path, tensors, generation=2)
    return path, tensors


def test_views_equal_the_general_path(mixed):
    path, tensors = mixed
    with zt.open(path) as r:
        assert set(r._plans) == {"a", "b", "d", "e"}  # bool is not a storage type: no plan
        for name, want in tensors.items():
            fast = r[name]
            slow = r.read(name)
            np.testing.assert_array_equal(fast, want)
            np.testing.assert_array_equal(slow, fast)
            assert fast.dtype == slow.dtype and fast.shape == slow.shape == np.shape(want)
            if name in r._plans and fast.size:
                assert not fast.flags.writeable
                assert np.shares_memory(fast, r.stored_bytes())
            info = r.info(name)
            assert isinstance(info, ObjectInfo) and info is r.info(name)
            if name in r._plans:
                assert info == plan_info(name, r._plans[name])
        assert list(r) == sorted(tensors) and len(r) == 5 and "a" in r and "z" not in r
        copied = zt.V2Reader(path, copy=True)
        with copied:
            assert copied["a"].flags.writeable
    with pytest.raises(ValueError, match="closed"):
        r["a"]


def test_first_access_checks_the_digest(mixed):
    path, _ = mixed
    data = bytearray(path.read_bytes())
    with zt.open(bytes(data)) as r:
        off = r.info("a").offset
        assert r._plans["a"][5].startswith("xxh3:")
    data[off] ^= 0x40
    with zt.open(bytes(data)) as r:
        with pytest.raises(IntegrityError, match=r"'a'.*xxh3 digest mismatch"):
            r["a"]
        with pytest.raises(IntegrityError):
            r["a"]  # not marked as checked by the failure
        r["b"]
    with zt.open(bytes(data), verify_checksums=False) as r:
        assert r["a"].shape == (3, 4)
    with zt.open(path) as r:
        r["a"]
        assert ("a", "data") in r._verified
        assert np.shares_memory(r["a"], r.stored_bytes())


def test_overlapping_plain_blobs_are_refused():
    blob = np.arange(2048, dtype=np.float32).tobytes()
    man = {"objects": {"a": _dense(4096, [2048]), "b": _dense(8192, [2])}}
    data = _v2_file(man, {4096: blob})
    with pytest.raises(FormatError, match=r"object 'b' part 'data'.*partly overlaps.*blob-overlap"):
        zt.open(data)
    # identical blobs are allowed (deduplicated parts)
    man = {"objects": {"a": _dense(4096, [6]), "b": _dense(4096, [6])}}
    with zt.open(_v2_file(man, {4096: blob[:24]})) as r:
        np.testing.assert_array_equal(r["a"], r["b"])
    # a plain blob that runs into the manifest
    raw = _dcbor.encode({"objects": {"a": _dense(4096, [1026])}})
    buf = bytearray(8192)
    buf[:8] = MAGIC
    footer = struct.pack("<QQQII", 8192, len(raw), xxhash.xxh3_64_intdigest(raw), 2, 0) + MAGIC
    with pytest.raises(
        FormatError, match=r"the manifest.*partly overlaps object 'a'.*blob-overlap"
    ):
        zt.open(bytes(buf) + raw + footer)


def test_unhashable_dtype_is_a_schema_error():
    """A list where the storage type goes raised TypeError (unhashable) before the fix."""
    man = {"objects": {"a": _dense(4096, [2])}}
    man["objects"]["a"]["parts"]["data"]["dtype"] = ["f32"]
    with pytest.raises(FormatError, match=r"dtype.*unknown storage type.*\[schema\]"):
        zt.open(_v2_file(man, {4096: bytes(8)}))
    man["objects"]["a"]["parts"]["data"]["dtype"] = {"f32": 1}
    with pytest.raises(FormatError, match=r"\[schema\]"):
        zt.open(_v2_file(man, {4096: bytes(8)}))


def test_manifest_root_is_decoded_on_demand(mixed):
    path, _ = mixed
    with zt.V2Reader(path) as r:
        root = r._root
        assert set(root["objects"]) == {"a", "b", "c", "d", "e"}
        assert root["objects"]["a"]["parts"]["data"]["blob"] == [r.info("a").offset, 48]


def test_non_map_root_and_missing_objects_are_schema_errors():
    for man, msg in [([1, 2], "root is not a map"), ({"x": 1}, "objects.*missing")]:
        raw = _dcbor.encode(man)
        buf = bytearray(4096)
        buf[:8] = MAGIC
        footer = struct.pack("<QQQII", 4096, len(raw), xxhash.xxh3_64_intdigest(raw), 2, 0)
        with pytest.raises(FormatError, match=msg):
            zt.open(bytes(buf) + raw + footer + MAGIC)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_open_and_detect_refuse_a_fifo_without_blocking(tmp_path):
    """zt.open / zt.detect read the magic with open(), which blocks on a FIFO with no writer;
    they now refuse it at once."""
    fifo = tmp_path / "pipe.zt"
    os.mkfifo(fifo)
    code = (
        "import sys, tenfold.ztensor as zt\n"
        "from tenfold.errors import UnsupportedError\n"
        "for f in (zt.open, zt.detect, zt.verify):\n"
        "    try:\n"
        "        f(sys.argv[1])\n"
        "    except UnsupportedError as e:\n"
        "        print('refused', 'FIFO' in str(e))\n"
    )
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", code, str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.stdout.split("\n")[:2] == ["refused True", "refused True"], out.stderr
    assert UnsupportedError  # the class the child checks


def test_pread_small_reads_see_a_shrunk_file(tmp_path):
    """MappedFile.bytes reads small ranges with pread: a file truncated under an open reader
    gives TruncatedError there, not a SIGBUS from the map."""
    from tenfold.core.mapped import MappedFile
    from tenfold.errors import TruncatedError

    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 64)
    mf = MappedFile(path)
    assert mf.bytes(10, 4) == bytes([10, 11, 12, 13])
    os.truncate(path, 100)
    with pytest.raises(TruncatedError, match="shrank"):
        mf.bytes(90, 20)
    mf.close()
    with pytest.raises(ValueError, match="closed"):
        mf.bytes(0, 4)


def test_append_syncs_data_twice(tmp_path, monkeypatch):
    """fsync=True: the blobs and manifest are made durable before the footer switch, then the
    footer; both with fdatasync (no journal commit for a timestamp alone) where it exists."""
    path = tmp_path / "a.zt"
    zt.save(path, {"w": np.arange(4, dtype=np.float32)}, generation=2)
    calls: list[str] = []
    real = getattr(os, "fdatasync", os.fsync)
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append("fdatasync"), real(fd))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real(fd))[1])
    zt.append(path, {"x": np.ones(3, np.int8)})
    assert calls == ["fdatasync", "fdatasync"]
    calls.clear()
    zt.append(path, {"y": np.ones(3, np.int8)}, fsync=False)
    assert calls == []
    with zt.open(path) as r:
        assert sorted(r) == ["w", "x", "y"] and r["x"].tolist() == [1, 1, 1]


def test_open_maps_a_v2_path_with_one_open(mixed, monkeypatch):
    """zt.open of a v2 path opens the file once (for the magic and the map; before: twice)
    and its views outlive the reader; other generations and damaged heads take the general
    path, which names the problem."""
    path, tensors = mixed
    opened = []
    inside = []  # the fmap kernel's open_ends opens in C (its twin with os.open): counted once
    real_open, real_ends = os.open, _generations._open_ends

    def counting_open(p, *a, **k):
        if not inside:
            opened.append(os.fspath(p))
        return real_open(p, *a, **k)

    def counting_ends(p, *a, **k):
        opened.append(os.fspath(p))
        inside.append(1)
        try:
            return real_ends(p, *a, **k)
        finally:
            inside.pop()

    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(_generations, "_open_ends", counting_ends)
    with zt.open(path, verify_checksums=False) as r:
        views = {n: r[n] for n in r}
    assert opened == [str(path)]
    for name, want in tensors.items():
        np.testing.assert_array_equal(views[name], want)  # after close: still mapped
    # every generation, and a damaged head: opened once too (before: two or three times)
    bad = path.with_name("bad.zt")
    data = bytearray(path.read_bytes())
    data[1] ^= 0xFF  # head magic damaged: the tail magic still picks the v2 reader
    bad.write_bytes(bytes(data))
    opened.clear()
    with pytest.raises(FormatError, match="header-magic"):
        zt.open(bad)
    assert opened == [str(bad)]
    v010 = path.with_name("old.zt")
    zt.save(v010, {"x": np.arange(3)})
    opened.clear()
    with zt.open(v010) as r:
        np.testing.assert_array_equal(r["x"], np.arange(3))
        assert type(r).__name__ == "Reader" and r.path == str(v010)
    assert opened == [str(v010)]
    junk = path.with_name("junk.zt")
    junk.write_bytes(b"not a zTensor file at all")
    opened.clear()
    with pytest.raises(FormatError, match="magic"):
        zt.open(junk)
    assert opened == [str(junk)]
    monkeypatch.setattr(os, "open", real_open)
    fds = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()
    for p in (bad, junk):
        with pytest.raises(FormatError):
            zt.open(p)
    if fds:
        assert set(os.listdir("/proc/self/fd")) == fds  # nothing left open by the failures


def test_mapped_file_adopts_a_descriptor_and_head(tmp_path):
    from tenfold.core.mapped import MappedFile

    p = tmp_path / "f.bin"
    p.write_bytes(b"ABCDEFGH" + bytes(100))
    fd = os.open(p, os.O_RDONLY)
    mf = MappedFile(p, fd=fd, size=108, head=b"ABCDEFGH")
    assert mf.size == 108 and mf.magic(b"12345678") == b"ABCDEFGH"
    assert mf.bytes(0, 3) == b"ABC"
    mf.close()
    with pytest.raises(OSError):
        os.fstat(fd)  # the file owned the descriptor and closed it
    with pytest.raises(ValueError, match="closed"):
        mf.magic(b"12345678")

"""Core helpers on their own: mapped files, atomic writes, bounds, records, zstd, progress."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tenfold.ztensor  # noqa: F401  (registers the "zt" dtype names)
from tenfold.core import (
    Limits,
    MappedFile,
    atomic_write,
    checked_numel,
    progress,
    record,
    zstd_compress,
    zstd_decompress,
    zstd_decompress_into,
)
from tenfold.core.checksums import CRC32C_CHECK, crc32c, sha256_hex, xxh64
from tenfold.core.dtypes import BFLOAT16, canonical, registry
from tenfold.errors import (
    EncodeError,
    FormatError,
    IntegrityError,
    LimitError,
    TruncatedError,
    UnsupportedError,
)


def test_mapped_file_views_outlive_close(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(np.arange(16, dtype="<u4").tobytes())
    m = MappedFile(p, fmt="t")
    v = m.array(4, "<u4", (3,))
    m.close()
    assert v.tolist() == [1, 2, 3] and not v.flags.writeable
    with pytest.raises(ValueError, match="closed"):
        m.u8(0, 1)


def test_mapped_file_bounds_and_unaligned(tmp_path):
    m = MappedFile(bytes(range(10)), fmt="t")
    assert m.array(1, "<u2", (2,)).tolist() == [0x0201, 0x0403]
    with pytest.raises(TruncatedError, match=r"t: blob at offset 0x8: ends past end of file"):
        m.u8(8, 3, "blob")
    with pytest.raises(FormatError, match="negative"):
        m.u8(-1, 2)
    assert m.array(10, "<f8", (0, 3)).shape == (0, 3)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert MappedFile(empty).size == 0


def test_records_are_explicit():
    rec = record("r", [("a", "<u2"), ("b", ">u4"), ("c", "S3", 8)], 12)
    assert rec.itemsize == 12 and rec.fields["c"][1] == 8
    with pytest.raises(AssertionError, match="byte order"):
        record("r", [("a", "u4")], 4)
    with pytest.raises(AssertionError, match="past itemsize"):
        record("r", [("a", "<u8")], 4)


def test_atomic_write_keeps_previous_file(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"old")
    os.chmod(p, 0o640)
    with pytest.raises(RuntimeError), atomic_write(p) as f:
        f.write(b"new, partial")
        raise RuntimeError("fail mid-way")
    assert p.read_bytes() == b"old" and os.listdir(tmp_path) == ["a.txt"]
    with atomic_write(p) as f:
        f.write(b"new")
    assert p.read_bytes() == b"new" and (os.stat(p).st_mode & 0o777) == 0o640


def test_bounds():
    assert checked_numel("t", "x", [0, 2**40]) == 0
    with pytest.raises(LimitError):
        checked_numel("t", "x", [1] * 5, Limits(max_ndim=4))


def test_checksums_known_answers():
    assert crc32c(b"123456789") == CRC32C_CHECK
    assert crc32c(b"56789", crc32c(b"1234")) == CRC32C_CHECK
    assert crc32c(np.frombuffer(b"123456789", np.uint8)) == CRC32C_CHECK
    assert sha256_hex(b"abc").startswith("ba7816bf")
    assert xxh64(b"a") == 0xD24EC4F1A98C6E5B
    assert crc32c(np.ones(4, BFLOAT16)) == crc32c(np.ones(4, BFLOAT16).view(np.uint8).tobytes())


def test_zstd_bounded():
    data = np.arange(1000, dtype=np.int32)
    frame = zstd_compress(data)
    out = np.empty(4000, np.uint8)
    zstd_decompress_into(frame, out)
    assert out.view(np.int32).tolist() == data.tolist()
    with pytest.raises(IntegrityError, match="content size mismatch"):
        zstd_decompress_into(frame, np.empty(3999, np.uint8))
    with pytest.raises(LimitError):
        zstd_decompress(frame, 4000, limit=100)
    with pytest.raises(FormatError, match="not a zstd frame"):
        zstd_decompress_into(b"abcd", out)
    ro = np.empty(4000, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        zstd_decompress_into(frame, ro)


def test_dtype_registry():
    assert canonical(np.dtype(">i2")) == "int16"
    assert registry.to_numpy("zt", "bfloat16") == BFLOAT16
    with pytest.raises(UnsupportedError, match="dtype: unknown"):
        registry.to_numpy("zt", "float8")
    with pytest.raises(EncodeError):
        registry.to_tag("zt", np.complex64)
    with pytest.raises(EncodeError):
        registry.to_tag("zt", "not a dtype at all")


def test_progress_is_quiet_unless_asked(capsys, monkeypatch):
    assert list(progress(range(3))) == [0, 1, 2]
    assert capsys.readouterr().err == ""
    monkeypatch.setitem(__import__("sys").modules, "tqdm", None)  # force the built-in bar
    assert list(progress(range(3), total=3, desc="x", show=True)) == [0, 1, 2]
    assert "done" in capsys.readouterr().err


def test_preallocate_keeps_size(tmp_path):
    from tenfold.core.prealloc import preallocate

    p = tmp_path / "p.bin"
    with open(p, "wb") as f:
        f.write(b"abc")
        f.flush()
        assert preallocate(f.fileno(), 3, 100) is False  # below the threshold: skipped
        preallocate(f.fileno(), 3, 8 << 20)  # True on ext4/xfs/tmpfs, False elsewhere
    assert p.read_bytes() == b"abc"


def _tmpfs_dir() -> str | None:
    import subprocess

    if not os.path.isdir("/dev/shm"):
        return None
    got = subprocess.run(["stat", "-f", "-c", "%T", "/dev/shm"], capture_output=True, text=True)
    return "/dev/shm" if got.stdout.strip() == "tmpfs" else None


def test_preallocate_skips_tmpfs():
    # On tmpfs fallocate zeroes every page the write then fills again: never worth it there.
    import tempfile

    from tenfold.core.prealloc import preallocate

    where = _tmpfs_dir()
    if where is None:
        pytest.skip("no tmpfs at /dev/shm")
    with tempfile.NamedTemporaryFile(dir=where) as f:
        assert preallocate(f.fileno(), 0, 8 << 20) is False
        assert os.fstat(f.fileno()).st_blocks == 0  # not one page taken


def test_start_writeback_is_a_hint(tmp_path):
    import sys

    from tenfold.core.prealloc import start_writeback

    data = bytes(range(256)) * (8 << 12)  # 8 MiB
    p = tmp_path / "w.bin"
    with open(p, "wb") as f:
        f.write(data)
        f.flush()
        assert start_writeback(f.fileno(), 0, 100) is False  # below the threshold: skipped
        ok = start_writeback(f.fileno(), 0, len(data))
        assert ok is sys.platform.startswith("linux")
    assert p.read_bytes() == data

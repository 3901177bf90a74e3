"""fmap: open a file and read both ends in one call; map it read-only in one system call."""

from __future__ import annotations

import os
import pathlib
import threading

import numpy as np
import pytest
from _kernels_isolated import differential
from hypothesis import given, settings
from hypothesis import strategies as st

MAGIC = b"\x89ZT2\r\n\x1a\n"


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


def _write(path: pathlib.Path, data: bytes) -> pathlib.Path:
    path.write_bytes(data)
    return path


def _ends(k, path, magic=MAGIC, tail=16):
    """open_ends, its descriptor closed: ``(size, last, the descriptor's target)``."""
    got = k.open_ends(path, magic, tail)
    if got is None:
        return None
    fd, size, last = got
    try:
        assert os.fstat(fd).st_size == size
        target = os.readlink(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else ""
    finally:
        os.close(fd)
    return size, last, target


def test_open_ends_reads_both_ends(kernels, tmp_path):
    k = kernels("fmap")
    data = MAGIC + bytes(range(256)) * 4
    p = _write(tmp_path / "a.bin", data)
    before = _fds()
    assert _ends(k, p, tail=16) == (len(data), data[-16:], str(p))
    assert _ends(k, str(p), tail=len(data) + 100) == (len(data), data, str(p))  # all of it
    assert _ends(k, os.fsencode(p), tail=0) == (len(data), b"", str(p))
    assert _ends(k, p, magic=b"", tail=3) == (len(data), data[-3:], str(p))  # no magic to check
    # the buffer is the size of what is read, not of the tail asked for
    assert _ends(k, p, tail=1 << 50) == (len(data), data, str(p))
    assert _fds() == before


def test_open_ends_declines_without_leaking(kernels, tmp_path):
    k = kernels("fmap")
    p = _write(tmp_path / "a.bin", b"ZTEN0001" + bytes(100))
    short = _write(tmp_path / "s.bin", MAGIC[:5])
    empty = _write(tmp_path / "e.bin", b"")
    before = _fds()
    assert k.open_ends(p, MAGIC, 16) is None  # another magic
    assert k.open_ends(short, MAGIC, 16) is None  # shorter than the magic
    assert k.open_ends(empty, MAGIC, 16) is None
    assert k.open_ends(tmp_path, MAGIC, 16) is None  # a directory
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # a FIFO with no writer: declined at once, not waited for
    done = []
    t = threading.Thread(target=lambda: done.append(k.open_ends(fifo, MAGIC, 16)))
    t.start()
    t.join(10)
    if t.is_alive():  # unblock the thread before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join()
        pytest.fail("open_ends waited on a FIFO")
    assert done == [None]
    assert _fds() == before


def test_open_ends_errors(kernels, tmp_path):
    k = kernels("fmap")
    missing = tmp_path / "nope.zt"
    with pytest.raises(FileNotFoundError) as info:
        k.open_ends(missing, MAGIC, 16)
    assert info.value.filename == str(missing)
    p = _write(tmp_path / "a.bin", MAGIC)
    locked = _write(tmp_path / "locked.bin", MAGIC)
    locked.chmod(0)
    if os.geteuid() != 0:  # root reads it anyway
        with pytest.raises(PermissionError):
            k.open_ends(locked, MAGIC, 16)
    with pytest.raises(ValueError):
        k.open_ends(str(p) + "\0x", MAGIC, 16)
    with pytest.raises(ValueError):
        k.open_ends(p, MAGIC, -1)
    with pytest.raises(ValueError):
        k.open_ends(p, b"x" * 65, 16)
    with pytest.raises(TypeError):
        k.open_ends(p, "magic", 16)
    with pytest.raises(TypeError):
        k.open_ends(3.5, MAGIC, 16)


def test_map_fd_maps_read_only(kernels, tmp_path):
    k = kernels("fmap")
    data = bytes(range(256)) * 64
    p = _write(tmp_path / "a.bin", data)
    fd = os.open(p, os.O_RDONLY)
    try:
        m = k.map_fd(fd, len(data))
    finally:
        os.close(fd)  # the map does not need it
    assert len(m) == len(data)
    arr = np.frombuffer(m, np.uint8)
    assert arr.tobytes() == data
    assert not arr.flags.writeable
    with pytest.raises((TypeError, BufferError)):
        memoryview(m).cast("B")[0] = 1  # read-only
    del m  # the array keeps the mapping alive
    assert arr[-1] == 255 and arr.sum() == sum(data)
    part = k.map_fd(os.open(p, os.O_RDONLY | os.O_CLOEXEC), 10)  # a prefix
    assert bytes(part) == data[:10]


def test_map_fd_errors(kernels, tmp_path):
    k = kernels("fmap")
    p = _write(tmp_path / "a.bin", b"abc")
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(ValueError):
            k.map_fd(fd, 0)
        with pytest.raises(ValueError):
            k.map_fd(fd, -1)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        k.map_fd(fd, 3)  # closed


@settings(max_examples=60, deadline=None)
@given(
    st.binary(max_size=200),
    st.sampled_from([b"", MAGIC, MAGIC[:3], b"ZT"]),
    st.integers(0, 300),
)
def test_open_ends_differential(tmp_path_factory, data, magic, tail):
    """Random files, magics and tail lengths: compiled and reference give the same bytes."""
    p = tmp_path_factory.mktemp("fmap") / "f.bin"
    p.write_bytes(data)
    got = differential("fmap", lambda k: _ends(k, p, magic=magic, tail=tail))
    want_ok = data.startswith(magic)
    assert got == (
        (len(data), data[len(data) - min(len(data), tail) :], str(p)) if want_ok else None
    )
    if data:
        fd = os.open(p, os.O_RDONLY)
        try:
            assert differential("fmap", lambda k: bytes(k.map_fd(fd, len(data)))) == data
        finally:
            os.close(fd)

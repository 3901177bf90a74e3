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


def _ends(k, path, head=8, tail=16):
    """open_ends, its descriptor closed: ``(size, first, last, the descriptor's target)``."""
    got = k.open_ends(path, head, tail)
    if got is None:
        return None
    fd, size, first, last = got
    try:
        assert os.fstat(fd).st_size == size
        target = os.readlink(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else ""
    finally:
        os.close(fd)
    return size, first, last, target


def test_open_ends_reads_both_ends(kernels, tmp_path):
    k = kernels("fmap")
    data = MAGIC + bytes(range(256)) * 4
    n = len(data)
    p = _write(tmp_path / "a.bin", data)
    before = _fds()
    assert _ends(k, p, 8, 16) == (n, MAGIC, data[-16:], str(p))
    assert _ends(k, str(p), 3, n + 100) == (n, MAGIC[:3], data, str(p))  # all of it
    assert _ends(k, os.fsencode(p), 0, 0) == (n, b"", b"", str(p))
    # the buffers are the size of what is read, not of what is asked for
    assert _ends(k, p, 1 << 50, 1 << 50) == (n, data, data, str(p))
    other = _write(tmp_path / "o.bin", b"ZTEN0001" + bytes(100))
    assert _ends(k, other, 8, 4)[1:3] == (b"ZTEN0001", bytes(4))  # any head: the caller decides
    short = _write(tmp_path / "s.bin", MAGIC[:5])
    assert _ends(k, short, 8, 16)[:3] == (5, MAGIC[:5], MAGIC[:5])
    empty = _write(tmp_path / "e.bin", b"")
    assert _ends(k, empty, 8, 16)[:3] == (0, b"", b"")
    assert _fds() == before


def test_open_ends_declines_what_is_not_a_file(kernels, tmp_path):
    k = kernels("fmap")
    before = _fds()
    assert k.open_ends(tmp_path, 8, 16) is None  # a directory
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # a FIFO with no writer: declined at once, not waited for
    done = []
    t = threading.Thread(target=lambda: done.append(k.open_ends(fifo, 8, 16)))
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
        k.open_ends(missing, 8, 16)
    assert info.value.filename == str(missing)
    p = _write(tmp_path / "a.bin", MAGIC)
    locked = _write(tmp_path / "locked.bin", MAGIC)
    locked.chmod(0)
    if os.geteuid() != 0:  # root reads it anyway
        with pytest.raises(PermissionError):
            k.open_ends(locked, 8, 16)
    with pytest.raises(ValueError):
        k.open_ends(str(p) + "\0x", 8, 16)
    with pytest.raises(ValueError):
        k.open_ends(p, 8, -1)
    with pytest.raises(ValueError):
        k.open_ends(p, -1, 8)
    with pytest.raises(TypeError):
        k.open_ends(p, "8", 16)
    with pytest.raises(TypeError):
        k.open_ends(3.5, 8, 16)


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
@given(st.binary(max_size=200), st.integers(0, 300), st.integers(0, 300))
def test_open_ends_differential(tmp_path_factory, data, head, tail):
    """Random files and head and tail lengths: compiled and reference give the same bytes."""
    p = tmp_path_factory.mktemp("fmap") / "f.bin"
    p.write_bytes(data)
    got = differential("fmap", lambda k: _ends(k, p, head, tail))
    n = len(data)
    assert got == (n, data[: min(n, head)], data[n - min(n, tail) :], str(p))
    if data:
        fd = os.open(p, os.O_RDONLY)
        try:
            assert differential("fmap", lambda k: bytes(k.map_fd(fd, len(data)))) == data
        finally:
            os.close(fd)

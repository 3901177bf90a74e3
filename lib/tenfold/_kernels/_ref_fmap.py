"""Reference twin of the ``fmap`` kernel: the same contract with :mod:`os` and :mod:`mmap`."""

from __future__ import annotations

import mmap
import os
import stat
from typing import Any

__all__ = ["open_ends", "map_fd"]

_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def _pread_full(fd: int, n: int, at: int) -> bytes:
    """``n`` bytes at ``at`` (fewer only at end of file)."""
    parts = []
    while n > 0:
        got = os.pread(fd, n, at)
        if not got:
            break
        parts.append(got)
        n -= len(got)
        at += len(got)
    return b"".join(parts)


def open_ends(path: Any, head: int, tail: int) -> tuple[int, int, bytes, bytes] | None:
    """``(fd, size, first, last)`` of a regular file (its first ``min(size, head)`` and last
    ``min(size, tail)`` bytes), or ``None`` with nothing left open (see the kernel)."""
    if head < 0 or tail < 0:
        raise ValueError(f"head and tail must be >= 0, got {head} and {tail}")
    fd = os.open(path, _FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None
        first = _pread_full(fd, min(st.st_size, head), 0)
        n = min(st.st_size, tail)
        last = _pread_full(fd, n, st.st_size - n)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size, first, last


def map_fd(fd: int, size: int) -> mmap.mmap:
    """The first ``size`` (> 0) bytes of the file open on ``fd``, mapped read-only."""
    if size <= 0:
        raise ValueError(f"size must be > 0, got {size}")
    return mmap.mmap(fd, size, access=mmap.ACCESS_READ)


#: what :func:`map_fd` gives here (the kernel's ``Map`` is the same bytes without ``close``)
Map = mmap.mmap

"""Best-effort preallocation of file space before a large write.

Telling the file system how much is coming (Linux ``fallocate`` with ``FALLOC_FL_KEEP_SIZE``,
what NumPy's ``tofile`` does) lets it allocate extents once instead of during delayed
allocation; on ext4 a 1 GiB write gets about 10 % faster. Where the call is not available or
not supported nothing happens: it never emulates by writing zeros (glibc's ``posix_fallocate``
would). On tmpfs (``/dev/shm``) it is skipped too: there ``fallocate`` allocates and zeroes every
page, which the write then fills again (1 GiB: 0.24 s of a 0.56 s save), and there are no
extents to lay out.

:func:`start_writeback` (Linux ``sync_file_range`` with ``SYNC_FILE_RANGE_WRITE``) asks the
kernel to start writing a range that was just written, without waiting: a writer that fsyncs
at the end lets the disk work while it is still computing (checksums) or writing the rest, so
the final fsync waits for less.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["preallocate", "start_writeback", "WRITEBACK_STEP"]

_FALLOC_FL_KEEP_SIZE = 1
_MIN_BYTES = 1 << 20

_SYNC_FILE_RANGE_WRITE = 2

#: a writer that will fsync hands what it wrote to the disk in steps of at least this many bytes
WRITEBACK_STEP = 32 << 20

#: ``statfs.f_type`` of tmpfs (linux/magic.h)
_TMPFS_MAGIC = 0x01021994

#: ``(fallocate, sync_file_range, fstatfs)`` from the C library, each None where missing;
#: looked up on first use (ctypes costs milliseconds to import, and a reader never needs it)
_calls: tuple[Any, Any, Any] | None = None


def _libc_calls() -> tuple[Any, Any, Any]:
    global _calls
    if _calls is None:
        fallocate = sync_file_range = fstatfs = None
        if sys.platform.startswith("linux"):
            import ctypes

            try:
                libc = ctypes.CDLL(None, use_errno=True)  # the process's own C library
                fallocate = libc.fallocate
                fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
                fallocate.restype = ctypes.c_int
                sync_file_range = libc.sync_file_range
                sync_file_range.argtypes = [
                    ctypes.c_int,
                    ctypes.c_int64,
                    ctypes.c_int64,
                    ctypes.c_uint,
                ]
                sync_file_range.restype = ctypes.c_int
                fstatfs = libc.fstatfs
                fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
                fstatfs.restype = ctypes.c_int
            except (OSError, AttributeError):
                fallocate = sync_file_range = fstatfs = None
        _calls = (fallocate, sync_file_range, fstatfs)
    return _calls


def _on_tmpfs(fstatfs: Any, fd: int) -> bool:
    """True when ``fd`` is a file on tmpfs (``f_type``, a C ``long``, opens ``struct statfs``)."""
    import ctypes

    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if fstatfs(fd, buf) != 0:
        return False
    return ctypes.c_long.from_buffer(buf).value == _TMPFS_MAGIC


def preallocate(fd: int, offset: int, length: int) -> bool:
    """Reserve ``[offset, offset + length)`` of the file ``fd`` without changing its size.

    Returns True when the file system accepted it. Small requests, and files on tmpfs, are
    skipped.
    """
    if length < _MIN_BYTES:
        return False
    fallocate, _, fstatfs = _libc_calls()
    if fallocate is None or (fstatfs is not None and _on_tmpfs(fstatfs, fd)):
        return False
    return fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0


def start_writeback(fd: int, offset: int, length: int) -> bool:
    """Start (do not wait for) writeback of ``[offset, offset + length)`` of ``fd``.

    Only a hint for writers that will fsync anyway; it guarantees no durability by itself.
    Returns True when the kernel accepted it. Small requests are skipped.
    """
    if length < _MIN_BYTES:
        return False
    sync_file_range = _libc_calls()[1]
    if sync_file_range is None:
        return False
    return sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE) == 0

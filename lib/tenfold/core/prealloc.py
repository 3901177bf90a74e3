"""Best-effort preallocation of file space before a large write.

Telling the file system how much is coming (Linux ``fallocate`` with ``FALLOC_FL_KEEP_SIZE``,
what NumPy's ``tofile`` does) lets it allocate extents once instead of during delayed
allocation; on ext4 a 1 GiB write gets about 10 % faster. Where the call is not available or
not supported nothing happens: it never emulates by writing zeros (glibc's ``posix_fallocate``
would).

:func:`start_writeback` (Linux ``sync_file_range`` with ``SYNC_FILE_RANGE_WRITE``) asks the
kernel to start writing a range that was just written, without waiting: a writer that fsyncs
at the end lets the disk work while it is still computing (checksums) or writing the rest, so
the final fsync waits for less.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["preallocate", "start_writeback"]

_FALLOC_FL_KEEP_SIZE = 1
_MIN_BYTES = 1 << 20

_SYNC_FILE_RANGE_WRITE = 2

_fallocate = None
_sync_file_range = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _fallocate = _libc.fallocate
        _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        _fallocate.restype = ctypes.c_int
        _sync_file_range = _libc.sync_file_range
        _sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        _sync_file_range.restype = ctypes.c_int
    except (OSError, AttributeError):
        _fallocate = _sync_file_range = None


def preallocate(fd: int, offset: int, length: int) -> bool:
    """Reserve ``[offset, offset + length)`` of the file ``fd`` without changing its size.

    Returns True when the file system accepted it. Small requests are skipped.
    """
    if _fallocate is None or length < _MIN_BYTES:
        return False
    return _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0


def start_writeback(fd: int, offset: int, length: int) -> bool:
    """Start (do not wait for) writeback of ``[offset, offset + length)`` of ``fd``.

    Only a hint for writers that will fsync anyway; it guarantees no durability by itself.
    Returns True when the kernel accepted it. Small requests are skipped.
    """
    if _sync_file_range is None or length < _MIN_BYTES:
        return False
    return _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE) == 0

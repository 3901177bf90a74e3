"""Give back the memory of a zero-copy view once its bytes have been written.

A tensor read from a memory-mapped file is a view of the mapping: touching it makes its
pages resident in this process, and they stay counted in its RSS until the mapping closes.
``release(view)`` tells the kernel (``madvise(MADV_DONTNEED)``) that this process no longer
needs the whole pages the view covers; for a read-only shared file mapping the data stays in
the page cache and a later access simply faults it in again, so this is safe and only lowers
the peak memory of a conversion to about one tensor. Only views of read-only mappings
(``mmap.ACCESS_READ``, or the ``fmap`` kernel's ``Map``, never writable) are released: pages
of a private or writable mapping may hold changes. Owned arrays and non-Linux systems are left
alone (best effort, never an error).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys
from typing import Any

import numpy as np

__all__ = ["release"]

_MADV_DONTNEED = 4
_libc: Any = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError):  # pragma: no cover
        _libc = None


def _mapped_base(a: np.ndarray) -> bool:
    base: Any = a
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer(mmap) keeps a memoryview of it
        base = base.obj
    kernel_map = _kernel_map()
    if kernel_map is not mmap.mmap and isinstance(base, kernel_map):
        return True  # the compiled fmap kernel's Map: always read-only and shared
    if not isinstance(base, mmap.mmap):
        return False
    # Only a read-only mapping (ACCESS_READ: shared, PROT_READ): dropping pages of a private
    # (copy-on-write) or writable mapping could throw away changes.
    try:
        with memoryview(base) as mv:
            return mv.readonly
    except (ValueError, TypeError):  # closed
        return False


def _kernel_map() -> type:
    """The type of the ``fmap`` kernel's whole-file maps (what :class:`MappedFile` and the
    zTensor v2 reader map files with); ``mmap.mmap`` itself in the reference twin."""
    from .. import _kernels

    return _kernels.load("fmap").Map  # type: ignore[no-any-return]


def release(value: Any) -> None:
    """Drop the resident pages under ``value`` if it is a read-only view of a file mapping."""
    if _libc is None or not isinstance(value, np.ndarray) or value.nbytes < mmap.PAGESIZE:
        return
    if value.flags.writeable or not value.flags.c_contiguous or not _mapped_base(value):
        return
    start = value.ctypes.data
    end = start + value.nbytes
    page = mmap.PAGESIZE
    lo = (start + page - 1) // page * page  # whole pages only: neighbours keep theirs
    hi = end // page * page
    if hi > lo:
        _libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_DONTNEED)

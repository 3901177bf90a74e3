"""Read-only memory-mapped files with bounds-checked, zero-copy views.

:class:`MappedFile` is what every reader holds. It maps the whole file read-only and hands out
NumPy views that are checked against the file size first. Views are read-only, may sit at any
(unaligned) offset, and keep the mapping alive: calling :meth:`MappedFile.close` while views
still exist detaches the reader from the mapping, and the mapping itself is released by the
operating system when the last view is garbage-collected (the behaviour of :class:`numpy.memmap`).
Any further access *through the reader* raises :class:`ValueError`.
"""

from __future__ import annotations

import os
import stat
import weakref
from functools import partial
from typing import Any

import numpy as np

from .. import _kernels
from ..errors import FormatError, TruncatedError, UnsupportedError, describe
from .bounds import MAX_ARRAY_BYTES, checked_numel

__all__ = ["MappedFile", "open_regular"]

_PREAD_MAX = 1 << 30
_Bytes = bytes  # the class below has a method named bytes
_SMALL_READ = 1 << 16
_U8 = np.dtype(np.uint8)
#: a whole file mapped read-only in one system call (``fmap.map_fd``)
_map_fd = _kernels.load("fmap").map_fd

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def open_regular(path: str | os.PathLike[str], *, fmt: str = "tenfold", write: bool = False) -> int:
    """Open ``path`` read-only (``write=True``: read-write) and return the descriptor, refusing
    anything but a regular file.

    The open itself never blocks: it uses ``O_NONBLOCK`` (opening a FIFO with no writer would
    otherwise wait forever), then ``fstat`` decides, on the descriptor actually opened. A FIFO,
    socket, device or directory raises :class:`~tenfold.errors.UnsupportedError`; for a
    regular file the flag is cleared again.
    """
    name = os.fspath(path)
    flags = (os.O_RDWR if write else os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NONBLOCK", 0)
    fd = os.open(name, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((k for test, k in _KINDS if test(mode)), f"mode {stat.filemode(mode)}")
            raise UnsupportedError(
                describe(
                    fmt,
                    repr(name),
                    detail="not a regular file",
                    expected="a regular file",
                    got=kind,
                )
            )
        if flags & getattr(os, "O_NONBLOCK", 0):
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


class MappedFile:
    """A file (or an in-memory buffer) mapped read-only.

    Parameters
    ----------
    source
        A path, or any object exporting the buffer protocol (``bytes``, ``bytearray``,
        ``memoryview``, NumPy array); a buffer is used in place, never copied.
    fmt
        Short format name used in error messages.
    fd, size, head
        For a path already opened: its read-only descriptor (of a regular file, as
        :func:`open_regular` checks) to map instead of opening the path again (the file then
        owns it), the file's size from ``fstat``, and bytes already read from offset 0
        (:meth:`magic` returns them instead of reading again).

    Examples
    --------
    >>> m = MappedFile(b"\\x01\\x02\\x03\\x04", fmt="demo")
    >>> m.array(0, "<u2", (2,)).tolist()
    [513, 1027]
    >>> m.close()
    """

    def __init__(
        self,
        source: Any,
        *,
        fmt: str = "tenfold",
        fd: int | None = None,
        size: int | None = None,
        head: bytes = b"",
    ) -> None:
        self.fmt = fmt
        self._mm: Any = None  # the map: fmap.Map (or mmap.mmap from the pure-Python twin)
        self._fd: int | None = None
        self._head = head
        if isinstance(source, (str, os.PathLike)):
            self.path: str | None = os.fspath(source)
            # The descriptor stays open (for pread_into) so that every read, mapped or copied,
            # comes from the file that was opened even if the name is replaced meanwhile.
            # A FIFO, device or directory is refused without blocking (see open_regular);
            # ``fd`` is adopted instead (and closed on failure).
            self._fd = open_regular(self.path, fmt=fmt) if fd is None else fd
            try:
                if fd is None or size is None:
                    size = os.fstat(self._fd).st_size
                if size > 0:
                    self._mm = _map_fd(self._fd, size)  # one mmap (Python's adds fstat + dup)
            except BaseException:
                os.close(self._fd)
                raise
            # Collected without close(): release the descriptor and the map all the same (as
            # Python's file objects and numpy.memmap do). Readers add a ResourceWarning on top.
            self._release = weakref.finalize(self, _release, self._fd, self._mm)
            arr = (
                np.frombuffer(self._mm, dtype=np.uint8)
                if self._mm is not None
                else np.empty(0, np.uint8)
            )
        else:
            self.path = None
            arr = np.frombuffer(source, dtype=np.uint8)
        if arr.flags.writeable:
            arr = arr.view()
            arr.flags.writeable = False
        self._u8: np.ndarray | None = arr
        self.size: int = int(arr.size)

    @classmethod
    def owned_map(cls, path: str, fd: int, mm: Any, size: int, fmt: str) -> MappedFile:
        """A file already open on ``fd`` (a regular file, see :func:`open_regular`) and mapped
        whole as ``mm`` (``size`` > 0 bytes; a read-only ``mmap.mmap`` or the ``fmap``
        kernel's ``Map``), for a reader that owns it from now on.

        The lean twin of ``MappedFile(path, fd=fd, size=size)``: it has no finalizer of its
        own, so the owner's finalizer must close it (``MappedReader._adopt`` does); closing
        closes the descriptor once (also from two threads) and drops the map, which the
        operating system unmaps when its last view is gone.
        """
        self = cls.__new__(cls)
        self.fmt = fmt
        self.path = path
        self._fd = fd
        self._mm = mm
        self._head = b""
        self._release = partial(_release_once, [(fd, mm)])  # type: ignore[assignment]
        self._u8 = np.frombuffer(mm, _U8)  # read-only: the map is
        self.size = size
        return self

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._u8 is None

    @property
    def mapped(self) -> bool:
        """Whether the bytes are a memory map of the file (not a buffer nor copies read)."""
        return getattr(self, "_mm", None) is not None

    @property
    def fd(self) -> int | None:
        """The descriptor of the open file, which every read comes from whatever the name
        points to now; None for a buffer (or once closed)."""
        return getattr(self, "_fd", None)

    def identity(self) -> dict[str, Any] | None:
        """What tells this file from another at the same path (a pickled reader checks it when
        it opens the path again, :mod:`tenfold.core.reopen`): its size when opened and the
        modification time of the open descriptor, in nanoseconds; None for a buffer or once
        closed."""
        fd = self.fd
        if self.path is None or fd is None:
            return None
        return {"size": self.size, "mtime_ns": os.fstat(fd).st_mtime_ns}

    def reopen_spec(self) -> tuple[Any, ...] | None:
        """Where another process opens this file again: ``("path", path, mmap)`` (``mmap``:
        whether it is mapped or read with ``pread``), or None for a buffer (see
        :mod:`tenfold.core.reopen`)."""
        return None if self.path is None else ("path", self.path, True)

    def __reduce_ex__(self, protocol: Any) -> Any:
        where = "a buffer" if self.path is None else repr(self.path)
        raise TypeError(
            f"cannot pickle tenfold.core.MappedFile of {where}: an open map is not sent to "
            "another process; pickle the reader, which opens its path again there"
        )

    def close(self) -> None:
        """Detach from the mapping; views already handed out stay valid (see module doc)."""
        self._u8 = None
        if self._fd is not None:
            self._release()
            self._fd = None
            self._mm = None

    def __enter__(self) -> MappedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _arr(self) -> np.ndarray:
        if self._u8 is None:
            raise ValueError(f"{self.fmt}: I/O operation on a closed file")
        return self._u8

    # -- views ------------------------------------------------------------------------------
    def check(self, offset: int, length: int, what: str) -> None:
        """Raise unless ``[offset, offset+length)`` lies in the file."""
        if offset < 0 or length < 0:
            raise FormatError(
                describe(self.fmt, what, detail=f"negative offset {offset} or length {length}")
            )
        if offset + length > self.size:
            raise TruncatedError(
                describe(
                    self.fmt,
                    what,
                    offset=offset,
                    detail="ends past end of file",
                    expected=f"end <= {self.size}",
                    got=offset + length,
                )
            )

    def u8(self, offset: int, length: int, what: str = "range") -> np.ndarray:
        """Read-only ``uint8`` view of ``length`` bytes at ``offset``."""
        self.check(offset, length, what)
        return self._arr()[offset : offset + length]

    def bytes(self, offset: int, length: int, what: str = "range") -> bytes:
        """A copy of a (small) range as ``bytes``.

        From a file, up to 64 KiB come with one ``pread``: cheaper than the page faults of
        a first touch of the map (a header, footer or index is read once, at open).
        """
        if self._fd is None or length > _SMALL_READ:
            return self.u8(offset, length, what).tobytes()
        self.check(offset, length, what)
        self._arr()  # raises when closed
        got = os.pread(self._fd, length, offset)
        if len(got) != length:
            raise TruncatedError(
                describe(
                    self.fmt,
                    what,
                    offset=offset,
                    detail="file shrank while reading",
                    expected=length,
                    got=len(got),
                )
            )
        return got

    def array(
        self, offset: int, dtype: Any, shape: tuple[int, ...], what: str = "array"
    ) -> np.ndarray:
        """Read-only view of an array of ``dtype`` and ``shape`` at ``offset`` (any alignment)."""
        dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        # bounds.array_numel written out: this is the hot path of every view (one Python call
        # more per tensor is measurable at 100 ns a view)
        count = 1
        for d in shape:
            count *= d
        if count == 0 or count * dt.itemsize > MAX_ARRAY_BYTES:
            count = checked_numel(self.fmt, what, shape, itemsize=dt.itemsize, offset=offset)
        nbytes = count * dt.itemsize
        if offset < 0 or offset + nbytes > self.size:
            self.check(offset, nbytes, what)
        base = self._u8
        if base is None or count == 0:
            self._arr()  # raises when closed
            return np.empty(shape, dtype=dt)
        return np.ndarray(shape, dt, base, offset)  # positional: the hot path of every view

    def records(
        self, dtype: np.dtype, count: int, offset: int, what: str = "records"
    ) -> np.ndarray:
        """Zero-copy structured records (see :mod:`tenfold.core.records`)."""
        self.check(offset, count * dtype.itemsize, what)
        return np.frombuffer(self._arr(), dtype=dtype, count=count, offset=offset)

    def pread_into(self, offset: int, dst: np.ndarray, what: str = "range") -> None:
        """Copy ``dst.nbytes`` bytes at ``offset`` into the contiguous array ``dst``.

        For a file this is ``pread`` on the descriptor opened with the map (one system call
        per GiB, straight from the page cache into ``dst``); for a buffer, a copy.
        """
        n = dst.nbytes
        self.check(offset, n, what)
        flat = dst.reshape(-1).view(np.uint8)
        if self._fd is None:
            flat[:] = self._arr()[offset : offset + n]
            return
        self._arr()  # raises when closed
        mv = memoryview(flat)  # type: ignore[arg-type]
        done = 0
        while done < n:
            got = os.preadv(self._fd, [mv[done : done + _PREAD_MAX]], offset + done)
            if got <= 0:
                raise TruncatedError(
                    describe(
                        self.fmt,
                        what,
                        offset=offset + done,
                        detail="file shrank while reading",
                        expected=n,
                        got=done,
                    )
                )
            done += got

    def buffer(self) -> np.ndarray:
        """The whole file as a read-only ``uint8`` array."""
        return self._arr()

    # -- what copying sources (tenfold.core.source) do differently ----------------------------
    #: True for a remote object (see :mod:`tenfold.core.source`).
    remote = False
    #: True while a remote file's first bytes are not fetched yet (their check is deferred).
    defer_head = False

    def magic(self, expected: _Bytes, what: str = "magic") -> _Bytes:
        """The first ``len(expected)`` bytes (at most the file's size), for a magic check."""
        n = min(len(expected), self.size)
        if len(self._head) >= n and self._u8 is not None:
            return self._head[:n]
        return self.bytes(0, n, what)

    def prefetch(self, ranges: Any, gap: int = 0) -> None:
        """Fetch ranges ahead of reading them: nothing to do for a map or a buffer."""

    def release(self) -> None:
        """Drop prefetched ranges: nothing to do for a map or a buffer."""


def _release(fd: int, mm: Any) -> None:
    """Close a descriptor and its map (the map survives while views still export it; the
    ``fmap`` kernel's map has no ``close``: it is unmapped when its last user is gone)."""
    os.close(fd)
    close = getattr(mm, "close", None)
    if close is not None:
        try:
            close()
        except BufferError:
            pass  # views still export the buffer; the OS unmaps when the last one dies


def _release_once(box: list[tuple[int, Any]]) -> None:
    """Close the descriptor in ``box`` the first time only (``list.pop`` is atomic); the map
    is dropped, not closed: it is unmapped when nothing uses it any more."""
    try:
        fd, _ = box.pop()
    except IndexError:
        return
    os.close(fd)

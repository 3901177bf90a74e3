"""Exclusive locks on files that are changed in place (read, then modified, then written).

:class:`FileLock` holds an advisory ``flock(LOCK_EX)`` on the file at a path. Everything in
tenfold that reads a file and then writes it back in place (a zTensor v2 append: read the footer
and manifest, write after the end, switch the footer) takes it for the whole operation, from
before the first read to after the last write is durable, so two such operations on one file
run one after the other and each sees what the other wrote. Readers take no lock: an append is
crash-safe for a reader at every instant.

Why ``flock`` and not POSIX ``fcntl``/``lockf`` record locks: a POSIX lock belongs to the
process and is dropped when the process closes *any* descriptor of the file (a reader opening
and closing the same file would silently end an append's lock), and two threads of one process
never exclude each other. An ``flock`` belongs to the open file description: two opens of the
file, in two threads or two processes, exclude each other, and closing another descriptor of
the file changes nothing. (Linux's OFD locks behave the same way but are Linux only; on NFS,
Linux emulates ``flock`` with byte-range locks that the server sees.)

The policy is to wait: :class:`FileLock` blocks until the holder is done, or until
``timeout`` seconds have passed (``timeout=0``: do not wait), and then raises
:class:`~tenfold.errors.LockedError`. A thread that asks again for a file it already holds gets
that error at once instead of waiting for itself forever.

A descriptor survives ``fork``, and so does the lock it carries: a child that closed its copy
after the parent had released the lock, or that unlocked it, would break the parent's lock. So
a forked child forgets the locks its parent held (its copies are closed, which leaves the
parent's lock as it is), and a lock object used in the child says so
(:class:`~tenfold.errors.LockedError`) instead of writing without the lock.

After the lock is taken, the path is looked up again: if the file was replaced (renamed over)
or removed while the lock was awaited, the lock is on a file nobody else will look at, so it is
dropped and the file now under the path is locked instead.

Without ``fcntl`` (not POSIX), no lock is taken.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
import weakref
from typing import Any

from ..errors import LockedError, UnsupportedError, factory
from .mapped import open_regular

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["FileLock", "held_by_this_thread", "lock_if_rewritten", "lock_for_replace"]

#: Files locked by this process: (st_dev, st_ino) -> id of the thread holding the lock.
_held: dict[tuple[int, int], int] = {}
_guard = [threading.Lock()]  # in a list: a forked child replaces it (it may have been held)
_live: weakref.WeakSet[FileLock] = weakref.WeakSet()


class FileLock:
    """An exclusive lock on the file at ``path``, held from construction to :meth:`release`.

    Parameters
    ----------
    path
        The file (it must exist, and be a regular file: anything else is an
        :class:`~tenfold.errors.UnsupportedError`).
    timeout
        Seconds to wait for another holder; None (default): as long as it takes; 0: not at all.
    write
        Open the file for writing too (:attr:`fd` is then the descriptor to write through).
    fmt
        Format name for error messages.

    Raises
    ------
    LockedError
        The file stayed locked by someone else for ``timeout`` seconds, or this thread holds
        it already.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "f.bin"
    >>> _ = path.write_bytes(b"x")
    >>> with FileLock(path) as lock:
    ...     try:
    ...         FileLock(path, timeout=0)
    ...     except LockedError as exc:
    ...         print(exc.detail)
    locked by this thread already
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float | None = None,
        write: bool = False,
        fmt: str | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self._fmt = fmt
        self._fd = -1
        self._key: tuple[int, int] | None = None
        self._pid = os.getpid()
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"lock timeout must be None or >= 0, not {timeout!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            fd = open_regular(self.path, fmt=fmt or "tenfold", write=write)  # a FIFO: refused
            try:
                st = os.fstat(fd)
                key = (st.st_dev, st.st_ino)
                with _guard[0]:
                    if _held.get(key) == threading.get_ident():
                        raise self._locked("locked by this thread already")
                self._flock(fd, deadline, timeout)
                if self._same_file(st):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # replaced while we waited: lock what the path names now
        with _guard[0]:
            _held[key] = threading.get_ident()
        self._key = key
        self._fd = fd
        _live.add(self)

    # -- public -------------------------------------------------------------------------------
    @property
    def fd(self) -> int:
        """The locked descriptor (raises when the lock is not held by this process)."""
        if self._fd < 0:
            if self._pid != os.getpid():
                detail = "the lock belongs to the process that forked this one"
            else:
                detail = "the lock was released"
            raise self._locked(detail)
        return self._fd

    @property
    def held(self) -> bool:
        """True while this process holds the lock."""
        return self._fd >= 0

    def release(self) -> None:
        """Drop the lock and close the descriptor (a no-op when not held)."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        with _guard[0]:  # before unlocking: the next holder may be a thread of ours
            _held.pop(self._key, None)  # type: ignore[arg-type]
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)  # also for copies a raw fork() left around
        finally:
            os.close(fd)

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0 and getattr(self, "_pid", None) == os.getpid():
            self.release()

    # -- internals ----------------------------------------------------------------------------
    def _locked(self, detail: str) -> LockedError:
        return factory(self._fmt or "tenfold").locked(self.path, detail=detail)

    def _flock(self, fd: int, deadline: float | None, timeout: float | None) -> None:
        if fcntl is None:  # pragma: no cover - not POSIX
            return
        if deadline is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
            left = deadline - time.monotonic()
            if left <= 0:
                waited = f" (waited {timeout:g} s)" if timeout else ""
                raise self._locked(f"locked by another writer{waited}")
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)

    def _same_file(self, st: os.stat_result) -> bool:
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            raise FileNotFoundError(
                errno.ENOENT, "removed while waiting for its lock", self.path
            ) from None
        return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def lock_if_rewritten(src: Any, dst: Any, *, fmt: str | None = None) -> Any:
    """A context holding ``src``'s lock when ``dst`` is the same file (a read-modify-write that
    replaces its source), or doing nothing (``dst`` another file, ``src`` not a path).

    The lock is taken before ``src`` is read and should be kept until ``dst`` is in place.
    """
    if not isinstance(src, (str, os.PathLike)) or not isinstance(dst, (str, os.PathLike)):
        return contextlib.nullcontext()
    try:
        same = os.path.samefile(src, dst)
    except OSError:  # dst does not exist yet (or src does not: the reader will say so)
        same = False
    return FileLock(src, fmt=fmt) if same else contextlib.nullcontext()


def held_by_this_thread(st: os.stat_result) -> bool:
    """True when this thread holds the lock of the file ``st`` describes."""
    with _guard[0]:
        return _held.get((st.st_dev, st.st_ino)) == threading.get_ident()


def lock_for_replace(path: str) -> Any:
    """A context holding the lock of the regular file at ``path`` while it is renamed over.

    A writer that replaces a file (rename over it) takes this lock just before the rename, so a
    change in place holding the lock (an append) is finished, and durable, before the file is
    replaced; the in-place writer that waited for the lock finds the path renamed over and locks
    the new file (see :class:`FileLock`). Nothing to lock (no file, a link, a file this process
    cannot open) or a lock this thread holds already (a repair in place): a null context.
    """
    if fcntl is None:  # pragma: no cover - not POSIX
        return contextlib.nullcontext()
    try:
        st = os.lstat(path)
    except OSError:
        return contextlib.nullcontext()
    if not stat.S_ISREG(st.st_mode) or held_by_this_thread(st):
        return contextlib.nullcontext()
    try:
        return FileLock(path)
    except (OSError, UnsupportedError):  # gone, unreadable or replaced by a non-file meanwhile
        return contextlib.nullcontext()


def _forget_in_child() -> None:
    """After ``fork``, in the child: the parent's locks are the parent's (see the module doc)."""
    _guard[0] = threading.Lock()
    _held.clear()
    for lock in list(_live):
        fd, lock._fd = lock._fd, -1
        if fd >= 0:
            try:
                os.close(fd)  # the parent's descriptor keeps the lock
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)

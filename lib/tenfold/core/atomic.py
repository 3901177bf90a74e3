"""Atomic file replacement.

:func:`atomic_write` writes to a temporary file in the destination's directory, flushes and
fsyncs it, then renames it over the destination (and fsyncs the directory). If anything fails
before the rename, the temporary file is removed and the previous file is untouched: no reader
ever sees a half-written file under the final name.

A writer killed outright (SIGKILL, power loss) cannot remove its temporary file, so the name
says whose it is: ``.<dest name>.<pid>.<random>.tmp``, and the writer holds an advisory
``flock`` on it until the rename. When a write to the same destination starts, temporary files
of that destination whose process is gone (the pid no longer exists and nobody holds the
lock) are removed. Files of other destinations, files not following the pattern and files of
live writers are never touched.

The rename waits for the destination's :class:`~tenfold.core.locking.FileLock`: a change in
place that holds it (a zTensor v2 append) finishes before the file is replaced, instead of
writing on, and reporting success for, a file already renamed over.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator

from .locking import lock_for_replace

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["atomic_write", "lock_free", "pid_alive", "remove_stale_temps", "temp_pattern"]


def temp_pattern(base: str) -> re.Pattern[str]:
    """The names :func:`atomic_write` gives temporary files of a destination named ``base``."""
    return re.compile(rf"\.{re.escape(base)}\.([0-9]+)\.[a-z0-9_]+\.tmp")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host may still run (True when it cannot be told)."""
    if pid <= 0:
        return True  # not a pid we could have written: leave it alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def lock_free(path: str, *, without_flock: bool = True) -> bool:
    """True when nobody holds an flock on the file ``path`` (False when it cannot be opened;
    ``without_flock`` where the platform has no flock)."""
    if fcntl is None:
        return without_flock
    try:
        fd = os.open(
            path,
            os.O_RDONLY
            | getattr(os, "O_CLOEXEC", 0)
            | getattr(os, "O_NOFOLLOW", 0)
            | getattr(os, "O_NONBLOCK", 0),
        )
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def remove_stale_temps(path: str | os.PathLike[str]) -> list[str]:
    """Remove the temporary files a dead writer left for destination ``path``; return them."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    pattern = temp_pattern(base)
    prefix = f".{base}."
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not name.startswith(prefix):
            continue
        m = pattern.fullmatch(name)
        if m is None or pid_alive(int(m.group(1))):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
        except OSError:
            continue
        full = os.path.join(directory, name)
        if lock_free(full):
            with contextlib.suppress(OSError):
                os.unlink(full)
                removed.append(full)
    return removed


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], *, fsync: bool = True
) -> Iterator[io.BufferedWriter]:
    """Open a binary file that replaces ``path`` only when the ``with`` block succeeds.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.bin"
    >>> with atomic_write(p) as f:
    ...     _ = f.write(b"hello")
    >>> p.read_bytes()
    b'hello'
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    remove_stale_temps(path)
    import tempfile  # here: a reader never needs it, and it costs milliseconds to import

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.{os.getpid()}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _naming(exc, path) from None
    lock_fd = -1
    if fcntl is not None:
        # The lock lives on a duplicate so that it lasts until after the rename.
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock_fd = os.dup(fd)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f  # type: ignore[misc]
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        with lock_for_replace(path):
            os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and tmp in (exc.filename, exc.filename2):
            raise _naming(exc, path) from None  # the temp name means nothing to the caller
        raise
    finally:
        if lock_fd >= 0:
            os.close(lock_fd)
    if fsync:
        _fsync_dir(directory)


def _naming(exc: OSError, path: str) -> OSError:
    """The same error about the destination ``path`` instead of the hidden temporary file."""
    if os.path.isdir(path):
        return IsADirectoryError(exc.errno if exc.errno is not None else 21, "Is a directory", path)
    return type(exc)(exc.errno, exc.strerror, path)


def _proc_umask() -> int | None:
    # /proc gives the umask without changing it (Linux >= 4.7).
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return None


def _import_umask() -> int:
    # Elsewhere read it once, at import, where no other thread of ours creates files yet.
    mask = _proc_umask()
    if mask is None:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


_UMASK_AT_IMPORT = _import_umask()


def _umask() -> int:
    mask = _proc_umask()
    return _UMASK_AT_IMPORT if mask is None else mask


def _fsync_dir(directory: str) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)

"""Atomic file replacement.

:func:`atomic_write` writes to a temporary file in the destination's directory, flushes and
fsyncs it, then renames it over the destination (and fsyncs the directory). If anything fails
before the rename, the temporary file is removed and the previous file is untouched: no reader
ever sees a half-written file under the final name.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator

__all__ = ["atomic_write"]


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
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _naming(exc, path) from None
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
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and tmp in (exc.filename, exc.filename2):
            raise _naming(exc, path) from None  # the temp name means nothing to the caller
        raise
    if fsync:
        _fsync_dir(directory)


def _naming(exc: OSError, path: str) -> OSError:
    """The same error about the destination ``path`` instead of the hidden temporary file."""
    if os.path.isdir(path):
        return IsADirectoryError(exc.errno if exc.errno is not None else 21, "Is a directory",
                                 path)
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

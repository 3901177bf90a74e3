"""What every zTensor writer shares: an atomic file and its lifetime.

:class:`AtomicFileWriter` opens the destination through :func:`tenfold.core.atomic.atomic_write`
(a temporary file renamed into place on success), and gives ``close`` (write the end of the
file, then move it into place), ``abort`` (discard it), the context manager, a finalizer that
aborts a writer dropped unclosed, and the check that refuses work after a close or a failure.
A subclass calls :meth:`_open` in ``__init__`` and implements :meth:`_finish`.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

from ...core.atomic import atomic_write
from ...errors import EncodeError, describe

__all__ = ["AtomicFileWriter"]


class _Abort(Exception):
    """Raised into the atomic-write context to make it discard the temporary file."""


class AtomicFileWriter:
    """Base of the zTensor writers (see the module doc)."""

    path: str
    _f: BinaryIO
    _cm: Any
    _fsync: bool
    _closed: bool
    _failed: BaseException | None

    def _open(self, path: str | os.PathLike[str], fsync: bool) -> None:
        """Start the atomic write of ``path``; ``self._f`` is the file being written."""
        self.path = os.fspath(path)
        self._fsync = fsync
        self._cm = atomic_write(self.path, fsync=fsync)
        self._f = self._cm.__enter__()
        self._closed = False
        self._failed = None

    def _finish(self) -> None:  # pragma: no cover - every writer overrides it
        """Write what ends the file (index, manifest, footer)."""
        raise NotImplementedError

    def _release(self) -> None:
        """Free what the writer holds besides the file (threads); called once on close/abort."""

    def close(self) -> None:
        """Write the end of the file and move it into place."""
        if self._closed:
            return
        if self._failed is not None:
            self.abort()
            raise ValueError(f"zt: writer failed earlier ({self._failed}); file discarded")
        self._closed = True
        try:
            self._finish()
        except BaseException as exc:
            self._release()
            self._cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._release()
        self._cm.__exit__(None, None, None)

    def abort(self) -> None:
        """Discard everything written; ``path`` is left as it was."""
        if self._closed:
            return
        self._closed = True
        self._release()
        exc = _Abort()
        try:
            self._cm.__exit__(_Abort, exc, None)
        except _Abort:
            pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.abort()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("zt: writer is closed")
        if self._failed is not None:
            raise ValueError(
                f"zt: writer failed earlier ({type(self._failed).__name__}: {self._failed}); "
                "nothing more can be added, and close() discards the file"
            )


def size_refusal(fmt: str, what: str, field: str, expected: int) -> Any:
    """What :func:`~tenfold.core.buffers.exact_pieces` raises for the pieces of ``what``
    that must take ``expected`` bytes: an :class:`EncodeError` naming ``field``."""

    def refuse(got: object, more: bool) -> EncodeError:
        detail = f"{'more' if more else 'fewer'} bytes than dtype and shape take"
        return EncodeError(
            describe(fmt, what, field=field, detail=detail, expected=expected, got=got)
        )

    return refuse

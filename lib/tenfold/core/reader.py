"""The one reader shape every format shares.

Whatever :func:`tenfold.open` returns, for every format, follows :class:`TensorReader`: a
context manager that closes, and a read-only ``Mapping[str, value]`` (``len``, ``in``,
iteration, ``keys/values/items``, ``get(key, default)``) with

* ``read(name)``: the value of ``name`` (``reader[name]`` is the same, with the format's
  default options); the tensor formats also take ``read(name, index)``, a basic slice that
  reads only the rows it needs (:mod:`tenfold.core.slicing`);
* ``info(name)``: a record with at least the fields of :class:`TensorInfo` (dtype, shape,
  byte range, encoding, checksum, format-specific ``extras``);
* ``metadata``: file-level metadata, a ``dict``;
* ``verify()``: a :class:`~tenfold.core.report.Report` of every check the format has;
* ``close()`` / ``closed`` / ``path`` / ``size``.

:class:`MappedReader` is the base class that owns the file: the :class:`MappedFile`, ``close``,
the context manager, ``repr``, and a finalizer that closes the descriptor and the map and emits
a :class:`ResourceWarning` when a reader is garbage-collected without being closed.

Readers compare by identity (``Mapping.__eq__`` would read every value of both files).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

from .mapped import MappedFile

__all__ = ["TensorInfo", "TensorReader", "MappedReader", "INFO_FIELDS", "verify_file"]


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """What a reader knows about one entry, in the same words for every format.

    Attributes
    ----------
    name
        The key.
    dtype
        Element type as the format names it (``"float32"``, OINF ``"f32"``, ``"uint8"`` for
        a FOLD chunk payload, ``"bytes"`` for a TARIDX sample).
    shape
        Shape of the value ``read`` returns (``()`` when it has none).
    byte_range
        ``(start, end)`` of the stored bytes in the file, or ``None`` when the entry is not
        one contiguous range (a TARIDX sample lives in tar shards; an npz member may be
        compressed).
    encoding
        How the bytes are stored (``"raw"``, ``"zstd"``, ``"base64"``, ``"deflate"`` ...).
    checksum
        The stored checksum as ``"<algo>:<hex>"``, or ``None``.
    extras
        Format-specific fields.

    >>> TensorInfo("w", "float32", (2, 3), (64, 88), "raw", None).byte_range
    (64, 88)
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    byte_range: tuple[int, int] | None
    encoding: str
    checksum: str | None
    extras: Mapping[str, Any] = dataclasses.field(default_factory=dict)


#: The attributes every ``info(name)`` record has (format records may have more).
INFO_FIELDS = tuple(f.name for f in dataclasses.fields(TensorInfo))


@runtime_checkable
class TensorReader(Protocol):
    """The protocol of every object :func:`tenfold.open` returns (see the module doc)."""

    def __getitem__(self, name: str) -> Any: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def __contains__(self, name: object) -> bool: ...
    def keys(self) -> Any: ...
    def values(self) -> Any: ...
    def items(self) -> Any: ...
    def get(self, name: str, default: Any = None) -> Any: ...
    def read(self, name: str) -> Any: ...
    def info(self, name: str) -> Any: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    def verify(self) -> Any: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: object) -> None: ...


def _label(cls: type) -> str:
    """``module.Class`` by the names users import (``tenfold.ztensor...``, not
    ``tenfold.formats.ztensor...``)."""
    from .._aliases import public_name

    return f"{public_name(cls.__module__)}.{cls.__qualname__}"


def _unclosed(mf: MappedFile, cls: type) -> None:
    if mf.closed:
        return
    mf.close()
    if mf.path is not None:  # a buffer holds no descriptor: nothing leaked
        label = f"{_label(cls)} {mf.path!r}"  # built only when needed
        warnings.warn(f"unclosed {label}", ResourceWarning, stacklevel=2)


class MappedReader:
    """Base of every reader: owns a :class:`MappedFile` and closes it, now or when collected.

    A subclass calls :meth:`_map` (or :meth:`_adopt`) first in ``__init__``; if parsing then
    fails it calls :meth:`close` before re-raising.
    """

    fmt: str = "tenfold"
    _mf: MappedFile
    _finalizer: Any
    #: ``verifier(reader) -> Report`` joined by :meth:`use_verifier` (a staticmethod)
    _verifier: ClassVar[Any] = None

    @classmethod
    def use_verifier(cls, verifier: Callable[[Any], Any]) -> None:
        """Make ``verifier(reader) -> Report`` this class's :meth:`verify`. The format package's
        ``__init__`` joins the two, so that a reader module never imports its verify module
        (which imports the reader)."""
        cls._verifier = staticmethod(verifier)

    def verify(self) -> Any:
        """A :class:`~tenfold.core.report.Report` of every check the format has (see the
        format's ``verify`` function); it never raises on a damaged file."""
        if self._verifier is None:
            raise NotImplementedError(f"{type(self).__name__}: no verifier joined")
        return self._verifier(self)

    def _map(self, source: Any, fmt: str | None = None, *, mmap: bool = True) -> MappedFile:
        """Open ``source`` (path, buffer, fsspec URL or file, or an opened
        :class:`MappedFile`; see :func:`tenfold.core.source.open_file`) and own it."""
        from .source import open_file

        return self._adopt(open_file(source, fmt=fmt or self.fmt, mmap=mmap))

    def _adopt(self, mf: MappedFile) -> MappedFile:
        """Own an already opened :class:`MappedFile`."""
        self._mf = mf
        self._finalizer = weakref.finalize(self, _unclosed, mf, type(self))
        return mf

    def _owned(self) -> Any:
        """Mark this reader as owned by an object that manages its lifetime (a dataset that
        drops it after a fork, say): collecting it unclosed then closes it without a
        :class:`ResourceWarning`. Returns ``self``."""
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, self._mf.close)
        return self

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def path(self) -> str | None:
        """The file's path (``None`` for a buffer)."""
        return self._mf.path

    @property
    def size(self) -> int:
        """The file's size in bytes."""
        return self._mf.size

    @property
    def closed(self) -> bool:
        return self._mf.closed

    def close(self) -> None:
        """Release the file. Views already returned stay valid (they keep the map alive)."""
        self._mf.close()
        self._finalizer.detach()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        name = _label(type(self))
        where = self._mf.path or "<buffer>"
        if self.closed:
            return f"<{name} {where!r} closed>"
        try:
            n = len(self)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - repr must not raise
            return f"<{name} {where!r}>"
        return f"<{name} {where!r} {n} entries>"

    # Readers are resources: equal only to themselves (Mapping.__eq__ would read both files).
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    # -- the Mapping face ---------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self.read(name)

    def read(self, name: str) -> Any:  # pragma: no cover - every format overrides it
        raise NotImplementedError

    def get(self, name: str, default: Any = None) -> Any:
        """``self[name]``, or ``default`` when there is no such entry."""
        try:
            return self[name]
        except KeyError:
            return default


def verify_file(fmt: str, opener: Any, source: Any, **kw: Any) -> Any:
    """``opener(source, **kw).verify()``, closed after; a file that cannot be opened at all
    (a tenfold error or an OS error) gives a report with one ``file`` error row instead of
    raising. The module-level ``verify`` of readers whose ``verify()`` method does the
    checking."""
    from ..errors import TenfoldError
    from .report import ERROR, Report

    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<buffer>"
    try:
        r = opener(source, **kw)
    except (TenfoldError, OSError) as exc:
        report = Report(fmt, path)
        report.add("file", ERROR, str(exc))
        return report
    with r:
        return r.verify()

"""The one reader shape every format shares.

Whatever :func:`tenfold.open` returns, for every format, follows :class:`TensorReader`: a
context manager that closes, and a read-only ``Mapping[str, value]`` (``len``, ``in``,
iteration, ``keys/values/items``, ``get(key, default)``) with

* ``read(name, index=None)``: the value of ``name`` (``reader[name]`` is the same, with the
  format's default options); with ``index``, a basic slice (:mod:`tenfold.core.slicing`) that
  the tensor formats read for the rows it needs only;
* ``info(name)``: a record with at least the fields of :class:`TensorInfo` (dtype as the
  format names it, ``np_dtype`` the NumPy dtype of the array ``read`` gives, shape, byte
  range, encoding, checksum, format-specific ``extras``);
* ``span(name)`` / ``spans(names)``: a :class:`Span` ``(offset, dtype, shape)`` when the
  tensor lies raw, little-endian and C-ordered at that offset of :attr:`MappedReader.file`
  and reading it needs no check the reader would make first (a checksum not yet verified),
  else ``None``; a framework may then build the tensor straight over the file's bytes;
* ``read_raw(name)``: the stored bytes of ``name`` (before any decoding) as a read-only
  ``uint8`` array, where they are one byte range of the file;
* ``verified(name)``: whether the entry's stored checksum has been checked (and held) by this
  reader, by a whole read or :meth:`verify` (``False`` when it has none or not yet);
* ``metadata``: file-level metadata, a ``dict``;
* ``verify()``: a :class:`~tenfold.core.report.Report` of every check the format has;
* ``close()`` / ``closed`` / ``path`` / ``size``.

:class:`BaseReader` is the ``Mapping`` implementation, written once: a format's reader gives
``_keys()`` (its names in order, as a collection with a fast ``in``), ``read`` and ``info``;
``__getitem__``, iteration, ``len``, ``in``, ``keys/values/items`` and ``get`` come from it,
as do the defaults of ``span``, ``spans``, ``read_raw`` and ``verified``.
:class:`MappedReader` adds the file: the :class:`MappedFile`, ``close``, ``repr``, and a
finalizer that closes the descriptor and the map and emits a :class:`ResourceWarning` when a
reader is garbage-collected without being closed.

Readers compare by identity (``Mapping.__eq__`` would read every value of both files).

Threads
-------
One opened reader may be shared by many threads: ``read`` (whole or sliced), ``[]``, ``get``,
``info``, ``span``/``spans``, ``read_raw``, ``verified``, iteration, ``len``, ``in`` and
``metadata`` may be called from several threads at once and give what one thread would (the
caches a reader fills on first use, such as a checksum verified once or a FOLD chunk decoded
once, are filled under a lock or idempotently). ``verify()`` may run beside reads.
``close()`` must not race reads: call it once the other threads are done. Arrays already
handed out stay valid after it (they keep the map alive); a read (``[]``, ``read``) that
starts after it raises a ``ValueError`` ("I/O operation on a closed file"), never returns other
bytes (``info`` may still answer from the index parsed at open).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    NamedTuple,
    Protocol,
    TypeVar,
    runtime_checkable,
)

from . import reopen
from .mapped import MappedFile

if TYPE_CHECKING:
    import numpy as np

_T = TypeVar("_T")

__all__ = [
    "TensorInfo",
    "TensorReader",
    "Span",
    "CheckedSpan",
    "BaseReader",
    "MappedReader",
    "INFO_FIELDS",
    "verify_file",
    "load_all",
]


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
    np_dtype
        The NumPy dtype of the array ``read`` returns (of the values, for a sparse tensor),
        or ``None`` when the value is not an array (a TARIDX sample, a FOLD JSON chunk).

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
    np_dtype: np.dtype | None = None


class CheckedSpan(NamedTuple):
    """What a reader would check before giving a tensor stored raw
    (:meth:`BaseReader.checked_span`): its :class:`Span`, and its stored checksum when one is
    still to be checked (``algo`` and ``expected`` lowercase hex; ``error(got_hex)`` builds the
    exception the reader raises on a mismatch; ``done()`` records that it held, as if the
    reader had checked it), else None."""

    span: Span
    algo: str | None = None
    expected: str | None = None
    error: Callable[[str], BaseException] | None = None
    done: Callable[[], None] | None = None


#: The attributes every ``info(name)`` record has (format records may have more).
INFO_FIELDS = tuple(f.name for f in dataclasses.fields(TensorInfo))


class Span(NamedTuple):
    """Where a tensor stored raw lies in its reader's file: ``offset`` of its first byte,
    its (little-endian) ``dtype`` and its C-ordered ``shape``."""

    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]


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
    def read(self, name: str, index: Any = None) -> Any: ...
    def info(self, name: str) -> Any: ...
    def span(self, name: str) -> Span | None: ...
    def spans(self, names: Iterable[str]) -> list[Span | None]: ...
    def read_raw(self, name: str) -> np.ndarray: ...
    def verified(self, name: str) -> bool: ...
    def checked_span(self, name: str) -> CheckedSpan | None: ...
    def check_ahead(self, names: Iterable[str] | None = None) -> None: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    def verify(self) -> Any: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str | None: ...
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


class BaseReader(Mapping[str, Any]):
    """The ``Mapping`` face and the protocol's defaults, over ``_keys``, ``read`` and
    ``info`` (see the module doc). Subclasses give those three, ``metadata``, ``close`` and
    ``closed``, and ``verify`` (or join a verifier: :meth:`use_verifier`)."""

    fmt: str = "tenfold"
    #: keys of :attr:`metadata` that the reader reports about the file itself (a format
    #: version, an index's total size), not metadata a writer was given: a comparison of two
    #: files' metadata (:func:`tenfold.diff`) leaves them out
    own_metadata: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # every reader's __init__ keeps what it was opened with, for pickling (reopen module)
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = reopen.recording(init)  # type: ignore[method-assign]

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickled as "open the same file again with the same options" (see
        :mod:`tenfold.core.reopen`); a ``TypeError`` saying why when it cannot be."""
        return reopen.reduce(self)

    def _record_open(self, source: Any, *args: Any, **kwargs: Any) -> None:
        """For a reader built without its ``__init__``: ``type(self)(source, *args,
        **kwargs)`` opens it again (see :mod:`tenfold.core.reopen`)."""
        reopen.record(self, source, args, kwargs)

    def _keys(self) -> Collection[str]:  # pragma: no cover - every format overrides it
        """The entry names in the reader's order, as a collection with a fast ``in`` (a
        ``dict``, its keys, a ``frozenset`` beside a list is not: order matters)."""
        raise NotImplementedError

    def read(self, name: str, index: Any = None) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def info(self, name: str) -> Any:  # pragma: no cover - every format overrides it
        raise NotImplementedError

    # -- the Mapping face ---------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self.read(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._keys()
        except TypeError:  # an unhashable key is in no reader
            return False

    # -- what frameworks ask ------------------------------------------------------------------
    def span(self, name: str) -> Span | None:
        """Where tensor ``name`` lies raw in :attr:`MappedReader.file` (see the module doc),
        or ``None``; the default knows none (a ``KeyError`` for a name that is not here)."""
        if name not in self:
            raise KeyError(f"{self.fmt}: no tensor named {name!r}")
        return None

    def spans(self, names: Iterable[str]) -> list[Span | None]:
        """:meth:`span` of each of ``names`` (a format may read them from its index in one
        pass)."""
        return [self.span(n) for n in names]

    def check_ahead(self, names: Iterable[str] | None = None) -> None:
        """Check now, on every core where the format can, the stored checksums that reading
        ``names`` (default: every tensor) would check, so that their reads and
        :meth:`spans` need not check them one by one. A mismatch is not raised here: the
        tensor stays unverified and its read raises the error, in the caller's order. The
        default checks nothing ahead."""

    def checked_span(self, name: str) -> CheckedSpan | None:
        """Where tensor ``name`` lies raw and the checksum this reader would check before
        giving it (so that a caller copying the bytes itself, the device staging ring, checks
        it on the way), or None when the reader must read it. The default: its :meth:`span`,
        with nothing to check."""
        span = self.span(name)
        return None if span is None else CheckedSpan(span)

    def file_span(self, name: str) -> tuple[MappedFile, CheckedSpan] | None:
        """:meth:`checked_span` with the opened file its span is a range of: a reader whose
        tensors live in several files (a multi-file zTensor v2 model) gives each its own, where
        :meth:`checked_span` knows the main file only (:attr:`MappedReader.file`). A copy
        reads that file, never a path opened again. The default: the main file's spans."""
        file = getattr(self, "file", None)
        if file is None:
            return None
        c = self.checked_span(name)
        return None if c is None else (file, c)

    def verified(self, name: str) -> bool:
        """Whether the stored checksum of ``name`` has been checked and held by this reader
        (the default: the format checks none per entry, or keeps no record of it)."""
        if name not in self:
            raise KeyError(f"{self.fmt}: no tensor named {name!r}")
        return False

    def read_raw(self, name: str) -> np.ndarray:
        """The stored bytes of ``name`` (before decoding) as a read-only ``uint8`` array,
        from ``info(name).byte_range``; an :class:`~tenfold.errors.UnsupportedError` when
        they are not one range of the file."""
        from ..errors import UnsupportedError

        rng = self.info(name).byte_range
        mf = getattr(self, "file", None)
        if rng is None or mf is None:
            raise UnsupportedError(
                fmt=self.fmt,
                obj=repr(name),
                detail="its stored bytes are not one range of the file",
            )
        start, end = rng
        return mf.u8(start, end - start, f"{name!r}")  # type: ignore[no-any-return]

    # -- verification -------------------------------------------------------------------------
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

    # -- lifetime -----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:  # pragma: no cover - every reader overrides it
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - every reader overrides it
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Readers are resources: equal only to themselves (Mapping.__eq__ would read both files).
    __eq__ = object.__eq__
    __hash__ = object.__hash__  # type: ignore[assignment]


class MappedReader(BaseReader):
    """Base of every reader of one file: owns a :class:`MappedFile` and closes it, now or when
    collected.

    A subclass calls :meth:`_map` (or :meth:`_adopt`) first in ``__init__``; if parsing then
    fails it calls :meth:`close` before re-raising (:meth:`_map_and_parse` does both).
    """

    _mf: MappedFile
    _finalizer: Any

    def _map(
        self, source: Any, fmt: str | None = None, *, mmap: bool = True, tail_first: bool = False
    ) -> MappedFile:
        """Open ``source`` (path, buffer, fsspec URL or file, or an opened
        :class:`MappedFile`; see :func:`tenfold.core.source.open_file`, which ``tail_first``
        is for) and own it."""
        from .source import open_file

        return self._adopt(open_file(source, fmt=fmt or self.fmt, mmap=mmap, tail_first=tail_first))

    def _map_and_parse(
        self,
        source: Any,
        parse: Callable[[MappedFile], _T],
        fmt: str | None = None,
        *,
        mmap: bool = True,
    ) -> _T:
        """:meth:`_map` ``source``, then ``parse(file)``: what it returns; if it raises, the
        reader is closed (:meth:`close`, so set what a subclass's ``close`` uses first) and
        the error goes on."""
        mf = self._map(source, fmt, mmap=mmap)
        try:
            return parse(mf)
        except BaseException:
            self.close()
            raise

    def _adopt(self, mf: MappedFile) -> MappedFile:
        """Own an already opened :class:`MappedFile`."""
        self._mf = mf
        self._finalizer = weakref.finalize(self, _unclosed, mf, type(self))
        return mf

    def owned(self) -> Any:
        """Mark this reader as owned by an object that manages its lifetime (a dataset that
        drops it after a fork, say): collecting it unclosed then closes it without a
        :class:`ResourceWarning`. Returns ``self``."""
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, self._mf.close)
        return self

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def file(self) -> MappedFile:
        """The :class:`MappedFile` this reader reads (what a :class:`Span` is an offset of)."""
        return self._mf

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

    def __repr__(self) -> str:
        name = _label(type(self))
        where = self._mf.path or "<buffer>"
        if self.closed:
            return f"<{name} {where!r} closed>"
        try:
            n = len(self)
        except Exception:  # noqa: BLE001 - repr must not raise
            return f"<{name} {where!r}>"
        return f"<{name} {where!r} {n} entries>"


def load_all(opener: Any, source: Any, copy: bool = False, **kw: Any) -> dict[str, Any]:
    """Every entry of ``opener(source, **kw)`` by name, each ``read(name, copy=copy)``, the
    reader closed after. The module-level ``load`` of readers whose ``read`` takes ``copy``."""
    with opener(source, **kw) as r:
        return {k: r.read(k, copy=copy) for k in r}


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

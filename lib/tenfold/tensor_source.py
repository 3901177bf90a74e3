"""The source a conversion reads: a file's tensors, one at a time (:class:`Source`).

:func:`reader_source` builds one over any reader of the protocol (:mod:`tenfold.core.reader`):
names, dtypes and shapes from its index, values from ``reader[name]``, raw byte ranges from
``file_span`` (or ``checked_span``), each a :class:`RawRange` of the file the reader holds open,
metadata from ``metadata``; a format's ``convert_source`` hook adds only what is its own.
:mod:`tenfold.convert` writes from a source; :mod:`tenfold.sharded` joins the sources of a
checkpoint's shards into one. Here, below both, so that neither imports the other
for it (``tenfold.convert.Source`` is this class).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .core.blocks import BLOCK, BlockReader

if TYPE_CHECKING:
    from .core.mapped import MappedFile
    from .registry import Format

__all__ = ["Source", "RawRange", "reader_source"]

#: Block size of raw copies (:class:`tenfold.core.blocks.BlockReader`), read when a source
#: starts copying.
_BLOCK = BLOCK

Spec = tuple[np.dtype, tuple[int, ...]]


class RawRange(NamedTuple):
    """Where a tensor's bytes lie exactly as its little-endian C-order value: ``nbytes`` at
    ``offset`` of ``file``, the :class:`~tenfold.core.mapped.MappedFile` its reader holds
    open (the shard's own for a tensor of a multi-file source; never a path opened again),
    with the stored checksum a copy checks on the way (``"algo:hex"``), or None."""

    offset: int
    nbytes: int
    checksum: str | None
    file: MappedFile


class Source:
    """A source file's tensors, read one at a time: ``names``, ``spec(name)`` -> (dtype,
    shape) without reading data, ``get(name)``, ``metadata``, ``sizevars``, ``close()``.

    What a target of the source's own format keeps and no other format has a place for:
    ``native_types`` (name -> element type as the format names it, for a tensor read as a
    wider NumPy type than it is stored in: OINF's packed ``i4``, ``t2`` ... come unpacked as
    int8 / uint8) and ``native_metadata`` (the metadata in the format's own typed form, which
    ``metadata`` gives as plain values)."""

    def __init__(
        self,
        fmt: str,
        names: list[str],
        spec: Callable[[str], Spec],
        get: Callable[[str], Any],
        *,
        metadata: Mapping[str, Any] | None = None,
        sizevars: Mapping[str, int] | None = None,
        close: Callable[[], None] | None = None,
        uninitialized: Mapping[str, tuple[str, tuple[int, ...]]] | None = None,
        native_types: Mapping[str, str] | None = None,
        raw: Callable[[str], RawRange | None] | None = None,
        path: Any = None,
        extras: list[str] | None = None,
        refuse: list[str] | None = None,
        oinf_types: Mapping[str, str] | None = None,
    ) -> None:
        self.fmt = fmt
        #: what the source holds besides tensors and metadata (e.g. FOLD JSON chunks): convert
        #: refuses unless metadata=False says to drop it
        self.extras = list(extras or [])
        #: what no target can hold exactly (e.g. OINF v2 quantization): always refused
        self.refuse = list(refuse or [])
        self.names = names
        self.spec = spec
        self.get = get
        self.metadata = dict(metadata or {})
        self.sizevars = dict(sizevars or {})
        #: tensors declared without data (name -> (dtype as the format names it, shape)),
        #: which only the source's own format holds
        self.uninitialized = dict(uninitialized or {})
        self.native_types = dict(native_types or oinf_types or {})
        self.native_metadata: Any = None
        self._raw = raw
        #: the source's path, for messages (raw copies read the file each :class:`RawRange`
        #: carries, never this path opened again)
        self.path = path
        self._blocks: BlockReader | None = None
        self._close = close
        #: a decode budget for sources that decode (npz): set, every array is charged to it
        self.budget: Any = None
        #: ``stored(name) -> (encoding, checksum algorithm or None)`` of a zTensor 0.1.0
        #: source's tensor: what a faithful zTensor -> zTensor conversion keeps
        self.stored: Callable[[str], tuple[str, str | None]] | None = None
        #: the source's tensors are compressed (FOLD zstd chunks, deflated npz members)
        self.compressed = False
        #: a zTensor source's generation ("0.1.0", "v1", "v2"); None for other formats
        self.generation: str | None = None

    # the names tenfold.sharded still uses for native_types / native_metadata
    @property
    def oinf_types(self) -> dict[str, str]:
        return self.native_types

    @property
    def oinf_meta(self) -> Any:
        return self.native_metadata

    @oinf_meta.setter
    def oinf_meta(self, value: Any) -> None:
        self.native_metadata = value

    def raw(self, name: str) -> RawRange | None:
        """The :class:`RawRange` of tensor ``name`` when its bytes in the source are exactly
        its little-endian C-order bytes (then :meth:`blocks` copies them without mapping the
        file), else None."""
        if self._raw is None:
            return None
        got = self._raw(name)
        if got is not None and not isinstance(got, RawRange):
            raise TypeError(
                f"{self.fmt}: tensor {name!r}: a raw range must name the file it is in "
                f"(a RawRange), got {type(got).__name__}"
            )
        return got

    def drop_raw(self) -> None:
        """No raw copies from here on (:meth:`raw` gives None): every tensor goes through
        ``get``."""
        self._raw = None

    def blocks(self, raw: RawRange) -> Iterator[memoryview]:
        """The bytes of ``raw`` (a range :meth:`raw` gave) in blocks read from the file it
        carries into one reused buffer (each block is valid until the next is requested)."""
        if self._blocks is None:
            self._blocks = BlockReader(_BLOCK)
        return self._blocks.blocks(raw.file, raw.offset, raw.nbytes)

    def subset(self, names: list[str]) -> Source:
        """A shallow copy of this source holding only ``names``: it reads through the same
        callables but owns none of them (its :meth:`close` drops only its own block buffer;
        this source stays for its owner to close)."""
        import copy

        sub = copy.copy(self)
        sub.names = list(names)
        sub._blocks = None
        sub._close = None
        return sub

    def release(self) -> None:
        """Drop the buffer :meth:`blocks` reads into, if any (a later :meth:`blocks` makes
        another); the source stays open."""
        if self._blocks is not None:
            self._blocks.close()
            self._blocks = None

    def close(self) -> None:
        self.release()
        if self._close is not None:
            self._close()
            self._close = None

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reader_source(
    fmt: Format,
    reader: Any,
    *,
    metadata: Mapping[str, Any] | None = None,
    raw: Callable[[str], RawRange | None] | None = None,
    get: Callable[[str], Any] | None = None,
    close: Callable[[], None] | None = None,
    **kw: Any,
) -> Source:
    """The :class:`Source` of an opened ``reader`` of format ``fmt`` (its descriptor), which
    it owns (closing the source closes the reader, also when this fails).

    From the reader protocol (:mod:`tenfold.core.reader`): ``names`` are its keys;
    ``spec(name)`` is ``info(name).np_dtype`` and ``.shape`` (a reader without ``info``, or
    an entry without ``np_dtype``, is asked for the value); ``get(name)`` is
    ``reader[name]`` (open the reader with the options a conversion wants, e.g. views rather
    than copies); raw copies come from ``file_span`` (or ``checked_span``, a range of
    ``reader.file``) and read the file the reader holds open, its stored checksum checked on
    the way; ``metadata`` is the reader's
    where the descriptor keeps file metadata, else none. ``metadata``, ``raw``, ``get`` and
    ``close`` (what closing the source calls: the reader's ``close``) replace those; ``kw``
    are :class:`Source`'s other fields."""
    if close is None:
        close = getattr(reader, "close", None)
    try:
        names = list(reader.keys())
        specs = _specs(reader, names)
        if metadata is None and fmt.metadata != "none":
            metadata = getattr(reader, "metadata", None)
    except BaseException:
        if close is not None:
            close()
        raise

    def spec(n: str) -> Spec:
        got = specs.get(n)
        return got if got is not None else _spec_of(reader[n])

    if raw is None:
        raw = span_raw(reader)
    kw.setdefault("path", getattr(reader, "path", None))
    return Source(fmt.name, names, spec, reader.__getitem__ if get is None else get,
                  metadata=metadata, close=close, raw=raw, **kw)  # fmt: skip


def _specs(reader: Any, names: list[str]) -> dict[str, Spec | None]:
    """``name -> (dtype, shape)`` from the reader's index (None where it does not say)."""
    info = getattr(reader, "info", None)
    out: dict[str, Spec | None] = {}
    for n in names:
        i: Any = None if info is None else info(n)
        dt = getattr(i, "np_dtype", None)
        out[n] = None if dt is None else (np.dtype(dt), tuple(int(d) for d in i.shape))
    return out


def _spec_of(value: Any) -> Spec:
    if not hasattr(value, "dtype"):
        value = np.asarray(value)
    return np.dtype(value.dtype), tuple(int(d) for d in value.shape)


def span_raw(reader: Any) -> Callable[[str], RawRange | None] | None:
    """:meth:`Source.raw` of an opened ``reader``: its ``file_span`` (a range and the file it
    is in, :meth:`tenfold.core.reader.BaseReader.file_span`), else its ``checked_span`` (a
    range of ``reader.file``); None where it has neither."""
    file_span = getattr(reader, "file_span", None)
    if file_span is None:
        checked_span = getattr(reader, "checked_span", None)
        if checked_span is None or getattr(reader, "file", None) is None:
            return None

        def file_span(n: str) -> Any:
            c = checked_span(n)
            return None if c is None else (reader.file, c)

    def raw(n: str) -> RawRange | None:
        got = file_span(n)
        if got is None:
            return None
        file, c = got
        dt = np.dtype(c.span.dtype)
        if dt.byteorder == ">" and dt.itemsize > 1:
            return None
        nbytes = math.prod(c.span.shape) * dt.itemsize
        return RawRange(c.span.offset, nbytes, f"{c.algo}:{c.expected}" if c.algo else None, file)

    return raw

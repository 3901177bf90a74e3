"""What :mod:`tenfold.convert` asks of a format, and what the formats' conversion hooks share.

A format takes part in ``tenfold convert`` through hooks in its descriptor
(:class:`tenfold.registry.Format`), each in its own package (``formats/<name>/_convert.py``):

``convert_source``
    ``source(path, *, limits, label, open_one) -> Source``: the file's tensors, one at a time
    (:class:`tenfold.tensor_source.Source`: :func:`~tenfold.tensor_source.reader_source` over
    the format's reader, plus what only the format knows). ``path`` is a local path or, for a
    remote file, its bytes (a ``uint8`` array; a format that cannot read bytes sets
    :attr:`~tenfold.registry.Format.opens_path`); ``label`` names it in messages;
    ``open_one(path)`` opens another file's source (a sharded index opens its shards with it).
    Without the hook, the source is :func:`~tenfold.tensor_source.reader_source` over the
    reader :func:`tenfold.open` gives.
``convert_fallback``
    ``claims(head, label) -> bool``: a file no format recognised by content is read as this
    format anyway (its own parser then says what is wrong), e.g. by its suffix.
``convert_target``
    ``target(fmt, dst, generation) -> Target``: the :class:`Target` that checks and writes a
    destination of this format. Without the hook the format is no conversion target.
``convert_generation``
    ``generation(dst, value, max_shard_size) -> object | None``: reads ``convert(...,
    zt_generation=value)`` for the format that owns that option (None: its default
    generation); a non-default value for another target is refused.

:class:`Target` holds the rules every target shares, driven by its descriptor: dtypes through
:mod:`tenfold.capabilities`, file metadata by :attr:`~tenfold.registry.Format.metadata` (``none``
refuses any); a format's own rules are methods of its subclass.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .capabilities import check_all, check_checksum_option, option_refusal
from .core.alloc import dense
from .errors import EncodeError, factory
from .tensor_source import RawRange, Source, reader_source

__all__ = [
    "KEEP",
    "Target",
    "WriteOptions",
    "Lazy",
    "RawTensor",
    "raw_or_lazy",
    "checked_blocks",
    "checkable",
    "dict_source",
    "span_source",
    "check_source_sum",
    "meta_refusal",
    "declaration_refusal",
    "source_format",
    "SaveTarget",
    "package_source",
    "generation_option",
]

#: ``checksum`` / ``compress`` value: what the source has (same format), else the default.
KEEP = "keep"


def dict_source(fmt: str, tensors: Mapping[str, Any], **kw: Any) -> Source:
    """A :class:`Source` over a mapping of arrays (or objects with ``dtype`` and ``shape``)."""

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        v = tensors[n]
        if not hasattr(v, "dtype"):
            v = np.asarray(v)
        return np.dtype(v.dtype), tuple(int(d) for d in v.shape)

    return Source(fmt, list(tensors), spec, tensors.__getitem__, **kw)


def span_source(fmt: str, reader: Any, path: Any = None) -> Source:
    """A :class:`Source` over an opened ``reader`` read as a mapping (:func:`dict_source`),
    which it owns: closing the source closes the reader, as does a failure here. Its metadata
    is the reader's; a tensor whose :meth:`~tenfold.core.reader.BaseReader.span` the reader
    gives is copied raw from that byte range of the file the reader holds open (no stored
    checksum to check). ``path`` names the source in messages."""
    try:
        md = reader.metadata
        file = reader.file
    except BaseException:
        reader.close()
        raise

    def raw(n: str) -> RawRange | None:
        span = reader.span(n)
        if span is None:
            return None
        return RawRange(span.offset, math.prod(span.shape) * span.dtype.itemsize, None, file)

    return dict_source(fmt, reader, metadata=md, close=reader.close, raw=raw, path=path)


def source_format(src: Source) -> Any:
    """The registered format of ``src`` (None for a source no format made, e.g. a dict)."""
    from . import registry

    try:
        return registry.get(src.fmt)
    except Exception:
        return None


def generation_option(dst: Any, fmt: Any, value: Any, max_shard_size: Any = None) -> Any:
    """``zt_generation=value`` for a destination ``dst`` of format ``fmt`` (a descriptor), as
    the format that owns the option reads it (its ``convert_generation`` hook): None for its
    default generation. A non-default value for a file of another format is refused
    (:class:`UnsupportedError`), as is any value when no format owns the option."""
    from . import registry

    if value is None:
        return None
    owner = next((f for f in registry.formats() if "convert_generation" in f.hooks), None)
    if owner is None:
        raise factory("tenfold").unsupported(
            os.fspath(dst), field="zt_generation", detail="no format takes this option"
        )
    gen = owner.hook("convert_generation")(dst, value, None)
    if gen is not None and fmt is not owner:
        raise factory("tenfold").unsupported(
            os.fspath(dst),
            message=f"tenfold: {os.fspath(dst)}: --zt-generation (zt_generation) needs a "
            f"{'/'.join(owner.suffixes)} file",
        )
    return owner.hook("convert_generation")(dst, value, max_shard_size)


def meta_refusal(fmt: str, key: str, why: str) -> EncodeError:
    return factory(fmt).encode(
        f"metadata {key!r}",
        message=f"{fmt}: metadata {key!r}: {why}; pass metadata=False (--no-metadata) to drop "
        "metadata",
    )


def declaration_refusal(prefix: str, src: Source) -> EncodeError:
    """A tensor declared without data (``src.uninitialized``), which only its own format
    holds."""
    n = next(iter(src.uninitialized))
    own = source_format(src)
    what = own.description if own is not None else src.fmt
    where = "/".join(own.suffixes) if own is not None else src.fmt
    return factory(src.fmt).encode(
        f"tensor {n!r}",
        message=f"{prefix}: tensor {n!r} has no data (an {what} declaration); only {where} can "
        "hold it",
    )


class _Crc32c:
    """CRC-32C with a hashlib face (``update``, ``hexdigest``)."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: Any) -> None:
        from .core.checksums import crc32c

        self.value = crc32c(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def _hasher(algo: str) -> Any:
    """A new hasher (``update``, ``hexdigest``) of a stored checksum's algorithm."""
    if algo == "crc32c":
        return _Crc32c()
    if algo == "xxh3":
        import xxhash

        return xxhash.xxh3_64()
    import hashlib

    return hashlib.sha256()


#: The stored checksums a raw copy checks on the way (:func:`checked_blocks`).
CHECKED_ON_THE_WAY = ("crc32c", "sha256", "xxh3")


def checkable(stored: str | None) -> bool:
    """Whether a raw copy checks the stored checksum ``stored`` (``"algo:hex"``) on the way:
    none, or one of :data:`CHECKED_ON_THE_WAY`."""
    return stored is None or stored.partition(":")[0] in CHECKED_ON_THE_WAY


def check_source_sum(s: Source, name: str, stored: str | None, got: str | None) -> None:
    """A source tensor copied without decoding is checked against its stored checksum (when
    the copy computed the same algorithm): a mismatch aborts the conversion."""
    if stored is None or got is None:
        return
    algo, _, want = stored.partition(":")
    if want.lower() != got.lower():
        raise factory(s.fmt).integrity(
            f"tensor {name!r}",
            field="checksum",
            expected=stored,
            got=f"{algo}:{got}",
            message=f"{s.fmt}: tensor {name!r}: checksum mismatch; expected {stored}, got "
            f"{algo}:{got}",
        )


def checked_blocks(s: Source, name: str, raw: RawRange) -> Iterator[memoryview]:
    """The bytes of tensor ``name``'s range ``raw`` (:meth:`Source.blocks`), its stored
    checksum (one :func:`checkable` names) computed on the way and checked after the last
    block: a mismatch raises then (the writers are atomic: no file is left)."""
    stored = raw.checksum
    if stored is None:
        yield from s.blocks(raw)
        return
    algo = stored.partition(":")[0]
    if algo not in CHECKED_ON_THE_WAY:
        raise ValueError(f"{s.fmt}: tensor {name!r}: {algo} is not checked on the way")
    h = _hasher(algo)
    for block in s.blocks(raw):
        h.update(block)
        yield block
    check_source_sum(s, name, stored, h.hexdigest())


class Lazy:
    """A source tensor fetched only when a writer asks for it (``np.asarray``); each fetch
    credits ``share`` of its bytes to the progress bar ``bar`` (a writer that reads every
    tensor twice, like WTXT's hash-then-write, passes ``share=0.5``)."""

    def __init__(self, s: Source, name: str, bar: Any = None, share: float = 1.0) -> None:
        self.s, self.name, self.bar, self.share = s, name, bar, share
        self.dtype, self.shape = s.spec(name)
        self.ndim = len(self.shape)
        self._left = math.prod(self.shape) * self.dtype.itemsize  # bytes not yet credited

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = np.asarray(dense(self.s.get(self.name), self.name))
        if self.bar is not None:
            credit = min(self._left, math.ceil(a.nbytes * self.share))
            self._left -= credit
            self.bar.update(credit)
        return a if dtype is None else a.astype(dtype)


class RawTensor(Lazy):
    """A tensor whose bytes in the source file are its payload as they are (a plain
    little-endian integer or float type, :meth:`Source.raw`): a writer that knows
    :meth:`raw_pieces` copies them in blocks (:meth:`Source.blocks`, as the zTensor target
    does: no map, nothing left resident), a stored checksum checked on the way; ``np.asarray``
    still gives the value, for a writer that does not."""

    def __init__(self, s: Source, name: str, bar: Any, raw: RawRange):
        super().__init__(s, name, bar)
        self.raw = raw

    def raw_pieces(self) -> Iterator[memoryview]:
        """The bytes in blocks, each valid until the next is asked for; a checksum mismatch
        raises after the last (the writers are atomic: no file is left)."""
        yield from checked_blocks(self.s, self.name, self.raw)
        if self.bar is not None:
            self.bar.update(self.raw.nbytes)


def raw_or_lazy(s: Source, name: str, bar: Any = None) -> Lazy:
    """:class:`RawTensor` where ``s`` has the tensor's bytes as a plain little-endian integer
    or float type (and a stored checksum, if any, that is :func:`checkable`), else
    :class:`Lazy`."""
    raw = s.raw(name)
    dt = s.spec(name)[0]
    plain = dt.kind in "iuf" and dt.isnative and sys.byteorder == "little"
    if raw is None or not plain or not checkable(raw.checksum):
        return Lazy(s, name, bar)
    return RawTensor(s, name, bar, raw)


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """How :meth:`Target.write` writes: the resolved ``checksum`` and ``compress`` (see
    :meth:`Target.resolve`), zstd ``level`` and ``threads``, ``fsync``, and ``total`` (the
    bytes of every tensor, for a writer that preallocates)."""

    checksum: str | None
    compress: str | None
    level: int = 3
    threads: int = 0
    fsync: bool = True
    total: int = 0


class Target:
    """A conversion target: what :func:`tenfold.convert.convert` checks before writing
    anything, then how it writes. A format's ``convert_target`` hook gives an instance (of
    a subclass that implements :meth:`write`, and overrides what its format does its own
    way)."""

    #: whether ``max_shard_size`` (shards plus an index) applies
    shards = True
    #: the ``compress`` values it honours besides None (no compression); the first is what
    #: ``"keep"`` gives a compressed source of the same format
    compressions: tuple[str, ...] = ()

    def __init__(self, fmt: Any, dst: Any, generation: Any = None) -> None:
        self.fmt = fmt
        self.name: str = fmt.name
        self.dst = dst
        self.generation = generation

    def check_options(self, checksum: str | None, compress: str | None) -> None:
        """Refuse an option value given explicitly (not ``"keep"``) that this target cannot
        honour, before the source is opened: a ``checksum`` where the format has no
        per-tensor checksum field, a ``compress`` it does not write."""
        if checksum != KEEP:
            check_checksum_option(self.fmt, checksum)
        if compress in (KEEP, None) or compress in self.compressions:
            return
        what = self.fmt.description
        has = f"compresses with {' or '.join(self.compressions)} only" if self.compressions \
            else "stores tensors uncompressed"  # fmt: skip
        can = " or ".join(map(repr, self.compressions + (None,)))
        raise option_refusal(self.fmt, "compress", compress, f"{what} {has}; expected {can}")

    def check(self, src: Source) -> None:
        """Refuse what the target cannot hold, before anything is written: dtypes
        (:func:`tenfold.capabilities.check_all`), tensors declared without data."""
        check_all(self.name, ((n, src.spec(n)[0]) for n in src.names))
        if src.uninitialized:
            raise declaration_refusal(self.name, src)

    def metadata(self, src: Source) -> dict[str, Any]:
        """The file metadata the target receives from ``src`` (:class:`EncodeError` when some
        cannot go): none where the descriptor keeps none, string values from other formats."""
        fmt = self.name
        if src.sizevars:
            own = source_format(src)
            what = own.description if own is not None else src.fmt
            raise meta_refusal(
                fmt, next(iter(src.sizevars)), f"{what} sizevars have no place in {fmt}"
            )
        if not src.metadata:
            return {}
        if self.fmt.metadata == "none":
            raise meta_refusal(fmt, next(iter(src.metadata)), f"{fmt} has no file metadata")
        for k, v in src.metadata.items():
            if not isinstance(v, str):
                raise meta_refusal(fmt, k, f"value of type {type(v).__name__}; only string "
                                   "metadata converts between formats")  # fmt: skip
            self.check_key(k)
        return dict(src.metadata)

    def check_key(self, key: str) -> None:
        """Refuse a metadata key the format reserves."""

    def resolve(
        self, src: Source, checksum: str | None, compress: str | None
    ) -> tuple[str | None, str | None]:
        """Resolve ``"keep"``: a source of the target's format keeps its compression; else
        crc32c and no compression."""
        if checksum == KEEP:
            checksum = "crc32c"
        if compress == KEEP:
            same = src.fmt == self.name and src.compressed and self.compressions
            compress = self.compressions[0] if same else None
        return checksum, compress

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        """Write every tensor of ``s`` and the metadata ``md`` to ``dst`` (atomically: no file
        at ``dst`` on any error), crediting the bytes written to the progress ``bar``."""
        raise NotImplementedError(f"tenfold: no writer for {self.name} at {os.fspath(dst)}")


class SaveTarget(Target):
    """The target of a format without a ``convert_target`` hook: its package's ``save``
    writes the tensors (fetched one at a time as it asks for them) and, when there is some,
    the metadata."""

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        lazy = {n: Lazy(s, n, bar) for n in s.names}
        extra = {"metadata": md} if md else {}
        self.fmt.load_module().save(dst, lazy, **extra)


def package_source(fmt: Any, path: Any) -> Source:
    """The source of a format without a ``convert_source`` hook: the reader
    :func:`tenfold.open` gives (:func:`~tenfold.tensor_source.reader_source`)."""
    return reader_source(fmt, fmt.open_reader(path))

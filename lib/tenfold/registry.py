"""The registry of formats: one :class:`Format` descriptor per format, collected lazily.

Every format tenfold reads or writes is one package plus one registration. Its descriptor says
how its files are recognised (magic bytes, or a ``sniff`` for formats without a fixed magic),
which suffixes choose it for a new file, which element types it holds as a target, what file
metadata and per-tensor checksums it keeps, and where its code is: the package with ``open``,
``load``, ``save``, ``inspect`` and ``verify`` (the signatures of :mod:`tenfold.ztensor`) and
named *hooks* (``"module:attribute"`` strings, imported on first use) for what the layers above
ask of a format: a lean open of an already-open descriptor, the conversion source and target,
the command-line subcommands.

Detection, :mod:`tenfold.capabilities`, the front door (:mod:`tenfold._dispatch`),
:mod:`tenfold.convert`, the CLI and the frameworks ask the registry; none of them names a
format. Detection is by content (magic bytes), never by suffix; suffixes only choose the format
a *new* file is written in.

The built-in formats register themselves from their packages' ``_format.py`` (light modules:
constants and the descriptor, nothing heavy), imported the first time the registry is asked
anything; then the ``tenfold.formats`` entry points of installed distributions. A format
defined anywhere else registers with :func:`register` (see ``docs/writing-a-format.md``)::

    import tenfold.registry as reg
    reg.register(reg.Format(name="myfmt", description="My format", suffixes=(".my",),
                            magics=(b"MYFMT\\0",), package="mypkg.myfmt",
                            dtypes=frozenset({"float32"})))
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType
from typing import Any

from .errors import FormatError, factory

__all__ = [
    "Format",
    "NATIVE_DTYPES",
    "register",
    "unregister",
    "formats",
    "get",
    "targets",
    "detect_bytes",
    "detect",
    "detect_dir",
    "name_of_head",
    "by_suffix",
    "module_for",
    "open_local",
    "open_remote",
    "sniff_sharded",
    "FORMATS",
    "SNIFF_BYTES",
]

#: NumPy's own element types (canonical names) that every tensor format but WTXT holds: what
#: the formats' ``dtypes`` start from.
NATIVE_DTYPES = frozenset(
    "float64 float32 float16 int64 int32 int16 int8 uint64 uint32 uint16 uint8 bool".split()
)

#: What a format keeps as file metadata: nothing, ``str -> str`` (safetensors' header),
#: JSON values, or any value its encoding holds exactly (CBOR, OINF's typed metadata).
METADATA_KINDS = ("none", "str", "json", "any")
#: What ``tenfold.save(..., checksum=)`` does for a format: hand it to the writer, refuse an
#: explicit one (no per-tensor checksum field), or ignore it (the format checks on its own).
SAVE_CHECKSUM = ("pass", "refuse", "ignore")


@dataclasses.dataclass(frozen=True)
class Format:
    """What a format is and can do; see the module doc.

    Attributes
    ----------
    name
        Short name (``"ztensor"``): what :func:`tenfold.detect` returns.
    description
        One line for people (``"zTensor 0.1.0 / v1 / v2"``).
    suffixes
        Suffixes that choose this format for a new file (lower case, with the dot).
    magics
        A file of this format starts with one of these.
    sniff
        ``sniff(head) -> bool`` for a format without a fixed magic (given the first
        :data:`SNIFF_BYTES` bytes); tried after every format's magic.
    near_miss
        ``near_miss(head, where, named) -> FormatError | None``, asked of a file no format
        recognised: the error to give instead of "unknown format" when ``head`` (the file's
        first bytes, all of them when fewer than :data:`SNIFF_BYTES`) is one of this format's
        files, damaged or cut (a safetensors header length out of bounds); ``named`` is true
        when the file's suffix is one of this format's.
    sniff_dir
        ``sniff_dir(path) -> bool`` for a format whose files are directories (a distributed
        checkpoint): :func:`detect` and :func:`open_local` ask it of a local directory; its
        reader takes the path (``opens_path``).
    sniff_url_dir
        ``sniff_url_dir(url, storage_options) -> bool``: the same question of an fsspec URL
        that names a directory (an object prefix): :func:`detect` and ``tenfold.open`` ask
        it when a URL is no file; its reader takes the URL and ``storage_options``.
    package
        Module with ``open``, ``load``, ``save``, ``inspect`` and ``verify``.
    dtypes
        Canonical dtype names (:func:`tenfold.core.dtypes.canonical`) it holds as a write
        target; empty for a format tenfold does not write tensors to.
    metadata
        What file metadata it keeps (:data:`METADATA_KINDS`).
    checksums
        Per-tensor checksum algorithms its writer stores (``tenfold.save(checksum=)``).
    save_checksum
        What ``tenfold.save(checksum=)`` does (:data:`SAVE_CHECKSUM`).
    tensors
        Whether its files hold tensors (``False``: a TARIDX index holds tar samples).
    holds
        What its files hold when not tensors (for the messages that say so).
    items
        What its entries are called in reports, plural (``"tensors"``; a TARIDX index's are
        ``"samples"``), e.g. by ``tenfold diff``.
    index_at_end
        Its index sits at the end of the file: a remote object named with one of its
        suffixes is fetched from its tail first (one request saved).
    opens_path
        Its reader takes the path itself, not an opened source (a sharded index, which opens
        other files relative to it).
    follows_links
        Its reader opens other files that the file names (shards) under the symlink rule of
        :mod:`tenfold.core.links`, and takes ``trust_links=``; the front door drops that option
        for the other formats (a one-file format has no link to follow).
    checks_optional
        Its reader takes ``verify_checksums=`` (its checksums may be skipped, or it passes the
        option on to the files it opens); for the other formats the front door drops that
        option: a format without checksums has nothing to skip, and FOLD and WTXT readers
        check theirs always (``tenfold.load(path, verify_checksums=False)`` works for any
        file, and never turns off a check a format cannot do without).
    url_suffixes
        A URL whose name ends with one of these is opened as this format without a first
        request to recognise it (a sharded index: ``.index.json``).
    hooks
        ``name -> "module:attribute"`` (see :meth:`hook`; the names in use are listed below).

    Notes
    -----
    The hooks in use (a format has those it needs):

    ``reader``
        ``reader(source, **options)``: what :func:`tenfold.open` gives (default: the
        package's ``open``), for a format whose own ``open`` gives something else (FOLD's
        gives its chunks; its ``reader`` the tensors, as ``load`` does).
    ``open_fd``
        a lean open of an already-open descriptor (zTensor: :func:`tenfold.ztensor.open_fd`).
    ``cli``
        ``register(subparsers)``: the format's own ``tenfold`` subcommands.
    ``metadata``
        ``metadata(source) -> dict``: the file metadata ``tenfold inspect`` lists.
    ``version``
        ``version(source) -> str``: the version or generation of the file that ``tenfold
        inspect`` shows (zTensor: ``"0.1.0"``, ``"v1"``, ``"v2"``).
    ``remote_source``
        ``remote_source(opened, url)``: what ``tenfold inspect`` / ``verify`` read of a remote
        file, or a refusal.
    ``remote_input``
        ``take(mf)``: what its ``inspect`` / ``verify`` take for a remote object when not
        the opened source (WTXT: its bytes).
    ``convert_source``
        ``source(path, *, limits, label, open_one) -> tenfold.tensor_source.Source``: its
        tensors for ``tenfold convert`` (``path`` may be a remote file's bytes).
    ``convert_fallback``
        ``claims(head, label) -> bool``: read a file no magic matched as this format (so
        that its parser says what is wrong).
    ``convert_target``
        ``target(fmt, dst, generation) -> tenfold.conversion.Target``: checks and writes a
        conversion's destination (without it: the package's ``save``).
    ``convert_generation``
        ``generation(dst, value, max_shard_size)``: reads ``convert(zt_generation=)`` for
        the format that owns that option.
    ``generation_dtypes``
        ``generation_dtypes() -> {generation: dtypes}``: the element types of each
        generation it writes other than its default (keys as ``convert_generation`` reads
        the option), for :mod:`tenfold.capabilities`.

    :mod:`tenfold.conversion` describes the ``convert_*`` hooks in full.
    """

    name: str
    description: str
    suffixes: tuple[str, ...] = ()
    magics: tuple[bytes, ...] = ()
    sniff: Callable[[bytes], bool] | None = None
    near_miss: Callable[[bytes, str, bool], FormatError | None] | None = None
    sniff_dir: Callable[[str], bool] | None = None
    sniff_url_dir: Callable[[str, dict[str, Any] | None], bool] | None = None
    package: str = ""
    dtypes: frozenset[str] = frozenset()
    metadata: str = "none"
    checksums: tuple[str, ...] = ()
    save_checksum: str = "refuse"
    tensors: bool = True
    holds: str = "tensors"
    items: str = "tensors"
    index_at_end: bool = False
    opens_path: bool = False
    follows_links: bool = False
    checks_optional: bool = False
    url_suffixes: tuple[str, ...] = ()
    hooks: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"registry: format name {self.name!r} is not an identifier")
        if self.metadata not in METADATA_KINDS:
            raise ValueError(f"registry: {self.name}: metadata {self.metadata!r}")
        if self.save_checksum not in SAVE_CHECKSUM:
            raise ValueError(f"registry: {self.name}: save_checksum {self.save_checksum!r}")
        if any(not s.startswith(".") or s != s.lower() for s in self.suffixes):
            raise ValueError(f"registry: {self.name}: suffixes must be '.lower': {self.suffixes}")
        object.__setattr__(self, "hooks", MappingProxyType(dict(self.hooks)))
        object.__setattr__(self, "dtypes", frozenset(self.dtypes))

    # the names the table of formats had (kept for the callers that read them)
    @property
    def module(self) -> str:
        return self.package

    def load_module(self) -> ModuleType:
        """The package (imported now)."""
        return importlib.import_module(self.package)

    def matches(self, head: bytes) -> bool:
        """Whether ``head`` (a file's first bytes) starts like a file of this format."""
        if self.magics and head.startswith(self.magics):
            return True
        return self.sniff is not None and bool(self.sniff(head))

    def hook(self, name: str) -> Any:
        """The hook ``name`` (imported now), or None when the format has none."""
        where = self.hooks.get(name)
        if where is None:
            return None
        module, _, attr = where.partition(":")
        return getattr(importlib.import_module(module), attr)

    def open_reader(self, source: Any, **options: Any) -> Any:
        """The reader :func:`tenfold.open` gives for ``source`` (a path, buffer or opened
        :class:`~tenfold.core.mapped.MappedFile`): the ``reader`` hook's, else the package's
        ``open``."""
        opener = self.hook("reader") or self.load_module().open
        return opener(source, **options)

    def holds_dtype(self, name: str | None) -> bool:
        """Whether a tensor of canonical dtype ``name`` can be written to this format."""
        return name is not None and name in self.dtypes


#: The built-in formats' descriptor modules, in detection order (magic bytes are unique, so
#: the order matters only between sniffs).
_BUILTIN = (
    "tenfold.formats.ztensor._format",
    "tenfold.formats.oinf._format",
    "tenfold.formats.fold._format",
    "tenfold.formats.wtxt._format",
    "tenfold.formats.taridx._format",
    "tenfold.formats.safetensors._format",
    "tenfold.formats.npz._format",
    "tenfold.formats.torchpickle._format",
    "tenfold.formats.onnx._format",
    "tenfold.formats.hdf5._format",
    "tenfold.formats.gguf._format",
    "tenfold._sharded_format",
    "tenfold._dcp_format",
)
#: The entry-point group through which installed distributions add formats.
ENTRY_POINTS = "tenfold.formats"

_REGISTRY: dict[str, Format] = {}
_LOCK = threading.RLock()
_LOADED = False


def register(fmt: Format, *, replace: bool = False) -> Format:
    """Add ``fmt`` to the registry (returns it). A second format of the same name, or a magic,
    or a suffix another format already has, is refused unless ``replace``."""
    if not isinstance(fmt, Format):
        raise TypeError(f"registry.register: expected a Format, got {type(fmt).__name__}")
    with _LOCK:
        for other in _REGISTRY.values():
            if other.name == fmt.name:
                if not replace:
                    raise ValueError(f"registry: format {fmt.name!r} is registered already")
                continue
            clash = set(other.magics) & set(fmt.magics) or set(other.suffixes) & set(fmt.suffixes)
            if clash and not replace:
                raise ValueError(
                    f"registry: format {fmt.name!r} shares {sorted(clash)!r} with {other.name!r}"
                )
        _REGISTRY[fmt.name] = fmt
    return fmt


def unregister(name: str) -> Format | None:
    """Remove the format ``name`` (returns it, or None when there was none)."""
    _load()
    with _LOCK:
        return _REGISTRY.pop(name, None)


def _load() -> None:
    """Import the built-in descriptors and the entry points once."""
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        order = [importlib.import_module(m).FORMAT.name for m in _BUILTIN]
        # detection order is _BUILTIN's, whatever order the modules registered in (one may
        # import another's constants), then any registered before this first question
        rest = {k: v for k, v in _REGISTRY.items() if k not in order}
        builtin = {k: _REGISTRY[k] for k in order}
        _REGISTRY.clear()
        _REGISTRY.update(builtin)
        _REGISTRY.update(rest)
        _LOADED = True  # before the entry points: one may ask the registry while loading
        _load_entry_points()


def _load_entry_points() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        got = ep.load()
        if isinstance(got, Format) and got.name not in _REGISTRY:
            register(got)


def formats() -> list[Format]:
    """Every registered format, in detection order (built-ins first)."""
    _load()
    with _LOCK:
        return list(_REGISTRY.values())


def get(name: str) -> Format:
    """The format called ``name`` (:class:`UnsupportedError` naming the known ones if none)."""
    _load()
    fmt = _REGISTRY.get(name)
    if fmt is None:
        known = ", ".join(_REGISTRY)
        raise factory("tenfold").unsupported(
            f"format {name!r}", detail="unknown format", expected=f"one of {known}", got=name
        )
    return fmt


def targets() -> list[Format]:
    """The formats tenfold writes tensors to (those with dtypes)."""
    return [f for f in formats() if f.dtypes]


class _Formats:
    """``FORMATS``: the registered formats as a live sequence (the old table's name)."""

    def __iter__(self) -> Any:
        return iter(formats())

    def __len__(self) -> int:
        return len(formats())

    def __getitem__(self, i: int) -> Format:
        return formats()[i]


FORMATS = _Formats()

#: Bytes read from the start of a file to recognise it.
SNIFF_BYTES = 512


def sniff_sharded(head: bytes) -> bool:
    """Whether ``head`` starts like a sharded checkpoint's index (a JSON object naming
    ``weight_map`` or ``metadata``)."""
    text = head.lstrip()
    return text[:1] == b"{" and (b'"weight_map"' in text or b'"metadata"' in text)


def detect_bytes(head: bytes) -> Format | None:
    """The format whose magic ``head`` starts with (magics first, then sniffs), or None."""
    fmts = formats()
    for fmt in fmts:
        if fmt.magics and head.startswith(fmt.magics):
            return fmt
    for fmt in fmts:
        if fmt.sniff is not None and fmt.sniff(head):
            return fmt
    return None


def detect_dir(path: str | os.PathLike[str]) -> Format | None:
    """The format whose ``sniff_dir`` claims the local directory ``path``, or None (also when
    ``path`` is no directory)."""
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        return None
    return next((f for f in formats() if f.sniff_dir is not None and f.sniff_dir(os.fspath(path))),
                None)  # fmt: skip


def detect_url_dir(url: str, storage_options: dict[str, Any] | None = None) -> Format | None:
    """The format whose ``sniff_url_dir`` claims the fsspec URL ``url`` (a directory, or an
    object prefix), or None."""
    return next(
        (
            f
            for f in formats()
            if f.sniff_url_dir is not None and f.sniff_url_dir(url, storage_options)
        ),
        None,
    )


def detect(path: str | os.PathLike[str]) -> str:
    """Name of the format of the file at ``path`` (by content).

    Raises :class:`FormatError` when no known format matches. An fsspec URL or file is
    recognised from its first block; a directory by the formats' ``sniff_dir``.
    """
    from .core.mapped import open_regular  # never blocks on a FIFO; refuses non-files
    from .core.source import is_remote

    if is_remote(path):
        try:
            name, mf = open_remote(path, tail_first=False)  # by the head, whatever the suffix
        except IsADirectoryError:
            owner = detect_url_dir(path) if isinstance(path, str) else None
            if owner is None:
                raise
            return owner.name
        mf.close()
        return name
    in_dir = detect_dir(path)
    if in_dir is not None:
        return in_dir.name

    with os.fdopen(open_regular(path), "rb") as f:
        head = f.read(SNIFF_BYTES)
    return name_of_head(head, path)


def _unknown(path: Any, head: bytes) -> FormatError:
    if not head:  # the message the CLI gives too
        from .core.bounds import empty_file

        return empty_file(path)
    where = os.fspath(path) if isinstance(path, (str, os.PathLike)) else str(path)
    for f in formats():  # a file shorter than the magic it starts with: cut, not unknown
        magic = next((m for m in f.magics if len(head) < len(m) and m.startswith(head)), None)
        if magic is not None:
            return factory("tenfold").truncated(  # the registry's finding: no format read it
                where,
                detail=f"truncated: the file has {len(head)} bytes; it starts like the "
                f"{len(magic)}-byte magic of a {f.description} file",
                expected=f">= {len(magic)} bytes",
                got=len(head),
            )
    near = _near_miss(head, where)
    if near is not None:
        return near
    known = ", ".join(f.name for f in formats())
    return factory("tenfold").format(
        where,
        detail="unknown format",
        expected=f"the magic of one of {known}",
        got=head[:8],
    )


def _near_miss(head: bytes, where: str) -> FormatError | None:
    """What a format says of a file it almost recognises (:attr:`Format.near_miss`), the
    formats the file's suffix names asked first."""
    low = where.lower()
    named = [f for f in formats() if any(low.endswith(x) for x in f.suffixes)]
    for f in named + [f for f in formats() if f not in named]:
        err = f.near_miss(head, where, f in named) if f.near_miss is not None else None
        if err is not None:
            return err
    return None


def name_of_head(head: bytes, path: Any) -> str:
    """The format whose magic ``head`` (a file's first bytes) starts with; :class:`FormatError`
    naming ``path`` otherwise."""
    fmt = detect_bytes(head)
    if fmt is None:
        raise _unknown(path, head)
    return fmt.name


def open_local(path: str | os.PathLike[str], *, mmap: bool = True) -> tuple[str, Any]:
    """Open a local file once: ``(format name, opened source)``, the format decided by the
    opened file's first bytes. The source (a :class:`~tenfold.core.mapped.MappedFile`, or a
    ``pread`` source with ``mmap=False``) is handed to the format's reader as it is, so that
    the file is opened, checked and mapped once. A format whose reader takes the path
    (:attr:`Format.opens_path`) gives ``(name, None)``, as does a directory a format claims
    (:func:`detect_dir`).
    """
    from .core.source import open_file

    in_dir = detect_dir(path)
    if in_dir is not None:
        return in_dir.name, None

    mf = open_file(path, fmt="tenfold", mmap=mmap)
    try:
        name = name_of_head(mf.bytes(0, min(SNIFF_BYTES, mf.size), "head"), path)
    except BaseException:
        mf.close()
        raise
    if get(name).opens_path:
        mf.close()
        return name, None
    return name, mf


def open_remote(
    source: Any, *, storage_options: dict[str, Any] | None = None, tail_first: bool | None = None
) -> tuple[str, Any]:
    """Open an fsspec URL or file for reading: ``(format name, opened source)``.

    The format is still decided by content. Which end of the object is fetched at open is
    guessed from the suffix: the index of a format with :attr:`Format.index_at_end` sits at
    its end, so its last block is fetched and the magic check rides on the first data request
    (one request saved); anything else gets its first block.
    """
    from .core.source import open_file

    guess = None
    if tail_first is None:
        name = source if isinstance(source, str) else str(getattr(source, "path", ""))
        low = name.split("?", 1)[0].lower()
        guess = next(
            (f for f in formats() if f.index_at_end and f.suffixes and low.endswith(f.suffixes)),
            None,
        )
        tail_first = guess is not None
    mf = open_file(source, fmt="tenfold", storage_options=storage_options, tail_first=tail_first)
    try:
        if mf.defer_head and guess is not None:
            return guess.name, mf
        head = mf.bytes(0, min(SNIFF_BYTES, mf.size), "head")
        fmt = detect_bytes(head)
        if fmt is None:
            raise _unknown(mf.path, head)
    except BaseException:
        mf.close()
        raise
    return fmt.name, mf


def by_suffix(path: str | os.PathLike[str]) -> Format:
    """The format a new file at ``path`` is written in, chosen by its suffix."""
    name = os.fspath(path).lower()
    for fmt in formats():
        if fmt.suffixes and name.endswith(fmt.suffixes):
            return fmt
    known = ", ".join(s for f in formats() for s in f.suffixes)
    raise factory("tenfold").unsupported(
        os.fspath(path),
        detail="unknown suffix",
        expected=f"one of {known}",
        got=os.path.splitext(name)[1] or "no suffix",
    )


def module_for(name: str) -> ModuleType:
    """The package of the format ``name`` (imported now)."""
    return get(name).load_module()

"""How :func:`tenfold.open`, :func:`tenfold.load` and :func:`tenfold.save` reach a format.

The single-file part of the front door, below both the package and :mod:`tenfold.sharded` (whose
shards are single files), so that neither imports the other. Imports are deferred: the package
imports this module at start-up and must stay light.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .errors import FormatError, factory


class _DefaultChecksum(str):
    """``save``'s default ``checksum``: equal to ``"crc32c"`` but never the same object as a
    ``"crc32c"`` a caller gives (Python interns that literal, so a plain string default would
    be indistinguishable from it)."""

    __slots__ = ()


#: ``save``'s default per-tensor checksum (compared by identity: an explicit ``"crc32c"`` is
#: an explicit choice, refused by formats without a checksum field and by a generation that
#: has no checksum option; the default is simply not applicable there)
DEFAULT_CHECKSUM = _DefaultChecksum("crc32c")


def open_any(path: Any, options: dict[str, Any], load: bool = False, copy: bool = False) -> Any:
    """The reader (or, with ``load``, the tensors) of a local path or a remote URL/file."""
    from .core.source import is_remote

    if is_remote(path):
        return open_remote_path(path, options, load, copy)
    return open_local_path(path, options, load, copy)


def open_remote_path(
    path: Any, options: dict[str, Any], load: bool = False, copy: bool = False
) -> Any:
    from .registry import get, open_remote

    low = path.split("?", 1)[0].lower() if isinstance(path, str) else ""
    by_name = next((f for f in _formats() if f.url_suffixes and low.endswith(f.url_suffixes)), None)
    if by_name is not None:  # a sharded index: fetched once by its reader, shards lazily
        if load:
            return by_name.load_module().load(path, copy=copy, **options)
        return by_name.open_reader(path, **options)
    so = options.pop("storage_options", None)
    try:
        name, mf = open_remote(path, storage_options=so)
    except IsADirectoryError:  # a prefix: a format of directories may own it
        from .registry import detect_url_dir

        owner = detect_url_dir(path, so) if isinstance(path, str) else None
        if owner is None:
            raise
        if so is not None:
            options = {**options, "storage_options": so}
        if load:
            return owner.load_module().load(path, copy=copy, **options)
        return owner.open_reader(path, **options)
    guessed = mf.defer_head
    if get(name).opens_path and so is not None:  # its files are fetched with the same options
        options = {**options, "storage_options": so}
    try:
        return read_with(get(name), mf, options, load, copy)
    except FormatError:
        mf.close()
        if not guessed:
            raise
        # the suffix named a format whose index is at the end, but the tail holds no index:
        # decide by the head (a misnamed file, or a damaged footer its reader reports)
        name2, mf2 = open_remote(path, storage_options=so, tail_first=False)
        return read_with(get(name2), mf2, options, load, copy)
    except BaseException:
        mf.close()
        raise


def _formats() -> list[Any]:
    from .registry import formats

    return formats()


#: bytes read from the end of a local file as it is opened: what a format's ``open_fd`` hook
#: needs (zTensor's: a v2 footer and manifest, or all of a smaller file)
TAIL_READ = 16 << 10


def open_local_path(
    path: Any, options: dict[str, Any], load: bool = False, copy: bool = False
) -> Any:
    """The file opened once (detection and reading share the descriptor and the map)."""
    if options.get("mmap", True) and isinstance(path, (str, os.PathLike)):
        got = _open_local_ends(path, options, load, copy)
        if got is not _GENERAL:
            return got
    from .registry import get, open_local

    name, mf = open_local(path, mmap=options.get("mmap", True))
    if mf is None:  # a sharded index: its reader takes the path
        if load:
            return get(name).load_module().load(path, copy=copy, **options)
        return get(name).open_reader(path, **options)
    return read_with(get(name), mf, options, load, copy)


#: what :func:`_open_local_ends` gives when the general open must answer (not a regular file,
#: which it names; a format whose reader takes the path)
_GENERAL = object()
#: what the local open needs, imported on its first use (this module stays light to import)
_LOCAL: tuple[Any, ...] | None = None


def _local() -> tuple[Any, ...]:
    global _LOCAL
    if _LOCAL is None:
        from . import _kernels
        from .core.mapped import MappedFile
        from .registry import SNIFF_BYTES, get, name_of_head

        fmap = _kernels.load("fmap")
        _LOCAL = (fmap, SNIFF_BYTES, name_of_head, get, MappedFile)
    return _LOCAL


def _open_local_ends(path: Any, options: dict[str, Any], load: bool, copy: bool) -> Any:
    """:func:`open_local_path` of a path mapped in memory: one ``fmap.open_ends`` call opens
    it and reads both ends; a format with an ``open_fd`` hook gets the descriptor and both
    ends (zTensor's lean v2 open needs the tail), any other format a
    :class:`~tenfold.core.mapped.MappedFile` of the same descriptor."""
    fmap, sniff, name_of_head, get, mapped_file = _local()
    ends = fmap.open_ends(path, sniff, TAIL_READ)
    if ends is None:  # not a regular file
        return _GENERAL
    fd, size, head, tail = ends
    try:
        fmt = get(name_of_head(head, path))
        open_fd = fmt.hook("open_fd")
    except BaseException:
        os.close(fd)
        raise
    if open_fd is not None:
        if not load:
            return open_fd(path, fd, size, head, tail, **options)
        with open_fd(path, fd, size, head, tail, **{**options, "copy": copy}) as r:
            return r.read_all()
    if fmt.opens_path:
        os.close(fd)
        return _GENERAL
    mf = mapped_file(path, fmt="tenfold", fd=fd, size=size, head=head)
    return read_with(fmt, mf, options, load, copy)


def read_with(fmt: Any, mf: Any, options: dict[str, Any], load: bool, copy: bool) -> Any:
    """``load`` or :meth:`~tenfold.registry.Format.open_reader` of format ``fmt`` over the
    opened ``mf`` (closed when that fails)."""
    if not fmt.follows_links and "trust_links" in options:  # nothing to follow: not an error
        options = {k: v for k, v in options.items() if k != "trust_links"}
    if not fmt.checks_optional and "verify_checksums" in options:  # see Format.checks_optional
        options = {k: v for k, v in options.items() if k != "verify_checksums"}
    try:
        if load:
            return fmt.load_module().load(mf, copy=copy, **options)
        return fmt.open_reader(mf, **options)
    except BaseException:
        mf.close()
        raise


def _check_compress(path: Any, fmt: Any, gen: Any, options: dict[str, Any]) -> None:
    """``save(..., compress=)``: refused (an :class:`EncodeError`, before anything is written)
    where the format's conversion target does not write that value; dropped where it is None
    and the format compresses nothing (nothing to turn off)."""
    from .conversion import KEEP, SaveTarget

    make = fmt.hook("convert_target")
    target = SaveTarget(fmt, path, gen) if make is None else make(fmt, path, gen)
    target.check_options(KEEP, options["compress"])
    if not target.compressions:
        del options["compress"]


def save_one(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    format: str | None,  # noqa: A002
    *,
    checksum: str | None = DEFAULT_CHECKSUM,
    **options: Any,
) -> None:
    """:func:`tenfold.save` of one file (no sharding)."""
    from .registry import by_suffix, get

    fmt = get(format) if format is not None else by_suffix(path)
    gen = None
    if "zt_generation" in options:  # read by the format that owns it, passed as generation=
        from .conversion import generation_option

        gen = generation_option(path, fmt, options.pop("zt_generation"))
        if gen is not None:
            options["generation"] = gen
    if fmt.dtypes:  # lossless or loud, whatever the format's own writer checks
        from .capabilities import check_tensors

        check_tensors(fmt.name, tensors, gen)
    if "compress" in options:
        _check_compress(path, fmt, gen, options)
    if fmt.save_checksum == "pass":
        # the default is the default generation's; another generation has its own default
        # (an explicit checksum goes to the format, which refuses what it cannot honour)
        if checksum is not DEFAULT_CHECKSUM:
            options["checksum"] = checksum
        elif gen is None and "generation" not in options:  # (or given to the format itself)
            options["checksum"] = str(checksum)
    elif checksum is not DEFAULT_CHECKSUM:
        from .capabilities import check_checksum_option

        check_checksum_option(fmt, checksum)
    if fmt.metadata == "none" and "metadata" in options:
        if options["metadata"]:
            key = next(iter(options["metadata"]))
            keep = ", ".join(  # formats tenfold writes (with dtypes) that keep file metadata
                s for f in _formats() if f.dtypes and f.metadata != "none" for s in f.suffixes
            )
            raise factory(fmt.name).encode(
                f"metadata {key!r}",
                detail=f"{fmt.name} has no file metadata; use {keep} to keep it",
            )
        del options["metadata"]
    fmt.load_module().save(path, tensors, **options)

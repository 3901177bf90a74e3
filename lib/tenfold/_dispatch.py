"""How :func:`tenfold.open`, :func:`tenfold.load` and :func:`tenfold.save` reach a format.

The single-file part of the front door, below both the package and :mod:`tenfold.sharded` (whose
shards are single files), so that neither imports the other. Imports are deferred: the package
imports this module at start-up and must stay light.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .errors import EncodeError, FormatError

#: ``save``'s default per-tensor checksum (compared by identity: an explicit ``"crc32c"`` is
#: an explicit choice, refused by formats without a checksum field)
DEFAULT_CHECKSUM = "crc32c"


def open_any(path: Any, options: dict[str, Any], load: bool = False, copy: bool = False) -> Any:
    """The reader (or, with ``load``, the tensors) of a local path or a remote URL/file."""
    from .core.source import is_remote

    if is_remote(path):
        return open_remote_path(path, options, load, copy)
    return open_local_path(path, options, load, copy)


def open_remote_path(
    path: Any, options: dict[str, Any], load: bool = False, copy: bool = False
) -> Any:
    from .formats import SHARDED, module_for, open_remote

    if isinstance(path, str) and path.split("?", 1)[0].lower().endswith(".index.json"):
        sharded = module_for(SHARDED)  # a sharded checkpoint's index: fetched once, shards lazily
        return sharded.load(path, copy=copy, **options) if load else sharded.open(path, **options)
    so = options.pop("storage_options", None)
    name, mf = open_remote(path, storage_options=so)
    guessed = mf.defer_head
    if name == "sharded" and so is not None:  # its shards are fetched with the same options
        options = {**options, "storage_options": so}
    try:
        return read_with(module_for(name), mf, options, load, copy)
    except FormatError:
        mf.close()
        if not guessed:
            raise
        # the suffix said zTensor but the tail holds no 0.1.0 index: decide by the head (a
        # misnamed file, or a damaged v1/v2 footer that the generation's reader reports)
        name2, mf2 = open_remote(path, storage_options=so, tail_first=False)
        return read_with(module_for(name2), mf2, options, load, copy)
    except BaseException:
        mf.close()
        raise


#: bytes read from the end of a local file as it is opened: what a zTensor reader needs
#: (``tenfold.ztensor.open_fd``: a v2 footer and manifest, or all of a smaller file)
TAIL_READ = 16 << 10


def open_local_path(
    path: Any, options: dict[str, Any], load: bool = False, copy: bool = False
) -> Any:
    """The file opened once (detection and reading share the descriptor and the map)."""
    if options.get("mmap", True) and isinstance(path, (str, os.PathLike)):
        got = _open_local_ends(path, options, load, copy)
        if got is not _GENERAL:
            return got
    from .formats import module_for, open_local

    name, mf = open_local(path, mmap=options.get("mmap", True))
    if mf is None:  # a sharded index: its reader takes the path
        mod = module_for(name)
        return mod.load(path, copy=copy, **options) if load else mod.open(path, **options)
    return read_with(module_for(name), mf, options, load, copy)


#: what :func:`_open_local_ends` gives when the general open must answer (not a regular file,
#: which it names; a sharded checkpoint's index, which its reader reads by path)
_GENERAL = object()
#: what the local open needs, imported on its first use (this module stays light to import)
_LOCAL: tuple[Any, ...] | None = None


def _local() -> tuple[Any, ...]:
    global _LOCAL
    if _LOCAL is None:
        from . import _kernels
        from .core.mapped import MappedFile
        from .formats import SHARDED, SNIFF_BYTES, module_for, name_of_head
        from .ztensor import open_fd

        fmap = _kernels.load("fmap")
        _LOCAL = (fmap, SNIFF_BYTES, name_of_head, SHARDED, open_fd, MappedFile, module_for)
    return _LOCAL


def _open_local_ends(path: Any, options: dict[str, Any], load: bool, copy: bool) -> Any:
    """:func:`open_local_path` of a path mapped in memory: one ``fmap.open_ends`` call opens
    it and reads both ends; a zTensor file goes with the descriptor and both ends to
    ``tenfold.ztensor.open_fd`` (the lean v2 open needs the tail), any other format gets a
    :class:`~tenfold.core.mapped.MappedFile` of the same descriptor."""
    fmap, sniff, name_of_head, sharded, open_fd, mapped_file, module_for = _local()
    ends = fmap.open_ends(path, sniff, TAIL_READ)
    if ends is None:  # not a regular file
        return _GENERAL
    fd, size, head, tail = ends
    try:
        name = name_of_head(head, path)
    except BaseException:
        os.close(fd)
        raise
    if name == "ztensor":
        if not load:
            return open_fd(path, fd, size, head, tail, **options)
        with open_fd(path, fd, size, head, tail, **{**options, "copy": copy}) as r:
            return r.read_all()
    if name == sharded:
        os.close(fd)
        return _GENERAL
    mf = mapped_file(path, fmt="tenfold", fd=fd, size=size, head=head)
    return read_with(module_for(name), mf, options, load, copy)


def read_with(mod: Any, mf: Any, options: dict[str, Any], load: bool, copy: bool) -> Any:
    try:
        return mod.load(mf, copy=copy, **options) if load else mod.open(mf, **options)
    except BaseException:
        mf.close()
        raise


def save_one(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    format: str | None,  # noqa: A002
    *,
    checksum: str | None = DEFAULT_CHECKSUM,
    **options: Any,
) -> None:
    """:func:`tenfold.save` of one file (no sharding)."""
    from .formats import by_suffix, module_for

    name = format if format is not None else by_suffix(path).name
    mod = module_for(name)
    if name == "ztensor":
        options["checksum"] = checksum
    elif name == "oinf" and checksum is not DEFAULT_CHECKSUM and checksum is not None:
        raise EncodeError(f"oinf: checksum {checksum!r}: OINF has no per-tensor checksum field")
    if name in ("npz", "wtxt") and "metadata" in options:
        if options["metadata"]:
            key = next(iter(options["metadata"]))
            raise EncodeError(
                f"{name}: metadata {key!r}: {name} has no file metadata; use .safetensors, .zt, "
                ".oinf or .fold to keep it"
            )
        del options["metadata"]
    mod.save(path, tensors, **options)

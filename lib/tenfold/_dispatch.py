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
    from .formats import SHARDED, SNIFF_BYTES, module_for, name_of_head, open_local

    if options.get("mmap", True) and isinstance(path, (str, os.PathLike)):
        from . import _kernels
        from .core.mapped import MappedFile

        ends = _kernels.load("fmap").open_ends(path, SNIFF_BYTES, TAIL_READ)
        if ends is not None:  # a regular file: (fd, size, first bytes, last bytes)
            fd, size, head, tail = ends
            try:
                name = name_of_head(head, path)
            except BaseException:
                os.close(fd)
                raise
            if name == "ztensor":  # the descriptor and both ends go to the reader
                from .ztensor import open_fd

                if not load:
                    return open_fd(path, fd, size, head, tail, **options)
                with open_fd(path, fd, size, head, tail, **{**options, "copy": copy}) as r:
                    return r.read_all()
            if name == SHARDED:
                os.close(fd)
            else:
                mf = MappedFile(path, fmt="tenfold", fd=fd, size=size, head=head)
                return read_with(module_for(name), mf, options, load, copy)
    name, mf = open_local(path, mmap=options.get("mmap", True))
    if mf is None:  # a sharded index: its reader takes the path
        mod = module_for(name)
        return mod.load(path, copy=copy, **options) if load else mod.open(path, **options)
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

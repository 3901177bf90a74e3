"""Writing a checkpoint directory: rank files, the staging directory and the commit."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..._dcp_format import META_NAME, RANK_PREFIX
from ..._dispatch import open_any, save_one
from ...core.atomic import atomic_write
from ...formats.ztensor import _format as zt_format
from ...formats.ztensor.v2writer import V2Writer
from ._attempts import RECORD_NAME, remove_dead, staging_path
from ._doc import Document, E


def rank_file_name(rank: int, file_format: str | None = None, attempt: str | None = None) -> str:
    """The name of rank ``rank``'s file (``file_format``: a registered format's name; None:
    zTensor v2), with the save ``attempt``'s tag in it where given (under a URL, where
    attempts share the checkpoint's prefix)."""
    tag = f".{attempt}" if attempt else ""
    return f"{RANK_PREFIX}{rank:05d}{tag}{_target(file_format).suffixes[0]}"


def _target(file_format: str | None) -> Any:
    from ...registry import get

    fmt = zt_format.FORMAT if file_format is None else get(file_format)
    if not fmt.dtypes or not fmt.suffixes or fmt.opens_path:
        raise E.unsupported(
            f"file_format {file_format!r}", detail="not a single-file tensor format tenfold writes"
        )
    return fmt


def write_rank_file(
    path: str,
    items: Iterable[tuple[str, np.ndarray]],
    file_format: str | None = None,
    fsync: bool = True,
) -> dict[str, Any]:
    """Write ``(object name, array)`` items to the file ``path`` (atomically) and return
    ``{name: (byte_range, digest)}`` read back from the written file's index."""
    fmt = _target(file_format)
    names: list[str] = []
    if fmt is zt_format.FORMAT:  # streamed: each array is written and dropped
        with V2Writer(path, canonical=False, align=4096, fsync=fsync) as w:
            for name, arr in items:
                w.add(name, arr)
                names.append(name)
    else:
        arrays = dict(items)
        names = list(arrays)
        save_one(path, arrays, fmt.name)
    from ...core.checksums import xxh3_hex

    out = {}
    with open_any(path, {}) as r:
        for name in names:
            info = r.info(name)
            digest = info.checksum
            if digest is None:
                digest = "xxh3:" + xxh3_hex(r.read_raw(name))
            out[name] = ((int(info.byte_range[0]), int(info.byte_range[1])), digest)
    return out


def check_target(final: str, overwrite: bool) -> None:
    """Refuse a save to ``final`` that could not be committed: an existing path (unless
    ``overwrite`` and it is a tenfold checkpoint or an empty directory). Missing parent
    directories are created when the staging directory is."""
    final = os.path.abspath(final)
    where = f"checkpoint {final!r}"
    if not os.path.lexists(final):
        return
    if not overwrite:
        raise E.encode(where, detail="exists; pass overwrite=True to replace it")
    if os.path.islink(final) or not os.path.isdir(final):
        raise E.encode(where, detail="exists and is not a directory: not replaced")
    if not os.path.isfile(os.path.join(final, META_NAME)) and os.listdir(final):
        raise E.encode(
            where,
            detail=f"is a directory holding no {META_NAME}: not replaced "
            "(only a tenfold checkpoint or an empty directory is)",
        )


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(
    staging: str, final: str, doc: Document, *, overwrite: bool = False, fsync: bool = True
) -> None:
    """Check the staging directory against ``doc`` (every file present at its size), write
    the document into it last, and rename it to ``final``. With ``overwrite``, a previous
    checkpoint at ``final`` is exchanged atomically where the system can (Linux
    ``renameat2(RENAME_EXCHANGE)``), else moved aside first (``final`` is then absent for a
    moment, never partial); then removed. Last, the staging directories of earlier attempts
    to ``final`` that died are removed (:mod:`~tenfold.interop.dcp_files._attempts`)."""
    final = os.path.abspath(final)
    for f, info in doc.files.items():
        try:
            size = os.stat(os.path.join(staging, f)).st_size
        except FileNotFoundError:
            raise E.format(
                f"rank {info['rank']} file {f!r}", detail="missing from the staging directory"
            ) from None
        if size != info["size"]:
            raise E.format(
                f"rank {info['rank']} file {f!r}", field="size", expected=info["size"], got=size
            )
    # with fsync, atomic_write flushes the document and then the staging directory, whose
    # entries (every rank file, renamed in before) are thereby durable too: one flush of it
    with atomic_write(os.path.join(staging, META_NAME), fsync=fsync) as out:
        out.write(doc.to_bytes())
    check_target(final, overwrite)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(staging, RECORD_NAME))  # the attempt's, not the checkpoint's
    if not os.path.lexists(final):
        os.rename(staging, final)  # fails if another save created it meanwhile
    else:
        old = staging_path(final, "old-" + uuid.uuid4().hex[:12])
        if _exchange(staging, final):
            os.rename(staging, old)  # staging now holds the previous checkpoint
        else:
            os.rename(final, old)
            os.rename(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    if fsync:
        fsync_dir(os.path.dirname(final))
    remove_dead(final)  # what earlier attempts that died left beside it (never a live one)


def _exchange(a: str, b: str) -> bool:
    """Swap the paths ``a`` and ``b`` atomically (Linux ``renameat2``); False where the
    system cannot (then nothing was changed)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return bool(rc == 0)

"""A checkpoint under an fsspec URL (``s3://bucket/ckpt``, ``memory://ckpt``...).

Object stores have no rename, so there is no staging directory: every rank uploads its file
straight under the checkpoint's prefix, named by its save attempt
(``dcp-rank-00000.<attempt>.zt``: two attempts never write the same object), and the
coordinator writes the document (:data:`META_NAME`) last, in one request, after checking that
every rank's object is there at its size. A prefix without its document is incomplete and is
refused as a local directory without one is; readers fetch only the document and the byte
ranges they need of each rank object (tenfold's remote range reader).

``overwrite=True`` over an existing checkpoint: the new document replaces the old one in one
request (a reader sees one or the other), then the old checkpoint's objects that the new one
does not name are deleted (a reader still reading the old ones then gets an error, never a
mix: each object is checked against the document it read). An attempt that dies leaves its
objects under the prefix, named by no document: never read; ``verify`` lists them. Nothing
removes them automatically: an object store cannot tell a dead attempt from one still
uploading.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..._dcp_format import META_NAME, RANK_PREFIX
from ...core.source import fetch_prefix, filesystem
from ._doc import FMT, MAX_DOCUMENT, Document, E, parse_document
from ._write import write_rank_file


def join(url: str, name: str) -> str:
    """The URL of object ``name`` under the checkpoint ``url``."""
    return url.rstrip("/") + "/" + name


def _listing(fs: Any, path: str) -> dict[str, int]:
    """``{name: size}`` of the objects directly under ``path`` (empty when there are none),
    listed afresh: other ranks upload through their own clients, unseen by this one's cache."""
    fs.invalidate_cache(path)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return {}
    out = {}
    for e in entries:
        if e.get("type") == "directory":
            out[e["name"].rstrip("/").rsplit("/", 1)[-1] + "/"] = 0
            continue
        out[e["name"].rsplit("/", 1)[-1]] = int(e.get("size") or 0)
    return out


def read_document(url: str, storage_options: dict[str, Any] | None = None) -> Document:
    """The checked document of the checkpoint at ``url`` (one request; a prefix with rank
    objects and no document is refused as incomplete)."""
    fs, path = filesystem(url, fmt=FMT, storage_options=storage_options)
    try:
        data = fetch_prefix(fs, join(path, META_NAME), MAX_DOCUMENT + 1)
    except FileNotFoundError:
        if not _listing(fs, path):
            raise FileNotFoundError(errno.ENOENT, "no such checkpoint", url) from None
        raise E.format(
            f"checkpoint {url!r}",
            detail=f"incomplete: no {META_NAME} (a save that did not finish, or not a "
            "checkpoint written by tenfold)",
        ) from None
    return parse_document(bytes(data), META_NAME)


def check_target(url: str, overwrite: bool, storage_options: dict[str, Any] | None) -> None:
    """Refuse a save to ``url`` that could not be committed: a checkpoint there (unless
    ``overwrite``), or objects that are not a checkpoint's (never written among)."""
    fs, path = filesystem(url, fmt=FMT, storage_options=storage_options)
    names = _listing(fs, path)
    where = f"checkpoint {url!r}"
    if META_NAME in names and not overwrite:
        raise E.encode(where, detail="exists; pass overwrite=True to replace it")
    foreign = sorted(n for n in names if n != META_NAME and not n.startswith(RANK_PREFIX))
    if foreign:
        raise E.encode(
            where,
            detail="holds objects that are not a tenfold checkpoint's: not written into",
            got=", ".join(foreign[:3]),
        )


def put_rank_file(
    url: str,
    file: str,
    items: Iterable[tuple[str, np.ndarray]],
    file_format: str | None,
    storage_options: dict[str, Any] | None,
) -> tuple[dict[str, Any], int]:
    """Write ``items`` as rank file ``file`` in a local temporary directory
    (:func:`tempfile.mkdtemp`: ``TMPDIR``), upload it under ``url`` and remove it; return
    :func:`write_rank_file`'s result and the file's size."""
    fs, path = filesystem(url, fmt=FMT, storage_options=storage_options)
    tmp = tempfile.mkdtemp(prefix="tenfold-dcp-")
    try:
        local = os.path.join(tmp, file)
        got = write_rank_file(local, items, file_format, fsync=False)
        size = os.path.getsize(local)
        fs.put_file(local, join(path, file))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return got, size


def commit(
    url: str, doc: Document, *, overwrite: bool, storage_options: dict[str, Any] | None
) -> None:
    """Check that every rank object ``doc`` names is under ``url`` at its size, write the
    document, then (``overwrite``) delete the replaced checkpoint's objects."""
    fs, path = filesystem(url, fmt=FMT, storage_options=storage_options)
    names = _listing(fs, path)
    for f, info in doc.files.items():
        where = f"rank {info['rank']} file {f!r}"
        if f not in names:
            raise E.format(where, detail=f"missing under {url!r}")
        if names[f] != info["size"]:
            raise E.format(where, field="size", expected=info["size"], got=names[f])
    check_target(url, overwrite, storage_options)
    old: Document | None = None
    if META_NAME in names:
        with contextlib.suppress(OSError, ValueError):  # unreadable: nothing of it is deleted
            old = read_document(url, storage_options)
    fs.pipe_file(join(path, META_NAME), doc.to_bytes())
    if old is not None:
        stale = sorted(set(old.files) - set(doc.files))
        with contextlib.suppress(OSError):
            if stale:
                fs.rm([join(path, f) for f in stale])


def stray_objects(url: str, doc: Document, storage_options: dict[str, Any] | None) -> list[str]:
    """Rank objects under ``url`` that ``doc`` does not name (attempts that did not commit)."""
    fs, path = filesystem(url, fmt=FMT, storage_options=storage_options)
    return sorted(n for n in _listing(fs, path) if n.startswith(RANK_PREFIX) and n not in doc.files)


def remove_attempt(url: str, attempt: str, storage_options: dict[str, Any] | None) -> None:
    """Delete the rank objects of ``attempt`` under ``url`` (only once none of its ranks can
    still upload: its coordinator saw every rank's outcome)."""
    fs, path = filesystem(url, fmt=FMT, storage_options=storage_options)
    mine = [n for n in _listing(fs, path) if n.startswith(RANK_PREFIX) and f".{attempt}." in n]
    with contextlib.suppress(OSError):
        if mine:
            fs.rm([join(path, n) for n in mine])

"""The index of a sharded checkpoint (:mod:`tenfold.sharded`): its names and limits, its JSON
(written and parsed, every field checked), the fetch of a remote index, and the errors that name
a shard the index points at wrongly."""

from __future__ import annotations

import contextvars
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from ..errors import FormatError, TenfoldError, factory

FMT = "sharded"
E = factory(FMT)
INDEX_SUFFIX = ".index.json"
#: Largest index file read (Hub indexes of the largest models are a few MiB).
MAX_INDEX_BYTES = 64 << 20
#: Shards a reader keeps open at once by default (``max_open_shards=``): the least recently
#: used one is closed when another must open.
MAX_OPEN_SHARDS = 64
#: The options this module takes itself (the others go to each shard's reader).
_OWN_OPTIONS = ("trust_links", "max_open_shards")
#: The index (and shard name) whose shard is being opened, while it is: a shard that turns out
#: to be an index itself is refused instead of opened (no recursion, no request storm).
OPENING_SHARD: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "tenfold_sharded_opening", default=None
)


#: The keys of the index's ``metadata`` object that the writer computes itself: a checkpoint's
#: own metadata cannot hold them too (the index has one object for both).
INDEX_OWN_KEYS = ("total_size",)


def check_index_metadata(metadata: Mapping[str, Any] | None, total: int | None = None) -> None:
    """Refuse (:class:`~tenfold.errors.EncodeError` naming the key) metadata holding a key the
    index computes itself (:data:`INDEX_OWN_KEYS`), unless it holds the value computed,
    ``total`` (the metadata of a sharded checkpoint read back and saved with its tensors): the
    index would show the computed value where the shards keep the given one. Called before
    the first shard is written."""
    for key in INDEX_OWN_KEYS:
        if metadata and key in metadata and (total is None or metadata[key] != total):
            raise E.encode(
                "metadata",
                field=key,
                detail="a key the index writes itself (the tensors' total bytes), so the "
                "checkpoint's metadata cannot hold it too: rename it",
                expected="no such key",
                got=repr(metadata[key]),
            )


def index_document(
    weight_map: Mapping[str, str], total_size: int, metadata: Mapping[str, Any] | None = None
) -> bytes:
    """The index JSON as ``transformers`` writes it (two-space indent, sorted keys), with the
    checkpoint's ``metadata`` beside ``total_size`` when it has any (every shard holds it too:
    the index tells it without a shard opened). Metadata JSON cannot hold stays in the shards
    only; a key the index computes itself is refused (:func:`check_index_metadata`)."""
    check_index_metadata(metadata, total_size)
    md: dict[str, Any] = {}
    if metadata:
        try:
            json.dumps(dict(metadata), allow_nan=False)
            md = {str(k): v for k, v in metadata.items()}
        except (TypeError, ValueError):
            md = {}
    doc = {"metadata": {**md, "total_size": int(total_size)}, "weight_map": dict(weight_map)}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")


def array_nbytes(v: Any) -> int:
    """Bytes of an array-like's data (anything with ``shape`` and ``dtype``: NumPy, a torch
    tensor's NumPy view, a shape-only spec), without touching its data."""
    import numpy as np

    shape = tuple(int(d) for d in v.shape)
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize


def sniff(head: bytes) -> bool:
    """Whether ``head`` starts like a sharded checkpoint's index (a JSON object naming
    ``weight_map`` or ``metadata``): :func:`tenfold.formats.sniff_sharded`."""
    from ..registry import sniff_sharded

    return sniff_sharded(head)


def _safe_name(shard: str, index: str) -> bool:
    if not shard or "\0" in shard or "\\" in shard or os.path.isabs(shard):
        return False
    try:  # a file name: a lone surrogate ("\ud800" in the JSON) names no file
        shard.encode("utf-8")
    except UnicodeEncodeError:
        return False
    if shard.startswith("/") or re.match(r"^[A-Za-z]:", shard):
        return False
    return all(part not in ("..", "") for part in shard.split("/"))


def fetch_index(url: str, storage_options: dict[str, Any] | None) -> tuple[str, bytes]:
    """``(url, bytes)`` of a remote index, fetched with one request (at most
    :data:`MAX_INDEX_BYTES` + 1 bytes: a longer one is refused by :func:`parse_index`).
    Failures are :class:`OSError` naming the URL."""
    import errno

    from ..core.optional import require

    fsspec = require("fsspec", extra="remote", what=f"{FMT}: reading a URL")
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        from ..core.source import fetch_prefix  # stops at the limit even on a 200 answer

        data = fetch_prefix(fs, path, MAX_INDEX_BYTES + 1)
    except FileNotFoundError as exc:
        raise FileNotFoundError(errno.ENOENT, f"{FMT}: {url}: index not found: {exc}", url) from exc
    except TenfoldError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:
        if getattr(exc, "status", 0) in (404, 410) or "404" in str(exc)[:200]:
            raise FileNotFoundError(errno.ENOENT, f"{FMT}: {url}: index not found", url) from exc
        raise OSError(errno.EIO, f"{FMT}: {url}: fetching the index: {type(exc).__name__}: "
                      f"{exc}") from exc  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - aiohttp/botocore errors: an OSError naming the URL
        raise OSError(errno.EIO, f"{FMT}: {url}: fetching the index: {type(exc).__name__}: "
                      f"{exc}") from exc  # fmt: skip
    return url, bytes(data)


def url_dir(url: str) -> str:
    """The URL up to and including the last ``/`` of its path (query and fragment dropped):
    what shard names are resolved against."""
    base = url.split("#", 1)[0].split("?", 1)[0]
    return base[: base.rfind("/") + 1]


def _url_syntax(shard: str) -> bool:
    """Whether a shard name holds characters a URL would interpret (an escaped ``..``, a
    query, a fragment, a scheme or port)."""
    return any(c in shard for c in "%?#:") or any(ord(c) < 0x21 for c in shard)


def parse_index(
    data: bytes, where: str, remote: bool = False
) -> tuple[dict[str, str], dict[str, Any]]:
    """``(weight_map, metadata)`` of an index, every field checked (``remote``: shard names
    are also refused when they hold URL syntax, ``%``, ``?``, ``#`` or ``:``)."""
    from ..core.jsonio import loads

    doc = loads(data, fmt=FMT, what=f"index {where}", limit=MAX_INDEX_BYTES)
    if not isinstance(doc, dict):
        raise E.format(
            f"index {where}",
            detail="not a JSON object",
            expected="object",
            got=type(doc).__name__,
        )
    wm = doc.get("weight_map")
    if not isinstance(wm, dict):
        raise E.format(
            f"index {where}",
            field="weight_map",
            detail="missing or not an object",
            expected="object",
            got=type(wm).__name__,
        )
    md = doc.get("metadata", {})
    if md is None:
        md = {}
    if not isinstance(md, dict):
        raise E.format(
            f"index {where}",
            field="metadata",
            detail="not an object",
            expected="object",
            got=type(md).__name__,
        )
    bad = [f"{k!r}: {v!r}" for k, v in wm.items() if not isinstance(v, str)]
    if bad:
        raise E.format(
            f"index {where}",
            field="weight_map",
            detail=f"shard names must be strings; got {', '.join(bad[:5])}",
        )
    unsafe = sorted(
        {v for v in wm.values() if not _safe_name(v, where) or (remote and _url_syntax(v))}
    )
    if unsafe:
        raise E.format(
            f"index {where}",
            field="weight_map",
            detail="shard names must stay in the index's directory (no '..', no "
            "absolute path) and be file names (no NUL, no lone surrogate); refused "
            f"{', '.join(map(ascii, unsafe[:5]))}",
        )
    return dict(wm), dict(md)


def index_shard_error(index: str, file: str) -> FormatError:
    return E.format(
        f"index {index!r}",
        detail=f"shard {file!r} is itself a sharded checkpoint's index (an index naming "
        "itself or another index); a shard must be a tensor file",
    )


def quote_names(names: list[str], n: int) -> str:
    return ", ".join(map(repr, names[:n])) + (" ..." if len(names) > n else "")


def lacking_error(file: str, lacking: list[str]) -> FormatError:
    return E.format(
        f"shard {file!r}",
        detail=f"lacks tensors the index puts in it: {quote_names(lacking, 10)}",
    )

"""Helpers for reading TARIDX shards through fsspec: range merging, shard metadata.

A batch of rows is fetched with one ``cat_ranges`` call: the rows' byte ranges are sorted per
shard and merged when they touch or lie at most ``max_gap`` bytes apart, so that samples
stored next to each other (a locality-blocked epoch, see :func:`tenfold.taridx.epoch_order`)
cost one request per run rather than one per sample.
"""

from __future__ import annotations

import datetime
import errno
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["merge_ranges", "info_mtime_ns", "info_etag", "missing_shard"]


def merge_ranges(lo: np.ndarray, hi: np.ndarray, max_gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge byte ranges ``[lo[k], hi[k])`` (any order) whose gap is at most ``max_gap``.

    Returns ``(run, (run_lo, run_hi))``: ``run[k]`` the merged range holding range ``k``, and
    the merged ranges' bounds, in increasing order.
    """
    if lo.size == 0:
        return np.zeros(0, np.int64), np.zeros((2, 0), np.int64)
    order = np.argsort(lo, kind="stable")
    slo, shi = lo[order], hi[order]
    reach = np.maximum.accumulate(shi)  # furthest end so far, in start order
    new = np.empty(lo.size, bool)
    new[0] = True
    new[1:] = slo[1:] > reach[:-1] + max_gap
    run_sorted = np.cumsum(new) - 1
    run = np.empty(lo.size, np.int64)
    run[order] = run_sorted
    first = np.flatnonzero(new)
    last = np.append(first[1:], lo.size) - 1
    return run, np.stack([slo[first], reach[last]])


def _to_ns(v: Any) -> int | None:
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.UTC)
        return int(v.timestamp() * 1e9)
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)) and v > 0:
        return int(v * 1e9) if v < 1e12 else int(v)  # seconds, else already ns
    if isinstance(v, str) and v:
        try:
            return _to_ns(datetime.datetime.fromisoformat(v.replace("Z", "+00:00")))
        except ValueError:
            try:
                from email.utils import parsedate_to_datetime

                return _to_ns(parsedate_to_datetime(v))
            except (TypeError, ValueError):
                return None
    return None


def info_mtime_ns(info: Mapping[str, Any]) -> int | None:
    """The modification time an fsspec ``info`` dict gives (ns since the epoch), if any."""
    for key in (
        "mtime",
        "LastModified",
        "last_modified",
        "modified",
        "Last-Modified",
        "updated",
        "created",  # memory:// (a new upload is a new object)
    ):
        if key in info:
            ns = _to_ns(info[key])
            if ns is not None:
                return ns
    return None


def info_etag(info: Mapping[str, Any]) -> str | None:
    """The ETag an fsspec ``info`` dict gives, if any."""
    for key in ("ETag", "etag", "Etag"):
        v = info.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def missing_shard(url: str, exc: BaseException, what: str) -> OSError:
    """The ``OSError`` for a shard that cannot be read (``FileNotFoundError`` when missing)."""
    if isinstance(exc, FileNotFoundError):
        return FileNotFoundError(errno.ENOENT, f"taridx: shard missing ({what})", url)
    return OSError(f"taridx: shard {url}: {what} failed: {type(exc).__name__}: {exc}")

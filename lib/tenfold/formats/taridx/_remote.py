"""Helpers for reading TARIDX shards through fsspec: range planning, shard metadata.

A batch of rows is fetched with one ``cat_ranges`` call (s3fs and the HTTP filesystem run its
requests concurrently). Which rows share a request is decided by a cost model of the link
(:class:`LinkModel`): a request costs ``per_request`` seconds before its first byte, and bytes
then arrive at ``bandwidth`` bytes/s. Reading a hole of ``g`` bytes between two rows instead of
issuing a second request is worth it when ``g / bandwidth < per_request``, so the largest hole
worth reading is ``per_request * bandwidth`` (``max_gap``). A request moves its bytes at no less
than 90% of the bandwidth once it carries ``9 * per_request * bandwidth`` bytes, so merged ranges
stop growing there (``max_range``, at most 64 MiB). :func:`plan_ranges` merges the cheapest holes
first (every merge saves the same one request, so the smallest holes buy the most requests per
byte) until the next hole is not worth a request or the batch would read more than its byte
budget; the read amplification is bounded by both. The same trade-off is what Apache Arrow's
``ReadRangeCache`` derives from network metrics (hole and range size limits).

The model starts from defaults for object stores (10 ms per request, 100 MB/s: holes up to
1 MB are read, ranges up to 9 MB) and, unless told otherwise, is fitted to the calls the
dataset has made: each ``cat_ranges`` call of ``n`` requests and ``b`` bytes that took ``t``
seconds is an observation of ``t = n * per_request + b / bandwidth``.
"""

from __future__ import annotations

import datetime
import errno
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "LinkModel",
    "plan_ranges",
    "info_mtime_ns",
    "info_etag",
    "missing_shard",
]

#: merged ranges never exceed this, whatever the link (one response held in memory)
RANGE_CAP = 64 << 20


class LinkModel:
    """Seconds a fetch of ``n`` requests and ``b`` bytes takes: ``n * per_request + b /
    bandwidth``, fitted online to observed calls (least squares on relative error, pulled
    towards the defaults by ``prior`` pseudo-observations; older calls fade by ``decay``)."""

    def __init__(
        self,
        per_request: float = 0.010,
        bandwidth: float = 100e6,
        *,
        prior: float = 0.5,
        decay: float = 0.95,
    ) -> None:
        if not (per_request > 0 and bandwidth > 0):
            raise ValueError("taridx: per_request and bandwidth must be > 0")
        self.prior_c, self.prior_s = float(per_request), 1.0 / float(bandwidth)
        self.prior, self.decay = float(prior), float(decay)
        self._sxx = np.zeros((2, 2))
        self._sx = np.zeros(2)
        self.per_request, self.bandwidth = float(per_request), float(bandwidth)
        self.observations = 0

    def observe(self, n_requests: int, nbytes: int, seconds: float) -> None:
        """Record one call and refit."""
        if n_requests <= 0 or seconds <= 0:
            return
        x = np.array([n_requests, nbytes], float) / seconds  # relative error: t_i scaled to 1
        self._sxx = self._sxx * self.decay + np.outer(x, x)
        self._sx = self._sx * self.decay + x
        self.observations += 1
        # the prior as pseudo-observations c/c0 = 1 and s/s0 = 1
        p = np.array([1.0 / self.prior_c, 1.0 / self.prior_s])
        a = self._sxx + self.prior * np.diag(p * p)
        b = self._sx + self.prior * p
        try:
            c, s = np.linalg.solve(a, b)
        except np.linalg.LinAlgError:
            return
        # keep both positive and within a factor 1000 of the defaults
        c = float(np.clip(c, self.prior_c / 1e3, self.prior_c * 1e3))
        s = float(np.clip(s, self.prior_s / 1e3, self.prior_s * 1e3))
        self.per_request, self.bandwidth = c, 1.0 / s

    @property
    def max_gap(self) -> int:
        """The largest hole cheaper to read than a new request costs."""
        return int(self.per_request * self.bandwidth)

    @property
    def max_range(self) -> int:
        """Bytes from which one request moves data at >= 90% of the bandwidth (capped)."""
        return int(min(RANGE_CAP, max(self.max_gap, 9 * self.per_request * self.bandwidth)))

    def __repr__(self) -> str:
        return (
            f"LinkModel(per_request={self.per_request * 1e3:.2f} ms, "
            f"bandwidth={self.bandwidth / 1e6:.1f} MB/s, max_gap={self.max_gap}, "
            f"max_range={self.max_range}, observations={self.observations})"
        )


def plan_ranges(
    key: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    *,
    max_gap: int,
    max_range: int,
    budget: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Group byte ranges ``[lo[k], hi[k])`` of objects ``key[k]`` into requests.

    Ranges of one object are merged across the holes between them, smallest hole first, while
    the hole is at most ``max_gap``, the merged range stays within ``max_range`` and the bytes
    of all requests stay within ``budget`` (ranges that touch or overlap always merge first).
    Returns ``(run, run_key, run_lo, run_hi)``: ``run[k]`` the request holding range ``k``,
    and each request's object and bounds, sorted by object then offset.
    """
    n = lo.size
    if n == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, z
    order = np.lexsort((lo, key))
    f, a, b = key[order], lo[order], hi[order]
    reach = b.copy()  # furthest end so far within the object, in start order
    cuts = np.flatnonzero(f[1:] != f[:-1]) + 1
    for s, e in zip([0, *cuts.tolist()], [*cuts.tolist(), n], strict=True):
        reach[s:e] = np.maximum.accumulate(b[s:e])
    gap = a[1:] - reach[:-1]
    cand = np.flatnonzero((f[1:] == f[:-1]) & (gap <= max_gap))
    cand = cand[np.argsort(gap[cand], kind="stable")]
    merged = np.zeros(max(n - 1, 0), bool)
    head = np.arange(n)  # head[t]: first range of the group ending at t
    tail = np.arange(n)  # tail[h]: last range of the group starting at h
    total = int((b - a).sum())
    for k, g in zip(cand.tolist(), gap[cand].tolist(), strict=True):
        g = max(0, g)
        if total + g > budget and g > 0:
            break  # holes come in increasing size: no later one fits either
        h, t = head[k], tail[k + 1]
        if g > 0 and int(reach[t]) - int(a[h]) > max_range:
            continue
        merged[k] = True
        tail[h], head[t] = t, h
        total += g
    new = np.ones(n, bool)
    new[1:] = ~merged
    run_sorted = np.cumsum(new) - 1
    run = np.empty(n, np.int64)
    run[order] = run_sorted
    first = np.flatnonzero(new)
    last = np.append(first[1:], n) - 1
    return run, f[first], a[first], reach[last]


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

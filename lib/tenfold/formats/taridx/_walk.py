"""Walking a shard's headers in ranges, one range per task, so a build uses every core.

Tar members are a chain (each header gives the next one's offset), so a shard is cut at
block-aligned points and each range starts at the first block after its point that looks like
a plain member header (``tarscan.find_member``: ustar magic, regular typeflag, valid checksum,
no extended header right before it). Each range is walked by ``tarscan.walk`` up to the next
range's start, without the GIL. The walks are then joined in order: range ``k`` counts only if
the walk of range ``k - 1`` stopped exactly at its start with no extended-header state (a pax
global header, or a start guessed inside a payload, breaks the chain); at the first break the
shard is walked again from the last good start to its end, in one piece. The result is always
the one of a single walk from offset 0.

A range is at least :data:`MIN_RANGE` bytes; a build aims at :data:`TASKS_PER_THREAD` ranges
per thread over the whole split (many small shards: one range each).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from ... import _kernels

T = TypeVar("T")

__all__ = ["MIN_RANGE", "TASKS_PER_THREAD", "Part", "range_counts", "starts", "walk", "join"]

#: The smallest range of a shard that one task walks (bytes).
MIN_RANGE = 4 << 20
#: Ranges per thread a build aims at (load balance between shards of different sizes).
TASKS_PER_THREAD = 4
#: ``stop`` of a walk that runs to the end of its shard.
NO_STOP = 1 << 62


@dataclasses.dataclass
class Part:
    """One range's walk: where it started and stopped, how it ended, and its members."""

    start: int
    stop: int
    code: int  # tarscan E_* (when status is WALK_FINISHED)
    where: int
    end: int  # the offset where the walk stopped
    status: int  # tarscan WALK_*
    hdr_off: np.ndarray  # int64 (regular members only)
    size: np.ndarray  # int64
    name_off: np.ndarray  # int64
    name_len: np.ndarray  # int64
    stem_off: np.ndarray  # int64
    stem_len: np.ndarray  # int64
    keyhash: np.ndarray  # uint64, xxh64 of the stem bytes
    exthash: np.ndarray  # uint64, xxh64 of the lower-cased extension
    flags: np.ndarray  # uint8, tarscan FLAG_*


def range_counts(sizes: list[int], threads: int) -> list[int]:
    """How many ranges each shard (of ``sizes`` bytes) is cut into for ``threads`` threads."""
    total = sum(sizes)
    if threads <= 1 or total <= 0:
        return [1] * len(sizes)
    want = threads * TASKS_PER_THREAD
    return [max(1, min(-(-want * s // total), s // MIN_RANGE)) for s in sizes]


def starts(buf: np.ndarray, k: int) -> list[int]:
    """Start offsets of (at most) ``k`` ranges of ``buf``: 0, then a plausible member header
    after each cut point (strictly increasing; a range with none is merged into the one
    before)."""
    n = int(buf.size)
    if k <= 1 or n < 2 * 512:
        return [0]
    ts = _kernels.load("tarscan")
    out = [0]
    for i in range(1, k):
        frm = max(((n * i // k) // 512) * 512, out[-1] + 512)
        s = ts.find_member(buf, frm, min(n, frm + n // k))
        if s > out[-1]:
            out.append(int(s))
    return out


def walk(buf: np.ndarray, start: int, stop: int) -> Part:
    """Walk ``buf`` from ``start`` (a member header) up to ``stop`` (see ``tarscan.walk``)."""
    ts = _kernels.load("tarscan")
    n = int(buf.size)
    cap = max(0, (min(stop, n) - start + 511) // 512)
    ints = [np.empty(cap, np.int64) for _ in range(6)]
    hashes = [np.empty(cap, np.uint64) for _ in range(2)]
    tflag, flags = np.empty(cap, np.uint8), np.empty(cap, np.uint8)
    big = buf if n else np.zeros(0, np.uint8)
    count, code, where, end, status = ts.walk(big, start, stop, *ints, *hashes, tflag, flags)
    h, sz, no, nl, so, sl = (a[:count] for a in ints)
    return Part(
        start, stop, code, where, end, status, h, sz, no, nl, so, sl,
        hashes[0][:count], hashes[1][:count], flags[:count],
    )  # fmt: skip


def join(
    parts: list[tuple[Part, T]], rewalk: Callable[[int, int], tuple[Part, T]]
) -> list[tuple[Part, T]]:
    """The parts (with what was made of each) that make one walk from offset 0, in order.

    A walk that stopped exactly at a later part's start, with no state, goes on with that
    part (the ones it jumped over were guessed inside a payload); one that stopped elsewhere
    inside part ``j`` goes on by ``rewalk(end, stop of part j)`` (a header, no state: one range
    walked again); one that carries extended-header state (a pax global header) by
    ``rewalk(its start, NO_STOP)``: the rest of the shard in one piece."""
    ts = _kernels.load("tarscan")
    starts = [p.start for p, _ in parts]
    good: list[tuple[Part, T]] = []
    cur = parts[0] if parts else rewalk(0, NO_STOP)
    while True:
        good.append(cur)
        p = cur[0]
        if p.status == ts.WALK_FINISHED:
            return good
        if p.status != ts.WALK_STOPPED:
            good[-1] = rewalk(p.start, NO_STOP)
            return good
        j = bisect.bisect_right(starts, p.end) - 1  # the part whose range holds the end
        if j < 0 or parts[j][0].start <= p.start:  # (cannot happen: end >= stop)
            good[-1] = rewalk(p.start, NO_STOP)
            return good
        cur = parts[j] if starts[j] == p.end else rewalk(p.end, parts[j][0].stop)

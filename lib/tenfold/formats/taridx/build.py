"""Building a split's index from its tar shards, and checking an index against its shards.

The shards of split ``F`` under ``root`` are the files ``F_<digits>.tar``; a shard's ``fid`` is
its position in string-sorted order (an empty shard keeps its fid). Each shard is memory-mapped
and walked by ``tarscan.walk`` (header blocks only, payloads are never read), which also splits
each basename, hashes stem and extension and flags non-ASCII names and newlines in the same pass.
Shards are cut into ranges walked by :func:`tenfold.core.parallel.threads` threads without the
GIL and joined into the one-walk result (:mod:`tenfold.taridx._walk`).

Rows: one per regular file (typeflag ``0``, NUL or ``7``), in archive order, shards in fid order.
Stem and extension come from the basename (directory part dropped), split at its first dot; the
extension is lower-cased; names that are not valid UTF-8 are decoded with U+FFFD replacements
before hashing (``keyhash = xxh64(stem.encode("utf-8"))``). A basename holding a newline cannot
be indexed (the extension and crash-stem blocks are joined by newlines): an error naming the
shard and offset, or with ``on_bad_name="skip"`` the member is left out.

Staleness (:func:`stale_shards`) re-reads header blocks and checks they still name the indexed
members (:mod:`tenfold.taridx._members`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _kernels
from ...core import parallel
from ...core.mapped import MappedFile
from ...core.progress import progress
from ...core.release import release
from ...errors import (
    FormatError,
    IntegrityError,
    TenfoldError,
    TruncatedError,
    UnsupportedError,
    describe,
)
from . import _walk
from ._members import bad_name, member_problem
from ._spec import BLOCK, FLAG_CONTIGUOUS, FMT, ROW_DT
from ._split import required_split, select_shards, shards_wanted
from .writer import count_runs, write_rows

if TYPE_CHECKING:  # build needs no reader at run time (the reader imports build)
    from .reader import Index

__all__ = [
    "shard_paths",
    "scan_shard",
    "ShardScan",
    "fold_rows",
    "build",
    "stale_shards",
    "stale_shard",
    "REGULAR_TYPES",
    "BAD_NAME_POLICIES",
]

#: What ``build`` does with a member whose name cannot be indexed (see ``bad_name``).
BAD_NAME_POLICIES = ("error", "skip")

#: Typeflags that make a row: regular file ("0"), old regular file (NUL), contiguous file ("7").
REGULAR_TYPES = (ord("0"), 0, ord("7"))

_MESSAGES = {
    1: (TruncatedError, "header block ends past end of file"),
    2: (FormatError, "header checksum mismatch"),
    3: (FormatError, "bad numeric field (size or checksum)"),
    4: (TruncatedError, "member data ends past end of file"),
    5: (FormatError, "malformed pax extended header"),
    6: (TruncatedError, "extended header not followed by a member"),
    7: (FormatError, "more members than blocks"),
    8: (UnsupportedError, "GNU sparse member (its payload is not the file)"),
}


def shard_paths(
    root: str | os.PathLike[str], split: str | None = None, *, fold: str | None = None
) -> list[Path]:
    """The shards ``<split>_<digits>.tar`` (or ``<split>-<digits>.tar``, webdataset's naming;
    not both) of ``split`` under ``root``, in fid order."""
    split = required_split(split, fold, "shard_paths")
    root = Path(root)
    files = [e.name for e in os.scandir(root) if e.is_file()]
    return [root / n for n in select_shards(split, files, os.fspath(root))]


@dataclasses.dataclass
class ShardScan:
    """What one shard contributes: its rows and their stems (packed) and extensions."""

    offset: np.ndarray  # int64, header offsets of regular members
    size: np.ndarray  # int64
    stems: np.ndarray  # uint8, stems packed back to back (UTF-8)
    stem_len: np.ndarray  # int64
    ext_local: np.ndarray  # int64, index into ``exts``
    exts: list[str]  # first-seen order within the shard
    #: members left out for their names (``on_bad_name="skip"``): (header offset, name, why)
    skipped: list[tuple[int, bytes, str]] = dataclasses.field(default_factory=list)
    #: uint64, ``xxh64`` of each stem (``None``: computed from ``stems`` when folded)
    keyhash: np.ndarray | None = None


def scan_members(buf: np.ndarray, name: str) -> tuple[np.ndarray, ...]:
    tarscan = _kernels.load("tarscan")
    cap = buf.size // BLOCK
    outs = [np.empty(cap, np.int64) for _ in range(6)] + [np.empty(cap, np.uint8)]
    count, code, where = tarscan.scan(buf, *outs)
    if code:
        cls, msg = _MESSAGES.get(code, (FormatError, f"scanner error {code}"))
        raise cls(describe(FMT, f"shard {name}", offset=where, detail=msg))
    return tuple(o[:count] for o in outs)


def _ext_name(buf: np.ndarray, off: int, length: int) -> str:
    """The lower-cased extension of the member name at ``buf[off:off + length]``."""
    base = bytes(buf[off : off + length]).rsplit(b"/", 1)[-1]
    return base.partition(b".")[2].decode("utf-8", "replace").lower()


def _ext_ids(
    buf: np.ndarray,
    exthash: np.ndarray,
    name_off: np.ndarray,
    name_len: np.ndarray,
    ext_local: np.ndarray,
    ext_id: dict[str, int],
) -> None:
    """Extension ids in first-seen order. Splits have few extensions: peel them off one by one
    (one vectorised compare each); fall back to a sort when there are many."""
    todo = np.ones(exthash.size, bool)
    for _ in range(32):
        rest = np.flatnonzero(todo[:1]) if todo[0] else np.flatnonzero(todo)
        if rest.size == 0:
            return
        i = int(rest[0])
        same = exthash == exthash[i]
        ext_local[same] = ext_id.setdefault(_ext_name(buf, name_off[i], name_len[i]), len(ext_id))
        todo &= ~same
    if not todo.any():
        return
    left = np.flatnonzero(todo)
    uniq, first, inv = np.unique(exthash[left], return_index=True, return_inverse=True)
    local_of_uniq = np.empty(uniq.size, np.int64)
    for u in np.argsort(first, kind="stable").tolist():
        i = int(left[first[u]])
        local_of_uniq[u] = ext_id.setdefault(_ext_name(buf, name_off[i], name_len[i]), len(ext_id))
    ext_local[left] = local_of_uniq[inv]


def _check_policy(on_bad_name: str) -> None:
    if on_bad_name not in BAD_NAME_POLICIES:
        raise ValueError(f"on_bad_name must be one of {BAD_NAME_POLICIES}, got {on_bad_name!r}")


def _non_ascii(buf: np.ndarray, p: _walk.Part, stems: np.ndarray, bad: np.ndarray) -> tuple:
    """Stems (packed), lengths and key hashes with the non-ASCII basenames of rows ``bad``
    decoded (U+FFFD for invalid UTF-8) and cut at their first dot, in Python."""
    n = p.hdr_off.size
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(p.stem_len, out=starts[1:])
    stem_list = [stems[starts[i] : starts[i + 1]].tobytes() for i in range(n)]
    for i in bad.tolist():
        base = bytes(buf[p.name_off[i] : p.name_off[i] + p.name_len[i]]).rsplit(b"/", 1)[-1]
        stem_list[i] = base.decode("utf-8", "replace").partition(".")[0].encode("utf-8")
    joined = np.frombuffer(b"".join(stem_list), np.uint8).copy()
    st_len = np.fromiter(map(len, stem_list), np.int64, n)
    offs = np.zeros(n, np.int64)
    if n > 1:
        np.cumsum(st_len[:-1], out=offs[1:])
    keyhash = np.empty(n, np.uint64)
    big = joined if joined.size else np.zeros(1, np.uint8)
    _kernels.load("strhash").hash_ranges(big, offs, st_len, 0, keyhash)
    return joined, st_len, keyhash


def _chunk(buf: np.ndarray, p: _walk.Part) -> ShardScan:
    """The rows of one walked range. Members whose basename holds a newline are left out and
    listed in ``skipped`` (whether that is an error is the caller's decision)."""
    tarscan = _kernels.load("tarscan")
    n = p.hdr_off.size
    stems = np.empty(int(p.stem_len.sum()), np.uint8)
    big = buf if buf.size else np.zeros(1, np.uint8)
    _kernels.load("strhash").gather(big, p.stem_off, p.stem_len, stems)
    st_len, keyhash = p.stem_len, p.keyhash
    ext_local = np.empty(n, np.int64)
    ext_id: dict[str, int] = {}
    if n:
        _ext_ids(buf, p.exthash, p.name_off, p.name_len, ext_local, ext_id)
    non_ascii = np.flatnonzero((p.flags & tarscan.FLAG_ASCII) == 0)
    if non_ascii.size:
        stems, st_len, keyhash = _non_ascii(buf, p, stems, non_ascii)
    exts = list(ext_id)
    hdr_off, size = p.hdr_off, p.size
    bad = np.flatnonzero(p.flags & tarscan.FLAG_NEWLINE)
    skipped: list[tuple[int, bytes, str]] = []
    if bad.size:
        for i in bad.tolist():
            full = bytes(buf[p.name_off[i] : p.name_off[i] + p.name_len[i]])
            skipped.append((int(hdr_off[i]), full, bad_name(full) or "newline in the basename"))
        keep = np.ones(n, bool)
        keep[bad] = False
        stems = stems[np.repeat(keep, st_len)]
        hdr_off, size, st_len, keyhash = hdr_off[keep], size[keep], st_len[keep], keyhash[keep]
        # extension ids again, in first-seen order over the members kept
        old = ext_local[keep]
        ids, first = np.unique(old, return_index=True)
        ids = ids[np.argsort(first, kind="stable")]
        remap = np.zeros(max(len(exts), 1), np.int64)
        remap[ids] = np.arange(ids.size)
        ext_local = remap[old]
        exts = [exts[i] for i in ids.tolist()]
    return ShardScan(hdr_off, size, stems, st_len, ext_local, exts, skipped, keyhash)


def _scan_error(name: str, code: int, where: int) -> TenfoldError:
    cls, msg = _MESSAGES.get(code, (FormatError, f"scanner error {code}"))
    return cls(describe(FMT, f"shard {name}", offset=where, detail=msg))


def _bad_name_error(name: str, off: int, full: bytes, why: str) -> FormatError:
    return FormatError(
        describe(
            FMT,
            f"shard {name}",
            offset=off,
            detail=f"member name {full!r}: {why}; on_bad_name='skip' leaves such members out",
        )
    )


def _walk_chunk(buf: np.ndarray, start: int, stop: int) -> tuple[_walk.Part, ShardScan]:
    """Walk one range and make its rows; then unmap the pages it touched (on this thread:
    tearing down the page tables of a large shard costs as much as mapping them, and the
    final unmap holds the GIL)."""
    part = _walk.walk(buf, start, stop)
    chunk = _chunk(buf, part)
    release(buf[start : min(stop, buf.size)])
    return part, chunk


def _shard_chunks(
    name: str,
    buf: np.ndarray,
    done: list[tuple[_walk.Part, ShardScan]],
    on_bad_name: str,
) -> list[ShardScan]:
    """Join one shard's walked ranges (walking again from a break), raise its scan error or
    (``on_bad_name="error"``) its first bad name, else its chunks in order."""
    good = _walk.join(done, lambda start, stop: _walk_chunk(buf, start, stop))
    chunks = [c for _, c in good]
    last = good[-1][0]
    if last.code:
        raise _scan_error(name, last.code, last.where)
    if on_bad_name == "error":
        for c in chunks:
            for off, full, why in c.skipped:
                raise _bad_name_error(name, off, full, why)
    return chunks


def _merge(chunks: list[ShardScan]) -> ShardScan:
    """One shard's chunks as one scan (extension ids renumbered in first-seen order)."""
    if len(chunks) == 1:
        return chunks[0]
    ext_id: dict[str, int] = {}
    locals_ = []
    for c in chunks:
        to_shard = np.array([ext_id.setdefault(e, len(ext_id)) for e in c.exts], np.int64)
        locals_.append(to_shard[c.ext_local] if c.exts else c.ext_local)
    cat = np.concatenate
    kh = [c.keyhash for c in chunks]
    return ShardScan(
        cat([c.offset for c in chunks]),
        cat([c.size for c in chunks]),
        cat([c.stems for c in chunks]),
        cat([c.stem_len for c in chunks]),
        cat(locals_),
        list(ext_id),
        [s for c in chunks for s in c.skipped],
        None if any(k is None for k in kh) else cat(kh),  # type: ignore[arg-type]
    )


#: Shards a build keeps open (mapped) at once: this many per thread, at least 16; a split of
#: thousands of shards never holds thousands of descriptors.
OPEN_PER_THREAD = 4


def _scan_split(
    paths: list[Path],
    threads: int,
    on_bad_name: str,
    show_progress: bool | None = None,
    desc: str = "",
) -> list[list[ShardScan]]:
    """Every shard's chunks: windows of shards, the ranges of each window's shards walked by
    ``threads`` threads."""
    bar = iter(
        progress(range(len(paths)), total=len(paths), desc=desc, unit="shard", show=show_progress)
    )
    window = max(16, OPEN_PER_THREAD * threads)
    out: list[list[ShardScan]] = []
    with parallel.scoped(threads, "tenfold-taridx-scan") as pool:
        run = pool.map if threads > 1 else map
        for lo in range(0, len(paths), window):
            out += _scan_window(paths[lo : lo + window], threads, run, on_bad_name, bar)
    for _ in bar:
        pass
    return out


def _scan_window(
    paths: list[Path],
    threads: int,
    run: Callable[..., Iterable[Any]],
    on_bad_name: str,
    bar: Iterator[int],
) -> list[list[ShardScan]]:
    with contextlib.ExitStack() as stack:
        bufs = [stack.enter_context(MappedFile(p, fmt=FMT)).buffer() for p in paths]
        counts = _walk.range_counts([int(b.size) for b in bufs], threads)
        firsts = list(run(_walk.starts, bufs, counts))
        tasks = [
            (i, st, nxt)
            for i, ss in enumerate(firsts)
            for st, nxt in zip(ss, [*ss[1:], _walk.NO_STOP], strict=True)
        ]
        done = run(lambda t: (t[0], _walk_chunk(bufs[t[0]], t[1], t[2])), tasks)
        per: list[list[tuple[_walk.Part, ShardScan]]] = [[] for _ in paths]
        out: list[list[ShardScan]] = []
        for i, pc in done:  # in task order: shard by shard
            per[i].append(pc)
            while len(out) < len(paths) and len(per[len(out)]) == len(firsts[len(out)]):
                j = len(out)
                out.append(_shard_chunks(paths[j].name, bufs[j], per[j], on_bad_name))
                per[j] = []
                next(bar, None)
        return out


def scan_shard(
    path: str | os.PathLike[str], *, on_bad_name: str = "error", threads: int | None = None
) -> ShardScan:
    """Scan one shard (regular members only); errors name the shard and the offset.

    ``on_bad_name``: ``"error"`` (default) refuses a member whose basename holds a newline
    (``FormatError`` naming shard, offset and name); ``"skip"`` leaves it out and lists it in
    :attr:`ShardScan.skipped`. ``threads``: how many walk its ranges (default
    :func:`tenfold.core.parallel.threads`).
    """
    _check_policy(on_bad_name)
    nt = parallel.threads() if threads is None else max(1, threads)
    return _merge(_scan_split([Path(os.fspath(path))], nt, on_bad_name, show_progress=False)[0])


def _blocks(n: int, k: int) -> list[tuple[int, int]]:
    """``[0, n)`` cut into at most ``k`` blocks of about equal size (none when ``n == 0``)."""
    k = max(1, min(k, n // 65536 or 1))
    cuts = [n * i // k for i in range(k + 1)]
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def _table_bits(parts: int) -> int:
    """Partition bits for ``parts`` threads: 2 ** bits is the smallest power of two at least
    ``parts`` (at most 256 partitions)."""
    return min(max(0, parts - 1).bit_length(), 8)


def _first_of_key(
    keyhash: np.ndarray, run: Callable[..., Iterable[Any]] = map, parts: int = 1
) -> tuple[int, np.ndarray, int]:
    """``(number of distinct keys, the first row with each row's key, number of runs of equal
    keys)``, with hash tables (no sort) when the rows fit their int32 slots.

    Only the first row of each run of equal keys (its head: a sample's members are usually
    adjacent) goes into a table. The keys are cut into partitions by their top bits, one per
    thread (the power of two at least ``parts``, at most 256), each with a table of its own:
    the heads are counted and listed per partition in ``parts`` blocks of rows, each
    partition's heads inserted in row order by one task (so a key's first row wins), and every
    row given its head's first row in the same blocks. All passes go through ``run``; none
    walks all rows on one thread, and each does the same work whatever ``parts`` is."""
    n = keyhash.size
    if n == 0:
        return 0, np.zeros(0, np.int64), 0
    if n > 0x7FFFFFFF:
        uniq, first, inv = np.unique(keyhash, return_index=True, return_inverse=True)
        return int(uniq.size), first[inv], 1 + int(np.count_nonzero(np.diff(keyhash)))
    ht = _kernels.load("hashtable")
    bits = _table_bits(parts)
    blocks = _blocks(n, parts)

    def count(ab: tuple[int, int]) -> np.ndarray:
        c = np.zeros(1 << bits, np.int64)
        ht.head_counts(keyhash, ab[0], ab[1], bits, c)
        return c

    counts = np.stack(list(run(count, blocks)))  # (block, partition)
    part_at = np.zeros(counts.shape[1] + 1, np.int64)
    np.cumsum(counts.sum(axis=0), out=part_at[1:])
    cursors = part_at[:-1] + np.cumsum(counts, axis=0) - counts  # each block's first heads
    order, heads_first = np.empty(int(part_at[-1]), np.int64), np.empty(int(part_at[-1]), np.int64)

    def scatter(k: int) -> None:
        ht.scatter_heads(keyhash, *blocks[k], bits, cursors[k].copy(), order)

    def insert(p: int) -> int:
        a, b = int(part_at[p]), int(part_at[p + 1])
        table = np.full(1 << max(1, (2 * (b - a) + 1).bit_length()), -1, np.int32)
        return int(ht.insert(keyhash, order[a:b], table, heads_first[a:b]))

    first = np.empty(n, np.int64)

    def spread(k: int) -> None:
        a, b = blocks[k]
        ht.spread_first(keyhash, a, bits, cursors[k].copy(), heads_first, first[a:b])

    for _ in run(scatter, range(len(blocks))):
        pass
    n_unique = sum(run(insert, range(counts.shape[1])))
    for _ in run(spread, range(len(blocks))):
        pass
    return n_unique, first, int(part_at[-1])


def fold_rows(scans: list[ShardScan]) -> tuple[np.ndarray, list[str], list[str], int]:
    """Assemble shard scans (in fid order) into ``(rows, ext, crash, n_stems)``."""
    return _fold([(fid, s) for fid, s in enumerate(scans)], len(scans), map)[:4]


def _fold(
    chunks: list[tuple[int, ShardScan]],
    n_shards: int,
    run: Callable[..., Iterable[Any]],
    parts: int = 1,
) -> tuple[np.ndarray, list[str], list[str], int, int]:
    """``fold_rows`` of chunks ``(fid, scan)`` in row order; ``run`` maps the per-chunk and
    per-block work (``map``, or a pool's ``map`` with ``parts`` threads). Returns
    ``(rows, ext, crash, n_stems, runs)``, ``runs`` the runs of equal ``(keyhash, crashid)``."""
    strhash = _kernels.load("strhash")
    n = sum(s.offset.size for _, s in chunks)
    ext_id: dict[str, int] = {}
    to_global = [np.array([ext_id.setdefault(e, len(ext_id)) for e in s.exts], np.int64)
                 for _, s in chunks]  # fmt: skip
    if len(ext_id) > 0xFFFF or n_shards > 0x10000:
        raise UnsupportedError(
            describe(FMT, "split", detail="more than 65536 shards or extensions")
        )
    pos = np.cumsum([0] + [s.offset.size for _, s in chunks]).tolist()
    spos = np.cumsum([0] + [s.stems.size for _, s in chunks]).tolist()
    rows = np.empty(n, ROW_DT)
    arena, offs, lens = np.empty(spos[-1], np.uint8), np.empty(n, np.int64), np.empty(n, np.int64)
    keyhash = np.empty(n, np.uint64)

    def fill(k: int) -> None:
        fid, s = chunks[k]
        a, b = pos[k], pos[k + 1]
        sl = rows[a:b]
        sl["fid"] = fid
        sl["offset"] = s.offset
        sl["size"] = s.size
        sl["extid"] = to_global[k][s.ext_local] if s.exts else 0
        sl["crashid"] = 0
        arena[spos[k] : spos[k + 1]] = s.stems
        lens[a:b] = s.stem_len
        if b > a:
            offs[a] = spos[k]
            np.cumsum(s.stem_len[:-1], out=offs[a + 1 : b])
            offs[a + 1 : b] += spos[k]
        if s.keyhash is not None:
            keyhash[a:b] = s.keyhash
        else:
            big = arena if arena.size else np.zeros(1, np.uint8)
            strhash.hash_ranges(big, offs[a:b], lens[a:b], 0, keyhash[a:b])
        sl["keyhash"] = keyhash[a:b]

    for _ in run(fill, range(len(chunks))):
        pass
    crash: list[str] = []
    n_unique, n_runs = 0, 0
    if n:
        n_unique, f, n_runs = _first_of_key(keyhash, run, parts)
        crash = _crash_ids(rows, arena, offs, lens, f, run, parts)
        if crash:  # (keyhash runs are (keyhash, crashid) runs while every crash id is 0)
            n_runs = count_runs(rows["keyhash"], rows["crashid"])
    return rows, list(ext_id), crash, n_unique + len(crash), n_runs


def _crash_ids(
    rows: np.ndarray,
    arena: np.ndarray,
    offs: np.ndarray,
    lens: np.ndarray,
    f: np.ndarray,
    run: Callable[..., Iterable[Any]],
    parts: int,
) -> list[str]:
    """Compare each row's stem with the first row's of its key hash (in ``parts`` blocks
    through ``run``); set the crash ids of real xxh64 collisions (rare) in ``rows`` and return
    the crash stems."""
    strhash = _kernels.load("strhash")
    big = arena if arena.size else np.zeros(1, np.uint8)

    def compare(ab: tuple[int, int]) -> np.ndarray:
        a, b = ab
        same = np.empty(b - a, np.uint8)
        strhash.ranges_equal(big, offs[a:b], lens[a:b], offs[f[a:b]], lens[f[a:b]], same)
        return np.flatnonzero(same == 0) + a

    collided = np.concatenate([np.zeros(0, np.int64), *run(compare, _blocks(len(rows), parts))])
    crash: list[str] = []
    if collided.size:
        crash_id: dict[bytes, int] = {}
        cid = np.zeros(len(rows), np.uint32)
        for i in collided.tolist():
            stem = arena[offs[i] : offs[i] + lens[i]].tobytes()
            if stem not in crash_id:
                crash_id[stem] = len(crash_id) + 1
                crash.append(stem.decode("utf-8"))
            cid[i] = crash_id[stem]
        rows["crashid"] = cid
    return crash


def build(
    root: str | os.PathLike[str],
    split: str | None = None,
    *,
    fold: str | None = None,
    out: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    show_progress: bool | None = None,
    fsync: bool = True,
    on_bad_name: str = "error",
    skipped: list[tuple[str, int, bytes, str]] | None = None,
) -> Path:
    """Scan the shards of ``split`` under ``root`` and write ``<root>/<split>.taridx`` (atomically).

    Parameters
    ----------
    root, split
        Where the shards ``<split>_<digits>.tar`` are, and the split name (``fold=`` is its
        old name, deprecated).
    out
        Index path (default ``<root>/<split>.taridx``).
    workers
        Threads walking the shards (default :func:`tenfold.core.parallel.threads`: the cores
        this process may use, capped by ``TENFOLD_THREADS``). Shards are cut into ranges of at
        least 4 MiB walked in parallel, so one large shard uses every thread too.
    show_progress
        Force the progress bar on or off (default: on a terminal).
    fsync
        Make the index durable before returning (default); ``False`` still replaces it
        atomically but skips the two fsyncs (file, directory). See :func:`write_rows`.
    on_bad_name
        A member whose basename holds a newline cannot be indexed: ``"error"`` (default) fails
        the build with a ``FormatError`` naming the shard, offset and name (nothing written);
        ``"skip"`` leaves such members out.
    skipped
        A list to which each member left out is appended as ``(shard file name, header
        offset, name bytes, reason)``.

    Returns the path written.
    """
    _check_policy(on_bad_name)
    split = required_split(split, fold, "build")
    paths = shard_paths(root, split)
    if not paths:
        raise FileNotFoundError(shards_wanted(split, os.fspath(root)))
    nt = parallel.threads() if workers is None else max(1, workers)
    shards = _scan_split(paths, nt, on_bad_name, show_progress, f"index {split}")
    if skipped is not None:
        for p, cs in zip(paths, shards, strict=True):
            skipped.extend((p.name, off, nm, why) for c in cs for off, nm, why in c.skipped)
    chunks = [(fid, c) for fid, cs in enumerate(shards) for c in cs]
    with parallel.scoped(nt, "tenfold-taridx-fold") as pool:
        got = _fold(chunks, len(paths), pool.map if nt > 1 else map, nt)
    rows, ext, crash, n_stems, n_runs = got
    flags = FLAG_CONTIGUOUS if n_runs == n_stems else 0
    target = Path(out) if out is not None else Path(root) / f"{split}.taridx"
    write_rows(target, rows, ext, crash, n_stems=n_stems, flags=flags, fsync=fsync)
    return target


def _indexable_after(buf: np.ndarray, start: int) -> tuple[int, str] | None:
    """The first member from ``start`` on that the builder would index (a regular file with a
    name it can store), or a scan error there: ``(offset, what)``; ``None`` when there is none
    (zero blocks, the end, or only directories, links and the like)."""
    tail = buf[start:]
    if not tail.size:
        return None
    tarscan = _kernels.load("tarscan")
    cap = tail.size // BLOCK
    outs = [np.empty(cap, np.int64) for _ in range(6)] + [np.empty(cap, np.uint8)]
    count, code, where = tarscan.scan(tail, *outs, lanes=1)
    hdr_off, _size, _po, _pl, name_off, name_len, tflag = outs
    for k in range(count):
        if tflag[k] in REGULAR_TYPES:
            nm = bytes(tail[name_off[k] : name_off[k] + name_len[k]])
            if bad_name(nm) is None:
                return start + int(hdr_off[k]), f"member {nm.decode('utf-8', 'replace')!r}"
    if code:
        msg = _MESSAGES.get(code, (FormatError, f"scanner error {code}"))[1]
        return start + int(where), msg
    return None


def _stale_rows(
    index: Index, rows: np.ndarray, path: Path, sample: int, deep: bool
) -> tuple[type[TenfoldError], str] | None:
    """Why shard ``path`` no longer matches its ``rows`` (a structured subset), or ``None``:
    ``(error class, reason)``."""
    fsize = path.stat().st_size
    with MappedFile(path, fmt=FMT) as mf:
        buf = mf.buffer()
        if not len(rows):
            found = _indexable_after(buf, 0)
            if found is not None:
                return IntegrityError, (
                    f"has members but the index has no rows for it "
                    f"({found[1]} at offset {found[0]:#x})"
                )
            return None
        ends = rows["offset"].astype(np.int64) + BLOCK + rows["size"].astype(np.int64)
        last = int(ends.max())
        if last > fsize:
            return TruncatedError, f"size {fsize} is smaller than the indexed data end {last}"
        if deep:
            picks = np.arange(len(rows))
        else:
            picks = np.unique(
                np.linspace(0, len(rows) - 1, min(sample, len(rows))).astype(np.int64)
            )
            picks = np.union1d(picks, [int(np.argmax(ends))])
        err = _first_bad(index, rows[picks], buf)
        if err is not None:
            # the reason without the format prefix (the caller names the shard and the format)
            return type(err), str(err).removeprefix(f"{FMT}: ")
        found = _indexable_after(buf, -(-last // BLOCK) * BLOCK)
        if found is not None:
            return IntegrityError, f"{found[1]} at offset {found[0]:#x} after the last indexed one"
    return None


def _first_bad(index: Index, rows: np.ndarray, buf: np.ndarray) -> TenfoldError | None:
    """The error of the first of ``rows`` (one shard's, in ``buf``) whose header does not name
    its member, checksum included; one kernel pass (``RowCheck``), Python only for the rows it
    flags (errors, non-ASCII names)."""
    m = len(rows)
    if not m:
        return None
    cols = np.empty((m, 4), np.int64)  # offsets and sizes <= 2**62 (validate_rows)
    cols[:, 0] = rows["offset"]
    cols[:, 0] += BLOCK
    cols[:, 1] = rows["size"]
    cols[:, 2] = 0
    cols[:, 3] = rows["extid"]
    kh = np.array(rows["keyhash"], np.uint64)  # aligned copy
    exts = tuple(e.encode("utf-8") for e in index.ext)
    ts = _kernels.load("tarscan")
    k = 0
    while k < m:
        bad = ts.RowCheck(cols, kh, np.array([k, m], np.int64), exts, True).sample(buf, 0, 0)
        if bad < 0:
            return None
        r = rows[bad]
        err = member_problem(
            buf,
            int(r["offset"]),
            int(r["size"]),
            int(r["keyhash"]),
            index.ext[int(r["extid"])],
            ext_b=exts[int(r["extid"])],
            checksum=True,
        )
        if err is not None:
            return err
        k = bad + 1  # a non-ASCII name the kernel leaves to Python, and it matched
    return None


def _changed_after(path: Path, index_mtime: int | None) -> bool:
    if index_mtime is None:
        return False
    st = path.stat()
    return max(st.st_mtime_ns, st.st_ctime_ns) > index_mtime


def _index_mtime(index: Index) -> int | None:
    p = getattr(index, "path", None)
    try:
        return os.stat(p).st_mtime_ns if p is not None else None
    except OSError:
        return None


def stale_shard(
    index: Index,
    fid: int,
    path: str | os.PathLike[str],
    *,
    sample: int = 8,
    deep: bool | None = None,
) -> TenfoldError | None:
    """The error (not raised; ``TruncatedError`` when the shard is too short, else
    ``IntegrityError``) saying why shard ``fid`` (the file at ``path``) no longer matches
    ``index``, or ``None``.

    See :func:`stale_shards`; ``deep=None`` checks every row when the shard's mtime or ctime is
    newer than the index file, ``True`` always, ``False`` never (sampled rows only).
    """
    index.validate_rows()
    path = Path(path)
    rows = (
        index.rows[np.flatnonzero(index.column("fid") == fid)] if index.n_rows else index.rows[:0]
    )
    if deep is None:
        deep = _changed_after(path, _index_mtime(index))
    got = _stale_rows(index, rows, path, sample, deep)
    if got is None:
        return None
    cls, why = got
    return cls(
        describe(FMT, f"shard {path.name}", detail=f"changed since {index.name} was built: {why}")
    )


def stale_shards(
    index: Index,
    root: str | os.PathLike[str],
    split: str | None = None,
    *,
    fold: str | None = None,
    sample: int = 8,
) -> dict[str, str]:
    """Shards that changed since ``index`` was built: ``{shard file name: reason}``.

    Checks every shard exists and holds every indexed member (size), re-reads up to ``sample``
    header blocks per shard (first, last and evenly spaced rows; every row of a shard whose
    mtime or ctime is newer than the index file) and checks each still names its row's member
    (valid regular-file header, name giving the row's stem hash and extension, size; see
    :mod:`tenfold.taridx._members`), and that no member the builder would index follows the
    last indexed one. A swapped, renamed-over or rewritten shard is reported. ``{}`` means up
    to date.
    """
    split = required_split(split, fold, "stale_shards")
    index.validate_rows()  # offsets and sizes bounded: the int64 arithmetic below is exact
    paths = shard_paths(root, split)
    fids = index.rows["fid"]
    problems: dict[str, str] = {}
    max_fid = int(fids.max()) if index.n_rows else -1
    for missing in range(len(paths), max_fid + 1):
        problems[f"{split} fid {missing}"] = "shard missing (the index has rows for it)"
    order = np.argsort(fids, kind="stable") if index.n_rows else np.zeros(0, np.int64)
    bounds = np.searchsorted(fids[order], np.arange(len(paths) + 1)) if index.n_rows else None
    index_mtime = _index_mtime(index)
    for fid, path in enumerate(paths):
        sel = order[bounds[fid] : bounds[fid + 1]] if bounds is not None else order[:0]
        got = _stale_rows(index, index.rows[sel], path, sample, _changed_after(path, index_mtime))
        if got is not None:
            problems[path.name] = got[1]
    return problems

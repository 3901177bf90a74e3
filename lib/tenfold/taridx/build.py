"""Building a fold's index from its tar shards, and checking an index against its shards.

The shards of fold ``F`` under ``root`` are the files ``F_<digits>.tar``; a shard's ``fid`` is
its position in string-sorted order (an empty shard keeps its fid). Each shard is memory-mapped
and walked by the ``tarscan`` kernel (header blocks only, payloads are never read); names are
split and hashed by the ``strhash`` kernels. Shards are scanned by a pool of threads (the kernels
release the GIL) when there are several.

Rows: one per regular file (typeflag ``0``, NUL or ``7``), in archive order, shards in fid order.
Stem and extension come from the basename (directory part dropped), split at its first dot; the
extension is lower-cased; names that are not valid UTF-8 are decoded with U+FFFD replacements
before hashing (``keyhash = xxh64(stem.encode("utf-8"))``).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np

from .. import _kernels
from ..core import parallel
from ..core.mapped import MappedFile
from ..core.progress import progress
from ..errors import FormatError, TruncatedError, UnsupportedError, describe
from ._spec import BLOCK, FLAG_CONTIGUOUS, FMT, ROW_DT
from .writer import count_runs, write_rows

__all__ = ["shard_paths", "scan_shard", "ShardScan", "fold_rows", "build", "stale_shards",
           "REGULAR_TYPES"]

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


def shard_paths(root: str | os.PathLike[str], fold: str) -> list[Path]:
    """The shards ``<fold>_<digits>.tar`` of ``fold`` under ``root``, in fid order."""
    pat = re.compile(re.escape(fold) + r"_[0-9]+\.tar")
    root = Path(root)
    names = sorted(e.name for e in os.scandir(root) if e.is_file() and pat.fullmatch(e.name))
    return [root / n for n in names]


@dataclasses.dataclass
class ShardScan:
    """What one shard contributes: its rows and their stems (packed) and extensions."""

    offset: np.ndarray  # int64, header offsets of regular members
    size: np.ndarray  # int64
    stems: np.ndarray  # uint8, stems packed back to back (UTF-8)
    stem_len: np.ndarray  # int64
    ext_local: np.ndarray  # int64, index into ``exts``
    exts: list[str]  # first-seen order within the shard


def _members(buf: np.ndarray, name: str) -> tuple[np.ndarray, ...]:
    tarscan = _kernels.load("tarscan")
    cap = buf.size // BLOCK
    outs = [np.empty(cap, np.int64) for _ in range(6)] + [np.empty(cap, np.uint8)]
    count, code, where = tarscan.scan(buf, *outs)
    if code:
        cls, msg = _MESSAGES.get(code, (FormatError, f"scanner error {code}"))
        raise cls(describe(FMT, f"shard {name}", offset=where, detail=msg))
    return tuple(o[:count] for o in outs)


def _ext_name(buf: np.ndarray, off: int, length: int) -> str:
    return bytes(buf[off : off + length]).decode("utf-8", "replace").lower()


def _ext_ids(buf: np.ndarray, exthash: np.ndarray, ex_off: np.ndarray, ex_len: np.ndarray,
             ext_local: np.ndarray, ext_id: dict[str, int]) -> None:
    """Extension ids in first-seen order. Folds have few extensions: peel them off one by one
    (one vectorised compare each); fall back to a sort when there are many."""
    todo = np.ones(exthash.size, bool)
    for _ in range(32):
        rest = np.flatnonzero(todo[:1]) if todo[0] else np.flatnonzero(todo)
        if rest.size == 0:
            return
        i = int(rest[0])
        same = exthash == exthash[i]
        ext_local[same] = ext_id.setdefault(_ext_name(buf, ex_off[i], ex_len[i]), len(ext_id))
        todo &= ~same
    if not todo.any():
        return
    left = np.flatnonzero(todo)
    uniq, first, inv = np.unique(exthash[left], return_index=True, return_inverse=True)
    local_of_uniq = np.empty(uniq.size, np.int64)
    for u in np.argsort(first, kind="stable").tolist():
        i = int(left[first[u]])
        local_of_uniq[u] = ext_id.setdefault(_ext_name(buf, ex_off[i], ex_len[i]), len(ext_id))
    ext_local[left] = local_of_uniq[inv]


def scan_shard(path: str | os.PathLike[str]) -> ShardScan:
    """Scan one shard (regular members only); errors name the shard and the offset."""
    name = os.path.basename(os.fspath(path))
    strhash = _kernels.load("strhash")
    with MappedFile(path, fmt=FMT) as mf:
        buf = mf.buffer()
        hdr_off, size, _po, _pl, name_off, name_len, tflag = _members(buf, name)
        regular = np.isin(tflag, REGULAR_TYPES)
        if not regular.all():
            hdr_off, size = hdr_off[regular], size[regular]
            name_off, name_len = name_off[regular], name_len[regular]
        n = hdr_off.size
        st_off, st_len, ex_off, ex_len = (np.empty(n, np.int64) for _ in range(4))
        ascii = np.empty(n, np.uint8)
        big = buf if buf.size else np.zeros(1, np.uint8)
        strhash.split_basenames(big, name_off, name_len, st_off, st_len, ex_off, ex_len, ascii)
        exthash = np.empty(n, np.uint64)
        strhash.hash_ranges(big, ex_off, ex_len, 0, exthash, True)
        stems = np.empty(int(st_len.sum()), np.uint8)
        strhash.gather(big, st_off, st_len, stems)
        ext_local = np.empty(n, np.int64)
        exts: list[str] = []
        ext_id: dict[str, int] = {}
        if n:
            _ext_ids(buf, exthash, ex_off, ex_len, ext_local, ext_id)
        bad = np.flatnonzero(ascii == 0)
        if bad.size:  # non-ASCII basenames: decode (U+FFFD for invalid UTF-8) in Python
            stem_list = []
            stem_starts = np.zeros(n + 1, np.int64)
            np.cumsum(st_len, out=stem_starts[1:])
            fixed = {}
            for i in bad.tolist():
                base = bytes(buf[st_off[i] : ex_off[i] + ex_len[i]])
                text = base.decode("utf-8", "replace")
                fixed[i] = text.partition(".")[0].encode("utf-8")
            for i in range(n):
                stem_list.append(fixed[i] if i in fixed else
                                 stems[stem_starts[i] : stem_starts[i + 1]].tobytes())
            joined = b"".join(stem_list)
            stems = np.frombuffer(joined, np.uint8).copy()
            st_len = np.fromiter(map(len, stem_list), np.int64, n)
        exts = list(ext_id)
    return ShardScan(hdr_off.copy(), size.copy(), stems, st_len.copy(), ext_local, exts)


def _first_of_key(keyhash: np.ndarray) -> tuple[int, np.ndarray]:
    """``(number of distinct keys, the first row with each row's key)``, with a hash table
    (no sort) when the rows fit its int32 slots."""
    n = keyhash.size
    if n > 0x7FFFFFFF:
        uniq, first, inv = np.unique(keyhash, return_index=True, return_inverse=True)
        return int(uniq.size), first[inv]
    ht = _kernels.load("hashtable")
    table = np.full(1 << max(1, int(2 * n).bit_length()), -1, np.int32)
    n_unique = ht.insert(keyhash, np.arange(n, dtype=np.int64), table)
    first = np.empty(n, np.int64)
    ht.probe(keyhash, table, keyhash, first)
    return int(n_unique), first


def fold_rows(scans: list[ShardScan]) -> tuple[np.ndarray, list[str], list[str], int]:
    """Assemble shard scans (in fid order) into ``(rows, ext, crash, n_stems)``."""
    strhash = _kernels.load("strhash")
    n = sum(s.offset.size for s in scans)
    rows = np.zeros(n, ROW_DT)
    ext_id: dict[str, int] = {}
    pos = 0
    for fid, s in enumerate(scans):
        m = s.offset.size
        if m:
            to_global = np.array([ext_id.setdefault(e, len(ext_id)) for e in s.exts], np.int64)
            rows["fid"][pos : pos + m] = fid
            rows["offset"][pos : pos + m] = s.offset
            rows["size"][pos : pos + m] = s.size
            rows["extid"][pos : pos + m] = to_global[s.ext_local]
        pos += m
    if len(ext_id) > 0xFFFF or len(scans) > 0x10000:
        raise UnsupportedError(describe(FMT, "fold", detail="more than 65536 shards or extensions"))
    arena = np.concatenate([s.stems for s in scans]) if scans else np.zeros(0, np.uint8)
    lens = np.concatenate([s.stem_len for s in scans]) if scans else np.zeros(0, np.int64)
    offs = np.zeros(n, np.int64)
    if n > 1:
        np.cumsum(lens[:-1], out=offs[1:])
    big = arena if arena.size else np.zeros(1, np.uint8)
    keyhash = np.empty(n, np.uint64)
    strhash.hash_ranges(big, offs, lens, 0, keyhash)
    rows["keyhash"] = keyhash
    crash: list[str] = []
    n_unique = 0
    if n:
        n_unique, f = _first_of_key(keyhash)
        same = np.empty(n, np.uint8)
        strhash.ranges_equal(big, offs, lens, offs[f], lens[f], same)
        crash_id: dict[bytes, int] = {}
        cid = np.zeros(n, np.uint32)
        for i in np.flatnonzero(same == 0).tolist():  # real xxh64 collisions (rare)
            stem = arena[offs[i] : offs[i] + lens[i]].tobytes()
            if stem not in crash_id:
                crash_id[stem] = len(crash_id) + 1
                crash.append(stem.decode("utf-8"))
            cid[i] = crash_id[stem]
        rows["crashid"] = cid
    n_stems = n_unique + len(crash)
    return rows, list(ext_id), crash, n_stems


def _workers(paths: list[Path], workers: int | None) -> int:
    if workers is not None:
        return max(1, workers)
    total = sum(p.stat().st_size for p in paths)
    if len(paths) < 2 or total < (64 << 20):
        return 1
    return min(len(paths), os.cpu_count() or 1)


def build(root: str | os.PathLike[str], fold: str, *, out: str | os.PathLike[str] | None = None,
          workers: int | None = None, show_progress: bool | None = None,
          fsync: bool = True) -> Path:
    """Scan the shards of ``fold`` under ``root`` and write ``<root>/<fold>.taridx`` (atomically).

    Parameters
    ----------
    root, fold
        Where the shards ``<fold>_<digits>.tar`` are, and the fold name.
    out
        Index path (default ``<root>/<fold>.taridx``).
    workers
        Threads scanning shards (default: one per core when there are several large shards).
    show_progress
        Force the progress bar on or off (default: on a terminal).
    fsync
        Make the index durable before returning (default); ``False`` still replaces it
        atomically but skips the two fsyncs (file, directory). See :func:`write_rows`.

    Returns the path written.
    """
    paths = shard_paths(root, fold)
    if not paths:
        raise FileNotFoundError(f"{FMT}: no shards {fold}_<id>.tar in {os.fspath(root)}")
    nw = _workers(paths, workers)
    bar = dict(total=len(paths), desc=f"index {fold}", unit="shard", show=show_progress)
    if nw == 1:
        scans = list(progress((scan_shard(p) for p in paths), **bar))  # type: ignore[arg-type]
    else:
        with parallel.scoped(nw, "tenfold-taridx-scan") as pool:
            scans = list(progress(pool.map(scan_shard, paths), **bar))  # type: ignore[arg-type]
    rows, ext, crash, n_stems = fold_rows(scans)
    flags = FLAG_CONTIGUOUS if count_runs(rows["keyhash"], rows["crashid"]) == n_stems else 0
    target = Path(out) if out is not None else Path(root) / f"{fold}.taridx"
    write_rows(target, rows, ext, crash, n_stems=n_stems, flags=flags, fsync=fsync)
    return target


def _header_size_ok(block: bytes, want: int) -> str | None:
    ref = _kernels.load("tarscan", "reference")
    if not any(block):
        return "no header there (zero block)"
    if not ref._checksum_ok(block):
        return "header checksum mismatch"
    t = block[156]
    if t not in REGULAR_TYPES:
        return f"typeflag {chr(t)!r} is not a regular file"
    got = ref._number(block[124:136])
    if want < 0o77777777777 and got != want:
        return f"size field {got}, index says {want}"
    return None


def stale_shards(index: object, root: str | os.PathLike[str], fold: str, *,
                 sample: int = 8) -> dict[str, str]:
    """Shards that changed since ``index`` was built: ``{shard file name: reason}``.

    Checks every shard exists, holds every indexed member (size), has no member after the last
    indexed one, and re-reads up to ``sample`` header blocks per shard (first, last and evenly
    spaced rows): checksum, typeflag and size must match the rows. ``{}`` means up to date.
    """
    from .reader import Index

    assert isinstance(index, Index)
    index.validate_rows()  # offsets and sizes bounded: the int64 arithmetic below is exact
    paths = shard_paths(root, fold)
    fids = index.rows["fid"]
    problems: dict[str, str] = {}
    max_fid = int(fids.max()) if index.n_rows else -1
    for missing in range(len(paths), max_fid + 1):
        problems[f"{fold} fid {missing}"] = "shard missing (the index has rows for it)"
    order = np.argsort(fids, kind="stable") if index.n_rows else np.zeros(0, np.int64)
    bounds = np.searchsorted(fids[order], np.arange(len(paths) + 1)) if index.n_rows else None
    for fid, path in enumerate(paths):
        fsize = path.stat().st_size
        if bounds is None or bounds[fid] == bounds[fid + 1]:
            with open(path, "rb") as f:
                head = f.read(BLOCK)
            if len(head) == BLOCK and any(head):
                problems[path.name] = "has members but the index has no rows for it"
            continue
        sel = order[bounds[fid] : bounds[fid + 1]]
        rows = index.rows[sel]
        ends = rows["offset"].astype(np.int64) + BLOCK + rows["size"].astype(np.int64)
        last = int(ends.max())
        if last > fsize:
            problems[path.name] = f"size {fsize} is smaller than the indexed data end {last}"
            continue
        picks = np.unique(np.linspace(0, len(rows) - 1, min(sample, len(rows))).astype(np.int64))
        picks = np.union1d(picks, [int(np.argmax(ends))])
        with open(path, "rb") as f:
            for k in picks.tolist():
                off = int(rows["offset"][k])
                why = _header_size_ok(os.pread(f.fileno(), BLOCK, off), int(rows["size"][k]))
                if why is not None:
                    problems[path.name] = f"header at offset {off:#x}: {why}"
                    break
            else:
                after = -(-last // BLOCK) * BLOCK
                blk = os.pread(f.fileno(), BLOCK, after) if after + BLOCK <= fsize else b""
                if any(blk):
                    problems[path.name] = f"member at offset {after:#x} after the last indexed one"
    return problems

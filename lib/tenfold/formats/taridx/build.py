"""Building a split's index from its tar shards, and checking an index against its shards.

The shards of split ``F`` under ``root`` are the files ``F_<digits>.tar``; a shard's ``fid`` is
its position in string-sorted order (an empty shard keeps its fid). Each shard is memory-mapped
and walked by the ``tarscan`` kernel (header blocks only, payloads are never read); names are
split and hashed by the ``strhash`` kernels. Shards are scanned by a pool of threads (the kernels
release the GIL) when there are several.

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

import dataclasses
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ... import _kernels
from ...core import parallel
from ...core.mapped import MappedFile
from ...core.progress import progress
from ...errors import (
    FormatError,
    IntegrityError,
    TenfoldError,
    TruncatedError,
    UnsupportedError,
    describe,
)
from ._members import bad_name, member_problem
from ._spec import BLOCK, FLAG_CONTIGUOUS, FMT, ROW_DT
from ._split import required_split
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
    """The shards ``<split>_<digits>.tar`` of ``split`` under ``root``, in fid order."""
    split = required_split(split, fold, "shard_paths")
    pat = re.compile(re.escape(split) + r"_[0-9]+\.tar")
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
    #: members left out for their names (``on_bad_name="skip"``): (header offset, name, why)
    skipped: list[tuple[int, bytes, str]] = dataclasses.field(default_factory=list)


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
    return bytes(buf[off : off + length]).decode("utf-8", "replace").lower()


def _ext_ids(
    buf: np.ndarray,
    exthash: np.ndarray,
    ex_off: np.ndarray,
    ex_len: np.ndarray,
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


def _check_policy(on_bad_name: str) -> None:
    if on_bad_name not in BAD_NAME_POLICIES:
        raise ValueError(f"on_bad_name must be one of {BAD_NAME_POLICIES}, got {on_bad_name!r}")


def _bad_rows(
    stems: np.ndarray, st_len: np.ndarray, ext_local: np.ndarray, exts: list[str]
) -> np.ndarray:
    """Rows whose stem or extension holds a newline (row numbers, ascending)."""
    bad_ext = [i for i, e in enumerate(exts) if "\n" in e]
    nl = np.flatnonzero(stems == 10) if stems.size else np.zeros(0, np.int64)
    if not bad_ext and not nl.size:
        return np.zeros(0, np.int64)
    ends = np.cumsum(st_len)
    rows = np.searchsorted(ends, nl, side="right")
    if bad_ext:
        rows = np.concatenate([rows, np.flatnonzero(np.isin(ext_local, bad_ext))])
    return np.unique(rows)


def scan_shard(path: str | os.PathLike[str], *, on_bad_name: str = "error") -> ShardScan:
    """Scan one shard (regular members only); errors name the shard and the offset.

    ``on_bad_name``: ``"error"`` (default) refuses a member whose basename holds a newline
    (``FormatError`` naming shard, offset and name); ``"skip"`` leaves it out and lists it in
    :attr:`ShardScan.skipped`.
    """
    _check_policy(on_bad_name)
    name = os.path.basename(os.fspath(path))
    strhash = _kernels.load("strhash")
    with MappedFile(path, fmt=FMT) as mf:
        buf = mf.buffer()
        hdr_off, size, _po, _pl, name_off, name_len, tflag = scan_members(buf, name)
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
                stem_list.append(
                    fixed[i] if i in fixed else stems[stem_starts[i] : stem_starts[i + 1]].tobytes()
                )
            joined = b"".join(stem_list)
            stems = np.frombuffer(joined, np.uint8).copy()
            st_len = np.fromiter(map(len, stem_list), np.int64, n)
        exts = list(ext_id)
        skipped: list[tuple[int, bytes, str]] = []
        bad = _bad_rows(stems, st_len, ext_local, exts)
        if bad.size:
            for i in bad.tolist():
                full = bytes(buf[name_off[i] : name_off[i] + name_len[i]])
                why = bad_name(full) or "newline in the basename"
                if on_bad_name == "error":
                    raise FormatError(
                        describe(
                            FMT,
                            f"shard {name}",
                            offset=int(hdr_off[i]),
                            detail=f"member name {full!r}: {why}; "
                            "on_bad_name='skip' leaves such members out",
                        )
                    )
                skipped.append((int(hdr_off[i]), full, why))
            keep = np.ones(n, bool)
            keep[bad] = False
            stems = stems[np.repeat(keep, st_len)]
            hdr_off, size, st_len = hdr_off[keep], size[keep], st_len[keep]
            # extension ids again, in first-seen order over the members kept
            old = ext_local[keep]
            ids, first = np.unique(old, return_index=True)
            ids = ids[np.argsort(first, kind="stable")]
            remap = np.zeros(max(len(exts), 1), np.int64)
            remap[ids] = np.arange(ids.size)
            ext_local = remap[old]
            exts = [exts[i] for i in ids.tolist()]
    return ShardScan(hdr_off.copy(), size.copy(), stems, st_len.copy(), ext_local, exts, skipped)


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
        raise UnsupportedError(
            describe(FMT, "split", detail="more than 65536 shards or extensions")
        )
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
    return min(len(paths), parallel.threads())  # the CPUs we may use, TENFOLD_THREADS caps


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
        Threads scanning shards (default: one per core when there are several large shards).
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
        raise FileNotFoundError(f"{FMT}: no shards {split}_<id>.tar in {os.fspath(root)}")
    nw = _workers(paths, workers)
    bar = dict(total=len(paths), desc=f"index {split}", unit="shard", show=show_progress)

    def scan(p: Path) -> ShardScan:
        return scan_shard(p, on_bad_name=on_bad_name)

    if nw == 1:
        scans = list(progress((scan(p) for p in paths), **bar))  # type: ignore[arg-type]
    else:
        with parallel.scoped(nw, "tenfold-taridx-scan") as pool:
            scans = list(progress(pool.map(scan, paths), **bar))  # type: ignore[arg-type]
    if skipped is not None:
        for p, sc in zip(paths, scans, strict=True):
            skipped.extend((p.name, off, nm, why) for off, nm, why in sc.skipped)
    rows, ext, crash, n_stems = fold_rows(scans)
    flags = FLAG_CONTIGUOUS if count_runs(rows["keyhash"], rows["crashid"]) == n_stems else 0
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

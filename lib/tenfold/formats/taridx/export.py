"""Indexes for other loaders, written from a TARIDX index: :func:`export_dali`, :func:`export_wids`.

Both loaders otherwise index each shard themselves, reading it whole (DALI's ``wds2idx`` runs
``tar --list`` twice per shard; wids' ``widsindex`` reads every shard to count its samples).
Here the members come from the index, and only their header blocks are read from the shards
(one page each, to learn the full member names, which the index stores as hashes), so the
export costs a fraction of a second per 100,000 members from the page cache.

**DALI** (``fn.readers.webdataset(paths=..., index_paths=...)``): one text file per shard,
``<shard stem>.idx``. Line 1 is ``v1.2 <samples>``; then one line per sample, its members in
file order, each as ``<ext> <payload offset> <size> <member name>`` separated by single spaces.
A sample is a run of consecutive members whose names agree up to the first dot of the basename
(directory included); the extension is everything after that dot, as written; the offset is
the payload's (a multiple of 512). Members whose basename starts with a dot are left out, as
DALI's own indexer does. Refused (``UnsupportedError`` naming shard, offset and name): a member
name holding whitespace (the format splits on it), a basename without a dot (no extension),
and a shard with no sample (DALI refuses a count of 0). ``version="v1.1"`` writes the three
fields without the name (DALI reads both; names with whitespace are then fine).

**wids** (``wids.ShardListDataset("<split>.wids.json")``): a shard list
``{"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": ..., "shardlist": [{"url",
"nsamples", "filesize"}, ...]}``. ``nsamples`` counts samples as wids does when it opens the
shard: runs of consecutive regular members (typeflag ``0`` or NUL) whose ustar ``name`` field
agrees up to the first dot of the basename (wids reads that field only, not pax or GNU long
names). URLs are relative to the JSON file (wids resolves them against its directory), or
``url_prefix + "/" + shard name`` when a prefix is given.

Every member's header is checked against its row before anything is written (name hashes to
the row's key hash, size equal): a shard changed since indexing is an ``IntegrityError``.
Shards must be local files.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ... import _kernels
from ...core.atomic import atomic_write
from ...core.mapped import MappedFile
from ...errors import IntegrityError, TenfoldError, UnsupportedError, describe
from ._members import split_name
from ._spec import BLOCK, FMT, E
from ._split import required_split
from .build import scan_members as scan
from .build import shard_paths
from .reader import Index

__all__ = ["export", "export_dali", "export_wids", "ShardMembers", "shard_members", "DALI_VERSIONS"]

DALI_VERSIONS = ("v1.2", "v1.1")
_WS = re.compile(rb"[ \t\n\r\f\v]")


class ShardMembers:
    """One shard's indexed members in file order, with their names as the header gives them.

    ``offset`` (header), ``size`` and ``tflag`` are int64 arrays. The full member names (the
    ustar prefix joined when the name came from the ustar fields) lie back to back in
    ``arena``: name ``j`` is ``arena[start[j]:start[j] + length[j]]``. ``ustar`` lists the
    names of the ``name`` field alone (what wids reads) where they differ, by position.
    """

    def __init__(
        self,
        shard: str,
        offset: np.ndarray,
        size: np.ndarray,
        tflag: np.ndarray,
        arena: np.ndarray,
        start: np.ndarray,
        length: np.ndarray,
        ustar: dict[int, bytes],
    ) -> None:
        self.shard = shard
        self.offset = offset
        self.size = size
        self.tflag = tflag
        self.arena = arena
        self.start = start
        self.length = length
        self.ustar = ustar

    def __len__(self) -> int:
        return int(self.offset.size)

    def name(self, j: int) -> bytes:
        a = int(self.start[j])
        return self.arena[a : a + int(self.length[j])].tobytes()

    def names(self) -> list[bytes]:
        blob = self.arena.tobytes()
        return [
            blob[a : a + n] for a, n in zip(self.start.tolist(), self.length.tolist(), strict=True)
        ]

    def split(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per member: key length (to the first dot of the basename, directory included),
        extension start (in ``arena``), and whether the basename has a dot at all."""
        n = len(self)
        st_off, st_len, ex_off, ex_len = (np.empty(n, np.int64) for _ in range(4))
        ascii = np.empty(n, np.uint8)
        big = self.arena if self.arena.size else np.zeros(1, np.uint8)
        _kernels.load("strhash").split_basenames(
            big, self.start, self.length, st_off, st_len, ex_off, ex_len, ascii
        )
        key_len = st_off + st_len - self.start
        has_dot = key_len < self.length
        return key_len, key_len + self.start + 1, has_dot


def _open_index(
    root: str | os.PathLike[str], split: str, index: str | os.PathLike[str] | None
) -> tuple[Index, list[Path]]:
    if "://" in os.fspath(root) and not os.fspath(root).startswith("file://"):
        raise UnsupportedError(
            describe(FMT, os.fspath(root), detail="export reads member headers: local shards only")
        )
    path = os.fspath(index) if index is not None else os.path.join(root, f"{split}.taridx")
    idx = Index.open(path)
    try:
        idx.validate_rows()
        shards = shard_paths(root, split)
        top = int(idx.column("fid").max()) if idx.n_rows else -1
        if top >= len(shards):
            raise IntegrityError(
                describe(
                    FMT,
                    f"split {split!r} under {os.fspath(root)}",
                    detail="shards missing",
                    expected=f"> {top} shards",
                    got=len(shards),
                )
            )
    except BaseException:
        idx.close()
        raise
    return idx, shards


def _changed(name: str, offset: int, what: str, **kw: Any) -> IntegrityError:
    return IntegrityError(
        describe(
            FMT,
            f"shard {name}: member header",
            offset=offset,
            detail=f"{what} (shard changed since the index was built?); rebuild the index "
            "(tenfold index build)",
            **kw,
        )
    )


def shard_members(idx: Index, fid: int, path: str | os.PathLike[str]) -> ShardMembers:
    """The indexed members of shard ``fid`` (at ``path``) in file order, their names read
    from the shard's headers (one scan) and checked against the rows."""
    fids = idx.column("fid")
    sel = np.flatnonzero(fids == fid)
    off = idx.column("offset")[sel].astype(np.int64)
    order = np.argsort(off, kind="stable")
    sel, off = sel[order], off[order]
    size = idx.column("size")[sel].astype(np.int64)
    keyhash = idx.column("keyhash")[sel]
    name = os.path.basename(os.fspath(path))
    with MappedFile(path, fmt=FMT) as mf:
        buf = mf.buffer()
        try:
            h_off, h_size, p_off, p_len, n_off, n_len, h_t = scan(buf, name)
        except TenfoldError as exc:  # the index was built from a shard that scanned
            raise E.recast(
                IntegrityError,
                exc,
                f"shard {name}",
                message=f"{exc} (shard changed since the index was built?); rebuild the index "
                "(tenfold index build)",
            ) from None
        pos = _rows_in_scan(name, off, size, h_off, h_size)
        n_off, n_len, p_off, p_len = n_off[pos], n_len[pos], p_off[pos], p_len[pos]
        tflag = h_t[pos].astype(np.int64)
        _check_names(buf, name, off, keyhash, n_off, n_len)
        arena, start, length, ustar = _names(buf, off, n_off, n_len, p_off, p_len)
    return ShardMembers(name, off, size, tflag, arena, start, length, ustar)


def _rows_in_scan(
    name: str, off: np.ndarray, size: np.ndarray, h_off: np.ndarray, h_size: np.ndarray
) -> np.ndarray:
    """Position in the scan of each row's member; every row must find its header, with the
    row's size."""
    pos = np.searchsorted(h_off, off)
    found = pos < h_off.size
    found[found] = h_off[pos[found]] == off[found]
    if not found.all():
        j = int(np.argmin(found))
        raise _changed(name, int(off[j]), "no member header where the index has a row")
    got_size = h_size[pos]
    bad = np.flatnonzero(got_size != size)
    if bad.size:
        j = int(bad[0])
        raise _changed(
            name,
            int(off[j]),
            "member size differs",
            field="size",
            expected=int(size[j]),
            got=int(got_size[j]),
        )
    return pos


def _check_names(
    buf: np.ndarray,
    name: str,
    off: np.ndarray,
    keyhash: np.ndarray,
    n_off: np.ndarray,
    n_len: np.ndarray,
) -> None:
    """Each member's name must be the one the index hashed (its stem's xxh64)."""
    import xxhash

    sh = _kernels.load("strhash")
    n = off.size
    big = buf if buf.size else np.zeros(1, np.uint8)
    st_off, st_len, ex_off, ex_len = (np.empty(n, np.int64) for _ in range(4))
    ascii = np.empty(n, np.uint8)
    sh.split_basenames(big, n_off, n_len, st_off, st_len, ex_off, ex_len, ascii)
    got = np.empty(n, np.uint64)
    sh.hash_ranges(big, st_off, st_len, 0, got)
    for j in np.flatnonzero((got != keyhash) | (ascii == 0)).tolist():
        full = buf[n_off[j] : n_off[j] + n_len[j]].tobytes()
        stem, _ext = split_name(full)
        if xxhash.xxh64_intdigest(stem) != int(keyhash[j]):
            raise _changed(
                name,
                int(off[j]),
                "member name does not hash to the row's keyhash",
                expected=f"{int(keyhash[j]):016x}",
                got=repr(full.decode("utf-8", "replace")),
            )


def _names(
    buf: np.ndarray,
    off: np.ndarray,
    n_off: np.ndarray,
    n_len: np.ndarray,
    p_off: np.ndarray,
    p_len: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, bytes]]:
    """The members' full names as one arena ``(arena, start, length)``, and the ustar name
    field of members whose name is longer (extended header or ustar prefix)."""
    n = off.size
    big = buf if buf.size else np.zeros(1, np.uint8)
    length = n_len.copy()
    start = np.zeros(n, np.int64)
    arena = np.empty(int(n_len.sum()), np.uint8)
    if n:
        np.cumsum(n_len[:-1], out=start[1:])
        _kernels.load("strhash").gather(big, n_off, n_len, arena)
    from_hdr = n_off == off
    ustar: dict[int, bytes] = {}
    prefixed = np.flatnonzero(from_hdr & (p_len > 0))
    for j in np.flatnonzero(~from_hdr).tolist():  # named by extended headers
        o = int(off[j])
        ustar[j] = buf[o : o + 100].tobytes().split(b"\0", 1)[0]
    if prefixed.size:  # a ustar prefix is part of the name: rebuild the arena
        names = [
            arena[a : a + k].tobytes() for a, k in zip(start.tolist(), length.tolist(), strict=True)
        ]
        for j in prefixed.tolist():
            ustar[j] = names[j]
            names[j] = buf[p_off[j] : p_off[j] + p_len[j]].tobytes() + b"/" + names[j]
        length = np.fromiter(map(len, names), np.int64, n)
        start[1:] = np.cumsum(length[:-1])
        arena = np.frombuffer(b"".join(names), np.uint8)
    return arena, start, length, ustar


def _refuse(m: ShardMembers, j: int, why: str) -> UnsupportedError:
    return UnsupportedError(
        describe(
            FMT,
            f"shard {m.shard}: member {m.name(j).decode('utf-8', 'replace')!r}",
            offset=int(m.offset[j]),
            detail=why,
        )
    )


def _runs(arena: np.ndarray, start: np.ndarray, key_len: np.ndarray) -> np.ndarray:
    """True where a member's key differs from the previous member's (the first: True)."""
    n = start.size
    new = np.ones(n, bool)
    if n > 1:
        same = np.empty(n - 1, np.uint8)
        big = arena if arena.size else np.zeros(1, np.uint8)
        _kernels.load("strhash").ranges_equal(
            big, start[1:], key_len[1:], start[:-1], key_len[:-1], same
        )
        new[1:] = same == 0
    return new


def dali_index(m: ShardMembers, version: str = "v1.2") -> bytes:
    """The DALI index file of one shard (see the module doc)."""
    if version not in DALI_VERSIONS:
        raise ValueError(f"version must be one of {DALI_VERSIONS}, got {version!r}")
    with_names = version == "v1.2"
    key_len, ext_at, has_dot = m.split()
    if not has_dot.all():
        j = int(np.argmin(has_dot))
        raise _refuse(m, j, "no extension (no dot in the basename): DALI's index needs one")
    keep = key_len > 0  # a key ending in "/" is a basename starting with a dot: left out
    keep &= (key_len == 0) | (m.arena[np.maximum(m.start + key_len - 1, 0)] != 0x2F)
    ks = np.flatnonzero(keep)
    blob = m.arena.tobytes()
    # whitespace anywhere in the names (v1.2) or extensions (v1.1) of the kept members
    for hit in _WS.finditer(blob):
        j = int(np.searchsorted(m.start, hit.start(), side="right") - 1)
        if keep[j] and (with_names or hit.start() >= ext_at[j]):
            raise _refuse(
                m,
                j,
                f"whitespace in the {'name' if with_names else 'extension'}: DALI's index "
                "format splits fields on it"
                + ("; version='v1.1' writes no names" if with_names else ""),
            )
    if not ks.size:
        raise UnsupportedError(
            describe(FMT, f"shard {m.shard}", detail="no samples: DALI refuses an empty index")
        )
    start, length = m.start[ks], m.length[ks]
    new = _runs(m.arena, start, key_len[ks])
    sep = np.where(np.append(new[1:], True), 10, 32).astype(np.uint8)  # "\n" ends a sample
    ext_start = ext_at[ks]
    fields: list[tuple[str, Any, Any]] = [
        ("text", ext_start, start + length - ext_start),
        ("byte", 32, None),
        ("int", m.offset[ks] + BLOCK, None),
        ("byte", 32, None),
        ("int", m.size[ks], None),
    ]
    if with_names:
        fields += [("byte", 32, None), ("text", start, length)]
    fields.append(("byte", sep, None))
    head = b"%s %d\n" % (version.encode(), int(new.sum()))
    return head + _assemble(m.arena, ks.size, fields).tobytes()


def _ndigits(x: np.ndarray) -> np.ndarray:
    """Decimal digits of each non-negative int64."""
    d = np.ones(x.size, np.int64)
    for k in range(1, 19):
        d += x >= 10**k
    return d


def _starts(lens: np.ndarray) -> np.ndarray:
    out = np.zeros(lens.size, np.int64)
    if lens.size > 1:
        np.cumsum(lens[:-1], out=out[1:])
    return out


def _assemble(arena: np.ndarray, n: int, fields: list[tuple[str, Any, Any]]) -> np.ndarray:
    """``n`` entries, each the concatenation of ``fields`` in order, as one byte array, built
    with array operations: ``("text", start, length)`` copies ``arena[start:start+length]``,
    ``("int", values, None)`` writes the decimal digits, ``("byte", b, None)`` one byte (a
    constant or one per entry)."""
    lens = []
    for kind, a, b in fields:
        if kind == "text":
            lens.append(np.asarray(b, np.int64))
        elif kind == "int":
            lens.append(_ndigits(np.asarray(a, np.int64)))
        else:
            lens.append(np.ones(n, np.int64))
    table = np.stack(lens, 1) if lens else np.zeros((n, 0), np.int64)
    entry = _starts(table.sum(1))
    total = int(table.sum())
    out = np.empty(total, np.uint8)
    pos = entry.copy()
    for (kind, a, _b), ln in zip(fields, lens, strict=True):
        if kind == "text":
            k = int(ln.sum())
            if k:
                step = np.arange(k, dtype=np.int64) - np.repeat(_starts(ln), ln)
                out[np.repeat(pos, ln) + step] = arena[np.repeat(np.asarray(a), ln) + step]
        elif kind == "int":
            x = np.asarray(a, np.int64)
            for d in range(int(ln.max()) if n else 0):
                sel = np.flatnonzero(ln > d)  # digit d from the left
                out[pos[sel] + d] = 48 + (x[sel] // 10 ** (ln[sel] - 1 - d)) % 10
        else:
            out[pos] = a
        pos += ln
    return out


def wids_count(m: ShardMembers) -> int:
    """How many samples wids finds in the shard (see the module doc)."""
    reg = (m.tflag == 48) | (m.tflag == 0)  # wids takes typeflag '0' and NUL only
    if not m.ustar:
        key_len, _ext_at, has_dot = m.split()
        # wids leaves out names without a dot; a dot in the directory part only is refused
        dotted = np.flatnonzero(reg & ~has_dot)
        for j in dotted.tolist():
            if b"." in m.name(j):
                raise _refuse(m, j, "a dot only in the directory part: wids would split there")
        ks = np.flatnonzero(reg & has_dot)
        return int(_runs(m.arena, m.start[ks], key_len[ks]).sum()) if ks.size else 0
    count = 0
    last: bytes | None = None
    for j in np.flatnonzero(reg).tolist():
        name = m.ustar.get(j) or m.name(j)
        if b"." not in name:
            continue
        slash = name.rfind(b"/") + 1
        dot = name.find(b".", slash)
        if dot < 0:
            raise _refuse(m, j, "a dot only in the directory part: wids would split there")
        if name[:dot] != last:
            count += 1
            last = name[:dot]
    return count


def _members(
    root: str | os.PathLike[str], split: str, index: str | os.PathLike[str] | None
) -> tuple[list[Path], list[ShardMembers]]:
    idx, shards = _open_index(root, split, index)
    with idx:
        return shards, [shard_members(idx, f, p) for f, p in enumerate(shards)]


def _write_dali(
    shards: list[Path], texts: list[bytes], out_dir: str | os.PathLike[str], fsync: bool
) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for p, text in zip(shards, texts, strict=True):
        dest = out / (p.name.split(".", 1)[0] + ".idx")
        with atomic_write(dest, fsync=fsync) as f:
            f.write(text)
        paths.append(dest)
    return paths


def _write_wids(
    shards: list[Path],
    counts: list[int],
    dest: str | os.PathLike[str],
    name: str,
    url_prefix: str | None,
    fsync: bool,
) -> Path:
    here = os.path.dirname(os.path.abspath(dest))
    shardlist: list[dict[str, Any]] = []
    for p, c in zip(shards, counts, strict=True):
        if url_prefix is not None:
            url = url_prefix.rstrip("/") + "/" + p.name
        else:
            url = os.path.relpath(os.path.abspath(p), here)
        shardlist.append({"url": url, "nsamples": c, "filesize": p.stat().st_size})
    doc = {
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "name": name,
        "shardlist": shardlist,
    }
    with atomic_write(dest, fsync=fsync) as f:
        f.write(json.dumps(doc, indent=1).encode() + b"\n")
    return Path(dest)


def export_dali(
    root: str | os.PathLike[str],
    split: str | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    *,
    fold: str | None = None,
    index: str | os.PathLike[str] | None = None,
    version: str = "v1.2",
    fsync: bool = True,
) -> list[Path]:
    """Write DALI's index file ``<shard stem>.idx`` of every shard into ``out_dir`` (default:
    beside the shards). Returns the paths in shard order (pass them as ``index_paths``)."""
    split = required_split(split, fold, "export_dali")
    if version not in DALI_VERSIONS:
        raise ValueError(f"version must be one of {DALI_VERSIONS}, got {version!r}")
    shards, members = _members(root, split, index)
    texts = [dali_index(m, version) for m in members]  # every shard checked before writing
    return _write_dali(shards, texts, out_dir if out_dir is not None else root, fsync)


def export_wids(
    root: str | os.PathLike[str],
    split: str | None = None,
    out: str | os.PathLike[str] | None = None,
    *,
    fold: str | None = None,
    index: str | os.PathLike[str] | None = None,
    name: str | None = None,
    url_prefix: str | None = None,
    fsync: bool = True,
) -> Path:
    """Write the wids shard list of the split to ``out`` (default ``ROOT/<split>.wids.json``)."""
    split = required_split(split, fold, "export_wids")
    shards, members = _members(root, split, index)
    dest = out if out is not None else Path(root) / f"{split}.wids.json"
    counts = [wids_count(m) for m in members]
    return _write_wids(shards, counts, dest, name or split, url_prefix, fsync)


def export(
    root: str | os.PathLike[str],
    split: str | None = None,
    *,
    fold: str | None = None,
    index: str | os.PathLike[str] | None = None,
    dali: str | os.PathLike[str] | None = None,
    wids: str | os.PathLike[str] | None = None,
    version: str = "v1.2",
    name: str | None = None,
    url_prefix: str | None = None,
    fsync: bool = True,
) -> tuple[list[Path], Path | None]:
    """Both exports from one pass over the shards' headers: DALI files into directory
    ``dali`` and the wids list to ``wids`` (either ``None``: not written)."""
    split = required_split(split, fold, "export")
    if version not in DALI_VERSIONS:
        raise ValueError(f"version must be one of {DALI_VERSIONS}, got {version!r}")
    shards, members = _members(root, split, index)
    # every shard checked for both formats before anything is written
    texts = [dali_index(m, version) for m in members] if dali is not None else []
    counts = [wids_count(m) for m in members] if wids is not None else []
    paths = _write_dali(shards, texts, dali, fsync) if dali is not None else []
    doc = (
        _write_wids(shards, counts, wids, name or split, url_prefix, fsync)
        if wids is not None
        else None
    )
    return paths, doc

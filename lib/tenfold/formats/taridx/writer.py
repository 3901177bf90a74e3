"""Writing TARIDX files, byte for byte as the layout in :mod:`tenfold.taridx._spec` says.

:func:`write_rows` writes rows you already have (structured ``ROW_DT`` array, extension and crash
tables). :func:`write_index` takes members ``(fid, offset, size, stem, ext)`` and assigns ids with
the split rules (extension and crash ids in first-seen order, ``keyhash = xxh64(stem)``).
Both write atomically: the previous file survives any failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from ...core.atomic import atomic_write
from ...core.checksums import xxh64
from ...errors import EncodeError, describe
from ._spec import FLAG_CONTIGUOUS, FMT, HDR_SIZE, HEADER_DT, MAGIC, MAJOR, MINOR, REC_SIZE, ROW_DT

__all__ = ["index_bytes", "write_rows", "write_index", "count_runs", "rows_from_members"]

#: Rows written per chunk (memory stays flat however many rows there are).
CHUNK_ROWS = 1 << 16


def count_runs(keyhash: np.ndarray, crashid: np.ndarray) -> int:
    """Number of runs of equal ``(keyhash, crashid)`` in row order."""
    n = len(keyhash)
    if n == 0:
        return 0
    change = (keyhash[1:] != keyhash[:-1]) | (crashid[1:] != crashid[:-1])
    return 1 + int(np.count_nonzero(change))


def _block(names: Sequence[str], what: str) -> bytes:
    for name in names:
        if "\n" in name:
            raise EncodeError(describe(FMT, f"{what} {name!r}", detail="contains a newline"))
    return "\n".join(names).encode("utf-8")


def _header(
    rows: np.ndarray,
    ext: Sequence[str],
    crash: Sequence[str],
    n_stems: int | None,
    flags: int | None,
    minor: int,
) -> tuple[bytes, bytes, bytes]:
    ext_b = _block(ext, "extension")
    crash_b = _block(crash, "crash stem")
    n = len(rows)
    if n and int(rows["extid"].max()) >= len(ext):
        raise EncodeError(
            describe(
                FMT,
                "rows",
                field="extid",
                detail="out of range",
                expected=f"< {len(ext)}",
                got=int(rows["extid"].max()),
            )
        )
    if n and int(rows["crashid"].max()) > len(crash):
        raise EncodeError(
            describe(
                FMT,
                "rows",
                field="crashid",
                detail="out of range",
                expected=f"<= {len(crash)}",
                got=int(rows["crashid"].max()),
            )
        )
    if n_stems is None:
        keys = np.unique(np.stack([rows["keyhash"], rows["crashid"].astype(np.uint64)]), axis=1)
        n_stems = keys.shape[1] if n else 0
    if flags is None:
        flags = FLAG_CONTIGUOUS if count_runs(rows["keyhash"], rows["crashid"]) == n_stems else 0
    hdr = np.zeros(1, HEADER_DT)
    off_crash = HDR_SIZE + len(ext_b)
    hdr["magic"] = MAGIC
    hdr["major"], hdr["minor"] = MAJOR, minor
    hdr["rec_size"], hdr["hdr_size"] = REC_SIZE, HDR_SIZE
    hdr["n_stems"], hdr["n_rows"] = n_stems, n
    hdr["n_ext"], hdr["n_crash"] = len(ext), len(crash)
    hdr["off_crash"], hdr["off_arr"] = off_crash, off_crash + len(crash_b)
    hdr["flags"] = flags
    return hdr.tobytes(), ext_b, crash_b


def _as_rows(rows: np.ndarray) -> np.ndarray:
    if rows.dtype == ROW_DT:
        return rows
    out = np.zeros(len(rows), ROW_DT)
    for name in ROW_DT.names or ():
        out[name] = rows[name]
    return out


def index_bytes(
    rows: np.ndarray,
    ext: Sequence[str],
    crash: Sequence[str] = (),
    *,
    n_stems: int | None = None,
    flags: int | None = None,
    minor: int = MINOR,
) -> bytes:
    """The whole file in memory (for small indexes and tests; :func:`write_rows` streams)."""
    rows = _as_rows(rows)
    head, ext_b, crash_b = _header(rows, ext, crash, n_stems, flags, minor)
    return head + ext_b + crash_b + rows.tobytes()


def write_rows(
    path: str | os.PathLike[str],
    rows: np.ndarray,
    ext: Sequence[str],
    crash: Sequence[str] = (),
    *,
    n_stems: int | None = None,
    flags: int | None = None,
    fsync: bool = True,
) -> int:
    """Write an index atomically; returns the number of bytes written.

    ``n_stems`` and ``flags`` are computed from the rows when not given. ``fsync`` (default)
    makes the new file durable before it replaces the old one, and then the rename (fsync of the
    file, then of its directory); ``fsync=False`` skips both: readers still never see a
    half-written index, but a power loss shortly after may leave the previous one (or, on some
    file systems, an empty file) under the name.
    """
    rows = _as_rows(rows)
    head, ext_b, crash_b = _header(rows, ext, crash, n_stems, flags, MINOR)
    with atomic_write(path, fsync=fsync) as f:
        f.write(head)
        f.write(ext_b)
        f.write(crash_b)
        for i in range(0, len(rows), CHUNK_ROWS):
            f.write(np.ascontiguousarray(rows[i : i + CHUNK_ROWS]).data.cast("B"))
    return len(head) + len(ext_b) + len(crash_b) + REC_SIZE * len(rows)


def rows_from_members(
    members: Iterable[tuple[int, int, int, str, str]],
) -> tuple[np.ndarray, list[str], list[str]]:
    """Rows, extension table and crash table of members ``(fid, offset, size, stem, ext)``.

    Extension ids and crash ids are given in first-seen order; the extension is lower-cased.
    """
    ext_ids: dict[str, int] = {}
    first_stem: dict[int, str] = {}
    crash_ids: dict[str, int] = {}
    crash: list[str] = []
    recs = []
    for fid, offset, size, stem, ext in members:
        ext = ext.lower()
        eid = ext_ids.setdefault(ext, len(ext_ids))
        h = xxh64(stem.encode("utf-8"))
        first = first_stem.setdefault(h, stem)
        cid = 0
        if first != stem:
            if stem not in crash_ids:
                crash.append(stem)
                crash_ids[stem] = len(crash)
            cid = crash_ids[stem]
        recs.append((fid, offset, size, eid, cid, h))
    rows = np.array(recs, dtype=ROW_DT) if recs else np.zeros(0, ROW_DT)
    return rows, list(ext_ids), crash


def write_index(
    path: str | os.PathLike[str], members: Iterable[tuple[int, int, int, str, str]]
) -> int:
    """Write the index of members ``(fid, offset, size, stem, ext)`` (in row order)."""
    rows, ext, crash = rows_from_members(members)
    return write_rows(path, rows, ext, crash)

"""TARIDX: an index over the tar shards of a dataset split, and random access to its samples.

* :class:`Index` reads a ``.taridx`` (zero-copy rows, vectorised :meth:`Index.lookup`);
* :func:`build` scans the shards ``<split>_<id>.tar`` and writes ``<split>.taridx``;
* :func:`stale_shards` says which shards changed since the index was built;
* :class:`Dataset` serves samples by position or stem, locally or through fsspec;
* :class:`EpochSampler` / :func:`epoch_order` give shuffled, sharded orders per epoch;
* :func:`read_ray` reads a split as a Ray Dataset (read tasks planned from the index);
* :func:`export_dali` / :func:`export_wids` write DALI and wids indexes from it.

The byte layout is in :mod:`tenfold.taridx._spec`.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...core.report import ERROR, INFO, OK, WARNING, Report
from ...errors import EncodeError, TenfoldError, UnsupportedError, describe
from ._spec import FMT, HDR_SIZE, HEADER, ROW_DT
from ._split import optional_split
from .build import build, scan_shard, shard_paths, stale_shards
from .dataset import Dataset, EpochSampler, epoch_order
from .export import export_dali, export_wids
from .raydata import read_ray
from .reader import Index, Samples
from .writer import index_bytes, write_index, write_rows

Index.use_dataset(Dataset)  # an Index reads samples through a Dataset; reader.py never imports it

__all__ = [
    "Index",
    "Samples",
    "build",
    "scan_shard",
    "shard_paths",
    "stale_shards",
    "Dataset",
    "EpochSampler",
    "epoch_order",
    "read_ray",
    "export_dali",
    "export_wids",
    "index_bytes",
    "write_index",
    "write_rows",
    "open",
    "load",
    "save",
    "inspect",
    "verify",
    "demo",
]


def open(source: str | os.PathLike[str], **kw: Any) -> Index:  # noqa: A001 - API name
    """Open an index (see :meth:`Index.open`)."""
    return Index.open(source, **kw)


def load(source: str | os.PathLike[str], copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """The row columns ``fid offset size extid crashid keyhash`` as arrays.

    With ``copy=False`` they are read-only strided views of the file's map.
    """
    with Index.open(source, **kw) as idx:
        return {n: (np.array(idx.rows[n]) if copy else idx.rows[n]) for n in ROW_DT.names or ()}


def save(
    path: str | os.PathLike[str],
    tensors: Mapping[str, np.ndarray],
    *,
    ext: list[str] | None = None,
    crash: list[str] | None = None,
    **kw: Any,
) -> None:
    """Write row columns (as :func:`load` returns them) with their ``ext`` and ``crash`` tables."""
    names = ROW_DT.names or ()
    missing = [n for n in names if n not in tensors]
    if missing or ext is None:
        raise EncodeError(
            describe(
                FMT,
                os.fspath(path),
                detail=(
                    f"needs the row columns {list(names)} and ext=[...]; "
                    f"missing {missing or ['ext']}"
                ),
            )
        )
    n = len(tensors["fid"])
    rows = np.zeros(n, ROW_DT)
    for name in names:
        rows[name] = tensors[name]
    write_rows(path, rows, ext, crash or [], **kw)


def inspect(source: str | os.PathLike[str]) -> list[dict]:
    """One row per region and one per extension (rows, payload bytes)."""
    with Index.open(source) as idx:
        out = [
            {
                "name": "header",
                "dtype": "-",
                "shape": "(1,)",
                "bytes": HDR_SIZE,
                "encoding": "-",
                "layout": f"v{idx.major}.{idx.minor} flags={idx.flags:#x}",
                "checksum": "-",
            },
            {
                "name": "ext block",
                "dtype": "utf-8",
                "shape": f"({idx.n_ext},)",
                "bytes": idx.off_crash - HDR_SIZE,
                "encoding": "\\n-joined",
                "layout": "@64",
                "checksum": "-",
            },
            {
                "name": "crash block",
                "dtype": "utf-8",
                "shape": f"({idx.n_crash},)",
                "bytes": idx.off_arr - idx.off_crash,
                "encoding": "\\n-joined",
                "layout": f"@{idx.off_crash}",
                "checksum": "-",
            },
            {
                "name": "rows",
                "dtype": "taridx row",
                "shape": f"({idx.n_rows},)",
                "bytes": 32 * idx.n_rows,
                "encoding": "raw",
                "layout": f"@{idx.off_arr} {'contiguous' if idx.is_contiguous else 'interleaved'}",
                "checksum": "-",
                "samples": idx.n_stems,
            },
        ]
        idx.validate_rows()
        extid = np.asarray(idx.rows["extid"])
        sizes = np.asarray(idx.rows["size"]).astype(np.uint64)
        counts = np.bincount(extid, minlength=idx.n_ext)
        total = np.zeros(idx.n_ext, np.uint64)  # exact integer sums (bincount weights are float)
        np.add.at(total, extid, sizes)
        for i, e in enumerate(idx.ext):
            out.append(
                {
                    "name": f"ext {e!r}",
                    "dtype": "payload",
                    "shape": f"({counts[i]},)",
                    "bytes": int(total[i]),
                    "encoding": "-",
                    "layout": f"extid {i}",
                    "checksum": "-",
                }
            )
        return out


def verify(
    source: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    split: str | None = None,
    sample: int = 8,
    fold: str | None = None,
) -> Report:
    """Check structure, every row, ``n_stems`` and the flag exactly, and (when the shards sit
    beside the index, or ``root`` is given) that no shard changed. Never raises on bad input."""
    split = optional_split(split, fold, "verify")
    path = os.fspath(source)
    rep = Report(FMT, path)
    try:
        idx = Index.open(path)
    except (TenfoldError, OSError) as exc:
        rep.add_error(exc, "index")
        return rep
    with idx:
        rep.summary.update(
            rows=idx.n_rows,
            samples=idx.n_stems,
            ext=idx.ext,
            crash=len(idx.crash),
            contiguous=idx.is_contiguous,
        )
        rep.add("header", OK, f"version {idx.major}.{idx.minor}")
        rep.add("blocks", OK, f"{idx.n_ext} extensions, {idx.n_crash} crash stems")
        try:
            idx.validate_rows()
            rep.add("rows", OK, f"{idx.n_rows} rows, ids in range")
            _verify_counts(idx, rep)
        except TenfoldError as exc:
            rep.add_error(exc, "rows")
            return rep
        root = os.path.dirname(os.path.abspath(path)) if root is None else root
        _verify_shards(idx, rep, root, Path(path).stem if split is None else split, sample)
    return rep


def _verify_counts(idx: Index, rep: Report) -> None:
    """``n_stems`` and the contiguity flag against what the rows say."""
    kh, cid = np.asarray(idx.rows["keyhash"]), np.asarray(idx.rows["crashid"])
    from .writer import count_runs

    perm = np.lexsort((cid, kh))
    distinct = count_runs(kh[perm], cid[perm])
    runs = count_runs(kh, cid)
    if distinct != idx.n_stems:
        rep.add(
            "n_stems",
            ERROR,
            describe(
                FMT,
                "header",
                offset=HEADER.offset("n_stems"),
                field="n_stems",
                expected=distinct,
                got=idx.n_stems,
            ),
        )
    else:
        rep.add("n_stems", OK, str(distinct))
    contiguous = runs == distinct
    if contiguous != idx.is_contiguous:
        rep.add(
            "flags",
            ERROR,
            describe(
                FMT,
                "header",
                offset=HEADER.offset("flags"),
                field="flags bit 0",
                expected=int(contiguous),
                got=int(idx.is_contiguous),
            ),
        )
    else:
        rep.add("flags", OK, "contiguous" if contiguous else "interleaved")


def _verify_shards(
    idx: Index, rep: Report, root: str | os.PathLike[str], split: str, sample: int
) -> None:
    """The shards of ``split`` under ``root`` against the index (when there are any)."""
    try:
        if not shard_paths(root, split):
            rep.add("shards", INFO, f"no shards {split}_<id>.tar beside the index; not checked")
            return
        stale = stale_shards(idx, root, split, sample=sample)
    except (TenfoldError, OSError) as exc:
        rep.add_error(exc, "shards")
        return
    for name, why in stale.items():
        rep.add(f"shard {name}", WARNING if "no rows" in why else ERROR, f"stale: {why}")
    if not stale:
        rep.add("shards", OK, f"{len(shard_paths(root, split))} shards match the index")


def demo(directory: Path) -> Path:
    """Write a small split (2 ustar shards x 3 samples x {jpg, cls}) and its index."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(6)
    k = 0
    for shard in range(2):
        with tarfile.open(
            directory / f"demo_{shard:04d}.tar", "w", format=tarfile.USTAR_FORMAT
        ) as tf:
            for _ in range(3):
                for ext, payload in (
                    ("jpg", rng.bytes(int(rng.integers(50, 900)))),
                    ("cls", str(k % 10).encode()),
                ):
                    info = tarfile.TarInfo(f"sample{k:04d}.{ext}")
                    info.size, info.mtime = len(payload), 1_700_000_000
                    tf.addfile(info, io.BytesIO(payload))
                k += 1
    return build(directory, "demo", show_progress=False)


def _verify_index(idx: Index) -> Report:
    """:meth:`Index.verify`: :func:`verify` of the index's file with its root and split."""
    if idx.path is None:
        raise UnsupportedError(
            describe(
                FMT,
                idx.name,
                detail="verify needs a file path",
                expected="an index opened from a path",
                got="an index read from a buffer",
            )
        )
    return verify(idx.path, root=idx.root, split=idx.split)


Index.use_verifier(_verify_index)  # Index.verify(), without reader.py importing the package

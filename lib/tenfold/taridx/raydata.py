"""Ray Data over a TARIDX fold: :func:`read_ray`.

The read is planned from the index, without opening a shard: the samples (all of them, or the
stems asked for) are cut into contiguous runs of sample order, one per read task, balanced by
payload bytes, and each task's ``BlockMetadata`` carries its exact row count, its exact payload
bytes plus the column offsets and validity bitmaps (``size_bytes``; the keys' characters are
not known before the read, since the index stores their hashes) and the shards it touches.

Each task reads its samples through :class:`~tenfold.taridx.Dataset` (header check, staleness
check, local maps or fsspec ranges) and yields pyarrow tables shaped like
``ray.data.read_webdataset(..., decoder=None)``: a ``__key__`` string column, a ``__url__``
column naming the shard, and one binary column per extension (null where a sample has no
member with that extension). The key is the sample's stem, the basename before its first dot,
as the index groups samples; webdataset's key also keeps a directory part of the member name.

Ray is an optional dependency (``pip install "tenfold[ray]"``); this module imports it only
inside :func:`read_ray`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import xxhash

from ..core.optional import require
from ..errors import IntegrityError, describe
from ._members import name_at, split_name
from ._spec import BLOCK, FMT
from .dataset import Dataset

__all__ = ["read_ray", "plan", "Plan"]

#: Rows per block a read task yields (tasks of more samples yield several blocks).
ROWS_PER_BLOCK = 8192
#: Payload bytes per block a read task aims at (Ray's default target block size).
BYTES_PER_BLOCK = 128 << 20
#: Largest payload per column in a ``binary`` (int32 offsets) column; past it, ``large_binary``.
_BINARY_MAX = (1 << 31) - 1


class Plan:
    """The read tasks of one :func:`read_ray` call, as computed from the index.

    ``samples`` are the sample numbers read, in read order; task ``t`` reads
    ``samples[bounds[t]:bounds[t + 1]]``, whose rows ``rows[t]``, payload bytes
    ``payload[t]``, in-memory size ``size_bytes[t]`` and shards ``files[t]`` are given.
    """

    def __init__(
        self,
        samples: np.ndarray,
        bounds: np.ndarray,
        payload: list[int],
        size_bytes: list[int],
        files: list[tuple[str, ...]],
    ) -> None:
        self.samples = samples
        self.bounds = bounds
        self.payload = payload
        self.size_bytes = size_bytes
        self.files = files

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @property
    def rows(self) -> list[int]:
        return np.diff(self.bounds).tolist()


def _dataset_args(ds: Dataset) -> dict[str, Any]:
    return {
        "root": ds.root,
        "fold": ds.fold,
        "extensions": ds.extensions,
        "index": ds.index_path,
        "shards": list(ds.shards),
        "storage_options": dict(ds.storage_options),
        "verify_headers": ds.verify_headers,
    }


def plan(
    ds: Dataset,
    parallelism: int,
    *,
    keys: Sequence[str] | None = None,
    include_url: bool = True,
) -> Plan:
    """Cut the samples of ``ds`` (or those named by ``keys``, in that order) into at most
    ``parallelism`` contiguous runs of about equal payload bytes (never an empty run)."""
    idx = ds.index
    s = idx.samples
    n = len(s)
    if keys is None:
        samples = np.arange(n, dtype=np.int64)
    else:
        keys = list(keys)
        samples = idx.lookup(keys)
        missing = np.flatnonzero(samples < 0)
        if missing.size:
            shown = [keys[i] for i in missing[:5].tolist()]
            raise KeyError(
                describe(
                    FMT,
                    f"fold {ds.fold!r}",
                    detail=f"{missing.size} of the {len(keys)} keys asked for are not in the "
                    f"index, e.g. {shown}",
                )
            )
    ext_names = idx.ext
    want = np.array(
        [ds.extensions is None or e in ds.extensions for e in ext_names] or [False], bool
    )
    rows = idx.rows if s.order is None else idx.rows[s.order]  # rows in sample order
    extid = np.asarray(rows["extid"]).astype(np.int64)
    size = np.asarray(rows["size"]).astype(np.int64)
    fid = np.asarray(rows["fid"]).astype(np.int64)
    size = np.where(want[extid], size, 0)
    # payload bytes of each sample: sums over each sample's run of rows
    csum = np.zeros(size.size + 1, np.int64)
    np.cumsum(size, out=csum[1:])
    starts = np.asarray(s.starts, np.int64)
    per_sample = csum[starts[1:]] - csum[starts[:-1]]
    chosen = per_sample[samples]
    total = np.zeros(chosen.size + 1, np.int64)
    np.cumsum(chosen, out=total[1:])
    m = samples.size
    k = max(1, min(int(parallelism), m)) if m else 0
    if k:
        # cut where the running payload passes j/k of the total (by bytes), and never leave a
        # task empty (by rows): a fold of equal-sized samples is cut into equal counts
        target = total[-1] * np.arange(1, k) / k
        cuts = np.searchsorted(total, target, side="left")  # total[cut] >= target
        below = np.maximum(cuts - 1, 0)
        cuts = np.where(target - total[below] < total[np.minimum(cuts, m)] - target, below, cuts)
        cuts = np.maximum(cuts, np.arange(1, k))
        cuts = np.minimum(cuts, m - k + np.arange(1, k))
        cuts = np.maximum.accumulate(cuts)
        bounds = np.concatenate([[0], cuts, [m]]).astype(np.int64)
    else:
        bounds = np.zeros(1, np.int64)
    # size in memory as Arrow counts it (Table.nbytes, which Ray reports): payload, 4 offset
    # bytes per value of every binary and string column, a validity bitmap in each column with
    # a null (a sample without that extension), and the url characters; the keys' characters
    # are not known before the read (the index stores their hashes)
    cols = [e for e, w in zip(ext_names, want.tolist(), strict=False) if w]
    col_of = np.full(max(len(ext_names), 1), -1, np.int64)
    col_of[[ext_names.index(e) for e in cols]] = np.arange(len(cols))
    sample_of_row = np.repeat(np.arange(n, dtype=np.int64), np.diff(starts))
    has = np.zeros((n, max(len(cols), 1)), bool)
    keep = col_of[extid] >= 0
    has[sample_of_row[keep], col_of[extid[keep]]] = True
    first_fid = fid[starts[:-1]] if n else np.zeros(0, np.int64)
    url_len = np.array([len(ds._join(name).encode()) for name in ds.shards] or [0], np.int64)
    n_str = len(cols) + 1 + int(include_url)
    payload, size_bytes, files = [], [], []
    for t in range(len(bounds) - 1):
        a, b = int(bounds[t]), int(bounds[t + 1])
        ids = samples[a:b]
        rows_t = b - a
        pay = int(total[b] - total[a])
        fids = first_fid[ids]
        missing = rows_t - has[ids].sum(axis=0) if cols else np.zeros(0, np.int64)
        bitmaps = int(np.count_nonzero(missing)) * ((rows_t + 7) // 8)
        urls = int(url_len[fids].sum()) if include_url else 0
        payload.append(pay)
        size_bytes.append(pay + 4 * rows_t * n_str + bitmaps + urls)
        files.append(tuple(ds._join(ds.shards[f]) for f in np.unique(fids).tolist()))
    return Plan(samples[: int(bounds[-1])], bounds, payload, size_bytes, files)


# -- the read, in a Ray worker -----------------------------------------------------------------

#: Datasets opened in this process, by their parameters: tasks of one read share the index.
_OPEN: dict[tuple[Any, ...], Dataset] = {}


def _cache_key(args: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        args["root"],
        args["fold"],
        None if args["extensions"] is None else tuple(args["extensions"]),
        args["index"],
        tuple(args["shards"]),
        repr(sorted(args["storage_options"].items())),
        args["verify_headers"],
        os.getpid(),
    )


def _open(args: Mapping[str, Any]) -> Dataset:
    key = _cache_key(args)
    ds = _OPEN.get(key)
    if ds is None:
        if len(_OPEN) >= 8:
            _OPEN.pop(next(iter(_OPEN))).close()
        ds = _OPEN[key] = Dataset(
            args["root"],
            args["fold"],
            args["extensions"],
            index=args["index"],
            shards=args["shards"],
            storage_options=args["storage_options"],
            verify_headers=args["verify_headers"],
        )
    return ds


class _Keys:
    """The stem of each sample, read from its first member's header (the index stores only
    the stem's hash, which the name read is checked against)."""

    def __init__(self, ds: Dataset) -> None:
        self.ds = ds
        idx = ds.index
        s = idx.samples
        first = s.starts[:-1]
        rows = first if s.order is None else s.order[first]
        self.fid = np.asarray(idx.rows["fid"])[rows].astype(np.int64)
        self.off = np.asarray(idx.rows["offset"])[rows].astype(np.int64)
        self.keyhash = np.asarray(s.keyhash, np.uint64)
        self.crash = {i + 1: c for i, c in enumerate(idx.crash)}
        self.crashid = np.asarray(s.crashid)

    def stems(self, samples: np.ndarray) -> list[str]:
        ds = self.ds
        out: list[str] = []
        fids, offs = self.fid[samples].tolist(), self.off[samples].tolist()
        khs = self.keyhash[samples].tolist()
        if ds.remote:
            heads = self._remote_heads(fids, offs)
        for j, (fid, off, kh) in enumerate(zip(fids, offs, khs, strict=True)):
            if ds.remote:
                buf, base = heads[j]
            else:
                buf, base = ds._shard(fid), 0
            got = name_at(buf, off - base) if off - base >= 0 else None
            stem = split_name(got[0])[0] if got is not None else None
            if stem is None or xxhash.xxh64_intdigest(stem) != kh:
                if ds.remote and got is not None:  # the name may be in extended headers
                    buf, base = self._remote_window(fid, off)
                    got = name_at(buf, off - base)
                    stem = split_name(got[0])[0] if got is not None else None
                if stem is None or xxhash.xxh64_intdigest(stem) != kh:
                    raise IntegrityError(
                        describe(
                            FMT,
                            f"shard {ds.shards[fid]}: member header",
                            offset=off,
                            field="member name",
                            detail="does not hash to the sample's keyhash (shard changed since "
                            "the index was built?)",
                            expected=f"{kh:016x}",
                            got=repr(stem),
                        )
                    )
            out.append(stem.decode("utf-8"))
        return out

    def _remote_heads(self, fids: list[int], offs: list[int]) -> list[tuple[memoryview, int]]:
        fs = self.ds._filesystem()
        urls = [self.ds._join(self.ds.shards[f]) for f in fids]
        blobs = fs.cat_ranges(urls, offs, [o + BLOCK for o in offs])
        return [(memoryview(b), o) for b, o in zip(blobs, offs, strict=True)]

    def _remote_window(self, fid: int, off: int) -> tuple[memoryview, int]:
        from .. import _kernels

        start = max(0, off - int(_kernels.load("tarscan").LOOKBACK))
        fs = self.ds._filesystem()
        data = fs.cat_file(self.ds._join(self.ds.shards[fid]), start=start, end=off + BLOCK)
        return memoryview(data), start


_KEYS: dict[int, _Keys] = {}


def read_samples(args: Mapping[str, Any], samples: np.ndarray, url: bool = True) -> Iterator[Any]:
    """Yield pyarrow tables of ``samples`` (a read task's body; runs in a Ray worker)."""
    import pyarrow as pa

    ds = _open(args)
    keys = _KEYS.get(id(ds))
    if keys is None or keys.ds is not ds:
        keys = _KEYS[id(ds)] = _Keys(ds)
    ext_names = [e for e in ds.index.ext if ds.extensions is None or e in ds.extensions]
    shard_urls = [ds._join(n) for n in ds.shards] if url else []
    step = ROWS_PER_BLOCK
    pos = 0
    while pos < samples.size:
        chunk = samples[pos : pos + step]
        cols: dict[str, list[Any]] = {e: [None] * chunk.size for e in ext_names}
        nbytes = 0
        getitems = getattr(ds, "__getitems__", None)
        items = getitems(chunk.tolist()) if getitems is not None else [ds[i] for i in chunk]
        for j, item in enumerate(items):
            for e, v in item.items():
                cols[e][j] = v
                nbytes += len(v)
            if nbytes >= BYTES_PER_BLOCK and j + 1 < chunk.size:
                chunk = chunk[: j + 1]
                for e in ext_names:
                    del cols[e][j + 1 :]
                break
        table: dict[str, Any] = {"__key__": pa.array(keys.stems(chunk), pa.string())}
        if url:
            table["__url__"] = pa.array([shard_urls[f] for f in keys.fid[chunk].tolist()])
        for e in ext_names:
            big = sum(len(v) for v in cols[e] if v is not None) > _BINARY_MAX
            table[e] = pa.array(cols[e], pa.large_binary() if big else pa.binary())
        pos += chunk.size
        yield pa.table(table)


def read_ray(
    root: str | os.PathLike[str],
    fold: str,
    extensions: Sequence[str] | None = None,
    *,
    keys: Sequence[str] | None = None,
    index: str | os.PathLike[str] | None = None,
    shards: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    verify_headers: bool = True,
    include_url: bool = True,
    override_num_blocks: int | None = None,
    parallelism: int = -1,
    **read_args: Any,
) -> Any:
    """A ``ray.data.Dataset`` of the samples of fold ``fold`` under ``root`` (path or URL).

    ``extensions``, ``index``, ``shards``, ``storage_options`` and ``verify_headers`` are as
    for :class:`~tenfold.taridx.Dataset`. ``keys`` reads only those stems, in that order (a
    stem not in the index is a ``KeyError`` naming how many are missing).
    ``override_num_blocks`` (or the older ``parallelism``) sets the number of read tasks;
    other keyword arguments (``concurrency``, ``ray_remote_args``, ``num_cpus`` ...) go to
    ``ray.data.read_datasource``. Columns: ``__key__``, ``__url__`` (unless
    ``include_url=False``) and one binary column per extension.
    """
    ray_data = require("ray.data", extra="ray", what="taridx: read_ray")
    from ._raysource import TaridxDatasource

    source = TaridxDatasource(
        root,
        fold,
        extensions,
        keys=keys,
        index=index,
        shards=shards,
        storage_options=storage_options,
        verify_headers=verify_headers,
        include_url=include_url,
    )
    return ray_data.read_datasource(
        source, override_num_blocks=override_num_blocks, parallelism=parallelism, **read_args
    )

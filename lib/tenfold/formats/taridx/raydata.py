"""Ray Data over a TARIDX split: :func:`read_ray`.

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

from ...core.optional import require
from ...errors import describe
from ._raytasks import BYTES_PER_BLOCK as BYTES_PER_BLOCK
from ._raytasks import ROWS_PER_BLOCK as ROWS_PER_BLOCK
from ._raytasks import read_samples
from ._spec import FMT
from ._split import required_split
from .dataset import Dataset

__all__ = ["read_ray", "plan", "Plan", "datasource_class"]


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
        "split": ds.split,
        "extensions": ds.extensions,
        "index": ds.index_path if ds.index_bytes is None else ds.index_bytes,
        "shards": list(ds.shards),
        "storage_options": dict(ds.storage_options),
        "verify_headers": ds.verify_headers,
    }


def _samples_of(ds: Dataset, keys: Sequence[str] | None) -> np.ndarray:
    """Sample numbers to read: all, or those of ``keys`` in order (``KeyError`` if any is
    missing)."""
    idx = ds.index
    if keys is None:
        return np.arange(len(idx.samples), dtype=np.int64)
    keys = list(keys)
    samples = idx.lookup(keys)
    missing = np.flatnonzero(samples < 0)
    if missing.size:
        shown = [keys[i] for i in missing[:5].tolist()]
        raise KeyError(
            describe(
                FMT,
                f"split {ds.split!r}",
                detail=f"{missing.size} of the {len(keys)} keys asked for are not in the "
                f"index, e.g. {shown}",
            )
        )
    return samples


def _cut(total: np.ndarray, parallelism: int) -> np.ndarray:
    """Task bounds over samples whose running payload is ``total`` (``m + 1`` values): at
    most ``parallelism`` runs of about equal bytes, none empty."""
    m = total.size - 1
    k = max(1, min(int(parallelism), m)) if m else 0
    if not k:
        return np.zeros(1, np.int64)
    # cut where the running payload passes j/k of the total (by bytes), and never leave a
    # task empty (by rows): a split of equal-sized samples is cut into equal counts
    target = total[-1] * np.arange(1, k) / k
    cuts = np.searchsorted(total, target, side="left")  # total[cut] >= target
    below = np.maximum(cuts - 1, 0)
    cuts = np.where(target - total[below] < total[np.minimum(cuts, m)] - target, below, cuts)
    cuts = np.maximum(cuts, np.arange(1, k))
    cuts = np.minimum(cuts, m - k + np.arange(1, k))
    cuts = np.maximum.accumulate(cuts)
    return np.concatenate([[0], cuts, [m]]).astype(np.int64)


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
    samples = _samples_of(ds, keys)
    ext_names = idx.ext
    want = np.array(
        [ds.extensions is None or e in ds.extensions for e in ext_names] or [False], bool
    )
    rows = idx.rows if s.order is None else idx.rows[s.order]  # rows in sample order
    extid = np.asarray(rows["extid"]).astype(np.int64)
    size = np.where(want[extid], np.asarray(rows["size"]).astype(np.int64), 0)
    # payload bytes of each sample: sums over each sample's run of rows
    csum = np.zeros(size.size + 1, np.int64)
    np.cumsum(size, out=csum[1:])
    starts = np.asarray(s.starts, np.int64)
    per_sample = csum[starts[1:]] - csum[starts[:-1]]
    total = np.zeros(samples.size + 1, np.int64)
    np.cumsum(per_sample[samples], out=total[1:])
    bounds = _cut(total, parallelism)
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
    fid = np.asarray(rows["fid"]).astype(np.int64)
    first_fid = fid[starts[:-1]] if n else np.zeros(0, np.int64)
    url_len = np.array([len(ds.shard_url(name).encode()) for name in ds.shards] or [0], np.int64)
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
        files.append(tuple(ds.shard_url(ds.shards[f]) for f in np.unique(fids).tolist()))
    return Plan(samples[: int(bounds[-1])], bounds, payload, size_bytes, files)


def read_ray(
    root: str | os.PathLike[str],
    split: str | None = None,
    extensions: Sequence[str] | None = None,
    *,
    fold: str | None = None,
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
    """A ``ray.data.Dataset`` of the samples of split ``split`` under ``root`` (path or URL).

    ``extensions``, ``index``, ``shards``, ``storage_options`` and ``verify_headers`` are as
    for :class:`~tenfold.taridx.Dataset` (``fold=``: the old name of ``split``, deprecated).
    ``keys`` reads only those stems, in that order (a stem not in the index is a ``KeyError``
    naming how many are missing).
    ``override_num_blocks`` (or the older ``parallelism``) sets the number of read tasks;
    other keyword arguments (``concurrency``, ``ray_remote_args``, ``num_cpus`` ...) go to
    ``ray.data.read_datasource``. Columns: ``__key__``, ``__url__`` (unless
    ``include_url=False``) and one binary column per extension.
    """
    split = required_split(split, fold, "read_ray")
    ray_data = require("ray.data", extra="ray", what="taridx: read_ray")
    source = datasource_class()(
        root,
        split,
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


# -- the ray.data.Datasource (made on first use: Ray is imported only then) -----------------------

_CLASS: list[type] = []


def _read(args: dict[str, Any], ids: np.ndarray, url: bool) -> Iterator[Any]:
    return read_samples(args, ids, url)


def datasource_class() -> type:
    """``TaridxDatasource``, the ``ray.data.Datasource`` subclass behind :func:`read_ray` (also
    ``tenfold.taridx.raydata.TaridxDatasource``); importing it imports Ray."""
    if _CLASS:
        return _CLASS[0]
    import functools

    require("ray.data", extra="ray", what="taridx: read_ray")
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class TaridxDatasource(Datasource):  # type: ignore[misc, valid-type]
        """Read tasks planned from a TARIDX index (see :mod:`tenfold.taridx.raydata`)."""

        def __init__(
            self,
            root: str | os.PathLike[str],
            split: str | None = None,
            extensions: Sequence[str] | None = None,
            *,
            fold: str | None = None,
            keys: Sequence[str] | None = None,
            index: str | os.PathLike[str] | None = None,
            shards: Sequence[str] | None = None,
            storage_options: Mapping[str, Any] | None = None,
            verify_headers: bool = True,
            include_url: bool = True,
        ) -> None:
            super().__init__()
            split = required_split(split, fold, "TaridxDatasource")
            self._ds = Dataset(
                root,
                split,
                extensions,
                index=index,
                shards=shards,
                storage_options=storage_options,
                verify_headers=verify_headers,
                payload="memoryview",
            )
            self._keys = None if keys is None else list(keys)
            self._include_url = include_url
            self._total: int | None = None

        def get_name(self) -> str:
            return f"Taridx({self._ds.split})"

        def estimate_inmemory_data_size(self) -> int | None:
            if self._total is None:
                p = plan(self._ds, 1, keys=self._keys, include_url=self._include_url)
                self._total = sum(p.size_bytes)
            return self._total

        def get_read_tasks(
            self,
            parallelism: int,
            per_task_row_limit: int | None = None,
            data_context: Any = None,
        ) -> list[Any]:
            p = plan(self._ds, parallelism, keys=self._keys, include_url=self._include_url)
            args = _dataset_args(self._ds)
            tasks = []
            for t in range(len(p)):
                ids = p.samples[int(p.bounds[t]) : int(p.bounds[t + 1])]
                meta = BlockMetadata(
                    num_rows=int(ids.size),
                    size_bytes=int(p.size_bytes[t]),
                    input_files=tuple(p.files[t]),
                    exec_stats=None,
                )
                fn = functools.partial(_read, args, ids, self._include_url)
                tasks.append(ReadTask(fn, meta, per_task_row_limit=per_task_row_limit))
            return tasks

    TaridxDatasource.__module__ = __name__
    TaridxDatasource.__qualname__ = "TaridxDatasource"
    _CLASS.append(TaridxDatasource)
    return TaridxDatasource


def __getattr__(name: str) -> Any:
    if name == "TaridxDatasource":  # pickles by name resolve here in Ray workers
        return datasource_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

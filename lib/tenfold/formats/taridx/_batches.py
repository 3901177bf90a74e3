"""Batched reads of a :class:`~tenfold.formats.taridx.dataset.Dataset`: ``__getitems__`` (what
PyTorch's ``DataLoader`` calls for a batch) groups the rows by shard and reads them in offset
order, local shards checked one kernel pass per shard, remote ones fetched by
:class:`._remote_reads.RemoteReads`.
"""

from __future__ import annotations

import collections
import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...core.mapped import MappedFile
from ._remote_reads import RemoteReads
from ._spec import BLOCK


def in_torch_worker() -> bool:
    """This process is a PyTorch DataLoader worker (torch is imported here only if it is)."""
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


class Batches(RemoteReads):
    """The batched reads of :class:`~tenfold.formats.taridx.dataset.Dataset` (a base class)."""

    decoders: dict[str, Callable[[Any], Any]]
    verify_headers: bool
    _len: int
    _starts: np.ndarray | None
    _open: collections.OrderedDict[int, tuple[MappedFile, memoryview]]
    _last: tuple[int, memoryview | None]
    _rows_of: Any
    _rc: Any
    _wanted_arr: np.ndarray
    _index: Callable[[], Any]
    _shard: Callable[[int], memoryview]
    _verify_rows: Callable[[memoryview, int, int], None]
    _no_views: Callable[[], ValueError]
    _keys_of: Callable[[np.ndarray], list[str]]
    with_keys: bool
    #: payloads copied out as bytes (else zero-copy memoryviews); views refused here
    _copy: bool

    # -- batches ------------------------------------------------------------------------------
    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Samples ``indices`` (PyTorch's batched fetch): ``[self[i] for i in indices]``, with
        the rows grouped by shard and read in offset order. Locally each shard's headers are
        checked in one kernel pass (prefetching ahead, so the misses of random reads overlap);
        remotely the whole batch is one ``cat_ranges`` call, rows of a shard at most
        ``max_gap`` bytes apart fetched as one range. Every check of ``ds[i]`` applies."""
        if self._rows_of is None:
            self._index()
        if not self._copy and in_torch_worker():
            raise self._no_views()
        n = self._len
        wanted = [operator.index(i) for i in indices]
        try:
            idx = np.array(wanted, np.int64)
        except OverflowError:  # beyond int64: out of range, as ds[i] says (not OverflowError)
            for i in wanted:
                j = i + n if i < 0 else i
                if not 0 <= j < n:
                    raise IndexError(f"sample {j} out of range for a split of {n}") from None
            raise  # pragma: no cover - every value outside int64 is out of range
        if idx.size:
            idx[idx < 0] += n
            bad = np.flatnonzero((idx < 0) | (idx >= n))
            if bad.size:
                raise IndexError(f"sample {int(idx[bad[0]])} out of range for a split of {n}")
        return self._batch(idx)

    def _batch(self, idx: np.ndarray) -> list[dict[str, Any]]:
        assert self._starts is not None and self._cols is not None
        st = self._starts
        first = st[idx]
        cnt = st[idx + 1] - first
        owner = np.repeat(np.arange(idx.size), cnt)
        rowids = np.arange(int(cnt.sum()), dtype=np.int64)
        rowids += np.repeat(first - (np.cumsum(cnt) - cnt), cnt)
        cols = self._cols[rowids]
        keep = self._wanted_arr[cols[:, 3]]
        if not keep.all():
            rowids, owner, cols = rowids[keep], owner[keep], cols[keep]
        if self.remote:
            views = self._remote_rows(rowids, cols, idx, owner)
        else:
            views = self._local_rows(rowids, cols, idx, owner)
        if self.with_keys:  # after the payloads: remote shards are looked up (or held) now
            out: list[dict[str, Any]] = [{"__key__": k} for k in self._keys_of(idx)]
        else:
            out = [{} for _ in range(idx.size)]
        names = self._ext_names
        copy = self._copy
        for o, extid, v in zip(owner.tolist(), cols[:, 3].tolist(), views, strict=True):
            out[o][names[extid]] = bytes(v) if copy else v
        if self.decoders:
            for d in out:
                for ext, fn in self.decoders.items():
                    if ext in d:
                        d[ext] = fn(d[ext])
        return out

    def _local_rows(
        self, rowids: np.ndarray, cols: np.ndarray, idx: np.ndarray, owner: np.ndarray
    ) -> list[Any]:
        views: list[Any] = [None] * rowids.size
        order = np.lexsort((cols[:, 0], cols[:, 2]))
        fids = cols[order, 2]
        cuts = np.flatnonzero(fids[1:] != fids[:-1]) + 1
        check = self.verify_headers
        for grp in np.split(order, cuts) if order.size else ():
            fid = int(cols[grp[0], 2])
            mv = self._mvs[fid]
            if mv is None:
                mv = self._shard(fid)
            elif fid in self._open:  # (else a remote shard held in memory)
                self._open.move_to_end(fid)
                self._last = (fid, mv)
            if check and self._rc.batch(mv, np.ascontiguousarray(rowids[grp]), fid) >= 0:
                # the quick check said no for a row: the exact check (non-ASCII names) on
                # every sample of the group raises for the first row that does not match
                for i in dict.fromkeys(idx[owner[grp]].tolist()):
                    self._verify_rows(mv, i, fid)
            starts, sizes = cols[grp, 0], cols[grp, 1]
            past = np.flatnonzero(starts + sizes > len(mv))
            if past.size:
                k = int(past[0])
                raise self._past_end(fid, int(starts[k]) - BLOCK, int(sizes[k]), len(mv))
            for k, a, z in zip(grp.tolist(), starts.tolist(), sizes.tolist(), strict=True):
                views[k] = mv[a : a + z]
        return views

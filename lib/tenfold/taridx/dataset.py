"""Random access to the samples of a fold: :class:`Dataset` and :class:`EpochSampler`.

``Dataset(root, fold)`` opens ``<root>/<fold>.taridx`` and serves ``ds[i]`` (sample ``i`` in
order of its first row) and ``ds.get(stem)`` as ``{extension: buffer}``. Local shards are
memory-mapped lazily, at most ``max_open`` at once per process (least recently used closed
first), and each buffer is a read-only ``memoryview`` of the map (zero copy; it keeps the map
alive). Remote roots (any fsspec URL: ``http://``, ``s3://``, ``memory://`` ...) are read with one
range request per shard per sample.

A dataset pickles as its parameters only: nothing is open in the parent after pickling, and
each worker process opens the index and the shards it needs on first access. That makes it a
PyTorch map-style dataset for ``DataLoader(num_workers > 0)``; :class:`EpochSampler` gives the
deterministic shuffled order per epoch and the rank's share for distributed training.
"""

from __future__ import annotations

import collections
import operator
import os
import re
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..core.mapped import MappedFile
from ..errors import TruncatedError, describe
from ._spec import BLOCK, FMT
from .build import shard_paths
from .reader import Index

__all__ = ["Dataset", "EpochSampler", "epoch_order"]


_LIVE: weakref.WeakSet[Dataset] = weakref.WeakSet()


def _after_fork() -> None:  # a forked child never shares maps or clients with its parent
    for ds in list(_LIVE):
        ds._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _is_url(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


class Dataset:
    """The samples of fold ``fold`` under ``root``.

    Parameters
    ----------
    root
        Directory (or fsspec URL) holding the shards ``<fold>_<id>.tar``.
    fold
        Fold name.
    extensions
        Only these extensions are returned (default: all of the sample's).
    decoders
        ``{extension: callable(buffer) -> value}`` applied to those extensions.
    index
        Index path or URL (default ``<root>/<fold>.taridx``).
    shards
        Shard file names in fid order (default: listed from ``root``).
    max_open
        Most shards kept open per process.
    storage_options
        Passed to fsspec for remote roots.
    """

    def __init__(self, root: str | os.PathLike[str], fold: str,
                 extensions: Sequence[str] | None = None,
                 decoders: Mapping[str, Callable[[Any], Any]] | None = None, *,
                 index: str | os.PathLike[str] | None = None,
                 shards: Sequence[str] | None = None, max_open: int = 32,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.root = os.fspath(root).rstrip("/") if _is_url(os.fspath(root)) else os.fspath(root)
        self.fold = fold
        self.extensions = None if extensions is None else [e.lower() for e in extensions]
        self.decoders = dict(decoders or {})
        self.remote = _is_url(self.root)
        self.index_path = os.fspath(index) if index is not None else self._join(f"{fold}.taridx")
        self.max_open = max(1, int(max_open))
        self.storage_options = dict(storage_options or {})
        self._reset()
        self.shards = list(shards) if shards is not None else self._list_shards()
        idx = self._index()
        self._len = idx.n_stems
        if idx.n_rows and int(idx.rows["fid"].max()) >= len(self.shards):
            raise TruncatedError(describe(
                FMT, f"fold {fold!r} under {self.root}", detail="shards missing",
                expected=f"> {int(idx.rows['fid'].max())} shards", got=len(self.shards)))

    # -- per-process state --------------------------------------------------------------------
    def _reset(self) -> None:
        self._pid = os.getpid()
        self._idx: Index | None = None
        self._fs: Any = None
        self._rows: np.ndarray | None = None
        self._starts: np.ndarray | None = None
        self._open: collections.OrderedDict[int, tuple[MappedFile, memoryview]] = (
            collections.OrderedDict())
        self._cols: np.ndarray | None = None
        self._last: tuple[int, memoryview | None] = (-1, None)
        _LIVE.add(self)

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        state["_len"] = self._len
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # forked: never share maps or clients with the parent
            self._reset()

    def _join(self, name: str) -> str:
        return f"{self.root}/{name}" if self.remote else os.path.join(self.root, name)

    def _filesystem(self) -> Any:
        if self._fs is None:
            import fsspec

            self._fs = fsspec.core.url_to_fs(self.root, **self.storage_options)[0]
        return self._fs

    def _list_shards(self) -> list[str]:
        if not self.remote:
            return [p.name for p in shard_paths(self.root, self.fold)]
        fs = self._filesystem()
        pat = re.compile(re.escape(self.fold) + r"_[0-9]+\.tar")
        names = {os.path.basename(str(p).rstrip("/")) for p in fs.ls(self.root, detail=False)}
        return sorted(n for n in names if pat.fullmatch(n))

    def _index(self) -> Index:
        self._check_pid()
        if self._idx is None:
            if _is_url(self.index_path):
                import fsspec

                fs, path = fsspec.core.url_to_fs(self.index_path, **self.storage_options)
                idx = Index.from_buffer(fs.cat_file(path))
            else:
                idx = Index.open(self.index_path)._owned()  # the dataset owns it
            s = idx.samples
            self._rows = idx.rows if s.order is None else idx.rows[s.order]
            self._starts = s.starts
            # start, size, fid, extid of every row in sample order, as plain int64 columns:
            # one ``tolist`` per sample gives Python ints directly
            cols = np.empty((idx.n_rows, 4), np.int64)
            cols[:, 0] = self._rows["offset"]
            cols[:, 0] += BLOCK
            cols[:, 1] = self._rows["size"]
            cols[:, 2] = self._rows["fid"]
            cols[:, 3] = self._rows["extid"]
            self._cols = cols
            self._idx = idx
            self._ext_names = idx.ext
            want = self.extensions
            self._wanted = [want is None or e in want for e in idx.ext]
        return self._idx

    @property
    def index(self) -> Index:
        """The fold's :class:`Index` (opened in this process on first use)."""
        return self._index()

    # -- shards -------------------------------------------------------------------------------
    def _shard(self, fid: int) -> memoryview:
        hit = self._open.get(fid)
        if hit is not None:
            self._open.move_to_end(fid)
            self._last = (fid, hit[1])
            return hit[1]
        mf = MappedFile(self._join(self.shards[fid]), fmt=FMT)
        mv = mf.buffer().data
        self._open[fid] = (mf, mv)
        self._last = (fid, mv)
        while len(self._open) > self.max_open:
            _, (old, _mv) = self._open.popitem(last=False)
            old.close()
        return mv

    @property
    def open_shards(self) -> int:
        """How many shards this process has open now."""
        return len(self._open)

    def close(self) -> None:
        """Close the index and every open shard of this process."""
        for mf, _ in self._open.values():
            mf.close()
        if self._idx is not None:
            self._idx.close()
        self._reset()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- samples ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def _past_end(self, fid: int, off: int, size: int, have: int) -> TruncatedError:
        return TruncatedError(describe(
            FMT, f"shard {self.shards[fid]}", offset=off,
            detail="member data ends past end of file", expected=f"end <= {have}",
            got=off + BLOCK + size))

    def __getitem__(self, i: int) -> dict[str, Any]:
        cols = self._cols
        if cols is None:
            self._index()
            cols = self._cols
            assert cols is not None
        n = self._len
        i = operator.index(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample {i} out of range for a fold of {n}")
        st = self._starts
        assert st is not None
        recs = cols[st[i] : st[i + 1]].tolist()
        if self.remote:
            return self._remote(recs)
        names, wanted = self._ext_names, self._wanted
        out: dict[str, Any] = {}
        for start, size, fid, extid in recs:
            if not wanted[extid]:
                continue
            last_fid, mv = self._last
            if fid != last_fid or mv is None:
                mv = self._shard(fid)
            end = start + size
            if end > len(mv):
                raise self._past_end(fid, start - BLOCK, size, len(mv))
            out[names[extid]] = mv[start:end]
        if self.decoders:
            for ext, fn in self.decoders.items():
                if ext in out:
                    out[ext] = fn(out[ext])
        return out

    def _remote(self, recs: list[list[int]]) -> dict[str, Any]:
        fs = self._filesystem()
        names, wanted = self._ext_names, self._wanted
        by_fid: dict[int, list[list[int]]] = {}
        for r in recs:
            if wanted[r[3]]:
                by_fid.setdefault(r[2], []).append(r)
        out: dict[str, Any] = {}
        for fid, rs in by_fid.items():
            lo = min(r[0] for r in rs)
            hi = max(r[0] + r[1] for r in rs)
            data = memoryview(fs.cat_file(self._join(self.shards[fid]), start=lo, end=hi))
            for start, size, _fid, extid in rs:
                a = start - lo
                if a + size > len(data):
                    raise self._past_end(fid, start - BLOCK, size, lo + len(data))
                out[names[extid]] = data[a : a + size]
        for ext, fn in self.decoders.items():
            if ext in out:
                out[ext] = fn(out[ext])
        return out

    def get(self, stem: str, default: Any = None) -> Any:
        """The sample named ``stem``, or ``default`` when the fold has none (as ``dict.get``)."""
        i = int(self._index().lookup([stem])[0])
        if i < 0:
            return default
        return self[i]

    def lookup(self, stems: Sequence[str]) -> np.ndarray:
        """Sample numbers of ``stems`` (-1 where absent), vectorised."""
        return self._index().lookup(list(stems))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"<taridx.Dataset {self.root!r} fold={self.fold!r} samples={self._len}>"


def epoch_order(n: int, *, seed: int = 0, epoch: int = 0, shuffle: bool = True, rank: int = 0,
                world_size: int = 1, drop_last: bool = False) -> np.ndarray:
    """Sample numbers one rank visits in one epoch (deterministic in seed and epoch).

    The epoch's permutation (or ``arange`` without shuffle) is padded by wrapping around to a
    multiple of ``world_size`` (or cut, with ``drop_last``) and dealt round-robin: rank ``r``
    takes positions ``r, r + world_size, ...``. All ranks get the same count.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} not in [0, world_size={world_size})")
    if shuffle:
        order = np.random.default_rng([int(seed), int(epoch)]).permutation(n)
    else:
        order = np.arange(n)
    if drop_last:
        order = order[: (n // world_size) * world_size]
    elif n and n % world_size:
        pad = world_size - n % world_size
        order = np.concatenate([order, np.resize(order, pad)])
    return order[rank::world_size]


class EpochSampler:
    """A sampler (iterable of sample numbers) for ``DataLoader(sampler=...)``.

    Call :meth:`set_epoch` before each epoch to reshuffle; see :func:`epoch_order`.
    """

    def __init__(self, data: int | Dataset, *, shuffle: bool = True, seed: int = 0,
                 rank: int = 0, world_size: int = 1, drop_last: bool = False) -> None:
        self.n = data if isinstance(data, int) else len(data)
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        epoch_order(0, rank=rank, world_size=world_size)  # validates rank/world_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def indices(self) -> np.ndarray:
        return epoch_order(self.n, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle,
                           rank=self.rank, world_size=self.world_size, drop_last=self.drop_last)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        if self.drop_last:
            return self.n // self.world_size
        return -(-self.n // self.world_size)

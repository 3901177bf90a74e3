"""Converting through a sharded checkpoint (:mod:`tenfold.sharded`): every shard of an index
as one :class:`tenfold.tensor_source.Source`, and one source written as shards plus the index."""

from __future__ import annotations

import os
from typing import Any

from ..tensor_source import RawRange, Source
from ._index import FMT, OPENING_SHARD, E, array_nbytes, lacking_error
from ._reader import ShardedReader
from ._write import write


def open_source(path: str | os.PathLike[str], open_one: Any) -> Any:
    """A :class:`tenfold.convert.Source` over every shard of the index at ``path``
    (``open_one(shard_path)`` opens each shard's source; raw copies stay raw)."""
    r = ShardedReader(path)
    r.close()  # only the checked index is needed: the shards are opened as sources
    subs: dict[str, Any] = {}
    try:
        for file in r.shards:
            token = OPENING_SHARD.set((r.path, file))
            try:
                sub = open_one(os.path.join(r.directory, file))
            finally:
                OPENING_SHARD.reset(token)
            subs[file] = sub
            names = set(sub.names)
            lacking = [n for n in r.names_in(file) if n not in names]
            if lacking:
                raise lacking_error(file, lacking)
    except BaseException:
        for sub in subs.values():
            sub.close()
        raise
    return _ShardedSource(r, subs)


def convert_source(path: Any, limits: Any = None, label: Any = None, open_one: Any = None) -> Any:
    """The ``convert_source`` hook (:mod:`tenfold.conversion`): :func:`open_source`."""
    return open_source(path, open_one)


class _ShardedSource(Source):
    """The shards' sources as one (built by :func:`open_source`)."""

    def __init__(self, r: ShardedReader, subs: dict[str, Source]) -> None:
        self._subs = subs
        self._map = r.weight_map
        metas = [dict(s.metadata) for s in subs.values()]
        extras = ["shards with differing metadata"] if any(m != metas[0] for m in metas) else []
        fmts = {s.fmt for s in subs.values()}
        sizevars = [s.sizevars for s in subs.values() if s.sizevars]
        super().__init__(
            fmts.pop() if len(fmts) == 1 else FMT,
            list(self._map),
            lambda n: self._owner(n).spec(n),
            lambda n: self._owner(n).get(n),
            metadata=metas[0] if metas and not extras else {},
            sizevars=sizevars[0] if sizevars else None,
            uninitialized={k: v for s in subs.values() for k, v in s.uninitialized.items()},
            oinf_types={k: v for s in subs.values() for k, v in s.oinf_types.items()},
            raw=self._raw_of,
            path=r.path,
            extras=extras + [e for s in subs.values() for e in s.extras],
            refuse=[e for s in subs.values() for e in s.refuse],
        )
        if self.fmt != FMT:  # one format: its own metadata form (OINF's typed values)
            self.oinf_meta = next(iter(subs.values())).oinf_meta

    def _owner(self, name: str) -> Source:
        return self._subs[self._map[name]]

    def _raw_of(self, name: str) -> RawRange | None:
        # the shard's own range: it carries the file it is in (Source.blocks reads that)
        return self._owner(name).raw(name)

    def close(self) -> None:
        subs, self._subs = self._subs, {}
        for sub in subs.values():
            sub.close()


def write_source(dst: Any, s: Any, max_shard_size: int | str, write_one: Any, *,
                 fsync: bool = True, metadata: Any = None) -> list[str]:  # fmt: skip
    """Write the :class:`tenfold.convert.Source` ``s`` as shards (``write_one(path, sub)``
    writes one shard from a sub-source holding its tensors) plus the index (with
    ``metadata``, what each shard is given)."""

    if s.uninitialized:
        raise E.encode(
            f"tensor {next(iter(s.uninitialized))!r}",
            detail="no data (an OINF declaration), which a sharded checkpoint cannot hold",
        )
    sizes = {}
    for n in s.names:
        dt, shape = s.spec(n)
        sizes[n] = array_nbytes(_Spec(dt, shape))

    def one(p: str, group: list[str]) -> None:
        sub = s.subset(group)  # the whole source is closed by its owner
        try:
            write_one(p, sub)
        finally:
            sub.release()

    return write(dst, list(s.names), sizes, max_shard_size, one, fsync=fsync, metadata=metadata)


class _Spec:
    def __init__(self, dtype: Any, shape: Any) -> None:
        self.dtype, self.shape = dtype, shape

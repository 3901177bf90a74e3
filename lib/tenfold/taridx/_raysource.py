"""The ``ray.data.Datasource`` behind :func:`tenfold.taridx.read_ray` (imports Ray: load it
only through ``read_ray``, which says which extra to install when Ray is missing)."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from .dataset import Dataset
from .raydata import _dataset_args, plan, read_samples

__all__ = ["TaridxDatasource"]


class TaridxDatasource(Datasource):  # type: ignore[misc]
    """Read tasks planned from a TARIDX index (see :mod:`tenfold.taridx.raydata`)."""

    def __init__(
        self,
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
    ) -> None:
        super().__init__()
        self._ds = Dataset(
            root,
            fold,
            extensions,
            index=index,
            shards=shards,
            storage_options=storage_options,
            verify_headers=verify_headers,
        )
        self._keys = None if keys is None else list(keys)
        self._include_url = include_url
        self._total: int | None = None

    def get_name(self) -> str:
        return f"Taridx({self._ds.fold})"

    def estimate_inmemory_data_size(self) -> int | None:
        if self._total is None:
            self._total = sum(
                plan(self._ds, 1, keys=self._keys, include_url=self._include_url).size_bytes
            )
        return self._total

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: Any = None,
    ) -> list[ReadTask]:
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


def _read(args: dict[str, Any], ids: Any, url: bool) -> Any:
    return read_samples(args, ids, url)

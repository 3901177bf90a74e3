"""A checkpoint directory as a convert source, and a single file written as a checkpoint."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..._dispatch import open_any, save_one
from ...core.dtypes import canonical
from ...formats.ztensor import _format as zt_format
from ...tensor_source import Source
from ._attempts import Attempt
from ._doc import FMT, Chunk, Document, Entry, check_cover
from ._reader import open
from ._write import check_target, commit, rank_file_name, staging_path, write_rank_file


def convert_source(path: Any, limits: Any = None, label: Any = None, open_one: Any = None) -> Any:
    """The ``convert_source`` hook (:mod:`tenfold.conversion`): the checkpoint's tensors,
    consolidated one at a time (memory: the largest tensor). Non-tensor entries are listed in
    the source's ``extras`` (convert refuses them unless ``metadata=False``)."""
    r = open(path)
    extras = []
    if r.non_tensors:
        shown = ", ".join(map(repr, r.non_tensors[:5])) + (" ..." if len(r.non_tensors) > 5 else "")
        extras.append(f"non-tensor entries pickled by DCP ({shown})")

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        e = r.tensor_entry(n)
        return e.np_dtype, tuple(e.shape)

    return Source(FMT, list(r), spec, r.read, close=r.close, path=r.path, extras=extras)


def demo(directory: Any) -> str:
    """Write a small deterministic checkpoint (as 2 ranks would have saved it) into
    ``directory``; return its path."""
    rng = np.random.default_rng(26)
    tensors = {
        "model.embed": rng.standard_normal((32, 16)).astype(np.float32),
        "model.bias": np.zeros(16, np.float32),
        "optim.step": np.array(10.0, np.float32),
    }
    path = os.path.join(os.fspath(directory), "demo-dcp")
    src = os.path.join(os.fspath(directory), f".demo-dcp-source-{uuid.uuid4().hex}")
    save_one(src, tensors, zt_format.FORMAT.name)
    try:
        from_file(src, path, world_size=2, overwrite=True)
    finally:
        os.unlink(src)
    return path


# -- a single file as a checkpoint -----------------------------------------------------------
def _split(shape: tuple[int, ...], world_size: int) -> list[tuple[int, int]]:
    """Rows ``[lo, hi)`` of dimension 0 each rank holds (``torch.chunk``'s split)."""
    if not shape or shape[0] == 0:
        return [(0, shape[0] if shape else 0)]
    step = -(-shape[0] // world_size)
    return [(lo, min(lo + step, shape[0])) for lo in range(0, shape[0], step)]


def from_file(
    src: Any,
    ckpt_dir: str | os.PathLike[str],
    world_size: int = 1,
    *,
    file_format: str | None = None,
    overwrite: bool = False,
    fsync: bool = True,
) -> Document:
    """Write the tensors of ``src`` (any file or checkpoint :func:`tenfold.open` reads) as a
    checkpoint ``ckpt_dir`` that ``torch.distributed.checkpoint.load`` reads with
    :class:`~tenfold.interop.dcp.TenfoldStorageReader` (as if ``world_size`` ranks had saved
    it, each tensor split along its first dimension as ``torch.chunk`` splits it). Tensors are
    read one at a time. Needs no torch. Committed as a save is (:func:`commit`)."""
    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"{FMT}: world_size must be a positive integer, got {world_size!r}")
    final = os.path.abspath(os.fspath(ckpt_dir))
    check_target(final, overwrite)
    attempt_id = uuid.uuid4().hex
    staging = staging_path(final, attempt_id)
    attempt = Attempt(staging, attempt_id)
    try:
        doc = _write_ranks(src, staging, world_size, file_format, fsync)
        commit(staging, final, doc, overwrite=overwrite, fsync=fsync)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        attempt.release()
    return doc


def _write_ranks(
    src: Any, staging: str, world_size: int, file_format: str | None, fsync: bool
) -> Document:
    entries: dict[str, Entry] = {}
    files: dict[str, dict[str, int]] = {}
    with open_any(src, {}) as r:
        names = list(r)
        for rank in range(world_size):
            file = rank_file_name(rank, file_format)
            placed: dict[str, tuple[str, tuple[int, ...], tuple[int, ...]]] = {}

            def items(rank: int = rank, placed: dict[str, Any] = placed) -> Iterator[Any]:
                for n in names:
                    info = r.info(n)
                    parts = _split(tuple(info.shape), world_size)
                    if rank >= len(parts):
                        continue
                    lo, hi = parts[rank]
                    whole = (lo, hi) == (0, info.shape[0]) if info.shape else True
                    obj = n if whole else f"{n}@{lo}" + ",0" * (len(info.shape) - 1)
                    arr = np.asarray(r[n] if whole else r.read(n, (slice(lo, hi),)))
                    offsets = (lo,) + (0,) * (len(info.shape) - 1) if info.shape else ()
                    placed[n] = (obj, offsets, tuple(arr.shape))
                    yield obj, arr

            got = write_rank_file(os.path.join(staging, file), items(), file_format, fsync)
            files[file] = {"rank": rank, "size": os.path.getsize(os.path.join(staging, file))}
            for n, (obj, offsets, sizes) in placed.items():
                info = r.info(n)
                e = entries.setdefault(
                    n, Entry(n, "tensor", [], canonical(info.np_dtype), tuple(info.shape))
                )
                e.chunks.append(Chunk(offsets, sizes, file, obj, *got[obj]))
    entries = {n: entries[n] for n in names}
    for e in entries.values():
        check_cover(e)
    return Document(
        world_size,
        files,
        entries,
        {n: [n] for n in names},
        {"checkpoint_id": None, "save_id": os.path.basename(staging), "modules": []},
    )

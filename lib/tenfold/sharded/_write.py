"""Writing a sharded checkpoint (:mod:`tenfold.sharded`): the shard size limit, the plan of
which tensors go in which shard (the ``huggingface_hub`` rule), the shard names, and the files
themselves, each written atomically, the index last."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from .._dispatch import save_one
from ._index import INDEX_SUFFIX, array_nbytes, check_index_metadata, index_document

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_size(size: int | str) -> int:
    """Bytes in ``size``: an int, or a string like Hugging Face's ``max_shard_size``
    (``"5GB"`` = 5 * 10**9, ``"500MB"``, ``"1GiB"`` = 2**30; case-insensitive).

    >>> parse_size("5GB"), parse_size("1GiB"), parse_size("500 mb"), parse_size(1024)
    (5000000000, 1073741824, 500000000, 1024)
    """
    if isinstance(size, bool):
        raise TypeError("max_shard_size: expected an int or a string like '5GB', got a bool")
    if isinstance(size, int):
        n = size
    elif isinstance(size, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", size, re.IGNORECASE)
        if m is None:
            raise ValueError(
                f"max_shard_size: {size!r}; expected bytes or a number with a unit "
                "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            )
        n = int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])
    else:
        raise TypeError(f"max_shard_size: expected an int or a string, got {type(size).__name__}")
    if n <= 0:
        raise ValueError(f"max_shard_size: must be positive, got {size!r}")
    return n


def plan(sizes: list[tuple[str, int]], max_size: int) -> list[list[str]]:
    """Tensor names per shard, in order (the ``huggingface_hub`` rule, see module doc).

    A tensor larger than ``max_size`` is a shard of its own at once, ahead of the shard still
    being filled (the order ``huggingface_hub`` gives):

    >>> plan([("a", 4), ("b", 4), ("c", 9), ("d", 2)], 8)
    [['c'], ['a', 'b'], ['d']]
    """
    shards: list[list[str]] = []
    cur: list[str] = []
    cur_size = 0
    for name, n in sizes:
        if n > max_size:
            shards.append([name])
            continue
        if cur and cur_size + n > max_size:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append(name)
        cur_size += n
    if cur or not shards:
        shards.append(cur)
    return shards


def shard_paths(path: str | os.PathLike[str], count: int) -> tuple[list[str], str]:
    """The shard paths and the index path of a checkpoint saved as ``path`` in ``count``
    shards.

    >>> shard_paths("out/model.zt", 2)
    (['out/model-00001-of-00002.zt', 'out/model-00002-of-00002.zt'], 'out/model.zt.index.json')
    """
    p = os.fspath(path)
    stem, ext = os.path.splitext(p)
    return [f"{stem}-{i:05d}-of-{count:05d}{ext}" for i in range(1, count + 1)], p + INDEX_SUFFIX


def _write_index(
    path: str,
    weight_map: Mapping[str, str],
    total: int,
    fsync: bool,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    from ..core.atomic import atomic_write

    with atomic_write(path, fsync=fsync) as f:
        f.write(index_document(weight_map, total, metadata))


def write(
    path: str | os.PathLike[str],
    names: list[str],
    sizes: Mapping[str, int],
    max_shard_size: int | str,
    write_one: Any,
    *,
    fsync: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> list[str]:
    """Plan the shards of ``names`` and write each with ``write_one(shard_path, names)``,
    then the index (with ``metadata``, what each shard was given); one plain file at
    ``path`` when everything fits. Returns the paths."""
    limit = parse_size(max_shard_size)
    groups = plan([(n, sizes[n]) for n in names], limit)
    if len(groups) == 1:
        write_one(os.fspath(path), groups[0])
        replace_layout(path, [os.fspath(path)])
        return [os.fspath(path)]
    # before the first shard: the index could not hold it
    check_index_metadata(metadata, sum(sizes[n] for n in names))
    paths, index = shard_paths(path, len(groups))
    weight_map: dict[str, str] = {}
    for p, group in zip(paths, groups, strict=True):
        write_one(p, group)
        weight_map.update((n, os.path.basename(p)) for n in group)
    _write_index(index, weight_map, sum(sizes[n] for n in names), fsync, metadata)
    replace_layout(path, paths + [index])
    return paths + [index]


def replace_layout(path: str | os.PathLike[str], written: list[str]) -> None:
    """After a checkpoint was saved to ``path`` as ``written`` (the one file ``path``, or its
    shards and index), remove what an earlier save to the same ``path`` left that is not part
    of it: the index ``<path>.index.json`` after a one-file save; the one file ``path`` after
    a sharded save; and in both cases (when there was or is an index) the shards named after
    ``path`` (``<stem>-NNNNN-of-NNNNN<ext>``) that the new save did not write. Left in place,
    they would still be served: the old index by :func:`tenfold.open`, the old file by
    loaders that look for it before an index.

    Only files named after ``path`` are removed (a shard an old index names otherwise stays),
    the index first, so that no reader finds an index whose shards are going; a local
    ``path`` only (a remote one is left as it is)."""
    from ..core.source import is_remote

    if is_remote(path):
        return
    p = os.fspath(path)
    # names within the folder the files were written to, as the OS resolves it (abspath would
    # fold "a/../b" by its text, another folder when a is a link)
    keep = {os.path.basename(w) for w in written}
    index = p + INDEX_SUFFIX
    sharded = os.path.basename(index) in keep
    had_index = not sharded and os.path.isfile(index)
    if had_index:
        os.unlink(index)
    if sharded and (os.path.isfile(p) or os.path.islink(p)):
        os.unlink(p)  # (a link: the name goes, not what it points to)
    if not (sharded or had_index):
        return  # a one-file save with no index beside it: no shard of it can be served
    folder = os.path.dirname(p) or "."
    for name in _stale_shards(p):
        if name not in keep:
            os.unlink(os.path.join(folder, name))


def _stale_shards(path: str) -> list[str]:
    """The names in ``path``'s folder that are shards named after it
    (``<stem>-NNNNN-of-NNNNN<ext>``, ASCII digits), folders excepted."""
    folder = os.path.dirname(path) or "."
    stem, ext = os.path.splitext(os.path.basename(path))
    shard = re.compile(re.escape(stem) + r"-[0-9]{5}-of-[0-9]{5}" + re.escape(ext))
    return [
        n
        for n in os.listdir(folder)
        if shard.fullmatch(n) and not os.path.isdir(os.path.join(folder, n))
    ]


def layout_files(path: str | os.PathLike[str]) -> list[str]:
    """Every file a save to ``path`` may replace (:func:`replace_layout`): ``path``, its index
    and the shards named after it, those that exist; none for a remote ``path``."""
    from ..core.source import is_remote

    if is_remote(path):
        return []
    p = os.fspath(path)
    folder = os.path.dirname(p) or "."
    if not os.path.isdir(folder):
        return []
    out = [f for f in (p, p + INDEX_SUFFIX) if os.path.lexists(f)]
    return out + [os.path.join(folder, n) for n in _stale_shards(p)]


def save(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    max_shard_size: int | str,
    format: str | None = None,  # noqa: A002
    zt_generation: Any = None,
    **options: Any,
) -> list[str]:
    """Write ``tensors`` as shards of at most ``max_shard_size`` bytes each plus the index
    (see the module doc); ``options`` (and ``zt_generation``: each ``.zt`` shard's
    generation) go to :func:`tenfold.save` for each shard. Every
    tensor's dtype is checked against the format before the first file is written. Returns
    the paths written (the index last)."""
    from ..capabilities import check_dtype, target_of

    fmt = format or target_of(path)
    if fmt is None:
        from ..registry import by_suffix

        fmt = by_suffix(path).name
    for n, v in tensors.items():
        check_dtype(fmt, n, v.dtype, generation=zt_generation)
    sizes = {n: array_nbytes(v) for n, v in tensors.items()}

    def one(p: str, group: list[str]) -> None:
        save_one(p, {n: tensors[n] for n in group}, format, zt_generation=zt_generation,
                 **options)  # fmt: skip

    return write(path, list(tensors), sizes, max_shard_size, one,
                 fsync=options.get("fsync", True), metadata=options.get("metadata"))  # fmt: skip


def demo(directory: Any) -> str:
    """Write a small deterministic sharded checkpoint (two safetensors shards and the index)
    into ``directory``; return the index's path."""
    import numpy as np

    rng = np.random.default_rng(12)
    tensors = {
        "embed.weight": rng.standard_normal((32, 16)).astype(np.float32),
        "layer.0.weight": rng.standard_normal((16, 16)).astype(np.float32),
        "layer.0.bias": np.zeros(16, np.float32),
    }
    path = os.path.join(os.fspath(directory), "demo-sharded.safetensors")
    return save(path, tensors, max_shard_size=2048)[-1]

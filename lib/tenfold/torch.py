"""PyTorch tensors from every tensor format tenfold reads: the ``safetensors.torch`` API.

>>> import tenfold.torch  # doctest: +SKIP
>>> state = tenfold.torch.load_file("model.zt")  # doctest: +SKIP
>>> with tenfold.torch.safe_open("model.zt", framework="pt") as f:  # doctest: +SKIP
...     rows = f.get_slice("embed.weight")[0:1024, ::2]

* :func:`load_file` / :func:`save_file`: a whole file <-> ``dict[str, torch.Tensor]``, for
  ``.zt`` (every generation), ``.oinf``, ``.fold``/``.mind`` (``STEN``/``NPZ0`` chunks),
  ``.wtxt``, ``.safetensors``, ``.npz`` and sharded checkpoints (their ``*.index.json``);
  the format is detected by content when reading and chosen by the suffix when writing;
* :func:`load` / :func:`save`: safetensors bytes in memory;
* :func:`safe_open`: ``keys()``, ``metadata()``, ``get_tensor(name)``, ``get_slice(name)[...]``.

Memory: a tensor stored raw (uncompressed, little-endian, aligned) is not copied. Its bytes
stay in the page cache and the tensor is built over a private copy-on-write map of the file,
so writing into the tensor changes only the process's copy, never the file. bfloat16 and the
float8 types map straight to torch's dtypes. Decoded tensors (zstd, base64, packed OINF
types) are owned arrays wrapped without a further copy. Copied: big-endian tensors, unaligned
data, FP4 (packed into ``float4_e2m1fn_x2``, two per byte, last axis halved, as
safetensors does), files opened from an in-memory buffer, and a tensor whose bytes another
tensor already has (a zTensor v2 part stored once for two tensors, a second ``get_tensor``
of one name): no two tensors share a byte. ``device="cuda"`` streams the
tensors through a small ring of reused pinned buffers, filled by worker threads from the page
cache (checking checksums on the way) while earlier buffers are copied to the GPU; see
:mod:`tenfold.interop._device` and the ``TENFOLD_THREADS`` cap.

PyTorch is an optional extra (``pip install "tenfold[torch]"``); without it these functions
raise one :class:`~tenfold.core.optional.MissingDependencyError` line naming the extra.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .interop.frameworks import Slice, open_tensors
from .interop.frameworks import safe_open as _safe_open

__all__ = ["load_file", "save_file", "load", "save", "safe_open", "Slice"]


def safe_open(filename: Any, framework: str = "pt", device: Any = "cpu", **options: Any) -> Any:
    """:class:`tenfold.interop.frameworks.safe_open` (``framework="pt"`` by default)."""
    return _safe_open(filename, framework=framework, device=device, **options)


def _load(source: Any, device: Any, options: dict[str, Any]) -> dict[str, Any]:
    from .interop._torch import Converter

    conv = Converter(None, device)  # checks torch first: nothing is opened without it
    t = open_tensors(source, **options)
    try:
        conv = Converter(t.reader, device)
        if conv.staged:  # CUDA: a ring of pinned buffers, checksums checked on the way
            return conv.stager().load(t)  # type: ignore[no-any-return]
        names = t.names
        out = dict(zip(names, conv.many(t.spans()), strict=True))  # views of one private map
        for n in names:
            if out[n] is None:  # stored otherwise, or needing a check: through the reader
                out[n] = conv(t.array(n))
        conv.synchronize()
        return out
    finally:
        t.close()  # tensors keep what they share alive


def load_file(filename: str | os.PathLike[str], device: Any = "cpu", **options: Any) -> dict:
    """Every tensor of ``filename`` as a ``dict`` of torch tensors on ``device``.

    ``options`` go to the format's reader (e.g. ``limits``). See the module doc for when a
    tensor shares the file's pages and when it is a copy.
    """
    return _load(filename, device, options)


def load(data: bytes | bytearray | memoryview, device: Any = "cpu", **options: Any) -> dict:
    """The tensors of a whole file held in memory (any format :func:`load_file` reads);
    tensors are copies (the buffer may go away)."""
    return _load(data, device, options)


def _arrays(tensors: Mapping[str, Any]) -> dict[str, Any]:
    from .interop._torch import from_torch, torch_module

    torch_module()
    return {k: from_torch(v, k) for k, v in tensors.items()}


def save_file(
    tensors: Mapping[str, Any],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
    *,
    max_shard_size: int | str | None = None,
    **options: Any,
) -> None:
    """Write ``tensors`` (torch tensors, or anything NumPy takes) to ``filename``, atomically,
    in the format its suffix names (``.safetensors``, ``.zt``, ``.oinf``, ``.fold``, ``.wtxt``,
    ``.npz``), lossless or loud (see :func:`tenfold.convert.write_any`; ``options`` are its
    keyword arguments: ``checksum``, ``compress``, ``zt_generation=2`` for a zTensor v2
    ``.zt``...). ``metadata`` is string metadata.

    Tensors are written from their own memory (a contiguous CPU tensor is not copied);
    tensors sharing storage are written as separate copies (safetensors refuses them).

    ``max_shard_size`` (``"5GB"``, ``"500MB"``, ``"1GiB"`` or bytes) writes Hugging Face shards
    plus ``<filename>.index.json`` instead, each shard with ``metadata`` (one file when
    everything fits; see :mod:`tenfold.sharded`).
    """
    from .capabilities import check_dtype, target_of
    from .convert import write_any

    arrays = _arrays(tensors)
    if max_shard_size is None:
        write_any(filename, arrays, metadata=metadata, **options)
        return
    from .sharded import array_nbytes, write

    fmt = target_of(filename)
    for n, a in arrays.items():  # every dtype checked before the first shard is written
        if fmt is not None:
            check_dtype(fmt, n, a.dtype)
    write(filename, list(arrays), {n: array_nbytes(a) for n, a in arrays.items()}, max_shard_size,
          lambda p, group: write_any(p, {n: arrays[n] for n in group}, metadata=metadata,
                                     **options),
          fsync=options.get("fsync", True))  # fmt: skip


def save(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """``tensors`` as the bytes of a safetensors file (what ``safetensors.torch.save`` gives)."""
    from .formats.safetensors.writer import to_bytes

    return to_bytes(_arrays(tensors), metadata)

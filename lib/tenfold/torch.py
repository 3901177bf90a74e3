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
* :func:`save_model` / :func:`load_model`: a ``torch.nn.Module`` with tied weights (tensors
  sharing memory), stored once and restored, as ``safetensors.torch`` does;
* :func:`safe_open`: ``keys()``, ``offset_keys()``, ``metadata()``, ``get_tensor(name)``,
  ``get_tensors()``, ``get_slice(name)[...]``;
* ``tenfold.torch.dcp``: storage for ``torch.distributed.checkpoint`` (:mod:`tenfold.interop.dcp`);
* :class:`SafetensorError`: what a safetensors user catches; tenfold's errors for a malformed
  file, a missing tensor, a closed handle or a refused slice are ones.

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
from typing import Any, Literal

from .errors import SafetensorError
from .interop.frameworks import Slice, backend_options, open_tensors
from .interop.frameworks import safe_open as _safe_open

__all__ = [
    "load_file",
    "save_file",
    "load",
    "save",
    "save_model",
    "load_model",
    "safe_open",
    "Slice",
    "SafetensorError",
]


def __getattr__(name: str) -> Any:
    """``tenfold.torch.dcp``: :mod:`tenfold.interop.dcp` (torch.distributed.checkpoint
    storage), imported on first use."""
    if name == "dcp":
        from .interop import dcp

        return dcp
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        t.reader.check_ahead(names)  # every checksum, on every core, before the views
        out = dict(zip(names, conv.many(t.spans()), strict=True))  # views of one private map
        for n in names:
            if out[n] is None:  # stored otherwise, or needing a check: through the reader
                out[n] = conv(t.array(n))
        conv.synchronize()
        return out
    finally:
        t.close()  # tensors keep what they share alive


def load_file(
    filename: str | os.PathLike[str],
    device: Any = "cpu",
    *,
    backend: str | None = None,
    **options: Any,
) -> dict:
    """Every tensor of ``filename`` as a ``dict`` of torch tensors on ``device``, in the
    file's order (as ``safe_open(...).get_tensors()``).

    ``backend`` is ``"mmap"`` (default) or ``"pread"`` (``mmap=False``: read into owned
    memory). ``options`` go to the format's reader (e.g. ``limits``). See the module doc for
    when a tensor shares the file's pages and when it is a copy.
    """
    return _load(filename, device, backend_options(backend, options))


def load(data: bytes | bytearray | memoryview, device: Any = "cpu", **options: Any) -> dict:
    """The tensors of a whole file held in memory (any format :func:`load_file` reads);
    tensors are copies (the buffer may go away). A path is a ``TypeError``: use
    :func:`load_file`."""
    _check_data(data, "tenfold.torch.load")
    return _load(data, device, options)


def _check_data(data: Any, what: str) -> None:
    if isinstance(data, (str, os.PathLike)):
        raise TypeError(
            f"{what}(data): argument 'data' must be the bytes of a file, got "
            f"{type(data).__name__} {os.fspath(data)!r} (load_file opens a path)"
        )


def _check_tensors(tensors: Any, what: str) -> None:
    if not isinstance(tensors, Mapping):
        raise TypeError(
            f"{what}: argument 'tensors' must be a dict of names to tensors, got "
            f"{type(tensors).__name__}"
        )


def _arrays(tensors: Mapping[str, Any], what: str = "tenfold.torch.save_file") -> dict[str, Any]:
    from .interop._torch import from_torch, torch_module

    _check_tensors(tensors, what)
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

    Tensors are written from their own memory (a contiguous CPU tensor is not copied); a
    non-contiguous tensor is written in C order (safetensors refuses it). Tensors sharing
    memory (tied weights) are each written whole, as separate copies: safetensors'
    ``save_file`` refuses them with a ``RuntimeError``; :func:`save_model` stores one copy and
    records the aliases instead. A sparse tensor is an :class:`~tenfold.errors.EncodeError`
    (a ``ValueError``, as in safetensors) naming it; ``tensors`` other than a ``dict`` (a
    ``Mapping``) is a ``TypeError``.

    ``max_shard_size`` (``"5GB"``, ``"500MB"``, ``"1GiB"`` or bytes) writes Hugging Face shards
    plus ``<filename>.index.json`` instead, each shard with ``metadata`` (one file when
    everything fits; see :mod:`tenfold.sharded`).
    """
    from .capabilities import check_dtype, target_of
    from .convert import write_any

    arrays = _arrays(tensors, "tenfold.torch.save_file")
    if max_shard_size is None:
        write_any(filename, arrays, metadata=metadata, **options)
        return
    from .sharded import array_nbytes, write

    fmt = target_of(filename)
    for n, a in arrays.items():  # every dtype checked before the first shard is written
        if fmt is not None:
            check_dtype(fmt, n, a.dtype, generation=options.get("zt_generation"))
    write(filename, list(arrays), {n: array_nbytes(a) for n, a in arrays.items()}, max_shard_size,
          lambda p, group: write_any(p, {n: arrays[n] for n in group}, metadata=metadata,
                                     **options),
          fsync=options.get("fsync", True), metadata=metadata)  # fmt: skip


def save(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """``tensors`` as the bytes of a safetensors file (what ``safetensors.torch.save`` gives;
    tensors sharing memory are copies, as in :func:`save_file`)."""
    from .formats.safetensors.writer import to_bytes

    return to_bytes(_arrays(tensors, "tenfold.torch.save"), metadata)


def save_model(
    model: Any,
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | Literal[False] | None = None,
    force_contiguous: bool = True,
    **options: Any,
) -> None:
    """Write ``model.state_dict()`` to ``filename`` (any format :func:`save_file` writes),
    storing tensors that share memory (tied weights) once, as ``safetensors.torch.save_model``
    does: in each group of names over the same bytes one name is kept (the first in sorted
    order whose tensor covers all of its storage) and each other name is left out and recorded
    in the metadata as ``{alias: kept name}`` (a key ``metadata`` already has is not replaced;
    ``metadata`` itself is not changed). :func:`load_model` restores the aliases. A group in
    which no tensor covers its whole storage is a ``RuntimeError``, as in safetensors.

    The alias records are bookkeeping for other readers: :func:`load_model` finds the ties in
    the model itself. So a format with no file metadata (``.npz``, ``.wtxt``) is written
    without them, and ``metadata=False`` writes no metadata at all (neither the records nor
    any of the caller's); metadata the caller gives for such a format is refused, as by
    :func:`save_file`.

    ``force_contiguous`` is accepted for safetensors' signature; tenfold writes every tensor
    in C order either way (safetensors refuses a non-contiguous one when it is False).
    ``options`` go to :func:`save_file`.
    """
    from .interop._tied import aliases

    state = dict(model.state_dict())
    record = metadata is not False and _keeps_metadata(filename, options.get("format"))
    md = None if metadata is None or metadata is False else dict(metadata)
    for kept, names in aliases(state).items():
        for name in names:
            if record:
                md = {} if md is None else md
                md.setdefault(name, kept)
            del state[name]
    if force_contiguous:
        state = {k: v.contiguous() for k, v in state.items()}
    save_file(state, filename, metadata=md, **options)


def _keeps_metadata(filename: Any, fmt: str | None) -> bool:
    """Whether the format ``filename`` is written in (or ``fmt``) has file metadata (an
    unknown one: True, and the writer says what is wrong)."""
    from .errors import TenfoldError
    from .registry import by_suffix, get

    try:
        return (get(fmt) if fmt else by_suffix(filename)).metadata != "none"
    except TenfoldError:
        return True


def load_model(
    model: Any,
    filename: str | os.PathLike[str],
    strict: bool = True,
    device: Any = "cpu",
    *,
    backend: str | None = None,
    **options: Any,
) -> tuple[set[str], list[str]]:
    """Load the tensors of ``filename`` into ``model`` (``load_state_dict``), as
    ``safetensors.torch.load_model`` does: the names :func:`save_model` left out because they
    share memory with a kept one (tied weights) are filled through it, and are neither missing
    nor expected in the file.

    Returns ``(missing, unexpected)``: a ``set`` of the model's names the file did not fill
    and a ``list`` of the file's names the model did not take (an alias present in the file
    counts as unexpected). With ``strict``, either being non-empty is a ``RuntimeError``
    listing them, as ``torch`` words it. ``backend`` and ``options`` go to :func:`load_file`.
    """
    from .interop._tied import aliases

    state = load_file(filename, device=device, backend=backend, **options)
    dropped = aliases(model.state_dict(), preferred=state.keys())
    missing_list, unexpected = model.load_state_dict(state, strict=False)
    missing = set(missing_list)
    for names in dropped.values():
        for name in names:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {type(model).__name__}:"
        if missing:
            keys = ", ".join(f'"{k}"' for k in sorted(missing))
            error += f"\n    Missing key(s) in state_dict: {keys}"
        if unexpected:
            keys = ", ".join(f'"{k}"' for k in sorted(unexpected))
            error += f"\n    Unexpected key(s) in state_dict: {keys}"
        raise RuntimeError(error)
    return missing, unexpected

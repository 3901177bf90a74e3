"""NumPy arrays from every tensor format tenfold reads: the ``safetensors.numpy`` API.

>>> import numpy as np
>>> import tenfold.numpy
>>> data = tenfold.numpy.save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
>>> loaded = tenfold.numpy.load(data)
>>> loaded["w"].tolist(), loaded["w"].flags.writeable
([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], True)

* :func:`load_file` / :func:`save_file`: a whole file <-> ``dict[str, numpy.ndarray]``, for
  every format :func:`tenfold.open` reads (detected by content) and every one
  :func:`tenfold.save` writes (chosen by the suffix);
* :func:`load` / :func:`save`: a file's bytes in memory (safetensors bytes from :func:`save`;
  :func:`load` takes the bytes of any format);
* :class:`SafetensorError`: what a safetensors user catches (see :mod:`tenfold.errors`).

As ``safetensors.numpy``, :func:`load_file` and :func:`load` give writable arrays that share
no memory with the file, the buffer or each other (a tensor stored raw is copied out of the
file's map; one the reader decoded is handed over). Where ``safetensors.numpy`` stops, these
go on: bfloat16 and the float8 types load as ``ml_dtypes`` arrays (safetensors 0.8.0 fails on
them with ``KeyError``/``AttributeError``), a non-contiguous array is saved in C order. For
read-only zero-copy views of the file instead, use :func:`tenfold.load` or
:func:`tenfold.safe_open`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import SafetensorError
from .interop.frameworks import backend_options, owned_arrays

__all__ = ["load_file", "save_file", "load", "save", "SafetensorError"]


def _checked(tensor_dict: Any, what: str) -> dict[str, np.ndarray]:
    if not isinstance(tensor_dict, Mapping):
        raise TypeError(
            f"{what}: argument 'tensor_dict' must be a dict of names to arrays, got "
            f"{type(tensor_dict).__name__}"
        )
    return {k: np.asarray(v) for k, v in tensor_dict.items()}


def load_file(
    filename: str | os.PathLike[str], *, backend: str | None = None, **options: Any
) -> dict[str, np.ndarray]:
    """Every tensor of ``filename`` (any format tenfold reads, a sharded checkpoint's index
    too) as writable NumPy arrays, in the file's order.

    ``backend`` is ``"mmap"`` (default) or ``"pread"`` (the file is read, not mapped);
    ``options`` go to the format's reader (e.g. ``limits``).
    """
    return owned_arrays(filename, **backend_options(backend, options))


def load(data: bytes | bytearray | memoryview, **options: Any) -> dict[str, np.ndarray]:
    """The tensors of a whole file held in memory (safetensors bytes, or any format
    :func:`load_file` reads) as writable arrays; the buffer may go away after. A path is a
    ``TypeError`` (use :func:`load_file`)."""
    if isinstance(data, (str, os.PathLike)):
        raise TypeError(
            "tenfold.numpy.load(data): argument 'data' must be the bytes of a file, got "
            f"{type(data).__name__} {os.fspath(data)!r} (load_file opens a path)"
        )
    return owned_arrays(data, **options)


def save_file(
    tensor_dict: Mapping[str, Any],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
    **options: Any,
) -> None:
    """Write ``tensor_dict`` to ``filename``, atomically, in the format its suffix names
    (``.safetensors`` gives the bytes ``safetensors.numpy.save_file`` writes); ``metadata``
    is string metadata; ``options`` are :func:`tenfold.convert.write_any`'s keywords
    (``checksum``, ``compress``...). Values are anything ``numpy.asarray`` takes."""
    from .convert import write_any

    write_any(
        filename, _checked(tensor_dict, "tenfold.numpy.save_file"), metadata=metadata, **options
    )


def save(tensor_dict: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """``tensor_dict`` as the bytes of a safetensors file (what ``safetensors.numpy.save``
    gives)."""
    from .formats.safetensors.writer import to_bytes

    return to_bytes(_checked(tensor_dict, "tenfold.numpy.save"), metadata)

"""JAX arrays from every tensor format tenfold reads (the ``safetensors.flax`` API, thin).

* :func:`load_file` -> ``dict[str, jax.Array]``; :func:`save_file` writes JAX (or NumPy)
  arrays in the format the suffix names;
* :func:`safe_open` is :class:`tenfold.interop.frameworks.safe_open` with
  ``framework="jax"``: ``get_tensor`` and ``get_slice(name)[...]`` give JAX arrays.

Arrays are read as NumPy (views of the file's map where the format stores them raw; bfloat16
and float8 are ml_dtypes types, which JAX uses natively) and copied once into a buffer of
the array's own (on CPU, host memory; never the file's map, nor another array's). A
``device`` (a ``jax.Device``, or a platform name such as ``"cpu"`` / ``"gpu"``) chooses where.

JAX narrows 64-bit types to 32 bits unless ``jax_enable_x64`` is set; tenfold refuses such
a tensor (:class:`~tenfold.errors.UnsupportedError`) instead of changing its values.

JAX is an optional extra (``pip install "tenfold[jax]"``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .interop._jax import device_of as _device
from .interop._jax import jax_module as _jax
from .interop._jax import put as _put
from .interop.frameworks import open_tensors
from .interop.frameworks import safe_open as _safe_open

__all__ = ["load_file", "save_file", "safe_open"]


def safe_open(filename: Any, framework: str = "jax", device: Any = None, **options: Any) -> Any:
    """:class:`tenfold.interop.frameworks.safe_open` (``framework="jax"`` by default)."""
    return _safe_open(filename, framework=framework, device=device, **options)


def load_file(filename: str | os.PathLike[str], device: Any = None, **options: Any) -> dict:
    """Every tensor of ``filename`` as a ``dict`` of JAX arrays (on ``device``)."""
    jax = _jax()
    dev = _device(jax, device)
    t = open_tensors(filename, **options)
    try:
        return {n: _put(jax, t.array(n), dev, n) for n in t.names}
    finally:
        t.close()


def save_file(
    tensors: Mapping[str, Any],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
    **options: Any,
) -> None:
    """Write JAX or NumPy arrays to ``filename`` in the format its suffix names (see
    :func:`tenfold.torch.save_file`; ``zt_generation=2`` writes a zTensor v2 ``.zt``)."""
    from .convert import write_any

    _jax()
    write_any(filename, {k: np.asarray(v) for k, v in tensors.items()}, metadata=metadata,
              **options)  # fmt: skip

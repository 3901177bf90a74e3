"""NumPy arrays -> JAX arrays (:mod:`tenfold.jax` documents the rules for users).

Here, below both :mod:`tenfold.jax` and :mod:`tenfold.interop.frameworks`, so that the
``framework="jax"`` converter of ``safe_open`` needs no import of the user-facing module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.optional import require
from ..errors import UnsupportedError


def jax_module() -> Any:
    return require("jax", extra="jax", what="tenfold.jax")


def device_of(jax: Any, device: Any) -> Any:
    if device is None or not isinstance(device, str):
        return device
    platform, _, num = device.partition(":")
    return jax.devices(platform)[int(num) if num else 0]


def put(jax: Any, a: Any, device: Any, name: str = "") -> Any:
    a = np.asarray(a)
    if a.dtype.itemsize == 8 and a.dtype.kind in "iuf" and not jax.config.read("jax_enable_x64"):
        what = f"tensor {name!r}" if name else "tensor"
        raise UnsupportedError(
            f"tenfold.jax: {what} is {a.dtype}, which JAX would silently narrow to 32 bits; "
            'enable 64-bit types first: jax.config.update("jax_enable_x64", True)'
        )
    return jax.device_put(a, device)


def to_jax(a: Any, device: Any = None) -> Any:
    jax = jax_module()
    return put(jax, a, device_of(jax, device))

"""NumPy arrays -> JAX arrays (:mod:`tenfold.jax` documents the rules for users).

Here, below both :mod:`tenfold.jax` and :mod:`tenfold.interop.frameworks`, so that the
``framework="jax"`` converter of ``safe_open`` needs no import of the user-facing module.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from ..core.optional import require
from ..errors import factory


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
        detail = (
            f"is {a.dtype}, which JAX would silently narrow to 32 bits; enable 64-bit types "
            'first: jax.config.update("jax_enable_x64", True)'
        )
        raise factory("tenfold.jax").unsupported(
            what, detail=detail, message=f"tenfold.jax: {what} {detail}"
        )
    if _on_cpu(jax, device):
        # JAX on CPU builds an array over a read-only NumPy array's memory when it is aligned
        # (whatever may_alias says): over the file's map, or two arrays over one stored part.
        # JAX arrays are immutable, but a DLPack export is writable and a truncated file
        # would end the process, so each array gets memory of its own, copied once.
        if not a.flags.writeable:
            return jax.device_put(np.array(a), device)  # JAX keeps this private copy
        if not _takes_may_alias(jax):  # an older JAX: a private copy for it to alias
            return jax.device_put(np.array(a), device)
        return jax.device_put(a, device, may_alias=False)
    return jax.device_put(a, device)


def _on_cpu(jax: Any, device: Any) -> bool:
    """Whether arrays put on ``device`` stay in host memory (unknown placements count)."""
    platform = getattr(device, "platform", None)
    if device is None:
        platform = jax.default_backend()
    return platform is None or platform == "cpu"


def _takes_may_alias(jax: Any) -> bool:
    """Whether ``jax.device_put`` takes ``may_alias`` (``False``: always a copy)."""
    got = _MAY_ALIAS.get(id(jax.device_put))
    if got is None:
        try:
            got = "may_alias" in inspect.signature(jax.device_put).parameters
        except (TypeError, ValueError):
            got = False
        _MAY_ALIAS[id(jax.device_put)] = got
    return got


_MAY_ALIAS: dict[int, bool] = {}


def to_jax(a: Any, device: Any = None) -> Any:
    jax = jax_module()
    return put(jax, a, device_of(jax, device))

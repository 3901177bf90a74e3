"""Allocation of output buffers sized by file fields, failing as a tenfold error.

A size read from a file has already been checked against :class:`~tenfold.core.Limits`; this
turns the remaining failure (the limit is above what the machine can give) into a
:class:`~tenfold.errors.LimitError` instead of a bare ``MemoryError``. Buffers come from
``np.empty``: pages are only committed when written, so an honest size costs what it decodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LimitError, describe

__all__ = ["empty"]


def empty(shape: Any, dtype: Any, *, fmt: str, what: str, offset: int | None = None) -> np.ndarray:
    """``np.empty(shape, dtype)``, or a LimitError naming the object when memory is short."""
    try:
        return np.empty(shape, dtype=dtype)
    except (MemoryError, ValueError) as exc:
        dt = np.dtype(dtype)
        n = dt.itemsize
        for d in shape if isinstance(shape, tuple) else (shape,):
            n *= int(d)
        raise LimitError(
            describe(
                fmt,
                what,
                offset=offset,
                field="allocation",
                detail=f"cannot allocate ({type(exc).__name__})",
                expected="memory available",
                got=f"{n} bytes",
            )
        ) from None

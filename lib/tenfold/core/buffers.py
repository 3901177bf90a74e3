"""Flat byte views of any buffer-like object, without copying.

``memoryview`` cannot export NumPy arrays of ml_dtypes types (bfloat16, float8) and casts only
contiguous buffers; :func:`byte_view` handles both, so checksums, compression and writers accept
every array a user can hold.
"""

from __future__ import annotations

import numpy as np

__all__ = ["byte_view"]


def byte_view(data: object) -> memoryview:
    """A 1-D unsigned-byte ``memoryview`` of ``data`` (copying only non-contiguous arrays).

    >>> import ml_dtypes
    >>> byte_view(np.ones(2, ml_dtypes.bfloat16)).tobytes().hex()
    '803f803f'
    """
    if isinstance(data, np.ndarray):
        a = data if data.flags.c_contiguous else np.ascontiguousarray(data)
        return memoryview(a.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    mv = memoryview(data)  # type: ignore[arg-type]
    if mv.ndim == 1 and mv.format in ("B", "b", "c"):
        return mv if mv.format == "B" else mv.cast("B")
    if mv.c_contiguous:
        return mv.cast("B")
    return memoryview(mv.tobytes())

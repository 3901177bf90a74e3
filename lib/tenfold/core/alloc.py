"""Allocation of output buffers sized by file fields, failing as a tenfold error.

A size read from a file has already been checked against :class:`~tenfold.core.Limits`; this
charges it to the call's :class:`~tenfold.core.bounds.Budget` (when one is given) *before*
allocating, and turns the remaining failure (the limit is above what the machine can give)
into a :class:`~tenfold.errors.LimitError` instead of a bare ``MemoryError``. Buffers come from
``np.empty``: pages are only committed when written, so an honest size costs what it decodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LimitError
from .bounds import DEFAULT_LIMITS, Budget, checked_numel

__all__ = ["empty", "copy", "nbytes_of", "dense"]


def nbytes_of(shape: Any, dtype: Any, *, fmt: str, what: str, offset: int | None = None) -> int:
    """Bytes of an array of ``shape`` and ``dtype``, the shape checked as every reader does."""
    dt = np.dtype(dtype)
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    dims = [int(d) if isinstance(d, np.integer) else d for d in dims]
    return checked_numel(fmt, what, dims, itemsize=dt.itemsize, offset=offset) * dt.itemsize


def empty(
    shape: Any,
    dtype: Any,
    *,
    fmt: str,
    what: str,
    offset: int | None = None,
    budget: Budget | None = None,
) -> np.ndarray:
    """``np.empty(shape, dtype)`` charged to ``budget``, or a LimitError naming the object
    when the budget or the machine cannot give it."""
    n = nbytes_of(shape, dtype, fmt=fmt, what=what, offset=offset)
    if budget is not None:
        budget.take(n, fmt, what, offset=offset)
    try:
        return np.empty(shape, dtype=dtype)
    except (MemoryError, ValueError) as exc:
        if budget is not None:
            budget.used -= n
        raise LimitError(
            fmt=fmt,
            obj=what,
            offset=offset,
            field="allocation",
            detail=f"cannot allocate ({type(exc).__name__})",
            expected="memory available",
            got=f"{n} bytes",
        ) from None


def copy(
    arr: np.ndarray, *, fmt: str, what: str, offset: int | None = None, budget: Budget | None = None
) -> np.ndarray:
    """An owned, writable C-contiguous copy of ``arr``, allocated as :func:`empty` does."""
    out = empty(arr.shape, arr.dtype, fmt=fmt, what=what, offset=offset, budget=budget)
    np.copyto(out, arr)
    return out


def dense(v: Any, name: str = "", budget: Any = None) -> Any:
    """``v`` as a dense array; a sparse tensor made dense is charged to ``budget`` (the
    default limits' budget when none is given) before it is allocated."""
    if isinstance(v, np.ndarray):
        return v
    if (
        hasattr(v, "shape")
        and hasattr(v, "dtype")
        and (hasattr(v, "toarray") or hasattr(v, "todense"))
    ):
        what = f"sparse tensor {name!r} made dense" if name else "sparse tensor made dense"
        if budget is None:
            budget = DEFAULT_LIMITS.budget()
        n = nbytes_of(tuple(v.shape), v.dtype, fmt="convert", what=what)
        budget.take(n, "convert", what)
        try:
            return v.toarray() if hasattr(v, "toarray") else np.asarray(v.todense())
        except (MemoryError, LimitError):  # within the budget, but not what the machine (or
            # its caps) can give: SciPy raises MemoryError, SparseTensor.todense a LimitError
            budget.used -= n
            raise LimitError(
                fmt="convert",
                obj=what,
                field="allocation",
                detail="cannot allocate (MemoryError)",
                expected="memory available",
                got=f"{n} bytes",
            ) from None
    return v

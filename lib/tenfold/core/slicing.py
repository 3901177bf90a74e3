"""Basic slicing of a stored tensor that reads only the rows it needs.

``reader.read(name, index)`` takes what NumPy calls a basic index: an ``int``, a ``slice``
(steps included, negative too), ``Ellipsis``, or a tuple of those. :func:`plan` checks it
against the tensor's shape (an integer out of range, or more indices than dimensions, is an
:class:`IndexError` naming the shape) and works out the range of rows along the first axis
that the result touches. A reader of a C-contiguous raw tensor then reads only those rows
(``rows * row_bytes`` bytes at ``offset + first_row * row_bytes``) and applies
:meth:`Plan.finish` to them; a reader of a compressed tensor decodes it (once) and applies
:meth:`Plan.apply` to the whole array.

>>> p = plan("zt", "tensor 'w'", (10, 4), (slice(2, 8, 3), 1))
>>> (p.lo, p.hi)
(2, 6)
>>> import numpy as np
>>> a = np.arange(40).reshape(10, 4)
>>> p.finish(a[p.lo : p.hi]).tolist() == a[2:8:3, 1].tolist()
True
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["Plan", "plan"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a basic index needs: rows ``[lo, hi)`` of axis 0, and the index to apply to them."""

    key: tuple[Any, ...]
    local: tuple[Any, ...]
    lo: int
    hi: int

    def apply(self, whole: np.ndarray) -> np.ndarray:
        """The result from the whole tensor."""
        return whole[self.key]

    def finish(self, rows: np.ndarray) -> np.ndarray:
        """The result from rows ``[lo, hi)`` of the tensor."""
        return rows[self.local]


def plan(fmt: str, what: str, shape: tuple[int, ...], index: Any) -> Plan:
    """Check ``index`` against ``shape``; see the module doc."""
    items = index if isinstance(index, tuple) else (index,)
    for it in items:
        if it is None or isinstance(it, (np.ndarray, list, bool, np.bool_)):
            raise TypeError(
                f"{fmt}: {what}: only basic indices (int, slice, ...) are supported, "
                f"got {type(it).__name__}"
            )
        if not (it is Ellipsis or isinstance(it, slice) or _is_int(it)):
            raise TypeError(f"{fmt}: {what}: invalid index {it!r}")
    n_ell = sum(1 for it in items if it is Ellipsis)
    if n_ell > 1:
        raise IndexError(f"{fmt}: {what}: an index can only have a single ellipsis")
    n_real = len(items) - n_ell
    if n_real > len(shape):
        raise IndexError(
            f"{fmt}: {what}: too many indices; shape {shape} has {len(shape)} dimensions, "
            f"got {n_real}"
        )
    if n_ell:
        i = items.index(Ellipsis)
        items = items[:i] + (slice(None),) * (len(shape) - n_real) + items[i + 1 :]
    items = items + (slice(None),) * (len(shape) - len(items))
    key: list[Any] = []
    first_range: range | None = None
    for ax, (it, n) in enumerate(zip(items, shape, strict=True)):
        if isinstance(it, slice):
            if it.step == 0:
                raise ValueError(f"{fmt}: {what}: slice step cannot be zero")
            r = range(*it.indices(n))
            if ax == 0:
                first_range = r
            key.append(_canonical(r))
        else:
            i = int(it)
            if not -n <= i < n:
                raise IndexError(
                    f"{fmt}: {what}: index {i} is out of bounds for axis {ax} with size {n}; "
                    f"shape {shape}"
                )
            key.append(i % n)
    if not shape:
        return Plan((), (), 0, 0)
    first = key[0]
    rows = shape[0]
    if isinstance(first, int):
        lo, hi = first, first + 1
        local0: Any = 0
    else:
        assert first_range is not None
        r = first_range
        if len(r) == 0:
            lo = hi = 0
            local0 = slice(0, 0)
        else:
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
            start = r[0] - lo
            stop = r[-1] - lo + (1 if first.step > 0 else -1)
            local0 = slice(start, stop if stop >= 0 else None, first.step)
    assert 0 <= lo <= hi <= rows
    return Plan(tuple(key), (local0, *key[1:]), lo, hi)


def _canonical(r: range) -> slice:
    """A slice selecting exactly ``r`` (no negative start or stop left to wrap around)."""
    if len(r) == 0:
        return slice(0, 0)
    stop = r[-1] + r.step
    return slice(r[0], stop if stop >= 0 else None, r.step)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))

"""safetensors' indexing rules for ``get_slice(...)[index]`` (:class:`tenfold.safe_open`):
:func:`normalize_index` checks an index against a shape where they differ from Python's, and
:func:`bounded_index` keeps a checked index within 64-bit bounds for the frameworks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import SliceError, factory

__all__ = ["bounded_index", "normalize_index"]


# -- index checks --------------------------------------------------------------------------------
def normalize_index(
    index: Any,
    shape: tuple[int, ...],
    what: str = "tensor",
    fmt: str = "tenfold",
    *,
    strict: bool = True,
) -> tuple[Any, ...]:
    """``index`` as a tuple of ``int`` and ``slice``, one per leading axis, checked against
    ``shape`` by safetensors' rules: ``Ellipsis`` expanded, negative integers made positive.

    Where those rules differ from Python's, safetensors' hold (see :class:`Slice`): a step
    must be positive, an empty list ``[]`` selects no row of the first axis and, when
    ``strict`` (safetensors' own slicing, all frameworks but PyTorch), a slice bound outside
    its axis is refused instead of clipped (``[:20]`` of 10 rows). Anything refused is a
    :class:`~tenfold.errors.SliceError` (an ``IndexError``, a ``ValueError`` and a
    ``SafetensorError``) naming the shape.

    >>> normalize_index((-1, ..., slice(None, None, 2)), (4, 5, 6))
    (3, slice(None, None, None), slice(None, None, 2))
    >>> normalize_index([], (4, 5))
    (slice(0, 0, None),)
    >>> normalize_index(7, (4, 5))
    Traceback (most recent call last):
    ...
    tenfold.errors.SliceError: tenfold: tensor of shape (4, 5): index 7 is out of range for axis 0 of size 4
    """  # noqa: E501
    obj = f"{what} of shape {shape}"
    if type(index) is list and not index:  # safetensors: [] selects nothing
        if not shape:
            raise _refused(fmt, obj, "too many indices; 0 axes, 1 indexed")
        return (slice(0, 0),)
    items = index if isinstance(index, tuple) else (index,)
    n_ell = sum(1 for i in items if i is Ellipsis)
    if n_ell > 1:
        raise _refused(fmt, obj, "an index can only have one ellipsis")
    n_axes = len(items) - n_ell
    if n_axes > len(shape):
        raise _refused(fmt, obj, f"too many indices; {len(shape)} axes, {n_axes} indexed")
    if n_ell:
        k = items.index(Ellipsis)
        items = items[:k] + (slice(None),) * (len(shape) - n_axes) + items[k + 1 :]
    return tuple(
        _checked_item(item, axis, shape[axis], fmt, obj, strict) for axis, item in enumerate(items)
    )


def _refused(fmt: str, obj: str, detail: str) -> SliceError:
    return factory(fmt)(SliceError, obj, detail=detail)


def _checked_item(item: Any, axis: int, size: int, fmt: str, obj: str, strict: bool) -> Any:
    """One index item of :func:`normalize_index` (an ``int`` or a ``slice``), checked."""
    if _is_int(item):
        i = int(item)
        if not -size <= i < size:
            raise _refused(fmt, obj, f"index {i} is out of range for axis {axis} of size {size}")
        return i + size if i < 0 else i
    if not isinstance(item, slice):
        kind = "a list other than []" if isinstance(item, list) else type(item).__name__
        raise _refused(
            fmt,
            obj,
            f"only integers, slices, ... and [] are supported (basic indexing), got {kind}",
        )
    for part in (item.start, item.stop, item.step):
        if part is not None and not _is_int(part):
            raise _refused(fmt, obj, f"slice bounds must be integers, got {part!r}")
    if item.step is not None and int(item.step) <= 0:
        raise _refused(fmt, obj, f"slice step must be positive, got {int(item.step)}")
    if not strict:  # clipped to the axis, as Python and torch clip
        return item
    start, stop = (None if b is None else int(b) for b in (item.start, item.stop))
    if start is not None and not 0 <= (start + size if start < 0 else start) < size:
        raise _refused(
            fmt, obj, f"slice start {start} is out of range for axis {axis} of size {size}"
        )
    if stop is not None and not 0 <= (stop + size if stop < 0 else stop) <= size:
        raise _refused(
            fmt, obj, f"slice stop {stop} is out of range for axis {axis} of size {size}"
        )
    return item


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def bounded_index(index: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[Any, ...]:
    """``index`` (from :func:`normalize_index`) with every slice's start, stop and step
    within its axis, selecting the same elements as NumPy does with the slice as given.

    A framework that stores bounds in 64 bits (torch truncates larger ones, and treats a step
    of ``2**63`` as negative) then slices as NumPy does: a step at least the axis length
    selects one element, so it becomes the length itself.

    >>> bounded_index((slice(None, None, 2**64 + 2), 1), (6, 3))
    (slice(0, 6, 6), 1)
    >>> bounded_index((slice(-2**70, 2**70, 3),), (10,))
    (slice(0, 10, 3),)
    """
    out: list[Any] = []
    for item, size in zip(index, shape, strict=False):
        if type(item) is slice:
            start, stop, step = item.indices(size)
            if step > 0:
                step = min(step, max(size, 1))
            else:
                step = max(step, -max(size, 1))
            item = slice(start, stop if stop >= 0 else None, step)
        out.append(item)
    return tuple(out)

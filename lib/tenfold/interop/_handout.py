"""What a reader's results were given *writable*, so that no two of them share a byte.

Shared by the framework converters (:mod:`tenfold.interop.frameworks` for NumPy,
:mod:`tenfold.interop._torch` for PyTorch); it knows no framework.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["Handout", "extent"]


class Handout:
    """The memory a reader's results were given *writable*, so that no two of them share a
    byte: ``claim(lo, hi)`` records the address range ``[lo, hi)`` and is True, or is False
    (nothing recorded) when the range overlaps one already given; the caller then copies.

    Two results of one file can cover the same bytes: zTensor v2 stores equal parts once
    (all-zero biases, tied weights), ``get_tensor`` may be asked twice for one name, a reader
    may cache what it decoded. Read-only views need no claim (nothing writes through them).

    A range over memory that lives as long as the reader (its private map) is kept for good:
    once given out it may have been written, so it is never given out again. A range of
    memory owned by an array carries a weak reference to that owner and is forgotten once
    the owner is gone (the address may then be reused by a new array).

    The ranges are kept sorted and disjoint: a claim is a binary search; :meth:`claim_many`
    takes a whole load's ranges and finds the overlaps among them by one sort.
    """

    def __init__(self) -> None:
        self._lo: list[int] = []
        self._hi: list[int] = []
        self._owner: list[Any] = []  # None (for good) or a weakref to the memory's owner
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lo)

    def claim(self, lo: int, hi: int, owner: Any = None) -> bool:
        if hi <= lo:
            return True
        with self._lock:
            los, his, owners = self._lo, self._hi, self._owner
            i = bisect.bisect_right(his, lo)  # the first range ending after lo
            j = i
            while j < len(los) and los[j] < hi:
                ref = owners[j]
                if ref is None or ref() is not None:
                    return False
                j += 1
            ref = _weak(owner) if owner is not None else None
            los[i:j], his[i:j], owners[i:j] = [lo], [hi], [ref]  # gone owners' ranges dropped
            return True

    def claim_array(self, a: np.ndarray, for_good: bool = False) -> bool:
        """:meth:`claim` of the bytes ``a`` spans; its owner is the array at the end of its
        ``base`` chain (unless ``for_good``)."""
        if a.size == 0:
            return True
        lo, hi = extent(int(a.__array_interface__["data"][0]), a.shape, a.strides, a.itemsize)
        return self.claim(lo, hi, None if for_good else _root(a))

    def claim_many(self, los: list[int], his: list[int]) -> list[bool]:
        """:meth:`claim` (for good) of every range ``[los[k], his[k])`` (none empty), in one
        pass: a range overlapping one claimed before, or an earlier one of these (by
        start), gets False."""
        n = len(los)
        if not self._lo and all(map(operator.ge, itertools.islice(los, 1, None), his)):
            with self._lock:  # the common case: a file's tensors in order, none overlapping
                if not self._lo:
                    self._lo, self._hi, self._owner = list(los), list(his), [None] * n
                    return [True] * n
        ok = [True] * n
        top = -1
        for k in sorted(range(n), key=los.__getitem__):
            if los[k] < top:
                ok[k] = False  # overlaps a range kept before it
                continue
            top = his[k]
            ok[k] = self.claim(los[k], his[k])
        return ok


def extent(addr: int, shape: Any, strides: Any, itemsize: int) -> tuple[int, int]:
    """The address range ``[lo, hi)`` that an array of ``shape`` and ``strides`` (in bytes)
    at ``addr`` touches (it must hold at least one element)."""
    lo = hi = addr
    for d, s in zip(shape, strides, strict=True):
        if s < 0:
            lo += (d - 1) * s
        else:
            hi += (d - 1) * s
    return lo, hi + itemsize


def _root(a: np.ndarray) -> Any:
    """The object that owns ``a``'s memory (the end of its ``base`` chain)."""
    root: Any = a
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    return root


def _weak(owner: Any) -> Any:
    try:
        return weakref.ref(owner)
    except TypeError:  # bytes and the like: kept for good (at worst a later copy too many)
        return None

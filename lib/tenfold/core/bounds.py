"""Overflow-safe range checks and configurable limits.

Python integers do not overflow, but the numbers in a file do: a u64 offset plus a u64 length can
pass 2**64, a shape product can be astronomically large. Every check here works on exact integers
and compares against the real file size, so a lying field is caught before any view or allocation
is made from it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from ..errors import FormatError, LimitError, TruncatedError, describe

__all__ = [
    "Limits",
    "DEFAULT_LIMITS",
    "check_range",
    "check_limit",
    "align_up",
    "checked_numel",
    "padding",
]

U64_MAX = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class Limits:
    """Upper bounds a reader enforces before allocating or parsing.

    Parameters
    ----------
    max_index_bytes
        Largest metadata/index block (CBOR, JSON, tables) a reader parses.
    max_objects
        Largest number of tensors, chunks or arrays in one file.
    max_decoded_bytes
        Largest buffer a reader allocates for one decoded (decompressed, unpacked, byte-swapped)
        object.
    max_ndim
        Largest tensor rank.
    """

    max_index_bytes: int = 256 << 20
    max_objects: int = 10_000_000
    max_decoded_bytes: int = 64 << 30
    max_ndim: int = 64

    def replace(self, **changes: int) -> Limits:
        """Return a copy with some limits changed.

        >>> Limits().replace(max_ndim=8).max_ndim
        8
        """
        return dataclasses.replace(self, **changes)


DEFAULT_LIMITS = Limits()


def check_range(
    fmt: str, what: str, offset: int, length: int, size: int, *, start: int = 0
) -> None:
    """Check that ``[offset, offset + length)`` lies within ``[start, size)``.

    Raises :class:`TruncatedError` when the range runs past ``size`` and :class:`FormatError`
    when it starts before ``start`` or a field is negative.

    >>> check_range("zt", "tensor 'a'", 64, 16, 100)
    >>> check_range("zt", "tensor 'a'", 64, 64, 100)
    Traceback (most recent call last):
    ...
    tenfold.errors.TruncatedError: zt: tensor 'a' at offset 0x40: ends past end of file; \
expected end <= 100, got 128
    """
    if offset < 0 or length < 0:
        raise FormatError(
            describe(fmt, what, detail=f"negative offset {offset} or length {length}")
        )
    if offset < start:
        raise FormatError(
            describe(
                fmt,
                what,
                offset=offset,
                detail="starts before its region",
                expected=f">= {start}",
                got=offset,
            )
        )
    end = offset + length
    if end > size:
        raise TruncatedError(
            describe(
                fmt,
                what,
                offset=offset,
                detail="ends past end of file",
                expected=f"end <= {size}",
                got=end,
            )
        )


def check_limit(
    fmt: str, what: str, value: int, limit: int, *, field: str = "size", offset: int | None = None
) -> None:
    """Raise :class:`LimitError` when ``value`` exceeds ``limit``.

    >>> check_limit("zt", "index", 10, 8, offset=0)
    Traceback (most recent call last):
    ...
    tenfold.errors.LimitError: zt: index at offset 0x0: size: above limit; expected <= 8, got 10
    """
    if value > limit:
        raise LimitError(
            describe(
                fmt,
                what,
                offset=offset,
                field=field,
                detail="above limit",
                expected=f"<= {limit}",
                got=value,
            )
        )


def align_up(n: int, alignment: int) -> int:
    """Round ``n`` up to a multiple of ``alignment``.

    >>> align_up(65, 64), align_up(64, 64), align_up(0, 8)
    (128, 64, 0)
    """
    return -(-n // alignment) * alignment


def padding(n: int, alignment: int) -> int:
    """Bytes needed after ``n`` to reach a multiple of ``alignment``.

    >>> padding(5, 8), padding(8, 8)
    (3, 0)
    """
    return align_up(n, alignment) - n


def checked_numel(
    fmt: str, what: str, shape: Iterable[object], limits: Limits = DEFAULT_LIMITS
) -> int:
    """Validate a shape (non-negative ints, rank within limits) and return its element count.

    >>> checked_numel("zt", "t", [2, 3])
    6
    >>> checked_numel("zt", "t", [])
    1
    """
    dims = list(shape)
    if len(dims) > limits.max_ndim:
        raise LimitError(
            describe(
                fmt,
                what,
                field="ndim",
                detail="above limit",
                expected=f"<= {limits.max_ndim}",
                got=len(dims),
            )
        )
    for d in dims:
        if type(d) is not int or d < 0 or d > U64_MAX:
            raise FormatError(
                describe(
                    fmt,
                    what,
                    field="shape",
                    detail=f"bad dimension {d!r}",
                    expected="int in [0, 2**64)",
                    got=dims,
                )
            )
    return math.prod(dims)  # type: ignore[arg-type]  # every d checked to be an int above

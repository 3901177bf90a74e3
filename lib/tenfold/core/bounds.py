"""Overflow-safe range checks and configurable limits.

Python integers do not overflow, but the numbers in a file do: a u64 offset plus a u64 length can
pass 2**64, a shape product can be astronomically large. Every check here works on exact integers
and compares against the real file size, so a lying field is caught before any view or allocation
is made from it.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable

from ..errors import FormatError, LimitError, TruncatedError

__all__ = [
    "Limits",
    "DEFAULT_LIMITS",
    "Budget",
    "MAX_ARRAY_BYTES",
    "check_limit",
    "align_up",
    "checked_numel",
    "array_numel",
    "padding",
    "truncated",
    "empty_file",
]

U64_MAX = (1 << 64) - 1
#: The largest extent NumPy can address: every dimension, and the byte span of an array (its
#: non-zero dimensions times the itemsize), must fit in a signed 64-bit ``intp``.
MAX_ARRAY_BYTES = (1 << 63) - 1


def _default_decode_budget() -> int:
    """Half the physical memory, within [1 GiB, 64 GiB] (16 GiB when the size is unknown)."""
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 16 << 30
    return min(max(1 << 30, ram // 2), 64 << 30) if ram > 0 else 16 << 30


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
    decode_budget
        Largest total a single call (``load``, ``read``, ``read_arrays``, ``convert``...) may
        allocate for decoded or copied data, summed over every object it produces: a small file
        whose members each pass ``max_decoded_bytes`` cannot add up to more than this.
        Zero-copy views of the file cost nothing. Verification checks one object at a time,
        so there it bounds each object. Default: half the machine's physical memory, at least
        1 GiB and at most 64 GiB (16 GiB where the memory size is unknown).
    """

    max_index_bytes: int = 256 << 20
    max_objects: int = 10_000_000
    max_decoded_bytes: int = 64 << 30
    max_ndim: int = 64
    decode_budget: int = dataclasses.field(default_factory=_default_decode_budget)

    def budget(self) -> Budget:
        """A fresh :class:`Budget` of :attr:`decode_budget` bytes for one call."""
        return Budget(self.decode_budget)

    def replace(self, **changes: int) -> Limits:
        """Return a copy with some limits changed.

        >>> Limits().replace(max_ndim=8).max_ndim
        8
        """
        return dataclasses.replace(self, **changes)


DEFAULT_LIMITS = Limits()


class Budget:
    """What one call may still allocate for decoded data (see :attr:`Limits.decode_budget`).

    Every allocation sized by a file field is charged with :meth:`take` *before* it is made.

    >>> b = Budget(100)
    >>> b.take(60, "zt", "tensor 'a'")
    >>> b.take(60, "zt", "tensor 'b'", offset=128)
    Traceback (most recent call last):
    ...
    tenfold.errors.LimitError: zt: tensor 'b' at offset 0x80: decoded bytes: above the \
decode budget of this call; expected <= 40 more (budget 100), got 60
    """

    __slots__ = ("total", "used")

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    @property
    def left(self) -> int:
        return self.total - self.used

    def take(self, nbytes: int, fmt: str, what: str, *, offset: int | None = None) -> None:
        """Charge ``nbytes``; :class:`LimitError` (and nothing charged) if that is too much."""
        if nbytes > self.total - self.used:
            raise LimitError(
                fmt=fmt,
                obj=what,
                offset=offset,
                field="decoded bytes",
                detail="above the decode budget of this call",
                expected=f"<= {self.total - self.used} more (budget {self.total})",
                got=nbytes,
            )
        self.used += nbytes


def check_limit(
    fmt: str,
    what: str,
    value: int,
    limit: int,
    *,
    field: str = "size",
    offset: int | None = None,
    detail: str = "above limit",
) -> None:
    """Raise :class:`LimitError` when ``value`` exceeds ``limit``.

    >>> check_limit("zt", "index", 10, 8, offset=0)
    Traceback (most recent call last):
    ...
    tenfold.errors.LimitError: zt: index at offset 0x0: size: above limit; expected <= 8, got 10
    """
    if value > limit:
        raise LimitError(
            fmt=fmt,
            obj=what,
            offset=offset,
            field=field,
            detail=detail,
            expected=f"<= {limit}",
            got=value,
        )


def truncated(
    fmt: str,
    size: int,
    needs: int,
    part: str = "header",
    *,
    obj: str = "file",
    offset: int | None = None,
) -> TruncatedError:
    """The error for a file shorter than its own ``part`` (header, footer) says it must be:
    the cause, named before any size field that only shows the symptom.

    >>> str(truncated("zt", 100, 4096, "footer"))
    'zt: file: truncated: the file has 100 bytes, its footer needs at least 4096'
    """
    detail = f"truncated: the file has {size} bytes, its {part} needs at least {needs}"
    return TruncatedError(fmt=fmt, obj=obj, offset=offset, detail=detail)


def empty_file(path: object) -> TruncatedError:
    """The error for an empty file, the same from :func:`tenfold.open` and the CLI."""
    name = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    return TruncatedError(fmt="tenfold", obj=name, detail="the file is empty (0 bytes)")


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
    fmt: str,
    what: str,
    shape: Iterable[object],
    limits: Limits = DEFAULT_LIMITS,
    *,
    itemsize: int = 1,
    offset: int | None = None,
) -> int:
    """Validate a shape and return its element count.

    The one shape check every reader uses: the rank is within ``limits.max_ndim``, each
    dimension is an ``int`` (not a bool) in ``[0, 2**63)`` (:class:`FormatError` otherwise),
    and the array NumPy would make for it is addressable: the product of the non-zero
    dimensions times ``itemsize`` fits in a signed 64-bit integer (:class:`LimitError`
    otherwise; NumPy refuses ``(0, 2**63)`` too, although it holds nothing).

    >>> checked_numel("zt", "t", [2, 3])
    6
    >>> checked_numel("zt", "t", [])
    1
    >>> checked_numel("zt", "t", [0, 2**63])
    Traceback (most recent call last):
    ...
    tenfold.errors.FormatError: zt: t: shape: dimension out of range; \
expected int in [0, 2**63), got [0, 9223372036854775808]
    """
    dims = list(shape)
    check_limit(fmt, what, len(dims), limits.max_ndim, field="ndim", offset=offset)
    span = max(int(itemsize), 1)
    for d in dims:
        if type(d) is not int or d < 0 or d > MAX_ARRAY_BYTES:
            raise FormatError(
                fmt=fmt,
                obj=what,
                offset=offset,
                field="shape",
                detail="dimension out of range",
                expected="int in [0, 2**63)",
                got=_short(dims),
            )
        if d:
            span *= d
            if span > MAX_ARRAY_BYTES:
                raise LimitError(
                    fmt=fmt,
                    obj=what,
                    offset=offset,
                    field="shape",
                    detail=f"too large for any array (itemsize {itemsize})",
                    expected=f"extent <= {MAX_ARRAY_BYTES} bytes",
                    got=_short(dims),
                )
    return math.prod(dims)  # type: ignore[arg-type]  # every d checked to be an int above


def array_numel(
    fmt: str, what: str, shape: tuple[int, ...], itemsize: int, offset: int | None = None
) -> int:
    """The element count of an array of ``shape`` read from a file at ``offset``: the plain
    product where it is non-zero and its extent (times ``itemsize``) far from any limit, else
    :func:`checked_numel`'s (which also says what is wrong with a dimension)."""
    count = 1
    for d in shape:
        count *= d
    if count == 0 or count * itemsize > MAX_ARRAY_BYTES:
        count = checked_numel(fmt, what, shape, itemsize=itemsize, offset=offset)
    return count


def _short(dims: list[object]) -> object:
    text = repr(dims)
    return dims if len(text) <= 200 else text[:200] + "..."

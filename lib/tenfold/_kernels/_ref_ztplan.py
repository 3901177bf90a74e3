"""Reference twin of ``ztplan.pyx``: decode a zTensor v2 manifest, planning plain dense objects.

:func:`scan_manifest` decodes the manifest (``_ref_dcbor.decode``: it raises exactly what that
raises) and splits the root map: the ``objects`` map goes to two dicts, ``plans`` for the
objects of the commonest form, which it checks against every rule the full validation in
``tenfold.ztensor._v2manifest`` applies, and ``others`` (decoded values) for the rest, which that
validation then checks and names the rule they break; every other root key goes to ``rest``.

The plain dense form: a map with exactly the keys ``layout`` (``"dense"``), ``shape`` (an array of
at most ``max_rank`` u64) and ``parts`` (a map with exactly one key ``data``, whose value has
exactly the keys ``dtype`` (a storage type of ``dtypes``), ``blob`` (``[offset, length]``, u64:
``offset`` a positive multiple of ``align``, ``offset + length <= region``, ``length`` the
shape's element count times the itemsize) and optionally ``digest`` (``<algorithm>:<lowercase
hex>``, with ``digests[algorithm]`` hex digits for a known algorithm)); its name is text,
non-empty, without U+0000, at most ``max_name_bytes`` UTF-8 bytes. Its plan is
``(offset, length, dtype, dtypes[dtype], shape tuple, digest or None)``.
"""

from __future__ import annotations

import operator
import re
from typing import Any

import numpy as np

from . import _ref_dcbor
from ._cargs import cint, ssize
from ._cbortypes import SYNTAX, CborReject

_DIGEST = re.compile(r"([a-z0-9][a-z0-9._-]*):([0-9a-f]+)\Z")
_U64 = (1 << 64) - 1
_SSIZE_MAX = (1 << 63) - 1
_MAX_RANK_LIMIT = 64
_OBJECT_KEYS = frozenset({"shape", "layout", "parts"})
_PART_KEYS = (frozenset({"dtype", "blob"}), frozenset({"dtype", "blob", "digest"}))


def scan_manifest(
    data: object,
    max_depth: int,
    region: int,
    align: int,
    max_rank: int,
    max_name_bytes: int,
    dtypes: dict[str, Any],
    digests: dict[str, int],
) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], bool, int, int] | None:
    """Decode a manifest (see the module doc).

    Returns None unless the root is a map holding a map under ``"objects"``; else
    ``(plans, others, rest, in_order, lo, hi)``: ``in_order`` is True when every object has a
    plan and their non-empty blobs come in strictly increasing, disjoint order; ``lo``/``hi``
    are the lowest start and highest end of those blobs (``-1, -1`` when there are none).
    ``dtypes`` maps a storage type name to an object with an ``itemsize``.
    """
    max_depth = cint(max_depth)
    region, align, max_rank = ssize(region), ssize(align), ssize(max_rank)
    max_name_bytes = ssize(max_name_bytes)
    for arg in (dtypes, digests):
        if type(arg) is not dict:
            raise TypeError(f"expected dict, got {type(arg).__name__}")
    if not 1 <= max_depth <= 256:
        raise ValueError(f"max_depth must be in 1..256, got {max_depth}")
    if align <= 0:
        raise ValueError(f"align must be positive, got {align}")
    if not 0 <= max_rank <= _MAX_RANK_LIMIT or max_name_bytes < 0:
        raise ValueError(f"max_rank must be in 0..{_MAX_RANK_LIMIT} and max_name_bytes >= 0")
    root = _ref_dcbor.decode(data, max_depth)
    if type(root) is not dict or type(root.get("objects")) is not dict:
        return None
    plans: dict[Any, Any] = {}
    others: dict[Any, Any] = {}
    in_order, lo, hi = True, -1, -1
    for name, obj in root["objects"].items():
        plan = _plan(name, obj, region, align, max_rank, max_name_bytes, dtypes, digests)
        if plan is None:
            others[name] = obj
            in_order = False
            continue
        plans[name] = plan
        offset, length = plan[0], plan[1]
        if length:
            if offset < hi:
                in_order = False
            lo = offset if lo < 0 else min(lo, offset)
            hi = max(hi, offset + length)
    rest = {k: v for k, v in root.items() if not (type(k) is str and k == "objects")}
    return plans, others, rest, in_order, lo, hi


def _plan(
    name: object,
    obj: object,
    region: int,
    align: int,
    max_rank: int,
    max_name_bytes: int,
    dtypes: dict[str, Any],
    digests: dict[str, int],
) -> tuple[Any, ...] | None:
    """The plan of a plain dense object, or None (never raises)."""
    if type(obj) is not dict or obj.keys() != _OBJECT_KEYS:
        return None
    layout, parts, shape = obj["layout"], obj["parts"], obj["shape"]
    if type(layout) is not str or layout != "dense":
        return None
    if type(parts) is not dict or len(parts) != 1:
        return None
    p = parts.get("data")
    if type(p) is not dict or p.keys() not in _PART_KEYS:
        return None
    dtype, blob = p["dtype"], p["blob"]
    if type(dtype) is not str or type(blob) is not list or type(shape) is not list:
        return None
    np_dtype = dtypes.get(dtype)
    if np_dtype is None or len(blob) != 2 or len(shape) > max_rank:
        return None
    offset, length = blob
    if type(offset) is not int or type(length) is not int or length < 0 or offset > _U64:
        return None
    if offset % align or offset < align or offset > region or length > region - offset:
        return None
    n = 1
    for d in shape:
        if type(d) is not int or d < 0 or d > _U64:
            return None
        n *= d
    itemsize = np_dtype.itemsize
    if type(itemsize) is not int or not 0 <= itemsize <= _U64:
        return None
    if n > _U64 or n * itemsize != length:
        return None
    digest = p.get("digest")
    if "digest" in p:
        m = _DIGEST.match(digest) if type(digest) is str else None
        if m is None:
            return None
        want = digests.get(m.group(1))
        if want is not None and len(m.group(2)) != want:
            return None
    if type(name) is not str or not name or "\x00" in name:
        return None
    try:
        if len(name.encode("utf-8")) > max_name_bytes:
            return None
    except UnicodeEncodeError:  # a lone surrogate: not from a decoder, but never accepted
        return None
    return (offset, length, dtype, np_dtype, tuple(shape), digest)


def view(base: Any, plan: tuple[Any, ...]) -> np.ndarray:
    """The read-only array ``plan`` describes over the bytes of ``base`` (a C-contiguous 1-d
    ``uint8`` ndarray: a file's map), without copying.

    ``plan`` is ``(offset, length, dtype, np_dtype, shape, digest)`` as :func:`scan_manifest`
    gives it; the range must lie in ``base`` and ``length`` must be the shape's element count
    times the itemsize (``ValueError`` otherwise).
    """
    if (
        type(base) is not np.ndarray
        or base.ndim != 1
        or base.itemsize != 1
        or not base.flags.c_contiguous
    ):
        raise ValueError("base must be a C-contiguous 1-d uint8 ndarray")
    if type(plan) is not tuple:
        raise TypeError(f"expected tuple, got {type(plan).__name__}")
    if len(plan) != 6:
        raise ValueError(f"a plan has 6 fields, got {len(plan)}")
    offset, length, _, descr, shape, _ = plan
    offset, length = ssize(offset), ssize(length)
    if type(shape) is not tuple:
        raise TypeError(f"expected tuple, got {type(shape).__name__}")
    if not isinstance(descr, np.dtype):
        raise ValueError("plan[3] must be a numpy dtype")
    if len(shape) > 64:
        raise ValueError(f"rank above 64: {len(shape)}")
    total = 1
    for d in shape:
        d = operator.index(d)
        if d < 0 or d > _U64:
            raise OverflowError(f"dimension {d} is not a u64")
        total *= d
        if d > _SSIZE_MAX or total > _U64:
            raise ValueError(f"shape {shape} too large")
    nbytes = base.nbytes
    if offset < 0 or length < 0 or length > nbytes or offset > nbytes - length:
        raise ValueError(f"range [{offset}, +{length}) outside the {nbytes} bytes of base")
    total *= descr.itemsize
    if total > _U64 or total != length:
        raise ValueError(f"length {length} is not {shape} x the itemsize of {descr}")
    arr = np.ndarray(shape, descr, base, offset)
    if arr.flags.writeable:
        arr.flags.writeable = False
    return arr


def map_spans(data: object, pos: int, max_depth: int) -> tuple[list[tuple[int, int, int]], int]:
    """Where the entries of the deterministic-CBOR map whose head is at ``pos`` lie.

    Returns ``(spans, end)``: one ``(key_start, value_start, value_end)`` per entry, in the
    order they are encoded, and the end of the map. Each key and value is decoded on the way
    (``CborReject`` for anything ``dcbor.decode`` refuses, nesting counted from the map at
    depth 1); keys are not checked for order (the caller decoded the whole item before).
    """
    pos, max_depth = ssize(pos), cint(max_depth)
    if not 1 <= max_depth <= 256:
        raise ValueError(f"max_depth must be in 1..256, got {max_depth}")
    buf = memoryview(data).cast("B").tobytes()  # type: ignore[arg-type]
    if not 0 <= pos < len(buf):
        raise ValueError(f"pos {pos} outside the {len(buf)} bytes")
    major, _, arg, p = _ref_dcbor._head(buf, pos)
    if major != 5:
        raise CborReject(SYNTAX, pos, "not a map")
    if arg > (len(buf) - p) // 2:  # every entry takes at least two bytes
        raise CborReject(SYNTAX, pos, f"map of {arg} pairs runs past the end")
    spans = []
    for _ in range(arg):
        kpos = p
        _, p = _ref_dcbor._item(buf, p, 2, max_depth)
        vpos = p
        _, p = _ref_dcbor._item(buf, p, 2, max_depth)
        spans.append((kpos, vpos, p))
    return spans, p


class PlanTable:
    """The plans of one manifest (see :func:`scan_table`): ``index`` maps each planned
    object's name to its number, in manifest order; :meth:`plan` gives the tuple
    :func:`scan_manifest` gives, :meth:`view` the array of a name."""

    def __init__(self, plans: dict[Any, tuple[Any, ...]]) -> None:
        self.index = {name: i for i, name in enumerate(plans)}
        self._plans = list(plans.values())

    def __len__(self) -> int:
        return len(self._plans)

    def plan(self, i: int) -> tuple[Any, ...]:
        """Plan ``i`` as :func:`scan_manifest` gives it."""
        i = ssize(i)
        if not 0 <= i < len(self._plans):
            raise IndexError(f"plan {i} of {len(self._plans)}")
        return self._plans[i]

    def has_digest(self, i: int) -> bool:
        """Whether plan ``i`` has a digest."""
        return self.plan(i)[5] is not None

    def view(self, base: Any, name: Any, verify: bool, verified: Any) -> np.ndarray | None:
        """The read-only array of the planned object ``name`` over ``base`` (as :func:`view`),
        or None when there is none to give: no plan of that name, ``base`` is None, the blob
        is empty, or its digest is to be checked first (``verify`` and ``(name, "data")`` not
        in ``verified``)."""
        i = self.index.get(name)
        if i is None or base is None:
            return None
        plan = self._plans[i]
        if plan[1] == 0 or (verify and plan[5] is not None and (name, "data") not in verified):
            return None
        return view(base, plan)


def scan_table(
    data: bytes,
    max_depth: int,
    region: int,
    align: int,
    max_rank: int,
    max_name_bytes: int,
    dtypes: dict[str, Any],
    digests: dict[str, int],
) -> tuple[PlanTable, dict[Any, Any], dict[Any, Any], bool, int, int] | None:
    """:func:`scan_manifest` with the plans in a :class:`PlanTable`:
    ``(table, others, rest, in_order, lo, hi)`` or None."""
    if type(data) is not bytes:
        raise TypeError(f"expected bytes, got {type(data).__name__}")
    got = scan_manifest(data, max_depth, region, align, max_rank, max_name_bytes, dtypes, digests)
    if got is None:
        return None
    plans, others, rest, in_order, lo, hi = got
    return PlanTable(plans), others, rest, in_order, lo, hi


class TableReader:
    """Base of a reader whose plain dense objects are views built straight from a
    :class:`PlanTable`: ``reader[name]`` is ``_table.view(_base, name, verify_checksums,
    _verified)`` unless ``copy`` is set, and the subclass's ``_lookup(name)`` for a name that
    gives no view that way (the kernel does this in C)."""

    _table: PlanTable | None = None
    _base: Any = None
    _verified: Any = None
    copy: bool = False
    verify_checksums: bool = True

    def __getitem__(self, name: Any) -> Any:
        table = self._table
        if table is not None and not self.copy:
            arr = table.view(self._base, name, self.verify_checksums, self._verified)
            if arr is not None:
                return arr
        return self._lookup(name)  # type: ignore[attr-defined]

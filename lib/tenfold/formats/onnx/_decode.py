"""ONNX tensor values from their stored form (:mod:`._spec` lists the rules): typed fields
decoded, sub-byte ``raw_data`` unpacked, sparse initializers made dense. Every count is checked
against the tensor's shape, every value against its element type's range, and every array
allocated here is charged to the call's decode budget first."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.bounds import Budget
from ...errors import factory
from . import _spec as S
from ._model import Tensor
from ._wire import I32, I64, LEN, VARINT, packed_varints

__all__ = ["unpack", "typed_values", "densify"]

E = factory("onnx")


def unpack(raw: np.ndarray, elem: S.Elem, numel: int) -> np.ndarray:
    """Packed sub-byte elements (``raw``: ``uint8``) -> one element per byte, ``elem.dtype``."""
    assert elem.dtype is not None
    if elem.bits == 6:  # four elements in three bytes, an LSB-first bit stream
        groups = -(-numel // 4)
        padded = np.zeros(groups * 3, np.uint8)
        padded[: raw.size] = raw
        w = padded.reshape(groups, 3).astype(np.uint32)
        word = w[:, 0] | (w[:, 1] << 8) | (w[:, 2] << 16)
        out = np.empty((groups, 4), np.uint8)
        for i in range(4):
            out[:, i] = (word >> (6 * i)) & 0x3F
        return out.reshape(-1)[:numel].view(elem.dtype)
    per = 8 // elem.bits
    mask = (1 << elem.bits) - 1
    out = np.empty((raw.size, per), np.uint8)
    for i in range(per):
        out[:, i] = (raw >> (elem.bits * i)) & mask
    return out.reshape(-1)[:numel].view(elem.dtype)


def _segments(buf: Any, t: Tensor, number: int, what: str) -> list[tuple[int, Any, int]]:
    segs = t.typed.get(number, [])
    others = sorted(set(t.typed) - {number})
    if others:
        raise E.format(
            what,
            offset=t.typed[others[0]][0][2],
            field=S.TYPED_NAMES[others[0]],
            detail=f"present for data_type {t.type_name}",
            expected=f"{S.TYPED_NAMES[number]} only",
            got=[S.TYPED_NAMES[o] for o in others],
        )
    return segs


def _fixed(
    buf: Any, segs: list[tuple[int, Any, int]], dt: np.dtype, field: str, what: str
) -> np.ndarray:
    """Concatenated fixed-width values (packed LEN chunks or single I32/I64 fields)."""
    want = I32 if dt.itemsize == 4 else I64
    parts = []
    for wire, v, at in segs:
        if wire == LEN:
            off, n = v
            if n % dt.itemsize:
                raise E.format(
                    what,
                    offset=at,
                    field=field,
                    detail=f"packed length not a multiple of {dt.itemsize}",
                    got=n,
                )
            parts.append(np.frombuffer(buf[off : off + n], dt))
        elif wire == want:
            parts.append(np.frombuffer(buf[v : v + dt.itemsize], dt))
        else:
            raise E.format(
                what,
                offset=at,
                field=field,
                detail="wrong wire type",
                expected=f"{LEN} or {want}",
                got=wire,
            )
    return np.concatenate(parts) if parts else np.empty(0, dt)


def _varints(buf: Any, segs: list[tuple[int, Any, int]], field: str, what: str) -> np.ndarray:
    parts = []
    for wire, v, at in segs:
        if wire == LEN:
            off, n = v
            parts.append(packed_varints(np.frombuffer(buf[off : off + n], np.uint8), what, off))
        elif wire == VARINT:
            parts.append(np.array([v], np.uint64))
        else:
            raise E.format(
                what,
                offset=at,
                field=field,
                detail="wrong wire type",
                expected=f"{LEN} or {VARINT}",
                got=wire,
            )
    return np.concatenate(parts) if parts else np.empty(0, np.uint64)


def _count(t: Tensor, got: int, want: int, field: str, what: str) -> None:
    if got != want:
        raise E.format(what, offset=t.at, field=f"{field} count", expected=want, got=got)


def _in_range(v: np.ndarray, lo: int, hi: int, t: Tensor, field: str, what: str) -> None:
    if v.size and (int(v.min()) < lo or int(v.max()) > hi):
        bad = v[(v < lo) | (v > hi)][0]
        raise E.format(
            what,
            offset=t.at,
            field=field,
            detail=f"value out of range for {t.type_name}",
            expected=f"{lo} .. {hi}",
            got=int(bad),
        )


def typed_values(buf: Any, t: Tensor, elem: S.Elem, what: str, budget: Budget) -> np.ndarray:
    """The elements of ``t`` stored in its typed field, as a 1-D array of ``elem.dtype``."""
    assert elem.dtype is not None
    field = S.TYPED_NAMES[elem.typed]
    segs = _segments(buf, t, elem.typed, what)
    budget.take(
        max(elem.dtype.itemsize * t.numel, 8 * sum(s[1][1] if s[0] == LEN else 1 for s in segs)),
        "onnx",
        what,
        offset=t.at,
    )
    if elem.typed in (S.T_FLOAT, S.T_DOUBLE):
        scalar = np.dtype("<f4" if elem.typed == S.T_FLOAT else "<f8")
        vals = _fixed(buf, segs, scalar, field, what)
        per = elem.dtype.itemsize // scalar.itemsize  # complex: two per element
        _count(t, vals.size, t.numel * per, field, what)
        return vals.view(elem.dtype) if per > 1 else vals
    raw = _varints(buf, segs, field, what)
    if elem.typed == S.T_INT64:
        _count(t, raw.size, t.numel, field, what)
        return raw.view(np.int64)
    if elem.typed == S.T_UINT64:
        _count(t, raw.size, t.numel, field, what)
        if elem.dtype.itemsize == 4:
            _in_range(raw, 0, (1 << 32) - 1, t, field, what)
        return raw.astype(elem.dtype)
    return _int32_field(raw.view(np.int64), t, elem, field, what)


def _int32_field(v: np.ndarray, t: Tensor, elem: S.Elem, field: str, what: str) -> np.ndarray:
    assert elem.dtype is not None
    _in_range(v, -(1 << 31), (1 << 31) - 1, t, field, what)
    if elem.bits in (2, 4):  # packed as in raw_data, one byte per entry
        _count(t, v.size, elem.nbytes(t.numel), field, what)
        _in_range(v, 0, 255, t, field, what)
        return unpack(v.astype(np.uint8), elem, t.numel)
    _count(t, v.size, t.numel, field, what)
    kind = elem.dtype.kind
    if elem.code == 9:  # BOOL
        _in_range(v, 0, 1, t, field, what)
        return v.astype(np.bool_)
    if kind in "iu" and elem.dtype.itemsize < 8 and elem.bits >= 8:
        info = np.iinfo(elem.dtype)
        _in_range(v, int(info.min), int(info.max), t, field, what)
        return v.astype(elem.dtype)
    # bit patterns: float16, bfloat16, the 8-bit and 6-bit floats
    _in_range(v, 0, (1 << elem.bits) - 1, t, field, what)
    return v.astype(f"<u{elem.dtype.itemsize}").view(elem.dtype)


def densify(
    values: np.ndarray,
    indices: np.ndarray,
    shape: tuple[int, ...],
    numel: int,
    what: str,
    at: int,
    budget: Budget,
) -> np.ndarray:
    """The dense tensor of a sparse initializer: zeros with ``values`` at ``indices``
    (``[NNZ]`` linear indices, or ``[NNZ, rank]`` coordinates)."""
    nnz = values.size
    if values.ndim != 1:
        raise E.format(what, offset=at, field="values", detail="not 1-D", got=values.shape)
    if indices.dtype.kind not in "iu":
        raise E.format(
            what, offset=at, field="indices", detail="not integers", got=str(indices.dtype)
        )
    idx = indices.astype(np.int64)
    if idx.ndim == 2 and idx.shape == (nnz, len(shape)) and len(shape) > 0:
        bad = (idx < 0) | (idx >= np.array(shape, np.int64))
        if bad.any():
            raise E.format(
                what,
                offset=at,
                field="indices",
                detail="out of the shape",
                expected=f"< {list(shape)}",
                got=idx[bad.any(axis=1)][0].tolist(),
            )
        flat = np.ravel_multi_index(tuple(idx.T), shape) if nnz else idx.reshape(0)
    elif idx.ndim == 1 and idx.size == nnz:
        if nnz and (int(idx.min()) < 0 or int(idx.max()) >= numel):
            raise E.format(
                what,
                offset=at,
                field="indices",
                detail="out of the shape",
                expected=f"0 .. {numel - 1}",
                got=int(idx[(idx < 0) | (idx >= numel)][0]),
            )
        flat = idx
    else:
        raise E.format(
            what,
            offset=at,
            field="indices shape",
            expected=f"[{nnz}] or [{nnz}, {len(shape)}]",
            got=list(idx.shape),
        )
    if nnz > 1 and not (np.diff(flat) > 0).all():
        raise E.format(what, offset=at, field="indices", detail="not ascending without duplicates")
    budget.take(numel * values.dtype.itemsize, "onnx", what, offset=at)
    out = np.zeros(numel, values.dtype)
    out[flat] = values
    return out.reshape(shape)

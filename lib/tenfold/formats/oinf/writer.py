"""OINF writer: version 1, byte-identical to openinfer-oinf 0.1.1 for the same model.

Layout: header, sizevars, metadata and tensor tables (each sorted by name in byte order), then
every metadata payload and every tensor payload in table order, each 8-aligned and
zero-padded. Tensor payloads are streamed to the file in chunks (memory does not grow with the
model), through :func:`tenfold.core.atomic_write` (the destination is replaced only on
success).

Type inference follows openinfer-oinf 0.1.1 where it is defined, and explicit wrappers say what
inference cannot:

* metadata: ``bool`` -> BOOL, ``str`` -> STRING, :class:`Bitset` -> BITSET, Python or NumPy
  integers -> the smallest of u8/u16/u32/u64 (non-negative) or i8/i16/i32/i64, Python or NumPy
  floats -> F32, lists -> NDARRAY (floats as f32, integers narrowed to the smallest type of the
  same signedness), ndarrays -> NDARRAY keeping their dtype; ``Scalar(value, "f16")`` forces a
  scalar type, ``Tensor(data, "i4")`` an NDARRAY element type;
* tensors: ndarrays keep their dtype (bfloat16 / float8_e5m2 from ml_dtypes map to BF16 / F8),
  lists and scalars go through :func:`numpy.asarray`; ``Tensor(data, "t2")`` converts to a target
  type, ``Uninitialized("f32", (2, 3))`` declares a tensor without data (HAS_DATA=0).

Values that do not fit the target type raise :class:`~tenfold.errors.EncodeError` (e.g. 8 for
i4, -2 for t2, 0 for t1, 300 for u8, 1.5 for i32). F8 is encoded with correct round-to-nearest-
even (openinfer-oinf 0.1.1 rounds ties up and loses the mantissa carry); NaN is written as 0x7D
like the reference. BITSET tensors are refused.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ... import _kernels
from ...core.atomic import atomic_write
from ...core.dtypes import BFLOAT16, FLOAT8_E5M2
from ...core.release import release
from ...errors import EncodeError
from . import _spec as S
from .reader import Bitset

__all__ = ["write", "Scalar", "Tensor", "Uninitialized"]

CHUNK = 1 << 20  # elements per streamed chunk (a multiple of 8)
_PAD = bytes(8)


class Scalar:
    """A metadata scalar of an explicit type, e.g. ``Scalar(1.5, "f16")``, ``Scalar(-1, "t2")``."""

    __slots__ = ("value", "dtype")

    def __init__(self, value: Any, dtype: Any) -> None:
        self.value = value
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Scalar({self.value!r}, {self.dtype!r})"


class Tensor:
    """Array data with an explicit target type, e.g. ``Tensor(w, "i4")``, ``Tensor(x, "bf16")``."""

    __slots__ = ("data", "dtype")

    def __init__(self, data: Any, dtype: Any = None) -> None:
        self.data = data
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Tensor(<{type(self.data).__name__}>, {self.dtype!r})"


class Uninitialized:
    """A tensor declared without data (HAS_DATA=0): ``Uninitialized("f32", (2, 3))``."""

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: Any, shape: Any) -> None:
        self.dtype = dtype
        self.shape = tuple(shape)

    def __repr__(self) -> str:
        return f"Uninitialized({self.dtype!r}, {self.shape!r})"


def _err(obj: str, detail: str, expected: object = None, got: object = None) -> EncodeError:
    return S.E.encode(obj, detail=detail, expected=expected, got=got)


def _check_name(name: object, kind: str) -> str:
    if not isinstance(name, str):
        raise S.E.name_not_str(kind, name)
    if not S.NAME_RE_STR.fullmatch(name):
        # repr: an empty name or one with control characters is visible
        raise _err(f"{kind} {name!r}", "invalid name", "[A-Za-z0-9._-]+", repr(name))
    return name


def _string(value: str) -> bytes:
    raw = value.encode("ascii")
    n = 4 + len(raw)
    return S.STRING_LEN.pack(len(raw)) + raw + _PAD[: S.align8(n) - n]


def _resolve_tag(dtype: Any, obj: str) -> int:
    tag = S.tag_of(dtype)
    if tag is None:
        raise _err(obj, "unknown dtype", "an OINF type name, tag or NumPy dtype", dtype)
    return tag


# -- element conversion ---------------------------------------------------------------------
def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns with round-to-nearest-even (NaN stays a quiet NaN)."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32)
    r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        r = np.where(nan, (b >> np.uint32(16)) | np.uint32(0x40), r)
    return r.astype(np.uint16)


def f32_to_f8_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> float8 E5M2 bit patterns, correct round-to-nearest-even; NaN -> 0x7D."""
    f = np.ascontiguousarray(x, np.float32)
    out = f.astype(FLOAT8_E5M2).view(np.uint8)
    nan = np.isnan(f)
    if nan.any():
        out = np.where(nan, np.uint8(0x7D), out).astype(np.uint8)
    return out


def _integral(c: np.ndarray, obj: str, start: int, tname: str) -> np.ndarray:
    """Check that float values are integers; return them as int64."""
    ok = np.isfinite(c) & (c == np.trunc(c))
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise _err(
            obj,
            f"element {start + i} is not an integer",
            f"integral values for {tname}",
            c.reshape(-1)[i].item(),
        )
    return c.astype(np.int64)


def _range_check(c: np.ndarray, lo: int, hi: int, obj: str, start: int, tname: str) -> None:
    if c.size == 0:
        return
    if c.dtype.kind == "u" and lo <= 0 and int(c.max()) <= hi:
        return
    if int(c.min()) >= lo and int(c.max()) <= hi:
        return
    bad = (c < lo) | (c > hi)
    i = int(np.flatnonzero(bad)[0])
    raise _err(obj, f"element {start + i} out of range for {tname}", f"[{lo}, {hi}]", c[i].item())


def encode_chunks(arr: np.ndarray, tag: int, obj: str) -> Iterator[Any]:
    """Yield the payload of ``arr`` as element type ``tag`` in buffers of at most CHUNK elements."""
    tname = S.TAG_NAME[tag]
    flat = np.ascontiguousarray(arr).reshape(-1)
    kind = flat.dtype.kind
    src_is_float = kind == "f" or flat.dtype in (BFLOAT16, FLOAT8_E5M2)
    if not (kind in "biuf" or src_is_float):
        raise _err(obj, "cannot store this dtype", "bool, integer or float data", str(arr.dtype))
    n = flat.size
    if tag in S.PACKED_BITS:
        bits = S.PACKED_BITS[tag]
        lo, hi = S.PACKED_RANGE[tag]
        k = _kernels.load("bitpack")
        for start in range(0, n, CHUNK):
            c = flat[start : start + CHUNK]
            if src_is_float:
                c = _integral(c.astype(np.float64), obj, start, tname)
            elif kind == "b":
                c = c.view(np.uint8)
            out = np.empty((c.size * bits + 7) // 8, np.uint8)
            if tag in (S.U4, S.U2, S.U1):
                if c.dtype != np.uint8:
                    _range_check(c, lo, hi, obj, start, tname)
                    c = c.astype(np.uint8)
                r = k.pack_uint(c, bits, out)
            else:
                if c.dtype != np.int8:
                    _range_check(c, lo, hi, obj, start, tname)
                    c = c.astype(np.int8)
                r = k.pack_pm1(c, out) if tag == S.T1 else k.pack_int(c, bits, lo, hi, out)
            if r >= 0:
                want = "-1 or 1" if tag == S.T1 else f"[{lo}, {hi}]"
                raise _err(obj, f"element {start + r} out of range for {tname}", want, c[r].item())
            yield out
        return
    if tag == S.BITSET:
        raise _err(
            obj,
            "BITSET tensors are not written (the Python tooling rejects them)",
            "a numeric, bool, bf16, f8 or packed dtype",
            "bitset",
        )
    target = S.NUMPY_DTYPE[tag]
    if flat.dtype == target:  # same type and byte order: no conversion
        if target in (BFLOAT16, FLOAT8_E5M2):  # ml_dtypes: buffers export as raw bytes
            flat = flat.view(np.uint8 if target.itemsize == 1 else np.uint16)
        for start in range(0, n, CHUNK):
            yield flat[start : start + CHUNK]
        return
    if kind == "V" and not src_is_float:
        raise _err(obj, "cannot store this dtype", "bool, integer or float data", str(arr.dtype))
    for start in range(0, n, CHUNK):
        c = flat[start : start + CHUNK]
        if tag == S.BF16:
            yield f32_to_bf16_bits(c.astype(np.float32))
        elif tag == S.F8:
            yield f32_to_f8_bits(c.astype(np.float32))
        elif tag == S.BOOL:
            yield c.astype(np.bool_).view(np.uint8)
        elif target.kind in "iu":
            info = np.iinfo(target)
            if src_is_float:
                c = _integral(c.astype(np.float64), obj, start, tname)
            elif kind == "b":
                c = c.view(np.uint8)
            _range_check(c, int(info.min), int(info.max), obj, start, tname)
            yield c.astype(target)
        else:
            yield c.astype(target)


# -- model normalisation --------------------------------------------------------------------
class _TensorPlan:
    __slots__ = ("name", "tag", "shape", "arr", "nbytes")

    def __init__(self, name: str, tag: int, shape: tuple[int, ...], arr: Any):
        self.name = name
        self.tag = tag
        self.shape = shape
        self.arr = arr
        self.nbytes = S.element_nbytes(tag, math.prod(shape)) if arr is not None else 0


def _shape(shape: Any, obj: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise _err(obj, "bad shape", "a sequence of ints", shape) from None
    if any(d < 0 or d >= 1 << 64 for d in dims) or any(isinstance(d, bool) for d in shape):
        raise _err(obj, "bad shape", "non-negative dims < 2**64", shape)
    return dims


def _as_array(data: Any, obj: str) -> np.ndarray:
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise _err(obj, f"cannot make an array ({exc})") from None
    if arr.dtype.kind in "OSUVcmM" and arr.dtype not in (BFLOAT16, FLOAT8_E5M2):
        from ...capabilities import holders

        can = holders(arr.dtype)
        raise _err(
            obj,
            "cannot store this dtype (formats that can: "
            + (", ".join(can) if can else "none tenfold writes")
            + ")",
            "bool, integer, float, bfloat16 or float8_e5m2 data",
            str(arr.dtype),
        )
    return arr


def _plan_tensor(name: str, value: Any) -> _TensorPlan:
    obj = f"tensor {name!r}"
    if isinstance(value, Uninitialized):
        tag = _resolve_tag(value.dtype, obj)
        if tag not in S.WRITABLE_TENSOR_TAGS:
            raise _err(
                obj,
                "not a tensor dtype",
                "a numeric, bool, bf16, f8 or packed type",
                S.TAG_NAME[tag],
            )
        return _TensorPlan(name, tag, _shape(value.shape, obj), None)
    if isinstance(value, Tensor):
        arr = _as_array(value.data, obj)
        tag = _resolve_tag(value.dtype, obj) if value.dtype is not None else _infer_tag(arr, obj)
    else:
        if value is None:
            raise _err(obj, "no data; use Uninitialized(dtype, shape) for a tensor without data")
        if _deferred(value):
            # fetched only when its bytes are written: planned from its dtype and shape
            _as_array(np.empty(0, np.dtype(value.dtype)), obj)
            tag = _infer_tag(np.empty(0, np.dtype(value.dtype)), obj)
            return _TensorPlan(name, tag, _shape(value.shape, obj), value)
        arr = _as_array(value, obj)
        tag = _infer_tag(arr, obj)
    if tag == S.BITSET:
        raise _err(
            obj,
            "BITSET tensors are not written (the Python tooling rejects them)",
            "a numeric, bool, bf16, f8 or packed dtype",
            "bitset",
        )
    if tag not in S.WRITABLE_TENSOR_TAGS:
        raise _err(
            obj, "not a tensor dtype", "a numeric, bool, bf16, f8 or packed type", S.TAG_NAME[tag]
        )
    return _TensorPlan(name, tag, tuple(int(d) for d in arr.shape), arr)


def _deferred(value: Any) -> bool:
    """An array-like that is not an array yet but says its dtype and shape (e.g. a tensor a
    conversion reads from its source only when it is written)."""
    return (
        not isinstance(value, np.ndarray)
        and hasattr(value, "__array__")
        and hasattr(value, "dtype")
        and hasattr(value, "shape")
    )


def _infer_tag(arr: np.ndarray, obj: str) -> int:
    tag = S.tag_of(arr.dtype)
    if tag is None:
        raise _err(
            obj,
            "cannot store this dtype",
            "a numeric, bool, bfloat16 or float8_e5m2 dtype",
            str(arr.dtype),
        )
    return tag


def _smallest_int(lo: int, hi: int) -> int:
    if lo >= 0:
        for tag in (S.U8, S.U16, S.U32):
            if hi <= int(np.iinfo(S.NUMPY_DTYPE[tag]).max):
                return tag
        return S.U64
    for tag in (S.I8, S.I16, S.I32):
        info = np.iinfo(S.NUMPY_DTYPE[tag])
        if info.min <= lo and hi <= info.max:
            return tag
    return S.I64


def _ndarray_payload(arr: np.ndarray, tag: int, obj: str) -> bytes:
    head = S.NDARRAY_HEAD.pack(tag, arr.ndim) + struct.pack(f"<{arr.ndim}Q", *arr.shape)
    body = b"".join(bytes(memoryview(c).cast("B")) for c in encode_chunks(arr, tag, obj))
    n = len(head) + len(body)
    return head + body + _PAD[: S.align8(n) - n]


def _metadata_payload(key: str, value: Any) -> tuple[int, bytes]:
    obj = f"metadata {key!r}"
    if isinstance(value, Scalar):
        tag = _resolve_tag(value.dtype, obj)
        return tag, _typed_scalar(value.value, tag, obj)
    if isinstance(value, (bool, np.bool_)):
        return S.BOOL, b"\x01" if value else b"\x00"
    if isinstance(value, str):
        if not S.NAME_RE_STR.fullmatch(value):
            raise _err(obj, "invalid STRING value", "[A-Za-z0-9._-]+", value)
        return S.STRING, _string(value)
    if isinstance(value, Bitset):
        head = S.BITSET_HEAD.pack(value.bit_count, len(value.data))
        n = 8 + len(value.data)
        return S.BITSET, head + value.data + _PAD[: S.align8(n) - n]
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if not -(1 << 63) <= v < 1 << 64:
            raise _err(obj, "integer out of range", "[-2**63, 2**64)", v)
        tag = _smallest_int(v, v)
        return tag, _typed_scalar(v, tag, obj)
    if isinstance(value, (float, np.floating)):
        return S.F32, _typed_scalar(float(value), S.F32, obj)
    if isinstance(value, Tensor):
        arr = _as_array(value.data, obj)
        tag = _resolve_tag(value.dtype, obj) if value.dtype is not None else _infer_tag(arr, obj)
        if tag not in S.NDARRAY_ELEMENT_TAGS:
            raise _err(
                obj,
                "not an NDARRAY element type",
                "a numeric, bool, bf16, f8 or packed type",
                S.TAG_NAME[tag],
            )
        return S.NDARRAY, _ndarray_payload(arr, tag, obj)
    if isinstance(value, np.ndarray):
        return S.NDARRAY, _ndarray_payload(value, _infer_tag(value, obj), obj)
    if isinstance(value, (list, tuple)):
        arr = _as_array(value, obj)
        k = arr.dtype.kind
        if k == "f":
            tag = S.F32
        elif k == "i":
            tag = _smallest_signed(
                int(arr.min()) if arr.size else 0, int(arr.max()) if arr.size else 0
            )
        elif k == "u":
            tag = _smallest_int(0, int(arr.max()) if arr.size else 0)
        else:
            tag = _infer_tag(arr, obj)
        return S.NDARRAY, _ndarray_payload(arr, tag, obj)
    raise _err(
        obj,
        "unsupported metadata value",
        "bool, int, float, str, Bitset, Scalar, list, ndarray or Tensor",
        type(value).__name__,
    )


def _smallest_signed(lo: int, hi: int) -> int:
    for tag in (S.I8, S.I16, S.I32):
        info = np.iinfo(S.NUMPY_DTYPE[tag])
        if info.min <= lo and hi <= info.max:
            return tag
    return S.I64


def _typed_scalar(value: Any, tag: int, obj: str) -> bytes:
    tname = S.TAG_NAME[tag]
    if tag == S.STRING:
        if not isinstance(value, str) or not S.NAME_RE_STR.fullmatch(value):
            raise _err(obj, "invalid STRING value", "[A-Za-z0-9._-]+", value)
        return _string(value)
    if tag == S.BITSET:
        return _metadata_payload("x", value if isinstance(value, Bitset) else Bitset(value))[1]
    if tag == S.NDARRAY:
        return _metadata_payload(
            "x", value if isinstance(value, (list, tuple, np.ndarray)) else Tensor(value)
        )[1]
    if (
        isinstance(value, (str, bytes, list, tuple, dict))
        or value is None
        or (isinstance(value, np.ndarray) and value.ndim != 0)
    ):
        raise _err(obj, f"not a {tname} scalar", "a single number", repr(value))
    if tag == S.BOOL:
        if isinstance(value, (bool, np.bool_)) or value in (0, 1):
            return b"\x01" if value else b"\x00"
        raise _err(obj, "not a bool", "True, False, 0 or 1", value)
    is_int_target = tag in S.PACKED_BITS or S.NUMPY_DTYPE[tag].kind in "iu"
    if not is_int_target:
        arr = np.asarray([float(value)], np.float64)
    else:
        if isinstance(value, (float, np.floating)):
            if not math.isfinite(value) or value != int(value):
                raise _err(obj, "not an integer", f"an integral value for {tname}", value)
        v = int(value)
        if tag in S.PACKED_BITS:
            lo, hi = S.PACKED_RANGE[tag]
        else:
            info = np.iinfo(S.NUMPY_DTYPE[tag])
            lo, hi = int(info.min), int(info.max)
        if not lo <= v <= hi or (tag == S.T1 and v == 0):
            want = "-1 or 1" if tag == S.T1 else f"[{lo}, {hi}]"
            raise _err(obj, f"value out of range for {tname}", want, v)
        arr = np.asarray([v], np.uint64 if v >= 1 << 63 else np.int64)
    return b"".join(bytes(memoryview(c).cast("B")) for c in encode_chunks(arr, tag, obj))


# -- writing --------------------------------------------------------------------------------
def write(
    path: str | os.PathLike[str],
    *,
    sizevars: Mapping[str, int] | None = None,
    metadata: Mapping[str, Any] | None = None,
    tensors: Mapping[str, Any] | None = None,
    sort: bool = True,
    fsync: bool = True,
) -> None:
    """Write an OINF version 1 file atomically.

    Parameters
    ----------
    path
        Destination; replaced only when the whole file has been written.
    sizevars
        Name -> non-negative int (< 2**64).
    metadata
        Key -> value (see the module docstring for the type of each kind of value).
    tensors
        Name -> ndarray, array-like, :class:`Tensor` or :class:`Uninitialized`.
    sort
        Sort each table by name in byte order (the default, as openinfer-oinf does). With
        ``False`` the mappings' own order is kept (openinfer-oinf sorts renamed tensors by
        their field name, so reproducing such a file needs the order given explicitly).
    fsync
        Flush the file to disk before it replaces ``path`` (the default).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "m.oinf")
    >>> write(p, sizevars={"B": 4}, metadata={"mode": "fast"},
    ...       tensors={"w": np.ones((2, 2), np.float32), "q": Tensor([1, -1, 0], "t2")})
    >>> os.path.getsize(p)
    248
    """
    sv = _sizevars(sizevars or {}, sort)
    order = sorted if sort else list
    md: list[tuple[str, int, bytes]] = []
    for key in order(metadata or {}):
        _check_name(key, "metadata")
        tag, payload = _metadata_payload(key, metadata[key])  # type: ignore[index]
        md.append((key, tag, payload))
    plans = [
        _plan_tensor(_check_name(n, "tensor"), tensors[n])  # type: ignore[index]
        for n in order(tensors or {})
    ]
    head = _tables(sv, md, plans)
    with atomic_write(path, fsync=fsync) as f:
        f.write(head)
        for _, _, payload in md:
            f.write(payload)
            f.write(_PAD[: S.align8(len(payload)) - len(payload)])
        for p in plans:
            if p.arr is not None:
                _write_tensor(f, p)


def _sizevars(sizevars: Mapping[str, int], sort: bool) -> list[tuple[str, int]]:
    sv: list[tuple[str, int]] = []
    for name, value in sizevars.items():
        _check_name(name, "sizevar")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise _err(f"sizevar {name!r}", "not an int", "int in [0, 2**64)", value)
        if not 0 <= int(value) < 1 << 64:
            raise _err(f"sizevar {name!r}", "out of range", "int in [0, 2**64)", int(value))
        sv.append((name, int(value)))
    return sorted(sv) if sort else sv


def _tables(
    sv: list[tuple[str, int]], md: list[tuple[str, int, bytes]], plans: list[_TensorPlan]
) -> bytes:
    """Header and tables, padded to where the data starts (payloads follow in table order)."""
    sv_table = b"".join(_string(n) + S.SIZEVAR_VALUE.pack(v) for n, v in sv)
    md_size = sum(S.align8(4 + len(k)) + S.METADATA_ENTRY.size for k, _, _ in md)
    t_size = sum(
        S.align8(4 + len(p.name)) + S.TENSOR_ENTRY.size + 8 * len(p.shape) + S.TENSOR_DATA.size
        for p in plans
    )
    off_sv = S.HEADER_PADDED
    off_md = S.align8(off_sv + len(sv_table))
    off_t = S.align8(off_md + md_size)
    off_data = S.align8(off_t + t_size)
    cursor = off_data
    md_parts = []
    for key, tag, payload in md:
        md_parts.append(_string(key) + S.METADATA_ENTRY.pack(tag, 0, len(payload), cursor))
        cursor += S.align8(len(payload))
    t_parts = []
    for p in plans:
        has = p.arr is not None
        t_parts.append(
            _string(p.name)
            + S.TENSOR_ENTRY.pack(p.tag, len(p.shape), S.HAS_DATA if has else 0)
            + struct.pack(f"<{len(p.shape)}Q", *p.shape)
            + S.TENSOR_DATA.pack(p.nbytes, cursor if has else 0)
        )
        if has:
            cursor += S.align8(p.nbytes)
    counts = (len(sv), len(md), len(plans))
    offsets = (off_sv, off_md, off_t, off_data, cursor)
    head = bytearray(S.HEADER.pack(S.MAGIC, S.WRITE_VERSION, 0, *counts, 0, *offsets))
    for start, part in (
        (off_sv, sv_table),
        (off_md, b"".join(md_parts)),
        (off_t, b"".join(t_parts)),
    ):
        head += bytes(start - len(head))
        head += part
    head += bytes(off_data - len(head))
    return bytes(head)


def _write_tensor(f: Any, p: _TensorPlan) -> None:
    assert p.arr is not None
    arr = p.arr
    pieces = getattr(arr, "raw_pieces", None)
    if pieces is not None:  # its bytes as they are, in blocks (a conversion's raw copy)
        written = 0
        for mv in pieces():
            f.write(mv)
            written += len(mv)
        if written != p.nbytes:  # pragma: no cover - internal consistency
            raise RuntimeError(f"oinf: tensor {p.name!r}: wrote {written}, planned {p.nbytes}")
        f.write(_PAD[: S.align8(written) - written])
        return
    if _deferred(arr):  # fetched only now, so that one source tensor is alive at a time
        arr = _as_array(arr, f"tensor {p.name!r}")
        if tuple(arr.shape) != p.shape:
            raise _err(f"tensor {p.name!r}", "shape changed", p.shape, tuple(arr.shape))
    written = 0
    for chunk in encode_chunks(arr, p.tag, f"tensor {p.name!r}"):
        mv = memoryview(chunk).cast("B")
        f.write(mv)
        written += mv.nbytes
        del mv
    if written != p.nbytes:  # pragma: no cover - internal consistency
        raise RuntimeError(f"oinf: tensor {p.name!r}: wrote {written}, planned {p.nbytes}")
    f.write(_PAD[: S.align8(written) - written])
    release(arr)  # a view of a mapped source: give its pages back

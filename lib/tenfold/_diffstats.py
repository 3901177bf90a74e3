"""The arithmetic of :func:`tenfold.diff`: one pair of arrays compared block by block.

Whatever the size of the tensors, the work is done on blocks of :data:`BLOCK` elements, so the
temporaries (float64 or complex128 copies of a block, masks) stay a few MiB; the arrays
themselves are what the readers give (views of a mapped file where they can be).

* Floating and mixed pairs are compared in float64 (complex128 when either side is complex):
  every type tenfold reads (bfloat16, the float8 and float4 types through ``ml_dtypes``,
  float16, float32, int8-32) converts to it exactly; int64 / uint64 beside a float are
  rounded to float64.
* Integer and bool pairs are compared exactly: ``|a - b|`` is computed in uint64 from the two's
  complement bits and the signs, with a carry bit for the one case past ``2**64 - 1`` (int64
  against uint64 of opposite signs), so ``-2**63`` against ``2**64 - 1`` neither overflows nor
  rounds (``max_abs`` is a Python int).
* The cosine similarity is accumulated in float64 over the elements finite on both sides, with
  the sums rescaled whenever a block holds a larger magnitude (as BLAS' ``nrm2`` does), so that
  squares of large float64 values do not overflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "BLOCK",
    "Tolerance",
    "compare_arrays",
    "is_numeric",
    "bits_equal",
    "Described",
    "describe",
    "Raw",
    "value",
    "compare",
]

#: elements per block (float64 temporaries of 2 MiB each)
BLOCK = 1 << 18

#: ``(atol, rtol)``, or None for bit identity
Tolerance = tuple[float, float] | None


def is_numeric(dt: np.dtype) -> bool:
    """Whether arrays of ``dt`` are compared by value (numbers, bool, the ``ml_dtypes`` types);
    any other dtype (bytes, strings, records) is compared by its bytes."""
    if dt.kind in "biufc":
        return True
    return dt.kind == "V" and dt.names is None and dt.subdtype is None and _to_float(dt)


def _to_float(dt: np.dtype) -> bool:
    try:
        return bool(np.can_cast(dt, np.float64))
    except TypeError:
        return False


def _unsigned(block: np.ndarray) -> np.ndarray:
    """The bits of each element as one unsigned integer (or a row of bytes)."""
    block = np.ascontiguousarray(block)
    size = block.dtype.itemsize
    if size in (1, 2, 4, 8):
        return block.view(f"<u{size}")
    return block.view(np.uint8).reshape(-1, size)


def _bits_differ(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    ne = _unsigned(x) != _unsigned(y)
    return ne if ne.ndim == 1 else ne.any(axis=1)


def bits_equal(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two arrays of one dtype and shape hold the same bytes (compared by blocks)."""
    fx, fy = x.reshape(-1), y.reshape(-1)
    return all(
        not _bits_differ(fx[lo : lo + BLOCK], fy[lo : lo + BLOCK]).any()
        for lo in range(0, fx.size, BLOCK)
    )


class _Cosine:
    """``sum(a*b) / sqrt(sum(a*a) * sum(b*b))`` over blocks, in float64 with rescaling."""

    def __init__(self) -> None:
        self.sa = self.sb = 0.0  # the scales: the largest magnitude seen on each side
        self.aa = self.bb = self.ab = 0.0

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        if not a.size:
            return
        ma, mb = float(np.abs(a).max()), float(np.abs(b).max())
        if ma > self.sa:
            f = self.sa / ma
            self.aa, self.ab, self.sa = self.aa * f * f, self.ab * f, ma
        if mb > self.sb:
            f = self.sb / mb
            self.bb, self.ab, self.sb = self.bb * f * f, self.ab * f, mb
        if self.sa == 0.0 or self.sb == 0.0:
            return  # one side is all zero so far: nothing to add to the sums that matter
        u, v = a / self.sa, b / self.sb
        self.aa += float(np.sum((u * np.conj(u)).real))
        self.bb += float(np.sum((v * np.conj(v)).real))
        self.ab += float(np.sum((u * np.conj(v)).real))

    def value(self) -> float | None:
        """The cosine, or None when either side has no nonzero finite element."""
        if self.aa <= 0.0 or self.bb <= 0.0:
            return None
        return max(-1.0, min(1.0, self.ab / math.sqrt(self.aa * self.bb)))


class _Stats:
    """What :func:`compare_arrays` accumulates over the blocks."""

    def __init__(self) -> None:
        self.bits_differ = 0
        self.mismatched = 0
        self.max_abs: Any = None
        self.max_rel: float | None = None
        self.nan = [0, 0]
        self.inf = [0, 0]
        self.cos = _Cosine()

    def extremes(self, top: Any, d: np.ndarray, den: np.ndarray) -> None:
        """Fold in a block's largest absolute difference ``top`` (exact: an int for integer
        pairs), its differences ``d`` and their denominators ``max(|a|, |b|)`` (float64)."""
        if not d.size:
            return
        self.max_abs = top if self.max_abs is None else max(self.max_abs, top)
        nz = den > 0
        rel = float((d[nz] / den[nz]).max()) if nz.any() else 0.0
        self.max_rel = rel if self.max_rel is None else max(self.max_rel, rel)


def _float_block(st: _Stats, x: np.ndarray, y: np.ndarray, tol: Tolerance, wide: type) -> Any:
    """Fold in one block compared as floating values; the mask of elements not equal (not
    within ``tol``; by value when ``tol`` is None)."""
    a: np.ndarray = x.astype(wide)
    b: np.ndarray = y.astype(wide)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    st.nan[0] += int(nan_a.sum())
    st.nan[1] += int(nan_b.sum())
    st.inf[0] += int(np.isinf(a).sum())
    st.inf[1] += int(np.isinf(b).sum())
    fin = np.isfinite(a) & np.isfinite(b)
    d = np.abs(a - b)  # float64 overflow of a difference gives inf, which is the truth
    mag_a, mag_b = np.abs(a), np.abs(b)
    df = d[fin]
    st.extremes(float(df.max()) if df.size else None, df, np.maximum(mag_a, mag_b)[fin])
    st.cos.add(a[fin], b[fin])
    atol, rtol = tol if tol is not None else (0.0, 0.0)
    close = (fin & (d <= atol + rtol * mag_b)) | (nan_a & nan_b) | (~fin & (a == b))
    return ~close


def _int_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(negative, bits as uint64)`` of an integer or bool block."""
    if x.dtype.kind == "i":
        return x < 0, x.astype(np.int64).astype(np.uint64)
    return np.zeros(x.shape, bool), x.astype(np.uint64)


def _int_block(st: _Stats, x: np.ndarray, y: np.ndarray, tol: Tolerance) -> Any:
    """Fold in one block of integers (or bools), exactly; the mask of elements not equal."""
    neg_a, ua = _int_parts(x)
    neg_b, ub = _int_parts(y)
    same_sign = neg_a == neg_b
    a_ge_b = np.where(same_sign, ua >= ub, neg_b)  # same sign: the bits order them
    d = np.where(a_ge_b, ua - ub, ub - ua)  # |a - b| modulo 2**64
    mag_a = np.where(neg_a, np.uint64(0) - ua, ua)
    mag_b = np.where(neg_b, np.uint64(0) - ub, ub)
    # |a - b| reaches 2**64 only for int64 against uint64 of opposite signs: the carry
    carry = ~same_sign & (d < np.maximum(mag_a, mag_b))
    df = d.astype(np.float64) + carry * 2.0**64
    top: int | None = None
    if carry.any():
        top = 2**64 + int(d[carry].max())
    elif d.size:
        top = int(d.max())
    st.extremes(top, df, np.maximum(mag_a, mag_b).astype(np.float64))
    st.cos.add(x.astype(np.float64), y.astype(np.float64))
    if tol is None:
        return (d != 0) | carry
    atol, rtol = tol
    return ~(df <= atol + rtol * mag_b.astype(np.float64))


def compare_arrays(x: np.ndarray, y: np.ndarray, tol: Tolerance) -> dict[str, Any]:
    """Compare two numeric arrays of one shape (see the module doc).

    Returns ``identical`` (same dtype and bytes), ``mismatched`` (elements that differ: their
    bits when the dtypes match and ``tol`` is None, their values when the dtypes differ, else
    not within ``tol`` by :func:`numpy.isclose`'s rule), ``max_abs`` (int for integer pairs),
    ``max_rel``, ``cosine`` (None where undefined), ``nan`` and ``inf`` (counts per side).

    >>> r = compare_arrays(np.array([1.0, 2.0]), np.array([1.0, 2.5]), None)
    >>> r["mismatched"], r["max_abs"], r["max_rel"]
    (1, 0.5, 0.2)
    >>> compare_arrays(np.array([-2**63]), np.array([2**64 - 1], np.uint64), None)["max_abs"]
    27670116110564327423
    """
    same = x.dtype == y.dtype
    ints = x.dtype.kind in "biu" and y.dtype.kind in "biu"
    wide = np.complex128 if "c" in (x.dtype.kind, y.dtype.kind) else np.float64
    fx, fy = x.reshape(-1), y.reshape(-1)
    st = _Stats()
    with np.errstate(all="ignore"):
        for lo in range(0, fx.size, BLOCK):
            bx, by = fx[lo : lo + BLOCK], fy[lo : lo + BLOCK]
            if ints:
                bad = _int_block(st, bx, by, tol)
            else:
                bad = _float_block(st, bx, by, tol, wide)
            if same:
                differ = _bits_differ(bx, by)
                st.bits_differ += int(differ.sum())
                if tol is None:
                    bad = differ  # without a tolerance, equal means the same bits
            st.mismatched += int(bad.sum())
    return {
        "identical": same and st.bits_differ == 0,
        "mismatched": st.mismatched,
        "max_abs": st.max_abs,
        "max_rel": st.max_rel,
        "cosine": st.cos.value(),
        "nan": tuple(st.nan),
        "inf": tuple(st.inf),
    }


# -- one pair, as the readers give it -------------------------------------------------------------


class Described(NamedTuple):
    """A tensor as its reader's ``info`` describes it: dtype (the NumPy name when the reader
    gives one, else the format's), shape and size in bytes (None when unknown)."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int | None


def describe(reader: Any, name: str) -> Described:
    info = reader.info(name)
    shape = tuple(int(d) for d in info.shape)
    npd = getattr(info, "np_dtype", None)
    if npd is not None:
        npd = np.dtype(npd)
        return Described(npd.name, shape, math.prod(shape) * npd.itemsize)
    rng = getattr(info, "byte_range", None)
    return Described(str(info.dtype), shape, None if rng is None else rng[1] - rng[0])


class Raw(NamedTuple):
    """A value compared by its bytes: ``(label, uint8 array)`` pieces."""

    pieces: list[tuple[str, np.ndarray]]


def _u8(a: Any) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.uint8) if a.size else np.zeros(0, np.uint8)


def value(reader: Any, name: str) -> np.ndarray | Raw:
    """``reader[name]`` as an array in native byte order (a sparse tensor densified), or as
    :class:`Raw` bytes: the parts of a structured object (a quantized or packed layout), raw
    bytes, or else the stored bytes (``read_raw``)."""
    v = reader[name]
    if isinstance(v, np.generic):
        v = np.asarray(v)
    if not isinstance(v, (np.ndarray, Mapping)):
        dense = getattr(v, "toarray", None) or getattr(v, "todense", None)
        if callable(dense):
            v = np.asarray(dense())
    if isinstance(v, np.ndarray):
        return v if v.dtype.isnative else v.astype(v.dtype.newbyteorder("="))
    if isinstance(v, (bytes, bytearray, memoryview)):
        return Raw([("bytes", np.frombuffer(v, np.uint8))])
    if isinstance(v, Mapping):
        parts = {k: np.asarray(p) for k, p in v.items()}
        return Raw([(f"{k} {p.dtype.str} {p.shape}", _u8(p)) for k, p in parts.items()])
    return Raw([("stored", np.asarray(reader.read_raw(name)))])


def _pieces(v: np.ndarray | Raw) -> list[tuple[str, np.ndarray]]:
    if isinstance(v, Raw):
        return v.pieces
    return [(f"array {v.dtype.str} {v.shape}", _u8(v))]


def compare(va: np.ndarray | Raw, vb: np.ndarray | Raw, tol: Tolerance) -> dict[str, Any]:
    """The fields of a :class:`tenfold.diff.TensorDiff` for one pair of values."""
    if isinstance(va, np.ndarray) and isinstance(vb, np.ndarray):
        out: dict[str, Any] = {"dtype_a": va.dtype.name, "dtype_b": vb.dtype.name}
        out |= {"shape_a": va.shape, "shape_b": vb.shape}
        if va.shape != vb.shape:
            return out
        if is_numeric(va.dtype) and is_numeric(vb.dtype):
            st = compare_arrays(va, vb, tol)
            out |= {k: st[k] for k in ("identical", "mismatched", "max_abs", "max_rel")}
            out |= {"cosine": st["cosine"], "nan_a": st["nan"][0], "nan_b": st["nan"][1]}
            out |= {"inf_a": st["inf"][0], "inf_b": st["inf"][1]}
            return out | {"kind": "numeric", "elements": int(va.size)}
        same = va.dtype == vb.dtype and bits_equal(va, vb)
        return out | {"kind": "raw", "identical": same}
    pa, pb = _pieces(va), _pieces(vb)
    same = [k for k, _ in pa] == [k for k, _ in pb] and all(
        x.size == y.size and bits_equal(x, y) for (_, x), (_, y) in zip(pa, pb, strict=True)
    )
    return {"kind": "raw", "identical": same}

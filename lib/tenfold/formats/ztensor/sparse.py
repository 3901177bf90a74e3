"""Sparse tensors: validation of CSR/COO components (read and written) and the result type.

With SciPy installed, sparse tensors are returned as ``scipy.sparse.csr_array`` /
``scipy.sparse.coo_array``. Without it (or with ``sparse="raw"``) they are returned as
:class:`SparseTensor`, a small container holding the stored components as NumPy arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...errors import EncodeError, FormatError, LimitError, UnsupportedError, describe
from ._spec import FMT, E

__all__ = ["SparseTensor", "check_csr", "check_coo", "to_result", "from_input", "write_components"]


@dataclasses.dataclass(frozen=True)
class SparseTensor:
    """A sparse tensor as stored: ``format`` is ``"csr"`` or ``"coo"``.

    CSR: ``data`` (nnz values), ``indices`` (nnz column indices, uint64), ``indptr`` (rows + 1,
    uint64). COO: ``data`` and ``coords`` (ndim x nnz, uint64).

    >>> t = SparseTensor("coo", (2, 2), np.array([5.0]), coords=np.array([[1], [0]], np.uint64))
    >>> t.todense().tolist()
    [[0.0, 0.0], [5.0, 0.0]]
    """

    format: str
    shape: tuple[int, ...]
    data: np.ndarray
    indices: np.ndarray | None = None
    indptr: np.ndarray | None = None
    coords: np.ndarray | None = None

    @property
    def nnz(self) -> int:
        return int(self.data.shape[0])

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def todense(self) -> np.ndarray:
        """The dense NumPy array (duplicates are summed, as SciPy does); LimitError when the
        machine cannot hold it."""
        try:
            out = np.zeros(self.shape, dtype=self.data.dtype)
        except (MemoryError, ValueError):
            raise LimitError(
                describe(
                    FMT,
                    "sparse tensor",
                    field="dense size",
                    detail="cannot allocate",
                    expected="memory available",
                    got=f"{list(self.shape)} x {self.data.dtype.itemsize} bytes",
                )
            ) from None
        if self.format == "csr":
            assert self.indptr is not None and self.indices is not None
            counts = np.diff(self.indptr.astype(np.int64)).astype(np.intp)
            rows = np.repeat(np.arange(self.shape[0]), counts)
            np.add.at(out, (rows, self.indices.astype(np.intp)), self.data)
        else:
            assert self.coords is not None
            np.add.at(out, tuple(self.coords.astype(np.intp)), self.data)
        return out

    def to_scipy(self) -> Any:
        """The equivalent ``scipy.sparse`` array (needs SciPy)."""
        from ...core.optional import require

        sp = require("scipy.sparse", extra="scipy", what="zt: a SciPy sparse array")
        if not scipy_holds(self.data.dtype):  # CSR would be built, then fail in toarray()
            raise ValueError(f"scipy.sparse has no {self.data.dtype} values")
        if self.format == "csr":
            assert self.indptr is not None and self.indices is not None
            return sp.csr_array(
                (self.data, self.indices.astype(np.int64), self.indptr.astype(np.int64)),
                shape=self.shape,
            )
        assert self.coords is not None
        return sp.coo_array((self.data, tuple(self.coords.astype(np.int64))), shape=self.shape)


def check_csr(
    name: str,
    offset: int,
    shape: tuple[int, ...],
    indptr: np.ndarray,
    indices: np.ndarray,
    nnz: int,
) -> None:
    """Raise FormatError unless ``indptr``/``indices`` describe a valid CSR structure."""
    what = f"tensor {name!r}"
    if indptr.shape[0] != shape[0] + 1:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="indptr length",
                expected=shape[0] + 1,
                got=indptr.shape[0],
            )
        )
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="indptr ends",
                detail="must run from 0 to nnz",
                expected=(0, nnz),
                got=(int(indptr[0]), int(indptr[-1])),
            )
        )
    if indptr.shape[0] > 1 and np.any(indptr[1:] < indptr[:-1]):
        bad = int(np.argmax(indptr[1:] < indptr[:-1]))
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="indptr",
                detail=f"decreases at row {bad}",
                expected="non-decreasing",
                got=(int(indptr[bad]), int(indptr[bad + 1])),
            )
        )
    if nnz and int(indices.max()) >= shape[1]:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="indices",
                detail="column index out of range",
                expected=f"< {shape[1]}",
                got=int(indices.max()),
            )
        )


def check_coo(name: str, offset: int, shape: tuple[int, ...], coords: np.ndarray) -> None:
    """Raise FormatError unless every coordinate lies inside ``shape``."""
    what = f"tensor {name!r}"
    if coords.shape[1] == 0:
        return
    top = coords.max(axis=1)
    for dim, (m, n) in enumerate(zip(top.tolist(), shape, strict=True)):
        if m >= n:
            raise FormatError(
                describe(
                    FMT,
                    what,
                    offset=offset,
                    field=f"coords[{dim}]",
                    detail="index out of range",
                    expected=f"< {n}",
                    got=m,
                )
            )


#: the value dtypes scipy.sparse holds (not float16, bfloat16, the float8 and float4 types)
_SCIPY_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
        np.uint64, np.float32, np.float64, np.longdouble, np.complex64, np.complex128,
        np.clongdouble,
    )
)  # fmt: skip


def scipy_holds(dtype: np.dtype) -> bool:
    """Whether a ``scipy.sparse`` array can have values of ``dtype``."""
    return np.dtype(dtype) in _SCIPY_DTYPES


def to_result(t: SparseTensor, mode: str) -> Any:
    """Return ``t`` as SciPy (``mode`` "scipy", or "auto" with SciPy installed and able to hold
    its values' dtype) or as is."""
    if mode == "raw":
        return t
    from ...core.optional import available

    if mode == "auto" and (not available("scipy.sparse") or not scipy_holds(t.data.dtype)):
        return t
    try:
        return t.to_scipy()  # with mode "scipy" and no SciPy: one line naming the extra
    except (TypeError, ValueError) as exc:  # a structure SciPy has no type for
        raise UnsupportedError(
            describe(
                FMT,
                "sparse tensor",
                detail=f"{t.format} {list(t.shape)} has no SciPy form ({exc}); read it with "
                "sparse='raw'",
            )
        ) from None


def from_input(value: Any) -> SparseTensor | None:
    """Recognise sparse input to a writer: a :class:`SparseTensor` or a SciPy sparse object."""
    if isinstance(value, SparseTensor):
        return value
    fmt = getattr(value, "format", None)
    if fmt not in ("csr", "coo") or not hasattr(value, "nnz"):
        return None
    shape = tuple(int(d) for d in value.shape)
    if fmt == "csr":
        v = value.copy()
        v.sum_duplicates()
        return SparseTensor(
            "csr",
            shape,
            np.asarray(v.data),
            indices=np.asarray(v.indices, np.uint64),
            indptr=np.asarray(v.indptr, np.uint64),
        )
    coords = getattr(value, "coords", None)
    if coords is None:
        coords = (value.row, value.col)
    return SparseTensor(
        "coo",
        shape,
        np.asarray(value.data),
        coords=np.stack([np.asarray(c, np.uint64) for c in coords])
        if len(coords)
        else np.zeros((len(shape), 0), np.uint64),
    )


def write_components(
    name: str, t: SparseTensor, data: np.ndarray
) -> tuple[list[int], int, list[tuple[str, np.ndarray]]]:
    """What a writer stores for sparse tensor ``name`` beside its values ``data``: its shape,
    ``nnz`` and its index components (``indptr`` and ``indices`` for CSR, ``coords`` for COO)
    as little-endian ``uint64``, each checked (:class:`~tenfold.errors.EncodeError`)."""
    nnz = int(data.shape[0]) if data.ndim == 1 else -1
    if data.ndim != 1:
        raise EncodeError(
            describe(FMT, f"tensor {name!r}", field="values", detail="must be 1-D", got=data.shape)
        )
    shape = [int(d) for d in t.shape]
    comps: list[tuple[str, np.ndarray]]
    if t.format == "csr":
        if len(shape) != 2 or t.indptr is None or t.indices is None:
            raise EncodeError(
                describe(
                    FMT,
                    f"tensor {name!r}",
                    field="sparse_format",
                    detail="csr needs a 2-D shape, indptr and indices",
                )
            )
        indptr = _index_array(name, "indptr", t.indptr, (shape[0] + 1,))
        indices = _index_array(name, "indices", t.indices, (nnz,))
        try:
            check_csr(name, 0, tuple(shape), indptr, indices, nnz)
        except ValueError as exc:
            raise E.recast(EncodeError, exc, f"tensor {name!r}") from None
        comps = [("indptr", indptr), ("indices", indices)]
    elif t.format == "coo":
        if t.coords is None:
            raise EncodeError(
                describe(FMT, f"tensor {name!r}", field="coords", detail="coo needs coords")
            )
        coords = _index_array(name, "coords", t.coords, (len(shape), nnz))
        try:
            check_coo(name, 0, tuple(shape), coords)
        except ValueError as exc:
            raise E.recast(EncodeError, exc, f"tensor {name!r}") from None
        comps = [("coords", coords)]
    else:
        raise EncodeError(
            describe(
                FMT,
                f"tensor {name!r}",
                field="sparse_format",
                detail="unknown",
                expected="csr | coo",
                got=t.format,
            )
        )
    return shape, nnz, comps


def _index_array(name: str, label: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(value)
    if a.shape != shape:
        raise EncodeError(
            describe(FMT, f"tensor {name!r}", field=f"{label} shape", expected=shape, got=a.shape)
        )
    if a.size and (a.dtype.kind not in "iu" or (a.dtype.kind == "i" and a.min() < 0)):
        raise EncodeError(
            describe(
                FMT,
                f"tensor {name!r}",
                field=label,
                detail="must hold non-negative integers",
                got=str(a.dtype),
            )
        )
    return np.ascontiguousarray(a, dtype="<u8")

"""One entry of a zTensor 0.1.0 CBOR index checked and made a :class:`TensorInfo`
(:func:`parse_entry`): a fast path for the common dense tensor whose every field is well
formed, else every field checked by name (types, enum values, u64 ranges, 64-byte alignment,
the blob between the magic and the index, sizes against shapes, sparse parts), naming what is
wrong."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...core.bounds import MAX_ARRAY_BYTES, Limits, checked_numel
from ...core.dtypes import numpy_dtype, registry
from ...errors import FormatError, LimitError, TruncatedError, UnsupportedError, describe
from . import _checksum
from ._info import U64, Blob, TensorInfo
from ._spec import (
    ALIGN,
    ENCODINGS,
    ENDIANNESS,
    FMT,
    KNOWN_KEYS,
    LAYOUTS,
    SPARSE_FORMATS,
)

__all__ = ["NP_DTYPES", "parse_entry"]

#: zTensor dtype name -> its NumPy dtype
NP_DTYPES = {str(name): numpy_dtype(str(name)) for name in registry.tags(FMT)}
_NP = NP_DTYPES


def _field(
    fmt_what: str,
    entry: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    offset: int,
    *,
    required: bool = True,
    default: Any = None,
) -> Any:
    if key not in entry:
        if required:
            raise FormatError(
                describe(FMT, fmt_what, offset=offset, field=key, detail="missing required field")
            )
        return default
    value = entry[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise FormatError(
            describe(
                FMT,
                fmt_what,
                offset=offset,
                field=key,
                detail="wrong type",
                expected=names,
                got=f"{type(value).__name__} {value!r}"[:80],
            )
        )
    return value


def _enum(
    what: str,
    entry: Mapping[str, Any],
    key: str,
    allowed: tuple[str, ...],
    offset: int,
    default: str | None = None,
) -> str:
    """A text field that must be one of ``allowed`` (UnsupportedError otherwise)."""
    value = _field(what, entry, key, str, offset, required=default is None, default=default)
    if value not in allowed:
        raise UnsupportedError(
            describe(
                FMT,
                what,
                offset=offset,
                field=key,
                detail="unknown",
                expected=" | ".join(allowed),
                got=value,
            )
        )
    return value  # type: ignore[no-any-return]


def _u64(what: str, entry: Mapping[str, Any], key: str, offset: int, required: bool = True) -> Any:
    v = _field(what, entry, key, int, offset, required=required)
    if v is not None and not 0 <= v <= U64:
        raise FormatError(
            describe(
                FMT, what, offset=offset, field=key, detail="out of range", expected="u64", got=v
            )
        )
    return v


def _blob(what: str, label: str, off: int, size: int, index_start: int) -> Blob:
    if off % ALIGN:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=off,
                field=f"{label} offset",
                detail="not 64-byte aligned",
                expected="multiple of 64",
                got=off,
            )
        )
    if size > 0 and off < ALIGN:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=off,
                field=f"{label} offset",
                detail="overlaps the magic",
                expected=">= 64",
                got=off,
            )
        )
    if off + size > index_start:
        raise TruncatedError(
            describe(
                FMT,
                what,
                offset=off,
                field=f"{label} blob",
                detail="runs into the index or past the end of the file",
                expected=f"end <= {index_start}",
                got=off + size,
            )
        )
    return Blob(off, size)


_FAST_KEYS = frozenset(
    {"name", "offset", "size", "dtype", "layout", "shape", "encoding", "data_endianness"}
)


#: TensorInfo's fields in order: the fast path below builds records positionally (keywords
#: and the default factories cost a third of a 256-tensor index parse); checked at import.
_POSITIONAL = ("name", "dtype", "np_dtype", "shape", "layout", "encoding", "offset", "size",
               "endianness", "checksum", "checksum_algo", "checksum_hex", "sparse_format", "nnz",
               "components", "attrs", "index_position")  # fmt: skip
if tuple(f.name for f in dataclasses.fields(TensorInfo)) != _POSITIONAL:  # pragma: no cover
    raise ImportError("tenfold.ztensor._entries: TensorInfo fields changed; update _POSITIONAL")


def parse_entry(pos: int, entry: Any, index_start: int, limits: Limits) -> TensorInfo:
    """Validate one map. The common case (a dense tensor whose every field is well formed)
    takes a fast path; anything else, valid or not, goes through :func:`_parse_entry_full`,
    which also produces the detailed error messages."""
    if type(entry) is dict and entry.keys() <= _FAST_KEYS:
        get = entry.get
        name = get("name")
        offset = get("offset")
        size = get("size")
        dtype = get("dtype")
        shape = get("shape")
        encoding = get("encoding")
        endian = get("data_endianness", "little")
        np_dtype = _NP.get(dtype) if type(dtype) is str else None
        if (
            type(name) is str
            and type(offset) is int
            and type(size) is int
            and np_dtype is not None
            and type(shape) is list
            and len(shape) <= limits.max_ndim
            and encoding in ENCODINGS
            and get("layout", "dense") == "dense"
            and endian in ENDIANNESS
            and offset >= 0
            and size >= 0
            and offset % ALIGN == 0
            and (offset >= ALIGN or size == 0)
            and offset + size <= index_start  # so both are below 2**64 too
        ):
            numel = 1
            for d in shape:
                if type(d) is not int or not 0 <= d <= U64:
                    break
                numel *= d
            else:
                nbytes = numel * np_dtype.itemsize
                # zero-size tensors take the full path: a zero dim hides the others' extent
                if (
                    0 < nbytes <= limits.max_decoded_bytes
                    and nbytes <= MAX_ARRAY_BYTES
                    and (encoding != "raw" or size == nbytes)
                ):
                    return TensorInfo(name, entry["dtype"], np_dtype, tuple(shape), "dense",
                                      encoding, offset, size, endian, None, None, None, None,
                                      None, {}, {}, pos)  # fmt: skip
    return _parse_entry_full(pos, entry, index_start, limits)


def _parse_entry_full(pos: int, entry: Any, index_start: int, limits: Limits) -> TensorInfo:
    what = f"index entry {pos}"
    _check_entry_map(what, entry, index_start)
    name = _field(what, entry, "name", str, index_start)
    what = f"tensor {name!r}"
    offset = _u64(what, entry, "offset", index_start)
    size = _u64(what, entry, "size", index_start)
    dtype_name = _field(what, entry, "dtype", str, offset)
    np_dtype = registry.to_numpy(FMT, dtype_name, what=what, offset=offset)
    shape_list = _field(what, entry, "shape", list, offset)
    numel = checked_numel(FMT, what, shape_list, limits, itemsize=np_dtype.itemsize, offset=offset)
    shape = tuple(shape_list)
    encoding = _enum(what, entry, "encoding", ENCODINGS, offset)
    layout = _enum(what, entry, "layout", LAYOUTS, offset, default="dense")
    endian = _enum(what, entry, "data_endianness", ENDIANNESS, offset, default="little")
    checksum = _field(what, entry, "checksum", str, offset, required=False)
    algo = hexd = None
    if checksum is not None:
        algo, hexd = _checksum.parse(checksum, what, offset)
    attrs = {k: v for k, v in entry.items() if k not in KNOWN_KEYS}
    _blob(what, "values" if layout != "dense" else "data", offset, size, index_start)

    itemsize = np_dtype.itemsize
    if layout != "dense" and not shape:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="shape",
                detail=f"{layout} layout needs at least one dimension",
                expected=">= 1 dims",
                got=[],
            )
        )
    sparse_format = None
    nnz = None
    components: dict[str, Blob] = {}
    if layout == "dense":
        _check_dense_entry(what, offset, size, numel * itemsize, encoding, limits)
    elif layout == "sparse":
        sparse_format, nnz, components = _sparse_entry(
            what, entry, offset, size, shape, numel, itemsize, encoding, index_start, limits
        )
    else:  # legacy single-blob sparsecsr / sparsecoo (ztensor 0.1.x)
        sparse_format, nnz = _legacy_sparse_entry(
            what, layout, offset, size, shape, numel, itemsize, encoding
        )
    return TensorInfo(
        name=name,
        dtype=dtype_name,
        np_dtype=numpy_dtype(dtype_name),
        shape=shape,
        layout=layout,
        encoding=encoding,
        offset=offset,
        size=size,
        endianness=endian,
        checksum=checksum,
        checksum_algo=algo,
        checksum_hex=hexd,
        sparse_format=sparse_format,
        nnz=nnz,
        components=components,
        attrs=attrs,
        index_position=pos,
    )


def _check_entry_map(what: str, entry: Any, index_start: int) -> None:
    """An index entry is a CBOR map with text keys."""
    if not isinstance(entry, dict):
        raise FormatError(
            describe(
                FMT,
                what,
                offset=index_start,
                detail="not a CBOR map",
                expected="map",
                got=type(entry).__name__,
            )
        )
    for k in entry:
        if not isinstance(k, str):
            raise FormatError(
                describe(
                    FMT,
                    what,
                    offset=index_start,
                    detail="non-string key",
                    expected="str",
                    got=repr(k)[:40],
                )
            )


def _check_dense_entry(
    what: str, offset: int, size: int, nbytes: int, encoding: str, limits: Limits
) -> None:
    """A dense entry's decoded size is within limits and, raw, equals its stored size."""
    if nbytes > limits.max_decoded_bytes:
        raise LimitError(
            describe(
                FMT,
                what,
                offset=offset,
                field="decoded size",
                detail="above limit",
                expected=f"<= {limits.max_decoded_bytes}",
                got=nbytes,
            )
        )
    if encoding == "raw" and size != nbytes:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="size",
                detail="does not match shape x itemsize",
                expected=nbytes,
                got=size,
            )
        )


def _sparse_entry(
    what: str,
    entry: dict[str, Any],
    offset: int,
    size: int,
    shape: tuple[int, ...],
    numel: int,
    itemsize: int,
    encoding: str,
    index_start: int,
    limits: Limits,
) -> tuple[str, int, dict[str, Blob]]:
    """A ``sparse`` entry's format, nnz and component blobs (indptr/indices or coords)."""
    components: dict[str, Blob] = {}
    sparse_format = _enum(what, entry, "sparse_format", SPARSE_FORMATS, offset)
    nnz = _u64(what, entry, "nnz", offset)
    _check_nnz(what, offset, nnz, numel)
    if encoding == "raw" and size != nnz * itemsize:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="size",
                detail="does not match nnz x itemsize",
                expected=nnz * itemsize,
                got=size,
            )
        )
    if sparse_format == "csr":
        _need_2d(what, offset, shape, "csr")
        parts = {"indptr": (shape[0] + 1) * 8, "indices": nnz * 8}
    else:
        parts = {"coords": len(shape) * nnz * 8}
    for label, want in parts.items():
        poff = _u64(what, entry, f"{label}_offset", offset)
        psize = _u64(what, entry, f"{label}_size", offset)
        if encoding == "raw" and psize != want:
            raise FormatError(
                describe(
                    FMT,
                    what,
                    offset=poff,
                    field=f"{label}_size",
                    detail="does not match the shape and nnz",
                    expected=want,
                    got=psize,
                )
            )
        if want > limits.max_decoded_bytes:
            raise LimitError(
                describe(
                    FMT,
                    what,
                    offset=poff,
                    field=f"{label} decoded size",
                    detail="above limit",
                    expected=f"<= {limits.max_decoded_bytes}",
                    got=want,
                )
            )
        components[label] = _blob(what, label, poff, psize, index_start)
    return sparse_format, nnz, components


def _legacy_sparse_entry(
    what: str,
    layout: str,
    offset: int,
    size: int,
    shape: tuple[int, ...],
    numel: int,
    itemsize: int,
    encoding: str,
) -> tuple[str, int]:
    """A ztensor 0.1.x ``sparsecsr`` / ``sparsecoo`` entry (one raw blob): format and nnz."""
    sparse_format = "csr" if layout == "sparsecsr" else "coo"
    if encoding != "raw":
        raise UnsupportedError(
            describe(
                FMT,
                what,
                offset=offset,
                field="encoding",
                detail=f"{layout} is read only with raw encoding",
                expected="raw",
                got=encoding,
            )
        )
    if sparse_format == "csr":
        _need_2d(what, offset, shape, "sparsecsr")
        head = (shape[0] + 1) * 8
        per = 8 + itemsize
        if size < head or (size - head) % per:
            raise FormatError(
                describe(
                    FMT,
                    what,
                    offset=offset,
                    field="size",
                    detail="not indptr + nnz x (8 + itemsize)",
                    expected=f"{head} + k*{per}",
                    got=size,
                )
            )
        nnz = (size - head) // per
    else:
        per = 8 * len(shape) + itemsize
        if size % per:
            raise FormatError(
                describe(
                    FMT,
                    what,
                    offset=offset,
                    field="size",
                    detail="not a multiple of the record size",
                    expected=f"k*{per}",
                    got=size,
                )
            )
        nnz = size // per
    _check_nnz(what, offset, nnz, numel)
    return sparse_format, nnz


def _check_nnz(what: str, offset: int, nnz: int, numel: int) -> None:
    if nnz > numel:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="nnz",
                detail="more than the dense size",
                expected=f"<= {numel}",
                got=nnz,
            )
        )


def _need_2d(what: str, offset: int, shape: tuple[int, ...], layout: str) -> None:
    if len(shape) != 2:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="shape",
                detail=f"{layout} needs a 2-D shape",
                expected="2 dims",
                got=list(shape),
            )
        )

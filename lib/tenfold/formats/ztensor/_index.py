"""Parse and validate the CBOR index of a zTensor 0.1.0 file into :class:`TensorInfo` records.

Every field of every map is checked here, once, at open: types, enum values, alignment, that
each blob lies between the magic and the index, that blobs do not overlap, that sizes agree with
shapes. Readers then trust the records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ... import _kernels
from ...core import cbor
from ...core.bounds import DEFAULT_LIMITS, MAX_ARRAY_BYTES, Limits, checked_numel, truncated
from ...core.dtypes import numpy_dtype, registry
from ...errors import FormatError, LimitError, TruncatedError, UnsupportedError, describe
from . import _checksum
from ._spec import (
    ALIGN,
    ENCODINGS,
    ENDIANNESS,
    FMT,
    KNOWN_KEYS,
    LAYOUTS,
    MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    SPARSE_FORMATS,
)

__all__ = [
    "TensorInfo",
    "Blob",
    "InfoTable",
    "parse_file_layout",
    "parse_index",
    "parse_index_full",
    "parse_index_table",
]

U64 = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class Blob:
    """One stored byte range: where it is and how many bytes it has on disk."""

    offset: int
    size: int


@dataclasses.dataclass(slots=True)
class TensorInfo:
    """Everything the index says about one tensor.

    ``dtype`` is the zTensor name (``"bfloat16"``); ``np_dtype`` the little-endian NumPy dtype of
    the decoded tensor. For sparse tensors ``offset``/``size`` describe the values blob and
    ``components`` the index blobs (``indptr``/``indices`` or ``coords``).
    """

    name: str
    dtype: str
    np_dtype: np.dtype
    shape: tuple[int, ...]
    layout: str
    encoding: str
    offset: int
    size: int
    endianness: str
    checksum: str | None
    checksum_algo: str | None
    checksum_hex: str | None
    sparse_format: str | None = None
    nnz: int | None = None
    components: Mapping[str, Blob] = dataclasses.field(default_factory=dict)
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    index_position: int = 0

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the decoded dense tensor (or, for sparse, of the values)."""
        count = self.nnz if self.nnz is not None else self.numel
        return count * self.np_dtype.itemsize

    @property
    def zero_copy(self) -> bool:
        """True when reading gives a view of the file (dense, raw, little-endian)."""
        return (
            self.layout == "dense"
            and self.encoding == "raw"
            and (self.endianness == "little" or self.np_dtype.itemsize == 1)
        )

    # -- the fields every format's info record has (see tenfold.core.reader.TensorInfo) --------
    @property
    def byte_range(self) -> tuple[int, int]:
        """``(start, end)`` of the (values) blob in the file."""
        return (self.offset, self.offset + self.size)

    @property
    def extras(self) -> dict[str, Any]:
        """The zTensor-specific fields: layout, endianness, sparse parts, custom keys."""
        d = self.as_dict()
        for k in ("name", "dtype", "shape", "encoding", "checksum"):
            d.pop(k)
        return d

    def as_dict(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "dtype": self.dtype,
            "shape": self.shape,
            "layout": self.layout,
            "encoding": self.encoding,
            "offset": self.offset,
            "size": self.size,
            "data_endianness": self.endianness,
            "checksum": self.checksum,
        }
        if self.sparse_format is not None:
            d["sparse_format"] = self.sparse_format
            d["nnz"] = self.nnz
            d.update({k: (b.offset, b.size) for k, b in self.components.items()})
        d["attrs"] = dict(self.attrs)
        return d


def parse_file_layout(head: bytes, size: int, footer: int | None) -> tuple[int, int]:
    """Check magic and footer; return ``(index_start, index_size)``.

    ``head`` is the first 8 bytes (fewer if the file is shorter), ``footer`` the u64 of the
    last 8 (None when the file is shorter than 16 bytes).
    """
    if head != MAGIC:
        if head in (MAGIC_V1, MAGIC_V2):
            version = "v1 (ZTEN1000)" if head == MAGIC_V1 else "v2"
            raise UnsupportedError(
                describe(
                    FMT,
                    "file",
                    offset=0,
                    field="magic",
                    detail=f"zTensor {version} file; this is the 0.1.0 reader, "
                    "tenfold.ztensor.open reads every generation",
                    expected=MAGIC,
                    got=head,
                )
            )
        if len(head) < len(MAGIC) and MAGIC.startswith(head):
            raise TruncatedError(
                describe(
                    FMT,
                    "file",
                    offset=0,
                    detail="shorter than the magic",
                    expected=">= 16 bytes",
                    got=size,
                )
            )
        raise FormatError(describe(FMT, "file", offset=0, field="magic", expected=MAGIC, got=head))
    if footer is None:
        raise TruncatedError(
            describe(
                FMT,
                "file",
                offset=size,
                detail="no room for the index size",
                expected=">= 16 bytes",
                got=size,
            )
        )
    if footer == 0:
        if size == 16:
            return 8, 0
        raise FormatError(
            describe(
                FMT,
                "index",
                offset=size - 8,
                field="index size",
                detail="zero in a file with data",
                expected=">= 1",
                got=0,
            )
        )
    room = size - 16
    if footer > room:  # the cause, not the symptom: the file ends before its footer says
        raise truncated(FMT, size, footer + 16, "footer", obj="index size", offset=size - 8)
    return size - 8 - footer, footer


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


def parse_index(raw: object, index_start: int, limits: Limits = DEFAULT_LIMITS) -> list[TensorInfo]:
    """Decode and validate the CBOR index (``raw`` is its bytes, at ``index_start``).

    The common case (every entry a well-formed dense tensor) is parsed straight from the bytes
    by the ``zt01idx`` kernel, which declines anything else: then :func:`parse_index_full`
    decodes the index and checks it entry by entry, naming what is wrong. Both give the same
    records for every index the kernel accepts (tests/ztensor/test_ztensor_index_kernel.py)."""
    got = _parse_dense(raw, index_start, limits, TensorInfo)
    if got is not None:
        infos, ordered = got
        if not ordered:
            _check_overlaps(infos)
        return infos
    return parse_index_full(raw, index_start, limits)


def _parse_dense(
    raw: object, index_start: int, limits: Limits, make: Any
) -> tuple[list[Any], bool] | None:
    """The ``zt01idx`` kernel's ``(records, ordered)`` of the index, or None where it
    declines (or is not compiled, or the index is over the limit or not contiguous)."""
    mv = memoryview(raw)  # type: ignore[arg-type]
    kernel = _kernel()
    if not (kernel and mv.nbytes <= limits.max_index_bytes and mv.c_contiguous):
        return None
    return kernel.parse_dense(  # type: ignore[no-any-return]
        mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv,
        index_start,
        limits.max_objects,
        limits.max_ndim,
        max(0, min(limits.max_decoded_bytes, MAX_ARRAY_BYTES)),
        _DTYPES,
        make,
    )


def _from_compact(r: tuple[Any, ...]) -> TensorInfo:
    """The record of a compact kernel record ``(name, dtype, np_dtype, shape, encoding,
    offset, size, endianness, position)`` (a dense entry with no checksum or custom key)."""
    name, dtype, np_dtype, shape, encoding, offset, size, endianness, pos = r
    return TensorInfo(name, dtype, np_dtype, shape, "dense", encoding, offset, size, endianness,
                      None, None, None, None, None, {}, {}, pos)  # fmt: skip


class InfoTable(Mapping[str, TensorInfo]):
    """name -> :class:`TensorInfo` of one index, in index order. Entries the ``zt01idx``
    kernel parsed are kept as its compact tuples and made into records when first asked for
    (:func:`_from_compact`), so opening a file of many tensors builds none it does not use.
    ``plain``: every entry came from the kernel (dense, no custom keys: no ``attrs``
    anywhere)."""

    __slots__ = ("_items", "plain")

    def __init__(self, items: dict[str, Any], plain: bool) -> None:
        self._items = items
        self.plain = plain

    def __getitem__(self, name: str) -> TensorInfo:
        v = self._items[name]
        if type(v) is tuple:
            v = self._items[name] = _from_compact(v)
        return v  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def compact(self, name: str) -> tuple[Any, ...] | None:
        """The kernel's compact record of ``name`` while no :class:`TensorInfo` has been built
        for it (None after, or for an entry of the full parse); KeyError for no such name."""
        v = self._items[name]
        return v if type(v) is tuple else None

    def compact_span(self, name: str) -> tuple[bool, tuple[int, np.dtype, tuple[int, ...]] | None]:
        """Where ``name``'s bytes can be viewed as they are, read from its compact record:
        ``(True, (offset, np_dtype, shape))`` when it is raw and little-endian (or one byte
        wide; a compact record has no checksum), ``(True, None)`` when it is not, and
        ``(False, None)`` when its :class:`TensorInfo` is built (ask that instead)."""
        v = self._items[name]
        if type(v) is not tuple:
            return False, None
        _, _, np_dtype, shape, encoding, offset, _, endianness, _ = v
        if encoding == "raw" and (endianness == "little" or np_dtype.itemsize == 1):
            return True, (offset, np_dtype, shape)
        return True, None


def parse_index_table(raw: object, index_start: int, limits: Limits = DEFAULT_LIMITS) -> InfoTable:
    """:func:`parse_index` as an :class:`InfoTable` (the same checks, the same records, the
    same errors), its records built on first use where the kernel parsed the index."""
    got = _parse_dense(raw, index_start, limits, None)
    if got is None:
        return InfoTable({i.name: i for i in parse_index_full(raw, index_start, limits)}, False)
    recs, ordered = got
    if ordered:
        return InfoTable({r[0]: r for r in recs}, True)
    infos = [_from_compact(r) for r in recs]
    _check_overlaps(infos)
    return InfoTable({i.name: i for i in infos}, True)


def parse_index_full(
    raw: object, index_start: int, limits: Limits = DEFAULT_LIMITS
) -> list[TensorInfo]:
    """:func:`parse_index` without the kernel: decode the CBOR, then check every entry."""
    obj = cbor.decode(raw, fmt=FMT, what="index", offset=index_start, limit=limits.max_index_bytes)
    if not isinstance(obj, list):
        raise FormatError(
            describe(
                FMT,
                "index",
                offset=index_start,
                detail="not a CBOR array",
                expected="array",
                got=type(obj).__name__,
            )
        )
    if len(obj) > limits.max_objects:
        raise LimitError(
            describe(
                FMT,
                "index",
                offset=index_start,
                field="tensor count",
                detail="above limit",
                expected=f"<= {limits.max_objects}",
                got=len(obj),
            )
        )
    infos: list[TensorInfo] = []
    seen: set[str] = set()
    for pos, entry in enumerate(obj):
        info = _parse_entry(pos, entry, index_start, limits)
        if info.name in seen:
            raise FormatError(
                describe(
                    FMT,
                    f"tensor {info.name!r}",
                    offset=index_start,
                    field="name",
                    detail="duplicate name",
                )
            )
        seen.add(info.name)
        infos.append(info)
    _check_overlaps(infos)
    return infos


_NP = {str(name): numpy_dtype(str(name)) for name in registry.tags(FMT)}
#: dtype name -> (the name, its NumPy dtype), for the kernel
_DTYPES = {name: (name, dt) for name, dt in _NP.items()}
_KERNEL: Any = None


def _kernel() -> Any:
    """The compiled ``zt01idx`` kernel, or False: its pure-Python twin is several times slower
    than cbor2 plus the checks below, so without the compiled kernel (or with
    ``TENFOLD_PUREPYTHON=1``) the full parse runs; tests set ``_KERNEL`` to either twin."""
    global _KERNEL
    if _KERNEL is None:
        mod = _kernels.load("zt01idx")
        _KERNEL = False if mod.__name__.rpartition(".")[2].startswith("_ref_") else mod
    return _KERNEL


_FAST_KEYS = frozenset(
    {"name", "offset", "size", "dtype", "layout", "shape", "encoding", "data_endianness"}
)


#: TensorInfo's fields in order: the fast path below builds records positionally (keywords
#: and the default factories cost a third of a 256-tensor index parse); checked at import.
_POSITIONAL = ("name", "dtype", "np_dtype", "shape", "layout", "encoding", "offset", "size",
               "endianness", "checksum", "checksum_algo", "checksum_hex", "sparse_format", "nnz",
               "components", "attrs", "index_position")  # fmt: skip
if tuple(f.name for f in dataclasses.fields(TensorInfo)) != _POSITIONAL:  # pragma: no cover
    raise ImportError("tenfold.ztensor._index: TensorInfo fields changed; update _POSITIONAL")


def _parse_entry(pos: int, entry: Any, index_start: int, limits: Limits) -> TensorInfo:
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


def _check_overlaps(infos: list[TensorInfo]) -> None:
    spans = []
    for info in infos:
        if info.size:
            spans.append((info.offset, info.offset + info.size, info.name, "data"))
        for label, b in info.components.items():
            if b.size:
                spans.append((b.offset, b.offset + b.size, info.name, label))
    spans.sort()
    for (_s0, e0, n0, l0), (s1, _e1, n1, l1) in zip(spans, spans[1:], strict=False):
        if s1 < e0:
            raise FormatError(
                describe(
                    FMT,
                    f"tensor {n1!r}",
                    offset=s1,
                    field=f"{l1} blob",
                    detail=f"overlaps the {l0} blob of tensor {n0!r}",
                    expected=f"start >= {e0}",
                    got=s1,
                )
            )

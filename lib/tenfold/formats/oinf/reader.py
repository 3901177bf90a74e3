"""Lazy OINF reader over a read-only memory map.

Opening parses and validates the header and the three tables only; tensor payloads are read
when asked for. Byte-aligned tensors are zero-copy read-only views of the mapping; packed
tensors are unpacked by the ``bitpack`` kernel (or returned as raw bytes with ``packed=True``).

Tensors declared without data (HAS_DATA=0) are listed by :attr:`OinfReader.uninitialized` and
described by :meth:`OinfReader.info`, but they are not keys of :attr:`OinfReader.tensors`:
``reader[name]`` raises a :class:`KeyError` that says the tensor has no data. No data is ever
made up for them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from ... import _kernels
from ...core.alloc import copy as alloc_copy
from ...core.alloc import empty
from ...core.bounds import DEFAULT_LIMITS, Budget, Limits, check_limit
from ...core.mapped import MappedFile
from ...core.reader import MappedReader, Span
from ...errors import FormatError
from . import _spec as S
from ._metadata import parse_ndarray_header
from ._parse import Tables, fail
from ._tables import parse_tables
from ._tensors import parse_quant

__all__ = ["OinfReader", "TensorInfo", "MetadataInfo", "QuantParams", "Bitset"]


class Bitset:
    """A BITSET value: ``bit_count`` bits, LSB-first in ``data``.

    >>> b = Bitset([1, 0, 1])
    >>> len(b), b.data, b.to_numpy().tolist()
    (3, b'\\x05', [True, False, True])
    """

    __slots__ = ("bit_count", "data")

    def __init__(
        self, bits: Any = (), *, bit_count: int | None = None, data: bytes | None = None
    ) -> None:
        if data is not None:
            self.data = bytes(data)
            self.bit_count = len(self.data) * 8 if bit_count is None else int(bit_count)
            return
        arr = np.asarray(list(bits) if not isinstance(bits, np.ndarray) else bits)
        flat = (arr.reshape(-1) != 0).astype(np.uint8)
        out = np.zeros((flat.size + 7) // 8, np.uint8)
        _kernels.load("bitpack").pack_bitset(flat, out)
        self.bit_count = int(flat.size)
        self.data = out.tobytes()

    def to_numpy(self) -> np.ndarray:
        """The bits as a bool array."""
        out = np.empty(self.bit_count, np.uint8)
        _kernels.load("bitpack").unpack_bitset(self.data, out)
        return out.view(np.bool_)

    def __len__(self) -> int:
        return self.bit_count

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bitset):
            return NotImplemented
        return (
            self.bit_count == other.bit_count
            and self.to_numpy().tolist() == other.to_numpy().tolist()
        )

    def __hash__(self) -> int:
        return hash((self.bit_count, self.data))

    def __repr__(self) -> str:
        return f"Bitset(bit_count={self.bit_count}, data={self.data.hex()!r})"


class QuantParams(NamedTuple):
    """Version 2 quantization parameters of a tensor."""

    scheme: int  #: 1 symmetric, 2 asymmetric
    scale_mode: int  #: 1 per-tensor, 2 per-channel
    zp_mode: int  #: 0 none, 1 per-tensor, 2 per-channel
    scale_axis: int
    zp_axis: int
    scales: np.ndarray  #: float32, read-only
    zero_points: np.ndarray  #: int32, read-only
    offset: int
    nbytes: int


class TensorInfo(NamedTuple):
    """What the tensor table says about one tensor."""

    name: str
    dtype: str  #: OINF type name ("f32", "i4", "bf16", ...)
    tag: int  #: OINF ValueType tag
    shape: tuple[int, ...]
    has_data: bool
    data_offset: int
    data_nbytes: int
    flags: int
    entry_offset: int
    quant: QuantParams | None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def packed(self) -> bool:
        return self.tag in S.PACKED_BITS

    # -- the fields every format's info record has (see tenfold.core.reader.TensorInfo) --------
    @property
    def byte_range(self) -> tuple[int, int] | None:
        """``(start, end)`` of the payload in the file (``None`` without data)."""
        return (self.data_offset, self.data_offset + self.data_nbytes) if self.has_data else None

    @property
    def encoding(self) -> str:
        return "bitpacked" if self.packed else "raw"

    @property
    def checksum(self) -> None:
        """OINF stores no per-tensor checksum."""
        return None

    @property
    def extras(self) -> dict[str, Any]:
        """The OINF-specific fields (tag, has_data, flags, entry offset, quantization)."""
        return {
            "tag": self.tag,
            "has_data": self.has_data,
            "flags": self.flags,
            "entry_offset": self.entry_offset,
            "quant": self.quant,
        }

    @property
    def np_dtype(self) -> np.dtype:
        """The dtype of the array ``reader[name]`` returns (:mod:`tenfold.core.reader`)."""
        return self.numpy_dtype

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype of the array ``reader[name]`` returns."""
        if self.tag in S.PACKED_BITS:
            return S.UNPACKED_DTYPE[self.tag]
        if self.tag == S.BITSET:
            return np.dtype("u1")
        return S.NUMPY_DTYPE[self.tag]


class MetadataInfo(NamedTuple):
    """What the metadata table says about one entry."""

    key: str
    dtype: str  #: OINF type name ("u32", "str", "bitset", "ndarray", ...)
    tag: int
    value_nbytes: int
    value_offset: int
    entry_offset: int


class OinfReader(MappedReader, Mapping[str, np.ndarray]):
    """An open OINF file: a ``Mapping`` of the tensors that have data, read lazily.

    A context manager that owns its :class:`MappedFile` (see :mod:`tenfold.core.reader`).

    Parameters
    ----------
    source
        Path or buffer.
    limits
        Bounds on table size, counts, rank and decoded sizes.
    mmap
        ``False`` reads a local file with ``pread`` into owned memory instead of mapping it
        (an fsspec URL or file is read in range requests: :mod:`tenfold.core.source`).
    """

    def __init__(self, source: Any, *, limits: Limits = DEFAULT_LIMITS, mmap: bool = True) -> None:
        self.limits = limits
        self._t: Tables = self._map_and_parse(
            source, lambda mf: parse_tables(mf, limits), S.FMT, mmap=mmap
        )
        t = self._t
        self.version: int = t.header.version
        self._index = {e[0]: i for i, e in enumerate(t.tensors)}
        self._with_data = dict.fromkeys(e[0] for e in t.tensors if e[3] & S.HAS_DATA)
        self._meta_index = {e[0]: i for i, e in enumerate(t.metadata)}
        self._metadata: dict[str, Any] | None = None

    # -- tables ----------------------------------------------------------------------------
    @property
    def tables(self) -> Tables:
        """Everything the file's tables say, as parsed (a ``Tables``: entries are
        tuples, as the verifier walks them)."""
        return self._t

    def metadata_value(self, entry: tuple) -> Any:
        """The decoded value of metadata entry ``entry`` (one of ``tables.metadata``)."""
        return self._meta_value(entry)

    @property
    def header(self) -> Any:
        return self._t.header

    @property
    def sizevars(self) -> dict[str, int]:
        """Size variables, in file order."""
        return {n: v for n, v, _ in self._t.sizevars}

    @property
    def names(self) -> list[str]:
        """Every tensor name in file order (with or without data)."""
        return [e[0] for e in self._t.tensors]

    @property
    def uninitialized(self) -> list[str]:
        """Names of tensors declared without data (HAS_DATA=0)."""
        return [e[0] for e in self._t.tensors if not e[3] & S.HAS_DATA]

    def info(self, name: str) -> TensorInfo:
        """Table entry of tensor ``name`` (also for tensors without data)."""
        try:
            e = self._t.tensors[self._index[name]]
        except KeyError:
            raise KeyError(f"oinf: no tensor {name!r}") from None
        tname, tag, shape, flags, nbytes, off, entry, qn, qo = e
        quant = None
        if self.version == 2 and flags & S.HAS_QUANT:
            fnb = entry + S.align8(4 + len(tname)) + 12 + 8 * len(shape)
            q = parse_quant(self._mf, f"tensor {tname!r}", shape, qo, qn, fnb + 16)
            scales = self._mf.array(qo + 48, "<f4", (q[5],), f"tensor {tname!r} scales")
            zps = self._mf.array(qo + 48 + 4 * q[5], "<i4", (q[7],), f"tensor {tname!r} zps")
            quant = QuantParams(q[0], q[1], q[2], q[4], q[6], scales, zps, qo, qn)
        return TensorInfo(
            tname,
            S.TAG_NAME[tag],
            tag,
            shape,
            bool(flags & S.HAS_DATA),
            off,
            nbytes,
            flags,
            entry,
            quant,
        )

    def infos(self) -> list[TensorInfo]:
        return [self.info(e[0]) for e in self._t.tensors]

    def span(self, name: str) -> Span | None:
        """Where tensor ``name`` lies raw in the file (:mod:`tenfold.core.reader`): a
        byte-aligned type with data and no quantization parameters, whose bytes need no check
        (not ``bool``, whose bytes a read checks are 0 or 1), else None."""
        try:
            e = self._t.tensors[self._index[name]]
        except KeyError:
            raise KeyError(f"oinf: no tensor {name!r}") from None
        _tname, tag, shape, flags, nbytes, off, *_ = e
        dt = S.NUMPY_DTYPE.get(tag)
        quant = self.version == 2 and flags & S.HAS_QUANT
        if dt is None or tag == S.BOOL or not flags & S.HAS_DATA or quant:
            return None
        return Span(off, dt, tuple(shape)) if nbytes == dt.itemsize * math.prod(shape) else None

    # -- tensors ---------------------------------------------------------------------------
    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensor(name)

    def _keys(self) -> Mapping[str, None]:
        return self._with_data

    @property
    def tensors(self) -> Mapping[str, np.ndarray]:
        """The tensors that have data: the reader itself (a ``Mapping`` of them)."""
        return self

    def read(
        self, name: str, index: Any = None, *, packed: bool = False, copy: bool = False
    ) -> np.ndarray:
        """The data of tensor ``name`` (the common name of :meth:`tensor`), or its basic slice
        ``index``: of a byte-aligned type only the rows the slice touches are read; a packed
        type is unpacked whole, then sliced."""
        if index is None or packed:
            return self.tensor(name, packed=packed, copy=copy)
        return self._read_index(name, index, copy)

    def _read_index(self, name: str, index: Any, copy: bool) -> np.ndarray:
        from ...core.slicing import plan

        try:
            e = self._t.tensors[self._index[name]]
        except KeyError:
            raise KeyError(f"oinf: no tensor {name!r}") from None
        tname, tag, shape, flags, nbytes, off, *_ = e
        obj = f"tensor {tname!r}"
        pl = plan(S.FMT, obj, tuple(shape), index)
        dt = S.NUMPY_DTYPE.get(tag) if flags & S.HAS_DATA and tag != S.BOOL else None
        if dt is None or not shape or nbytes != dt.itemsize * math.prod(shape):
            return pl.apply(self.tensor(name, copy=copy))
        row = dt.itemsize * math.prod(shape[1:])
        rows = self._mf.array(off + pl.lo * row, dt, (pl.hi - pl.lo, *shape[1:]), obj)
        result = pl.finish(rows)
        return np.array(result) if copy or not isinstance(result, np.ndarray) else result

    # verify(): every OINF rule on this file, oinf._verify.verify_reader, joined in the package
    # __init__ (MappedReader.use_verifier)

    def tensor(
        self, name: str, *, packed: bool = False, copy: bool = False, budget: Budget | None = None
    ) -> np.ndarray:
        """The data of tensor ``name``.

        Byte-aligned types are read-only zero-copy views (``copy=True`` gives an owned copy).
        Packed types are unpacked to int8 (i4 i2 i1 t2 t1) or uint8 (u4 u2 u1); with
        ``packed=True`` the raw payload bytes are returned instead (a read-only uint8 view).
        A tensor without data raises :class:`KeyError`. What the call allocates is charged to
        ``budget`` (default: a fresh one from ``limits``, see ``Limits.decode_budget``).
        """
        if budget is None:
            budget = self.limits.budget()
        try:
            e = self._t.tensors[self._index[name]]
        except KeyError:
            raise KeyError(f"oinf: no tensor {name!r}") from None
        tname, tag, shape, flags, nbytes, off, *_ = e
        if not flags & S.HAS_DATA:
            raise KeyError(
                f"oinf: tensor {name!r} is declared without data (HAS_DATA=0); "
                f"info({name!r}) describes it"
            )
        obj = f"tensor {tname!r}"
        if packed:
            out = self._mf.u8(off, nbytes, obj)
            return alloc_copy(out, fmt=S.FMT, what=obj, offset=off, budget=budget) if copy else out
        arr = decode_payload(self._mf, obj, tag, shape, off, nbytes, self.limits, budget)
        if copy and not arr.flags.owndata:
            return alloc_copy(arr, fmt=S.FMT, what=obj, offset=off, budget=budget)
        return arr

    def load(self, copy: bool = False) -> dict[str, np.ndarray]:
        """Every tensor that has data, by name."""
        budget = self.limits.budget()  # one for the whole call
        return {n: self.tensor(n, copy=copy, budget=budget) for n in self._with_data}

    # -- metadata --------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        """Metadata values: int / float / bool / str, :class:`Bitset` or a read-only ndarray."""
        if self._metadata is None:
            budget = self.limits.budget()  # one for every value
            self._metadata = {e[0]: self._meta_value(e, budget) for e in self._t.metadata}
        return self._metadata

    def metadata_info(self, key: str) -> MetadataInfo:
        try:
            e = self._t.metadata[self._meta_index[key]]
        except KeyError:
            raise KeyError(f"oinf: no metadata {key!r}") from None
        return MetadataInfo(e[0], S.TAG_NAME[e[1]], e[1], e[3], e[4], e[5])

    def _meta_value(self, e: tuple, budget: Budget | None = None) -> Any:
        key, tag, _flags, nbytes, off, _entry = e
        mf = self._mf
        obj = f"metadata {key!r}"
        if tag == S.STRING:
            (n,) = S.STRING_LEN.unpack(mf.bytes(off, S.STRING_LEN.size, obj))
            return mf.bytes(off + 4, n, obj).decode("ascii")
        if tag == S.BITSET:
            bit_count, byte_count = S.BITSET_HEAD.unpack(mf.bytes(off, S.BITSET_HEAD.size, obj))
            return Bitset(bit_count=bit_count, data=mf.bytes(off + 8, byte_count, obj))
        if tag == S.NDARRAY:
            etag, shape, doff, dnb = parse_ndarray_header(mf, obj, off, nbytes, off, self.limits)
            return decode_payload(mf, obj, etag, shape, doff, dnb, self.limits, budget)
        arr = decode_payload(mf, obj, tag, (), off, nbytes, self.limits)
        value = arr.item()
        if tag in (S.BF16, S.F8, S.F16, S.F32, S.F64):
            return float(value)
        return value


def decode_payload(
    mf: MappedFile,
    obj: str,
    tag: int,
    shape: tuple[int, ...],
    off: int,
    nbytes: int,
    limits: Limits,
    budget: Budget | None = None,
) -> np.ndarray:
    """Array of ``shape`` from a payload of element type ``tag`` (views when byte-aligned)."""
    if tag in S.NUMPY_DTYPE:
        dt = S.NUMPY_DTYPE[tag]
        if tag == S.BOOL:
            raw = mf.u8(off, nbytes, obj)
            if nbytes and int(raw.max()) > 1:
                bad = int(np.flatnonzero(raw > 1)[0])
                fail(
                    FormatError,
                    "bool-value",
                    obj,
                    off + bad,
                    "BOOL byte is not 0 or 1",
                    "0 or 1",
                    int(raw[bad]),
                )
        return _readonly(mf.array(off, dt, shape, obj))
    if tag == S.BITSET:
        return _readonly(mf.array(off, "u1", shape, obj))
    bits = S.PACKED_BITS[tag]
    numel = math.prod(shape)
    check_limit(
        S.FMT,
        obj,
        numel,
        limits.max_decoded_bytes,
        field="numel",
        offset=off,
        detail="unpacked size above the limit",
    )
    src = mf.u8(off, nbytes, obj)
    k = _kernels.load("bitpack")
    out = empty(
        numel,
        S.UNPACKED_DTYPE[tag],
        fmt=S.FMT,
        what=obj,
        offset=off,
        budget=limits.budget() if budget is None else budget,
    )
    if tag == S.T2:
        bad = k.find_code(src, 2, numel, 2)
        if bad >= 0:
            fail(
                FormatError,
                "t2-code",
                obj,
                off + bad // 4,
                f"element {bad} has the invalid ternary code 0b10",
                "0b00, 0b01 or 0b11",
                "0b10",
            )
    if tag == S.T1:
        k.unpack_pm1(src, out)
    elif tag in (S.U4, S.U2, S.U1):
        k.unpack_uint(src, bits, out)
    else:
        k.unpack_int(src, bits, out)
    return out.reshape(shape)


def _readonly(arr: np.ndarray) -> np.ndarray:
    if arr.flags.writeable:  # an empty array is a fresh one: keep the read-only contract
        arr.flags.writeable = False
    return arr

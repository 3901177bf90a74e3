"""Parse and validate the OINF header and tables (payloads are not touched, except the few
header bytes of STRING / BITSET / NDARRAY metadata and v2 quantization blocks).

Every failure raises a :mod:`tenfold.errors` exception whose message names the object, the
offset, the rule (in brackets) and the expected and actual values; the exception also carries
``rule``, ``obj`` and ``offset`` attributes that the verifier reports.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import struct
from typing import NoReturn

import numpy as np

from ... import _kernels
from ...core.bounds import DEFAULT_LIMITS, Limits, checked_numel
from ...core.mapped import MappedFile
from ...core.records import Record
from ...errors import (
    FormatError,
    LimitError,
    TenfoldError,
    TruncatedError,
    UnsupportedError,
)
from . import _spec as S

# The records of _spec as structs (bound once: these run per table entry).
_U32 = S.STRING_LEN.struct
_U64 = S.SIZEVAR_VALUE.struct
_III = S.TENSOR_ENTRY.struct
_IIQQ = S.METADATA_ENTRY.struct
_QQ = S.TENSOR_DATA.struct
_QQQQ = S.TENSOR_DATA_V2.struct
_NDARRAY = S.NDARRAY_HEAD.struct
_HEADER = S.HEADER.struct
_QUANT = S.QUANT.struct
_H = S.HEADER.offset
_TE = S.TENSOR_ENTRY
_ME = S.METADATA_ENTRY
_TD = S.TENSOR_DATA_V2
_Q = S.QUANT.offset
_DIMS: dict[int, struct.Struct] = {}
_TENSOR_TAGS = S.TENSOR_TAGS
_EIGHTHS = np.zeros(max(S.TAG_NAME) + 1, np.float64)
for _t in S.NUMPY_DTYPE:
    _EIGHTHS[_t] = 8 * S.NUMPY_DTYPE[_t].itemsize
for _t, _b in S.PACKED_BITS.items():
    _EIGHTHS[_t] = _b
_EIGHTHS[S.BITSET] = 8
_NAMES_RE = re.compile(rb"[A-Za-z0-9._-]+(?:\n[A-Za-z0-9._-]+)*")


def fail(
    cls: type[TenfoldError],
    rule: str,
    obj: str,
    offset: int | None,
    detail: str,
    expected: object = None,
    got: object = None,
) -> NoReturn:
    """Raise ``cls`` with tenfold's message form ending in ``[rule]`` (and those attributes)."""
    raise S.E(cls, obj, offset=offset, detail=detail, expected=expected, got=got, rule=rule)


@dataclasses.dataclass(frozen=True)
class Header:
    version: int
    flags: int
    n_sizevars: int
    n_metadata: int
    n_tensors: int
    reserved: int
    offset_sizevars: int
    offset_metadata: int
    offset_tensors: int
    offset_data: int
    file_size: int


@dataclasses.dataclass
class Tables:
    """Everything the tables say; entries are tuples to keep opening cheap.

    sizevars: (name, value, entry_offset)
    metadata: (key, tag, flags, nbytes, offset, entry_offset)
    tensors:  (name, tag, shape, flags, nbytes, offset, entry_offset, qnbytes, qoffset)
    ``ends`` holds where each table's last entry ends (for padding checks).
    """

    header: Header
    sizevars: list[tuple[str, int, int]]
    metadata: list[tuple[str, int, int, int, int, int]]
    tensors: list[tuple[str, int, tuple[int, ...], int, int, int, int, int, int]]
    ends: tuple[int, int, int]


def parse_header(mf: MappedFile) -> Header:
    size = mf.size
    if size < S.HEADER_SIZE:
        fail(
            TruncatedError,
            "header-size",
            "header",
            0,
            "file too small for the header",
            f">= {S.HEADER_SIZE} bytes",
            size,
        )
    fields = _HEADER.unpack(mf.bytes(0, S.HEADER_SIZE, "header"))
    if fields[0] != S.MAGIC:
        fail(FormatError, "magic", "header", 0, "bad magic", S.MAGIC, fields[0])
    h = Header(*fields[1:])
    if h.version not in S.VERSIONS:
        fail(
            UnsupportedError,
            "version",
            "header",
            _H("version"),
            "unsupported version",
            "1 or 2",
            h.version,
        )
    if h.file_size != size:
        cls = TruncatedError if h.file_size > size else FormatError
        fail(
            cls,
            "file-size",
            "header",
            _H("file_size"),
            "file length differs from the header's file_size field",
            h.file_size,
            size,
        )
    offs = [h.offset_sizevars, h.offset_metadata, h.offset_tensors, h.offset_data, h.file_size]
    names = ["offset_sizevars", "offset_metadata", "offset_tensors", "offset_data", "file_size"]
    for i in range(4):
        if offs[i] > offs[i + 1]:
            fail(
                FormatError,
                "offsets-ascending",
                "header",
                _H(names[i]),
                f"{names[i]} after {names[i + 1]}",
                f"<= {offs[i + 1]}",
                offs[i],
            )
    for i in range(4):
        if offs[i] % S.ALIGN:
            fail(
                FormatError,
                "section-aligned",
                "header",
                _H(names[i]),
                f"{names[i]} not 8-aligned",
                "multiple of 8",
                offs[i],
            )
    if h.offset_sizevars < S.HEADER_PADDED:
        fail(
            FormatError,
            "section-bounds",
            "header",
            _H("offset_sizevars"),
            "offset_sizevars overlaps the header",
            f">= {S.HEADER_PADDED}",
            h.offset_sizevars,
        )
    return h


def _check_count(
    n: int, what: str, start: int, end: int, min_entry: int, field_off: int, limits: Limits
) -> None:
    if n > limits.max_objects:
        fail(
            LimitError,
            "limit",
            "header",
            field_off,
            f"{what} above limit",
            f"<= {limits.max_objects}",
            n,
        )
    if n * min_entry > end - start:
        fail(
            FormatError,
            "table-bounds",
            "header",
            field_off,
            f"{n} {what} cannot fit their table of {end - start} bytes",
            f"<= {(end - start) // min_entry}",
            n,
        )


def parse_tables(mf: MappedFile, limits: Limits = DEFAULT_LIMITS) -> Tables:
    """Parse and validate the header and the three tables of ``mf``."""
    h = parse_header(mf)
    _check_counts(h, limits)
    blob = mf.bytes(0, h.offset_data, "tables")
    sv, end0 = _parse_sizevars(blob, h)
    md, end1 = _parse_metadata(mf, blob, h, limits)
    tensors, end2 = _parse_tensors(mf, blob, h, limits)
    return Tables(h, sv, md, tensors, (end0, end1, end2))


def _check_counts(h: Header, limits: Limits) -> None:
    """The tables' size and entry counts against the limits and the tables' extents."""
    if h.offset_data > limits.max_index_bytes:
        fail(
            LimitError,
            "limit",
            "header",
            _H("offset_data"),
            "tables larger than the limit",
            f"<= {limits.max_index_bytes}",
            h.offset_data,
        )
    tensor_tail = S.TENSOR_DATA_V2.size - S.TENSOR_DATA.size if h.version == 2 else 0
    for n, what, start, end, min_entry, field in (
        (h.n_sizevars, "sizevars", h.offset_sizevars, h.offset_metadata,
         S.MIN_SIZEVAR_ENTRY, "n_sizevars"),
        (h.n_metadata, "metadata entries", h.offset_metadata, h.offset_tensors,
         S.MIN_METADATA_ENTRY, "n_metadata"),
        (h.n_tensors, "tensors", h.offset_tensors, h.offset_data,
         S.MIN_TENSOR_ENTRY + tensor_tail, "n_tensors"),
    ):  # fmt: skip
        _check_count(n, what, start, end, min_entry, _H(field), limits)


def _string(blob: bytes, pos: int, end: int, kind: str, index: int) -> tuple[bytes, int]:
    """The name string of a table entry at ``pos`` and where the entry's fields start."""
    if pos + S.STRING_LEN.size > end:
        fail(
            TruncatedError,
            "table-bounds",
            f"{kind} #{index}",
            pos,
            "name length runs past its table",
            f"end <= {end}",
            pos + S.STRING_LEN.size,
        )
    (n,) = _U32.unpack_from(blob, pos)
    stop = pos + S.STRING_LEN.size + n
    if stop > end:
        fail(
            TruncatedError,
            "table-bounds",
            f"{kind} #{index}",
            pos,
            "name runs past its table",
            f"end <= {end}",
            stop,
        )
    return blob[pos + S.STRING_LEN.size : stop], pos + S.align8(S.STRING_LEN.size + n)


def _entry_fits(pos: int, size: int, end: int, obj: str, what: str) -> None:
    if pos + size > end:
        fail(TruncatedError, "table-bounds", obj, pos, f"{what} runs past its table",
             f"end <= {end}", pos + size)  # fmt: skip


def _parse_sizevars(blob: bytes, h: Header) -> tuple[list[tuple[str, int, int]], int]:
    """The sizevar table: (name, value, entry offset) rows, and where the table ends."""
    rows: list[tuple[bytes, int, int]] = []
    pos, end = h.offset_sizevars, h.offset_metadata
    for i in range(h.n_sizevars):
        entry = pos
        raw, pos = _string(blob, pos, end, "sizevar", i)
        _entry_fits(pos, S.SIZEVAR_VALUE.size, end, f"sizevar #{i}", "value")
        (value,) = _U64.unpack_from(blob, pos)
        pos += S.SIZEVAR_VALUE.size
        rows.append((raw, value, entry))
    _check_names([r[0] for r in rows], "sizevar", [r[2] for r in rows])
    sv = [(n.decode("ascii"), v, off) for n, v, off in rows]
    _check_unique([e[0] for e in sv], "sizevar", [e[2] for e in sv])
    return sv, pos


def _parse_metadata(
    mf: MappedFile, blob: bytes, h: Header, limits: Limits
) -> tuple[list[tuple[str, int, int, int, int, int]], int]:
    """The metadata table (each entry and its payload checked), and where the table ends."""
    rows: list[tuple[bytes, int, int, int, int, int]] = []
    pos, end = h.offset_metadata, h.offset_tensors
    for i in range(h.n_metadata):
        entry = pos
        raw, pos = _string(blob, pos, end, "metadata", i)
        _entry_fits(pos, _ME.size, end, f"metadata #{i}", "entry")
        tag, flags, nbytes, off = _IIQQ.unpack_from(blob, pos)
        rows.append((raw, tag, flags, nbytes, off, entry))
        pos += _ME.size
    _check_names([r[0] for r in rows], "metadata", [r[5] for r in rows])
    md = [(r[0].decode("ascii"), *r[1:]) for r in rows]
    _check_unique([e[0] for e in md], "metadata", [e[5] for e in md])
    for key, tag, flags, nbytes, off, entry in md:
        _check_metadata(mf, h, key, tag, flags, nbytes, off, entry, limits)
    return md, pos  # type: ignore[return-value]


def _parse_tensors(mf: MappedFile, blob: bytes, h: Header, limits: Limits) -> tuple[list, int]:
    """The tensor table, and where it ends.

    A large model has thousands of tensors, so the walk kernel only finds where each entry
    starts; the fields are then gathered and checked with NumPy, and the precise error of a
    bad entry comes from _check_tensor.
    """
    n = h.n_tensors
    st_arr, ln_arr, nd_arr = (np.empty(n, np.int64) for _ in range(3))
    _done, pos, status = _kernels.load("walk").walk_lp_records(
        blob,
        h.offset_tensors,
        h.offset_data,
        n,
        S.ALIGN,
        _TE.size,
        _TE.offset("ndim"),
        8,  # one u64 dim
        (_TD if h.version == 2 else S.TENSOR_DATA).size,
        limits.max_ndim,
        st_arr,
        ln_arr,
        nd_arr,
    )
    if status:
        _walk_tensors_slow(blob, h, limits)  # raises the precise error
    starts, lns, ndims = st_arr.tolist(), ln_arr.tolist(), nd_arr.tolist()
    return _tensor_rows(mf, h, blob, starts, lns, ndims, nd_arr, limits), pos


def _gather(u8: np.ndarray, pos: np.ndarray, nbytes: int, dtype: str) -> np.ndarray:
    """Little-endian fields of ``nbytes`` at byte positions ``pos`` (any alignment)."""
    idx = pos[:, None] + np.arange(nbytes, dtype=np.int64)
    return np.ascontiguousarray(u8[idx]).view(dtype).reshape(-1)


def _column(u8: np.ndarray, starts: np.ndarray, rec: Record, field: str) -> np.ndarray:
    """Field ``field`` of the record ``rec`` at each of the byte positions ``starts``."""
    return _gather(u8, starts + rec.offset(field), rec.field_size(field), rec.dtype[field].str)


def _walk_tensors_slow(blob: bytes, h: Header, limits: Limits) -> None:
    """Walk the tensor table in Python to name the first entry that runs past its table."""
    pos, end = h.offset_tensors, h.offset_data
    tail_size = (S.TENSOR_DATA_V2 if h.version == 2 else S.TENSOR_DATA).size
    for i in range(h.n_tensors):
        if pos + 4 > end:
            fail(
                TruncatedError,
                "table-bounds",
                f"tensor #{i}",
                pos,
                "name length runs past its table",
                f"end <= {end}",
                pos + 4,
            )
        (ln,) = _U32.unpack_from(blob, pos)
        if pos + 4 + ln > end:
            fail(
                TruncatedError,
                "table-bounds",
                f"tensor #{i}",
                pos,
                "name runs past its table",
                f"end <= {end}",
                pos + 4 + ln,
            )
        q = pos + ((ln + 11) & ~7)
        if q + _TE.size > end:
            fail(
                TruncatedError,
                "table-bounds",
                f"tensor #{i}",
                pos,
                "entry runs past its table",
                f"end <= {end}",
                q + _TE.size,
            )
        (nd,) = _U32.unpack_from(blob, q + _TE.offset("ndim"))
        if nd > limits.max_ndim:
            fail(
                LimitError,
                "tensor-ndim",
                f"tensor #{i}",
                q + _TE.offset("ndim"),
                "ndim above limit",
                f"<= {limits.max_ndim}",
                nd,
            )
        pos = q + _TE.size + 8 * nd + tail_size
        if pos > end:
            fail(
                TruncatedError,
                "table-bounds",
                f"tensor #{i}",
                q + _TE.size,
                "dims run past its table",
                f"end <= {end}",
                pos,
            )
    raise AssertionError("walk kernel and Python walk disagree")  # pragma: no cover


def _tensor_rows(
    mf: MappedFile,
    h: Header,
    blob: bytes,
    starts: list[int],
    lns: list[int],
    ndims: list[int],
    nd: np.ndarray,
    limits: Limits,
) -> list[tuple]:
    n = len(starts)
    if not n:
        return []
    v2 = h.version == 2
    u8 = np.frombuffer(blob, np.uint8)
    st = np.array(starts, np.int64)
    q = st + ((np.array(lns, np.int64) + 11) & ~7)
    tags = _column(u8, q, _TE, "dtype")
    flags = _column(u8, q, _TE, "flags")
    dpos = q + _TE.size
    total = int(nd.sum())
    if total:
        first = np.repeat(np.cumsum(nd) - nd, nd)
        dim_pos = np.repeat(dpos, nd) + 8 * (np.arange(total, dtype=np.int64) - first)
        flat = _gather(u8, dim_pos, 8, "<u8").tolist()
    else:
        flat = []
    tpos = dpos + 8 * nd
    nbytes = _column(u8, tpos, S.TENSOR_DATA_V2, "data_nbytes")
    offs = _column(u8, tpos, S.TENSOR_DATA_V2, "data_offset")
    if v2:
        qn = _column(u8, tpos, S.TENSOR_DATA_V2, "quant_nbytes")
        qo = _column(u8, tpos, S.TENSOR_DATA_V2, "quant_offset")
    else:
        qn = qo = np.zeros(n, np.uint64)
    shapes, numel, extent = _shapes(flat, nd, ndims)
    bad = _suspect_rows(h, tags, flags, nbytes, offs, qn, qo, numel, extent)
    raws = [blob[s + 4 : s + 4 + ln] for s, ln in zip(starts, lns, strict=True)]
    cols = (
        tags.tolist(),
        shapes,
        flags.tolist(),
        nbytes.tolist(),
        offs.tolist(),
        starts,
        qn.tolist(),
        qo.tolist(),
    )
    for i in np.flatnonzero(bad).tolist():
        # the precise error (or, for a v2 quantized tensor, its quant block's checks)
        row = (raws[i].decode("latin-1"),) + tuple(c[i] for c in cols)
        _check_tensor(mf, h, row, limits)  # type: ignore[arg-type]
    _check_names(raws, "tensor", starts)
    tnames = b"\n".join(raws).decode("ascii").split("\n")
    _check_unique(tnames, "tensor", starts)
    return list(zip(tnames, *cols, strict=True))


def _shapes(
    flat: list[int], nd: np.ndarray, ndims: list[int]
) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """Each tensor's shape from the flat dims, its element count and the product of its
    nonzero dims (float64: a value at or above 2**52 is refused by the caller)."""
    n, total = len(nd), len(flat)
    shapes: list[tuple[int, ...]]
    if int(nd.min()) == int(nd.max()):  # one rank for every tensor: split at C speed
        d0 = int(nd[0])
        shapes = list(zip(*[iter(flat)] * d0, strict=True)) if d0 else [()] * n
    else:
        it = iter(flat)
        shapes = [tuple(itertools.islice(it, d)) for d in ndims]
    if total:
        first = np.repeat(np.cumsum(nd) - nd, nd)
        mat = np.ones((n, int(nd.max())), np.float64)
        mat[np.repeat(np.arange(n), nd), np.arange(total) - first] = flat
        numel = mat.prod(axis=1)
        # a zero dimension hides the others: NumPy still needs their product to fit in intp
        extent = np.where(mat == 0, 1.0, mat).prod(axis=1)
    else:
        numel = extent = np.ones(n, np.float64)
    return shapes, numel, extent


def _suspect_rows(
    h: Header,
    tags: np.ndarray,
    flags: np.ndarray,
    nbytes: np.ndarray,
    offs: np.ndarray,
    qn: np.ndarray,
    qo: np.ndarray,
    numel: np.ndarray,
    extent: np.ndarray,
) -> np.ndarray:
    """A mask of the table rows that fail a vectorized check (each is then checked alone for
    its precise error)."""
    # element sizes in eighths of a byte (packed types: bits; others: 8 * itemsize); 0 = invalid
    tag_ok = (tags < len(_EIGHTHS)) & np.isin(tags, list(_TENSOR_TAGS))
    eighths = np.where(tag_ok, _EIGHTHS[np.minimum(tags, len(_EIGHTHS) - 1)], 0)
    expected = np.ceil(numel * eighths / 8)
    has = (flags & 1).astype(bool)
    fs, od = h.file_size, h.offset_data
    nb_f, off_f = nbytes.astype(np.float64), offs.astype(np.float64)
    bad = ~tag_ok | (numel >= 2.0**52) | (extent >= 2.0**52)
    bad |= has & (
        (expected != nb_f) | (offs % 8 != 0) | (off_f < od) | (nb_f > fs) | (off_f + nb_f > fs)
    )
    bad |= ~has & ((nbytes != 0) | (offs != 0))
    if h.version == 2:
        bad |= (flags & ~np.uint32(S.HAS_DATA | S.HAS_QUANT)) != 0
        bad |= (qn != 0) | (qo != 0)
    return bad


def _check_names(names: list[bytes], kind: str, entries: list[int]) -> None:
    if not names:
        return
    joined = b"\n".join(names)
    if _NAMES_RE.fullmatch(joined) and joined.count(b"\n") == len(names) - 1:
        return
    for i, (raw, off) in enumerate(zip(names, entries, strict=True)):
        if not S.NAME_RE.fullmatch(raw):
            rule = "name-empty" if not raw else "name-charset"
            fail(
                FormatError,
                rule,
                f"{kind} #{i}",
                off,
                f"invalid name {raw!r}",
                "[A-Za-z0-9._-]+",
                raw.decode("latin-1"),
            )


def _check_unique(names: list[str], kind: str, entries: list[int]) -> None:
    if len(set(names)) == len(names):
        return
    seen: set[str] = set()
    for n, off in zip(names, entries, strict=True):
        if n in seen:
            fail(
                FormatError,
                "duplicate-name",
                f"{kind} {n!r}",
                off,
                "duplicate name",
                "unique names",
                n,
            )
        seen.add(n)


def _payload_bounds(
    h: Header, obj: str, entry: int, field_off: int, off: int, nbytes: int, what: str
) -> None:
    if off % S.ALIGN:
        fail(
            FormatError,
            f"{what}-offset-aligned",
            obj,
            entry + field_off,
            f"{what}_offset not 8-aligned",
            "multiple of 8",
            off,
        )
    if off < h.offset_data:
        fail(
            FormatError,
            f"{what}-offset-region",
            obj,
            entry + field_off,
            f"{what}_offset before the data section",
            f">= {h.offset_data}",
            off,
        )
    if off + nbytes > h.file_size:
        fail(
            TruncatedError,
            f"{what}-bounds",
            obj,
            entry + field_off,
            f"{what} runs past the end of file",
            f"end <= {h.file_size}",
            off + nbytes,
        )


def _check_metadata(
    mf: MappedFile,
    h: Header,
    key: str,
    tag: int,
    flags: int,
    nbytes: int,
    off: int,
    entry: int,
    limits: Limits,
) -> None:
    obj = f"metadata {key!r}"
    f0 = S.align8(4 + len(key))  # fields start after the padded key
    if flags != 0:
        fail(
            FormatError,
            "metadata-flags",
            obj,
            entry + f0 + _ME.offset("value_flags"),
            "value_flags must be 0",
            0,
            flags,
        )
    if tag not in S.METADATA_TAGS:
        fail(
            UnsupportedError,
            "metadata-type",
            obj,
            entry + f0,
            "unknown value_type",
            "a ValueType tag",
            tag,
        )
    _payload_bounds(h, obj, entry, f0 + _ME.offset("value_offset"), off, nbytes, "value")
    if tag in S.SCALAR_NBYTES:
        if nbytes != S.SCALAR_NBYTES[tag]:
            fail(
                FormatError,
                "metadata-nbytes",
                obj,
                entry + f0 + _ME.offset("value_nbytes"),
                f"{S.TAG_NAME[tag]} scalar value_nbytes mismatch",
                S.SCALAR_NBYTES[tag],
                nbytes,
            )
        return
    nbytes_field = entry + f0 + _ME.offset("value_nbytes")
    if tag == S.STRING:
        _check_string_value(mf, obj, off, nbytes, nbytes_field)
    elif tag == S.BITSET:
        _check_bitset_value(mf, obj, off, nbytes, nbytes_field)
    else:  # NDARRAY
        parse_ndarray_header(mf, obj, off, nbytes, nbytes_field, limits)


def _check_string_value(mf: MappedFile, obj: str, off: int, nbytes: int, nbytes_field: int) -> None:
    if nbytes < S.STRING_LEN.size:
        fail(FormatError, "string-nbytes", obj, off, "STRING payload too small", ">= 4", nbytes)
    (n,) = S.STRING_LEN.unpack(mf.bytes(off, S.STRING_LEN.size, obj))
    if S.align8(S.STRING_LEN.size + n) != nbytes:
        fail(
            FormatError,
            "string-nbytes",
            obj,
            nbytes_field,
            "STRING value_nbytes is not the padded string size",
            S.align8(S.STRING_LEN.size + n),
            nbytes,
        )
    raw = mf.bytes(off + S.STRING_LEN.size, n, obj)
    if not S.NAME_RE.fullmatch(raw):
        fail(
            FormatError,
            "name-charset",
            obj,
            off,
            f"invalid STRING value {raw!r}",
            "[A-Za-z0-9._-]+",
            raw.decode("latin-1"),
        )


def _check_bitset_value(mf: MappedFile, obj: str, off: int, nbytes: int, nbytes_field: int) -> None:
    head = S.BITSET_HEAD.size
    if nbytes < head:
        fail(FormatError, "bitset-nbytes", obj, off, "BITSET payload too small", ">= 8", nbytes)
    bit_count, byte_count = S.BITSET_HEAD.unpack(mf.bytes(off, head, obj))
    if byte_count != (bit_count + 7) // 8:
        fail(
            FormatError,
            "bitset-byte-count",
            obj,
            off + S.BITSET_HEAD.offset("byte_count"),
            "BITSET byte_count mismatch",
            (bit_count + 7) // 8,
            byte_count,
        )
    if S.align8(head + byte_count) != nbytes:
        fail(
            FormatError,
            "bitset-nbytes",
            obj,
            nbytes_field,
            "BITSET value_nbytes is not the padded size",
            S.align8(head + byte_count),
            nbytes,
        )


def parse_ndarray_header(
    mf: MappedFile, obj: str, off: int, nbytes: int, nbytes_field: int, limits: Limits
) -> tuple[int, tuple[int, ...], int, int]:
    """Validate an NDARRAY payload; return (element tag, shape, data offset, data nbytes)."""
    if nbytes < 8:
        fail(FormatError, "ndarray-nbytes", obj, off, "NDARRAY payload too small", ">= 8", nbytes)
    etag, ndim = _NDARRAY.unpack_from(mf.bytes(off, 8, obj), 0)
    if etag not in S.NDARRAY_ELEMENT_TAGS:
        fail(
            UnsupportedError,
            "ndarray-element-type",
            obj,
            off,
            "invalid NDARRAY element type",
            "a numeric, bool, bf16, f8 or packed tag",
            etag,
        )
    if ndim > limits.max_ndim:
        fail(
            LimitError,
            "ndarray-ndim",
            obj,
            off + 4,
            "NDARRAY ndim above limit",
            f"<= {limits.max_ndim}",
            ndim,
        )
    if 8 + 8 * ndim > nbytes:
        fail(
            FormatError,
            "ndarray-nbytes",
            obj,
            off + 4,
            "NDARRAY dims run past the payload",
            f"<= {nbytes}",
            8 + 8 * ndim,
        )
    shape = struct.unpack_from(f"<{ndim}Q", mf.bytes(off + 8, 8 * ndim, obj), 0) if ndim else ()
    numel = _checked_shape(obj, shape, etag, off + 8, limits)
    dnb = S.element_nbytes(etag, numel)
    if S.align8(8 + 8 * ndim + dnb) != nbytes:
        fail(
            FormatError,
            "ndarray-nbytes",
            obj,
            nbytes_field,
            "NDARRAY value_nbytes is not the padded size",
            S.align8(8 + 8 * ndim + dnb),
            nbytes,
        )
    return etag, tuple(shape), off + 8 + 8 * ndim, dnb


def _checked_shape(obj: str, shape: tuple[int, ...], tag: int, offset: int, limits: Limits) -> int:
    """Element count of ``shape`` (core shape check: every reader's arrays must be makeable)."""
    dt = S.NUMPY_DTYPE.get(tag)
    try:
        return checked_numel(
            S.FMT, obj, shape, limits, itemsize=dt.itemsize if dt else 1, offset=offset
        )
    except TenfoldError as exc:
        detail = f"{exc.field}: {exc.detail}"  # e.g. "shape: dimension out of range"
        fail(
            type(exc),
            "tensor-shape",
            obj,
            offset,
            detail,
            "dims in [0, 2**63) whose non-zero product fits in int64",
            list(shape)[:16],
        )


def _check_tensor(
    mf: MappedFile,
    h: Header,
    t: tuple[str, int, tuple[int, ...], int, int, int, int, int, int],
    limits: Limits,
) -> None:
    name, tag, shape, flags, nbytes, off, entry, qn, qo = t
    obj = f"tensor {name!r}"
    f0 = entry + S.align8(4 + len(name))
    fnb = f0 + _TE.size + 8 * len(shape)  # data_nbytes field
    if tag not in S.TENSOR_TAGS:
        cls = FormatError if tag in S.TAG_NAME else UnsupportedError
        fail(
            cls,
            "tensor-dtype",
            obj,
            f0,
            "invalid tensor dtype",
            "a numeric, bool, bf16, f8, packed or bitset tag",
            tag,
        )
    _checked_shape(obj, shape, tag, f0 + _TE.size, limits)
    known = S.HAS_DATA | (S.HAS_QUANT if h.version == 2 else 0)
    if h.version == 2 and flags & ~known:
        fail(
            FormatError,
            "tensor-flags",
            obj,
            f0 + _TE.offset("flags"),
            "unknown tensor flag bits",
            f"bits within {known:#x}",
            flags,
        )
    if not flags & S.HAS_DATA:
        if nbytes or off:
            fail(
                FormatError,
                "nodata-zero",
                obj,
                fnb,
                "tensor without data must have zero data_offset and data_nbytes",
                "0, 0",
                f"{off}, {nbytes}",
            )
    else:
        _payload_bounds(h, obj, entry, fnb + _TD.offset("data_offset") - entry, off, nbytes, "data")
        expected = S.element_nbytes(tag, math.prod(shape))
        if nbytes != expected:
            fail(FormatError, "data-nbytes", obj, fnb, "data_nbytes mismatch", expected, nbytes)
    if h.version == 2:
        if not flags & S.HAS_QUANT:
            if qn or qo:
                fail(
                    FormatError,
                    "noquant-zero",
                    obj,
                    fnb + _TD.offset("quant_nbytes"),
                    "tensor without quant must have zero quant_offset and quant_nbytes",
                    "0, 0",
                    f"{qo}, {qn}",
                )
        else:
            _payload_bounds(
                h, obj, entry, fnb + _TD.offset("quant_offset") - entry, qo, qn, "quant"
            )
            parse_quant(mf, obj, shape, qo, qn, fnb + _TD.offset("quant_nbytes"))


#: The enumerated fields of the quantization header: (field, allowed, rule, expected).
_QUANT_ENUMS = (
    ("scheme", (1, 2), "quant-scheme", "1 or 2"),
    ("scale_mode", (1, 2), "quant-scale-mode", "1 or 2"),
    ("zp_mode", (0, 1, 2), "quant-zp-mode", "0, 1 or 2"),
)


def parse_quant(
    mf: MappedFile, obj: str, shape: tuple[int, ...], qo: int, qn: int, qn_field: int
) -> tuple[int, ...]:
    """Validate a v2 quantization block; return its eight header fields."""
    if qn < S.QUANT_HEADER_SIZE:
        fail(
            FormatError,
            "quant-nbytes",
            obj,
            qn_field,
            "quant payload too small",
            f">= {S.QUANT_HEADER_SIZE}",
            qn,
        )
    q = _QUANT.unpack(mf.bytes(qo, S.QUANT.size, obj))
    scheme, smode, zmode, reserved, saxis, scount, zaxis, zcount = q
    if reserved:
        fail(
            FormatError,
            "quant-reserved",
            obj,
            qo + _Q("reserved"),
            "quant reserved must be 0",
            0,
            reserved,
        )
    fields = dict(zip(S.QUANT.names, q, strict=True))
    for field, allowed, rule, expected in _QUANT_ENUMS:
        if fields[field] not in allowed:
            what = "quant scheme" if field == "scheme" else field
            fail(FormatError, rule, obj, qo + _Q(field), f"unknown {what}", expected, fields[field])
    for mode, axis, count, name in ((smode, saxis, scount, "scale"), (zmode, zaxis, zcount, "zp")):
        if mode == 2:
            if axis >= len(shape):
                fail(
                    FormatError,
                    "quant-axis",
                    obj,
                    qo + _Q(f"{name}_axis"),
                    f"per-channel {name} axis out of range",
                    f"< {len(shape)}",
                    axis,
                )
            want = shape[axis]
        else:
            want = mode  # 1 value per tensor, 0 for none
        if count != want:
            fail(
                FormatError,
                "quant-count",
                obj,
                qo + _Q(f"{name}_count"),
                f"{name}_count mismatch",
                want,
                count,
            )
    need = S.align8(S.QUANT_HEADER_SIZE + 4 * scount + 4 * zcount)
    if qn != need:
        fail(
            FormatError,
            "quant-nbytes",
            obj,
            qn_field,
            "quant_nbytes is not the padded size",
            need,
            qn,
        )
    return q

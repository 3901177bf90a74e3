"""OINF sizevar and metadata tables: their entries parsed and checked, and each metadata value's
payload (STRING and BITSET bytes, the NDARRAY header) checked against its entry.
"""

from __future__ import annotations

import struct

from ...core.bounds import Limits
from ...core.mapped import MappedFile
from ...errors import FormatError, LimitError, UnsupportedError
from . import _spec as S
from ._parse import (
    Header,
    check_names,
    check_unique,
    checked_shape,
    entry_fits,
    entry_string,
    fail,
    payload_bounds,
)

_U64 = S.SIZEVAR_VALUE.struct


_IIQQ = S.METADATA_ENTRY.struct


_NDARRAY = S.NDARRAY_HEAD.struct


_ME = S.METADATA_ENTRY


def parse_sizevars(blob: bytes, h: Header) -> tuple[list[tuple[str, int, int]], int]:
    """The sizevar table: (name, value, entry offset) rows, and where the table ends."""
    rows: list[tuple[bytes, int, int]] = []
    pos, end = h.offset_sizevars, h.offset_metadata
    for i in range(h.n_sizevars):
        entry = pos
        raw, pos = entry_string(blob, pos, end, "sizevar", i)
        entry_fits(pos, S.SIZEVAR_VALUE.size, end, f"sizevar #{i}", "value")
        (value,) = _U64.unpack_from(blob, pos)
        pos += S.SIZEVAR_VALUE.size
        rows.append((raw, value, entry))
    check_names([r[0] for r in rows], "sizevar", [r[2] for r in rows])
    sv = [(n.decode("ascii"), v, off) for n, v, off in rows]
    check_unique([e[0] for e in sv], "sizevar", [e[2] for e in sv])
    return sv, pos


def parse_metadata(
    mf: MappedFile, blob: bytes, h: Header, limits: Limits
) -> tuple[list[tuple[str, int, int, int, int, int]], int]:
    """The metadata table (each entry and its payload checked), and where the table ends."""
    rows: list[tuple[bytes, int, int, int, int, int]] = []
    pos, end = h.offset_metadata, h.offset_tensors
    for i in range(h.n_metadata):
        entry = pos
        raw, pos = entry_string(blob, pos, end, "metadata", i)
        entry_fits(pos, _ME.size, end, f"metadata #{i}", "entry")
        tag, flags, nbytes, off = _IIQQ.unpack_from(blob, pos)
        rows.append((raw, tag, flags, nbytes, off, entry))
        pos += _ME.size
    check_names([r[0] for r in rows], "metadata", [r[5] for r in rows])
    md = [(r[0].decode("ascii"), *r[1:]) for r in rows]
    check_unique([e[0] for e in md], "metadata", [e[5] for e in md])
    for key, tag, flags, nbytes, off, entry in md:
        _check_metadata(mf, h, key, tag, flags, nbytes, off, entry, limits)
    return md, pos  # type: ignore[return-value]


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
    payload_bounds(h, obj, entry, f0 + _ME.offset("value_offset"), off, nbytes, "value")
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
    numel = checked_shape(obj, shape, etag, off + 8, limits)
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

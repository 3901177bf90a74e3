"""Parse and validate the OINF header and tables (payloads are not touched, except the few
header bytes of STRING / BITSET / NDARRAY metadata and v2 quantization blocks).

This module holds the header, the parsed records and the rules every table shares (entry
bounds, names, payload bounds, shapes); the tables are parsed in :mod:`._metadata` (sizevars
and metadata) and :mod:`._tensors`, and joined by :func:`._tables.parse_tables`.

Every failure raises a :mod:`tenfold.errors` exception whose message names the object, the
offset, the rule (in brackets) and the expected and actual values; the exception also carries
``rule``, ``obj`` and ``offset`` attributes that the verifier reports.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from typing import NoReturn

from ...core.bounds import Limits, checked_numel
from ...core.mapped import MappedFile
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
_III = S.TENSOR_ENTRY.struct
_QQ = S.TENSOR_DATA.struct
_QQQQ = S.TENSOR_DATA_V2.struct
_HEADER = S.HEADER.struct
_H = S.HEADER.offset
_DIMS: dict[int, struct.Struct] = {}
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


def check_counts(h: Header, limits: Limits) -> None:
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


def entry_string(blob: bytes, pos: int, end: int, kind: str, index: int) -> tuple[bytes, int]:
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


def entry_fits(pos: int, size: int, end: int, obj: str, what: str) -> None:
    if pos + size > end:
        fail(TruncatedError, "table-bounds", obj, pos, f"{what} runs past its table",
             f"end <= {end}", pos + size)  # fmt: skip


def check_names(names: list[bytes], kind: str, entries: list[int]) -> None:
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


def check_unique(names: list[str], kind: str, entries: list[int]) -> None:
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


def payload_bounds(
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


def checked_shape(obj: str, shape: tuple[int, ...], tag: int, offset: int, limits: Limits) -> int:
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

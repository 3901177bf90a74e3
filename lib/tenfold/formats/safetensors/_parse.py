"""Parsing safetensors bytes: the header length, the JSON header (every rule checked before a
view is made) and the tensors as views of the buffer; :mod:`.writer` re-exports these names.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ...core import jsonio
from ...core.alloc import copy as alloc_copy
from ...core.bounds import DEFAULT_LIMITS, Budget, Limits, checked_numel, truncated
from ...errors import FormatError, LimitError, TruncatedError, UnsupportedError, describe
from ._dtypes import DTYPES, FMT, PACKED_BITS, stored_nbytes, unpack_f4
from ._format import MAX_HEADER

__all__ = ["header_length", "parse_header", "tensor_of", "parse", "parse_metadata", "Entry"]


def _label(what: str) -> str:
    return "header" if what == "file" else f"{what} header"


def _duplicates(fmt: str, what: str, offset: int) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise FormatError(
                    describe(fmt, _label(what), offset=offset, detail=f"key {k!r} appears twice")
                )
            out[k] = v
        return out

    return hook


def header_length(
    first8: Any, size: int, *, fmt: str = FMT, what: str = "file", offset: int = 0, limit: int
) -> int:
    """The header length ``N`` from the first 8 bytes, checked against ``limit`` (at most
    :data:`MAX_HEADER`) and the ``size`` of the whole safetensors byte string."""
    obj = "header length" if what == "file" else f"{what} header length"
    if size < 8:
        raise TruncatedError(
            describe(
                fmt,
                obj,
                offset=offset,
                detail="file shorter than the 8-byte length",
                expected=">= 8 bytes",
                got=size,
            )
        )
    n = int.from_bytes(bytes(first8[:8]), "little")
    limit = min(limit, MAX_HEADER)
    if n > limit:
        raise LimitError(
            describe(
                fmt, obj, offset=offset, detail="above the limit", expected=f"<= {limit}", got=n
            )
        )
    if n > size - 8:  # the file ends before the header its first 8 bytes announce
        raise truncated(fmt, size, n + 8, "header", obj=obj, offset=offset)
    return n


_KEYS = frozenset({"dtype", "shape", "data_offsets"})

#: One parsed header entry: ``(dtype tag, shape, begin, end)``, offsets in the data buffer.
Entry = tuple[str, tuple[int, ...], int, int]


def parse_header(
    raw: bytes,
    data_size: int,
    *,
    fmt: str = FMT,
    what: str = "file",
    offset: int = 0,
    limits: Limits = DEFAULT_LIMITS,
    tile: bool = False,
) -> tuple[dict[str, Entry], dict[str, str] | None]:
    """Check the JSON header ``raw`` (the ``N`` bytes after the length) of a safetensors byte
    string whose data buffer holds ``data_size`` bytes; return ``(entries, metadata)``, the
    entries in data-buffer order, ``metadata`` None when the header has no ``__metadata__``
    (or it is ``null``).

    Every rule of the format is checked: UTF-8 JSON object starting with ``{``, each key once,
    ``__metadata__`` strings only, at most ``limits.max_objects`` entries, each with exactly
    ``dtype`` (a known tag), ``shape`` (at most ``limits.max_ndim`` non-negative integers) and
    ``data_offsets`` (``begin <= end`` inside the buffer, ``end - begin`` the stored size),
    no two tensors overlapping; with ``tile`` also no gap and the last ending at the end of
    the buffer (what a whole file must satisfy). ``offset`` is where the byte string sits in
    its file; messages give absolute offsets.
    """
    hoff = offset + 8
    start = hoff + len(raw)
    header = _json_object(raw, fmt, what, hoff)
    if raw[:1] != b"{":
        raise FormatError(
            describe(
                fmt,
                _label(what),
                offset=hoff,
                detail="does not start with '{'",
                expected="'{'",
                got=repr(raw[:1]),
            )
        )
    meta = header.pop("__metadata__", None)  # absent or null: None (as safetensors says)
    if meta is not None and (
        not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values())
    ):
        raise FormatError(
            describe(
                fmt,
                _label(what),
                offset=hoff,
                field="__metadata__",
                detail="not an object of strings",
                got=repr(meta)[:200],
            )
        )
    if len(header) > limits.max_objects:
        raise LimitError(
            describe(
                fmt,
                _label(what),
                offset=hoff,
                field="tensors",
                detail="above max_objects",
                expected=f"<= {limits.max_objects}",
                got=len(header),
            )
        )
    entries = [
        (name, *_entry(fmt, what, name, e, hoff, start, data_size, limits))
        for name, e in header.items()
    ]
    entries.sort(key=lambda t: (t[3], t[4]))
    _check_placement(entries, fmt, what, start, data_size, tile)
    return {n: (t, sh, b, e) for n, t, sh, b, e in entries}, (
        dict(meta) if meta is not None else None
    )


def _json_object(raw: bytes, fmt: str, what: str, hoff: int) -> dict[str, Any]:
    """The header bytes ``raw`` (at file offset ``hoff``) as a JSON object: UTF-8, valid JSON,
    each key once."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            describe(fmt, _label(what), offset=hoff + exc.start, detail="invalid UTF-8")
        ) from None
    try:
        header = json.loads(text, object_pairs_hook=_duplicates(fmt, what, hoff))
    except FormatError:
        raise  # a key that appears twice
    except RecursionError:
        raise FormatError(
            describe(fmt, _label(what), offset=hoff, detail="nested too deeply")
        ) from None
    except json.JSONDecodeError as exc:
        raise FormatError(
            describe(
                fmt,
                _label(what),
                offset=hoff + len(text[: exc.pos].encode()),
                detail=f"invalid JSON: {exc.msg}",
            )
        ) from None
    except ValueError as exc:  # int() past the digit limit
        raise FormatError(
            describe(fmt, _label(what), offset=hoff, detail=f"invalid JSON: {exc}")
        ) from None
    if not isinstance(header, dict):
        raise FormatError(
            describe(
                fmt,
                what,
                offset=hoff,
                detail="header is not a JSON object",
                got=type(header).__name__,
            )
        )
    return header


def _check_placement(
    entries: list[tuple[str, str, tuple[int, ...], int, int]],
    fmt: str,
    what: str,
    start: int,
    data_size: int,
    tile: bool,
) -> None:
    """No two of ``entries`` (sorted by offsets) overlap; with ``tile`` they also leave no gap
    and end where the data buffer (at file offset ``start``, ``data_size`` bytes) ends."""
    pos = 0
    for name, _tag, _shape, begin, end in entries:
        where = f"{what} tensor {name!r}" if what != "file" else f"tensor {name!r}"
        if begin < pos:
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=start + begin,
                    field="data_offsets",
                    detail="overlaps the tensor before it",
                    expected=f"begin >= {pos}",
                    got=begin,
                )
            )
        if tile and begin > pos:
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=start + begin,
                    field="data_offsets",
                    detail="gap before it (tensors must tile the data buffer)",
                    expected=f"begin {pos}",
                    got=begin,
                )
            )
        pos = max(pos, end)
    if tile and pos != data_size:
        last = f"tensor {entries[-1][0]!r}" if entries else "data buffer"
        raise FormatError(
            describe(
                fmt,
                last if what == "file" else f"{what} {last}",
                offset=start + pos,
                field="data_offsets",
                detail="tensors do not end where the file ends",
                expected=f"end {data_size}",
                got=pos,
            )
        )


def _entry(
    fmt: str, what: str, name: str, e: Any, hoff: int, start: int, data_size: int, limits: Limits
) -> Entry:
    """The checked header entry ``e`` of tensor ``name``: its fields, then its extent."""
    where = f"{what} tensor {name!r}" if what != "file" else f"tensor {name!r}"
    tag = _entry_dtype(fmt, where, e, hoff)
    shape, offs = _entry_shape_offsets(fmt, where, e, hoff, limits)
    b, end = offs
    _check_extent(fmt, where, tag, shape, b, end, hoff, start, data_size)
    return tag, tuple(shape), b, end


def _entry_dtype(fmt: str, where: str, e: Any, hoff: int) -> str:
    """The dtype tag of entry ``e``, after checking it is an object with exactly the keys."""
    if not isinstance(e, dict):
        raise FormatError(
            describe(fmt, where, offset=hoff, detail="entry is not an object", got=type(e).__name__)
        )
    if e.keys() != _KEYS:
        extra = sorted(set(e) - _KEYS)
        missing = sorted(_KEYS - set(e))
        raise FormatError(
            describe(
                fmt,
                where,
                offset=hoff,
                detail="keys",
                expected="dtype, shape, data_offsets",
                got=f"missing {missing}, unknown {extra}",
            )
        )
    tag = e.get("dtype")
    if type(tag) is not str or tag not in DTYPES:
        raise UnsupportedError(
            describe(
                fmt,
                where,
                offset=hoff,
                field="dtype",
                detail="unknown",
                expected=" | ".join(DTYPES),
                got=tag if type(tag) is str else f"{type(tag).__name__} {tag!r}"[:80],
            )
        )
    return tag


def _entry_shape_offsets(
    fmt: str, where: str, e: dict[str, Any], hoff: int, limits: Limits
) -> tuple[list[int], list[int]]:
    """``shape`` (non-negative integers, at most ``limits.max_ndim``) and ``data_offsets``
    (two non-negative integers) of entry ``e``."""
    shape, offs = e["shape"], e["data_offsets"]
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise FormatError(
            describe(
                fmt,
                where,
                offset=hoff,
                field="shape",
                detail="not a list of non-negative integers",
                got=repr(shape)[:200],
            )
        )
    if len(shape) > limits.max_ndim:
        raise LimitError(
            describe(
                fmt,
                where,
                offset=hoff,
                field="shape",
                detail="too many dimensions",
                expected=f"<= {limits.max_ndim}",
                got=len(shape),
            )
        )
    if not (
        isinstance(offs, list) and len(offs) == 2 and all(type(o) is int and o >= 0 for o in offs)
    ):
        raise FormatError(
            describe(
                fmt,
                where,
                offset=hoff,
                field="data_offsets",
                detail="not [begin, end] non-negative integers",
                got=repr(offs)[:200],
            )
        )
    return shape, offs


def _check_extent(
    fmt: str,
    where: str,
    tag: str,
    shape: list[int],
    b: int,
    end: int,
    hoff: int,
    start: int,
    data_size: int,
) -> None:
    """``[b, end)`` lies inside the data buffer and holds exactly ``shape`` elements of ``tag``."""
    numel = checked_numel(fmt, where, shape, itemsize=DTYPES[tag].itemsize, offset=hoff)
    if end < b:
        raise FormatError(
            describe(
                fmt,
                where,
                offset=start + b,
                field="data_offsets",
                detail="end before begin",
                expected=f"end >= {b}",
                got=end,
            )
        )
    if end > data_size:
        raise TruncatedError(
            describe(
                fmt,
                where,
                offset=start + b,
                field="data_offsets",
                detail="outside the data buffer (ends past end of file)",
                expected=f"end <= {data_size}",
                got=end,
            )
        )
    if tag in PACKED_BITS and (numel * PACKED_BITS[tag]) % 8:
        raise FormatError(
            describe(
                fmt,
                where,
                offset=hoff,
                field="shape",
                detail=f"{tag} elements do not fill whole bytes",
                got=shape,
            )
        )
    want = stored_nbytes(tag, numel)
    if end - b != want:
        raise FormatError(
            describe(
                fmt,
                where,
                offset=start + b,
                field="data_offsets",
                detail="size is not shape x itemsize (the stored size does not match)",
                expected=want,
                got=end - b,
            )
        )


def tensor_of(
    data: np.ndarray, entry: Entry, *, copy: bool, fmt: str, where: str, offset: int, budget: Any
) -> np.ndarray:
    """The array of ``entry`` from the stored bytes ``data`` (exactly ``end - begin`` bytes):
    a read-only view, unpacked (``F4``) or copied (``copy``)."""
    tag, shape, _b, _e = entry
    dt = DTYPES[tag]
    if tag in PACKED_BITS:
        out = unpack_f4(data, math.prod(shape)).reshape(shape)
        if not copy:
            out.flags.writeable = False
        return out
    view = data.view(dt).reshape(shape) if data.size else np.empty(shape, dt)
    if copy:
        return alloc_copy(view, fmt=fmt, what=where, offset=offset, budget=budget)
    if view.flags.writeable and not data.size:  # a fresh empty array: keep the read-only rule
        view.flags.writeable = False
    return view


def parse(
    buf: Any,
    *,
    fmt: str = FMT,
    what: str = "file",
    copy: bool = False,
    offset: int = 0,
    budget: Budget | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> dict[str, np.ndarray]:
    """The tensors of the safetensors bytes in ``buf`` (views of ``buf`` unless ``copy``).

    The header goes through :func:`parse_header` (every rule but tiling: a byte string inside
    another container may be followed by padding). ``fmt``, ``what`` and ``offset`` (of
    ``buf`` in its file) go into error messages; copies are charged to ``budget`` when one is
    given.
    """
    u8 = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    size = u8.size
    n = header_length(u8[:8], size, fmt=fmt, what=what, offset=offset, limit=limits.max_index_bytes)
    entries, _meta = parse_header(
        u8[8 : 8 + n].tobytes(),
        size - 8 - n,
        fmt=fmt,
        what=what,
        offset=offset,
        limits=limits,
    )
    data = u8[8 + n :]
    start = offset + 8 + n
    out: dict[str, np.ndarray] = {}
    for name, entry in entries.items():
        where = f"{what} tensor {name!r}" if what != "file" else f"tensor {name!r}"
        b, e = entry[2], entry[3]
        out[name] = tensor_of(
            data[b:e], entry, copy=copy, fmt=fmt, where=where, offset=start + b, budget=budget
        )
    return out


def parse_metadata(buf: Any, *, fmt: str = FMT) -> dict[str, str]:
    """The ``__metadata__`` object of the safetensors bytes in ``buf`` (``{}`` when absent)."""
    u8 = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if u8.size < 8:
        return {}
    n = int(u8[:8].view("<u8")[0])
    if n > MAX_HEADER or n > u8.size - 8:
        return {}  # parse() reports these
    head = jsonio.loads(u8[8 : 8 + n].tobytes(), fmt=fmt, what="header", offset=8)
    md = head.get("__metadata__") if isinstance(head, dict) else None
    if md is None:
        return {}
    if not isinstance(md, dict) or not all(isinstance(v, str) for v in md.values()):
        raise FormatError(
            describe(fmt, "__metadata__", offset=8, detail="must map strings to strings")
        )
    return dict(md)

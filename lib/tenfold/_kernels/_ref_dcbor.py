"""Reference twin of ``dcbor.pyx``: the strict deterministic-CBOR decoder in plain Python.

It accepts exactly the bytes the core deterministic encoding (RFC 8949 §4.2.1) produces for
some value: definite lengths, shortest integer and length heads, map keys in strictly
increasing bytewise order of their encodings, floats in the narrowest of half/single/double
that holds them exactly (NaN only as ``f9 7e00``), no tags, no simple values other than
false/true/null. Everything else raises :class:`~._cbortypes.CborReject` naming the rule, the
offset of the offending item's head and what is wrong. Every length is compared with the bytes
left before anything is built, and nesting deeper than ``max_depth`` is refused, so memory
and recursion are bounded by the input.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from ._cargs import cint
from ._cbortypes import DEPTH, DETERMINISM, DUPLICATE, SYNTAX, CborReject, Key

#: Largest ``max_depth`` either implementation accepts (bounds the C stack).
_MAX_DEPTH_LIMIT = 256

_HALF = struct.Struct(">e")
_SINGLE = struct.Struct(">f")
_DOUBLE = struct.Struct(">d")


def decode(data: object, max_depth: int) -> Any:
    """Decode the one deterministic CBOR item that fills ``data`` (a bytes-like object).

    Containers nested deeper than ``max_depth`` (the root item is at depth 1) are refused.
    Text strings become ``str``, byte strings ``bytes``, arrays ``list``, maps ``dict``; a map
    key that is not a text string becomes a :class:`~._cbortypes.Key`.
    """
    max_depth = cint(max_depth)
    if not 1 <= max_depth <= _MAX_DEPTH_LIMIT:
        raise ValueError(f"max_depth must be in 1..{_MAX_DEPTH_LIMIT}, got {max_depth}")
    buf = memoryview(data).cast("B").tobytes()  # type: ignore[arg-type]
    if not buf:
        raise CborReject(SYNTAX, 0, "empty input")
    value, end = _item(buf, 0, 1, max_depth)
    if end != len(buf):
        raise CborReject(SYNTAX, end, f"{len(buf) - end} trailing bytes after the item")
    return value


def _head(data: bytes, pos: int) -> tuple[int, int, int, int]:
    """Return ``(major, info, argument, next position)``; enforce shortest form."""
    n = len(data)
    if pos >= n:
        raise CborReject(SYNTAX, pos, "truncated: expected a data item")
    ib = data[pos]
    major = ib >> 5
    info = ib & 31
    if info < 24:
        return major, info, info, pos + 1
    if info == 31:
        what = "break code outside an indefinite item" if ib == 0xFF else "indefinite length"
        raise CborReject(SYNTAX, pos, what)
    if info > 27:
        raise CborReject(SYNTAX, pos, f"reserved additional information {info}")
    width = 1 << (info - 24)
    if pos + 1 + width > n:
        raise CborReject(SYNTAX, pos, "truncated head")
    arg = int.from_bytes(data[pos + 1 : pos + 1 + width], "big")
    if major != 7:
        smallest = 24 if width == 1 else 1 << (4 * width)
        if arg < smallest:
            raise CborReject(DETERMINISM, pos, f"non-shortest head: {arg} encoded in {width} bytes")
    return major, info, arg, pos + 1 + width


def _item(data: bytes, pos: int, depth: int, max_depth: int) -> tuple[Any, int]:
    # shortcuts for the commonest items of a manifest (same results as the general path)
    if pos < len(data):
        ib = data[pos]
        if ib < 0x18:
            return ib, pos + 1
        if 0x60 <= ib < 0x78 and pos + ib - 0x5F <= len(data):
            try:
                return data[pos + 1 : pos + ib - 0x5F].decode("utf-8"), pos + ib - 0x5F
            except UnicodeDecodeError:
                raise CborReject(SYNTAX, pos, "text string is not valid UTF-8") from None
    major, info, arg, p = _head(data, pos)
    if major == 0:
        return arg, p
    if major == 1:
        return -1 - arg, p
    if major in (2, 3):
        end = p + arg
        if end > len(data):
            raise CborReject(SYNTAX, pos, f"string of {arg} bytes runs past the end")
        raw = data[p:end]
        if major == 2:
            return raw, end
        try:
            return raw.decode("utf-8"), end
        except UnicodeDecodeError:
            raise CborReject(SYNTAX, pos, "text string is not valid UTF-8") from None
    if major == 4:
        if depth > max_depth:
            raise CborReject(DEPTH, pos, f"nested deeper than {max_depth} levels")
        if arg > len(data) - p:  # every element takes at least one byte
            raise CborReject(SYNTAX, pos, f"array of {arg} items runs past the end")
        out = []
        for _ in range(arg):
            v, p = _item(data, p, depth + 1, max_depth)
            out.append(v)
        return out, p
    if major == 5:
        return _map(data, pos, arg, p, depth, max_depth)
    if major == 6:
        raise CborReject(SYNTAX, pos, f"tag {arg} (tags are not allowed)")
    return _simple(data, pos, info, arg, p)


def _map(data: bytes, pos: int, arg: int, p: int, depth: int, max_depth: int) -> tuple[Any, int]:
    """The map of ``arg`` pairs whose head is at ``pos`` and whose first key is at ``p``."""
    if depth > max_depth:
        raise CborReject(DEPTH, pos, f"nested deeper than {max_depth} levels")
    if arg > (len(data) - p) // 2:
        raise CborReject(SYNTAX, pos, f"map of {arg} pairs runs past the end")
    result: dict[Any, Any] = {}
    prev = b""
    for i in range(arg):
        kpos = p
        k, p = _item(data, p, depth + 1, max_depth)
        raw_key = data[kpos:p]
        if i:
            if raw_key == prev:
                raise CborReject(DUPLICATE, kpos, f"duplicate map key {k!r}"[:120])
            if raw_key < prev:
                raise CborReject(DETERMINISM, kpos, f"map key {k!r} out of order"[:120])
        prev = raw_key
        if type(k) is not str:
            k = Key(k, raw_key)
        v, p = _item(data, p, depth + 1, max_depth)
        result[k] = v
    return result, p


def _simple(data: bytes, pos: int, info: int, arg: int, p: int) -> tuple[Any, int]:
    """Major type 7 (head at ``pos``, ending at ``p``): false, true, null and floats."""
    if info < 24:
        if info == 20:
            return False, p
        if info == 21:
            return True, p
        if info == 22:
            return None, p
        raise CborReject(SYNTAX, pos, f"simple value {info} is not allowed")
    if info == 24:
        raise CborReject(SYNTAX, pos, f"simple value {arg} is not allowed")
    raw = data[pos + 1 : p]
    value: float
    if info == 25:
        value = _HALF.unpack(raw)[0]
        if math.isnan(value) and raw != b"\x7e\x00":
            raise CborReject(DETERMINISM, pos, "NaN other than f9 7e00")
        return value, p
    if info == 26:
        value = _SINGLE.unpack(raw)[0]
        narrower = _fits(_HALF, value)
    else:
        value = _DOUBLE.unpack(raw)[0]
        narrower = _fits(_HALF, value) or _fits(_SINGLE, value)
    if math.isnan(value) or narrower:
        raise CborReject(DETERMINISM, pos, f"float {value!r} not in its shortest form")
    return value, p


def _fits(fmt: struct.Struct, x: float) -> bool:
    """True when ``x`` is exactly representable in ``fmt`` (half or single; infinities are)."""
    try:
        return bool(fmt.unpack(fmt.pack(x))[0] == x)
    except OverflowError:
        return False

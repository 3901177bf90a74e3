"""Deterministic CBOR (RFC 8949 §4.2.1, "core deterministic encoding") for zTensor v2 manifests.

The decoder is strict: it accepts exactly the bytes the deterministic encoder produces for some
value and refuses everything else with a :class:`CborReject` that names the broken rule
(``cbor-syntax``, ``cbor-deterministic``, ``cbor-duplicate-key``, ``cbor-depth``). It never
allocates more than the input's size suggests (every length is checked against the bytes
left before anything is built), and nesting is bounded, so it cannot be made to recurse deeply.

The encoder writes definite lengths, shortest integer heads, map keys sorted by the bytes of
their encodings, and each float in the narrowest of half/single/double that holds it exactly
(NaN as ``f9 7e00``).

Map keys that are not text strings are kept as :class:`Key` (the key's value and its encoded
bytes), so maps with integer, array or map keys survive the round trip and compare by bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import Any

__all__ = ["CborReject", "Key", "decode", "encode", "MAX_DEPTH"]

#: Containers nested deeper than this, counted from the root item (depth 1), are refused.
MAX_DEPTH = 32


class CborReject(Exception):
    """Why a manifest is not deterministic CBOR: ``rule``, ``offset`` (relative), ``detail``."""

    def __init__(self, rule: str, offset: int, detail: str) -> None:
        super().__init__(f"{detail} at byte {offset}")
        self.rule = rule
        self.offset = offset
        self.detail = detail


class Key:
    """A map key that is not a text string (kept with its exact encoding)."""

    __slots__ = ("value", "raw")

    def __init__(self, value: Any, raw: bytes) -> None:
        self.value = value
        self.raw = raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other.raw == self.raw

    def __repr__(self) -> str:
        return f"Key({self.value!r})"


_SYNTAX = "cbor-syntax"
_DETERMINISM = "cbor-deterministic"
_DUPLICATE = "cbor-duplicate-key"
_DEPTH = "cbor-depth"

_HALF = struct.Struct(">e")
_SINGLE = struct.Struct(">f")
_DOUBLE = struct.Struct(">d")


def decode(data: bytes) -> Any:
    """Decode one deterministic CBOR item that fills ``data`` exactly."""
    if not data:
        raise CborReject(_SYNTAX, 0, "empty input")
    value, end = _item(data, 0, 1)
    if end != len(data):
        raise CborReject(_SYNTAX, end, f"{len(data) - end} trailing bytes after the item")
    return value


def _head(data: bytes, pos: int) -> tuple[int, int, int, int]:
    """Return ``(major, info, argument, next position)``; enforce shortest form."""
    n = len(data)
    if pos >= n:
        raise CborReject(_SYNTAX, pos, "truncated: expected a data item")
    ib = data[pos]
    major = ib >> 5
    info = ib & 31
    if info < 24:
        return major, info, info, pos + 1
    if info == 31:
        what = "break code outside an indefinite item" if ib == 0xFF else "indefinite length"
        raise CborReject(_SYNTAX, pos, what)
    if info > 27:
        raise CborReject(_SYNTAX, pos, f"reserved additional information {info}")
    width = 1 << (info - 24)
    if pos + 1 + width > n:
        raise CborReject(_SYNTAX, pos, "truncated head")
    arg = int.from_bytes(data[pos + 1 : pos + 1 + width], "big")
    if major != 7:
        smallest = 24 if width == 1 else 1 << (4 * width)
        if arg < smallest:
            raise CborReject(
                _DETERMINISM, pos, f"non-shortest head: {arg} encoded in {width} bytes"
            )
    return major, info, arg, pos + 1 + width


def _item(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    # Fast paths for the two commonest items of a manifest: short text and small integers.
    if pos < len(data):
        ib = data[pos]
        if 0x60 <= ib < 0x78:
            end = pos + 1 + ib - 0x60
            if end <= len(data):
                try:
                    return data[pos + 1 : end].decode("utf-8"), end
                except UnicodeDecodeError:
                    raise CborReject(_SYNTAX, pos, "text string is not valid UTF-8") from None
        elif ib < 0x18:
            return ib, pos + 1
    major, info, arg, p = _head(data, pos)
    if major == 0:
        return arg, p
    if major == 1:
        return -1 - arg, p
    if major in (2, 3):
        end = p + arg
        if end > len(data):
            raise CborReject(_SYNTAX, pos, f"string of {arg} bytes runs past the end")
        raw = data[p:end]
        if major == 2:
            return bytes(raw), end
        try:
            return raw.decode("utf-8"), end
        except UnicodeDecodeError:
            raise CborReject(_SYNTAX, pos, "text string is not valid UTF-8") from None
    if major == 4:
        if depth > MAX_DEPTH:
            raise CborReject(_DEPTH, pos, f"nested deeper than {MAX_DEPTH} levels")
        if arg > len(data) - p:  # every element takes at least one byte
            raise CborReject(_SYNTAX, pos, f"array of {arg} items runs past the end")
        out = []
        for _ in range(arg):
            v, p = _item(data, p, depth + 1)
            out.append(v)
        return out, p
    if major == 5:
        if depth > MAX_DEPTH:
            raise CborReject(_DEPTH, pos, f"nested deeper than {MAX_DEPTH} levels")
        if arg > (len(data) - p) // 2:
            raise CborReject(_SYNTAX, pos, f"map of {arg} pairs runs past the end")
        result: dict[Any, Any] = {}
        prev = b""
        for i in range(arg):
            kpos = p
            k, p = _item(data, p, depth + 1)
            raw_key = data[kpos:p]
            if i:
                if raw_key == prev:
                    raise CborReject(_DUPLICATE, kpos, f"duplicate map key {k!r}"[:120])
                if raw_key < prev:
                    raise CborReject(_DETERMINISM, kpos, f"map key {k!r} out of order"[:120])
            prev = raw_key
            if type(k) is not str:
                k = Key(k, bytes(raw_key))
            v, p = _item(data, p, depth + 1)
            result[k] = v
        return result, p
    if major == 6:
        raise CborReject(_SYNTAX, pos, f"tag {arg} (tags are not allowed)")
    # major 7: simple values and floats
    if info < 24:
        if info == 20:
            return False, p
        if info == 21:
            return True, p
        if info == 22:
            return None, p
        raise CborReject(_SYNTAX, pos, f"simple value {info} is not allowed")
    if info == 24:
        raise CborReject(_SYNTAX, pos, f"simple value {arg} is not allowed")
    raw = data[pos + 1 : p]
    if info == 25:
        value = _HALF.unpack(raw)[0]
        if math.isnan(value) and raw != b"\x7e\x00":
            raise CborReject(_DETERMINISM, pos, "NaN other than f9 7e00")
        return value, p
    if info == 26:
        value = _SINGLE.unpack(raw)[0]
    else:
        value = _DOUBLE.unpack(raw)[0]
    if math.isnan(value) or _float_bytes(value) != data[pos:p]:
        raise CborReject(_DETERMINISM, pos, f"float {value!r} not in its shortest form")
    return value, p


def _float_bytes(x: float) -> bytes:
    if math.isnan(x):
        return b"\xf9\x7e\x00"
    try:
        h = _HALF.pack(x)
        if _HALF.unpack(h)[0] == x:
            return b"\xf9" + h
    except OverflowError:
        pass
    try:
        s = _SINGLE.pack(x)
        if _SINGLE.unpack(s)[0] == x:
            return b"\xfa" + s
    except OverflowError:
        pass
    return b"\xfb" + _DOUBLE.pack(x)


def _ehead(major: int, n: int) -> bytes:
    m = major << 5
    if n < 24:
        return bytes((m | n,))
    if n < 0x100:
        return bytes((m | 24, n))
    if n < 0x10000:
        return bytes((m | 25,)) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes((m | 26,)) + n.to_bytes(4, "big")
    if n < 1 << 64:
        return bytes((m | 27,)) + n.to_bytes(8, "big")
    raise ValueError(f"cbor: integer {n} does not fit 64 bits")


def encode(obj: Any) -> bytes:
    """Deterministic encoding of ``obj`` (None, bool, int, float, str, bytes, list, dict, Key).

    >>> encode({"b": 1, "aa": [1.5, None]}).hex()
    'a261620162616182f93e00f6'
    """
    out = bytearray()
    _enc(obj, out)
    return bytes(out)


def _enc(obj: Any, out: bytearray) -> None:
    t = type(obj)
    if t is str:
        b = obj.encode("utf-8")
        out += _ehead(3, len(b))
        out += b
    elif t is int:
        out += _ehead(0, obj) if obj >= 0 else _ehead(1, -1 - obj)
    elif t is dict or isinstance(obj, Mapping):
        items = []
        for k, v in obj.items():
            kb = k.raw if isinstance(k, Key) else encode(k)
            items.append((kb, v))
        items.sort(key=lambda kv: kv[0])
        out += _ehead(5, len(items))
        prev = None
        for kb, v in items:
            if kb == prev:
                raise ValueError("cbor: duplicate map key")
            prev = kb
            out += kb
            _enc(v, out)
    elif t is list or t is tuple:
        out += _ehead(4, len(obj))
        for v in obj:
            _enc(v, out)
    elif obj is None:
        out.append(0xF6)
    elif obj is True:
        out.append(0xF5)
    elif obj is False:
        out.append(0xF4)
    elif isinstance(obj, int):
        _enc(int(obj), out)
    elif isinstance(obj, float):
        out += _float_bytes(float(obj))
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        b = bytes(obj)
        out += _ehead(2, len(b))
        out += b
    elif isinstance(obj, Key):
        out += obj.raw
    else:
        raise TypeError(f"cbor: cannot encode {type(obj).__name__}")

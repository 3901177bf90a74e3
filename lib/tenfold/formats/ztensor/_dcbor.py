"""Deterministic CBOR (RFC 8949 §4.2.1, "core deterministic encoding") for zTensor v2 manifests.

The decoder is strict: it accepts exactly the bytes the deterministic encoder produces for some
value and refuses everything else with a :class:`CborReject` that names the broken rule
(``cbor-syntax``, ``cbor-deterministic``, ``cbor-duplicate-key``, ``cbor-depth``). It never
allocates more than the input's size suggests (every length is checked against the bytes
left before anything is built), and nesting is bounded, so it cannot be made to recurse deeply.
It is the ``dcbor`` kernel family: ``tenfold/_kernels/dcbor.pyx`` and its reference twin
``_ref_dcbor.py``, which is its executable specification.

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

from ... import _kernels
from ..._kernels._cbortypes import CborReject, Key

__all__ = ["CborReject", "Key", "decode", "encode", "MAX_DEPTH"]

#: Containers nested deeper than this, counted from the root item (depth 1), are refused.
MAX_DEPTH = 32

_HALF = struct.Struct(">e")
_SINGLE = struct.Struct(">f")
_DOUBLE = struct.Struct(">d")


def decode(data: object) -> Any:
    """Decode one deterministic CBOR item that fills ``data`` exactly (bytes-like).

    The work is done by the ``dcbor`` kernel family (compiled, or its reference twin
    ``tenfold._kernels._ref_dcbor`` under ``TENFOLD_PUREPYTHON=1``).
    """
    return _kernels.load("dcbor").decode(data, MAX_DEPTH)


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


#: The head of a major type with argument ``n`` (shortest form), for callers that assemble an
#: item from encoded pieces.
ehead = _ehead


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

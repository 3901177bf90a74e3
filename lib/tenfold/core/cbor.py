"""A small deterministic CBOR encoder and a bounded decoder front end.

The encoder writes exactly the bytes a format asks for: maps in the caller's key order, definite
or indefinite length (zTensor 0.1.4 writes ``0xBF ... 0xFF``), shortest integer heads, and
float64 for floats. Decoding uses ``cbor2`` behind a size limit, and turns every failure into a
:class:`~tenfold.errors.FormatError`.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from typing import Any

import cbor2

from ..errors import FormatError
from .bounds import check_limit

__all__ = ["encode", "decode"]


def _head(major: int, n: int) -> bytes:
    m = major << 5
    if n < 24:
        return bytes([m | n])
    if n < 1 << 8:
        return bytes([m | 24, n])
    if n < 1 << 16:
        return bytes([m | 25]) + n.to_bytes(2, "big")
    if n < 1 << 32:
        return bytes([m | 26]) + n.to_bytes(4, "big")
    if n < 1 << 64:
        return bytes([m | 27]) + n.to_bytes(8, "big")
    raise ValueError(f"cbor: integer {n} does not fit 64 bits")


def encode(obj: Any, *, indefinite_maps: bool = False) -> bytes:
    """Encode ``obj`` (None, bool, int, float, str, bytes, list/tuple, dict).

    >>> encode({"a": 1, "b": [1, 2]}).hex()
    'a26161016162820102'
    >>> encode({"a": 1}, indefinite_maps=True).hex()
    'bf616101ff'
    """
    out = bytearray()
    _enc(obj, out, indefinite_maps)
    return bytes(out)


def _enc(obj: Any, out: bytearray, indef: bool) -> None:
    if obj is None:
        out.append(0xF6)
    elif obj is True:
        out.append(0xF5)
    elif obj is False:
        out.append(0xF4)
    elif isinstance(obj, int):
        out += _head(0, obj) if obj >= 0 else _head(1, -1 - obj)
    elif isinstance(obj, float):
        out += b"\xfb" + struct.pack(">d", obj)
    elif isinstance(obj, str):
        data = obj.encode("utf-8")
        out += _head(3, len(data)) + data
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        out += _head(2, len(data)) + data
    elif isinstance(obj, (list, tuple)):
        out += _head(4, len(obj))
        for item in obj:
            _enc(item, out, indef)
    elif isinstance(obj, Mapping):
        out += b"\xbf" if indef else _head(5, len(obj))
        for k, v in obj.items():
            _enc(k, out, indef)
            _enc(v, out, indef)
        if indef:
            out.append(0xFF)
    else:
        raise TypeError(f"cbor: cannot encode {type(obj).__name__}")


def decode(data: object, *, fmt: str, what: str, offset: int, limit: int) -> Any:
    """Decode one CBOR item that must fill ``data`` exactly.

    Any malformation (truncation, bad head, trailing bytes, nesting too deep) becomes a
    :class:`FormatError` naming ``what`` and ``offset``; a block larger than ``limit`` is a
    :class:`LimitError` raised before parsing.
    """
    mv = memoryview(data)  # type: ignore[arg-type]
    check_limit(fmt, what, mv.nbytes, limit, offset=offset)
    raw = bytes(mv)
    try:
        stream = io.BytesIO(raw)
        obj = cbor2.CBORDecoder(stream).decode()
        end = stream.tell()
    except RecursionError:
        raise FormatError(
            fmt=fmt, obj=what, offset=offset, detail="CBOR nested too deeply"
        ) from None
    except Exception as exc:  # cbor2 raises several classes, all meaning "not valid CBOR"
        raise FormatError(fmt=fmt, obj=what, offset=offset, detail=f"invalid CBOR: {exc}") from None
    if end != len(raw):
        raise FormatError(
            fmt=fmt,
            obj=what,
            offset=offset + end,
            detail="trailing bytes after CBOR item",
            expected=len(raw),
            got=end,
        )
    return obj

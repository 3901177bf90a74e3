"""The protobuf wire format, as much of it as an ONNX model needs: tags, varints, fixed-width
numbers and length-delimited fields, every length checked against the message it lies in.

A message is a run of fields, each a *tag* (a varint: ``field_number << 3 | wire_type``) and
a value whose shape the wire type gives::

    wire type  value
    0  VARINT  1 to 10 bytes, 7 bits each, least significant group first, high bit = more
    1  I64     8 bytes little-endian (fixed64, sfixed64, double)
    2  LEN     a varint length, then that many bytes (string, bytes, message, packed repeated)
    5  I32     4 bytes little-endian (fixed32, sfixed32, float)
    3, 4       group start / end (deprecated since proto2, never used by ONNX): refused

A repeated numeric field may be *packed* (one LEN field of concatenated values, what ONNX's
``[packed = true]`` fields are written as) or not (one field per value); a reader must accept
both, in any mix. The reader here never recurses on its own: the ONNX walker
(:mod:`._model`) descends only into the messages it knows, so nesting depth is bounded by the
schema, never by the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import factory

__all__ = ["VARINT", "I64", "LEN", "I32", "Field", "varint", "fields", "packed_varints"]

VARINT, I64, LEN, I32 = 0, 1, 2, 5
_WIRE_NAMES = {VARINT: "varint", I64: "fixed64", LEN: "length-delimited", I32: "fixed32"}
#: The longest varint: ten 7-bit groups hold 64 bits (the tenth may carry only bit 63).
MAX_VARINT = 10

E = factory("onnx")

#: One field of a message: ``(number, wire type, value, start)``. ``value`` is the integer of
#: a varint, the offset of the 8 or 4 bytes of a fixed field, or ``(offset, length)`` of a
#: length-delimited one; ``start`` is the offset of the tag (what errors name).
Field = tuple[int, int, Any, int]


def varint(buf: Any, pos: int, end: int, what: str) -> tuple[int, int]:
    """The varint at ``buf[pos]`` (which must end before ``end``): ``(value, next pos)``.

    >>> varint(b"\\x96\\x01", 0, 2, "x")
    (150, 2)
    >>> varint(b"\\x96", 0, 1, "x")
    Traceback (most recent call last):
    ...
    tenfold.errors.TruncatedError: onnx: x at offset 0x0: varint: runs past the end of its \
message; expected a last byte (high bit clear) before offset 0x1, got 1 byte(s)
    """
    value = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise E.truncated(
                what,
                offset=start,
                field="varint",
                detail="runs past the end of its message",
                expected=f"a last byte (high bit clear) before offset {end:#x}",
                got=f"{pos - start} byte(s)",
            )
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if pos - start >= MAX_VARINT:
            raise E.format(
                what,
                offset=start,
                field="varint",
                detail="too long",
                expected=f"at most {MAX_VARINT} bytes",
                got=f"more than {MAX_VARINT}",
            )
    if value >> 64:
        raise E.format(
            what,
            offset=start,
            field="varint",
            detail="above 64 bits",
            expected="< 2**64",
            got=value,
        )
    return value, pos


def fields(buf: Any, start: int, end: int, what: str) -> Iterator[Field]:
    """Every field of the message in ``buf[start:end]``, in order (see :data:`Field`)."""
    pos = start
    while pos < end:
        at = pos
        tag = buf[pos]  # pos < end: in the message; a one-byte varint needs no more checks
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = varint(buf, pos, end, what)
        number, wire = tag >> 3, tag & 7
        if number == 0 or number >= 1 << 29:
            raise E.format(
                what,
                offset=at,
                field="field number",
                detail="out of range",
                expected="1 .. 2**29-1",
                got=number,
            )
        if wire == VARINT:
            if pos < end and buf[pos] < 0x80:
                value = buf[pos]
                pos += 1
            else:
                value, pos = varint(buf, pos, end, what)
            yield number, wire, value, at
        elif wire == LEN:
            if pos < end and buf[pos] < 0x80:
                n = buf[pos]
                pos += 1
            else:
                n, pos = varint(buf, pos, end, what)
            if n > end - pos:
                raise E.truncated(
                    what,
                    offset=at,
                    field=f"field {number} length",
                    detail="runs past the end of its message",
                    expected=f"<= {end - pos}",
                    got=n,
                )
            yield number, wire, (pos, n), at
            pos += n
        elif wire in (I64, I32):
            n = 8 if wire == I64 else 4
            if n > end - pos:
                raise E.truncated(
                    what,
                    offset=at,
                    field=f"field {number} ({_WIRE_NAMES[wire]})",
                    detail="runs past the end of its message",
                    expected=f"{n} bytes",
                    got=end - pos,
                )
            yield number, wire, pos, at
            pos += n
        else:
            raise E.format(
                what,
                offset=at,
                field=f"field {number} wire type",
                detail="not one ONNX uses (groups are refused)",
                expected="0 (varint), 1 (fixed64), 2 (length-delimited) or 5 (fixed32)",
                got=wire,
            )


def packed_varints(raw: np.ndarray, what: str, offset: int) -> np.ndarray:
    """The varints packed end to end in ``raw`` (``uint8``) as ``uint64`` (vectorised).

    >>> packed_varints(np.frombuffer(b"\\x01\\x96\\x01\\x7f", np.uint8), "x", 0).tolist()
    [1, 150, 127]
    """
    if raw.size == 0:
        return np.empty(0, np.uint64)
    last = (raw & 0x80) == 0
    if not last[-1]:
        raise E.truncated(
            what,
            offset=offset + raw.size - 1,
            field="packed varint",
            detail="runs past the end of its field",
            expected="a last byte (high bit clear)",
            got=int(raw[-1]),
        )
    ends = np.flatnonzero(last)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    longest = int(lengths.max())
    if longest > MAX_VARINT:
        at = int(starts[int(np.argmax(lengths))])
        raise E.format(
            what,
            offset=offset + at,
            field="packed varint",
            detail="too long",
            expected=f"at most {MAX_VARINT} bytes",
            got=longest,
        )
    if longest == MAX_VARINT:
        over = (lengths == MAX_VARINT) & (raw[ends] > 1)
        if over.any():
            at = int(starts[int(np.argmax(over))])
            raise E.format(
                what,
                offset=offset + at,
                field="packed varint",
                detail="above 64 bits",
                expected="a tenth byte of 0 or 1",
                got=int(raw[ends[int(np.argmax(over))]]),
            )
    if longest == 1:
        return raw.astype(np.uint64)
    shift = (np.arange(raw.size, dtype=np.int64) - np.repeat(starts, lengths)) * 7
    groups = (raw & 0x7F).astype(np.uint64) << shift.astype(np.uint64)
    out: np.ndarray = np.bitwise_or.reduceat(groups, starts)
    return out

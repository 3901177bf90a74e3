"""ONNX's descriptor in the registry (:mod:`tenfold.registry`). An ``.onnx`` file is a bare
protobuf ``ModelProto`` with no magic, so :func:`sniff` reads the first fields of the head as
one: ``ir_version`` (field 1, a small varint) first, as every protobuf serializer writes fields
in number order, then only ``ModelProto`` field numbers with their wire types, in ascending
order. Nothing else tenfold reads starts that way (every other format has a magic or a sniff
tried before)."""

from __future__ import annotations

from ...registry import Format, register

#: ``ModelProto`` fields: number -> wire type (0 varint, 2 length-delimited)
MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
#: fields that appear at most once (a serializer writes fields in number order, the repeated
#: ones together)
SINGLE = frozenset({1, 2, 3, 4, 5, 6, 7})
#: the IR versions a model may declare (1 .. 11 exist; room for a few more)
MAX_IR_VERSION = 32


def _varint(head: bytes, pos: int) -> tuple[int, int] | None:
    value = shift = 0
    for i in range(pos, min(pos + 10, len(head))):
        value |= (head[i] & 0x7F) << shift
        if head[i] < 0x80:
            return value, i + 1
        shift += 7
    return None


def sniff(head: bytes) -> bool:
    """True when ``head`` starts like a serialized ONNX ``ModelProto``: ``ir_version`` in
    1..32 first, then at least one more field (all that fit in ``head``) that is a
    ``ModelProto`` field of the right wire type, and text fields no longer than the head
    allows for a model (a length past ``head`` is accepted only for the graph and the
    functions, which hold the bulk)."""
    if len(head) < 4 or head[0] != 0x08:
        return False
    got = _varint(head, 1)
    if got is None or not 1 <= got[0] <= MAX_IR_VERSION:
        return False
    pos, seen, last = got[1], 1, 1
    while pos < len(head):
        tag = _varint(head, pos)
        if tag is None:
            return seen > 1
        number, wire = tag[0] >> 3, tag[0] & 7
        if MODEL_FIELDS.get(number) != wire or number < last or number == last in SINGLE:
            return False
        last = number
        value = _varint(head, tag[1])
        if value is None:
            return seen > 1
        seen += 1
        pos = value[1] + (value[0] if wire == 2 else 0)
        if wire == 2 and pos > len(head) and number not in (7, 20, 25) and value[0] > 1 << 20:
            return False
    return seen > 1


FORMAT = register(
    Format(
        name="onnx",
        description="ONNX model (initializers)",
        suffixes=(".onnx",),
        sniff=sniff,
        package="tenfold.formats.onnx",
        metadata="str",
        follows_links=True,
        hooks={
            "convert_source": "tenfold.formats.onnx._convert:source",
            "convert_fallback": "tenfold.formats.onnx._convert:claims",
            "version": "tenfold.formats.onnx._convert:version",
            "metadata": "tenfold.formats.onnx._convert:metadata",
        },
    )
)

"""Fixed-layout records as NumPy structured dtypes.

Every header, table row or footer of a format is declared once with :func:`record`: explicit byte
order in each field, explicit offsets and itemsize, checked when the module is imported. Reading
one is then a zero-copy :func:`numpy.frombuffer` over the file's memory map, also at unaligned
offsets. :class:`Record` adds the equivalent :mod:`struct` layout, so that a reader and a writer
unpack and pack a header from the same definition.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["record", "Record"]


def record(
    name: str, fields: Sequence[tuple[str, str] | tuple[str, str, int]], itemsize: int
) -> np.dtype:
    """Declare a packed record.

    ``fields`` are ``(name, dtype)`` or ``(name, dtype, offset)``; without offsets the fields
    are packed back to back. Every multi-byte dtype must state its byte order, and the record
    must end exactly at ``itemsize`` (trailing padding is allowed only if declared by the
    caller's ``itemsize``).

    >>> hdr = record("demo", [("magic", "S4"), ("n", "<u4")], 8)
    >>> hdr.itemsize, hdr.fields["n"][1]
    (8, 4)
    """
    names, formats, offsets = [], [], []
    pos = 0
    for f in fields:
        fname, fmt = f[0], f[1]
        dt = np.dtype(fmt)
        if dt.itemsize > 1 and dt.kind not in "SV" and str(fmt)[:1] not in "<>":
            raise AssertionError(f"record {name}: field {fname} needs an explicit byte order")
        off = f[2] if len(f) == 3 else pos  # type: ignore[misc]
        names.append(fname)
        formats.append(dt)
        offsets.append(off)
        pos = off + dt.itemsize
    if pos > itemsize:
        raise AssertionError(f"record {name}: fields end at {pos}, past itemsize {itemsize}")
    dt = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": itemsize})
    assert dt.itemsize == itemsize, (name, dt.itemsize, itemsize)
    return dt


_STRUCT_CODE = {
    ("u", 1): "B",
    ("i", 1): "b",
    ("u", 2): "H",
    ("i", 2): "h",
    ("u", 4): "I",
    ("i", 4): "i",
    ("u", 8): "Q",
    ("i", 8): "q",
    ("f", 4): "f",
    ("f", 8): "d",
}


class Record:
    """A fixed record declared once, for NumPy views and for ``struct`` packing alike.

    ``dtype`` is the structured dtype (:func:`record`), ``struct`` the equivalent
    :class:`struct.Struct` (``V`` fields and gaps become pad bytes and are not values),
    ``names`` the value fields in order, :meth:`offset` a field's byte offset. Every field of
    more than one byte must share one byte order.

    >>> hdr = Record("demo", [("magic", "S4"), ("n", ">u4"), ("pad", "V4")], 12)
    >>> hdr.struct.format, hdr.names, hdr.offset("n")
    ('>4sI4x', ('magic', 'n'), 4)
    >>> hdr.pack(b"DEMO", 7)
    b'DEMO\\x00\\x00\\x00\\x07\\x00\\x00\\x00\\x00'
    >>> hdr.unpack(b"DEMO\\x00\\x00\\x00\\x07....")
    (b'DEMO', 7)
    """

    def __init__(
        self, name: str, fields: Sequence[tuple[str, str] | tuple[str, str, int]], itemsize: int
    ) -> None:
        self.name = name
        self.dtype = record(name, fields, itemsize)
        self.size = itemsize
        dt_fields: dict[str, Any] = dict(self.dtype.fields or {})
        order = {np.dtype(f[1]).byteorder for f in fields if np.dtype(f[1]).byteorder in "<>"}
        if len(order) > 1:
            raise AssertionError(f"record {name}: mixed byte orders")
        code: list[str] = [order.pop() if order else "<"]
        names: list[str] = []
        pos = 0
        for fname in self.dtype.names or ():
            fdt, off = dt_fields[fname][:2]
            if off > pos:
                code.append(f"{off - pos}x")
            if fdt.kind == "V":
                code.append(f"{fdt.itemsize}x")
            else:
                code.append(
                    f"{fdt.itemsize}s" if fdt.kind == "S" else _STRUCT_CODE[fdt.kind, fdt.itemsize]
                )
                names.append(fname)
            pos = off + fdt.itemsize
        if itemsize > pos:
            code.append(f"{itemsize - pos}x")
        self.struct = struct.Struct("".join(code))
        assert self.struct.size == itemsize, (name, self.struct.size, itemsize)
        self.names: tuple[str, ...] = tuple(names)
        self._offsets = {n: int(dt_fields[n][1]) for n in self.dtype.names or ()}

    def offset(self, field: str) -> int:
        """Byte offset of ``field`` from the start of the record."""
        return self._offsets[field]

    def field_size(self, field: str) -> int:
        """Size in bytes of ``field``."""
        fields: dict[str, Any] = dict(self.dtype.fields or {})
        return int(fields[field][0].itemsize)

    def pack(self, *values: object) -> bytes:
        """The record's bytes from its values, in field order."""
        return self.struct.pack(*values)

    def unpack(self, buf: Any, offset: int = 0) -> tuple[Any, ...]:
        """The values of the record at ``offset`` of ``buf``, in field order."""
        return self.struct.unpack_from(buf, offset)

    def __repr__(self) -> str:
        return f"Record({self.name!r}, {self.struct.format!r})"

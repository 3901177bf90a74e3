"""Fixed-layout records as NumPy structured dtypes.

Every header, table row or footer of a format is declared once with :func:`record`: explicit byte
order in each field, explicit offsets and itemsize, checked when the module is imported. Reading
one is then a zero-copy :func:`numpy.frombuffer` over the file's memory map (:func:`view`), also at
unaligned offsets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import TruncatedError

__all__ = ["record", "view", "unpack_one"]


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


def view(
    buf: object, dtype: np.dtype, count: int, offset: int, *, fmt: str, what: str
) -> np.ndarray:
    """Zero-copy array of ``count`` records at ``offset`` of ``buf``, bounds-checked.

    Works at any offset (unaligned access is handled by NumPy).
    """
    size = memoryview(buf).nbytes  # type: ignore[arg-type]
    need = count * dtype.itemsize
    if offset < 0 or count < 0 or offset + need > size:
        raise TruncatedError(
            fmt=fmt,
            obj=what,
            offset=max(offset, 0),
            detail="ends past end of file",
            expected=f"{need} bytes",
            got=max(size - offset, 0),
        )
    return np.frombuffer(buf, dtype=dtype, count=count, offset=offset)  # type: ignore[call-overload]


def unpack_one(buf: object, dtype: np.dtype, offset: int, *, fmt: str, what: str) -> dict:
    """Read one record as a dict of Python scalars (bytes fields stay bytes)."""
    rec = view(buf, dtype, 1, offset, fmt=fmt, what=what)[0]
    names = dtype.names or ()
    return {n: rec[n].item() if hasattr(rec[n], "item") else rec[n] for n in names}

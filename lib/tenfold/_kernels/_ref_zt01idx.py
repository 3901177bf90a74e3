"""Reference twin of ``zt01idx.pyx``: the same walk over the CBOR bytes, in Python."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._cargs import ssize, u64

_KEYS = {
    b"name": "name",
    b"offset": "offset",
    b"size": "size",
    b"dtype": "dtype",
    b"layout": "layout",
    b"shape": "shape",
    b"encoding": "encoding",
    b"data_endianness": "data_endianness",
}
_REQUIRED = frozenset({"name", "offset", "size", "dtype", "shape", "encoding"})
_WIDTH = {24: 1, 25: 2, 26: 4, 27: 8}


class _Decline(Exception):
    """Not the common case: the caller runs the full parse."""


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.i = 0

    def head(self, major: int) -> int | None:
        """The argument of a head of ``major`` (None: indefinite container)."""
        d, i = self.data, self.i
        if i >= len(d) or d[i] >> 5 != major:
            raise _Decline
        ai = d[i] & 31
        self.i = i + 1
        if ai < 24:
            return ai
        if ai == 31:
            if major in (4, 5):
                return None
            raise _Decline
        w = _WIDTH.get(ai)
        if w is None or len(d) - self.i < w:
            raise _Decline
        v = int.from_bytes(d[self.i : self.i + w], "big")
        self.i += w
        return v

    def text(self) -> bytes:
        n = self.head(3)
        if n is None or n > len(self.data) - self.i:
            raise _Decline
        s = self.data[self.i : self.i + n]
        self.i += n
        return s

    def end(self) -> bool:
        if self.i < len(self.data) and self.data[self.i] == 0xFF:
            self.i += 1
            return True
        return False

    def items(self, count: int | None, limit: int | None = None) -> Any:
        """Yield once per element of a container of ``count`` elements (None: indefinite)."""
        k = 0
        while not (self.end() if count is None else k == count):
            if limit is not None and k >= limit:
                raise _Decline
            yield k
            k += 1


def _utf8(s: bytes) -> str:
    try:
        return s.decode("utf-8")
    except UnicodeDecodeError:
        raise _Decline from None


def parse_dense(
    buf: object,
    index_start: int,
    max_objects: int,
    max_ndim: int,
    max_nbytes: int,
    dtypes: dict[str, tuple[str, Any]],
    make: Callable[..., Any] | None,
) -> tuple[list[Any], bool] | None:
    """``(records, ordered)`` for an index of well-formed dense entries, else None (see
    ``zt01idx.pyx``)."""
    index_start, max_nbytes = u64(index_start), u64(max_nbytes)
    max_objects, max_ndim = ssize(max_objects), ssize(max_ndim)
    if not isinstance(dtypes, dict):
        raise TypeError("dtypes must be a dict")
    data = bytes(memoryview(buf).cast("B"))  # type: ignore[arg-type]
    try:
        return _parse(data, index_start, max_objects, max_ndim, max_nbytes, dtypes, make)
    except _Decline:
        return None


def _parse(
    data: bytes,
    index_start: int,
    max_objects: int,
    max_ndim: int,
    max_nbytes: int,
    dtypes: dict[str, tuple[str, Any]],
    make: Callable[..., Any] | None,
) -> tuple[list[Any], bool]:
    c = _Cursor(data)
    count = c.head(4)
    if count is not None and count > len(data) - c.i:
        raise _Decline
    out: list[Any] = []
    names: set[str] = set()
    ordered = True
    prev_end = 0
    for pos in c.items(count, max_objects):
        fields = _fields(c, max_ndim, dtypes)
        dtype_name, np_dtype = fields["dtype"]
        itemsize = np_dtype.itemsize
        numel = 1
        for d in fields["shape"]:
            numel *= d
            if d == 0 or numel * itemsize > max_nbytes:
                raise _Decline
        off, size = fields["offset"], fields["size"]
        if fields["encoding"] == "raw" and size != numel * itemsize:
            raise _Decline
        if off % 64 or (off < 64 and size) or off + size > index_start:
            raise _Decline
        name = fields["name"]
        if name in names:
            raise _Decline
        names.add(name)
        if size:
            if off < prev_end:
                ordered = False
            prev_end = max(prev_end, off + size)
        shape, enc, endian = tuple(fields["shape"]), fields["encoding"], fields["data_endianness"]
        if make is None:  # the compact record
            out.append((name, dtype_name, np_dtype, shape, enc, off, size, endian, pos))
        else:
            out.append(make(name, dtype_name, np_dtype, shape, "dense", enc, off, size, endian,
                            None, None, None, None, None, {}, {}, pos))  # fmt: skip
    if c.i != len(data):
        raise _Decline
    return out, ordered


def _fields(c: _Cursor, max_ndim: int, dtypes: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """The fields of one entry (a map); declines what the kernel declines."""
    npairs = c.head(5)
    fields: dict[str, Any] = {"data_endianness": "little"}
    seen: set[str] = set()
    for _ in c.items(npairs):
        key = _KEYS.get(c.text())
        if key is None or key in seen:
            raise _Decline
        seen.add(key)
        if key in ("offset", "size"):
            v = c.head(0)
            assert v is not None  # major 0 is never indefinite
            fields[key] = v
        elif key == "shape":
            ndim = c.head(4)
            if ndim is not None and ndim > max_ndim:
                raise _Decline
            dims = []
            for _k in c.items(ndim, max_ndim):
                dims.append(c.head(0))
            fields[key] = dims
        else:
            s = c.text()
            if key == "name":
                fields[key] = _utf8(s)
            elif key == "dtype":
                got = dtypes.get(_utf8(s))
                if got is None:
                    raise _Decline
                fields[key] = got
            elif key == "layout":
                if s != b"dense":
                    raise _Decline
            elif key == "encoding":
                if s not in (b"raw", b"zstd"):
                    raise _Decline
                fields[key] = s.decode()
            elif s not in (b"little", b"big"):
                raise _Decline
            else:
                fields[key] = s.decode()
    if not _REQUIRED <= seen:
        raise _Decline
    return fields

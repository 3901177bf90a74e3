"""The GGUF header parser: key/values and tensor infos (see :mod:`._spec` for the layout).

Every count and length is checked against the bytes left in the file and tenfold's limits
(:class:`tenfold.core.bounds.Limits`) before anything is allocated for it; every error names
the field, its offset, and what was expected and found.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Limits, align_up, check_limit, checked_numel
from ...core.mapped import MappedFile
from ...errors import factory
from . import _spec as S

__all__ = ["Tensor", "Header", "parse"]

FMT = "gguf"
E = factory(FMT)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
#: smallest encoding of one value of each kind (a string: its length; an array: type + count)
_MIN_SIZE = {**{k: v.itemsize for k, v in S.SCALARS.items()}, S.STRING: 8, S.ARRAY: 12}
#: a tensor info is at least a name length, n_dims, type and offset
_MIN_INFO = 8 + 4 + 4 + 8
#: a key/value is at least a key length, a type and a one-byte value
_MIN_KV = 8 + 4 + 1


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One tensor info: ``ne`` as stored (innermost first), ``shape`` the NumPy shape of its
    elements (``ne`` reversed), ``offset`` the absolute file offset of its bytes, ``info_at``
    where its info's ``offset`` field is."""

    name: str
    type: S.GGMLType
    ne: tuple[int, ...]
    offset: int
    nbytes: int
    info_at: int

    @property
    def shape(self) -> tuple[int, ...]:
        return self.ne[::-1]

    @property
    def block_shape(self) -> tuple[int, ...]:
        """The shape of the array a read gives: the element shape, or for a block-quantised
        type the blocks (the last axis divided by the block size)."""
        shape = self.shape
        if self.type.block == 1:
            return shape
        return (*shape[:-1], shape[-1] // self.type.block)


@dataclasses.dataclass(frozen=True)
class Header:
    """What the header says: the version, the key/values (JSON-able values, in file order),
    their GGUF types (``"uint32"``, ``"array[string]"`` ...) and offsets, the tensors (in file
    order), the alignment and where the data section starts."""

    version: int
    metadata: dict[str, Any]
    types: dict[str, str]
    key_offsets: dict[str, int]
    tensors: dict[str, Tensor]
    alignment: int
    data_start: int
    header_end: int


class _Cursor:
    """Reads the header's fields in order, each checked to lie in the file (and under the
    index-size limit) before it is read."""

    def __init__(self, mf: MappedFile, limits: Limits) -> None:
        self.mf = mf
        self.size = mf.size
        self.limit = limits.max_index_bytes
        self.pos = 0
        if type(mf) is MappedFile:  # a map or a buffer: the bytes in place, no copy
            self.buf: Any = memoryview(mf.buffer())  # type: ignore[arg-type]
            self.have = self.size
        else:  # a copying source (pread, remote): a window that grows as the header needs
            self.buf = b""
            self.have = 0

    def need(self, n: int, obj: str, field: str) -> int:
        """The offset of the next ``n`` bytes (advanced past them), after checking them."""
        pos = self.pos
        end = pos + n
        if end > self.size:
            raise E.truncated(
                obj,
                field=field,
                offset=pos,
                detail=f"truncated {field}",
                expected=f"{n} bytes",
                got=f"{self.size - pos} left in the file",
            )
        if end > self.limit:
            check_limit(FMT, "header", end, self.limit, field="header bytes", offset=pos)
        if end > self.have:
            grow = min(self.size, self.limit, max(end, 2 * self.have, 1 << 16))
            self.buf = self.mf.bytes(0, grow, "header")
            self.have = grow
        self.pos = end
        return pos

    def u32(self, obj: str, field: str) -> int:
        at = self.need(4, obj, field)  # first: it may grow the buffer
        return int(_U32.unpack_from(self.buf, at)[0])

    def u64(self, obj: str, field: str) -> int:
        at = self.need(8, obj, field)
        return int(_U64.unpack_from(self.buf, at)[0])

    def count(self, obj: str, field: str, each: int, limit: int) -> int:
        """A u64 count of items of at least ``each`` bytes: within ``limit`` and the bytes
        left in the file."""
        at = self.pos
        n = self.u64(obj, field)
        check_limit(FMT, obj, n, limit, field=field, offset=at)
        left = self.size - self.pos
        if n * each > left:
            raise E.truncated(
                obj,
                field=field,
                offset=at,
                detail=f"{field} larger than the file",
                expected=f"<= {left // each} (items of at least {each} bytes in {left} left)",
                got=n,
            )
        return n

    def string(self, obj: str, field: str) -> str:
        at = self.pos
        n = self.u64(obj, f"{field} length")
        left = self.size - self.pos
        if n > left:
            raise E.truncated(
                obj,
                field=f"{field} length",
                offset=at,
                detail=f"{field} length past the end of the file",
                expected=f"<= {left}",
                got=n,
            )
        start = self.need(n, obj, field)
        try:
            return str(self.buf[start : start + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise E.format(
                obj,
                field=field,
                offset=start + exc.start,
                detail=f"{field} is not UTF-8",
                expected="UTF-8",
                got=bytes(self.buf[start + exc.start : start + min(n, exc.start + 8)]),
            ) from None

    def strings(self, n: int, obj: str, field: str) -> list[str]:
        """``n`` strings in a row (an array's values). A tight loop over the bytes already in
        place, under the file size and the index-size limit; a string that crosses either,
        or the end of the bytes in place, or is not UTF-8, goes through :meth:`string`, which
        grows the window or raises its error (every check is made, once per string)."""
        out: list[str] = []
        append = out.append
        unpack = _U64.unpack_from
        while len(out) < n:
            buf, pos = self.buf, self.pos
            bound = min(self.have, self.size, self.limit)
            try:
                for _ in range(n - len(out)):
                    start = pos + 8
                    if start > bound:
                        break
                    end = start + unpack(buf, pos)[0]
                    if end > bound:
                        break
                    append(str(buf[start:end], "utf-8"))
                    pos = end
            except UnicodeDecodeError:
                pass
            self.pos = pos
            if len(out) < n:
                append(self.string(obj, field))
        return out

    def array(self, dt: np.dtype, n: int, obj: str, field: str) -> np.ndarray:
        start = self.need(n * dt.itemsize, obj, field)
        return np.frombuffer(self.buf, dt, n, start)


def parse(mf: MappedFile, limits: Limits = DEFAULT_LIMITS) -> Header:
    """Parse the header of the GGUF file ``mf``; every error a :mod:`tenfold.errors` one."""
    cur = _Cursor(mf, limits)
    at = cur.need(4, "header", "magic")
    magic = bytes(cur.buf[at : at + 4])
    if magic != S.MAGIC:
        raise E.format("header", field="magic", offset=0, expected=S.MAGIC, got=magic)
    version = _version(cur.u32("header", "version"))
    n_tensors = cur.count("header", "tensor_count", _MIN_INFO, limits.max_objects)
    n_kv = cur.count("header", "kv_count", _MIN_KV, limits.max_objects)
    metadata: dict[str, Any] = {}
    types: dict[str, str] = {}
    offsets: dict[str, int] = {}
    for i in range(n_kv):
        at = cur.pos
        key = cur.string(f"key/value {i}", "key")
        obj = f"key {key!r}"
        if key in metadata:
            raise E.format(obj, offset=at, detail="duplicate key", expected="unique keys")
        vtype = _value_type(cur, obj, "value_type")
        metadata[key], types[key] = _value(cur, obj, vtype, limits, 0)
        offsets[key] = at
    alignment = _alignment(metadata, types, offsets)
    infos = [_tensor_info(cur, i, limits) for i in range(n_tensors)]
    header_end = cur.pos
    data_start = align_up(header_end, alignment)
    tensors = _place(infos, data_start, alignment, mf.size)
    return Header(version, metadata, types, offsets, tensors, alignment, data_start, header_end)


def _version(v: int) -> int:
    if v in S.VERSIONS:
        return v
    swapped = int.from_bytes(v.to_bytes(4, "little"), "big")
    if v & 0xFFFF == 0 and swapped in (1, *S.VERSIONS):
        raise E.unsupported(
            "header",
            field="version",
            offset=4,
            detail="a big-endian GGUF file; tenfold reads little-endian GGUF only",
            expected="little-endian version 2 or 3",
            got=f"big-endian version {swapped}",
        )
    if v == 1:
        raise E.unsupported(
            "header",
            field="version",
            offset=4,
            detail="GGUF v1 (32-bit counts and lengths) is not supported; convert it with a "
            "current llama.cpp",
            expected="2 or 3",
            got=1,
        )
    raise E.unsupported("header", field="version", offset=4, expected="2 or 3", got=v)


def _value_type(cur: _Cursor, obj: str, field: str) -> int:
    at = cur.pos
    t = cur.u32(obj, field)
    if t not in S.VALUE_TYPES:
        raise E.format(
            obj,
            field=field,
            offset=at,
            detail=f"unknown {field}",
            expected=f"one of 0..{len(S.VALUE_TYPES) - 1}",
            got=t,
        )
    return t


def _value(cur: _Cursor, obj: str, vtype: int, limits: Limits, depth: int) -> tuple[Any, str]:
    """One value of type ``vtype`` at the cursor: (JSON-able value, GGUF type name)."""
    if vtype == S.STRING:
        return cur.string(obj, "value"), "string"
    if vtype != S.ARRAY:
        at = cur.pos
        v = cur.array(S.SCALARS[vtype], 1, obj, "value")[0].item()
        if vtype == S.BOOL:
            v = _bool(v, obj, at)
        return v, S.VALUE_TYPES[vtype]
    if depth >= S.MAX_DEPTH:
        raise E.limit(
            obj,
            field="array depth",
            offset=cur.pos,
            detail="arrays nested too deep",
            expected=f"<= {S.MAX_DEPTH}",
            got=depth + 1,
        )
    etype = _value_type(cur, obj, "array element type")
    n = cur.count(obj, "array count", _MIN_SIZE[etype], limits.max_objects)
    if etype in S.SCALARS:
        at = cur.pos
        arr = cur.array(S.SCALARS[etype], n, obj, "array values")
        if etype == S.BOOL:
            bad = np.flatnonzero(arr > 1)
            if bad.size:
                _bool(int(arr[bad[0]]), obj, at + int(bad[0]))
            return [bool(b) for b in arr], "array[bool]"
        return arr.tolist(), f"array[{S.VALUE_TYPES[etype]}]"
    if etype == S.STRING:
        return cur.strings(n, obj, "array value"), "array[string]"
    items = []
    inner = "array[array]"
    for _ in range(n):
        v, t = _value(cur, obj, etype, limits, depth + 1)
        items.append(v)
        inner = f"array[{t}]"
    return items, inner


def _bool(v: int, obj: str, at: int) -> bool:
    if v not in (0, 1):
        raise E.format(obj, field="bool value", offset=at, expected="0 or 1", got=v)
    return bool(v)


def _alignment(metadata: dict[str, Any], types: dict[str, str], offsets: dict[str, int]) -> int:
    if S.ALIGNMENT_KEY not in metadata:
        return S.DEFAULT_ALIGNMENT
    obj = f"key {S.ALIGNMENT_KEY!r}"
    if types[S.ALIGNMENT_KEY] != "uint32":
        raise E.format(
            obj,
            field="value_type",
            offset=offsets[S.ALIGNMENT_KEY],
            expected="uint32",
            got=types[S.ALIGNMENT_KEY],
        )
    a = metadata[S.ALIGNMENT_KEY]
    if a <= 0 or a & (a - 1):
        raise E.format(
            obj,
            field="alignment",
            offset=offsets[S.ALIGNMENT_KEY],
            detail="alignment is not a power of two",
            expected="a power of two",
            got=a,
        )
    return int(a)


def _tensor_info(cur: _Cursor, i: int, limits: Limits) -> tuple[Any, ...]:
    name = cur.string(f"tensor info {i}", "name")
    obj = f"tensor {name!r}"
    nd_at = cur.pos
    n_dims = cur.u32(obj, "n_dims")
    check_limit(FMT, obj, n_dims, limits.max_ndim, field="n_dims", offset=nd_at)
    ne_at = cur.pos
    ne = tuple(cur.array(np.dtype("<u8"), n_dims, obj, "ne").tolist())
    t_at = cur.pos
    code = cur.u32(obj, "type")
    gtype = S.GGML_TYPES.get(code)
    if gtype is None:
        removed = S.REMOVED_TYPES.get(code)
        raise E.unsupported(
            obj,
            field="type",
            offset=t_at,
            detail=f"GGML type {code} ({removed}) was removed from ggml"
            if removed
            else f"unknown GGML type {code}",
            expected="one of " + ", ".join(t.name for t in S.GGML_TYPES.values()),
            got=code,
        )
    numel = checked_numel(FMT, obj, list(ne), limits, offset=ne_at)
    if gtype.block > 1 and (not ne or ne[0] % gtype.block):
        raise E.format(
            obj,
            field="ne[0]",
            offset=ne_at,
            detail=f"a {gtype.name} row is whole blocks of {gtype.block}",
            expected=f"a multiple of {gtype.block}",
            got=ne[0] if ne else "no dimensions",
        )
    # the array a read makes (elements, or blocks of the last axis) must be addressable too
    blocks = [ne[0] // gtype.block, *ne[1:]] if ne else []
    checked_numel(FMT, obj, blocks, limits, itemsize=gtype.size, offset=ne_at)
    off_at = cur.pos
    rel = cur.u64(obj, "offset")
    return name, gtype, ne, rel, off_at, numel // gtype.block * gtype.size


def _place(infos: list, data_start: int, alignment: int, size: int) -> dict[str, Tensor]:
    """Each tensor's absolute byte range: aligned, in the file, none overlapping another."""
    tensors: dict[str, Tensor] = {}
    for name, gtype, ne, rel, at, nbytes in infos:
        obj = f"tensor {name!r}"
        if name in tensors:
            raise E.format(obj, offset=at, detail="duplicate tensor name", expected="unique names")
        if rel % alignment:
            raise E.format(
                obj,
                field="offset",
                offset=at,
                detail="misaligned tensor offset",
                expected=f"a multiple of {alignment}",
                got=rel,
            )
        end = data_start + rel + nbytes
        if end > size:
            raise E.truncated(
                obj,
                field="offset",
                offset=at,
                detail="tensor data past the end of the file",
                expected=f"end <= {size}",
                got=f"[{data_start + rel}, {end})",
            )
        tensors[name] = Tensor(name, gtype, ne, data_start + rel, nbytes, at)
    ordered = sorted((t for t in tensors.values() if t.nbytes), key=lambda t: t.offset)
    for prev, t in zip(ordered, ordered[1:], strict=False):
        if t.offset < prev.offset + prev.nbytes:
            raise E.format(
                f"tensor {t.name!r}",
                field="offset",
                offset=t.info_at,
                detail=f"tensor data overlaps tensor {prev.name!r}",
                expected=f"start >= {prev.offset + prev.nbytes}",
                got=t.offset,
            )
    return tensors

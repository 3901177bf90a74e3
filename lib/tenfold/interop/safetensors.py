"""safetensors, read and written without the ``safetensors`` package.

Layout: u64 little-endian header length ``N``; ``N`` bytes of UTF-8 JSON (an object mapping each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}``, plus an optional
``"__metadata__"`` object of strings), padded with spaces to a multiple of 8; then the data
buffer, offsets relative to its start. Writing lays tensors out as the ``safetensors`` package
does (by decreasing alignment, then name; non-ASCII names as UTF-8), so the bytes are identical.

The parser works on any buffer (a file's memory map, a FOLD ``STEN`` chunk); every offset is
validated before a view is made, and tensors are zero-copy read-only views unless ``copy``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core import jsonio
from ..core.alloc import copy as alloc_copy
from ..core.atomic import atomic_write
from ..core.bounds import DEFAULT_LIMITS, Budget, Limits, checked_numel
from ..core.buffers import byte_view
from ..core.dtypes import BFLOAT16, FLOAT8_E4M3FN, FLOAT8_E5M2, canonical
from ..core.mapped import MappedFile
from ..errors import (
    EncodeError,
    FormatError,
    LimitError,
    TruncatedError,
    UnsupportedError,
    describe,
)

__all__ = ["read_safetensors", "write_safetensors", "parse", "encode", "to_bytes", "DTYPES"]

FMT = "safetensors"
MAX_HEADER = 100 << 20

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": BFLOAT16,
    "F8_E5M2": FLOAT8_E5M2, "F8_E4M3": FLOAT8_E4M3FN,
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}  # fmt: skip
_BY_NAME = {canonical(dt): tag for tag, dt in DTYPES.items()}


def parse(
    buf: Any,
    *,
    fmt: str = FMT,
    what: str = "file",
    copy: bool = False,
    offset: int = 0,
    budget: Budget | None = None,
) -> dict[str, np.ndarray]:
    """The tensors of the safetensors bytes in ``buf`` (views of ``buf`` unless ``copy``).

    ``fmt``, ``what`` and ``offset`` (of ``buf`` in its file) go into error messages; copies
    are charged to ``budget`` when one is given.
    """
    u8 = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    size = u8.size
    if size < 8:
        raise TruncatedError(
            describe(
                fmt,
                what,
                offset=offset,
                field="header length",
                detail="needs 8 bytes",
                expected=">= 8",
                got=size,
            )
        )
    n = int(u8[:8].view("<u8")[0])
    if n > MAX_HEADER:
        raise LimitError(
            describe(
                fmt,
                what,
                offset=offset,
                field="header length",
                detail="above limit",
                expected=f"<= {MAX_HEADER}",
                got=n,
            )
        )
    if n > size - 8:
        raise TruncatedError(
            describe(
                fmt,
                what,
                offset=offset,
                field="header length",
                detail="past the end",
                expected=f"<= {size - 8}",
                got=n,
            )
        )
    header = jsonio.loads(
        u8[8 : 8 + n].tobytes(), fmt=fmt, what=f"{what} header", offset=offset + 8
    )
    if not isinstance(header, dict):
        raise FormatError(
            describe(fmt, what, offset=offset + 8, detail="header is not a JSON object")
        )
    start = 8 + n
    data = u8[start:]
    out: dict[str, np.ndarray] = {}
    spans = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        where = f"{what} tensor {name!r}" if what != "file" else f"tensor {name!r}"
        if not isinstance(e, dict):
            raise FormatError(
                describe(fmt, where, offset=offset + 8, detail="entry is not an object")
            )
        tag = e.get("dtype")
        if type(tag) is not str or tag not in DTYPES:
            raise UnsupportedError(
                describe(
                    fmt,
                    where,
                    offset=offset + 8,
                    field="dtype",
                    detail="unknown",
                    expected=" | ".join(DTYPES),
                    got=tag if type(tag) is str else f"{type(tag).__name__} {tag!r}"[:80],
                )
            )
        dt = DTYPES[tag]
        shape, offs = e.get("shape"), e.get("data_offsets")
        if not isinstance(shape, list) or not (
            isinstance(offs, list)
            and len(offs) == 2
            and all(type(o) is int and o >= 0 for o in offs)
        ):
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=offset + 8,
                    field="shape/data_offsets",
                    detail="malformed",
                    got=repr(e)[:200],
                )
            )
        numel = checked_numel(fmt, where, shape, itemsize=dt.itemsize, offset=offset + 8)
        b, end = offs
        if end < b or end > data.size:
            raise TruncatedError(
                describe(
                    fmt,
                    where,
                    offset=offset + start + b,
                    field="data_offsets",
                    detail="outside the data buffer",
                    expected=f"0 <= begin <= end <= {data.size}",
                    got=offs,
                )
            )
        if end - b != numel * dt.itemsize:
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=offset + start + b,
                    field="size",
                    detail="does not match shape x itemsize",
                    expected=numel * dt.itemsize,
                    got=end - b,
                )
            )
        spans.append((b, end, name))
        view = data[b:end].view(dt).reshape(shape) if numel else np.empty(shape, dt)
        if copy:
            view = alloc_copy(view, fmt=fmt, what=where, offset=offset + start + b, budget=budget)
        out[name] = view
    spans.sort()
    for (_b0, e0, n0), (b1, _e1, n1) in zip(spans, spans[1:], strict=False):
        if b1 < e0:
            raise FormatError(
                describe(
                    fmt,
                    f"tensor {n1!r}",
                    offset=offset + start + b1,
                    detail=f"overlaps tensor {n0!r}",
                )
            )
    return out


def encode(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None, *, fmt: str = FMT
) -> tuple[bytes, list[np.ndarray]]:
    """The length-prefixed, padded header and the arrays in file order."""
    arrays: dict[str, np.ndarray] = {}
    for name, a in tensors.items():
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise EncodeError(
                describe(fmt, "writer", field="name", detail="not a usable name", got=repr(name))
            )
        arr = np.asarray(a)
        try:
            tag = _BY_NAME[canonical(arr.dtype)]
        except Exception:
            raise EncodeError(
                describe(
                    fmt,
                    f"tensor {name!r}",
                    field="dtype",
                    detail="cannot be stored in safetensors",
                    got=str(arr.dtype),
                )
            ) from None
        arrays[name] = np.ascontiguousarray(arr, dtype=DTYPES[tag])
    order = sorted(arrays, key=lambda k: (-arrays[k].dtype.itemsize, k))
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    pos = 0
    for name in order:
        a = arrays[name]
        header[name] = {
            "dtype": _BY_NAME[canonical(a.dtype)],
            "shape": list(a.shape),
            "data_offsets": [pos, pos + a.nbytes],
        }
        pos += a.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text, [arrays[n] for n in order]


def to_bytes(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None, *, fmt: str = FMT
) -> bytes:
    """A whole safetensors file in memory (for embedding, e.g. a FOLD ``STEN`` chunk)."""
    head, arrays = encode(tensors, metadata, fmt=fmt)
    return b"".join([head] + [bytes(byte_view(a)) for a in arrays])


def read_safetensors(
    path: Any, *, copy: bool = False, limits: Limits = DEFAULT_LIMITS
) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file (views of the file's memory map unless ``copy``;
    copies count against ``limits.decode_budget``)."""
    mf = MappedFile(path, fmt=FMT)
    try:
        return parse(mf.buffer(), copy=copy, budget=limits.budget())
    finally:
        mf.close()  # views keep the mapping alive


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    metadata: Mapping[str, str] | None = None,
    *,
    fsync: bool = True,
) -> None:
    """Write ``tensors`` as safetensors, atomically, streaming each array from its memory."""
    head, arrays = encode(tensors, metadata)
    with atomic_write(path, fsync=fsync) as f:
        f.write(head)
        for a in arrays:
            f.write(byte_view(a))

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
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..core import jsonio
from ..core.alloc import copy as alloc_copy
from ..core.atomic import atomic_write
from ..core.bounds import DEFAULT_LIMITS, Budget, Limits, checked_numel
from ..core.buffers import byte_view
from ..core.dtypes import (
    BFLOAT16,
    FLOAT4_E2M1,
    FLOAT8_E4M3FN,
    FLOAT8_E4M3FNUZ,
    FLOAT8_E5M2,
    FLOAT8_E5M2FNUZ,
    FLOAT8_E8M0,
    canonical,
)
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
    "F8_E5M2": FLOAT8_E5M2, "F8_E4M3": FLOAT8_E4M3FN, "F8_E8M0": FLOAT8_E8M0,
    "F8_E4M3FNUZ": FLOAT8_E4M3FNUZ, "F8_E5M2FNUZ": FLOAT8_E5M2FNUZ, "F4": FLOAT4_E2M1,
    "C64": np.dtype("<c8"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}  # fmt: skip
#: The ``safetensors`` package lays tensors out by decreasing rank of their dtype in its Rust
#: ``Dtype`` enum, then by name (byte order); this is that enum's order (measured with
#: safetensors 0.8: ``F6_*`` sit between ``F4`` and ``U8`` and are not supported here).
RANK: dict[str, int] = {
    tag: i
    for i, tag in enumerate(
        "BOOL F4 F6_E2M3 F6_E3M2 U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 F8_E4M3FNUZ F8_E5M2FNUZ "
        "I16 U16 F16 BF16 I32 U32 F32 C64 F64 I64 U64".split()
    )
}
#: Sub-byte types: bits per element (``F4`` packs two elements per byte, element 2i in the
#: low nibble, 2i+1 in the high nibble: the layout of PyTorch's ``float4_e2m1fn_x2``).
PACKED_BITS = {"F4": 4}


def stored_nbytes(tag: str, numel: int) -> int:
    """Bytes ``numel`` elements of ``tag`` take in the file."""
    bits = PACKED_BITS.get(tag)
    return numel * DTYPES[tag].itemsize if bits is None else (numel * bits + 7) // 8


def unpack_f4(raw: np.ndarray, numel: int) -> np.ndarray:
    """Packed ``F4`` bytes -> one ``float4_e2m1fn`` element per byte (a new array)."""
    out = np.empty(raw.size * 2, np.uint8)
    out[0::2] = raw & 0x0F
    out[1::2] = raw >> 4
    return out[:numel].view(FLOAT4_E2M1)


def pack_f4(a: np.ndarray) -> np.ndarray:
    """``float4_e2m1fn`` elements -> packed ``F4`` bytes (a new array)."""
    u = np.ascontiguousarray(a).reshape(-1).view(np.uint8) & 0x0F
    if u.size % 2:
        u = np.concatenate([u, np.zeros(1, np.uint8)])
    return (u[0::2] | (u[1::2] << 4)).astype(np.uint8)


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
        want = stored_nbytes(tag, numel)
        if tag in PACKED_BITS and (numel * PACKED_BITS[tag]) % 8:
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=offset + 8,
                    field="shape",
                    detail=f"{tag} elements do not fill whole bytes",
                    got=shape,
                )
            )
        if end - b != want:
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=offset + start + b,
                    field="size",
                    detail="does not match shape x itemsize",
                    expected=want,
                    got=end - b,
                )
            )
        spans.append((b, end, name))
        if tag in PACKED_BITS:
            out[name] = unpack_f4(data[b:end], numel).reshape(shape)
            if not copy:
                out[name].flags.writeable = False
        else:
            view = data[b:end].view(dt).reshape(shape) if numel else np.empty(shape, dt)
            if copy:
                view = alloc_copy(
                    view, fmt=fmt, what=where, offset=offset + start + b, budget=budget
                )
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


def parse_metadata(buf: Any, *, fmt: str = FMT) -> dict[str, str]:
    """The ``__metadata__`` object of the safetensors bytes in ``buf`` (``{}`` when absent)."""
    u8 = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if u8.size < 8:
        return {}
    n = int(u8[:8].view("<u8")[0])
    if n > MAX_HEADER or n > u8.size - 8:
        return {}  # parse() reports these
    head = jsonio.loads(u8[8 : 8 + n].tobytes(), fmt=fmt, what="header", offset=8)
    md = head.get("__metadata__") if isinstance(head, dict) else None
    if md is None:
        return {}
    if not isinstance(md, dict) or not all(isinstance(v, str) for v in md.values()):
        raise FormatError(
            describe(fmt, "__metadata__", offset=8, detail="must map strings to strings")
        )
    return dict(md)


def tag_of(name: str, dtype: Any, *, fmt: str = FMT) -> str:
    """The safetensors dtype tag of ``dtype`` (EncodeError naming the tensor when none)."""
    try:
        return _BY_NAME[canonical(dtype)]
    except Exception:
        from ..capabilities import check_dtype

        check_dtype("safetensors", name, dtype)  # raises, naming the formats that can
        raise  # pragma: no cover


def header(
    specs: Mapping[str, tuple[str, tuple[int, ...]]],
    metadata: Mapping[str, str] | None = None,
    *,
    fmt: str = FMT,
) -> tuple[bytes, list[str]]:
    """The length-prefixed, space-padded header for ``name -> (tag, shape)`` and the names in
    data order (as the ``safetensors`` package: decreasing dtype rank, then name).

    ``metadata`` keys are written sorted (the package writes them in hash order, which varies
    from run to run; with at most one key the bytes are identical).
    """
    for name in specs:
        if not isinstance(name, str) or name == "__metadata__":
            raise EncodeError(
                describe(fmt, "writer", field="name", detail="not a usable name", got=repr(name))
            )
    order = sorted(specs, key=lambda k: (-RANK[specs[k][0]], k.encode("utf-8")))
    head: dict[str, Any] = {}
    if metadata is not None:
        md = {}
        for k in sorted(metadata):
            v = metadata[k]
            if not isinstance(k, str) or not isinstance(v, str):
                raise EncodeError(
                    describe(
                        fmt,
                        f"metadata {k!r}",
                        detail="__metadata__ holds strings only",
                        got=type(v).__name__ if isinstance(k, str) else type(k).__name__,
                    )
                )
            md[k] = v
        head["__metadata__"] = md
    pos = 0
    for name in order:
        tag, shape = specs[name]
        numel = 1
        for d in shape:
            numel *= int(d)
        if tag in PACKED_BITS and (numel * PACKED_BITS[tag]) % 8:
            raise EncodeError(
                describe(
                    fmt,
                    f"tensor {name!r}",
                    field="shape",
                    detail=f"{tag} packs {8 // PACKED_BITS[tag]} elements per byte; "
                    "the element count must fill whole bytes",
                    expected=f"a multiple of {8 // PACKED_BITS[tag]} elements",
                    got=f"{numel} (shape {list(shape)})",
                )
            )
        n = stored_nbytes(tag, numel)
        head[name] = {
            "dtype": tag,
            "shape": [int(d) for d in shape],
            "data_offsets": [pos, pos + n],
        }
        pos += n
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text, order


def stored(tag: str, arr: np.ndarray) -> np.ndarray:
    """``arr`` as the bytes the file holds: little-endian, C order, packed for ``F4``; 0-d
    arrays keep their shape (``np.ascontiguousarray`` would make them 1-d)."""
    if tag in PACKED_BITS:
        return pack_f4(arr)
    want = DTYPES[tag]
    if arr.dtype == want and arr.flags.c_contiguous:
        return arr
    return np.asarray(np.require(arr, dtype=want, requirements="C")).reshape(arr.shape)


def encode(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None, *, fmt: str = FMT
) -> tuple[bytes, list[np.ndarray]]:
    """The length-prefixed, padded header and the arrays in file order."""
    arrays: dict[str, np.ndarray] = {}
    tags: dict[str, str] = {}
    for name, a in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise EncodeError(
                describe(fmt, "writer", field="name", detail="not a usable name", got=repr(name))
            )
        arr = np.asarray(a)
        tags[name] = tag_of(name, arr.dtype, fmt=fmt)
        arrays[name] = arr
    head, order = header({k: (tags[k], arrays[k].shape) for k in arrays}, metadata, fmt=fmt)
    return head, [stored(tags[n], arrays[n]) for n in order]


def pieces(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None, *, fmt: str = FMT
) -> tuple[int, Iterator[memoryview]]:
    """The size of the safetensors bytes of ``tensors`` and an iterator over them, one
    tensor at a time: header first, then each array's bytes, fetched (``np.asarray``) only
    when its turn comes and released (:func:`tenfold.core.release.release`) after. Values
    need ``dtype`` and ``shape`` up front (arrays, or lazy objects with ``__array__``)."""
    from ..core.release import release

    specs: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, a in tensors.items():
        if not hasattr(a, "dtype") or not hasattr(a, "shape"):
            a = np.asarray(a)
        specs[name] = (tag_of(name, a.dtype, fmt=fmt), tuple(int(d) for d in a.shape))
    head, order = header(specs, metadata, fmt=fmt)
    size = len(head)
    for tag, shape in specs.values():
        numel = 1
        for d in shape:
            numel *= d
        size += stored_nbytes(tag, numel)

    def gen() -> Iterator[memoryview]:
        yield memoryview(head)
        for n in order:
            arr = np.asarray(tensors[n])
            yield byte_view(stored(specs[n][0], arr))
            release(arr)
            del arr
            # an empty piece: the consumer drops its view of this tensor before the next
            # one is fetched, so only one tensor is ever held
            yield memoryview(b"")

    return size, gen()


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

"""Build zTensor files by hand (any index content, any blob bytes) for corruption tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tenfold.core import cbor


def build(
    entries: list[Any],
    blobs: dict[int, bytes],
    *,
    indefinite: bool = True,
    index: bytes | None = None,
    size_field: int | None = None,
) -> bytes:
    """Magic, the blobs at their offsets (zero gaps), the CBOR of ``entries``, the size field."""
    body = bytearray(b"ZTEN0001")
    for off in sorted(blobs):
        body += bytes(off - len(body)) if off > len(body) else b""
        body[off : off + len(blobs[off])] = blobs[off]
    raw_index = index if index is not None else cbor.encode(entries, indefinite_maps=indefinite)
    n = len(raw_index) if size_field is None else size_field
    return bytes(body) + raw_index + n.to_bytes(8, "little")


def entry(
    name: str = "x",
    offset: int = 64,
    size: int = 24,
    dtype: str = "float32",
    shape: list[int] | None = None,
    encoding: str = "raw",
    **extra: Any,
) -> dict:
    e = {
        "name": name,
        "offset": offset,
        "size": size,
        "dtype": dtype,
        "layout": "dense",
        "shape": [2, 3] if shape is None else shape,
        "encoding": encoding,
    }
    e.update(extra)
    return {k: v for k, v in e.items() if v is not None}


def write(tmp: Path, data: bytes, name: str = "f.zt") -> Path:
    p = tmp / name
    p.write_bytes(data)
    return p

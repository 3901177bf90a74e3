"""safetensors files, read and written without the ``safetensors`` package.

Layout: u64 little-endian header length ``N``; ``N`` bytes of UTF-8 JSON (an object mapping each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}``, plus an optional
``"__metadata__"`` object of strings), padded with spaces; then the data buffer, offsets relative
to its start. Every offset is validated before a view is made; tensors are zero-copy read-only
views of the memory map unless ``copy=True``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.atomic import atomic_write
from ..core.bounds import align_up, checked_numel
from ..core.buffers import byte_view
from ..core.dtypes import BFLOAT16, FLOAT8_E4M3FN, FLOAT8_E5M2, canonical
from ..core.mapped import MappedFile
from ..errors import EncodeError, FormatError, LimitError, TruncatedError, describe

__all__ = ["read_safetensors", "write_safetensors", "DTYPES"]

FMT = "safetensors"
MAX_HEADER = 100 << 20

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": BFLOAT16,
    "F8_E5M2": FLOAT8_E5M2,
    "F8_E4M3": FLOAT8_E4M3FN,
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_BY_NAME = {canonical(dt): tag for tag, dt in DTYPES.items()}


def read_safetensors(path: Any, *, copy: bool = False) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file (views of the file unless ``copy``)."""
    with MappedFile(path, fmt=FMT) as mf:
        if mf.size < 8:
            raise TruncatedError(
                describe(
                    FMT,
                    "header",
                    offset=0,
                    detail="file too short",
                    expected=">= 8 bytes",
                    got=mf.size,
                )
            )
        n = int(mf.array(0, "<u8", ()))
        if n > MAX_HEADER:
            raise LimitError(
                describe(
                    FMT,
                    "header",
                    offset=0,
                    field="length",
                    detail="above limit",
                    expected=f"<= {MAX_HEADER}",
                    got=n,
                )
            )
        raw = mf.bytes(8, n, "header")
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FormatError(
                describe(FMT, "header", offset=8, detail=f"invalid JSON: {exc}")
            ) from None
        if not isinstance(header, dict):
            raise FormatError(describe(FMT, "header", offset=8, detail="not a JSON object"))
        start = 8 + n
        buf_len = mf.size - start
        out: dict[str, np.ndarray] = {}
        spans = []
        for name, e in header.items():
            if name == "__metadata__":
                continue
            what = f"tensor {name!r}"
            if not isinstance(e, dict) or e.get("dtype") not in DTYPES:
                raise FormatError(
                    describe(
                        FMT,
                        what,
                        offset=8,
                        field="dtype",
                        detail="missing or unknown",
                        got=e.get("dtype") if isinstance(e, dict) else e,
                    )
                )
            dt = DTYPES[e["dtype"]]
            shape = e.get("shape")
            offs = e.get("data_offsets")
            if not isinstance(shape, list) or not (
                isinstance(offs, list)
                and len(offs) == 2
                and all(type(o) is int and o >= 0 for o in offs)
            ):
                raise FormatError(
                    describe(
                        FMT, what, offset=8, field="shape/data_offsets", detail="malformed", got=e
                    )
                )
            numel = checked_numel(FMT, what, shape)
            b, end = offs
            if end < b or end > buf_len:
                raise TruncatedError(
                    describe(
                        FMT,
                        what,
                        offset=start + b,
                        field="data_offsets",
                        detail="outside the data buffer",
                        expected=f"0 <= begin <= end <= {buf_len}",
                        got=offs,
                    )
                )
            if end - b != numel * dt.itemsize:
                raise FormatError(
                    describe(
                        FMT,
                        what,
                        offset=start + b,
                        field="size",
                        detail="does not match shape x itemsize",
                        expected=numel * dt.itemsize,
                        got=end - b,
                    )
                )
            spans.append((b, end, name))
            view = mf.array(start + b, dt, tuple(shape), what)
            out[name] = np.array(view) if copy else view
        spans.sort()
        for (_b0, e0, n0), (b1, _e1, n1) in zip(spans, spans[1:], strict=False):
            if b1 < e0:
                raise FormatError(
                    describe(
                        FMT, f"tensor {n1!r}", offset=start + b1, detail=f"overlaps tensor {n0!r}"
                    )
                )
        return out


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    metadata: Mapping[str, str] | None = None,
    *,
    fsync: bool = True,
) -> None:
    """Write ``tensors`` as safetensors, atomically, streaming each array from its memory."""
    arrays: dict[str, np.ndarray] = {}
    for name, a in tensors.items():
        if not isinstance(name, str):
            raise EncodeError(
                describe(FMT, "writer", field="name", detail="not a string", got=repr(name))
            )
        arr = np.asarray(a)
        try:
            tag = _BY_NAME[canonical(arr.dtype)]
        except Exception:
            raise EncodeError(
                describe(
                    FMT,
                    f"tensor {name!r}",
                    field="dtype",
                    detail="cannot be stored",
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
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (align_up(len(text), 8) - len(text))
    with atomic_write(path, fsync=fsync) as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name in order:
            f.write(byte_view(arrays[name]))

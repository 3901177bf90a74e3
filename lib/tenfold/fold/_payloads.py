"""Chunk payload kinds: NPZ0 (``.npz``), STEN (safetensors), TSAV (``torch.save``), JSON.

NPZ and safetensors are parsed here without pickle and without trusting any size: every
array's byte count is checked against what the container really holds before anything is
allocated. Writers are deterministic (NPZ members carry a fixed 1980-01-01 timestamp).
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.dtypes import BFLOAT16, FLOAT8_E4M3FN, FLOAT8_E5M2
from ..errors import EncodeError, FormatError, LimitError, UnsupportedError, describe
from ._spec import FMT, MAX_CHUNK_SIZE, MAX_INDEX_SIZE

# -- JSON -----------------------------------------------------------------------------------


def json_bytes(obj: Any) -> bytes:
    """pyfolds' JSON chunk encoding: UTF-8, ``ensure_ascii=False``, compact separators."""
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise EncodeError(
            describe(FMT, "json payload", detail=f"not JSON-serialisable: {exc}")
        ) from exc


def json_load(buf: Any, what: str) -> Any:
    try:
        return json.loads(memoryview(buf).tobytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise FormatError(describe(FMT, what, detail=f"JSON payload is not UTF-8: {exc}")) from exc
    except json.JSONDecodeError as exc:
        raise FormatError(describe(FMT, what, detail=f"bad JSON payload: {exc}")) from exc


# -- NPZ0 -----------------------------------------------------------------------------------

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def npz_bytes(arrays: Mapping[str, Any], *, compressed: bool = False) -> bytes:
    """An ``.npz`` archive of ``arrays`` (``np.load`` reads it), byte-for-byte deterministic."""
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        for name, value in arrays.items():
            if not isinstance(name, str) or not name:
                raise EncodeError(describe(FMT, "npz array", detail=f"bad name {name!r}"))
            arr = np.asanyarray(value)
            if arr.dtype.hasobject:
                raise EncodeError(
                    describe(FMT, f"npz array {name!r}", detail="object arrays need pickle")
                )
            info = zipfile.ZipInfo(name + ".npy", date_time=_ZIP_DATE)
            info.compress_type = method
            info.external_attr = 0o600 << 16
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, arr, allow_pickle=False)
    return buf.getvalue()


def _npy_header(f: Any, what: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    fmt = np.lib.format
    version = fmt.read_magic(f)
    if version == (1, 0):
        return fmt.read_array_header_1_0(f)
    if version == (2, 0):
        return fmt.read_array_header_2_0(f)
    raise UnsupportedError(
        describe(
            FMT,
            what,
            field="npy version",
            detail="unsupported",
            expected="1.0 | 2.0",
            got=f"{version[0]}.{version[1]}",
        )
    )


def npz_load(buf: Any, what: str, *, limit: int = MAX_CHUNK_SIZE) -> dict[str, np.ndarray]:
    """Arrays of an ``.npz`` payload; no pickle, sizes checked before allocation."""
    out: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(memoryview(buf).tobytes())) as zf:
            for info in zf.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                where = f"{what} array {name!r}"
                if info.file_size > limit:
                    raise LimitError(
                        describe(
                            FMT,
                            where,
                            field="size",
                            detail="above limit",
                            expected=f"<= {limit}",
                            got=info.file_size,
                        )
                    )
                with zf.open(info) as f:
                    shape, fortran, dtype = _npy_header(f, where)
                    if dtype.hasobject:
                        raise FormatError(
                            describe(FMT, where, detail="object array (needs pickle)")
                        )
                    count = 1
                    for d in shape:
                        count *= d
                    nbytes = count * dtype.itemsize
                    header_len = f.tell()
                    if nbytes != info.file_size - header_len:
                        raise FormatError(
                            describe(
                                FMT,
                                where,
                                field="data size",
                                expected=info.file_size - header_len,
                                got=nbytes,
                            )
                        )
                    arr = np.empty(count, dtype=dtype)
                    mv = memoryview(arr).cast("B") if nbytes else memoryview(b"")  # type: ignore[arg-type]
                    got = 0
                    while got < nbytes:
                        chunk = f.read(min(nbytes - got, 16 << 20))
                        if not chunk:
                            break
                        mv[got : got + len(chunk)] = chunk
                        got += len(chunk)
                    if got != nbytes:
                        raise FormatError(
                            describe(FMT, where, field="data size", expected=nbytes, got=got)
                        )
                    order = "F" if fortran else "C"
                    out[name] = arr.reshape(shape, order=order)  # type: ignore[call-overload]
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        zlib.error,
        EOFError,
        OSError,
        NotImplementedError,
    ) as exc:
        raise FormatError(describe(FMT, what, detail=f"bad npz payload: {exc}")) from exc
    except ValueError as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(describe(FMT, what, detail=f"bad npz payload: {exc}")) from exc
    return out


# -- STEN (safetensors) ---------------------------------------------------------------------

_ST_DTYPES: dict[str, np.dtype] = {
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


def _st_tag(dtype: np.dtype, name: str) -> str:
    le = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
    for tag, dt in _ST_DTYPES.items():
        if dt == le:
            return tag
    raise EncodeError(
        describe(
            FMT,
            f"tensor {name!r}",
            field="dtype",
            detail="not storable in safetensors",
            got=str(dtype),
        )
    )


def safetensors_bytes(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None
) -> bytes:
    """A safetensors file of ``tensors``, laid out as the ``safetensors`` package does.

    Tensors are ordered by decreasing alignment then name; the header is padded with spaces
    to a multiple of 8 bytes.
    """
    items = []
    for name, value in tensors.items():
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise EncodeError(describe(FMT, "tensor", detail=f"bad name {name!r}"))
        arr = np.asarray(value)
        tag = _st_tag(arr.dtype, name)
        items.append((name, tag, np.ascontiguousarray(arr, dtype=_ST_DTYPES[tag])))
    items.sort(key=lambda t: (-t[2].dtype.itemsize, t[0]))
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    pos = 0
    for name, tag, arr in items:
        header[name] = {
            "dtype": tag,
            "shape": list(arr.shape),
            "data_offsets": [pos, pos + arr.nbytes],
        }
        pos += arr.nbytes
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    parts = [struct.pack("<Q", len(hb)), hb] + [arr.tobytes() for _, _, arr in items]
    return b"".join(parts)


def safetensors_load(buf: Any, what: str) -> dict[str, np.ndarray]:
    """Zero-copy read-only views of the tensors of a safetensors payload."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    size = u8.size
    if size < 8:
        raise FormatError(
            describe(
                FMT,
                what,
                detail="safetensors payload shorter than 8 bytes",
                expected=">= 8",
                got=size,
            )
        )
    n = int(u8[:8].view("<u8")[0])
    if n > min(size - 8, MAX_INDEX_SIZE):
        raise FormatError(
            describe(
                FMT,
                what,
                field="safetensors header length",
                expected=f"<= {min(size - 8, MAX_INDEX_SIZE)}",
                got=n,
            )
        )
    try:
        header = json.loads(u8[8 : 8 + n].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(describe(FMT, what, detail=f"bad safetensors header: {exc}")) from exc
    if not isinstance(header, dict):
        raise FormatError(describe(FMT, what, detail="safetensors header is not an object"))
    data = u8[8 + n :]
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        where = f"{what} tensor {name!r}"
        if not isinstance(info, dict):
            raise FormatError(describe(FMT, where, detail="entry is not an object"))
        tag = info.get("dtype")
        if tag not in _ST_DTYPES:
            raise UnsupportedError(
                describe(
                    FMT,
                    where,
                    field="dtype",
                    detail="unknown",
                    expected=" | ".join(_ST_DTYPES),
                    got=tag,
                )
            )
        shape, offs = info.get("shape"), info.get("data_offsets")
        if (
            not isinstance(shape, list)
            or not all(type(d) is int and d >= 0 for d in shape)
            or not isinstance(offs, list)
            or len(offs) != 2
            or not all(type(o) is int for o in offs)
        ):
            raise FormatError(describe(FMT, where, detail="bad shape or data_offsets"))
        begin, end = offs
        dt = _ST_DTYPES[tag]
        count = 1
        for d in shape:
            count *= d
        if not 0 <= begin <= end <= data.size or end - begin != count * dt.itemsize:
            raise FormatError(
                describe(
                    FMT,
                    where,
                    field="data_offsets",
                    expected=f"{count * dt.itemsize} bytes within {data.size}",
                    got=offs,
                )
            )
        arr = data[begin:end].view(dt) if count else np.empty(0, dt)
        out[name] = arr.reshape(shape)
    return out


# -- TSAV (torch.save; torch optional) ------------------------------------------------------


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise UnsupportedError(
            f"{FMT}: TSAV chunks are torch.save payloads and need torch (pip install torch)"
        ) from None
    return torch


def torch_bytes(obj: Any) -> bytes:
    torch = _torch()
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def torch_load(buf: Any, what: str) -> Any:
    """``torch.load(..., weights_only=True)``: never unpickles arbitrary objects."""
    torch = _torch()
    try:
        return torch.load(
            io.BytesIO(memoryview(buf).tobytes()), map_location="cpu", weights_only=True
        )
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds; all mean "refused"
        raise FormatError(describe(FMT, what, detail=f"torch payload refused: {exc}")) from exc

"""Chunk payload kinds: NPZ0 (``.npz``), STEN (safetensors), TSAV (``torch.save``), JSON.

NPZ and safetensors are parsed here without pickle and without trusting any size: every
array's byte count is checked against what the container really holds before anything is
allocated. Writers are deterministic (NPZ members carry a fixed 1980-01-01 timestamp).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from ...capabilities import check_dtype
from ...core import jsonio
from ...core.bounds import DEFAULT_LIMITS, Budget, Limits
from ...errors import EncodeError, FormatError
from ..npz import writer as _npz
from ..safetensors import writer as _st
from ._spec import FMT, MAX_CHUNK_SIZE

# -- JSON -----------------------------------------------------------------------------------


def json_bytes(obj: Any) -> bytes:
    """pyfolds' JSON chunk encoding: UTF-8, ``ensure_ascii=False``, compact separators."""
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise EncodeError(
            fmt=FMT, obj="json payload", detail=f"not JSON-serialisable: {exc}"
        ) from exc


def json_load(buf: Any, what: str) -> Any:
    return jsonio.loads(memoryview(buf).tobytes(), fmt=FMT, what=what)


# -- NPZ0 -----------------------------------------------------------------------------------

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def npz_bytes(arrays: Mapping[str, Any], *, compressed: bool = False) -> bytes:
    """An ``.npz`` archive of ``arrays`` (``np.load`` reads it), byte-for-byte deterministic."""
    for name in arrays:
        if not isinstance(name, str) or not name:
            raise EncodeError(fmt=FMT, obj="npz array", detail=f"bad name {name!r}")
        _npz.check_member_name(FMT, name, "npz array")  # what a zip member carries back
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        for name, value in arrays.items():
            arr = np.asanyarray(value)
            if arr.dtype.hasobject:
                raise EncodeError(
                    fmt=FMT, obj=f"npz array {name!r}", detail="object arrays need pickle"
                )
            check_dtype("npz", name, arr.dtype, prefix=FMT, what="a NPZ0 (npz) chunk")
            info = zipfile.ZipInfo(name + ".npy", date_time=_ZIP_DATE)
            info.compress_type = method
            info.external_attr = 0o600 << 16
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, arr, allow_pickle=False)
    return buf.getvalue()


def npz_load(
    buf: Any,
    what: str,
    *,
    limit: int = MAX_CHUNK_SIZE,
    limits: Limits = DEFAULT_LIMITS,
    budget: Budget | None = None,
) -> dict[str, np.ndarray]:
    """Arrays of an ``.npz`` payload; no pickle, sizes checked before allocation and charged to
    ``budget`` (one parser with ``.npz`` files: :func:`tenfold.interop.npz.parse_npz`)."""
    return _npz.parse_npz(buf, fmt=FMT, what=what, limits=limits, budget=budget, limit=limit)


# -- STEN (safetensors): one implementation, in tenfold.interop ----------------------------


def safetensors_bytes(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None
) -> bytes:
    """A safetensors file of ``tensors``, byte-identical to what the ``safetensors`` package
    writes (see :mod:`tenfold.interop.safetensors`)."""
    return _st.to_bytes(tensors, metadata, fmt=FMT)


def safetensors_load(buf: Any, what: str) -> dict[str, np.ndarray]:
    """Zero-copy read-only views of the tensors of a safetensors payload."""
    return _st.parse(np.frombuffer(buf, dtype=np.uint8), fmt=FMT, what=what)


# -- TSAV (torch.save; torch optional) ------------------------------------------------------


def _torch() -> Any:
    from ...core.optional import require

    return require("torch", extra="torch", what=f"{FMT}: a TSAV chunk (a torch.save payload)")


def torch_bytes(obj: Any) -> bytes:
    torch = _torch()
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


# torch dtypes NumPy has no native type for, with the ml_dtypes type of the same bits and the
# same-size integer both sides agree on (the bits move through an integer view, no copy).
_ML_DTYPES = {
    "bfloat16": ("int16", "bfloat16"),
    "float8_e5m2": ("int8", "float8_e5m2"),
    "float8_e4m3fn": ("int8", "float8_e4m3fn"),
}


def torch_to_numpy(v: Any) -> Any:
    """A CPU NumPy array of the torch tensor ``v`` (bfloat16 / float8 as ml_dtypes types);
    anything that is not a tensor is returned unchanged."""
    if not hasattr(v, "detach"):
        return v
    t = v.detach().cpu()
    name = str(t.dtype).removeprefix("torch.")
    if name in _ML_DTYPES:
        torch = _torch()
        ints, ml = _ML_DTYPES[name]
        return t.view(getattr(torch, ints)).numpy().view(getattr(ml_dtypes, ml))
    return t.resolve_conj().resolve_neg().numpy()


def numpy_to_torch(a: np.ndarray) -> Any:
    """A torch tensor of a copy of ``a`` (ml_dtypes bfloat16 / float8 become torch's types)."""
    torch = _torch()
    a = np.array(a)  # owned, writeable, C-contiguous copy
    for name, (ints, ml) in _ML_DTYPES.items():
        if a.dtype == np.dtype(getattr(ml_dtypes, ml)):
            return torch.from_numpy(a.view(np.dtype(ints))).view(getattr(torch, name))
    return torch.from_numpy(a)


def torch_load(buf: Any, what: str) -> Any:
    """``torch.load(..., weights_only=True)``: never unpickles arbitrary objects."""
    torch = _torch()
    try:
        return torch.load(
            io.BytesIO(memoryview(buf).tobytes()), map_location="cpu", weights_only=True
        )
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds; all mean "refused"
        raise FormatError(fmt=FMT, obj=what, detail=f"torch payload refused: {exc}") from exc

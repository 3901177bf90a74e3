"""NumPy ``.npz`` archives: read with ``allow_pickle=False``, written atomically."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..capabilities import check_dtype
from ..core.atomic import atomic_write
from ..errors import EncodeError, FormatError, describe

__all__ = ["read_npz", "write_npz"]


def read_npz(path: Any) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` (never unpickles: object arrays are refused)."""
    try:
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except ValueError as exc:
        raise FormatError(describe("npz", os.fspath(path), detail=str(exc))) from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise FormatError(
            describe("npz", os.fspath(path), detail=f"not a readable npz: {exc}")
        ) from None


_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def write_npz(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    compressed: bool = False,
    fsync: bool = True,
    done: Callable[[np.ndarray], Any] | None = None,
) -> None:
    """Write ``tensors`` to an ``.npz`` atomically, one array at a time.

    The archive is what ``np.savez`` (``np.savez_compressed`` with ``compressed``) writes,
    except that every member carries the fixed date 1980-01-01, so the same arrays always give
    the same bytes. Each array is fetched (``np.asarray``) only when its turn comes and handed
    to ``done`` once written, so a caller can release it.

    Only NumPy's own dtypes are written: bfloat16, float8 and float4 arrays (ml_dtypes) would
    be stored as opaque ``|V2`` / ``|V1`` / ``<f1`` records that NumPy cannot read back, so
    they are refused before anything is written (:class:`EncodeError` naming the tensor, its
    dtype and the formats that can hold it).
    """
    for k, v in tensors.items():
        dt = np.dtype(v.dtype) if hasattr(v, "dtype") else np.asarray(v).dtype
        if dt.hasobject:
            raise EncodeError(
                describe(
                    "npz",
                    f"array {k!r}",
                    field="dtype",
                    detail="object arrays need pickle",
                    got=str(dt),
                )
            )
        check_dtype("npz", str(k), dt)  # never a silent |V2 for bfloat16 / float8
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with atomic_write(path, fsync=fsync) as f:
        with zipfile.ZipFile(f, "w", compression=method, allowZip64=True) as zf:
            for k, v in tensors.items():
                a = np.asarray(v)
                info = zipfile.ZipInfo(str(k) + ".npy", date_time=_ZIP_DATE)
                info.compress_type = method
                info.external_attr = 0o600 << 16
                with zf.open(info, "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, a, allow_pickle=False)
                if done is not None:
                    done(a)

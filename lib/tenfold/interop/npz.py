"""NumPy ``.npz`` archives: read with ``allow_pickle=False``, written atomically."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
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


def write_npz(
    path: str | os.PathLike[str], tensors: Mapping[str, Any], *, compressed: bool = False
) -> None:
    """Write ``tensors`` to an ``.npz`` atomically.

    Only NumPy's own dtypes are written: bfloat16, float8 and float4 arrays (ml_dtypes) would
    be stored as opaque ``|V2`` / ``|V1`` / ``<f1`` records that NumPy cannot read back, so
    they are refused before anything is written (:class:`EncodeError` naming the tensor, its
    dtype and the formats that can hold it).
    """
    arrays = {}
    for k, v in tensors.items():
        a = np.asarray(v)
        if a.dtype.hasobject:
            raise EncodeError(
                describe(
                    "npz",
                    f"array {k!r}",
                    field="dtype",
                    detail="object arrays need pickle",
                    got=str(a.dtype),
                )
            )
        check_dtype("npz", str(k), a.dtype)  # never a silent |V2 for bfloat16 / float8
        arrays[str(k)] = a
    with atomic_write(path) as f:
        (np.savez_compressed if compressed else np.savez)(f, **arrays)  # type: ignore[arg-type]

"""NumPy ``.npz`` archives: read with ``allow_pickle=False``, written atomically."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

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
    """Write ``tensors`` to an ``.npz`` atomically."""
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
        arrays[str(k)] = a
    with atomic_write(path) as f:
        (np.savez_compressed if compressed else np.savez)(f, **arrays)  # type: ignore[arg-type]

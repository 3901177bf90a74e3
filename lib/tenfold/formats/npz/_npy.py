"""The ``.npy`` side of an ``.npz`` member: its header read with NumPy's own parser (versions
1.0, 2.0 and 3.0; anything else refused), and an array written as ``np.save`` writes it."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import UnsupportedError, describe

__all__ = ["npy_header", "write_npy", "write_npy_pieces"]


def npy_header(f: Any, fmt: str, what: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    npf = np.lib.format
    version = npf.read_magic(f)
    if version == (1, 0):
        return npf.read_array_header_1_0(f)  # type: ignore[no-any-return]
    if version in ((2, 0), (3, 0)):  # 3.0 differs only in the header's text encoding
        return npf.read_array_header_2_0(f)  # type: ignore[no-any-return]
    raise UnsupportedError(
        describe(
            fmt,
            what,
            field="npy version",
            detail="unsupported",
            expected="1.0 | 2.0 | 3.0",
            got=f"{version[0]}.{version[1]}",
        )
    )


def write_npy(f: Any, a: np.ndarray) -> None:
    """``np.lib.format.write_array(f, a)``'s bytes; a C-contiguous array's data goes out in
    1 MiB slices of itself (NumPy copies a zip member's data through a 16 MiB buffer)."""
    npf = np.lib.format
    if not a.flags.c_contiguous or a.dtype.hasobject or a.nbytes < _WRITE_STEP:
        npf.write_array(f, a, allow_pickle=False)
        return
    d = npf.header_data_from_array_1_0(a)
    try:
        npf.write_array_header_1_0(f, d)
    except ValueError:  # the header needs version 2.0 (NumPy's own choice)
        npf.write_array_header_2_0(f, d)
    mv = memoryview(a.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    for i in range(0, mv.nbytes, _WRITE_STEP):
        f.write(mv[i : i + _WRITE_STEP])


_WRITE_STEP = 1 << 20


def write_npy_pieces(f: Any, dtype: np.dtype, shape: tuple[int, ...], pieces: Any) -> None:
    """What :func:`write_npy` writes for a C-contiguous array of ``dtype`` and ``shape``
    whose bytes come as ``pieces`` (buffers, e.g. a conversion's raw blocks)."""
    npf = np.lib.format
    d = {"descr": npf.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    try:
        npf.write_array_header_1_0(f, d)
    except ValueError:  # the header needs version 2.0 (NumPy's own choice)
        npf.write_array_header_2_0(f, d)
    for piece in pieces:
        f.write(piece)

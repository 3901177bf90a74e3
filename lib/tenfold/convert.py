"""``tenfold convert SRC DST``: move tensors between formats, chosen by suffix.

Readers: every tenfold format that holds tensors (detected by content), ``.npz`` and
``.safetensors``. Writers: the tenfold format the destination suffix names, ``.npz`` and
``.safetensors``. Sparse tensors are densified for formats that have no sparse layout.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .core.bounds import DEFAULT_LIMITS, Limits
from .errors import UnsupportedError

__all__ = ["convert", "read_any", "write_any"]


def _suffix(path: str | os.PathLike[str]) -> str:
    return os.path.splitext(os.fspath(path))[1].lower()


def read_any(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Tensors of ``path`` as owned arrays (at most ``limits.decode_budget`` bytes of them)."""
    from .core.mapped import open_regular
    from .formats import FORMATS, SNIFF_BYTES, detect_bytes, module_for

    with os.fdopen(open_regular(path), "rb") as f:
        head = f.read(SNIFF_BYTES)
    info = detect_bytes(head)
    if info is not None and info.name not in ("npz", "safetensors"):
        # the readers that take limits (taridx has no decoded data to bound)
        kw = {"limits": limits} if info.name in ("ztensor", "oinf", "fold", "wtxt") else {}
        return module_for(info.name).load(path, copy=True, **kw)
    suffix = _suffix(path)
    # npz and safetensors: the whole-file loaders that charge every array to one budget
    if suffix == ".npz" or head[:4] == b"PK\x03\x04" or (info is not None and info.name == "npz"):
        from .interop import read_npz

        return read_npz(path, limits=limits)
    if suffix == ".safetensors" or (info is not None and info.name == "safetensors"):
        from .interop import read_safetensors

        return read_safetensors(path, copy=True, limits=limits)
    known = ", ".join(s for i in FORMATS for s in i.suffixes)
    raise UnsupportedError(
        f"tenfold: {os.fspath(path)}: cannot read; expected {known}, .npz or .safetensors"
    )


def _densify(tensors: dict[str, Any], limits: Limits = DEFAULT_LIMITS) -> dict[str, np.ndarray]:
    from .core.alloc import nbytes_of

    budget = limits.budget()  # every dense copy made for one write
    out = {}
    for k, v in tensors.items():
        if not isinstance(v, np.ndarray) and hasattr(v, "shape") and hasattr(v, "dtype"):
            what = f"sparse tensor {k!r} made dense"
            budget.take(nbytes_of(tuple(v.shape), v.dtype, fmt="convert", what=what), "convert",
                        what)
        if hasattr(v, "toarray"):
            v = v.toarray()
        elif hasattr(v, "todense") and not isinstance(v, np.ndarray):
            v = np.asarray(v.todense())
        out[k] = v
    return out


def write_any(path: str | os.PathLike[str], tensors: dict[str, Any]) -> None:
    suffix = _suffix(path)
    if suffix == ".npz":
        from .interop import write_npz

        write_npz(path, _densify(tensors))
    elif suffix == ".safetensors":
        from .interop import write_safetensors

        write_safetensors(path, _densify(tensors))
    else:
        from .formats import by_suffix

        by_suffix(path).load_module().save(path, tensors)


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> int:
    """Copy every tensor of ``src`` into a new file ``dst``; return how many."""
    tensors = read_any(src)
    write_any(dst, tensors)
    return len(tensors)

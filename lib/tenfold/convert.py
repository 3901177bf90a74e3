"""``tenfold convert SRC DST``: move tensors between formats, chosen by suffix.

Readers: every tenfold format that holds tensors (detected by content), ``.npz`` and
``.safetensors``. Writers: the tenfold format the destination suffix names, ``.npz`` and
``.safetensors``. Sparse tensors are densified for formats that have no sparse layout.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .errors import UnsupportedError

__all__ = ["convert", "read_any", "write_any"]


def _suffix(path: str | os.PathLike[str]) -> str:
    return os.path.splitext(os.fspath(path))[1].lower()


def read_any(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Tensors of ``path`` as owned arrays."""
    from .formats import FORMATS, SNIFF_BYTES, detect_bytes, module_for

    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    info = detect_bytes(head)
    if info is not None:
        return module_for(info.name).load(path, copy=True)
    suffix = _suffix(path)
    if suffix == ".npz" or head[:4] == b"PK\x03\x04":
        from .interop import read_npz

        return read_npz(path)
    if suffix == ".safetensors":
        from .interop import read_safetensors

        return read_safetensors(path, copy=True)
    known = ", ".join(s for i in FORMATS for s in i.suffixes)
    raise UnsupportedError(
        f"tenfold: {os.fspath(path)}: cannot read; expected {known}, .npz or .safetensors"
    )


def _densify(tensors: dict[str, Any]) -> dict[str, np.ndarray]:
    out = {}
    for k, v in tensors.items():
        if hasattr(v, "toarray"):
            v = v.toarray()
        elif hasattr(v, "todense") and not isinstance(v, np.ndarray):
            v = np.asarray(v.todense())
        out[k] = v
    return out


def write_any(path: str | os.PathLike[str], tensors: dict[str, Any], **options: Any) -> None:
    """Write ``tensors`` in the format ``path``'s suffix names (``options`` go to its save)."""
    suffix = _suffix(path)
    if suffix == ".npz":
        from .interop import write_npz

        write_npz(path, _densify(tensors))
    elif suffix == ".safetensors":
        from .interop import write_safetensors

        write_safetensors(path, _densify(tensors))
    else:
        from .formats import by_suffix

        by_suffix(path).load_module().save(path, tensors, **options)


def convert(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], *, zt_generation: Any = None
) -> int:
    """Copy every tensor of ``src`` into a new file ``dst``; return how many.

    ``zt_generation`` chooses the zTensor generation of a ``.zt`` destination: ``0``/``"0.1.0"``
    (the default) or ``2``/``"v2"`` (canonical v2).
    """
    tensors = read_any(src)
    options = {} if zt_generation is None else {"generation": zt_generation}
    if options and _suffix(dst) != ".zt":
        raise UnsupportedError(f"tenfold: {os.fspath(dst)}: --zt-generation needs a .zt file")
    write_any(dst, tensors, **options)
    return len(tensors)

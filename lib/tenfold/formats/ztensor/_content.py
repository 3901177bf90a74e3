"""The layout-independent content digest of a zTensor model (v2 spec §6.4).

The digest is taken over the deterministic CBOR of ``["zt.content/1", objects]``, where
``objects`` is the manifest's objects map reduced to ``shape``, ``layout``, ``attributes`` (if
any) and, per part, ``dtype``, ``type`` (if any) and ``digest`` (over the decoded bytes). Nothing
about placement (offsets, alignment, blob sharing, encodings, shards) enters it, so two files
holding the same tensors have the same content digest however they were written.

For a v2 file it comes from the manifest alone and is undefined (an error) when a part has no
digest. For 0.1.0 and v1 files tenfold derives the v2 form of each tensor (the object a v2
writer would produce for it, with xxh3 part digests computed from the data), so a file and its
conversion to v2 have the same content digest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.buffers import byte_view
from ...core.checksums import xxh3_64, xxh3_hasher
from ...errors import UnsupportedError, describe
from . import _dcbor
from ._v2spec import COO, CSR, DENSE
from .sparse import from_input

__all__ = ["content_digest", "ALGORITHMS"]

ALGORITHMS = ("sha256", "xxh3")
TAG = "zt.content/1"


def _finish(objects: dict[str, Any], algo: str) -> str:
    raw = _dcbor.encode([TAG, objects])
    if algo == "sha256":
        from ...core.checksums import sha256_hex

        return "sha256:" + sha256_hex(raw)
    if algo == "xxh3":
        return f"xxh3:{xxh3_64(raw):016x}"
    raise ValueError(f"zt: content digest algorithm must be one of {ALGORITHMS}, not {algo!r}")


def _from_manifest(reader: Any) -> dict[str, Any]:
    out = {}
    for info in reader.infos():
        parts = {}
        for role, p in info.parts.items():
            if p.digest is None:
                raise UnsupportedError(
                    describe(
                        "zt",
                        f"object {info.name!r} part {role!r}",
                        field="digest",
                        detail="missing, so the content digest is undefined (spec §6.4)",
                    )
                )
            d: dict[str, Any] = {"dtype": p.dtype}
            if p.type is not None:
                d["type"] = p.type
            d["digest"] = p.digest
            parts[role] = d
        obj: dict[str, Any] = {"shape": list(info.shape), "layout": info.layout, "parts": parts}
        if info.attributes is not None:
            obj["attributes"] = info.attributes
        out[info.name] = obj
    return out


def _part(a: np.ndarray) -> dict[str, Any]:
    from ._v2values import le_pieces, pack_f4, storage_of

    dtype, ltype = storage_of(a.dtype, "tensor")
    if ltype == "f4_e2m1":
        a = pack_f4(a)
    h = xxh3_hasher()
    for piece in le_pieces(np.asarray(a)):
        h.update(byte_view(piece))
    d: dict[str, Any] = {"dtype": dtype}
    if ltype is not None:
        d["type"] = ltype
    d["digest"] = f"xxh3:{h.intdigest():016x}"
    return d


def _derived(reader: Any) -> dict[str, Any]:
    out = {}
    for name in reader:
        value = reader.read(name)
        sparse = from_input(value)
        if sparse is None:
            a = np.asarray(value)
            out[name] = {"shape": list(a.shape), "layout": DENSE, "parts": {"data": _part(a)}}
            continue
        if sparse.format == "csr":
            parts = {
                "values": _part(np.asarray(sparse.data)),
                "indices": _part(np.asarray(sparse.indices, "<u8")),
                "indptr": _part(np.asarray(sparse.indptr, "<u8")),
            }
            layout = CSR
        else:
            parts = {
                "values": _part(np.asarray(sparse.data)),
                "coords": _part(np.asarray(sparse.coords, "<u8").reshape(-1)),
            }
            layout = COO
        out[name] = {"shape": list(sparse.shape), "layout": layout, "parts": parts}
    return out


def content_digest(source: Any, algo: str = "sha256") -> str:
    """``"<algo>:<hex>"`` content digest of the zTensor file ``source`` (path or buffer)."""
    from ._generations import open_any

    with open_any(source, sparse="raw") as r:
        if getattr(r, "generation", None) == "v2":
            return _finish(_from_manifest(r), algo)
        return _finish(_derived(r), algo)

"""OINF (Open Infer Neural Format): lazy reader, byte-exact writer, strict verifier.

>>> import numpy as np, tempfile, os
>>> from tenfold import oinf
>>> p = os.path.join(tempfile.mkdtemp(), "m.oinf")
>>> oinf.write(p, sizevars={"D": 2}, metadata={"mode": "fast"},
...            tensors={"w": oinf.Tensor([[1, -2], [3, 0]], "i4")})
>>> with oinf.open(p) as r:
...     r.sizevars, r.metadata, r["w"].tolist(), r.info("w").dtype
({'D': 2}, {'mode': 'fast'}, [[1, -2], [3, 0]], 'i4')
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...core.report import Report
from ._verify import verify_reader
from .reader import Bitset, MetadataInfo, OinfReader, QuantParams, TensorInfo
from .writer import Scalar, Tensor, Uninitialized, write

OinfReader.use_verifier(verify_reader)  # OinfReader.verify(), without reader.py importing _verify

__all__ = [
    "open",
    "load",
    "save",
    "write",
    "inspect",
    "verify",
    "demo",
    "OinfReader",
    "TensorInfo",
    "MetadataInfo",
    "QuantParams",
    "Bitset",
    "Scalar",
    "Tensor",
    "Uninitialized",
]


def open(source: Any, **kw: Any) -> OinfReader:  # noqa: A001 - the format API name
    """Open an OINF file (path or buffer) lazily; see :class:`OinfReader`."""
    return OinfReader(source, **kw)


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """Every tensor that has data (packed types unpacked), by name.

    With ``copy=False`` byte-aligned tensors are read-only views that keep the mapping alive.
    """
    with OinfReader(source, **kw) as r:
        return r.load(copy=copy)


def save(path: str | os.PathLike[str], tensors: Mapping[str, Any], **kw: Any) -> None:
    """Write ``tensors`` (plus optional ``sizevars=`` / ``metadata=``) as OINF version 1."""
    write(path, tensors=tensors, **kw)


def inspect(source: Any) -> list[dict]:
    """One row per tensor (metadata and sizevars rows follow, with layout "metadata" /
    "sizevar")."""
    rows: list[dict] = []
    with OinfReader(source) as r:
        for t in r.infos():
            rows.append(
                {
                    "name": t.name,
                    "dtype": t.dtype,
                    "shape": list(t.shape),
                    "bytes": t.data_nbytes if t.has_data else "-",
                    "encoding": "bitpacked" if t.packed else "raw",
                    "layout": "dense" if t.has_data else "no data",
                    "checksum": "-",
                    "offset": t.data_offset if t.has_data else "-",
                    "quant": "-"
                    if t.quant is None
                    else ("per-channel" if t.quant.scale_mode == 2 else "per-tensor"),
                }
            )
        for key in r.metadata:
            mi = r.metadata_info(key)
            rows.append(
                {
                    "name": key,
                    "dtype": mi.dtype,
                    "shape": "-",
                    "bytes": mi.value_nbytes,
                    "encoding": "raw",
                    "layout": "metadata",
                    "checksum": "-",
                    "offset": mi.value_offset,
                    "quant": "-",
                }
            )
        for name, value in r.sizevars.items():
            rows.append(
                {
                    "name": name,
                    "dtype": "u64",
                    "shape": "-",
                    "bytes": 8,
                    "encoding": str(value),
                    "layout": "sizevar",
                    "checksum": "-",
                    "offset": "-",
                    "quant": "-",
                }
            )
    return rows


def verify(source: Any, **kw: Any) -> Report:
    """Check every OINF rule; never raises on a damaged file (see :mod:`._verify`)."""
    from ._verify import verify as _verify

    return _verify(source, **kw)


def demo(directory: Path) -> Path:
    """Write a small deterministic sample model into ``directory``; return its path."""
    rng = np.random.default_rng(7)
    path = Path(directory) / "demo.oinf"
    write(
        path,
        sizevars={"B": 4, "D": 16},
        metadata={
            "mode": "clamp_up",
            "eps": Scalar(1e-5, "f32"),
            "layers": Scalar(2, "u32"),
            "mask": Bitset([1, 0, 1, 1, 0, 0, 0, 1, 1]),
            "lut": Tensor([0, 1, 15], "u4"),
        },
        tensors={
            "w1": rng.standard_normal((16, 32)).astype(np.float32),
            "b1": np.zeros(32, np.float32),
            "w1.bf16": Tensor(rng.standard_normal((4, 8)), "bf16"),
            "w1.q4": Tensor(rng.integers(-8, 8, (16, 32)), "i4"),
            "w1.t2": Tensor(rng.integers(-1, 2, 37), "t2"),
            "state": Uninitialized("f32", (4, 16)),
        },
    )
    return path

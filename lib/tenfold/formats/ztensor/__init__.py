"""zTensor (``.zt``), every generation: 0.1.0 (``ZTEN0001``, read and written; the default of
:func:`save`), v1.x (``ZTEN1000``, read) and v2 (``89 5A 54 32 ...``, read).

:func:`open`, :func:`load`, :func:`inspect` and :func:`verify` choose the reader by the magic
bytes; :func:`detect` names the generation.

>>> import numpy as np, tempfile, os, tenfold.ztensor as zt
>>> path = os.path.join(tempfile.mkdtemp(), "a.zt")
>>> zt.save(path, {"x": np.arange(3, dtype=np.int16)})
>>> zt.load(path)["x"].tolist()
[0, 1, 2]
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from . import verify as _verify_module  # noqa: F401  (loaded before the function shadows it)
from ._append import V2Appender, append
from ._content import content_digest
from ._generations import generation, generation_or_010, inspect_rows, open_any, verify_any
from ._generations import open_fd as _open_fd
from ._index import TensorInfo
from ._v1 import V1Reader
from ._v2spec import REFERENCE_RULES, ObjectInfo, PartInfo
from .reader import Reader
from .sparse import SparseTensor
from .v2reader import PartsObject, V2Reader
from .v2writer import V2Writer, save_sharded
from .writer import Writer, save

if TYPE_CHECKING:
    import pathlib

Reader.use_verifier(_verify_module.verify_reader)  # Reader.verify(); reader.py never imports it

__all__ = [
    "Reader",
    "V1Reader",
    "V2Reader",
    "V2Writer",
    "V2Appender",
    "append",
    "content_digest",
    "save_sharded",
    "ObjectInfo",
    "PartInfo",
    "PartsObject",
    "REFERENCE_RULES",
    "detect",
    "Writer",
    "TensorInfo",
    "SparseTensor",
    "open",
    "load",
    "save",
    "inspect",
    "verify",
    "demo",
]


def open(source: Any, **options: Any) -> Any:  # noqa: A001
    """Open a zTensor file of any generation: a :class:`Reader` (0.1.0), :class:`V1Reader` or
    :class:`V2Reader`, chosen by the magic bytes (see those classes for the options)."""
    return open_any(source, **options)


def open_fd(
    path: str | os.PathLike[str], fd: int, size: int, head: bytes, tail: bytes, **options: Any
) -> Any:
    """:func:`open` of a local file that :func:`tenfold.open` has already opened on ``fd``
    and whose ends it has read (``size``, ``head``, ``tail`` as ``fmap.open_ends`` gives
    them, the tail at least 16 KiB or the whole file): the reader owns ``fd``."""
    return _open_fd(path, fd, size, head, tail, options)


def detect(source: Any) -> str:
    """The generation of a zTensor file: ``"0.1.0"``, ``"v1"`` or ``"v2"`` (by magic)."""
    return generation(source)


def verify(source: Any, **options: Any) -> Any:
    """Check everything a reader relies on, for any generation; never raises on damage."""
    return verify_any(source, **options)


def load(source: Any, copy: bool = False, **options: Any) -> dict[str, Any]:
    """Every tensor of ``source`` as a dict (views of the file unless ``copy=True``)."""
    with open_any(source, copy=copy, **options) as r:
        return r.read_all()


def inspect(source: Any) -> list[dict[str, Any]]:
    """One row per tensor: name, dtype, shape, bytes (stored), encoding, layout, checksum
    (v1/v2 rows add generation, parts and shards)."""
    if generation_or_010(source) != "0.1.0":
        with open_any(source) as r2:
            return inspect_rows(r2)
    with Reader(source) as r:
        rows = []
        for i in r.infos():
            stored = i.size + sum(b.size for b in i.components.values())
            row = {
                "name": i.name,
                "dtype": i.dtype,
                "shape": "x".join(map(str, i.shape)) or "()",
                "bytes": stored,
                "encoding": i.encoding,
                "layout": i.layout
                if i.sparse_format is None or i.layout != "sparse"
                else f"sparse/{i.sparse_format}",
                "checksum": i.checksum or "-",
                "offset": i.offset,
            }
            rows.append(row)
        return rows


def demo(directory: str | os.PathLike[str]) -> pathlib.Path:
    """Write a small sample file (dense raw and zstd, checksums, a sparse tensor)."""
    import pathlib

    path = pathlib.Path(directory) / "demo.zt"
    rng = np.random.default_rng(2026)
    with Writer(path) as w:
        w.add("embedding", rng.standard_normal((16, 8)).astype(np.float32), checksum="crc32c")
        w.add("bias", np.linspace(-1, 1, 8, dtype=np.float64), checksum="sha256")
        w.add("mask", rng.random(12) < 0.5)
        w.add("counts", np.arange(100, dtype=np.int64) % 7, encoding="zstd", checksum="crc32c")
        rows = np.array([0, 1, 3, 3], np.uint64)
        w.add(
            "adjacency",
            SparseTensor(
                "csr",
                (3, 4),
                np.array([1.0, 2.0, 3.0], np.float32),
                indices=np.array([1, 0, 3], np.uint64),
                indptr=rows,
            ),
        )
    return path

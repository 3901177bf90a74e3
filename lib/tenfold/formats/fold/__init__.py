"""FOLD / MIND: a checkpoint container of named chunks with zstd, CRC-32C, SHA-256 and
Reed-Solomon repair (pyfolds 1.0.2 files and its unreleased ``sha256:`` / ``hmac-sha256:``
variant).

* :class:`Reader` / :func:`open` read chunks (zero-copy when stored uncompressed), checking
  CRC-32C first and running Reed-Solomon correction only when it fails;
* :class:`TensorView` is what :func:`tenfold.open` gives: the arrays of the tensor chunks,
  named as :func:`load` names them;
* :class:`Writer` writes chunks as they come, atomically, deterministically;
* :func:`verify` reports each chunk as ok, repaired or damaged; :func:`repair` writes a
  corrected copy.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core import alloc
from ._spec import FMT as _FMT
from ._spec import MAX_CHUNK_SIZE, MAX_INDEX_SIZE
from .reader import ChunkInfo, FoldWarning, Reader
from .tensors import TensorNames, TensorView, tensor_chunks
from .verify import repair, verify, verify_reader
from .writer import Writer

Reader.use_verifier(verify_reader)  # Reader.verify(), without reader.py importing verify.py

__all__ = [
    "Reader",
    "TensorView",
    "Writer",
    "ChunkInfo",
    "FoldWarning",
    "open",
    "load",
    "save",
    "inspect",
    "verify",
    "repair",
    "demo",
    "MAX_CHUNK_SIZE",
    "MAX_INDEX_SIZE",
]


def open(source: Any, **kw: Any) -> Reader:  # noqa: A001 - the format API name
    """Open a FOLD / MIND file (see :class:`Reader` for the options)."""
    return Reader(source, **kw)


def load(
    source: Any, copy: bool = False, *, chunk: str | None = None, **kw: Any
) -> dict[str, np.ndarray]:
    """The arrays of a file's tensor chunks (``STEN`` safetensors and ``NPZ0``).

    With ``chunk`` only that chunk is read. Otherwise every tensor chunk is: with exactly one,
    its arrays keep their names; with several, names become ``"<chunk>/<array>"``, and two
    arrays that would get the same name (chunk ``x`` array ``y/z``, chunk ``x/y`` array ``z``)
    are refused (:class:`UnsupportedError` naming both), never one dropped.
    ``copy=True`` gives writable arrays that do not keep the file mapped.
    """
    with Reader(source, **kw) as r:
        names = TensorNames([chunk] if chunk is not None else tensor_chunks(r))
        out: dict[str, np.ndarray] = {}
        budget = r.limits.budget()  # one for the whole call
        for name in names.chunks:
            arrays = r.read_state_dict(name, budget=budget)
            for k, v in arrays.items():
                key = names.add(name, k)
                if copy and isinstance(v, np.ndarray):
                    v = alloc.copy(v, fmt="fold", what=f"chunk {name!r} array {k!r}", budget=budget)
                out[key] = v
        return out


def save(
    path: str | os.PathLike[str],
    tensors: Mapping[str, np.ndarray],
    *,
    chunk: str = "tensors",
    metadata: Mapping[str, Any] | None = None,
    **kw: Any,
) -> None:
    """Write ``tensors`` as one ``STEN`` (safetensors) chunk named ``chunk``.

    Uncompressed (``compress=None``) the chunk is streamed one tensor at a time; with zstd
    (the default) the chunk is compressed in one piece, as pyfolds does.

    ``kw`` are :class:`Writer` options (compress, level, ecc, digest, created_at_unix...).
    """
    from ..safetensors.writer import pieces

    # names and dtypes checked before the file is created; errors name FOLD, not the chunk's
    # safetensors
    size, parts = pieces(tensors, fmt=_FMT)
    with Writer(path, **kw) as w:
        w.add_chunk_pieces(chunk, "STEN", parts, size)  # one tensor in memory at a time
        w.finalize(metadata)


def inspect(source: Any, **kw: Any) -> list[dict]:
    """One row per chunk: name, ctype, sizes, compression, ECC and digest."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FoldWarning)
        r = Reader(source, **kw)
    with r:
        return [
            {
                "name": c.name,
                "dtype": "-",
                "shape": "-",
                "bytes": c.uncomp_len,
                "encoding": c.compression,
                "layout": c.ctype,
                "checksum": f"crc32c:{c.crc32c:08x}",
                "offset": c.offset,
                "stored": c.comp_len,
                "ecc": c.ecc_algo,
                "ecc_len": c.ecc_len,
            }
            for c in r.chunks
        ]


def demo(directory: pathlib.Path) -> pathlib.Path:
    """Write a small deterministic ``.mind`` sample (JSON, NPZ0, STEN chunks, RS(32))."""
    path = pathlib.Path(directory) / "demo.mind"
    rng = np.random.default_rng(20240611)
    with Writer(path, ecc="med", created_at_unix=1700000000.0) as w:
        w.add_json("llm_manifest", {"format": "fold", "kind": "mind"})
        w.add_json("ai_graph", {"nodes": [0, 1, 2], "edges": [[0, 1], [1, 2]]})
        w.add_arrays(
            "ai_vectors",
            {
                "vectors": rng.standard_normal((8, 16)).astype(np.float32),
                "ids": np.arange(8, dtype=np.int64),
            },
        )
        w.add_state_dict(
            "torch_state",
            {
                "weight": rng.standard_normal((4, 4)).astype(np.float32),
                "bias": np.zeros(4, np.float32),
            },
        )
        w.add_chunk("blob", "BLOB", rng.integers(0, 256, 3000, dtype=np.uint8))
        w.finalize({"model_type": "demo", "tags": {"purpose": "demo"}})
    return path

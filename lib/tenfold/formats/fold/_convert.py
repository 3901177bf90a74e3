"""FOLD in ``tenfold convert`` (the hooks of :mod:`tenfold.conversion`): its source (an intact,
uncompressed STEN chunk copied as raw ranges of the file; anything else through the reader,
which repairs with the ECC) and its target (a FOLD source keeps its metadata and zstd
chunks; the index's own keys are reserved)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...conversion import Lazy, Target, WriteOptions, dict_source, meta_refusal
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...tensor_source import Source
from ._format import FORMAT
from ._spec import INTERNAL_METADATA


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The tensors of a FOLD file (``convert_source``); its other chunks are ``extras``."""
    from . import load
    from .reader import Reader

    with Reader(path, limits=limits) as r:
        md = {k: v for k, v in r.metadata.items() if k not in INTERNAL_METADATA}
        sten = [c for c in r.chunks if c.ctype in ("STEN", "NPZ0")]
        extras = [f"chunk {c.name!r} ({c.ctype})" for c in r.chunks if c not in sten]
        compressed = any(c.compression != "none" for c in sten)
        streamable = len(sten) == 1 and sten[0].ctype == "STEN" and sten[0].compression == "none"
        local = isinstance(path, (str, os.PathLike))  # a fetched buffer has no raw copies
        if streamable and local and _chunk_intact(path, r, sten[0]):
            src = _sten_source(path, sten[0], md)
            src.extras = extras
            return src
    src = dict_source(FORMAT.name, load(path, limits=limits), metadata=md, extras=extras)
    src.compressed = compressed
    return src


def _chunk_intact(path: Any, r: Any, c: Any) -> bool:
    """CRC-32C and SHA-256 of an uncompressed chunk, computed in 1 MiB blocks (no map, no
    copy of the chunk). False sends the caller to the reader, which repairs with the ECC or
    reports the damage."""
    import hashlib

    from ...core.checksums import crc32c
    from . import _digest

    tmp = Source(FORMAT.name, [], lambda n: (np.dtype("u1"), ()), lambda n: None, path=path,
                 raw=lambda n: None)  # fmt: skip
    crc, sha = 0, hashlib.sha256()
    try:
        for block in tmp.blocks(c.payload_offset, c.comp_len):
            crc = crc32c(block, crc)
            sha.update(block)
    finally:
        tmp.close()
    return crc == c.crc32c and bool(_digest.matches(c.sha256, sha.hexdigest(), r.hmac_key))


def _sten_source(path: Any, c: Any, md: dict[str, Any]) -> Source:
    """The tensors of an intact, uncompressed STEN chunk, copied as raw ranges of the file."""
    from ...core.mapped import MappedFile
    from ..safetensors.writer import parse

    mf = MappedFile(path, fmt=FORMAT.name)
    try:
        buf = mf.buffer()[c.payload_offset : c.payload_offset + c.comp_len]
        tensors = parse(buf, fmt=FORMAT.name, what=f"chunk {c.name!r}", offset=c.payload_offset)
    except BaseException:
        mf.close()
        raise
    base = mf.buffer().ctypes.data

    def raw(n: str) -> tuple[int, int, str | None] | None:
        v = tensors[n]
        if v.nbytes == 0:
            return 0, 0, None
        if v.base is None or not v.flags.c_contiguous:  # F4: unpacked copy
            return None
        return v.ctypes.data - base, v.nbytes, None

    return dict_source(FORMAT.name, tensors, metadata=md, close=mf.close, raw=raw, path=path)


def target(fmt: Any, dst: Any, generation: Any = None) -> Target:
    """The target of a ``.fold`` / ``.mind`` destination (``convert_target``)."""
    return FoldTarget(fmt, dst, generation)


class FoldTarget(Target):
    """FOLD: the index's metadata; a FOLD source keeps all of it (any JSON value), strings
    from other formats, the index's own keys reserved."""

    def metadata(self, src: Source) -> dict[str, Any]:
        if src.fmt == self.name and src.metadata and not src.sizevars:
            return dict(src.metadata)
        return super().metadata(src)

    def check_key(self, key: str) -> None:
        if key in INTERNAL_METADATA:
            raise meta_refusal(self.name, key, "the key is reserved by FOLD")

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        from . import save

        lazy = {n: Lazy(s, n, bar) for n in s.names}
        save(dst, lazy, metadata=md, compress=opts.compress, level=opts.level,  # type: ignore[arg-type]
             threads=opts.threads, fsync=opts.fsync)  # fmt: skip

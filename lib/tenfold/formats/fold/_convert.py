"""FOLD in ``tenfold convert`` (the hooks of :mod:`tenfold.conversion`): its source (an intact,
uncompressed STEN chunk copied as raw ranges of the file; anything else through the reader,
which repairs with the ECC) and its target (a FOLD source keeps its metadata and zstd
chunks; the index's own keys are reserved)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...conversion import (
    Lazy,
    Target,
    WriteOptions,
    checkable,
    checked_blocks,
    dict_source,
    meta_refusal,
)
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...tensor_source import RawRange, Source, reader_source
from ._format import FORMAT
from ._spec import FMT, INTERNAL_METADATA


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The tensors of a FOLD file (``convert_source``), named as :func:`tenfold.fold.load`
    names them; its other chunks are ``extras``. One intact, uncompressed ``STEN`` chunk is
    read through the tensor view (:class:`~tenfold.fold.tensors.TensorView`), its tensors
    copied as raw ranges of the file; anything else is loaded whole (checked, repaired with
    the ECC). The file is opened once: the check, the view and the copies read that opened
    file, whatever its path names meanwhile."""
    from . import load
    from .reader import TENSOR_CTYPES, Reader

    r = Reader(path, limits=limits)
    try:
        md = {k: v for k, v in r.metadata.items() if k not in INTERNAL_METADATA}
        sten = [c for c in r.chunks if c.ctype in TENSOR_CTYPES]
        extras = [f"chunk {c.name!r} ({c.ctype})" for c in r.chunks if c not in sten]
        compressed = any(c.compression != "none" for c in sten)
        streamable = len(sten) == 1 and sten[0].ctype == "STEN" and sten[0].compression == "none"
        local = isinstance(path, (str, os.PathLike))  # a fetched buffer has no raw copies
        if streamable and local and _chunk_intact(r, sten[0]):
            return _sten_source(r, limits, sten[0].name, extras)
        tensors = load(r.file, limits=limits)
    except BaseException:
        r.close()
        raise
    r.close()
    src = dict_source(FORMAT.name, tensors, metadata=md, extras=extras)
    src.compressed = compressed
    return src


def _chunk_intact(r: Any, c: Any) -> bool:
    """CRC-32C and SHA-256 of an uncompressed chunk of the file ``r`` holds open, computed in
    1 MiB blocks (no map, no copy of the chunk). False sends the caller to the reader, which
    repairs with the ECC or reports the damage."""
    import hashlib

    from ...core.blocks import BlockReader
    from ...core.checksums import crc32c
    from . import _digest

    crc, sha = 0, hashlib.sha256()
    with BlockReader() as f:
        for block in f.blocks(r.file, c.payload_offset, c.comp_len):
            crc = crc32c(block, crc)
            sha.update(block)
    return crc == c.crc32c and bool(_digest.matches(c.sha256, sha.hexdigest(), r.hmac_key))


def _sten_source(r: Any, limits: Limits, chunk: str, extras: list[str]) -> Source:
    """The tensors of the intact (checked), uncompressed STEN chunk ``chunk`` of the file the
    reader ``r`` holds open (the source owns ``r``): read from that file without another
    check, copied as raw ranges of it (but the packed ``F4``)."""
    from ..safetensors.writer import PACKED_BITS
    from .tensors import TensorView

    view = TensorView(r.file, limits=limits)  # the same opened file: closing either closes it
    try:
        table = view.chunks_reader.sten_entries(chunk)
        assert table is not None  # an uncompressed STEN chunk has one
    except BaseException:
        view.close()
        raise

    def raw(n: str) -> RawRange | None:
        tag, _shape, begin, end = table[n]
        return None if tag in PACKED_BITS else RawRange(begin, end - begin, None, view.file)

    def get(n: str) -> Any:
        return view.chunks_reader.read_tensor(chunk, n, verify=False)

    def close() -> None:
        view.close()
        r.close()

    return reader_source(FORMAT, view, raw=raw, get=get, close=close, extras=extras)


def target(fmt: Any, dst: Any, generation: Any = None) -> Target:
    """The target of a ``.fold`` / ``.mind`` destination (``convert_target``)."""
    return FoldTarget(fmt, dst, generation)


class FoldTarget(Target):
    """FOLD: the index's metadata; a FOLD source keeps all of it (any JSON value), strings
    from other formats, the index's own keys reserved."""

    compressions = ("zstd",)

    def metadata(self, src: Source) -> dict[str, Any]:
        if src.fmt == self.name and src.metadata and not src.sizevars:
            return dict(src.metadata)
        return super().metadata(src)

    def check_key(self, key: str) -> None:
        if key in INTERNAL_METADATA:
            raise meta_refusal(self.name, key, "the key is reserved by FOLD")

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        from . import save
        from .writer import Writer

        if opts.compress is not None:  # zstd compresses the chunk in one piece (pyfolds')
            lazy = {n: Lazy(s, n, bar) for n in s.names}
            save(dst, lazy, metadata=md, compress=opts.compress, level=opts.level,  # type: ignore[arg-type]
                 threads=opts.threads, fsync=opts.fsync)  # fmt: skip
            return
        size, parts = sten_pieces(s, bar)  # names and dtypes checked before the file exists
        with Writer(dst, compress=None, fsync=opts.fsync) as w:
            w.add_chunk_pieces("tensors", "STEN", parts, size)
            w.finalize(md)


def sten_pieces(s: Source, bar: Any) -> tuple[int, Iterator[memoryview]]:
    """The size of the safetensors bytes of ``s``'s tensors (one uncompressed STEN chunk, as
    :func:`tenfold.fold.save` writes it) and an iterator over them: a tensor whose bytes the
    source file holds as they are is read in blocks (:meth:`Source.blocks`, as the ``.zt``
    target copies: no map, nothing left resident); any other is fetched alone, written and
    released (:func:`tenfold.core.release.release`)."""
    from ...core.alloc import dense
    from ...core.buffers import byte_view
    from ...core.release import release
    from ..safetensors.writer import PACKED_BITS, header, stored, stored_nbytes, tag_of

    specs: dict[str, tuple[str, tuple[int, ...]]] = {}
    for n in s.names:
        dt, shape = s.spec(n)
        specs[n] = (tag_of(n, dt), shape)
    head, order = header(specs, None, fmt=FMT)
    size = len(head) + sum(stored_nbytes(t, math.prod(sh)) for t, sh in specs.values())

    def gen() -> Iterator[memoryview]:
        yield memoryview(head)
        for n in order:
            tag = specs[n][0]
            raw = s.raw(n)
            if raw is not None and tag not in PACKED_BITS and checkable(raw.checksum):
                # each block used before the next is read; a mismatch raises after the last
                # (the writer is atomic)
                yield from checked_blocks(s, n, raw)
                bar.update(raw.nbytes)
                continue
            v = np.asarray(dense(s.get(n), n))
            yield byte_view(stored(tag, v))
            bar.update(v.nbytes)
            release(v)
            del v
            yield memoryview(b"")  # the writer drops its view before the next tensor

    return size, gen()

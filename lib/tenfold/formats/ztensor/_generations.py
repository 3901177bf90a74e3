"""One entry point for every zTensor generation, chosen by the magic bytes.

=========  ==========================  =========================================
generation magic                       reader
=========  ==========================  =========================================
``0.1.0``  ``ZTEN0001``                :class:`tenfold.ztensor.Reader`
``v1``     ``ZTEN1000``                :class:`tenfold.ztensor.V1Reader` (1.0 and 1.1/1.2 layouts)
``v2``     ``89 5A 54 32 0D 0A 1A 0A`` :class:`tenfold.ztensor.V2Reader`
=========  ==========================  =========================================
"""

from __future__ import annotations

import os
from typing import Any

from ... import _kernels
from ...core.buffers import byte_view
from ...core.mapped import MappedFile, open_regular
from ...core.report import Report
from ...core.source import is_remote, open_file
from ...errors import FormatError, TenfoldError, TruncatedError, describe
from ._spec import MAGIC, MAGIC_V1, MAGIC_V2, TAIL_FIRST
from ._v2file import TAIL_READ
from .v2reader import V2Reader

__all__ = ["generation", "open_any", "open_fd", "verify_any", "inspect_rows", "GENERATIONS"]

GENERATIONS = {MAGIC: "0.1.0", MAGIC_V1: "v1", MAGIC_V2: "v2"}
_open_ends = _kernels.load("fmap").open_ends


def _pread(path: str | os.PathLike[str], tail: bool) -> bytes:
    """The first 8 bytes of a regular file, or its last 8 (``b""`` when shorter than 16).

    A FIFO, device or directory is refused without blocking (an ``open`` of a FIFO with no
    writer would wait forever), see :func:`~tenfold.core.mapped.open_regular`.
    """
    fd = open_regular(path, fmt="zt")
    try:
        if not tail:
            return os.pread(fd, 8, 0)
        size = os.fstat(fd).st_size
        return os.pread(fd, 8, size - 8) if size >= 16 else b""
    finally:
        os.close(fd)


def _head(source: Any) -> bytes:
    if isinstance(source, MappedFile):
        if source.defer_head:  # a remote .zt: the tail decides
            tail = _tail(source)
            return tail if tail in (MAGIC_V1, MAGIC_V2) else MAGIC
        return source.bytes(0, min(8, source.size), "magic")
    if isinstance(source, (str, os.PathLike)):
        return _pread(source, tail=False)
    return bytes(byte_view(source)[:8])


def generation(source: Any) -> str:
    """``"0.1.0"``, ``"v1"`` or ``"v2"`` from the first 8 bytes of ``source`` (path or buffer).

    Raises :class:`FormatError` (or :class:`TruncatedError` for a file shorter than a magic)
    when the file is not zTensor.
    """
    head = _head(source)
    gen = GENERATIONS.get(head)
    if gen is not None:
        return gen
    if len(head) < 8 and any(m.startswith(head) for m in GENERATIONS):
        raise TruncatedError(
            describe(
                "zt",
                "file",
                offset=0,
                detail="shorter than the magic",
                expected=">= 8 bytes",
                got=len(head),
            )
        )
    raise FormatError(
        describe(
            "zt",
            "file",
            offset=0,
            field="magic",
            expected="ZTEN0001 | ZTEN1000 | 895a54320d0a1a0a",
            got=head,
        )
    )


def _tail(source: Any) -> bytes:
    if isinstance(source, MappedFile):
        return source.bytes(source.size - 8, 8, "footer") if source.size >= 16 else b""
    if isinstance(source, (str, os.PathLike)):
        return _pread(source, tail=True)
    mv = byte_view(source)
    return bytes(mv[-8:]) if mv.nbytes >= 16 else b""


def generation_or_010(source: Any) -> str:
    """The generation by the head magic, else by the tail magic (v2 and v1.1+ repeat it, so a
    damaged head still gets the right reader's message), else 0.1.0's reader."""
    try:
        return generation(source)
    except TenfoldError:
        return {MAGIC_V2: "v2", MAGIC_V1: "v1"}.get(_tail(source), "0.1.0")


def open_any(source: Any, **options: Any) -> Any:
    """The reader of ``source``'s generation (options as for that reader).

    A file with no zTensor magic goes to the 0.1.0 reader, whose errors say what is wrong.
    ``source`` may also be an fsspec URL or open fsspec file (``storage_options`` are passed
    to fsspec): see :mod:`tenfold.core.source`.
    """
    storage_options = options.pop("storage_options", None)
    if (type(source) is not str or ":" in source) and is_remote(source):  # a URL has a ":"
        mf = open_file(source, fmt="zt", storage_options=storage_options, tail_first=TAIL_FIRST)
        try:
            return open_any(mf, **options)
        except BaseException:
            mf.close()
            raise
    if isinstance(source, (str, os.PathLike)) and options.get("mmap", True):
        return _open_path(source, options)
    return _open_generation(source, options)


def _open_generation(source: Any, options: dict[str, Any]) -> Any:
    """The reader of ``source``'s generation, by its magic (see :func:`open_any`)."""
    gen = generation_or_010(source)
    if gen == "0.1.0":
        from .reader import Reader

        for multi_file in ("shards", "verify_shards", "trust_links"):  # one file: nothing to do
            options.pop(multi_file, None)
        return Reader(source, **options)
    if gen == "v1":
        from ._v1 import V1Reader

        return V1Reader(source, **options)
    return V2Reader(source, **options)


def _open_path(path: str | os.PathLike[str], options: dict[str, Any]) -> Any:
    """The reader of a local file, which is opened once (``fmap.open_ends``: open, fstat, its
    first 8 and last :data:`TAIL_READ` bytes in one call) and read through that descriptor
    (see :func:`open_fd`). Not a regular file: the general path refuses it (a FIFO is not
    waited for: ``O_NONBLOCK``, left set as it has no effect on a file)."""
    ends = _open_ends(path, 8, TAIL_READ)
    if ends is None:
        return _open_generation(path, options)
    fd, size, head, tail = ends
    return open_fd(path, fd, size, head, tail, options)


def open_fd(
    path: str | os.PathLike[str],
    fd: int,
    size: int,
    head: bytes,
    tail: bytes,
    options: dict[str, Any],
) -> Any:
    """The reader of the regular file ``path`` already open on ``fd`` (``size`` from fstat,
    ``head`` and ``tail`` at least its first 8 and last :data:`TAIL_READ` bytes, or all of a
    smaller file, as ``fmap.open_ends`` reads them); the reader owns ``fd`` (closed here on
    failure).

    A v2 file gets the lean open first (:meth:`V2Reader.open_fd`), the commonest open of
    all, with as few system calls as possible; anything it declines, and every other
    generation, is read through a :class:`MappedFile` of the same descriptor, whose reader
    checks everything and names any error."""
    options.pop("storage_options", None)
    if head[:8] == MAGIC_V2 and options.get("mmap", True):
        try:
            reader = V2Reader.open_fd(os.fspath(path), fd, size, tail[-TAIL_READ:], options)
        except BaseException:
            os.close(fd)
            raise
        if reader is not None:
            return reader
    mf = MappedFile(path, fmt="zt", fd=fd, size=size, head=head)  # closes fd on failure
    try:
        return _open_generation(mf, options)
    except BaseException:
        mf.close()
        raise


def verify_any(source: Any, **options: Any) -> Report:
    """Full verification of any generation; never raises on a damaged file."""
    gen = generation_or_010(source)
    if gen == "0.1.0":
        from .verify import verify as _verify010

        return _verify010(source, **options)
    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<buffer>"
    try:
        reader = open_any(source, verify_checksums=True, sparse="raw", **options)
    except TenfoldError as exc:
        report = Report("zt", path)
        report.summary["generation"] = gen
        report.add_error(exc)
        return report
    with reader:
        return reader.verify()


def inspect_rows(reader: Any) -> list[dict[str, Any]]:
    """One row per object of a v1/v2 reader (the columns of the 0.1.0 ``inspect``)."""
    rows = []
    for i in reader.infos():
        parts = i.parts
        rows.append(
            {
                "name": i.name,
                "dtype": i.dtype,
                "shape": "x".join(map(str, i.shape)) or "()",
                "bytes": i.size,
                "encoding": i.encoding,
                "layout": i.layout,
                "checksum": i.checksum or "-",
                "offset": i.offset,
                "generation": i.generation,
                "parts": ",".join(parts) if len(parts) > 1 else "",
                "shards": ",".join(sorted({p.shard for p in parts.values() if p.shard})),
            }
        )
    return rows

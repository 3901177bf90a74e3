"""Full verification of a zTensor file: structure, every checksum, every decode, padding."""

from __future__ import annotations

import os
from typing import Any

from ..._kernels import load as _load_kernel
from ...core.compression import zstd_decode_pieces
from ...core.report import OK, WARNING, Report
from ...errors import TenfoldError
from ._index import TensorInfo
from ._spec import FMT
from .reader import Reader

__all__ = ["verify"]

_scan = _load_kernel("scan")


def verify(source: Any, **options: Any) -> Report:
    """Check everything a reader relies on, and more; never raises on a damaged file.

    Structure (magic, index size, CBOR, every field, alignment, bounds, overlaps) is checked
    at open; then each tensor's checksum, its complete decode (zstd size, sparse structure),
    and the padding between blobs (zero per 0.1.4; non-zero padding is a warning, as the spec
    leaves its value undefined). A dense zstd tensor is decoded in pieces and kept nowhere, so
    verifying costs a fixed amount of memory whatever the size it declares.
    """
    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<buffer>"
    report = Report(FMT, path)
    try:
        reader = Reader(source, verify_checksums=True, sparse="raw", **options)
    except TenfoldError as exc:
        report.add_error(exc)
        return report
    with reader:
        check_reader(reader, report)
    return report


def verify_reader(reader: Reader) -> Report:
    """``Reader.verify()``: every tensor (checksum, full decode, sparse structure) and the
    padding of an open reader."""
    return check_reader(reader, Report(FMT, reader.path or "<buffer>"))


def check_dense(reader: Reader, info: TensorInfo) -> None:
    """What a whole read of dense tensor ``info`` checks, keeping nothing: the checksum (over
    the stored bytes) and, for zstd, the decoded size, decoded in pieces (see
    :func:`~tenfold.core.compression.zstd_decode_pieces`)."""
    if info.checksum_algo:
        reader.check_sum(info)
    if info.encoding != "raw":
        pieces = zstd_decode_pieces(
            reader.stored(info.name),
            info.nbytes,
            fmt=FMT,
            what=f"tensor {info.name!r}",
            offset=info.offset,
        )
        for _ in pieces:
            pass


def _check_one(reader: Reader, info: TensorInfo) -> TenfoldError | None:
    try:
        if info.layout == "dense":
            check_dense(reader, info)
        else:  # reading decodes completely (sparse structure) and checks the sum
            reader.read(info.name, copy=False)
    except TenfoldError as exc:
        return exc
    return None


#: Below this many bytes in all, tensors are checked on the calling thread alone.
_PARALLEL_MIN = 4 << 20


def _check_all(reader: Reader, infos: list[TensorInfo]) -> list[TenfoldError | None]:
    """What checking each of ``infos`` found, in order. Tensors are checked side by side on
    the threads :func:`tenfold.core.parallel.threads` allows, after the large ones, checked one
    at a time (their checksum runs on several threads itself)."""
    from ...core import checksums, parallel

    out: list[TenfoldError | None] = [None] * len(infos)
    big = [k for k, i in enumerate(infos) if i.size >= checksums.PARALLEL_BYTES]
    small = [k for k, i in enumerate(infos) if i.size < checksums.PARALLEL_BYTES]
    workers = min(parallel.threads(), len(small))
    if workers < 2 or sum(infos[k].size for k in small) < _PARALLEL_MIN:
        return [_check_one(reader, i) for i in infos]
    # large tensors first, one at a time (their checksum runs on several threads itself),
    # then the small ones side by side
    for k in big:
        out[k] = _check_one(reader, infos[k])
    for k, found in zip(
        small, parallel.each(lambda k: _check_one(reader, infos[k]), small, workers), strict=True
    ):
        out[k] = found
    return out


def check_reader(reader: Reader, report: Report) -> Report:
    """Run every content check on an open reader, adding findings to ``report``."""
    reader.forget_verified()  # check every sum again, even ones already checked
    report.summary["tensors"] = len(reader)
    report.summary["file size"] = reader.size
    # the 0.1.0 index (CBOR) carries no checksum of its own: say what an OK covers
    report.summary["index"] = "no checksum in zTensor 0.1.0: OK covers the tensors' own checksums"
    covered: list[tuple[int, int]] = [(0, 8)]
    infos = list(reader.infos())
    for info, exc in zip(infos, _check_all(reader, infos), strict=True):
        obj = f"tensor {info.name!r}"
        if exc is None:
            note = info.checksum_algo or "no checksum"
            if not info.checksum_algo:
                report.unverified.append(info.name)
            report.add(
                obj,
                OK,
                f"{info.dtype} {list(info.shape)} {info.layout} {info.encoding}, {note}",
                offset=info.offset,
            )
        else:
            report.add_error(exc, obj, offset=info.offset)
        covered.append((info.offset, info.offset + info.size))
        covered += [(b.offset, b.offset + b.size) for b in info.components.values()]
    covered.append((reader.index_start, reader.size))
    covered.sort()
    pos = 0
    buf = reader.stored_bytes()
    for start, end in covered:
        if start > pos:
            gap = buf[pos:start]
            bad = _scan.first_nonzero(gap)
            if bad >= 0:
                report.add(
                    "padding",
                    WARNING,
                    f"non-zero padding byte {int(gap[bad]):#04x} between blobs",
                    offset=pos + bad,
                )
            if start - pos >= 64 + 63:
                report.add("layout", WARNING, f"{start - pos} unused bytes", offset=pos)
        pos = max(pos, end)
    return report

"""zTensor v2 verification: every content check on an open reader (each part decoded and its
digest and data rules checked, sparse structure, shard sizes and digests, zero padding), as
findings in a :class:`~tenfold.core.report.Report`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ...core.report import ERROR, OK, WARNING, Report
from ...errors import TenfoldError
from ._v2layout import profile_finding
from ._v2spec import DENSE, LOGICAL, ObjectInfo

if TYPE_CHECKING:
    from .v2reader import V2Reader

_T = TypeVar("_T")


#: Below this many bytes in all, objects are checked on the calling thread alone.
_PARALLEL_MIN = 4 << 20


def _part_bytes(info: ObjectInfo) -> int:
    return sum(p.length for p in info.parts.values())


def _in_parallel(fn: Callable[[Any], _T], items: list[Any], sizes: list[int]) -> list[_T]:
    """``[fn(x) for x in items]``, on the threads :func:`tenfold.core.parallel.threads`
    allows when there is enough to do (``sizes``: bytes each touches), largest first."""
    from ...core import parallel

    workers = min(parallel.threads(), len(items))
    if workers < 2 or sum(sizes) < _PARALLEL_MIN:
        return [fn(x) for x in items]
    order = sorted(range(len(items)), key=lambda k: -sizes[k])
    failed: dict[int, Exception] = {}

    def one(k: int) -> Any:
        try:
            return fn(items[k])
        except Exception as exc:  # raised below in the items' own order, not by size
            failed[k] = exc
            return None

    done = parallel.each(one, order, workers)
    if failed:
        raise failed[min(failed)]
    out: list[Any] = [None] * len(items)
    for k, value in zip(order, done, strict=True):
        out[k] = value
    return out


def check_v2(reader: V2Reader, report: Report) -> Report:
    """Every content check on an open v2 reader, as findings in ``report``. Objects are
    checked side by side on the threads :func:`tenfold.core.parallel.threads` allows (the
    digests release the GIL); their findings are reported in manifest order."""
    reader.forget_verified()
    report.summary["generation"] = "v2"
    report.summary["tensors"] = len(reader)
    report.summary["file size"] = reader.size
    if reader.data_shard:
        report.add("file", OK, "data shard (no manifest)")
    infos = list(reader.infos())
    sizes = [_part_bytes(i) for i in infos]
    one = functools.partial(_check_object, reader, report.fmt, report.path)
    for sub in _in_parallel(one, infos, sizes):
        report.findings.extend(sub.findings)
    for name in reader.shards:
        try:
            reader.check_shard(name)
            report.add(f"shard {name!r}", OK, f"{reader.shard_path(name)}: size and digest")
        except FileNotFoundError as exc:
            report.add(f"shard {name!r}", ERROR, f"not found: {exc.filename}")
        except TenfoldError as exc:
            report.add_error(exc, f"shard {name!r}")
    _padding(reader, report)
    return report


def _check_object(reader: V2Reader, fmt: str, path: str, info: ObjectInfo) -> Report:
    """The findings of one object's checks (a report of its own, merged in order)."""
    report = Report(fmt, path)
    obj = f"tensor {info.name!r}"
    try:
        for role in info.parts:
            p = info.parts[role]
            if p.type is not None and p.type not in LOGICAL:
                report.add(
                    obj,
                    WARNING,
                    f"part {role!r}: unknown logical type {p.type!r}; only its digest checked",
                )
            if p.encoding is not None and p.encoding not in reader.encodings:
                report.add(
                    obj, WARNING, f"part {role!r}: unknown encoding {p.encoding!r}; not decoded"
                )
                continue
            if p.type is None or p.type in LOGICAL:
                reader.verify_part(info.name, role)
            elif p.digest is not None:
                reader.check_digest(info, p)
        if info.layout in reader.sparse_layouts:
            reader.check_sparse(info)
        broken = profile_finding(info)
        if broken is not None:  # read as its parts, as ztensor 2.1.2 reads it
            report.add(obj, WARNING, f"{broken}; read as its parts (not decoded)")
        sums = info.checksum or "no digest"
        report.add(
            obj,
            OK,
            f"{info.dtype} {list(info.shape)} {info.layout} {info.encoding}, {sums}",
            offset=info.offset,
        )
    except TenfoldError as exc:
        report.add_error(exc, obj, offset=info.offset)
    return report


def precheck(reader: V2Reader, infos: list[ObjectInfo]) -> None:
    """Before ``infos`` are read one by one: check the digests of their raw local dense parts
    side by side (threads from :func:`tenfold.core.parallel.threads`), marking each that
    passes as verified, so that the reads that follow do not check it again. One that fails
    is left unmarked: its read checks it again and raises in order."""
    todo = [
        i
        for i in infos
        if i.layout == DENSE
        and "data" in i.parts
        and i.parts["data"].digest is not None
        and i.parts["data"].encoding is None
        and i.parts["data"].shard is None
        and i.parts["data"].type is None
        and not reader.verified(i.name)
    ]
    if len(todo) >= 2:
        _in_parallel(
            functools.partial(_precheck_one, reader),
            todo,
            [_part_bytes(i) for i in todo],
        )


def _precheck_one(reader: V2Reader, info: ObjectInfo) -> None:
    try:
        reader.check_part(info, "data", info.numel)
    except TenfoldError:
        pass  # its read raises it, in order


def _padding(reader: V2Reader, report: Report) -> None:
    from ..._kernels import load as _load_kernel

    scan = _load_kernel("scan")
    spans = [(0, 8)]
    for info in reader.infos():
        spans += [(p.offset, p.offset + p.length) for p in info.parts.values() if p.shard is None]
    if reader.manifest_blob[1]:
        spans.append((reader.manifest_blob[0], sum(reader.manifest_blob)))
    spans.append((reader.tail_start, reader.size))
    spans.sort()
    buf = reader.stored_bytes()
    pos = 0
    for start, end in spans:
        if start > pos:
            gap = buf[pos:start]
            bad = scan.first_nonzero(gap)
            if bad >= 0:
                report.add(
                    "padding",
                    WARNING,
                    f"non-zero byte {int(gap[bad]):#04x} outside every blob "
                    "(padding or an unreferenced older generation)",
                    offset=pos + bad,
                )
                return
        pos = max(pos, end)

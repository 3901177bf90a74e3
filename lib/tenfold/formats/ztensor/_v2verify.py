"""zTensor v2 verification: every content check on an open reader (each part decoded and its
digest and data rules checked, sparse structure, shard sizes and digests, zero padding), as
findings in a :class:`~tenfold.core.report.Report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.report import ERROR, OK, WARNING, Report
from ...errors import TenfoldError
from ._v2layout import profile_finding
from ._v2spec import LOGICAL

if TYPE_CHECKING:
    from .v2reader import V2Reader


def check_v2(reader: V2Reader, report: Report) -> Report:
    """Every content check on an open v2 reader, as findings in ``report``."""
    reader.forget_verified()
    report.summary["generation"] = "v2"
    report.summary["tensors"] = len(reader)
    report.summary["file size"] = reader.size
    if reader.data_shard:
        report.add("file", OK, "data shard (no manifest)")
    for info in reader.infos():
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

"""What a checkpoint directory holds (``inspect``) and whether it is intact (``verify``)."""

from __future__ import annotations

import os
from typing import Any

from ...errors import TenfoldError
from ._doc import FMT, Entry
from ._reader import open


def inspect(path: Any, **options: Any) -> list[dict[str, Any]]:
    """One row per tensor (its chunks and files) and per non-tensor entry; the world size
    and DCP version as metadata rows."""
    rows: list[dict[str, Any]] = []
    with open(path, **options) as r:
        for name, e in r.doc.entries.items():
            files = sorted({c.file for c in e.chunks})
            rows.append(
                {
                    "name": name,
                    "dtype": e.dtype if e.is_tensor else "bytes",
                    "shape": tuple(e.shape) if e.is_tensor else "-",
                    "bytes": e.nbytes,
                    "encoding": "raw",
                    "layout": _chunks(e) if e.is_tensor else "DCP pickle",
                    "checksum": _algos(e),
                    "files": ",".join(files),
                }
            )
        for k, v in (("world_size", r.doc.world_size), ("dcp_version", r.doc.dcp_version)):
            rows.append(
                {"name": k, "dtype": type(v).__name__, "layout": "metadata", "value": repr(v)}
            )
    return rows


def _chunks(e: Entry) -> str:
    n = len(e.chunks)
    return f"{n} chunk" + ("" if n == 1 else "s")


def _algos(e: Entry) -> str:
    algos = sorted({c.digest.partition(":")[0] for c in e.chunks if c.digest})
    return ",".join(algos) or "-"


def verify(path: Any, **options: Any) -> Any:
    """Check the document, every rank file with its format's verifier, and every stored
    object against the document (read whole, digest checked); never raises on damage."""
    from ...core.report import ERROR, OK, Report
    from ...registry import detect, module_for

    report = Report(FMT, os.fspath(path))
    try:
        r = open(path, **options)
    except (TenfoldError, OSError) as exc:
        report.add("document", ERROR, str(exc))
        return report
    with r:
        report.summary.update(
            world_size=r.doc.world_size,
            files=len(r.doc.files),
            tensors=len(r),
            entries=len(r.doc.entries),
        )
        for file in r.doc.files:
            full = os.path.join(r.path, file)
            try:
                sub = module_for(detect(full)).verify(full)
            except (TenfoldError, OSError) as exc:
                report.add(f"file {file!r}", ERROR, str(exc))
                continue
            for f in sub.findings:
                if f.status != OK:
                    report.add(f"{file}: {f.obj}", f.status, f.message, offset=f.offset)
        for name, e in r.doc.entries.items():
            try:
                for c in e.chunks:
                    r.rank_files.read(name, c)
            except TenfoldError as exc:
                report.add(f"entry {name!r}", ERROR, str(exc))
                continue
            report.add(f"entry {name!r}", OK)
    return report


def verify_reader(reader: Any) -> Any:
    """``reader.verify()`` of a :class:`~tenfold.interop.dcp_files.DcpReader`: :func:`verify`
    of its directory."""
    return verify(reader.path)

"""What a checkpoint directory holds (``inspect``) and whether it is intact (``verify``)."""

from __future__ import annotations

import os
from typing import Any

from ...core.source import is_remote
from ...errors import TenfoldError
from ._attempts import describe_leftover, leftovers
from ._doc import FMT, Entry
from ._reader import open
from ._remote import stray_objects


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
    for left in _leftovers(path):
        rows.append(
            {
                "name": f"unfinished save {left['attempt']}",
                "dtype": "str",
                "layout": "metadata",
                "value": describe_leftover(left),
            }
        )
    return rows


def _leftovers(path: Any) -> list[dict[str, Any]]:
    """What unfinished saves left beside a local checkpoint path (:func:`leftovers`)."""
    return [] if is_remote(path) else leftovers(os.fspath(path))


def _chunks(e: Entry) -> str:
    n = len(e.chunks)
    return f"{n} chunk" + ("" if n == 1 else "s")


def _algos(e: Entry) -> str:
    algos = sorted({c.digest.partition(":")[0] for c in e.chunks if c.digest})
    return ",".join(algos) or "-"


def verify(path: Any, **options: Any) -> Any:
    """Check the document, every rank file with its format's verifier, and every stored
    object against the document (read whole, digest checked); never raises on damage. What
    unfinished saves to the same path left beside it is reported as a warning."""
    from ...core.report import ERROR, OK, WARNING, Report
    from ...registry import detect, module_for

    report = Report(FMT, os.fspath(path))
    for left in _leftovers(path):  # beside it, never part of it: a warning, not a failure
        report.add(f"beside it: {os.path.basename(left['path'])}", WARNING, describe_leftover(left))
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
        if is_remote(r.path):  # each object's checks below; what attempts left is listed
            for stray in stray_objects(r.path, r.doc, options.get("storage_options")):
                report.add(f"object {stray!r}", WARNING, _STRAY)
        for file in () if is_remote(r.path) else r.doc.files:
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


_STRAY = (
    "a rank object no document names (a save attempt that did not commit, or one still "
    "uploading): never read; remove it once no save to this prefix runs"
)


def verify_reader(reader: Any) -> Any:
    """``reader.verify()`` of a :class:`~tenfold.interop.dcp_files.DcpReader`: :func:`verify`
    of its directory."""
    so = reader.storage_options
    return verify(reader.path, **({} if so is None else {"storage_options": so}))

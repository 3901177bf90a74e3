"""``verify`` of an HDF5 file: every dataset read (decoded through its filters, which check
their own checksums, Fletcher-32 among them) and every view's range checked."""

from __future__ import annotations

from typing import Any

from ...core.report import OK, Report
from ...errors import TenfoldError

__all__ = ["verify_reader"]


def verify_reader(r: Any) -> Report:
    """The report of an opened :class:`~tenfold.formats.hdf5.reader.Reader`."""
    report = Report("hdf5", r.path or "<buffer>")
    report.add("file", OK, f"{len(r)} datasets")
    for name in r:
        what = f"dataset {name!r}"
        try:
            r.read(name)
            rng = r.info(name).byte_range
            report.add(what, OK, offset=rng[0] if rng else None)
        except TenfoldError as exc:
            report.add_error(exc, what)
    return report

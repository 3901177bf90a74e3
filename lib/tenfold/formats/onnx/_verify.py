"""``verify`` of an ONNX model: every initializer read and decoded (each count, range and
length checked), and the SHA-1 of every external data file the model gives one for."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from ...core.report import ERROR, OK, Report
from ...errors import TenfoldError

__all__ = ["verify_reader"]

_BLOCK = 1 << 20


def verify_reader(r: Any) -> Report:
    """The report of an opened :class:`~tenfold.formats.onnx.reader.Reader`."""
    report = Report("onnx", r.path or "<buffer>")
    report.add("model", OK, f"ir_version {r.ir_version}, {len(r)} initializers")
    for name in r:
        what = f"initializer {name!r}"
        try:
            r.read(name)
            report.add(what, OK, offset=r.info(name).extras["message_offset"])
        except TenfoldError as exc:
            report.add_error(exc, what)
    base = os.path.dirname(os.path.abspath(r.path)) if r.path else None
    for loc, checksum in r.external_files().items():
        if checksum is None or base is None:
            continue
        what = f"external file {loc!r}"
        try:
            got = _sha1(os.path.join(base, loc))
        except OSError as exc:
            report.add(what, ERROR, f"onnx: {what}: {exc.strerror or exc}")
            continue
        if got == checksum.lower():
            report.add(what, OK, "sha1 checked")
        else:
            report.add(
                what, ERROR, f"onnx: {what}: checksum mismatch; expected sha1 {checksum}, got {got}"
            )
    return report


def _sha1(path: str) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()

"""Verification reports shared by every format's ``verify``.

A :class:`Report` is a list of :class:`Finding` rows (object, status, message). ``ok`` is true
when no row is an error. The CLI prints it with :meth:`Report.format` and exits with
:attr:`Report.exit_code` (0 ok, 1 damaged or invalid).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Finding", "Report", "OK", "WARNING", "ERROR", "REPAIRED", "REPAIRABLE", "INFO"]

OK = "ok"
INFO = "info"
WARNING = "warning"
#: found damaged and corrected in the copy written (``repair``)
REPAIRED = "repaired"
#: found damaged but correctable (``verify``: nothing was written; ``tenfold repair`` fixes it)
REPAIRABLE = "repairable"
ERROR = "error"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One verified object: ``status`` is ok, info, warning, repairable, repaired or error."""

    obj: str
    status: str
    message: str = ""
    offset: int | None = None

    def format(self) -> str:
        where = f" @ {self.offset:#x}" if self.offset is not None else ""
        msg = f": {self.message}" if self.message else ""
        return f"{self.status.upper():8} {self.obj}{where}{msg}"


@dataclasses.dataclass
class Report:
    """The outcome of verifying one file.

    >>> r = Report("zt", "a.zt")
    >>> r.add("tensor 'w'", OK)
    >>> r.ok, r.exit_code
    (True, 0)
    >>> r.add("tensor 'b'", ERROR, "checksum mismatch", offset=64)
    >>> r.ok, len(r.errors)
    (False, 1)
    """

    fmt: str
    path: str
    findings: list[Finding] = dataclasses.field(default_factory=list)
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Objects whose content could not be checked (no checksum stored): named in the summary.
    unverified: list[str] = dataclasses.field(default_factory=list)
    #: Set by a verifier when data is intact only thanks to error correction: exit 1 and
    #: the verdict says how to fix the file (``command``).
    repairable: str | None = None

    def add(self, obj: str, status: str, message: str = "", *, offset: int | None = None) -> None:
        self.findings.append(Finding(obj, status, message, offset))

    def add_error(
        self, exc: BaseException, obj: str | None = None, *, offset: int | None = None
    ) -> None:
        """An error row for ``exc``, read from its attributes (a :class:`TenfoldError`'s
        ``obj`` and ``offset``) where ``obj`` and ``offset`` are not given.

        >>> from tenfold.errors import FormatError
        >>> r = Report("fold", "a.fold")
        >>> r.add_error(FormatError(fmt="fold", obj="header", offset=0, detail="bad magic"))
        >>> r.errors[0].format()
        'ERROR    header @ 0x0: fold: header at offset 0x0: bad magic'
        """
        if obj is None:
            obj = getattr(exc, "obj", None) or "file"
        if offset is None:
            offset = getattr(exc, "offset", None)
        self.add(obj, ERROR, str(exc), offset=offset)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.status == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.status == WARNING]

    @property
    def intact(self) -> bool:
        """No error: every object reads back right (perhaps only through error correction)."""
        return not self.errors

    @property
    def ok(self) -> bool:
        """No error and nothing that needed repair: the file is as it was written."""
        return not self.errors and self.repairable is None

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def verdict(self) -> str:
        """``"OK"``, ``"REPAIRABLE"`` (intact through error correction) or ``"DAMAGED"``."""
        if not self.intact:
            return "DAMAGED"
        return "OK" if self.repairable is None else "REPAIRABLE"

    def to_json(self) -> dict[str, Any]:
        """The report as JSON values (``tenfold verify --json``, schema ``tenfold.verify/1``).

        >>> r = Report("zt", "a.zt")
        >>> r.add("tensor 'w'", OK)
        >>> d = r.to_json()
        >>> d["verdict"], d["exit_code"], d["findings"][0]["status"]
        ('OK', 0, 'ok')
        """
        return {
            "schema": "tenfold.verify/1",
            "file": self.path,
            "format": self.fmt,
            "verdict": self.verdict,
            "ok": self.ok,
            "intact": self.intact,
            "exit_code": self.exit_code,
            "summary": {str(k): _json_value(v) for k, v in self.summary.items()},
            "findings": [
                {"object": f.obj, "status": f.status, "message": f.message, "offset": f.offset}
                for f in self.findings
            ],
            "unverified": list(self.unverified),
            "repair": self.repairable,
        }

    def format(self, *, verbose: bool = True) -> str:
        lines = [f"{self.fmt}: {self.path}"]
        for key, value in self.summary.items():
            lines.append(f"  {key}: {value}")
        for f in self.findings:
            if verbose or f.status != OK:
                lines.append("  " + f.format())
        if self.unverified:
            shown = ", ".join(repr(u) for u in self.unverified[:8])
            more = f" and {len(self.unverified) - 8} more" if len(self.unverified) > 8 else ""
            lines.append(f"  unverified: no checksum: {shown}{more}")
        n_err, n_warn = len(self.errors), len(self.warnings)
        text = f"{self.verdict}: {len(self.findings)} checked, {n_err} errors, {n_warn} warnings"
        if self.unverified:
            text += f", {len(self.unverified)} unverified (no checksum)"
        if self.intact and self.repairable is not None:
            text += f"; repairable: run `{self.repairable}`"
        lines.append(text)
        return "\n".join(lines)


def _json_value(v: object) -> object:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    return str(v)

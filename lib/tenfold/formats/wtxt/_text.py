"""Line-level reading of WTXT text: a cursor that hands out numbered lines, the character rules,
``key=value`` field parsing in a fixed order, and error construction naming the line."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ...errors import FormatError, LimitError, TenfoldError, TruncatedError
from ._spec import AUDIT_KEY_RE, MAX_LINE, QUOTED, TOKEN, E, mview

_PRINTABLE = re.compile(rb"[\x20-\x7e]*")
_FIELD_RES: dict[str, re.Pattern[str]] = {}


def err(
    cls: type[TenfoldError],
    lineno: int,
    offset: int | None,
    detail: str,
    *,
    field: str | None = None,
    expected: object = None,
    got: object = None,
    last_line: int | None = None,
) -> TenfoldError:
    """An exception of ``cls`` whose message names the line (1-based) and its byte offset.

    With ``last_line`` the message names the range ``lines <lineno>-<last_line>``. The
    exception carries the place as attributes: ``line`` (the first line) and ``lines``
    (``(first, last)``), so callers need not parse the message.
    """
    return E(
        cls,
        None,
        lines=(lineno, lineno if last_line is None else last_line),
        offset=offset,
        field=field,
        detail=detail,
        expected=expected,
        got=got,
    )


def at_lines(exc: Exception, first: int, last: int | None = None) -> Exception:
    """Attach ``line`` and ``lines`` attributes to ``exc`` (returned for ``raise``)."""
    exc.line = first  # type: ignore[attr-defined]
    exc.lines = (first, first if last is None else last)  # type: ignore[attr-defined]
    return exc


def shorten(value: str, limit: int = 48) -> str:
    """``value`` itself, or its head and its length when longer than ``limit``."""
    return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"


def char_problem(raw: bytes) -> tuple[int, str] | None:
    """The first violation of the character rules in one line (LF excluded), or None."""
    m = _PRINTABLE.match(raw)
    end = m.end() if m else 0
    if end < len(raw):
        b = raw[end]
        if b == 13:
            what = "carriage return (CR) not allowed: LF line ends only"
        elif b == 9:
            what = "tab not allowed"
        elif b >= 0x80:
            what = f"non-ASCII byte 0x{b:02x}"
        else:
            what = f"control byte 0x{b:02x} not allowed"
        return end, what
    if raw.endswith(b" "):
        return len(raw) - 1, "trailing space"
    return None


class Cursor:
    """Sequential numbered lines over a read-only byte buffer."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.mv = mview(data)
        self.size = int(data.size)
        self.pos = 0
        self.lineno = 1

    def at_end(self) -> bool:
        return self.pos >= self.size

    def peek_raw(self) -> bytes | None:
        """The next line's bytes without its LF (not consumed), or None at end of file."""
        if self.pos >= self.size:
            return None
        start = self.pos
        probe = 256
        while True:
            stop = min(self.size, start + probe)
            chunk = self.data[start:stop].tobytes()
            k = chunk.find(b"\n")
            if k >= 0:
                return chunk[:k]
            if stop >= self.size:
                raise err(
                    TruncatedError, self.lineno, start, "file ends inside a line (no final LF)"
                )
            if probe > MAX_LINE:
                raise err(
                    LimitError,
                    self.lineno,
                    start,
                    "line too long",
                    expected=f"<= {MAX_LINE} bytes",
                    got=f"> {MAX_LINE}",
                )
            probe *= 16

    def line(self, what: str = "line") -> tuple[str, int, int]:
        """Consume the next line: ``(text, lineno, offset)``; checks the character rules."""
        raw = self.peek_raw()
        if raw is None:
            raise err(TruncatedError, self.lineno, self.pos, f"file ends; expected {what}")
        lineno, off = self.lineno, self.pos
        bad = char_problem(raw)
        if bad is not None:
            raise err(FormatError, lineno, off + bad[0], bad[1])
        self.pos += len(raw) + 1
        self.lineno += 1
        return raw.decode("ascii"), lineno, off

    def skip_lines(self, n: int) -> bool:
        """Skip ``n`` lines without checking them; False if the file ends first."""
        for _ in range(n):
            raw = self.data[self.pos : self.size]
            hits = np.flatnonzero(raw[: 1 << 20] == 10)
            if hits.size == 0:
                return False
            self.pos += int(hits[0]) + 1
            self.lineno += 1
        return True


def _pattern(p: str) -> re.Pattern[str]:
    r = _FIELD_RES.get(p)
    if r is None:
        r = _FIELD_RES[p] = re.compile(p)
    return r


def fields(
    text: str, tag: str, spec: Sequence[tuple[str, str]], lineno: int, offset: int
) -> dict[str, str]:
    """Parse ``tag k1=v1 k2=v2 ...`` whose keys must be exactly ``spec``'s, in order."""
    tokens = text.split(" ")
    if tokens[0] != tag:
        raise err(
            FormatError,
            lineno,
            offset,
            "unexpected line",
            expected=f"'{tag} ...'",
            got=repr(text[:60]),
        )
    if "" in tokens:
        raise err(FormatError, lineno, offset, "fields must be separated by single spaces")
    keys = [t.partition("=")[0] for t in tokens[1:]]
    want = [k for k, _ in spec]
    if keys != want or any("=" not in t for t in tokens[1:]):
        raise err(
            FormatError,
            lineno,
            offset,
            f"'{tag}' field order",
            expected=" ".join(want),
            got=" ".join(keys),
        )
    out: dict[str, str] = {}
    for tok, (key, pat) in zip(tokens[1:], spec, strict=True):
        value = tok[len(key) + 1 :]
        if not _pattern(pat).fullmatch(value):
            raise err(
                FormatError,
                lineno,
                offset,
                f"'{tag}' field '{key}' malformed",
                expected=f"/{pat}/" if len(pat) < 60 else "see the grammar",
                got=shorten(value),
            )
        out[key] = value
    return out


_AUDIT_TOKEN = re.compile(rf"({AUDIT_KEY_RE.pattern})=({QUOTED}|{TOKEN})(?= |$)")


def audit_fields(text: str, lineno: int, offset: int) -> dict[str, str]:
    """Parse ``audit k=v ...`` (values: token or double-quoted string without escapes)."""
    if not text.startswith("audit "):
        raise err(
            FormatError,
            lineno,
            offset,
            "unexpected line",
            expected="'audit ...'",
            got=repr(text[:60]),
        )
    pos = 6
    out: dict[str, str] = {}
    while True:
        m = _AUDIT_TOKEN.match(text, pos)
        if m is None:
            raise err(
                FormatError,
                lineno,
                offset,
                f"audit pair malformed at column {pos + 1}",
                expected='key=token or key="text"',
                got=repr(text[pos : pos + 40]),
            )
        key, value = m.group(1), m.group(2)
        if key in out:
            raise err(FormatError, lineno, offset, f"duplicate audit key '{key}'")
        out[key] = value[1:-1] if value.startswith('"') else value
        pos = m.end()
        if pos == len(text):
            return out
        pos += 1  # the single space (a double space fails the next match)

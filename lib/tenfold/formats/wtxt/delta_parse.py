"""The DELTA v2 text: its records and a strict, line-numbered parser (see :mod:`.delta` for
making and applying deltas)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ... import _kernels
from ...errors import FormatError, TruncatedError
from . import _spec as S
from ._text import Cursor, err, fields
from .codec import decode_chunk
from .parse import check_ts, chunk_header
from .records import ChunkInfo

__all__ = ["Delta", "DeltaArray", "parse_delta"]


@dataclasses.dataclass
class DeltaArray:
    name: str
    sha256: str
    hmac: str
    salt: str
    lineno: int
    chunks: list[tuple[ChunkInfo, bytes]]
    end_lineno: int = 0

    def where(self) -> str:
        last = self.end_lineno if self.end_lineno > self.lineno else self.lineno
        span = f"line {self.lineno}" if last == self.lineno else f"lines {self.lineno}-{last}"
        return f"delta array {self.name!r} ({span})"


@dataclasses.dataclass
class Delta:
    base_sha256_all: str
    meta: dict[str, str] | None
    root: dict[str, str] | None
    arrays: list[DeltaArray]
    root_lineno: int = 0


def parse_delta(data: np.ndarray, base: Any = None) -> Delta:
    """Parse a DELTA v2 text strictly. With ``base`` (an open :class:`~.reader.WtxtFile`),
    chunk positions are checked against its arrays."""
    return _DeltaParser(data, base).run()


class _DeltaParser:
    """One pass over a DELTA v2 text: the head lines, then per changed array its chunks."""

    def __init__(self, data: np.ndarray, base: Any) -> None:
        self.data = data
        self.cur = Cursor(data)
        self.kern = _kernels.load("b64lines")
        self.base = {a.name: a for a in base.arrays} if base is not None else None
        self.scratch = np.empty(0, np.uint8)

    def run(self) -> Delta:
        cur = self.cur
        base_all = self._magic()
        meta = root = None
        root_ln = 0
        raw = cur.peek_raw()
        if raw is not None and raw.startswith(b"meta "):
            text, ln, off = cur.line()
            meta = fields(text, "meta", S.META_FIELDS, ln, off)
            check_ts(meta["ts"], ln, off)
        raw = cur.peek_raw()
        if raw is not None and raw.startswith(b"root "):
            text, root_ln, off = cur.line()
            root = fields(text, "root", S.ROOT_FIELDS, root_ln, off)
        arrays: list[DeltaArray] = []
        while True:
            text, ln, off = cur.line("'arr' or 'enddelta'")
            if text == "enddelta":
                break
            arrays.append(self._array(text, ln, off, arrays[-1].name if arrays else None))
        if not cur.at_end():
            raise err(FormatError, cur.lineno, cur.pos, "data after 'enddelta'")
        return Delta(base_all, meta, root, arrays, root_ln)

    def _magic(self) -> str:
        """Line 1, ``WTXT-DELTA 2 base_sha256_all=<hex64>``: the base root it applies to."""
        cur = self.cur
        start = cur.data[cur.pos : cur.pos + 20].tobytes()
        if start and not start.startswith(b"WTXT-DELTA 2 "[: len(start)]):
            # checked on the raw bytes first: a file that is no delta at all (a .zt, a
            # snapshot) is named as such, not by the first line rule its bytes break
            snapshot = start.startswith(b"WTXT 1")
            raise err(
                FormatError,
                cur.lineno,
                cur.pos,
                "a WTXT snapshot, not a delta" if snapshot else "bad delta magic",
                expected="'WTXT-DELTA 2 ...'",
                got=repr(start.decode("latin-1")),
            )
        text, ln, off = cur.line("'WTXT-DELTA 2 ...'")
        if not text.startswith("WTXT-DELTA 2 "):
            raise err(
                FormatError,
                ln,
                off,
                "bad delta magic",
                expected="'WTXT-DELTA 2 ...'",
                got=repr(text[:20]),
            )
        head = fields("D " + text[13:], "D", (("base_sha256_all", S.HEX64),), ln, off)
        return head["base_sha256_all"]

    def _array(self, text: str, ln: int, off: int, prev: str | None) -> DeltaArray:
        """A changed array: its ``arr`` line (already read), its chunks and ``endarr``."""
        a = fields(text, "arr", S.DARR_FIELDS, ln, off)
        if prev is not None and a["name"].encode() <= prev.encode():
            raise err(
                FormatError,
                ln,
                off,
                "delta array name order or duplicate",
                expected=f"after {prev!r}",
                got=a["name"],
            )
        binfo = self.base.get(a["name"]) if self.base is not None else None
        if self.base is not None and binfo is None:
            raise err(FormatError, ln, off, f"array {a['name']!r} is not in the base")
        da = DeltaArray(a["name"], a["sha256"], a["hmac"], a["salt"], ln, [])
        last = -1
        cur = self.cur
        while True:
            raw = cur.peek_raw()
            if raw is None:
                raise err(TruncatedError, cur.lineno, cur.pos, "file ends; expected 'endarr'")
            if raw == b"endarr":
                da.end_lineno = cur.line()[1]
                return da
            m = S.CH_RE.fullmatch(raw)
            if m is None:
                t, cl, co = cur.line("ch")
                fields(t, "ch", S.CH_FIELDS, cl, co)
                raise err(FormatError, cl, co, "unexpected line")  # pragma: no cover
            last = self._check_ix(int(m.group(1)), last)
            da.chunks.append(self._chunk(m, last, binfo))

    def _check_ix(self, ix: int, last: int) -> int:
        if ix <= last:
            raise err(
                FormatError,
                self.cur.lineno,
                self.cur.pos,
                "delta chunks must be in increasing ix order",
                expected=f"> {last:06d}",
                got=f"{ix:06d}",
            )
        return ix

    def _chunk(self, m: Any, ix: int, binfo: Any) -> tuple[ChunkInfo, bytes]:
        """One chunk (its ``ch`` line matched as ``m``): where the base has it, its bytes."""
        cur = self.cur
        if binfo is not None:
            if ix >= len(binfo.chunks):
                raise err(
                    FormatError,
                    cur.lineno,
                    cur.pos,
                    "chunk ix beyond the base array",
                    expected=f"< {len(binfo.chunks):06d}",
                    got=f"{ix:06d}",
                )
            bc = binfo.chunks[ix]
            boff, blen = bc.off, bc.length
        else:
            boff, blen = int(m.group(2)), int(m.group(3))
        ch = chunk_header(cur, ix, boff, blen, False)
        if 4 * -(-ch.length // 3) > cur.size - cur.pos:  # before allocating for it
            raise err(
                TruncatedError,
                cur.lineno,
                cur.pos,
                "ch 'len' larger than the rest of the file can hold",
                expected=f"<= {(cur.size - cur.pos) * 3 // 4}",
                got=ch.length,
            )
        buf = np.zeros(ch.length, np.uint8)
        if ch.length:
            if self.scratch.size < ch.lines * S.WIDTH:
                self.scratch = np.empty(ch.lines * S.WIDTH, np.uint8)
            ch_rel = dataclasses.replace(ch, off=0)
            decode_chunk(cur, self.kern, self.data, ch_rel, self.scratch, buf, False)
        t, el, eo = cur.line("endch")
        if t != "endch":
            raise err(FormatError, el, eo, "expected 'endch'", expected="endch", got=repr(t[:40]))
        return ch, buf.tobytes()

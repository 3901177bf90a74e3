"""``recover``: every intact array back from a damaged WTXT file, with a per-chunk damage list
naming lines. Delimiters are found line by line rather than by count, so a lost or extra line
costs one chunk, not the rest of the file."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np
import pybase64

from ... import _kernels
from ...core.bounds import checked_numel
from ...core.checksums import crc32c
from ...core.mapped import MappedFile
from ...errors import FormatError, TenfoldError, TruncatedError
from . import _spec as S
from ._text import err, fields
from .codec import kernel_error

__all__ = ["recover", "recover_data", "Recovery", "Damage"]


@dataclasses.dataclass(frozen=True)
class Damage:
    """One damaged place: array (or None), chunk index (or None), 1-based lines, reason."""

    array: str | None
    chunk: int | None
    first_line: int
    last_line: int
    reason: str

    def where(self) -> str:
        lines = (
            f"line {self.first_line}"
            if self.first_line == self.last_line
            else f"lines {self.first_line}-{self.last_line}"
        )
        if self.array is None:
            return lines
        if self.chunk is None:
            return f"array {self.array!r} ({lines})"
        return f"array {self.array!r} chunk {self.chunk:06d} ({lines})"


@dataclasses.dataclass
class Recovery:
    """What :func:`recover` found: intact arrays, partial arrays (damaged chunks zeroed, with
    a mask of the bytes recovered) and the damage list."""

    arrays: dict[str, np.ndarray]
    partial: dict[str, tuple[np.ndarray, np.ndarray]]
    damage: list[Damage]

    @property
    def ok(self) -> bool:
        return not self.damage


def recover(source: Any) -> Recovery:
    """Read what can be read from a (possibly damaged) WTXT file.

    Delimiters (``arr``, ``ch``, ``endch``, ``endarr``) are found line by line rather than by
    count, so a lost or extra line costs one chunk, not the rest of the file. An array is
    returned in ``arrays`` only when every chunk is intact and its SHA-256 matches.
    """
    with MappedFile(source, fmt=S.FMT) as mf:
        return recover_data(mf.buffer())


def recover_data(data: np.ndarray) -> Recovery:
    """:func:`recover` on a text already in memory (``data``, uint8)."""
    return _Recoverer(data.tobytes()).run()


_CHUNK_END = (b"endch", b"ch ", b"arr ", b"endarr", b"endwtxt")
_ARRAY_END = (b"arr ", b"endarr", b"endwtxt", b"audit")


@dataclasses.dataclass
class _Array:
    """An array being recovered: its ``arr`` fields, bytes so far and which chunks were good."""

    name: str
    line: int
    dtype: np.dtype
    shape: tuple[int, ...]
    sha256: str
    buf: np.ndarray
    mask: np.ndarray
    layout: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    good: set[int] = dataclasses.field(default_factory=set)


class _Recoverer:
    """One tolerant pass over the lines of a WTXT text, by delimiters rather than counts."""

    def __init__(self, blob: bytes) -> None:
        self.kern = _kernels.load("b64lines")
        self.size = len(blob)
        self.lines = blob.split(b"\n")
        if self.lines and self.lines[-1] == b"":
            self.lines.pop()
        self.starts = [0]
        for ln in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(ln) + 1)
        self.arrays: dict[str, np.ndarray] = {}
        self.partial: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.damage: list[Damage] = []

    def run(self) -> Recovery:
        if self.lines and self.lines[0].startswith(S.DELTA_PREFIX):
            raise err(FormatError, 1, 0, "this is a DELTA file; recover reads snapshots")
        i, n, seen = 0, len(self.lines), False
        while i < n:
            if self.lines[i].startswith(b"arr "):
                seen = True
                i = self._array(i)
            else:
                i += 1
        if not seen:
            self._refuse_non_wtxt()
        return Recovery(self.arrays, self.partial, self.damage)

    def _refuse_non_wtxt(self) -> None:
        """No ``arr`` line anywhere: unless line 1 is the WTXT magic (a snapshot holding no
        array), this is not a WTXT snapshot, and "nothing damaged" would be a false report."""
        first = self.lines[0] if self.lines else b""
        if first == b"WTXT 1":
            return
        if not self.lines:
            raise err(TruncatedError, 1, 0, "empty file; expected 'WTXT 1'")
        raise err(
            FormatError,
            1,
            0,
            "not a WTXT snapshot: no 'WTXT 1' line 1 and no 'arr' line to recover",
            expected="'WTXT 1'",
            got=repr(first[:16].decode("latin-1")),
        )

    def _fields(self, i: int, tag: str, spec: Any) -> dict[str, str]:
        return fields(self.lines[i].decode("ascii"), tag, spec, i + 1, self.starts[i])

    def _array(self, i: int) -> int:
        """The array whose ``arr`` line is line ``i`` (0-based); returns the next line."""
        try:
            a = self._fields(i, "arr", S.ARR_FIELDS)
        except (TenfoldError, UnicodeDecodeError) as exc:
            self.damage.append(Damage(None, None, i + 1, i + 1, f"arr line unreadable: {exc}"))
            return i + 1
        name, dt = a["name"], S.DTYPES[a["dtype"]]
        shape = tuple(int(d) for d in a["shape"].split(","))
        nbytes = int(a["bytes"])
        if nbytes != int(np.prod(shape, dtype=object)) * dt.itemsize or nbytes > self.size:
            self.damage.append(Damage(name, None, i + 1, i + 1, "arr 'bytes' inconsistent"))
            return i + 1
        arr = _Array(
            name, i + 1, dt, shape, a["sha256"], np.zeros(nbytes, np.uint8), np.zeros(nbytes, bool)
        )
        i, rpc = self._idx(i + 1, name)
        clen = S.chunk_length(shape, dt.itemsize, rpc)
        arr.layout = S.chunk_layout(nbytes, clen) if clen else [(0, 0)]
        n = len(self.lines)
        while i < n and not self.lines[i].startswith(_ARRAY_END):
            if self.lines[i].startswith(b"ch "):
                i = self._chunk(i, arr)
            else:
                self.damage.append(Damage(name, None, i + 1, i + 1, "stray line outside a chunk"))
                i += 1
        self._finish(arr)
        return i + 1 if i < n and self.lines[i] == b"endarr" else i

    def _idx(self, i: int, name: str) -> tuple[int, int | None]:
        """The optional ``idx`` line at ``i``: the next line and ``rows_per_chunk`` (or None)."""
        if i >= len(self.lines) or not self.lines[i].startswith(b"idx "):
            return i, None
        try:
            idx = self._fields(i, "idx", S.IDX_FIELDS)
        except (TenfoldError, UnicodeDecodeError) as exc:
            self.damage.append(Damage(name, None, i + 1, i + 1, f"idx line unreadable: {exc}"))
            return i + 1, None
        return i + 1, int(idx["rows_per_chunk"]) if idx["row_blocking"] == "on" else None

    def _chunk(self, i: int, arr: _Array) -> int:
        """The chunk whose ``ch`` line is line ``i``, up to the next delimiter; its bytes go
        into ``arr`` when intact. Returns the line after it."""
        lines, n = self.lines, len(self.lines)
        j = i + 1
        while j < n and not lines[j].startswith(_CHUNK_END):
            j += 1
        closed = j < n and lines[j] == b"endch"
        end_ln = j + 1 if closed else j
        m = S.CH_RE.fullmatch(lines[i])
        if m is None:
            self.damage.append(Damage(arr.name, None, i + 1, end_ln, "ch line unreadable"))
            return j + 1 if closed else j
        ix, off, length, nl = (int(m.group(k)) for k in (1, 2, 3, 6))
        body = lines[i + 1 : j]
        reason = None
        if ix >= len(arr.layout) or arr.layout[ix] != (off, length):
            reason = "ch ix/off/len do not fit the array's chunk layout"
        elif nl != S.b64_lines(length) or len(body) != nl:
            reason = f"expected {S.b64_lines(length)} base64 lines, found {len(body)}"
        elif not closed:
            reason = "missing endch"
        raw = self._decode(i, arr.name, ix, body) if reason is None and nl else b""
        if raw is None:  # the framing damage is recorded, naming its line
            return j + 1 if closed else j
        if reason is None:
            if f"{crc32c(raw):08x}" != m.group(5).decode():
                reason = "crc32c mismatch"
            elif hashlib.sha256(raw).hexdigest() != m.group(4).decode():
                reason = "sha256 mismatch"
        if reason is None:
            arr.buf[off : off + length] = np.frombuffer(raw, np.uint8)
            arr.mask[off : off + length] = True
            arr.good.add(ix)
        else:
            self.damage.append(Damage(arr.name, ix, i + 1, end_ln, reason))
        return j + 1 if closed else j

    def _decode(self, i: int, name: str, ix: int, body: list[bytes]) -> bytes | None:
        """The bytes of a chunk's base64 lines; None (damage recorded) if they are damaged."""
        nl = len(body)
        text = b"\n".join(body) + b"\n"
        scratch = np.zeros(nl * S.WIDTH, np.uint8)
        st, bad, pos = self.kern.unframe_lines(text, nl, scratch, S.WIDTH)
        if st:
            t = np.frombuffer(text, np.uint8)
            kexc = kernel_error(st, t, pos, i + 2, bad, self.starts[i + 1])
            self.damage.append(Damage(name, ix, i + 2 + bad, i + 2 + bad, str(kexc)))
            return None
        return pybase64.b64decode(S.mview(scratch)[: pos - 3 * nl])

    def _finish(self, arr: _Array) -> None:
        """File the array as intact or partial, with the chunks it lacks as damage."""
        name, line = arr.name, arr.line
        missing = [k for k in range(len(arr.layout)) if k not in arr.good]
        seen = {d.chunk for d in self.damage if d.array == name}
        for k in missing:
            if k not in seen:
                self.damage.append(Damage(name, k, line, line, "chunk missing"))
        intact = not missing and hashlib.sha256(S.mview(arr.buf)).hexdigest() == arr.sha256
        try:  # a shape NumPy cannot make (a dim of 2**63 beside a 0) is damage, not a crash
            checked_numel("wtxt", f"array {name!r}", arr.shape, itemsize=arr.dtype.itemsize)
        except TenfoldError as exc:
            self.damage.append(Damage(name, None, line, line, f"bad shape: {exc}"))
            return
        values = arr.buf.view(arr.dtype).reshape(arr.shape)
        if intact:
            self.arrays[name] = values
            return
        if not missing:
            self.damage.append(Damage(name, None, line, line, "array sha256 mismatch"))
        self.partial[name] = (values, arr.mask)

"""``recover``: every intact array back from a damaged WTXT file, with a per-chunk damage list
naming lines. Delimiters are found line by line rather than by count, so a lost or extra line
costs one chunk, not the rest of the file."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np
import pybase64

from .. import _kernels
from ..core.bounds import checked_numel
from ..core.checksums import crc32c
from ..core.mapped import MappedFile
from ..errors import TenfoldError
from . import _spec as S
from ._text import fields
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
    kern = _kernels.load("b64lines")
    blob = data.tobytes()
    lines = blob.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    starts = [0]
    for ln in lines[:-1]:
        starts.append(starts[-1] + len(ln) + 1)
    arrays: dict[str, np.ndarray] = {}
    partial: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    damage: list[Damage] = []
    i = 0
    n = len(lines)
    while i < n:
        if not lines[i].startswith(b"arr "):
            i += 1
            continue
        try:
            a = fields(lines[i].decode("ascii"), "arr", S.ARR_FIELDS, i + 1, starts[i])
        except (TenfoldError, UnicodeDecodeError) as exc:
            damage.append(Damage(None, None, i + 1, i + 1, f"arr line unreadable: {exc}"))
            i += 1
            continue
        name, arr_ln = a["name"], i + 1
        dt = S.DTYPES[a["dtype"]]
        shape = tuple(int(d) for d in a["shape"].split(","))
        nbytes = int(a["bytes"])
        if nbytes != int(np.prod(shape, dtype=object)) * dt.itemsize or nbytes > len(blob):
            damage.append(Damage(name, None, arr_ln, arr_ln, "arr 'bytes' inconsistent"))
            i += 1
            continue
        buf = np.zeros(nbytes, np.uint8)
        mask = np.zeros(nbytes, bool)
        i += 1
        rpc = None
        if i < n and lines[i].startswith(b"idx "):
            try:
                idx = fields(lines[i].decode("ascii"), "idx", S.IDX_FIELDS, i + 1, starts[i])
                if idx["row_blocking"] == "on":
                    rpc = int(idx["rows_per_chunk"])
            except (TenfoldError, UnicodeDecodeError) as exc:
                damage.append(Damage(name, None, i + 1, i + 1, f"idx line unreadable: {exc}"))
            i += 1
        clen = S.chunk_length(shape, dt.itemsize, rpc)
        expected = S.chunk_layout(nbytes, clen) if clen else [(0, 0)]
        good: set[int] = set()
        while i < n and not lines[i].startswith((b"arr ", b"endarr", b"endwtxt", b"audit")):
            if not lines[i].startswith(b"ch "):
                damage.append(Damage(name, None, i + 1, i + 1, "stray line outside a chunk"))
                i += 1
                continue
            ch_ln = i + 1
            m = S.CH_RE.fullmatch(lines[i])
            j = i + 1
            while j < n and not lines[j].startswith(
                (b"endch", b"ch ", b"arr ", b"endarr", b"endwtxt")
            ):
                j += 1
            body = lines[i + 1 : j]
            end_ln = j + 1 if j < n and lines[j] == b"endch" else j
            if m is None:
                damage.append(Damage(name, None, ch_ln, end_ln, "ch line unreadable"))
                i = j + 1 if j < n and lines[j] == b"endch" else j
                continue
            ix, off, ln_, nl = (int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(6)))
            reason = None
            if ix >= len(expected) or expected[ix] != (off, ln_):
                reason = "ch ix/off/len do not fit the array's chunk layout"
            elif nl != S.b64_lines(ln_) or len(body) != nl:
                reason = f"expected {S.b64_lines(ln_)} base64 lines, found {len(body)}"
            elif j >= n or lines[j] != b"endch":
                reason = "missing endch"
            raw = b""
            if reason is None and nl:
                text = b"\n".join(body) + b"\n"
                scratch = np.zeros(nl * S.WIDTH, np.uint8)
                st, bad, pos = kern.unframe_lines(text, nl, scratch, S.WIDTH)
                if st:
                    kexc = kernel_error(
                        st, np.frombuffer(text, np.uint8), pos, ch_ln + 1, bad, starts[ch_ln]
                    )
                    reason = str(kexc)
                    damage.append(Damage(name, ix, ch_ln + 1 + bad, ch_ln + 1 + bad, reason))
                    reason = ""
                else:
                    raw = pybase64.b64decode(S.mview(scratch)[: pos - 3 * nl])
            if reason is None:
                if f"{crc32c(raw):08x}" != m.group(5).decode():
                    reason = "crc32c mismatch"
                elif hashlib.sha256(raw).hexdigest() != m.group(4).decode():
                    reason = "sha256 mismatch"
            if reason is None:
                buf[off : off + ln_] = np.frombuffer(raw, np.uint8)
                mask[off : off + ln_] = True
                good.add(ix)
            elif reason:
                damage.append(Damage(name, ix, ch_ln, end_ln, reason))
            i = j + 1 if j < n and lines[j] == b"endch" else j
        missing = [k for k in range(len(expected)) if k not in good]
        seen = {d.chunk for d in damage if d.array == name}
        for k in missing:
            if k not in seen:
                damage.append(Damage(name, k, arr_ln, arr_ln, "chunk missing"))
        intact = not missing and hashlib.sha256(S.mview(buf)).hexdigest() == a["sha256"]
        try:  # a shape NumPy cannot make (a dim of 2**63 beside a 0) is damage, not a crash
            checked_numel("wtxt", f"array {name!r}", shape, itemsize=dt.itemsize)
            shape_ok = True
        except TenfoldError as exc:
            damage.append(Damage(name, None, arr_ln, arr_ln, f"bad shape: {exc}"))
            shape_ok = False
        if not shape_ok:
            pass
        elif intact:
            arrays[name] = buf.view(dt).reshape(shape)
        else:
            if not missing:
                damage.append(Damage(name, None, arr_ln, arr_ln, "array sha256 mismatch"))
            partial[name] = (buf.view(dt).reshape(shape), mask)
        if i < n and lines[i] == b"endarr":
            i += 1
    return Recovery(arrays, partial, damage)

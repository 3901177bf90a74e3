"""``verify`` (a report, never an exception on a damaged file) and ``recover`` (every intact
array back from a damaged file, with a per-chunk damage list naming lines)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import pybase64

from .. import _kernels
from ..core.bounds import checked_numel
from ..core.checksums import crc32c
from ..core.mapped import MappedFile
from ..core.report import ERROR, OK, Report
from ..errors import TenfoldError
from . import _spec as S
from ._crypto import read_wsum
from ._text import fields
from .reader import (
    Check,
    Parsed,
    array_checks,
    file_checks,
    kernel_error,
    parse,
    wsum_path,
)

__all__ = ["verify", "recover", "inspect", "Recovery", "Damage"]


def verify(
    source: Any,
    *,
    hmac_keys: Iterable[bytes] = (),
    public_keys: Iterable[Any] = (),
    wsum: str | os.PathLike[str] | None = None,
    workers: int = 1,
) -> Report:
    """Check everything a WTXT file carries and report per array and chunk.

    Rows: header; each chunk (parity, base64, CRC-32C, SHA-256); each array (SHA-256, HMAC:
    authenticated / unauthenticated / not checked without a key); root (``sha256_all``,
    ``fastxor``, ``merkle_this``, or the WSUM sidecar of a pending root); signature; audit
    (always unauthenticated). Structural damage is reported with its line, followed by what
    :func:`recover` can still say per chunk.
    """
    keys = [bytes(k) for k in hmac_keys]
    pubs = list(public_keys)
    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<buffer>"
    report = Report(S.FMT, path)
    with MappedFile(source, fmt=S.FMT) as mf:
        data = mf.buffer()
        if data[:10].tobytes() == b"WTXT-DELTA":
            from .delta import verify_delta

            return verify_delta(data, report, keys_given=bool(keys or pubs))
        try:
            p = parse(data, collect=True, hmac_keys=keys, workers=workers, keep=False)
        except TenfoldError as exc:
            report.summary["authentication"] = "none: the file does not parse"
            report.add_error(exc, "structure")
            try:
                rec = _recover_data(data)
            except TenfoldError as exc2:  # pragma: no cover - recovery is tolerant
                report.add("recovery", ERROR, str(exc2))
                return report
            for name in rec.arrays:
                report.add(f"array {name!r}", OK, "intact (recoverable)")
            for d in rec.damage:
                report.add(d.where(), ERROR, d.reason)
            return report
        if wsum is None and mf.path is not None:
            wsum = wsum_path(mf.path)
        side = None
        if p.pending:
            try:
                side = read_wsum(wsum)
            except TenfoldError as exc:
                report.add(
                    f"wsum ({os.path.basename(os.fspath(wsum or ''))} line 1)", ERROR, str(exc)
                )
        _report(report, p, side, keys, pubs)
    return report


def _report(
    r: Report, p: Parsed, wsum: dict[str, str] | None, keys: list[bytes], pubs: list[Any]
) -> None:
    r.summary.update(
        {
            "gen": p.meta["gen"],
            "ts": p.meta["ts"],
            "schema": p.meta["schema"],
            "cap": ",".join(p.cap),
            "arrays": len(p.arrays),
        }
    )
    r.add(
        "header (lines 1-3)", OK, "WTXT 1, meta, cap, " + ("root_pending" if p.pending else "root")
    )
    rows: list[Check] = []
    for a in p.arrays:
        for ch in a.chunks:
            where = (
                f"array {a.name!r} chunk {ch.ix:06d} (lines {ch.lineno}-{ch.lineno + ch.lines + 1})"
            )
            if ch.damage:
                r.add(where, ERROR, ch.damage)
            else:
                r.add(
                    where,
                    OK,
                    "parity, crc32c, sha256" if ch.length else "crc32c, sha256 (empty chunk)",
                )
        achecks = array_checks(a, keys)
        rows += achecks
        for c in achecks:
            r.add(c.obj, c.status, c.message)
    checks = file_checks(p, wsum, keys, pubs)
    rows += checks
    for c in checks:
        r.add(c.obj, c.status, c.message)
    r.summary["authentication"] = _auth_summary(p, rows, keys, pubs)


def _auth_summary(p: Parsed, rows: list[Check], keys: list[bytes], pubs: list[Any]) -> str:
    """One honest line: what is authenticated, not just intact."""
    if any(c.status == ERROR for c in rows):
        return (
            "none: "
            + ("authentication failed" if keys or pubs else "the file is damaged")
            + " (see the errors)"
        )
    parts = []
    if keys:
        parts.append(f"hmac authenticates the bytes of all {len(p.arrays)} arrays")
    elif any(a.hmac != S.ZERO64 for a in p.arrays):
        parts.append("hmac present, not checked (no hmac key given)")
    else:
        parts.append("no hmac (zero)")
    if pubs:
        parts.append(
            "ed25519 verified: it binds meta and root, hence every arr line and array byte"
        )
    elif any(c.message.startswith("ed25519 present") for c in rows):
        parts.append("signature present, not checked (no public key given)")
    else:
        parts.append("unsigned")
    if p.audit is not None:
        parts.append("the audit line is unauthenticated")
    if not keys and not pubs:
        head = "no: integrity only (no keys given)"
    elif not pubs:
        head = "array bytes only (names, dtypes, shapes and meta need a signature)"
    else:
        head = "yes"
    return f"{head}; " + "; ".join(parts)


# -- recovery -------------------------------------------------------------------------------


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
        return _recover_data(mf.buffer())


def _recover_data(data: np.ndarray) -> Recovery:
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


def inspect(source: Any) -> list[dict]:
    """One row per array (and per chunk) with authentication state; never verifies keys."""
    mf = MappedFile(source, fmt=S.FMT)
    try:
        head = mf.buffer()[:16].tobytes()
        if head.startswith(b"WTXT-DELTA"):
            from .delta import inspect_delta

            return inspect_delta(mf.buffer())
        p = parse(mf.buffer(), collect=True, keep=False)
    finally:
        mf.close()
    rows: list[dict] = []
    for a in p.arrays:
        auth = {"unauthenticated": "unauthenticated", "unchecked": "hmac (no key)"}.get(
            a.hmac_state, a.hmac_state
        )
        rows.append(
            {
                "name": a.name,
                "dtype": str(S.DTYPES[a.dtype]),
                "shape": a.shape,
                "bytes": a.nbytes,
                "encoding": "base64/76+parity",
                "layout": (
                    f"{len(a.chunks)} chunks, rows_per_chunk={a.idx['rows_per_chunk']}"
                    if a.idx and a.idx["row_blocking"] == "on"
                    else f"{len(a.chunks)} chunks"
                ),
                "checksum": "sha256 "
                + a.sha256[:16]
                + ("" if a.computed_sha256 == a.sha256 else " MISMATCH"),
                "auth": auth,
                "line": a.lineno,
            }
        )
        for c in a.chunks:
            rows.append(
                {
                    "name": f"{a.name}[{c.ix:06d}]",
                    "part": "chunk",
                    "dtype": "-",
                    "shape": "-",
                    "bytes": c.length,
                    "encoding": f"{c.lines} lines",
                    "layout": f"off={c.off}",
                    "checksum": f"crc32c {c.crc32c}",
                    "auth": "damaged" if c.damage else "ok",
                    "line": c.lineno,
                }
            )
    sig = "unsigned" if p.sign is None else f"signed keyid={p.sign['keyid']}"
    rows.append(
        {
            "name": "(root)",
            "part": "file",
            "dtype": "-",
            "shape": "-",
            "bytes": p.size,
            "encoding": "-",
            "layout": f"gen={p.meta['gen']} ts={p.meta['ts']}",
            "checksum": "pending (WSUM)"
            if p.pending
            else f"sha256_all {p.root['sha256_all'][:16]}"
            if p.root
            else "-",
            "auth": sig,
            "line": 4,
        }
    )
    if p.audit is not None:
        rows.append(
            {
                "name": "(audit)",
                "dtype": "-",
                "shape": "-",
                "bytes": "-",
                "encoding": "-",
                "layout": " ".join(f"{k}={v}" for k, v in p.audit.items()),
                "checksum": "-",
                "auth": "unauthenticated",
                "line": p.audit_lineno,
            }
        )
    return rows

"""The WTXT verifiers: ``verify`` (a report, never an exception on a damaged file) and
``inspect`` (one row per array and chunk), for WTXT and WTXT-DELTA files; ``recover`` lives in
:mod:`.recover`."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from ...core.mapped import MappedFile
from ...core.report import ERROR, OK, Report
from ...errors import FormatError, TenfoldError
from . import _spec as S
from . import names
from ._crypto import read_wsum, wsum_path
from .checks import Check, array_checks, file_checks
from .delta_parse import parse_delta
from .parse import parse
from .records import ArrayInfo, ChunkInfo, Parsed
from .recover import Damage, Recovery, recover, recover_data

__all__ = ["verify", "recover", "inspect", "Recovery", "Damage"]


def verify(
    source: Any,
    *,
    hmac_keys: Iterable[bytes] = (),
    public_keys: Iterable[Any] = (),
    wsum: str | os.PathLike[str] | None = None,
    workers: int | None = None,
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
            return verify_delta(data, report, keys_given=bool(keys or pubs))
        try:
            p = parse(data, collect=True, hmac_keys=keys, workers=workers, keep=False)
        except TenfoldError as exc:
            report.summary["authentication"] = "none: the file does not parse"
            report.add_error(exc, "structure")
            try:
                rec = recover_data(data)
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


def inspect(source: Any) -> list[dict]:
    """One row per array (and per chunk) with authentication state; never verifies keys."""
    mf = MappedFile(source, fmt=S.FMT)
    try:
        head = mf.buffer()[:16].tobytes()
        if head.startswith(b"WTXT-DELTA"):
            return inspect_delta(mf.buffer())
        p = parse(mf.buffer(), collect=True, keep=False)
    finally:
        mf.close()
    rows: list[dict] = []
    decode = names.CAP_ITEM in p.cap
    for a in p.arrays:
        row = _array_row(a)
        if decode:
            _decoded_name(row, a)
        rows.append(row)
        rows += [_chunk_row(a, c, row["name"]) for c in a.chunks]
    rows.append(_root_row(p))
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


def _array_row(a: ArrayInfo) -> dict:
    mismatch = "" if a.computed_sha256 == a.sha256 else " MISMATCH"
    auth = {"unauthenticated": "unauthenticated", "unchecked": "hmac (no key)"}.get(
        a.hmac_state, a.hmac_state
    )
    return {
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
        "checksum": f"sha256 {a.sha256[:16]}{mismatch}",
        "auth": auth,
        "line": a.lineno,
    }


def _decoded_name(row: dict, a: ArrayInfo) -> None:
    """In a file whose stored names are encoded (cap ``tenfold_names``), list an array under
    the name ``open``/``load`` give it (0-d arrays with shape ``()``), the stored name beside
    it; a malformed stored name is listed as stored (``verify`` reports it)."""
    try:
        name, scalar = names.decode(a.name)
    except FormatError:
        return
    if name != a.name:
        row["name"] = name
        row["stored"] = a.name
    if scalar and a.nbytes == S.DTYPES[a.dtype].itemsize:
        row["shape"] = ()


def _chunk_row(a: ArrayInfo, c: ChunkInfo, name: str) -> dict:
    return {
        "name": f"{name}[{c.ix:06d}]",
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


def _root_row(p: Parsed) -> dict:
    if p.pending:
        checksum = "pending (WSUM)"
    elif p.root:
        checksum = f"sha256_all {p.root['sha256_all'][:16]}"
    else:
        checksum = "-"
    return {
        "name": "(root)",
        "part": "file",
        "dtype": "-",
        "shape": "-",
        "bytes": p.size,
        "encoding": "-",
        "layout": f"gen={p.meta['gen']} ts={p.meta['ts']}",
        "checksum": checksum,
        "auth": "unsigned" if p.sign is None else f"signed keyid={p.sign['keyid']}",
        "line": 4,
    }


def inspect_delta(data: np.ndarray) -> list[dict]:
    """Rows for ``tenfold inspect`` on a delta file."""
    d = parse_delta(data)
    rows = [
        {
            "name": "(delta)",
            "dtype": "-",
            "shape": "-",
            "bytes": int(data.size),
            "encoding": "-",
            "layout": f"base {d.base_sha256_all[:16]}",
            "checksum": "-",
        }
    ]
    for a in d.arrays:
        rows.append(
            {
                "name": a.name,
                "dtype": "-",
                "shape": "-",
                "bytes": sum(c.length for c, _ in a.chunks),
                "encoding": "base64/76+parity",
                "layout": "chunks " + ",".join(f"{c.ix:06d}" for c, _ in a.chunks),
                "checksum": "sha256 " + a.sha256[:16],
            }
        )
    return rows


def verify_delta(data: np.ndarray, report: Report, *, keys_given: bool = False) -> Report:
    """Check a delta on its own (structure, parity, chunk CRC/SHA); the base is not needed.

    A delta's HMACs cover the new arrays, which only exist once it is applied to its base, and
    a delta is not signed: nothing in it can be authenticated on its own. When keys were given
    (authentication asked for) that is an error row; apply the delta with ``apply_delta``.
    """
    report.summary["authentication"] = (
        "none: a delta is authenticated only when applied "
        "to its base (apply_delta with hmac_key, then verify the result)"
    )
    if keys_given:
        report.add(
            "delta (line 1)",
            ERROR,
            "keys were given, but a delta cannot be "
            "authenticated on its own: apply it to its base and verify the result",
        )
    try:
        d = parse_delta(data)
    except TenfoldError as exc:
        report.add("delta", ERROR, str(exc))
        return report
    report.summary["base_sha256_all"] = d.base_sha256_all
    for a in d.arrays:
        for c, _ in a.chunks:
            report.add(
                f"delta array {a.name!r} chunk {c.ix:06d} (line {c.lineno})",
                OK,
                "parity, crc32c, sha256" if c.length else "crc32c, sha256 (empty chunk)",
            )
    return report

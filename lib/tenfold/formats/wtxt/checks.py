"""The integrity and authentication policy ``read`` enforces and ``verify`` reports: one
:class:`Check` row per array (SHA-256, HMAC), for the root (``sha256_all``, ``fastxor``,
``merkle_this``, or the WSUM sidecar of a pending root), the signature and the audit line."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from ...core.report import ERROR, INFO, OK
from ...errors import IntegrityError, describe
from . import _spec as S
from ._crypto import check_signature, wsum_signature_state
from ._text import at_lines
from .records import ArrayInfo, Parsed

__all__ = ["Check", "array_checks", "file_checks", "enforce", "root_values", "wsum_name"]


def root_values(p: Parsed, wsum: Mapping[str, str] | None) -> dict[str, str] | None:
    """The root the file (or its WSUM sidecar, for a pending root) claims."""
    if not p.pending:
        return p.root
    return dict(wsum) if wsum is not None else None


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of the authentication and integrity policy ``read`` and ``verify`` share.

    ``obj`` names the object and its lines, ``status`` is ``ok``, ``info`` or ``error``;
    ``line``/``last_line`` are the lines an error is about.
    """

    obj: str
    status: str
    message: str
    line: int
    last_line: int

    def error(self) -> IntegrityError:
        exc = IntegrityError(describe(S.FMT, self.obj, detail=self.message))
        return at_lines(exc, self.line, self.last_line)  # type: ignore[return-value]


def array_checks(a: ArrayInfo, keys: list[bytes]) -> list[Check]:
    """The SHA-256 and HMAC rows of one array. Keys given: authentication is mandatory."""
    where, first, last = a.where(), a.lineno, a.end_lineno
    if a.computed_sha256 == a.sha256:
        out = [Check(where, OK, "sha256", first, last)]
    else:
        out = [
            Check(
                where,
                ERROR,
                f"sha256 mismatch; expected {a.sha256}, got {a.computed_sha256}",
                first,
                last,
            )
        ]
    if a.hmac_state == "authenticated":
        out.append(Check(where, OK, "hmac authenticated", first, last))
    elif a.hmac_state == "bad":
        out.append(Check(where, ERROR, "hmac mismatch for every key given", first, last))
    elif a.hmac_state == "unauthenticated":
        if keys:
            out.append(
                Check(
                    where,
                    ERROR,
                    "unauthenticated (hmac is zero) but hmac keys were given",
                    first,
                    last,
                )
            )
        else:
            out.append(Check(where, INFO, "unauthenticated (hmac is zero)", first, last))
    else:  # "unchecked": only without keys
        out.append(
            Check(
                where,
                INFO,
                "unauthenticated (hmac present, not checked: no hmac key given)",
                first,
                last,
            )
        )
    return out


def file_checks(
    p: Parsed,
    wsum: Mapping[str, str] | None,
    keys: list[bytes],
    pubs: list[Any],
    *,
    allow_pending: bool = False,
) -> list[Check]:
    """The root, signature and audit rows. Public keys given: a verified signature is mandatory,
    and it counts only when ``sha256_all``, ``fastxor`` and ``merkle_this`` recomputed from the
    content match the root it signs (DECISIONS, WTXT 11)."""
    root = root_values(p, wsum)
    if root is None:
        out = [_pending_check(p.root_lineno, allow_pending)]
    else:
        out = _root_checks(p, root, wsum)
    root_ok = root is not None and all(c.status == OK for c in out)
    out += _signature_checks(p, wsum, pubs, root_ok)
    if p.audit_lineno is not None:
        out.append(_audit_check(p, p.audit_lineno))
    return out


def _pending_check(rl: int, allow_pending: bool) -> Check:
    """A ``root_pending`` file without its WSUM sidecar: an error unless ``allow_pending``."""
    if allow_pending:
        return Check(
            f"root_pending (line {rl})",
            INFO,
            "no WSUM sidecar to finalize the root: root not checked (allow_pending)",
            rl,
            rl,
        )
    return Check(
        f"root_pending (line {rl})",
        ERROR,
        "no WSUM sidecar to finalize the root (pass wsum= or allow_pending=True)",
        rl,
        rl,
    )


def _root_checks(p: Parsed, root: Mapping[str, str], wsum: Mapping[str, str] | None) -> list[Check]:
    """``sha256_all``, ``fastxor`` and ``merkle_this`` recomputed from the content against the
    root the file (or its WSUM sidecar) claims."""
    rl = p.root_lineno
    first = p.arrays[0].lineno if p.arrays else rl
    last = p.arrays[-1].end_lineno if p.arrays else rl
    if p.pending:
        assert wsum is not None
        obj = f"wsum ({wsum_name(wsum)} line 1: the root of root_pending line {rl})"
    else:
        obj = f"root (line {rl})"
    arrays = f" lines {first}-{last}" if p.arrays else " no lines"
    cover = {
        "sha256_all": f"covers the arr lines and array bytes of{arrays}",
        "fastxor": f"covers the array bytes of{arrays}",
        "merkle_this": f"covers meta line 2 (ts, gen, build), merkle_prev and "
        f"sha256_all of line {rl}",
    }
    prev = root["merkle_prev"]
    this = S.merkle(prev, p.computed_all, p.meta["ts"], p.meta["gen"], p.meta["build"])
    out = []
    for field, got in (
        ("sha256_all", p.computed_all),
        ("fastxor", f"{p.computed_fastxor:016x}"),
        ("merkle_this", this),
    ):
        if root[field] != got:
            detail = f"{field} mismatch ({cover[field]}); expected {root[field]}, got {got}"
            out.append(Check(obj, ERROR, detail, rl, rl if field == "merkle_this" else last))
        elif field != "merkle_this":
            out.append(Check(obj, OK, field, rl, rl))
        elif prev == S.ZERO64:
            out.append(Check(obj, OK, "merkle_this (first generation)", rl, rl))
        else:
            out.append(Check(obj, OK, f"merkle_this (merkle_prev {prev[:16]})", rl, rl))
    return out


def _audit_check(p: Parsed, line: int) -> Check:
    """The audit line is covered by no hash (only by a ``sign_all`` signature's bytes)."""
    covered = (
        " (its bytes are covered by the sign_all signature)"
        if (p.sign is not None and "sign_all" in p.cap)
        else ""
    )
    return Check(
        f"audit (line {line})",
        INFO,
        "unauthenticated: not covered by any hash" + covered,
        line,
        line,
    )


def _signature_checks(
    p: Parsed, wsum: Mapping[str, str] | None, pubs: list[Any], root_ok: bool
) -> list[Check]:
    rl = p.root_lineno
    if p.pending:
        if wsum is None:
            if not pubs:
                return []
            return [
                Check(
                    f"wsum signature (root_pending line {rl})",
                    ERROR,
                    "public keys were given but there is no WSUM sidecar to carry a signature",
                    rl,
                    rl,
                )
            ]
        obj = f"wsum signature ({wsum_name(wsum)} line 1)"
        state, keyid, line = wsum_signature_state(wsum, pubs), wsum.get("keyid", ""), rl
        covers = "the WSUM line before ' sign='"
    else:
        line = p.sign_lineno if p.sign_lineno is not None else rl + 1
        obj = f"signature (line {line})"
        if p.sign is None:
            state, keyid = "unsigned", ""
        else:
            keyid = p.sign["keyid"]
            state = check_signature(p.sign["ed25519"], keyid, p.message("sign_all" in p.cap), pubs)
        covers = f"every line but line {line}" if "sign_all" in p.cap else f"lines 1-{rl}"
    if state == "verified":
        if root_ok:
            return [
                Check(obj, OK, f"ed25519 verified (keyid {keyid}); covers {covers}", line, line)
            ]
        return [
            Check(
                obj,
                ERROR,
                f"ed25519 signature by keyid {keyid} is valid over {covers}, "
                "but the root it signs does not match the content: nothing is "
                "authenticated",
                line,
                line,
            )
        ]
    if state == "bad":
        return [Check(obj, ERROR, f"ed25519 signature does not verify (keyid {keyid})", line, line)]
    if state == "unsigned":
        if pubs:
            return [Check(obj, ERROR, "unsigned but public keys were given", line, line)]
        return [Check(obj, INFO, "unsigned", line, line)]
    # "no key"
    if pubs:
        return [
            Check(
                obj,
                ERROR,
                f"signed by keyid {keyid}, which is not the keyid of any public key given",
                line,
                line,
            )
        ]
    return [
        Check(
            obj,
            INFO,
            f"ed25519 present (keyid {keyid}), not verified: no public key given",
            line,
            line,
        )
    ]


def wsum_name(wsum: Mapping[str, str]) -> str:
    return os.path.basename(wsum.get("_path", "")) or "sidecar"


def enforce(
    p: Parsed, wsum: dict[str, str] | None, keys: list[bytes], pubs: list[Any], allow_pending: bool
) -> None:
    """Raise on the first failed check (read's contract): the rows ``verify`` reports."""
    for a in p.arrays:
        for c in array_checks(a, keys):
            if c.status == ERROR:
                raise c.error()
    for c in file_checks(p, wsum, keys, pubs, allow_pending=allow_pending):
        if c.status == ERROR:
            raise c.error()

"""Streaming finalization: a WTXT written with ``root_pending`` gets its root from a one-line
``<file>.wsum`` sidecar written later by :func:`finalize_wsum`.

    WSUM 1 sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64> fastxor=<hex16>
           [keyid=<hex16>] sign=<base64, 88 chars, or empty when unsigned>

The signature covers the line's bytes before `` sign=``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import pybase64

from ..core.atomic import atomic_write
from ..errors import FormatError, describe
from . import _spec as S
from ._text import char_problem, err, fields
from .reader import WtxtFile, check_signature, keyid_of, wsum_path

__all__ = ["finalize_wsum", "parse_wsum", "wsum_signature_state"]

_SIG = f"(?:{S.B64_SIG})?"  # canonical base64 of 64 bytes, or empty (unsigned)


def parse_wsum(data: bytes) -> dict[str, str]:
    """Parse a WSUM sidecar (exactly one line + LF); returns its fields and ``_signed``."""
    if not data.endswith(b"\n") or data.count(b"\n") != 1:
        nlf = data.count(b"\n")
        raise err(
            FormatError,
            1,
            0,
            "wsum: must be exactly one line ending in LF",
            got=f"{nlf} LF in {len(data)} bytes",
        )
    raw = data[:-1]
    bad = char_problem(raw)
    if bad is not None:
        raise err(FormatError, 1, bad[0], "wsum: " + bad[1])
    text = raw.decode("ascii")
    if not text.startswith("WSUM 1 "):
        raise err(FormatError, 1, 0, "bad WSUM magic", expected="'WSUM 1 ...'", got=repr(text[:12]))
    spec = list(S.WSUM_HEAD)
    if " keyid=" in text:
        spec.append(("keyid", S.HEX16))
    spec.append(("sign", _SIG))
    out = fields("WSUM " + text[7:], "WSUM", spec, 1, 0)
    if out["sign"] and "keyid" not in out:
        raise err(FormatError, 1, 0, "a signed WSUM needs keyid")
    out["_signed"] = text[: text.index(" sign=")]
    return out


def wsum_signature_state(wsum: Mapping[str, str], public_keys: Iterable[Any]) -> str:
    """``verified``, ``no key``, ``bad`` or ``unsigned``."""
    if not wsum["sign"]:
        return "unsigned"
    return check_signature(wsum["sign"], wsum["keyid"], wsum["_signed"].encode(), public_keys)


def finalize_wsum(
    path: str | os.PathLike[str],
    *,
    merkle_prev: Any = None,
    signing_key: Any = None,
    hmac_keys: Iterable[bytes] = (),
    workers: int = 1,
) -> str:
    """Verify a ``root_pending`` WTXT and write its ``<path>.wsum`` sidecar; returns its path."""
    from .writer import _prev_hex, private_key

    with WtxtFile(
        path, hmac_keys=hmac_keys, allow_pending=True, wsum=os.devnull, workers=workers
    ) as f:
        p = f.parsed
        if not p.pending:
            raise FormatError(
                describe(S.FMT, "root", detail="file is not root_pending; it needs no WSUM")
            )
        prev = _prev_hex(merkle_prev)
        this = S.merkle(prev, p.computed_all, p.meta["ts"], p.meta["gen"], p.meta["build"])
        head = (
            f"WSUM 1 sha256_all={p.computed_all} merkle_prev={prev} merkle_this={this} "
            f"fastxor={p.computed_fastxor:016x}"
        )
    if signing_key is not None:
        key = private_key(signing_key)
        head += f" keyid={keyid_of(key.public_key())}"
        sig = pybase64.b64encode(key.sign(head.encode())).decode()
    else:
        sig = ""
    out = wsum_path(path)
    with atomic_write(out) as fh:
        fh.write((head + f" sign={sig}\n").encode())
    return out

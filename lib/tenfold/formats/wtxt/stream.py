"""Streaming finalization: a WTXT written with ``root_pending`` gets its root from a one-line
``<file>.wsum`` sidecar written later by :func:`finalize_wsum`.

    WSUM 1 sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64> fastxor=<hex16>
           [keyid=<hex16>] sign=<base64, 88 chars, or empty when unsigned>

The signature covers the line's bytes before `` sign=``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pybase64

from ...core.atomic import atomic_write
from ...errors import FormatError, describe
from . import _spec as S
from ._crypto import keyid_of, parse_wsum, prev_hex, private_key, wsum_path, wsum_signature_state
from .reader import WtxtFile

__all__ = ["finalize_wsum", "parse_wsum", "wsum_signature_state"]


def finalize_wsum(
    path: str | os.PathLike[str],
    *,
    merkle_prev: Any = None,
    signing_key: Any = None,
    hmac_keys: Iterable[bytes] = (),
    workers: int | None = None,
) -> str:
    """Verify a ``root_pending`` WTXT and write its ``<path>.wsum`` sidecar; returns its path."""
    with WtxtFile(
        path, hmac_keys=hmac_keys, allow_pending=True, wsum=os.devnull, workers=workers
    ) as f:
        p = f.parsed
        if not p.pending:
            raise FormatError(
                describe(S.FMT, "root", detail="file is not root_pending; it needs no WSUM")
            )
        prev = prev_hex(merkle_prev)
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

"""Sign (or re-sign) an existing WTXT file without touching its arrays."""

from __future__ import annotations

import os
from typing import Any

from ..core.atomic import atomic_write
from ..errors import FormatError, describe
from . import _spec as S
from .reader import WtxtFile
from .writer import _sign_line, private_key

__all__ = ["sign_file", "load_private_key", "load_public_key"]


def sign_file(path: str | os.PathLike[str], signing_key: Any, *, sign_all: bool = False,
              out: str | os.PathLike[str] | None = None) -> None:
    """Verify ``path`` and write it (to ``out``, default in place) with a fresh ``sign`` line.

    The result is byte-identical to what :func:`write` gives with the same key and
    ``sign_all``: the ``cap`` line gains or loses ``sign_all`` accordingly.
    """
    key = private_key(signing_key)
    with WtxtFile(path) as f:
        p = f.parsed
        if p.pending:
            raise FormatError(describe(S.FMT, "sign", detail="a root_pending file is signed "
                                       "through its WSUM sidecar (tenfold wsum --key)"))
        data = p.data.tobytes()
        root_end = p.root_end
        cap = [c for c in p.cap if c != "sign_all"]
        if sign_all:
            cap.append("sign_all")
        known = [c for c in S.CAP_ORDER if c in cap]
        cap = known + [c for c in cap if c not in S.CAP_ORDER]
    lines = data[:root_end].split(b"\n")
    lines[2] = ("cap ext=" + ",".join(cap)).encode()
    head = b"\n".join(lines)
    body = data[p.sign_span[1]:] if p.sign_span else data[root_end:]
    msg = head + body if sign_all else head
    new = head + _sign_line(key, msg).encode() + b"\n" + body
    with atomic_write(out if out is not None else path) as fh:
        fh.write(new)


def load_private_key(path: str | os.PathLike[str]) -> Any:
    """An Ed25519 private key from a PEM file, a 32-byte raw seed or 64 hex digits."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"-----BEGIN"):
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        return load_pem_private_key(data, password=None)
    return private_key(_raw32(data, path))


def load_public_key(path: str | os.PathLike[str]) -> Any:
    """An Ed25519 public key (PEM, 32 raw bytes or 64 hex digits)."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"-----BEGIN"):
        from cryptography.hazmat.primitives.serialization import load_pem_public_key

        return load_pem_public_key(data)
    return _raw32(data, path)


def _raw32(data: bytes, path: Any) -> bytes:
    s = data.strip()
    if len(s) == 64:
        try:
            return bytes.fromhex(s.decode())
        except ValueError:
            pass
    if len(data) == 32:
        return data
    raise FormatError(describe(S.FMT, f"key file {os.fspath(path)!r}", detail="expected PEM, "
                               "32 raw bytes or 64 hex digits"))

"""Sign (or re-sign) an existing WTXT file without touching its arrays."""

from __future__ import annotations

import os
from typing import Any

from ...core.atomic import atomic_write
from ...core.locking import lock_if_rewritten
from ...errors import FormatError, describe
from . import _spec as S
from ._crypto import private_key, sign_line
from .reader import WtxtFile

__all__ = ["sign_file", "load_private_key", "load_public_key"]


def sign_file(
    path: str | os.PathLike[str],
    signing_key: Any,
    *,
    sign_all: bool = False,
    out: str | os.PathLike[str] | None = None,
) -> None:
    """Verify ``path`` and write it (to ``out``, default in place) with a fresh ``sign`` line.

    The result is byte-identical to what :func:`write` gives with the same key and
    ``sign_all``: the ``cap`` line gains or loses ``sign_all`` accordingly. Re-signing in place
    holds the file's lock (:mod:`tenfold.core.locking`) from the read to the rename.
    """
    dst = out if out is not None else path
    with lock_if_rewritten(path, dst, fmt=S.FMT):
        _sign_file(path, signing_key, sign_all, dst)


def _sign_file(path: Any, signing_key: Any, sign_all: bool, dst: Any) -> None:
    key = private_key(signing_key)
    with WtxtFile(path) as f:
        p = f.parsed
        if p.pending:
            raise FormatError(
                describe(
                    S.FMT,
                    "sign",
                    detail="a root_pending file is signed "
                    "through its WSUM sidecar (tenfold wsum --key)",
                )
            )
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
    body = data[p.sign_span[1] :] if p.sign_span else data[root_end:]
    msg = head + body if sign_all else head
    new = head + sign_line(key, msg).encode() + b"\n" + body
    with atomic_write(dst) as fh:
        fh.write(new)


def load_private_key(path: str | os.PathLike[str]) -> Any:
    """An Ed25519 private key from a PEM file, a 32-byte raw seed or 64 hex digits."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"-----BEGIN"):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import load_der_private_key

        der = _pem_body(data, "PRIVATE KEY", path)
        return _ed25519(lambda: load_der_private_key(der, password=None), Ed25519PrivateKey, path)
    return private_key(_raw32(data, path))


def load_public_key(path: str | os.PathLike[str]) -> Any:
    """An Ed25519 public key (PEM, 32 raw bytes or 64 hex digits)."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"-----BEGIN"):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.serialization import load_der_public_key

        der = _pem_body(data, "PUBLIC KEY", path)
        return _ed25519(lambda: load_der_public_key(der), Ed25519PublicKey, path)
    return _raw32(data, path)


def _ed25519(load: Any, cls: type, path: Any) -> Any:
    where = f"key file {os.fspath(path)!r}"
    try:
        key = load()
    except (ValueError, TypeError) as exc:
        raise FormatError(describe(S.FMT, where, detail=f"not a readable key: {exc}")) from None
    if not isinstance(key, cls):
        raise FormatError(
            describe(S.FMT, where, detail="not an Ed25519 key", got=type(key).__name__)
        )
    return key


def _pem_body(data: bytes, label: str, path: Any) -> bytes:
    """The DER inside a one-block PEM file (RFC 7468), its base64 decoded strictly: only the
    canonical encoding of the DER is accepted (no stray characters, zero padding bits)."""
    lines = data.replace(b"\r\n", b"\n").strip().split(b"\n")
    begin, end = f"-----BEGIN {label}-----".encode(), f"-----END {label}-----".encode()
    where = f"key file {os.fspath(path)!r}"
    if len(lines) < 3 or lines[0] != begin or lines[-1] != end:
        raise FormatError(
            describe(
                S.FMT,
                where,
                detail=f"expected one PEM block "
                f"'-----BEGIN {label}-----' ... '-----END {label}-----'",
            )
        )
    body = b"".join(ln.strip() for ln in lines[1:-1])
    der = S.b64_canonical(body)
    if der is None:
        raise FormatError(
            describe(
                S.FMT,
                where,
                detail="PEM body is not canonical base64 "
                "(RFC 4648: standard alphabet, '=' padding, zero padding "
                "bits)",
            )
        )
    return der


def _raw32(data: bytes, path: Any) -> bytes:
    s = data.strip()
    if len(s) == 64:
        try:
            return bytes.fromhex(s.decode())
        except ValueError:
            pass
    if len(data) == 32:
        return data
    raise FormatError(
        describe(
            S.FMT,
            f"key file {os.fspath(path)!r}",
            detail="expected PEM, 32 raw bytes or 64 hex digits",
        )
    )

"""Array HMACs, Ed25519 signatures and the WSUM sidecar, shared by the reader, the writer, streaming
finalization and re-signing: key ids, signature lines and their checks, private keys from seeds,
``merkle_prev`` values, and the one-line ``<file>.wsum`` (see :mod:`.stream`).

A leaf of the package: it imports only :mod:`._spec` and :mod:`._text`, so that no wtxt module
has to import another for its crypto.
"""

from __future__ import annotations

import hmac as _hmac
import os
from collections.abc import Iterable, Mapping
from typing import Any

import pybase64

from ...core.checksums import xxh64_hex
from ...errors import EncodeError, FormatError
from . import _spec as S
from ._text import char_problem, err, fields

__all__ = [
    "array_macs",
    "hmac_state",
    "keyid_of",
    "raw_public",
    "check_signature",
    "private_key",
    "prev_hex",
    "sign_line",
    "wsum_path",
    "read_wsum",
    "parse_wsum",
    "wsum_signature_state",
]


def _bad_key(what: str, detail: str, **kw: Any) -> EncodeError:
    return S.E.encode(what, detail=detail, **kw)


def array_macs(keys: list[bytes], salt_hex: str) -> list[Any]:
    """One running HMAC-SHA256 per key, each already fed the array's 8 salt bytes (the
    array's raw bytes follow: ``HMAC(key, salt || raw)``)."""
    salt = bytes.fromhex(salt_hex)
    return [_hmac.new(k, salt, "sha256") for k in keys]


def hmac_state(declared: str, macs: list[Any], keys: list[bytes]) -> str:
    """``unauthenticated`` (the ``hmac`` field is zero), ``unchecked`` (no key given),
    ``authenticated`` (one key's HMAC matches, compared in constant time) or ``bad``."""
    if declared == S.ZERO64:
        return "unauthenticated"
    if not keys:
        return "unchecked"
    mac = bytes.fromhex(declared)
    ok = any(_hmac.compare_digest(m.digest(), mac) for m in macs)
    return "authenticated" if ok else "bad"


def keyid_of(public_key: Any) -> str:
    """``xxh64(raw 32-byte public key, seed 0)`` as 16 hex digits."""
    return xxh64_hex(raw_public(public_key))


def raw_public(public_key: Any) -> bytes:
    if isinstance(public_key, (bytes, bytearray, memoryview)):
        raw = bytes(public_key)
    else:
        from cryptography.hazmat.primitives import serialization

        raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    if len(raw) != 32:
        raise ValueError(f"wtxt: an Ed25519 public key has 32 bytes, got {len(raw)}")
    return raw


def check_signature(
    sig_b64: str, keyid: str, message: bytes | bytearray, public_keys: Iterable[Any]
) -> str:
    """``"verified"``, ``"no key"`` (no public key with this keyid) or ``"bad"`` (also for a
    signature that is not canonical base64 of 64 bytes)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    for k in public_keys:
        raw = raw_public(k)
        if xxh64_hex(raw) != keyid:
            continue
        sig = S.b64_canonical(sig_b64)
        if sig is None or len(sig) != 64:
            return "bad"
        try:
            Ed25519PublicKey.from_public_bytes(raw).verify(sig, message)
        except InvalidSignature:
            return "bad"
        return "verified"
    return "no key"


def private_key(key: Any) -> Any:
    """An ``Ed25519PrivateKey`` from itself or its 32-byte seed."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if isinstance(key, (bytes, bytearray, memoryview)):
        if len(key) != 32:
            raise _bad_key("signing_key", "an Ed25519 seed has 32 bytes", got=len(key))
        return Ed25519PrivateKey.from_private_bytes(bytes(key))
    if not isinstance(key, Ed25519PrivateKey):
        raise _bad_key(
            "signing_key", "expected Ed25519PrivateKey or 32 bytes", got=type(key).__name__
        )
    return key


def prev_hex(merkle_prev: Any) -> str:
    if merkle_prev is None:
        return S.ZERO64
    if isinstance(merkle_prev, str):
        if len(merkle_prev) == 64 and all(c in "0123456789abcdef" for c in merkle_prev):
            return merkle_prev
        raise _bad_key(
            "merkle_prev", "must be 64 lowercase hex digits or 32 bytes", got=merkle_prev
        )
    b = bytes(merkle_prev)
    if len(b) != 32:
        raise _bad_key("merkle_prev", "must be 32 bytes", got=len(b))
    return b.hex()


def sign_line(key: Any, message: bytes) -> str:
    sig = key.sign(message)
    return f"sign ed25519={pybase64.b64encode(sig).decode()} keyid={keyid_of(key.public_key())}"


def wsum_path(path: str | os.PathLike[str]) -> str:
    return os.fspath(path) + ".wsum"


def read_wsum(path: str | os.PathLike[str] | None) -> dict[str, str] | None:
    if path is None or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        out = parse_wsum(f.read(1 << 16))
    out["_path"] = os.fspath(path)
    return out


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

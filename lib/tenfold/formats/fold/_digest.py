"""FOLD digests: plain SHA-256 hex (pyfolds 1.0.2), ``sha256:<hex>`` and ``hmac-sha256:<hex>``.

An ``hmac-sha256:`` digest is HMAC-SHA256 keyed by the caller's key over the *hex text* of the
SHA-256 digest (what pyfolds' main branch writes when ``PYFOLDS_INTEGRITY_KEY`` is set).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

STYLES = ("hex", "sha256:", "hmac-sha256:")

_DIGEST_RE = re.compile(r"(sha256:|hmac-sha256:)?([0-9a-fA-F]{64})")


def split(digest: object) -> tuple[str, str] | None:
    """``(style, lowercase hex)`` of a stored digest, or None when it is malformed.

    >>> split("sha256:" + "AB" * 32)[0]
    'sha256:'
    >>> split("md5:00") is None
    True
    """
    if not isinstance(digest, str):
        return None
    m = _DIGEST_RE.fullmatch(digest)
    if m is None:
        return None
    return (m.group(1) or "hex", m.group(2).lower())


def key_bytes(key: str | bytes | None) -> bytes | None:
    if key is None:
        return None
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def make(sha_hex: str, style: str, key: bytes | None) -> str:
    """The stored form of the SHA-256 hex digest ``sha_hex`` in ``style``."""
    if style == "hex":
        return sha_hex
    if style == "sha256:":
        return "sha256:" + sha_hex
    if style == "hmac-sha256:":
        if key is None:
            raise ValueError("hmac-sha256 digests need a key")
        return "hmac-sha256:" + hmac.new(key, sha_hex.encode("ascii"), hashlib.sha256).hexdigest()
    raise ValueError(f"unknown digest style {style!r}")


def matches(stored: str, sha_hex: str, key: bytes | None) -> bool | None:
    """Whether ``stored`` is the digest of data whose SHA-256 hex is ``sha_hex``.

    None when it cannot be told: an ``hmac-sha256:`` digest and no key. Malformed digests
    never match.
    """
    parts = split(stored)
    if parts is None:
        return False
    style, value = parts
    if style == "hmac-sha256:":
        if key is None:
            return None
        return hmac.compare_digest(make(sha_hex, style, key)[len(style) :], value)
    return hmac.compare_digest(sha_hex, value)


def manifest_source(metadata: dict[str, Any]) -> bytes:
    """The bytes ``manifest_hash`` digests: metadata without it, sorted keys, ASCII JSON."""
    body = {k: v for k, v in metadata.items() if k != "manifest_hash"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")

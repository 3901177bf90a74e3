"""Encryption: the whole WTXT file inside age ASCII armor, through the optional ``pyrage``.

The armored file is still pure ASCII; decrypting gives back the exact WTXT bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ...core.atomic import atomic_write
from ...errors import IntegrityError, describe
from . import _spec as S

__all__ = ["armor_encrypt", "armor_decrypt"]


def _pyrage() -> Any:
    from ...core.optional import require

    return require("pyrage", extra="crypto", what=f"{S.FMT}: age armor")


def _recipient(pyrage: Any, r: Any) -> Any:
    if isinstance(r, str):
        return pyrage.x25519.Recipient.from_str(r)
    return r


def _identity(pyrage: Any, i: Any) -> Any:
    if isinstance(i, str):
        return pyrage.x25519.Identity.from_str(i)
    return i


def armor_encrypt(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], recipients: Iterable[Any]
) -> None:
    """Encrypt the file ``src`` to ``dst`` in age ASCII armor for ``recipients`` (age
    recipients or their ``age1...`` strings). Note that age encryption is randomized: the
    armored bytes differ from run to run even though the plaintext is deterministic."""
    pyrage = _pyrage()
    with open(src, "rb") as f:
        data = f.read()
    rec = [_recipient(pyrage, r) for r in recipients]
    if not rec:
        raise ValueError("wtxt: armor_encrypt needs at least one recipient")
    out = pyrage.encrypt(data, rec, armored=True)
    with atomic_write(dst) as f:
        f.write(out)


def armor_decrypt(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], identities: Iterable[Any]
) -> None:
    """Decrypt an armored file ``src`` to ``dst`` with age identities (or ``AGE-SECRET-KEY-``
    strings). Raises :class:`IntegrityError` when no identity opens it."""
    pyrage = _pyrage()
    with open(src, "rb") as f:
        data = f.read()
    ids = [_identity(pyrage, i) for i in identities]
    try:
        out = pyrage.decrypt(data, ids)
    except pyrage.DecryptError as exc:
        raise IntegrityError(describe(S.FMT, "armor", detail=f"cannot decrypt: {exc}")) from None
    with atomic_write(dst) as f:
        f.write(out)

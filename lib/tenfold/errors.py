"""The exception hierarchy of tenfold.

Every error a reader, writer or verifier raises on bad input is one of these. Each is also a
builtin exception (``ValueError``, ``EOFError``) so that code written against the standard library
keeps working::

    TenfoldError(Exception)
      FormatError(TenfoldError, ValueError)      bad magic, header, enum value, layout
        TruncatedError(FormatError, EOFError)    file ends early
        UnsupportedError(FormatError)            unknown version, dtype or feature
        LimitError(FormatError)                  a size or count above the configured limit
      IntegrityError(TenfoldError, ValueError)   checksum / hash / signature / HMAC mismatch
        UncorrectableError(IntegrityError)       ECC could not repair
      EncodeError(TenfoldError, ValueError)      a writer was given what the format cannot hold

Messages follow one form: ``"<format>: <object> at offset 0x1f8: <field> mismatch; expected
36, got 32"`` (lower case, no final period). :func:`describe` builds them.
"""

from __future__ import annotations

__all__ = [
    "TenfoldError",
    "FormatError",
    "TruncatedError",
    "UnsupportedError",
    "LimitError",
    "IntegrityError",
    "UncorrectableError",
    "EncodeError",
    "describe",
]


class TenfoldError(Exception):
    """Base class of every tenfold error."""


class FormatError(TenfoldError, ValueError):
    """The bytes do not follow the format (bad magic, header, enum value or layout)."""


class TruncatedError(FormatError, EOFError):
    """The file ends before a structure it announces."""


class UnsupportedError(FormatError):
    """A version, dtype, encoding or feature this release does not implement."""


class LimitError(FormatError):
    """A size or count above the configured limit (see :class:`tenfold.core.Limits`)."""


class IntegrityError(TenfoldError, ValueError):
    """A checksum, hash, signature or HMAC does not match."""


class UncorrectableError(IntegrityError):
    """Error correction could not repair the damage."""


class EncodeError(TenfoldError, ValueError):
    """A writer was given something the format cannot hold."""


def describe(
    fmt: str,
    what: str,
    *,
    offset: int | None = None,
    field: str | None = None,
    expected: object = None,
    got: object = None,
    detail: str | None = None,
) -> str:
    """Build a message in tenfold's form.

    >>> describe("zt", "tensor 'w'", offset=0x40, field="size", expected=36, got=32)
    "zt: tensor 'w' at offset 0x40: size mismatch; expected 36, got 32"
    >>> describe("zt", "index", detail="not a CBOR array")
    'zt: index: not a CBOR array'
    """
    head = f"{fmt}: {what}"
    if offset is not None:
        head += f" at offset {offset:#x}"
    parts = []
    if field is not None:
        parts.append(f"{field} mismatch" if detail is None else f"{field}: {detail}")
    elif detail is not None:
        parts.append(detail)
    msg = head + (": " + parts[0] if parts else "")
    if expected is not None or got is not None:
        msg += f"; expected {_show(expected)}, got {_show(got)}"
    return msg


def _show(value: object) -> str:
    # Text is shown as written (it is often a constraint such as "<= 100"); other values by repr.
    return value if isinstance(value, str) else repr(value)

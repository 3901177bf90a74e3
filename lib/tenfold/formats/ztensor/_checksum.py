"""The ``checksum`` field: ``"crc32c:0x%08X"`` or ``"sha256:<hex>"`` over the stored bytes."""

from __future__ import annotations

import re

from ...core.checksums import crc32c, sha256_hex
from ...errors import EncodeError, FormatError, IntegrityError, UnsupportedError, describe
from ._spec import FMT

_CRC = re.compile(r"crc32c:0x([0-9A-Fa-f]{8})\Z")
_SHA = re.compile(r"sha256:([0-9A-Fa-f]{64})\Z")

ALGORITHMS = ("crc32c", "sha256")


def parse(text: object, what: str, offset: int) -> tuple[str, str]:
    """Split a checksum field into ``(algorithm, normalised lowercase hex)``."""
    if not isinstance(text, str):
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="checksum",
                detail="not a string",
                expected="str",
                got=type(text).__name__,
            )
        )
    m = _CRC.match(text)
    if m:
        return "crc32c", m.group(1).lower()
    m = _SHA.match(text)
    if m:
        return "sha256", m.group(1).lower()
    algo = text.split(":", 1)[0]
    if algo in ALGORITHMS:
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field="checksum",
                detail="malformed",
                expected=f"{algo}:<hex>",
                got=text,
            )
        )
    raise UnsupportedError(
        describe(
            FMT,
            what,
            offset=offset,
            field="checksum",
            detail="unknown algorithm",
            expected="crc32c | sha256",
            got=text,
        )
    )


def compute(algo: str, data: object) -> str:
    """Lowercase hex digest of ``data`` with ``algo``."""
    if algo == "crc32c":
        return f"{crc32c(data):08x}"
    return sha256_hex(data)


def render(algo: str, hexdigest: str) -> str:
    """The field as tenfold writes it (uppercase CRC hex, lowercase SHA-256)."""
    if algo == "crc32c":
        return f"crc32c:0x{hexdigest.upper()}"
    return f"sha256:{hexdigest}"


def check_algorithm(algo: object) -> str | None:
    if algo is None:
        return None
    if algo not in ALGORITHMS:
        raise EncodeError(
            describe(
                FMT,
                "writer",
                field="checksum",
                detail="unknown algorithm",
                expected="None | crc32c | sha256",
                got=algo,
            )
        )
    return algo  # type: ignore[return-value]


def mismatch(algo: str, expected_hex: str, got_hex: str, what: str, offset: int) -> IntegrityError:
    """The error of a checksum that does not match."""
    return IntegrityError(
        describe(
            FMT, what, offset=offset, field=f"{algo} checksum", expected=expected_hex, got=got_hex
        )
    )


def verify(algo: str, expected_hex: str, data: object, what: str, offset: int) -> None:
    got = compute(algo, data)
    if got != expected_hex:
        raise mismatch(algo, expected_hex, got, what, offset)

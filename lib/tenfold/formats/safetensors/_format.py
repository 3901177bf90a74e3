"""safetensors' descriptor in the registry (:mod:`tenfold.registry`): no fixed magic, so
:func:`sniff` recognises a file by its header length and the ``{`` after it."""

from __future__ import annotations

from ...errors import FormatError, factory
from ...registry import NATIVE_DTYPES, Format, register

#: Largest header tenfold reads or writes.
MAX_HEADER = 100 << 20

#: Element types a safetensors file holds (a FOLD ``STEN`` chunk is one, so FOLD too).
DTYPES = NATIVE_DTYPES | {
    "bfloat16",
    "float8_e5m2",
    "float8_e4m3fn",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "complex64",
}


def sniff(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file) looks like safetensors: a plausible
    header length followed by ``{``."""
    if len(head) < 9 or head[8:9] != b"{":
        return False
    n = int.from_bytes(head[:8], "little")
    return 2 <= n <= MAX_HEADER


def near_miss(head: bytes, where: str, named: bool) -> FormatError | None:
    """The error for a file that is safetensors but for its header length (the only thing
    that tells safetensors, which has no magic): ``head`` has ``{`` after 8 bytes, or the
    file is ``named`` ``.safetensors``."""
    if not named and head[8:9] != b"{":
        return None
    E = factory("safetensors")
    if len(head) < 8:
        return E.truncated(
            f"{where}: header length",
            offset=0,
            detail="file shorter than the 8-byte length",
            expected=">= 8 bytes",
            got=len(head),
        )
    n = int.from_bytes(head[:8], "little")
    if not 2 <= n <= MAX_HEADER:  # (one in bounds that the file cannot hold: the reader's)
        return E.format(
            f"{where}: header length",
            offset=0,
            detail="not a plausible length (damaged, or not a safetensors file)",
            expected=f"2 to {MAX_HEADER} (the limit)",
            got=n,
        )
    return E.format(
        f"{where}: header",
        offset=8,
        detail="not a JSON object",
        expected="'{'",
        got=head[8:9],
    )


FORMAT = register(
    Format(
        name="safetensors",
        description="safetensors",
        suffixes=(".safetensors",),
        sniff=sniff,
        near_miss=near_miss,
        package="tenfold.formats.safetensors.reader",
        dtypes=DTYPES,
        metadata="str",
        save_checksum="refuse",  # no per-tensor checksum field
        hooks={
            "convert_source": "tenfold.formats.safetensors._convert:source",
            "convert_target": "tenfold.formats.safetensors._convert:target",
            "convert_fallback": "tenfold.formats.safetensors._convert:claims",
        },
    )
)

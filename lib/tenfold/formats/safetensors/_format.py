"""safetensors' descriptor in the registry (:mod:`tenfold.registry`): no fixed magic, so
:func:`sniff` recognises a file by its header length and the ``{`` after it."""

from __future__ import annotations

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


FORMAT = register(
    Format(
        name="safetensors",
        description="safetensors",
        suffixes=(".safetensors",),
        sniff=sniff,
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

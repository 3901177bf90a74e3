"""WTXT's descriptor in the registry (:mod:`tenfold.registry`), and its magic bytes."""

from __future__ import annotations

from typing import Any

from ...registry import Format, register

#: What a WTXT and a WTXT-DELTA file start with (then the version).
PREFIX, DELTA_PREFIX = b"WTXT ", b"WTXT-DELTA "

#: Element types WTXT holds (the spec's list: no float16, bfloat16 or bool).
DTYPES = frozenset(
    {"float64", "float32", "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"}
)


def whole(mf: Any) -> Any:
    """What WTXT's ``inspect`` / ``verify`` take for a remote object (the ``remote_input``
    hook): its bytes, fetched whole (the text is parsed whole)."""
    return mf.u8(0, int(mf.size), "the whole object")


FORMAT = register(
    Format(
        name="wtxt",
        description="WTXT/Chunks v1.1",
        suffixes=(".wtxt",),
        magics=(PREFIX, DELTA_PREFIX),
        package="tenfold.formats.wtxt",
        dtypes=DTYPES,
        metadata="none",
        save_checksum="ignore",  # every chunk has its parity and CRC
        hooks={
            "cli": "tenfold.formats.wtxt._cli:register",
            "convert_source": "tenfold.formats.wtxt._convert:source",
            "convert_target": "tenfold.formats.wtxt._convert:target",
            "remote_input": "tenfold.formats.wtxt._format:whole",
            "remote_source": "tenfold.formats.wtxt._cli:remote_source",
        },
    )
)

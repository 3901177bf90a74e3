"""WTXT's descriptor in the registry (:mod:`tenfold.registry`), and its magic bytes."""

from __future__ import annotations

from ...registry import Format, register

#: What a WTXT and a WTXT-DELTA file start with (then the version).
PREFIX, DELTA_PREFIX = b"WTXT ", b"WTXT-DELTA "

#: Element types WTXT holds (the spec's list: no float16, bfloat16 or bool).
DTYPES = frozenset(
    {"float64", "float32", "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"}
)

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
            "remote_source": "tenfold.formats.wtxt._cli:remote_source",
        },
    )
)

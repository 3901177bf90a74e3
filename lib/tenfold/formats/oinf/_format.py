"""OINF's descriptor in the registry (:mod:`tenfold.registry`), and its magic bytes."""

from __future__ import annotations

from ...registry import NATIVE_DTYPES, Format, register

MAGIC = b"OINF\0"

#: Element types an OINF file holds (besides its packed 1/2/4-bit and ternary types).
DTYPES = NATIVE_DTYPES | {"bfloat16", "float8_e5m2"}

FORMAT = register(
    Format(
        name="oinf",
        description="OINF",
        suffixes=(".oinf",),
        magics=(MAGIC,),
        package="tenfold.formats.oinf",
        dtypes=DTYPES,
        metadata="any",
        save_checksum="refuse",
        hooks={
            "convert_source": "tenfold.formats.oinf._convert:source",
            "convert_target": "tenfold.formats.oinf._convert:target",
            "metadata": "tenfold.formats.oinf._cli:metadata",
        },
    )
)

"""GGUF's descriptor in the registry (:mod:`tenfold.registry`), and its magic bytes.

tenfold reads GGUF (llama.cpp's model files, versions 2 and 3) and does not write it: the
descriptor lists no element types, so no conversion or ``save`` targets it.
"""

from __future__ import annotations

from ...registry import Format, register

MAGIC = b"GGUF"

FORMAT = register(
    Format(
        name="gguf",
        description="GGUF",
        suffixes=(".gguf",),
        magics=(MAGIC,),
        package="tenfold.formats.gguf",
        dtypes=frozenset(),
        metadata="json",
        save_checksum="refuse",
        hooks={
            "convert_source": "tenfold.formats.gguf._convert:source",
            "metadata": "tenfold.formats.gguf._convert:metadata",
            "version": "tenfold.formats.gguf._convert:version",
        },
    )
)

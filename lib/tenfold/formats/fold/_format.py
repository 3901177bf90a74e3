"""FOLD's descriptor in the registry (:mod:`tenfold.registry`), and its magic bytes."""

from __future__ import annotations

from ...registry import Format, register
from ..safetensors._format import DTYPES as _STEN

MAGIC = b"FOLDv1\0\0"

FORMAT = register(
    Format(
        name="fold",
        description="FOLD / MIND",
        suffixes=(".fold", ".mind"),
        magics=(MAGIC,),
        package="tenfold.formats.fold",
        dtypes=_STEN,  # tensors live in a STEN (safetensors) chunk
        metadata="json",
        save_checksum="ignore",  # every chunk has its CRC-32C and SHA-256
        hooks={
            "cli": "tenfold.formats.fold._cli:register",
            "convert_source": "tenfold.formats.fold._convert:source",
            "convert_target": "tenfold.formats.fold._convert:target",
            "metadata": "tenfold.formats.fold._cli:metadata",
            "reader": "tenfold.formats.fold.tensors:TensorView",  # tenfold.open: the tensors
        },
    )
)

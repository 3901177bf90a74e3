"""TARIDX's descriptor in the registry (:mod:`tenfold.registry`), and its magic bytes."""

from __future__ import annotations

from ...registry import Format, register

MAGIC = b"TARIDX\0\0"

FORMAT = register(
    Format(
        name="taridx",
        description="TARIDX tar-shard index",
        suffixes=(".taridx",),
        magics=(MAGIC,),
        package="tenfold.formats.taridx",
        tensors=False,
        holds="TARIDX is a tar-shard index (rows of member offsets)",
        items="samples",
        hooks={
            "cli": "tenfold.formats.taridx._cli:register",
            "remote_source": "tenfold.formats.taridx._cli:remote_source",
        },
    )
)

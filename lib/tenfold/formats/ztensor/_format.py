"""zTensor's descriptor in the registry (:mod:`tenfold.registry`), and its magic bytes.

Light on purpose: recognising a file imports this module and nothing else of the package.
"""

from __future__ import annotations

from ...registry import NATIVE_DTYPES, Format, register

#: The three generations' magic bytes: 0.1.0, v1.x, v2.
MAGIC, MAGIC_V1, MAGIC_V2 = b"ZTEN0001", b"ZTEN1000", b"\x89ZT2\r\n\x1a\n"

#: Element types a zTensor file holds (every generation tenfold writes).
DTYPES = NATIVE_DTYPES | {"bfloat16"}

#: Element types a zTensor v2 file holds besides (its logical types: float8, float4 and
#: complex; see ``_v2spec.LOGICAL``).
V2_DTYPES = DTYPES | {
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "complex64",
    "complex128",
}


def generation_dtypes() -> dict[int, frozenset[str]]:
    """The element types of each generation tenfold writes other than the default (0.1.0),
    keyed as ``_convert.generation`` reads ``zt_generation`` (the ``generation_dtypes``
    hook)."""
    return {2: V2_DTYPES}


FORMAT = register(
    Format(
        name="ztensor",
        description="zTensor 0.1.0 / v1 / v2",
        suffixes=(".zt",),
        magics=(MAGIC, MAGIC_V1, MAGIC_V2),
        package="tenfold.formats.ztensor",
        dtypes=DTYPES,
        metadata="any",
        checksums=("crc32c", "sha256"),
        save_checksum="pass",
        index_at_end=True,
        follows_links=True,
        checks_optional=True,
        hooks={
            "open_fd": "tenfold.formats.ztensor:open_fd",
            "cli": "tenfold.formats.ztensor._cli:register",
            "convert_source": "tenfold.formats.ztensor._convert:source",
            "convert_target": "tenfold.formats.ztensor._convert:target",
            "convert_generation": "tenfold.formats.ztensor._convert:generation",
            "generation_dtypes": "tenfold.formats.ztensor._format:generation_dtypes",
            "metadata": "tenfold.formats.ztensor._cli:metadata",
            "version": "tenfold.formats.ztensor:detect",
        },
    )
)

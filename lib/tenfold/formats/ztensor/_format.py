"""zTensor's descriptor in the registry (:mod:`tenfold.registry`), and its magic bytes.

Light on purpose: recognising a file imports this module and nothing else of the package.
"""

from __future__ import annotations

from ...registry import NATIVE_DTYPES, Format, register

#: The three generations' magic bytes: 0.1.0, v1.x, v2.
MAGIC, MAGIC_V1, MAGIC_V2 = b"ZTEN0001", b"ZTEN1000", b"\x89ZT2\r\n\x1a\n"

#: Element types a zTensor file holds (every generation tenfold writes).
DTYPES = NATIVE_DTYPES | {"bfloat16"}

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
            "metadata": "tenfold.formats.ztensor._cli:metadata",
            "version": "tenfold.formats.ztensor:detect",
        },
    )
)

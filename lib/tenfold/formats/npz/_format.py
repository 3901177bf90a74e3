"""NumPy npz's descriptor in the registry (:mod:`tenfold.registry`): a zip whose first
member is a ``.npy`` (:func:`sniff`)."""

from __future__ import annotations

from ...registry import NATIVE_DTYPES, Format, register

LOCAL_HEADER = b"PK\x03\x04"
EMPTY_ZIP = b"PK\x05\x06"

#: Element types an npz holds exactly (NumPy's own: no bfloat16 / float8 / float4, which
#: NumPy would write as opaque void records).
DTYPES = NATIVE_DTYPES | {"complex64"}


def sniff(head: bytes) -> bool:
    """True when ``head`` starts a zip whose first member is a ``.npy`` (or an empty zip,
    which is what ``np.savez`` writes for no arrays)."""
    if head[:4] == EMPTY_ZIP:
        return True
    if head[:4] != LOCAL_HEADER or len(head) < 30:
        return False
    n = int.from_bytes(head[26:28], "little")
    name = head[30 : 30 + n]
    return len(name) == n and name.endswith(b".npy")


FORMAT = register(
    Format(
        name="npz",
        description="NumPy npz",
        suffixes=(".npz",),
        sniff=sniff,
        package="tenfold.formats.npz.reader",
        dtypes=DTYPES,
        metadata="none",
        save_checksum="refuse",  # no per-tensor checksum field
        hooks={
            "convert_source": "tenfold.formats.npz._convert:source",
            "convert_target": "tenfold.formats.npz._convert:target",
            "convert_fallback": "tenfold.formats.npz._convert:claims",
        },
    )
)

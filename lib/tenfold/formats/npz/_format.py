"""NumPy npz's descriptor in the registry (:mod:`tenfold.registry`): a zip whose first
member is a ``.npy`` (:func:`sniff`)."""

from __future__ import annotations

from ...errors import FormatError, factory
from ...registry import NATIVE_DTYPES, SNIFF_BYTES, Format, register

LOCAL_HEADER = b"PK\x03\x04"
EMPTY_ZIP = b"PK\x05\x06"

#: Element types an npz holds exactly (NumPy's own: no bfloat16 / float8 / float4, which
#: NumPy would write as opaque void records).
DTYPES = NATIVE_DTYPES | {"complex64"}


#: bytes of a zip local header before its member name
_FIXED = 30


def _name_extra(head: bytes) -> tuple[int, int]:
    """The member name's and the extra field's lengths in a zip local header (at offsets 26
    and 28, little-endian), which ``head`` holds whole (at least :data:`_FIXED` bytes)."""
    return int.from_bytes(head[26:28], "little"), int.from_bytes(head[28:30], "little")


def sniff(head: bytes) -> bool:
    """True when ``head`` starts a zip whose first member is a ``.npy`` (or an empty zip,
    which is what ``np.savez`` writes for no arrays)."""
    if head[:4] == EMPTY_ZIP:
        return True
    if head[:4] != LOCAL_HEADER or len(head) < _FIXED:
        return False
    n, _ = _name_extra(head)
    name = head[_FIXED : _FIXED + n]
    return len(name) == n and name.endswith(b".npy")


def near_miss(head: bytes, where: str, named: bool) -> FormatError | None:
    """The error for a ``.npz`` cut inside its first local header (what starts it is a zip
    local header's magic, or the start of one); any other zip (a cut ``torch.save`` file) is
    not claimed unless named ``.npz``."""
    if not named or not head or not LOCAL_HEADER.startswith(head[:4]):
        return None
    if len(head) >= SNIFF_BYTES:  # the file goes on: not cut in its first header
        return None
    name, extra = _name_extra(head) if len(head) >= _FIXED else (0, 0)
    if len(head) >= _FIXED + name:
        return None  # its member name is whole: what sniff looked at is there
    # the local header with its name and extra field (what the reader asks for, too)
    need = _FIXED + name + extra
    return factory("npz").truncated(
        where,
        offset=0,
        detail=f"truncated: the file has {len(head)} bytes, its local header needs at least {need}",
    )


FORMAT = register(
    Format(
        name="npz",
        description="NumPy npz",
        suffixes=(".npz",),
        sniff=sniff,
        near_miss=near_miss,
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

"""FOLD / MIND container layout (pyfolds 1.0.2, ``"version": "1.2.0"``).

All binary fields are big-endian::

    offset 0   header (28 bytes)      HEADER
    offset 28  chunks, back to back   each: chunk header (32 bytes, CHUNK_HEADER)
                                      | comp[comp_len] | ecc[ecc_len]
    index_off  index                  UTF-8 JSON, index_len bytes, the last thing in the file

Header (28 bytes, HEADER)::

    0   magic       8s  b"FOLDv1\\0\\0"
    8   header_len  u4  28
    12  index_off   u8  where the index starts (0 while a writer is still open)
    20  index_len   u8  length of the index

Chunk header (32 bytes, CHUNK_HEADER)::

    0   ctype       4s  chunk type, 4 ASCII characters (``STEN``, ``NPZ0``, ``JSON`` ...)
    4   flags       u4  0 none, 1 zstd
    8   uncomp_len  u8  length of the data before compression
    16  comp_len    u8  length of ``comp``
    24  crc32c      u4  CRC-32C of ``comp``
    28  ecc_len     u4  length of the parity after ``comp``

The index is ``{"format": "fold", "version": "1.2.0", "created_at_unix": float, "metadata":
{..., "chunk_hashes": {name: digest}, "manifest_hash": digest}, "chunks": [entry, ...]}`` with
each entry ``name, ctype, flags, offset, header_len, comp_len, uncomp_len, crc32c, sha256,
ecc_algo, ecc_len`` in that order, serialised with ``ensure_ascii=False`` and compact
separators. Digests are SHA-256 of ``comp``: plain lowercase hex, ``"sha256:<hex>"`` or
``"hmac-sha256:<hex>"`` (HMAC-SHA256, keyed, over the hex digest text). ``manifest_hash`` is
the same digest of ``json.dumps(metadata without manifest_hash, sort_keys=True,
separators=(",", ":"))``.

ECC ``rs(N)``: Reed-Solomon over GF(2^8) (0x11d, generator 2, first root 0), ``comp`` cut into
blocks of ``255 - N`` bytes, the N parity bytes of each block concatenated, so ``ecc_len =
ceil(comp_len / (255 - N)) * N``. ``none``: no ECC.
"""

from __future__ import annotations

import re

from ...core.records import Record
from ...errors import factory
from ._format import MAGIC as MAGIC  # the one definition, beside the descriptor

FMT = "fold"
#: This format's errors: ``raise E.format(obj, field=..., ...)`` (:func:`~tenfold.errors.factory`)
E = factory(FMT)

HEADER_LEN = 28
CHUNK_HEADER_LEN = 32

HEADER = Record(
    "fold header",
    [("magic", "S8"), ("header_len", ">u4"), ("index_off", ">u8"), ("index_len", ">u8")],
    HEADER_LEN,
)
CHUNK_HEADER = Record(
    "fold chunk header",
    [
        ("ctype", "S4"),
        ("flags", ">u4"),
        ("uncomp_len", ">u8"),
        ("comp_len", ">u8"),
        ("crc32c", ">u4"),
        ("ecc_len", ">u4"),
    ],
    CHUNK_HEADER_LEN,
)

FLAG_NONE = 0
FLAG_ZSTD = 1

MAX_INDEX_SIZE = 100 * 1024 * 1024
MAX_CHUNK_SIZE = 2 * 1024 * 1024 * 1024

FORMAT_NAME = "fold"
#: metadata keys the writer adds itself (integrity), not the user's
INTERNAL_METADATA = ("chunk_hashes", "manifest_hash")
WRITE_VERSION = "1.2.0"
KNOWN_VERSIONS = ("1.0.0", "1.1.0", "1.2.0")

#: Chunk names that make a file a ``.mind``.
MIND_CHUNKS = ("ai_graph", "ai_vectors")

#: The keys of an index entry, in the order pyfolds writes them.
ENTRY_KEYS = (
    "name",
    "ctype",
    "flags",
    "offset",
    "header_len",
    "comp_len",
    "uncomp_len",
    "crc32c",
    "sha256",
    "ecc_algo",
    "ecc_len",
)
#: The entry keys whose values are text (the others are integers).
TEXT_KEYS = ("name", "ctype", "sha256", "ecc_algo")

#: Named protection levels (pyfolds ``ecc_from_protection``).
PROTECTION = {"off": 0, "none": 0, "0": 0, "low": 16, "med": 32, "high": 64}

_RS_RE = re.compile(r"rs\((\d{1,3})\)")


def parse_ecc_algo(algo: str) -> int | None:
    """Parity symbols of an ``ecc_algo`` value: 0 for ``"none"``, N for ``"rs(N)"``.

    Returns None for anything else (an unsupported codec).

    >>> parse_ecc_algo("rs(32)"), parse_ecc_algo("none"), parse_ecc_algo("xx(32)")
    (32, 0, None)
    """
    if algo == "none":
        return 0
    m = _RS_RE.fullmatch(algo)
    if m is None:
        return None
    n = int(m.group(1))
    return n if 2 <= n <= 254 else None


def ecc_len_for(comp_len: int, nsym: int) -> int:
    """Size of the ECC region of ``comp_len`` bytes with ``rs(nsym)`` (0 without ECC).

    >>> ecc_len_for(3000, 32), ecc_len_for(138, 32), ecc_len_for(0, 32), ecc_len_for(9, 0)
    (448, 32, 0, 0)
    """
    if nsym == 0:
        return 0
    k = 255 - nsym
    return -(-comp_len // k) * nsym


assert HEADER.struct.format == ">8sIQQ" and CHUNK_HEADER.struct.format == ">4sIQQII"

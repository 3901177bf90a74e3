"""WTXT/Chunks v1.1: constants, field grammar and the arithmetic every part of the package shares.

A WTXT file is ASCII text (bytes 0x20-0x7E and LF), one record per line::

    WTXT 1
    meta schema=<tok> gen=<6 digits> ts=YYYY-MM-DDTHH:MM:SSZ build=<tok> endian=LE
         host=<tok> cuda=<tok>
    cap ext=<item>[,<item>...]
    root sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64> fastxor=<hex16>
      (or: root_pending sha256_all=<64 zeros> note="finalize with WSUM")
    [sign ed25519=<88 base64 chars> keyid=<hex16>]
    then for every array, in bytewise name order:
      arr name=<name> dtype=<dt> shape=<d>[,<d>...] order=C bytes=<n> sha256=<hex64> hmac=<hex64>
          salt=<hex16>
      [idx rows_per_chunk=<n> row_size=<n> row_blocking=on|off]
      ch ix=<6 digits> off=<12 digits> len=<n> sha256=<hex64> crc32c=<hex8> b64=on width=76
          lines=<n>
      <lines: 76 base64 chars (the last 4..76), " ", parity nibble, LF>
      endch
      ...
      endarr
    [audit <key>=<value> ...]
    endwtxt

Numbers: ``lines = ceil(4*ceil(len/3)/76)``; chunk length ``rows_per_chunk*row_size`` with row
blocking, else 32768 (the tail shorter); ``row_size = prod(shape[1:]) * itemsize``. Raw bytes
are little-endian, C order. Hashes: see ``docs/formats/wtxt.md``.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import TYPE_CHECKING, cast

import numpy as np

from ...core.dtypes import registry
from ...errors import factory
from ._format import DELTA_PREFIX, PREFIX

if TYPE_CHECKING:
    from typing_extensions import Buffer

FMT = "wtxt"
#: This format's errors: ``raise E.format(obj, field=..., ...)`` (:func:`~tenfold.errors.factory`)
E = factory(FMT)
MAGIC = PREFIX + b"1\n"
DELTA_MAGIC = DELTA_PREFIX + b"2 "
WIDTH = 76
DEFAULT_CHUNK = 32768
ZERO64 = "0" * 64
PENDING_NOTE = 'note="finalize with WSUM"'
#: Longest structural (non-base64) line a reader accepts, LF excluded.
MAX_LINE = 65536

#: dtype tag -> NumPy little-endian dtype.
DTYPES: dict[str, np.dtype] = {
    "f64": np.dtype("<f8"),
    "f32": np.dtype("<f4"),
    "i64": np.dtype("<i8"),
    "u64": np.dtype("<u8"),
    "i32": np.dtype("<i4"),
    "u32": np.dtype("<u4"),
    "i16": np.dtype("<i2"),
    "u16": np.dtype("<u2"),
    "i8": np.dtype("i1"),
    "u8": np.dtype("u1"),
}
_CANON = {
    "f64": "float64",
    "f32": "float32",
    "i64": "int64",
    "u64": "uint64",
    "i32": "int32",
    "u32": "uint32",
    "i16": "int16",
    "u16": "uint16",
    "i8": "int8",
    "u8": "uint8",
}
for _tag, _name in _CANON.items():
    registry.register(FMT, _tag, _name)

#: cap items this writer knows, in the order it lists them.
CAP_ORDER = ("crc32c", "line_parity", "arr_hmac", "row_blocking", "sign_all", "wsum")

# -- field value grammar -------------------------------------------------------------------
TOKEN = r"[A-Za-z0-9._:/+\-]+"
NAME = r"[A-Za-z0-9_]+"
HEX64 = r"[0-9a-f]{64}"
HEX16 = r"[0-9a-f]{16}"
HEX8 = r"[0-9a-f]{8}"
DIGS = r"(?:0|[1-9][0-9]{0,19})"  # at most 20 digits: above u64, far below int() limits
SHAPE = DIGS + r"(?:," + DIGS + r")*"
TS = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"
#: Canonical base64 of 64 bytes: the character before ``==`` carries 2 data bits and 4 zero
#: padding bits, so only A, Q, g and w may stand there (RFC 4648 section 3.5).
B64_SIG = r"[A-Za-z0-9+/]{85}[AQgw]=="
AUDIT_KEY = r"[a-z0-9_]+"
QUOTED = r'"[\x20\x21\x23-\x7e]*"'

TOKEN_RE = re.compile(TOKEN)
NAME_RE = re.compile(NAME)
TS_RE = re.compile(TS)
AUDIT_KEY_RE = re.compile(AUDIT_KEY)

META_FIELDS = (
    ("schema", TOKEN),
    ("gen", r"[0-9]{6}"),
    ("ts", TS),
    ("build", TOKEN),
    ("endian", r"LE"),
    ("host", TOKEN),
    ("cuda", TOKEN),
)
CAP_FIELDS = (("ext", r"[a-z0-9_]+(?:,[a-z0-9_]+)*"),)
ROOT_FIELDS = (
    ("sha256_all", HEX64),
    ("merkle_prev", HEX64),
    ("merkle_this", HEX64),
    ("fastxor", HEX16),
)
PENDING_FIELDS = (("sha256_all", "0{64}"), ("note", r'"finalize with WSUM"'))
SIGN_FIELDS = (("ed25519", B64_SIG), ("keyid", HEX16))
ARR_FIELDS = (
    ("name", NAME),
    ("dtype", "|".join(DTYPES)),
    ("shape", SHAPE),
    ("order", "C"),
    ("bytes", DIGS),
    ("sha256", HEX64),
    ("hmac", HEX64),
    ("salt", HEX16),
)
IDX_FIELDS = (("rows_per_chunk", DIGS), ("row_size", DIGS), ("row_blocking", "on|off"))
CH_FIELDS = (
    ("ix", r"[0-9]{6}"),
    ("off", r"[0-9]{12}"),
    ("len", DIGS),
    ("sha256", HEX64),
    ("crc32c", HEX8),
    ("b64", "on"),
    ("width", "76"),
    ("lines", DIGS),
)
DARR_FIELDS = (("name", NAME), ("sha256", HEX64), ("hmac", HEX64), ("salt", HEX16))
WSUM_HEAD = (
    ("sha256_all", HEX64),
    ("merkle_prev", HEX64),
    ("merkle_this", HEX64),
    ("fastxor", HEX16),
)

#: One regular expression for the whole ``ch`` line: the fast path of the parser.
#: ``len`` and ``lines`` have at most 20 digits like every DIGS field, so ``int()`` never meets
#: Python's integer-string limit; a longer number fails the match and ``fields`` names it.
CH_RE = re.compile(
    rb"ch ix=([0-9]{6}) off=([0-9]{12}) len=(0|[1-9][0-9]{0,19}) sha256=([0-9a-f]{64}) "
    rb"crc32c=([0-9a-f]{8}) b64=on width=76 lines=(0|[1-9][0-9]{0,19})"
)
#: Digests of an empty chunk (``len=0``): SHA-256 and CRC-32C of nothing.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
EMPTY_CRC32C = "00000000"


if TYPE_CHECKING:

    def mview(a: np.ndarray) -> memoryview:
        """A ``memoryview`` of a C-contiguous array, without copying."""
        return memoryview(cast("Buffer", a))
else:
    # NumPy's stubs do not declare the buffer protocol on Python 3.11; at run time this is
    # plain ``memoryview`` (no wrapper call on the per-chunk paths).
    mview = memoryview


def b64_canonical(text: str | bytes) -> bytes | None:
    """Decode strict, canonical base64 (RFC 4648 alphabet, ``=`` padding to a multiple of 4,
    zero padding bits); None if ``text`` is anything else.

    >>> b64_canonical("QQ=="), b64_canonical("QR=="), b64_canonical("QQ"), b64_canonical("Q Q=")
    (b'A', None, None, None)
    """
    import binascii

    raw = text.encode("ascii", "replace") if isinstance(text, str) else bytes(text)
    try:
        out = binascii.a2b_base64(raw, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    return out if binascii.b2a_base64(out, newline=False) == raw else None


def b64_lines(nbytes: int) -> int:
    """Number of base64 lines a chunk of ``nbytes`` raw bytes takes.

    >>> b64_lines(4096), b64_lines(32768), b64_lines(65536), b64_lines(0)
    (72, 575, 1150, 0)
    """
    return -(-4 * (-(-nbytes // 3)) // WIDTH)


def row_size(shape: tuple[int, ...], itemsize: int) -> int:
    """``prod(shape[1:]) * itemsize`` (``itemsize`` for 1-D arrays)."""
    return math.prod(shape[1:]) * itemsize


def chunk_length(shape: tuple[int, ...], itemsize: int, rows_per_chunk: int | None) -> int:
    """Raw length of every chunk but the tail."""
    if rows_per_chunk is None:
        return DEFAULT_CHUNK
    return rows_per_chunk * row_size(shape, itemsize)


def chunk_layout(nbytes: int, clen: int) -> list[tuple[int, int]]:
    """``[(off, len), ...]`` of an array's chunks (one empty chunk for an empty array)."""
    if nbytes == 0:
        return [(0, 0)]
    return [(off, min(clen, nbytes - off)) for off in range(0, nbytes, clen)]


def derive_salt(gen: str, name: str) -> bytes:
    """Default salt: the first 8 bytes of SHA-256(``"wtxt-salt" || gen || name``)."""
    return hashlib.sha256(b"wtxt-salt" + gen.encode() + name.encode()).digest()[:8]


def merkle(prev_hex: str, all_hex: str, ts: str, gen: str, build: str) -> str:
    """``SHA-256(bytes(merkle_prev) || bytes(sha256_all) || ts || gen || build)`` as hex."""
    h = hashlib.sha256(bytes.fromhex(prev_hex) + bytes.fromhex(all_hex))
    h.update(ts.encode() + gen.encode() + build.encode())
    return h.hexdigest()


def meta_line(meta: dict[str, str]) -> str:
    return "meta " + " ".join(f"{k}={meta[k]}" for k, _ in META_FIELDS)


def arr_line(
    name: str, tag: str, shape: tuple[int, ...], nbytes: int, sha: str, mac: str, salt: str
) -> str:
    return (
        f"arr name={name} dtype={tag} shape={','.join(map(str, shape))} order=C "
        f"bytes={nbytes} sha256={sha} hmac={mac} salt={salt}"
    )


def ch_line(ix: int, off: int, length: int, sha: str, crc: int) -> str:
    return (
        f"ch ix={ix:06d} off={off:012d} len={length} sha256={sha} crc32c={crc:08x} "
        f"b64=on width=76 lines={b64_lines(length)}"
    )


def root_line(all_hex: str, prev: str, this: str, fastxor: int) -> str:
    return f"root sha256_all={all_hex} merkle_prev={prev} merkle_this={this} fastxor={fastxor:016x}"


PENDING_LINE = f"root_pending sha256_all={ZERO64} {PENDING_NOTE}"

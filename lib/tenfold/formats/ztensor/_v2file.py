"""zTensor v2 file frame: the footer, the manifest blob (bounds, XXH3-64, then
:func:`._v2manifest.decode_manifest`), the lean open's one-read manifest check, and the
digests (``xxh3``, ``sha256``) blobs and shards carry.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from ...core.bounds import Limits
from ...core.buffers import byte_view
from ...core.checksums import sha256_hex, xxh3_64, xxh3_hasher
from ...core.mapped import MappedFile
from ...errors import TenfoldError, TruncatedError
from ._dcbor import MAX_DEPTH, CborReject
from ._v2manifest import decode_manifest, finish_scan, scan_table
from ._v2spec import (
    ALIGN,
    DIGESTS,
    DTYPES,
    FOOTER_SIZE,
    MAGIC,
    MAX_MANIFEST,
    MAX_NAME_BYTES,
    MAX_RANK,
    MIN_FILE,
    VERSION,
    Manifest,
    reject,
)

_VERSION_LE = VERSION.to_bytes(4, "little")
#: bytes read from the end of a file by the lean open: footer and (most) manifests at once
TAIL_READ = 16 << 10


def xxh3_hex(data: object) -> str:
    """XXH3-64 of ``data`` as 16 lowercase hex digits."""
    return f"{xxh3_64(byte_view(data)):016x}"


def digest_hex(algo: str, data: object) -> str:
    if algo == "xxh3":
        return xxh3_hex(data)
    if algo == "sha256":
        return sha256_hex(data)
    raise reject("unsupported", "digest", detail="unknown digest algorithm", got=algo)


def digest_hasher(algo: str) -> Any:
    """A hashlib-style object (``update``, ``hexdigest``) giving :func:`digest_hex`'s value."""
    if algo == "xxh3":
        return xxh3_hasher()
    if algo == "sha256":
        return hashlib.sha256()
    raise reject("unsupported", "digest", detail="unknown digest algorithm", got=algo)


def read_footer(mf: MappedFile) -> tuple[int, int, int, int]:
    """Check size, magic and version; return ``(manifest_offset, length, hash, version)``."""
    size = mf.size
    if size < MIN_FILE:
        raise reject(
            "file-too-small",
            "file",
            offset=0,
            cls=TruncatedError,
            detail=f"truncated: the file has {size} bytes, its magic and footer need at least "
            f"{MIN_FILE}",
        )
    head = mf.magic(MAGIC)
    if head != MAGIC:
        raise reject(
            "header-magic", "file", offset=0, field="magic", expected=MAGIC.hex(), got=head.hex()
        )
    foot = mf.bytes(size - FOOTER_SIZE, FOOTER_SIZE, "footer")
    if foot[32:] != MAGIC and not _footer_in_place(foot, size):
        raise reject(  # the cause, not the symptom: no footer at the end of the file
            "footer-magic",
            "footer",
            offset=size - 8,
            cls=TruncatedError,
            detail=f"truncated: the file has {size} bytes and does not end with its footer "
            f"(magic {MAGIC.hex()}, the last 8 bytes are {foot[32:].hex()})",
        )
    if foot[32:] != MAGIC:
        raise reject(
            "footer-magic",
            "footer",
            offset=size - 8,
            field="magic",
            expected=MAGIC.hex(),
            got=foot[32:].hex(),
        )
    version = int.from_bytes(foot[24:28], "little")
    if version != VERSION:
        raise reject(
            "footer-version",
            "footer",
            offset=size - 16,
            field="version",
            detail="unsupported",
            expected=VERSION,
            got=version,
        )
    return (
        int.from_bytes(foot[0:8], "little"),
        int.from_bytes(foot[8:16], "little"),
        int.from_bytes(foot[16:24], "little"),
        version,
    )


def _footer_in_place(foot: bytes, size: int) -> bool:
    """True when the last 40 bytes hold a plausible footer (version 2, the manifest
    where a manifest can be, or the all-zero pointer of a data shard) whose magic alone is
    wrong: a damaged magic, not a file that ends before its footer."""
    moff, mlen = int.from_bytes(foot[0:8], "little"), int.from_bytes(foot[8:16], "little")
    if foot[24:28] != _VERSION_LE:
        return False
    if moff == mlen == 0:
        return True
    return moff >= ALIGN and moff % ALIGN == 0 and moff + mlen <= size - FOOTER_SIZE


def load_manifest(mf: MappedFile, limits: Limits) -> tuple[Manifest | None, tuple[int, int]]:
    """Footer + manifest checks; ``(None, (0, 0))`` for a data shard."""
    size = mf.size
    moff, mlen, mhash, _ = read_footer(mf)
    if mlen == 0:
        if moff == 0 and mhash == 0:
            return None, (0, 0)
        raise reject(
            "manifest-bounds",
            "footer",
            offset=size - FOOTER_SIZE,
            detail="manifest_length is 0 but offset/hash are not (data shard footer "
            "must be all zero)",
            got=(moff, mhash),
        )
    if mlen > MAX_MANIFEST or mlen > limits.max_index_bytes:
        raise reject(
            "manifest-too-large",
            "manifest",
            offset=moff,
            field="manifest_length",
            detail="above limit",
            expected=f"<= {min(MAX_MANIFEST, limits.max_index_bytes)}",
            got=mlen,
        )
    if moff % ALIGN or moff < ALIGN:
        raise reject(
            "blob-alignment",
            "manifest",
            offset=moff,
            field="manifest_offset",
            detail="not a multiple of 4096 at or after 4096",
            got=moff,
        )
    if moff + mlen > size - FOOTER_SIZE:
        raise reject(
            "manifest-bounds",
            "manifest",
            offset=moff,
            field="manifest blob",
            detail="runs into the footer or past the end of the file",
            expected=f"end <= {size - FOOTER_SIZE}",
            got=moff + mlen,
        )
    raw = mf.bytes(moff, mlen, "manifest")
    got = xxh3_64(raw)
    if got != mhash:
        raise reject(
            "manifest-hash",
            "manifest",
            offset=moff,
            field="XXH3-64",
            expected=f"{mhash:016x}",
            got=f"{got:016x}",
        )
    man = decode_manifest(
        raw, file_size=size, manifest=(moff, mlen), moff=moff, max_objects=limits.max_objects
    )
    return man, (moff, mlen)


def lean_manifest(
    fd: int, size: int, tail: bytes, limits: Limits
) -> tuple[Any, tuple[int, int], Manifest | None] | None:
    """For :meth:`V2Reader.open_fd`: ``(plan table, manifest blob, manifest)`` of a v2 file
    open on ``fd`` whose footer and manifest pass every check, or ``None`` for any other (the
    general path then names the error). ``tail`` is the file's last ``TAIL_READ`` bytes (all
    of it when smaller): the footer, and the manifest when it is that close, as a writer
    puts it; else the manifest takes one ``pread`` more. ``manifest`` is ``None`` when every
    object is a plain dense one in its own blob, in order: then no record is built here."""
    n = len(tail)
    if n != min(size, TAIL_READ):  # the file shrank while it was read
        return None
    foot = tail[-FOOTER_SIZE:]
    moff = int.from_bytes(foot[0:8], "little")
    mlen = int.from_bytes(foot[8:16], "little")
    if (
        foot[32:] != MAGIC
        or foot[24:28] != _VERSION_LE
        or not 0 < mlen <= limits.max_index_bytes
        or mlen > MAX_MANIFEST
        or moff % ALIGN
        or moff < ALIGN
        or moff + mlen > size - FOOTER_SIZE
    ):
        return None
    at = moff - (size - n)
    raw = tail[at : at + mlen] if at >= 0 else os.pread(fd, mlen, moff)
    if len(raw) != mlen or xxh3_64(raw) != int.from_bytes(foot[16:24], "little"):
        return None
    try:
        scan = scan_table(
            raw, MAX_DEPTH, size - FOOTER_SIZE, ALIGN, MAX_RANK, MAX_NAME_BYTES, DTYPES, DIGESTS
        )
    except CborReject:
        return None
    if scan is None:
        return None
    table, others, rest, in_order, lo, hi = scan
    blob = (moff, mlen)
    if others or rest or not (in_order and (lo < 0 or moff >= hi or moff + mlen <= lo)):
        try:
            man = finish_scan(
                scan, file_size=size, manifest=blob, moff=moff, max_objects=limits.max_objects
            )
        except TenfoldError:
            return None
        return table, blob, man
    if len(table.index) > limits.max_objects:
        return None
    return table, blob, None

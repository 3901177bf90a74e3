"""The zip directory of a zip-layout checkpoint, every member checked before it is used.

:mod:`zipfile` reads the central directory (ZIP64 included) through a file object over the
mapped file; then each member's local header is read here, its name compared with the
directory's, and its data range (``offset``, ``compress_size``) checked to lie in the file, so
that a stored member becomes a view of the map with no further check. A member is stored
(``torch.save`` writes every member so, each one's data aligned to 64 bytes) or deflated (a
checkpoint re-zipped by another tool: decompressed into owned memory, bounded and charged to
the caller's budget, its CRC-32 checked). Encrypted members, other compression methods and
names that appear twice are refused.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from typing import Any, NamedTuple

import numpy as np

from ...core.bounds import Budget, Limits
from ...core.buffers import SourceIO
from ...core.checksums import crc32
from ...errors import TenfoldError, factory
from ._format import FMT, ZIP_LOCAL

__all__ = ["Member", "members", "member_bytes", "crc_of"]

E = factory(FMT)

_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError,
           NotImplementedError, OverflowError, struct.error)  # fmt: skip


class Member(NamedTuple):
    """One zip member: where its data starts in the file and how it is stored."""

    name: str
    offset: int  # of its data in the file
    size: int  # uncompressed
    compressed_size: int
    deflated: bool
    crc: int
    header_offset: int


def members(mf: Any, what: str, limits: Limits) -> dict[str, Member]:
    """Every member of the zip in ``mf`` by name, each checked (see the module doc)."""
    try:
        with zipfile.ZipFile(io.BufferedReader(SourceIO(mf, "zip directory"), 1 << 16)) as z:
            infos = z.infolist()
    except TenfoldError:
        raise
    except _ERRORS as exc:
        raise E.format(what, detail=f"not a readable zip: {exc}") from None
    if len(infos) > limits.max_objects:
        raise E.limit(what, field="zip members", expected=f"<= {limits.max_objects}",
                      got=len(infos))  # fmt: skip
    out: dict[str, Member] = {}
    for zi in infos:
        if zi.filename in out:
            raise E.format(f"member {zi.filename!r}", offset=zi.header_offset,
                           detail="appears twice in the zip directory")  # fmt: skip
        out[zi.filename] = _checked(mf, zi)
    return out


def _checked(mf: Any, zi: zipfile.ZipInfo) -> Member:
    where = f"member {zi.filename!r}"
    at = zi.header_offset
    if zi.flag_bits & 0x1:
        raise E.unsupported(where, offset=at, detail="encrypted")
    if zi.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise E.unsupported(where, offset=at, field="compression method",
                            expected="stored or deflated", got=zi.compress_type)  # fmt: skip
    if zi.compress_type == zipfile.ZIP_STORED and zi.file_size != zi.compress_size:
        raise E.format(where, offset=at, field="size", detail="a stored member's two sizes differ",
                       expected=zi.file_size, got=zi.compress_size)  # fmt: skip
    encoding = "utf-8" if zi.flag_bits & 0x800 else "cp437"
    want = zi.orig_filename.encode(encoding, "replace")
    span = min(30 + len(want), mf.size - at)
    head = mf.bytes(at, span, f"{where} local header") if span > 0 else b""  # one read
    if head[:4] != ZIP_LOCAL or len(head) < 30:
        if len(head) < 30:
            raise E.truncated(where, offset=at, detail="the file ends inside its local header")
        raise E.format(where, offset=at, field="local header signature",
                       expected=ZIP_LOCAL, got=head[:4])  # fmt: skip
    n = int.from_bytes(head[26:28], "little")
    extra = int.from_bytes(head[28:30], "little")
    if n != len(want) or head[30:] != want:
        got = head[30 : 30 + n].decode(encoding, "replace")
        raise E.format(where, offset=at, field="local header name",
                       expected=zi.orig_filename, got=got)  # fmt: skip
    start = at + 30 + n + extra
    if start + zi.compress_size > mf.size:
        raise E.truncated(
            where,
            offset=start,
            detail=f"truncated: the file has {mf.size} bytes, the member's data needs "
            f"{start + zi.compress_size}",
        )
    return Member(zi.filename, start, zi.file_size, zi.compress_size,
                  zi.compress_type == zipfile.ZIP_DEFLATED, zi.CRC, at)  # fmt: skip


def member_bytes(mf: Any, m: Member, budget: Budget, limit: int) -> np.ndarray:
    """The data of ``m`` as a read-only ``uint8`` array: a view of the map when stored, else
    decompressed into owned memory (at most ``limit`` bytes, charged to ``budget``; CRC-32
    checked)."""
    where = f"member {m.name!r}"
    if not m.deflated:
        return mf.u8(m.offset, m.size, where)  # type: ignore[no-any-return]
    if m.size > limit:
        raise E.limit(where, offset=m.offset, field="size", expected=f"<= {limit}", got=m.size)
    budget.take(m.size, FMT, where, offset=m.offset)
    d = zlib.decompressobj(-15)
    out = bytearray()
    step = 1 << 20
    try:
        for i in range(0, m.compressed_size, step):
            out += d.decompress(mf.bytes(m.offset + i, min(step, m.compressed_size - i), where),
                                m.size + 1 - len(out))  # fmt: skip
            if len(out) > m.size:
                break
        out += d.flush()
    except zlib.error as exc:
        raise E.format(where, offset=m.offset, detail=f"deflate stream: {exc}") from None
    if len(out) != m.size:
        raise E.format(where, offset=m.offset, field="inflated size", expected=m.size,
                       got=len(out) if len(out) <= m.size else f"more than {m.size}")  # fmt: skip
    got = crc32(out)
    if got != m.crc:
        raise E.integrity(where, offset=m.offset, field="crc32", expected=f"{m.crc:08x}",
                          got=f"{got:08x}")  # fmt: skip
    arr = np.frombuffer(out, np.uint8)
    arr.flags.writeable = False
    return arr


def crc_of(mf: Any, m: Member) -> int:
    """The CRC-32 of the stored data of ``m`` (of its inflated bytes when deflated)."""
    if m.deflated:
        return crc32(member_bytes(mf, m, Budget(m.size), m.size))
    crc = 0
    step = 1 << 24
    for i in range(0, m.size, step):
        crc = crc32(mf.u8(m.offset + i, min(step, m.size - i), f"member {m.name!r}"), crc)
    return crc

"""The ``zt.zstd-seekable/1`` encoding: independent zstd frames plus a seek table.

Encoded bytes: frame 1, ..., frame n (each with a content checksum, decoded size <= 16 MiB,
every frame but the last of the same decoded size), then a zstd skippable frame (magic
``0x184D2A5E``) holding one entry per frame (compressed u32, decoded u32) and a 9-byte footer
(frame count u32, descriptor u8, magic ``0x8F92EAB1``).

Decoding checks the whole table against the blob length and ``decoded_length`` before writing
a byte, then decodes each frame into its slice of the output with an exact size bound
(:func:`decode_pieces`, for verifiers, decodes in pieces through one reused buffer instead).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import zstandard

from ...core.buffers import byte_view
from ...core.compression import ZSTD_MAGIC, zstd_decode_pieces, zstd_decompress_into
from ._v2spec import reject

__all__ = ["decode_into", "decode_pieces", "encode", "FRAME_SIZE"]

SKIPPABLE_MAGIC = 0x184D2A5E
SEEK_MAGIC = 0x8F92EAB1
MAX_FRAME = 16 << 20
#: Decoded bytes per frame tenfold writes.
FRAME_SIZE = 1 << 20


def _table(
    src: memoryview, decoded: int, what: str, offset: int, size: int | None = None
) -> list[tuple[int, int]]:
    """The frames ``(compressed, decoded)`` of a blob of ``size`` bytes (default: all of
    ``src``) whose last ``src.nbytes`` bytes ``src`` holds (at least its seek table)."""
    n = src.nbytes if size is None else size
    src = _Shifted(src, n - src.nbytes)  # type: ignore[assignment]
    if n < 17:
        raise reject(
            "encoding-data", what, offset=offset, detail="zstd-seekable: no seek table", got=n
        )
    foot = bytes(src[n - 9 :])
    count = int.from_bytes(foot[:4], "little")
    desc = foot[4]
    magic = int.from_bytes(foot[5:], "little")
    if magic != SEEK_MAGIC or desc & 0x7C:
        raise reject(
            "encoding-data",
            what,
            offset=offset + n - 9,
            detail="zstd-seekable: bad seek table footer",
            got=foot.hex(),
        )
    esz = 12 if desc & 0x80 else 8
    body = count * esz + 9
    if body + 8 > n:
        raise reject(
            "encoding-data",
            what,
            offset=offset,
            detail="zstd-seekable: seek table larger than the blob",
            got=count,
        )
    start = n - body - 8
    head = bytes(src[start : start + 8])
    if (
        int.from_bytes(head[:4], "little") != SKIPPABLE_MAGIC
        or int.from_bytes(head[4:], "little") != body
    ):
        raise reject(
            "encoding-data",
            what,
            offset=offset + start,
            detail="zstd-seekable: bad skippable frame header",
            got=head.hex(),
        )
    entries = np.frombuffer(src[start + 8 : start + 8 + count * esz], dtype="<u4")
    entries = entries.reshape(count, esz // 4)[:, :2].astype(np.int64)
    csum = int(entries[:, 0].sum()) if count else 0
    dsum = int(entries[:, 1].sum()) if count else 0
    if csum != start or dsum != decoded:
        raise reject(
            "encoding-data",
            what,
            offset=offset,
            detail="zstd-seekable: seek table does not add up",
            expected=(start, decoded),
            got=(csum, dsum),
        )
    sizes = entries[:, 1]
    if count and (int(sizes.max()) > MAX_FRAME or (count > 1 and np.any(sizes[:-1] != sizes[0]))):
        raise reject(
            "encoding-data",
            what,
            offset=offset,
            detail="zstd-seekable: frames must be <= 16 MiB, equal but the last",
        )
    return [(int(c), int(d)) for c, d in entries]


class _Shifted:
    """Index a tail ``view`` of a blob with offsets into the whole blob."""

    def __init__(self, view: memoryview, shift: int) -> None:
        self.view, self.shift = view, shift
        self.nbytes = view.nbytes + shift

    def __getitem__(self, k: slice) -> memoryview:
        start = (k.start or 0) - self.shift
        stop = None if k.stop is None else k.stop - self.shift
        if start < 0:
            raise reject(
                "encoding-data", "seek table", detail="zstd-seekable: table outside the blob"
            )
        return self.view[start:stop]


def table_size(foot: bytes, blob_len: int, what: str, offset: int) -> int:
    """Bytes at the end of a blob of ``blob_len`` bytes that hold its seek table, from the
    blob's last 9 bytes ``foot`` (checked again, in full, by :func:`decode_range`)."""
    if blob_len < 17 or len(foot) != 9:
        raise reject(
            "encoding-data",
            what,
            offset=offset,
            detail="zstd-seekable: no seek table",
            got=blob_len,
        )
    count = int.from_bytes(foot[:4], "little")
    esz = 12 if foot[4] & 0x80 else 8
    return min(blob_len, count * esz + 9 + 8)


def decode_range(
    read: Any, blob_len: int, decoded: int, lo: int, hi: int, *, what: str, offset: int
) -> np.ndarray:
    """Decoded bytes ``[lo, hi)`` of a seekable blob, decoding only the frames that hold them.

    ``read(pos, n)`` returns ``n`` stored bytes at ``pos`` in the blob: it is called once for
    the footer, once for the seek table and once for the run of frames needed.
    """
    tail = table_size(bytes(read(blob_len - 9, 9)), blob_len, what, offset)
    frames = _table(byte_view(read(blob_len - tail, tail)), decoded, what, offset, blob_len)
    out = np.empty(max(hi - lo, 0), np.uint8)
    if hi <= lo:
        return out
    cpos = dpos = 0
    first = None
    wanted: list[tuple[int, int, int, int]] = []
    for csize, dsize in frames:
        if dpos + dsize > lo and dpos < hi:
            if first is None:
                first = cpos
            wanted.append((cpos, csize, dpos, dsize))
        cpos += csize
        dpos += dsize
    assert first is not None
    last = wanted[-1]
    run = byte_view(read(first, last[0] + last[1] - first))
    buf = np.empty(sum(w[3] for w in wanted), np.uint8)
    pos = 0
    for c0, csize, _d0, dsize in wanted:
        frame = run[c0 - first : c0 - first + csize]
        if csize < 5 or bytes(frame[:4]) != ZSTD_MAGIC or not frame[4] & 0x04:
            raise reject(
                "encoding-data",
                what,
                offset=offset + c0,
                detail="zstd-seekable: frame without a content checksum",
            )
        zstd_decompress_into(frame, buf[pos : pos + dsize], fmt="zt", what=what, offset=offset + c0)
        pos += dsize
    d_first = wanted[0][2]
    out[:] = buf[lo - d_first : hi - d_first]
    return out


def _frames(
    src: memoryview, decoded: int, what: str, offset: int
) -> Iterator[tuple[int, int, int]]:
    """``(stored offset, stored size, decoded size)`` of each frame, its checksum flag checked
    (the whole table is checked first)."""
    cpos = 0
    for csize, dsize in _table(src, decoded, what, offset):
        frame = src[cpos : cpos + csize]
        if csize < 5 or bytes(frame[:4]) != ZSTD_MAGIC or not frame[4] & 0x04:
            raise reject(
                "encoding-data",
                what,
                offset=offset + cpos,
                detail="zstd-seekable: frame without a content checksum",
            )
        yield cpos, csize, dsize
        cpos += csize


def decode_into(src: object, out: np.ndarray, *, what: str, offset: int) -> None:
    """Decode the seekable stream ``src`` into ``out`` (filled exactly)."""
    mv = byte_view(src)
    dst = out.reshape(-1).view(np.uint8)
    dpos = 0
    for cpos, csize, dsize in _frames(mv, dst.nbytes, what, offset):
        zstd_decompress_into(
            mv[cpos : cpos + csize],
            dst[dpos : dpos + dsize],
            fmt="zt",
            what=what,
            offset=offset + cpos,
        )
        dpos += dsize


def decode_pieces(src: object, decoded: int, *, what: str, offset: int) -> Iterator[np.ndarray]:
    """The seekable stream ``src`` (``decoded`` bytes) decoded in pieces, with the checks of
    :func:`decode_into`; each piece is valid until the next (see
    :func:`~tenfold.core.compression.zstd_decode_pieces`), so nothing is kept."""
    mv = byte_view(src)
    for cpos, csize, dsize in _frames(mv, decoded, what, offset):
        yield from zstd_decode_pieces(
            mv[cpos : cpos + csize], dsize, fmt="zt", what=what, offset=offset + cpos
        )


def encode(data: object, level: int = 3, frame_size: int = FRAME_SIZE) -> bytes:
    """Encode ``data`` as frames of ``frame_size`` decoded bytes plus the seek table."""
    mv = byte_view(data)
    n = mv.nbytes
    cctx = zstandard.ZstdCompressor(level=level, write_content_size=False, write_checksum=True)
    pieces: list[bytes] = []
    entries = bytearray()
    for pos in range(0, n, frame_size):
        chunk = mv[pos : pos + frame_size]
        co = cctx.compressobj()
        frame = co.compress(chunk) + co.flush()
        pieces.append(frame)
        entries += len(frame).to_bytes(4, "little") + chunk.nbytes.to_bytes(4, "little")
    count = len(pieces)
    body = bytes(entries) + count.to_bytes(4, "little") + b"\x00" + SEEK_MAGIC.to_bytes(4, "little")
    pieces.append(SKIPPABLE_MAGIC.to_bytes(4, "little") + len(body).to_bytes(4, "little") + body)
    return b"".join(pieces)

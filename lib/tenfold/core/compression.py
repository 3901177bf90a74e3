"""zstd: compress to one frame, decompress into a caller's buffer with a hard output bound.

Decompression never trusts a frame's header: it decodes in streaming mode straight into the
preallocated output (no intermediate ``bytes``) and fails when the stream would produce more or
fewer bytes than expected, so a decompression bomb costs at most the expected size.
:func:`zstd_decode_pieces` decodes in pieces of a fixed size through one reused buffer, for
verifiers, which keep nothing: their memory does not grow with the decoded size.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import zstandard

from ..errors import FormatError, IntegrityError
from .alloc import empty
from .bounds import check_limit
from .buffers import byte_view

__all__ = [
    "zstd_compress",
    "zstd_decompress_into",
    "zstd_decompress",
    "zstd_decode_pieces",
    "zstd_content_size",
    "ZSTD_MAGIC",
]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Decoded bytes per piece of :func:`zstd_decode_pieces`.
PIECE = 1 << 20


def zstd_compress(
    data: object, level: int = 3, *, threads: int = 0, checksum: bool = True
) -> bytes:
    """Compress ``data`` into one zstd frame that records its content size.

    With ``checksum`` (default) the frame also carries zstd's own content checksum (4 bytes), so
    damage inside the compressed data is detected on decode even without a format checksum.
    Deterministic for a given ``level`` and ``threads``.
    """
    cctx = zstandard.ZstdCompressor(
        level=level, write_content_size=True, write_checksum=checksum, threads=threads
    )
    return cctx.compress(byte_view(data))


def zstd_content_size(src: object) -> int | None:
    """The content size a zstd frame header declares, or None (absent or unreadable)."""
    mv = byte_view(src)
    if mv.nbytes < 4 or bytes(mv[:4]) != ZSTD_MAGIC:
        return None
    try:
        n = zstandard.frame_content_size(mv)
    except zstandard.ZstdError:
        return None
    return n if n >= 0 else None


def zstd_decompress_into(
    src: object, out: object, *, fmt: str = "zstd", what: str = "payload", offset: int = 0
) -> None:
    """Decode the zstd stream ``src`` into ``out``, which must be filled exactly.

    Frames with or without a content size are accepted; several concatenated frames are
    decoded in turn. Raises :class:`IntegrityError` when the stream decodes to a different size
    or is corrupt, and :class:`FormatError` when it is not zstd at all.
    """
    out_mv = byte_view(out)
    if out_mv.readonly:
        raise ValueError(f"{fmt}: {what}: output buffer is read-only")
    expected = out_mv.nbytes
    src_mv = _checked_head(src, expected, fmt, what, offset)
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(src_mv, read_across_frames=True)
        got = 0
        while got < expected:
            n = reader.readinto(out_mv[got:])
            if n == 0:
                break
            got += n
        extra = reader.read(1) if got == expected else b""
    except zstandard.ZstdError as exc:
        raise IntegrityError(
            fmt=fmt, obj=what, offset=offset, detail=f"corrupt zstd data: {exc}"
        ) from None
    _check_total(got, expected, bool(extra), fmt, what, offset)


def zstd_decode_pieces(
    src: object,
    expected: int,
    *,
    fmt: str = "zstd",
    what: str = "payload",
    offset: int = 0,
    piece: int = PIECE,
) -> Iterator[np.ndarray]:
    """Decode the zstd stream ``src`` of ``expected`` decoded bytes in pieces, keeping none.

    Yields read-only ``uint8`` views of one reused buffer of ``min(piece, expected)`` bytes:
    each is valid until the next is asked for (hash or check it, do not keep it). Memory stays
    at that buffer and zstd's window, whatever the decoded size. The checks are those of
    :func:`zstd_decompress_into`, made as the stream goes: the decode stops with
    :class:`IntegrityError` as soon as it would pass ``expected`` (never decoding more than
    one byte beyond it), and at its end when it decoded fewer.
    """
    src_mv = _checked_head(src, expected, fmt, what, offset)
    buf = np.empty(max(1, min(piece, expected)), np.uint8)
    ro = buf.view()
    ro.flags.writeable = False
    got = 0
    extra = b""
    try:
        with zstandard.ZstdDecompressor().stream_reader(src_mv, read_across_frames=True) as rd:
            while got < expected:
                n = rd.readinto(buf[: min(buf.size, expected - got)])
                if n == 0:
                    break
                got += n
                yield ro[:n]
            if got == expected:
                extra = rd.read(1)
    except zstandard.ZstdError as exc:
        raise IntegrityError(
            fmt=fmt, obj=what, offset=offset, detail=f"corrupt zstd data: {exc}"
        ) from None
    _check_total(got, expected, bool(extra), fmt, what, offset)


def _checked_head(src: object, expected: int, fmt: str, what: str, offset: int) -> memoryview:
    """``src`` as bytes after its magic and declared content size (if any) are checked."""
    src_mv = byte_view(src)
    if src_mv.nbytes < 4 or bytes(src_mv[:4]) != ZSTD_MAGIC:
        raise FormatError(
            fmt=fmt,
            obj=what,
            offset=offset,
            field="zstd magic",
            detail="not a zstd frame",
            expected=ZSTD_MAGIC.hex(),
            got=bytes(src_mv[:4]).hex(),
        )
    try:
        declared = zstandard.frame_content_size(src_mv)
    except zstandard.ZstdError as exc:
        raise FormatError(
            fmt=fmt, obj=what, offset=offset, detail=f"bad zstd frame header: {exc}"
        ) from None
    if declared >= 0 and declared != expected:
        raise IntegrityError(
            fmt=fmt,
            obj=what,
            offset=offset,
            field="zstd content size",
            expected=expected,
            got=declared,
        )
    return src_mv


def _check_total(got: int, expected: int, extra: bool, fmt: str, what: str, offset: int) -> None:
    if got != expected or extra:
        raise IntegrityError(
            fmt=fmt,
            obj=what,
            offset=offset,
            field="decoded size",
            expected=expected,
            got=f"more than {expected}" if extra else got,
        )


def zstd_decompress(
    src: object,
    expected: int,
    *,
    limit: int,
    fmt: str = "zstd",
    what: str = "payload",
    offset: int = 0,
) -> np.ndarray:
    """Decode into a fresh ``uint8`` array of ``expected`` bytes (bounded by ``limit``)."""
    check_limit(fmt, what, expected, limit, field="decoded size", offset=offset)
    out = empty(expected, np.uint8, fmt=fmt, what=what, offset=offset)
    zstd_decompress_into(src, out, fmt=fmt, what=what, offset=offset)
    return out

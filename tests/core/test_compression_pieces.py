"""Issue 21: ``zstd_decode_pieces``, the bounded-memory decode verifiers use: the same answers
and errors as ``zstd_decompress_into``, in pieces of a fixed size, stopping at once when the
stream would pass the expected size."""

from __future__ import annotations

import numpy as np
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from tenfold.core.compression import zstd_decode_pieces, zstd_decompress_into
from tenfold.errors import FormatError, IntegrityError


def _collect(src, expected, piece=1 << 20):
    out, sizes = [], []
    for p in zstd_decode_pieces(src, expected, piece=piece):
        assert p.dtype == np.uint8 and not p.flags.writeable
        sizes.append(p.size)
        out.append(p.tobytes())
    return b"".join(out), sizes


def _outcome(fn):
    try:
        fn()
        return "ok", ""
    except Exception as exc:
        return type(exc).__name__, str(exc)


@given(
    data=st.binary(max_size=5000),
    piece=st.integers(1, 700),
    frames=st.integers(1, 3),
    content_size=st.booleans(),
    delta=st.sampled_from([0, 0, -1, 1, 7]),
)
def test_pieces_match_decompress_into(data, piece, frames, content_size, delta):
    """Same bytes (joined) and same error (class and message) as the one-buffer decode, for
    concatenated frames with or without a content size and for a wrong expected size; no
    piece is larger than ``piece``."""
    cctx = zstandard.ZstdCompressor(write_content_size=content_size)
    src = b"".join(cctx.compress(data) for _ in range(frames))
    total = len(data) * frames
    expected = max(0, total + delta)
    out = np.empty(expected, np.uint8)
    want = _outcome(lambda: zstd_decompress_into(src, out))
    got = _outcome(lambda: _collect(src, expected, piece))
    assert got == want
    if want[0] == "ok":
        joined, sizes = _collect(src, expected, piece)
        assert joined == data * frames and all(0 < s <= piece for s in sizes)


def test_stops_as_soon_as_the_stream_passes_the_expected_size():
    """A frame of 1 GiB of zeros (no content size) checked against 100 bytes: 100 bytes are
    handed out, then the error; the decode goes no further than one byte beyond."""
    co = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    z = bytes(1 << 20)
    frame = b"".join(co.compress(z) for _ in range(1024)) + co.flush()
    seen = 0
    with pytest.raises(IntegrityError, match="decoded size mismatch; expected 100, got more than"):
        for p in zstd_decode_pieces(frame, 100, piece=64):
            seen += p.size
    assert seen == 100


def test_short_corrupt_and_not_zstd():
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(300))
    with pytest.raises(IntegrityError, match="expected 400, got 300"):
        _collect(frame, 400, 128)
    data = np.arange(4096, dtype=np.int32).tobytes()
    bad = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(data))
    bad[len(bad) // 2] ^= 0xFF
    want = _outcome(lambda: zstd_decompress_into(bytes(bad), np.empty(len(data), np.uint8)))
    assert want[0] == "IntegrityError"
    assert _outcome(lambda: _collect(bytes(bad), len(data))) == want
    with pytest.raises(FormatError, match="zstd magic"):
        _collect(b"not zstd at all", 10)
    # a declared content size that differs is refused before anything is decoded
    sized = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(32))
    it = zstd_decode_pieces(sized, 24, what="tensor 'x'", fmt="zt", offset=64)
    with pytest.raises(IntegrityError, match="zt: tensor 'x' at offset 0x40: zstd content size"):
        next(it)


def test_empty_payload():
    frame = zstandard.ZstdCompressor().compress(b"")
    assert _collect(frame, 0) == (b"", [])
    with pytest.raises(IntegrityError, match="expected 0, got more than 0"):
        _collect(zstandard.ZstdCompressor(write_content_size=False).compress(b"x"), 0)


def test_one_buffer_reused():
    """The pieces are views of one buffer (nothing kept, nothing allocated per piece)."""
    data = np.random.default_rng(1).integers(0, 255, 10_000, dtype=np.uint8).tobytes()
    frame = zstandard.ZstdCompressor().compress(data)
    bases = {id(p.base) for p in zstd_decode_pieces(frame, len(data), piece=1000)}
    assert len(bases) == 1

"""``reader[name]`` decodes an array again after the verifying open: it compares each chunk
with the SHA-256 digest the open verified, so text changed after open is refused, naming the
line, and an unchanged file reads back exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tenfold import wtxt
from tenfold.errors import FormatError, IntegrityError


def _pair(tmp_path):
    """Two files of the same layout (3 chunks of 32 KiB in ``w``) differing in chunk 1 only."""
    a, b = tmp_path / "a.wtxt", tmp_path / "b.wtxt"
    w = np.arange(3 * 8192, dtype=np.float32)
    w2 = w.copy()
    w2[8192 + 5] = -1.0  # chunk 000001
    wtxt.save(a, {"v": np.arange(5, dtype=np.int8), "w": w})
    wtxt.save(b, {"v": np.arange(5, dtype=np.int8), "w": w2})
    return a, b, w


def _body(text: bytes, ix: int) -> tuple[int, int, int]:
    """``(start, end, line)`` of the base64 lines of array ``w``'s chunk ``ix`` and the line
    number of its ``ch`` line."""
    ch = text.index(b"ch ix=%06d" % ix, text.index(b"arr name=w "))
    start = text.index(b"\n", ch) + 1
    return start, text.index(b"endch\n", start), text.count(b"\n", 0, ch) + 1


def test_unchanged_file_rereads_exactly(tmp_path):
    a, _, w = _pair(tmp_path)
    with wtxt.open(a) as f:
        for _ in range(2):
            got = f["w"]
            assert got.tobytes() == w.tobytes() and got.flags.writeable
        assert f["v"].tolist() == [0, 1, 2, 3, 4]


def test_a_chunk_changed_after_open_names_its_ch_line(tmp_path):
    a, b, _ = _pair(tmp_path)
    text_a, text_b = a.read_bytes(), b.read_bytes()
    start, end, line = _body(text_a, 1)
    assert _body(text_b, 1)[:2] == (start, end) and text_a[start:end] != text_b[start:end]
    with wtxt.open(a) as f:
        # only the base64 lines of chunk 1 change: framing and parity stay valid, the ch
        # line (with the digests the open verified) stays as it was
        with open(a, "r+b") as fh:  # rewritten in place: the map sees the new bytes
            fh.seek(start)
            fh.write(text_b[start:end])
        with pytest.raises(IntegrityError, match=rf"wtxt: line {line} .*chunk sha256 mismatch"):
            f["w"]
        assert f["v"].tolist() == [0, 1, 2, 3, 4]  # the other array is untouched


def test_framing_broken_after_open_is_the_first_pass_error(tmp_path):
    a, _, _ = _pair(tmp_path)
    text = a.read_bytes()
    start, _, line = _body(text, 0)
    nibble = start + 77  # the first base64 line's parity digit
    flipped = b"0" if text[nibble : nibble + 1] != b"0" else b"1"
    with wtxt.open(a) as f:
        with open(a, "r+b") as fh:
            fh.seek(nibble)
            fh.write(flipped)
        with pytest.raises(FormatError, match=rf"wtxt: line {line + 1} .*parity nibble mismatch"):
            f["w"]

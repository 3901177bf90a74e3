"""The b64lines kernel family: known answers, error codes, differential compiled vs reference."""

import base64

import numpy as np
import pytest
from _kernels_isolated import differential, outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels

M = 2**63 - 1


def frame(k, b64: bytes, width: int = 76) -> bytes:
    out = np.zeros(k.framed_size(len(b64), width), np.uint8)
    n = k.frame_lines(b64, out, width)
    assert n == out.size
    return out.tobytes()


def unframe(k, text: bytes, nlines: int, width: int = 76):
    out = np.zeros(max(nlines * width, 1), np.uint8)
    st_, line, pos = k.unframe_lines(text, nlines, out, width)
    return st_, line, pos, out


@pytest.mark.parametrize(
    "raw_hex, framed",
    [
        ("", b""),
        ("00", b"AA== 0\n"),
        ("616263", b"YWJj 6\n"),
    ],
)
def test_frame_known(kernels, raw_hex, framed):
    k = kernels("b64lines")
    b64 = base64.b64encode(bytes.fromhex(raw_hex))
    got = frame(k, b64)
    if framed:
        par = 0
        for c in b64:
            par ^= c
        assert got == b64 + b" " + b"%x" % (par & 15) + b"\n"
    else:
        assert got == b""


@pytest.mark.parametrize(
    "nraw, lines, last_width",
    [
        (57, 1, 76),
        (58, 2, 4),
        (4096, 72, 4096 * 4 // 3 + 4 - 76 * 71 - (4096 * 4 // 3 + 4) % 4),
        (32768, 575, 68),
        (65536, 1150, 60),
    ],
)
def test_frame_line_counts(kernels, nraw, lines, last_width):
    k = kernels("b64lines")
    b64 = base64.b64encode(bytes(range(256)) * (nraw // 256) + bytes(nraw % 256))
    text = frame(k, b64)
    rows = text.split(b"\n")[:-1]
    assert len(rows) == lines
    assert all(len(r) == 78 for r in rows[:-1])
    assert len(rows[-1]) - 2 == len(b64) - 76 * (lines - 1)
    st_, line, pos, out = unframe(k, text, lines)
    assert (st_, line, pos) == (k.OK, lines, len(text))
    assert out[: len(b64)].tobytes() == b64


def test_frame_known_hex(kernels):
    k = kernels("b64lines")
    # 'QUJD' = 0x51^0x55^0x4a^0x44 = 0x0a -> 'a'
    assert frame(k, b"QUJD") == b"QUJD a\n"
    assert frame(k, b"QUJDRA==") == b"QUJDRA== %x\n" % ((0x0A ^ 0x52 ^ 0x41 ^ 0x3D ^ 0x3D) & 15)


@pytest.mark.parametrize(
    "text, nlines, status, line, pos",
    [
        (b"QUJD a\n", 1, "OK", 1, 7),
        (b"QUJD b\n", 1, "ERR_PARITY", 0, 5),
        (b"QUJD A\n", 1, "ERR_NIBBLE", 0, 5),
        (b"QUJD a\r\n", 1, "ERR_EOL", 0, 6),
        (b"QUJD a \n", 1, "ERR_EOL", 0, 6),
        (b"QUJD\ta\n", 1, "ERR_CHAR", 0, 4),
        (b"QUJ e\n", 1, "ERR_WIDTH", 0, 3),
        (b"QUJD\n", 1, "ERR_SEP", 0, 4),
        (b"QUJD a", 1, "ERR_TRUNCATED", 0, 6),
        (b"QU", 1, "ERR_TRUNCATED", 0, 2),
        (b"QR== %b\n", 1, "ERR_PADBITS", 0, 1),
        (b"QUJ= %b\n", 1, "ERR_PADBITS", 0, 2),
        (b"QQ== %b\n", 1, "OK", 1, 7),
        (b"Q=== %b\n", 1, "ERR_CHAR", 0, 3),
        (b"QUJD a\nQUJD a\n", 1, "OK", 1, 7),
        (b"QUJD a\nQUJD a\n", 2, "ERR_WIDTH", 0, 4),
        (b"QU\xc3JD e\n", 1, "ERR_CHAR", 0, 2),
    ],
)
def test_unframe_errors(kernels, text, nlines, status, line, pos):
    k = kernels("b64lines")
    if b"%b" in text:
        par = 0
        for c in text.split(b" ")[0]:
            par ^= c
        text = text.replace(b"%b", b"%x" % (par & 15))
    st_, ln, p, _ = unframe(k, text, nlines)
    assert (st_, ln, p) == (getattr(k, status), line, pos)


def test_unframe_width_param(kernels):
    k = kernels("b64lines")
    text = frame(k, b"QUJDQUJDQUJD", 4)
    assert text.count(b"\n") == 3
    st_, line, pos, out = unframe(k, text, 3, 4)
    assert st_ == k.OK and out[:12].tobytes() == b"QUJDQUJDQUJD"
    # a padded quantum in a middle line is a bad character
    bad = frame(k, b"QQ==", 4) + frame(k, b"QUJD", 4)
    assert unframe(k, bad, 2, 4)[:2] == (k.ERR_CHAR, 0)


def test_kernel_argument_checks(kernels):
    k = kernels("b64lines")
    with pytest.raises(ValueError):
        k.frame_lines(b"QUJD", np.zeros(6, np.uint8))
    with pytest.raises(ValueError):
        k.unframe_lines(b"QUJD a\n", 2, np.zeros(76, np.uint8))
    with pytest.raises(ValueError):
        k.framed_size(-1)
    ro = np.frombuffer(b"QUJD a\n", np.uint8)
    assert k.unframe_lines(ro, 1, np.zeros(76, np.uint8))[0] == k.OK


def _mutations():
    return st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3)


@given(st.binary(max_size=400), st.integers(1, 80), _mutations(), st.integers(-1, 2))
def test_b64lines_differential(raw, width, muts, dlines):
    if _kernels.pure_python():
        pytest.skip("compiled kernels disabled by TENFOLD_PUREPYTHON")
    comp = _kernels.load("b64lines", "compiled")
    ref = _kernels.load("b64lines", "reference")
    b64 = base64.b64encode(raw)
    width = width * 4 if width * 4 <= 76 else 76
    a, b = frame(comp, b64, width), frame(ref, b64, width)
    assert a == b
    text = bytearray(a)
    for pos, val in muts:
        if text:
            text[pos % len(text)] = val
    nlines = max(0, a.count(b"\n") + dlines)
    ra, rb = unframe(comp, bytes(text), nlines, width), unframe(ref, bytes(text), nlines, width)
    assert ra[:3] == rb[:3]
    if ra[0] == comp.OK:
        n = ra[2] - 3 * nlines
        assert ra[3][:n].tobytes() == rb[3][:n].tobytes()
        if not muts and dlines == 0:
            assert ra[3][:n].tobytes() == b64


@pytest.mark.parametrize("nraw", [0, 1, 57, 58, 4096, 32768])
def test_frame_block_matches_frame_lines(kernels, nraw):
    k = kernels("b64lines")
    b64 = base64.b64encode(bytes(range(256)) * (nraw // 256) + bytes(nraw % 256))
    out = np.full(7 + len(b64) + len(b64) // 20 + 40, 0xEE, np.uint8)
    end = k.frame_block(b"ch 1\n", b64, b"endch\n", out, 7)
    want = b"ch 1\n" + frame(k, b64) + b"endch\n"
    assert end == 7 + len(want)
    assert out[7:end].tobytes() == want
    assert (out[:7] == 0xEE).all() and (out[end:] == 0xEE).all()


def test_frame_block_argument_checks(kernels):
    k = kernels("b64lines")
    with pytest.raises(ValueError):
        k.frame_block(b"ab", b"QUJD", b"c", np.zeros(10, np.uint8), 1)
    with pytest.raises(ValueError):
        k.frame_block(b"", b"QUJD", b"", np.zeros(10, np.uint8), -1)
    assert k.frame_block(b"", b"", b"", np.zeros(0, np.uint8), 0) == 0


@given(st.binary(max_size=3000), st.binary(max_size=20), st.integers(0, 9))
def test_frame_block_differential(raw, prefix, pos):
    if _kernels.pure_python():
        pytest.skip("compiled kernels disabled by TENFOLD_PUREPYTHON")
    comp = _kernels.load("b64lines", "compiled")
    ref = _kernels.load("b64lines", "reference")
    b64 = base64.b64encode(raw)
    outs = []
    for k in (comp, ref):
        out = np.zeros(pos + len(prefix) + k.framed_size(len(b64)) + 6, np.uint8)
        outs.append((k.frame_block(prefix, b64, b"endch\n", out, pos), out.tobytes()))
    assert outs[0] == outs[1]


def _guarded(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(backing, out)``: ``out`` is the first ``n`` bytes of a larger buffer of 0xEE, so
    that a write past ``out`` shows (and stays inside memory the test owns)."""
    backing = np.full(n + 256, 0xEE, np.uint8)
    return backing, backing[:n]


@pytest.mark.parametrize("width", [M, M - 1, 2**62, 2**62 + 1])
def test_frame_huge_width_never_writes_past_out(kernels, width):
    """Issue 15: width 2**63-1 wrapped the framed size small, so frame_lines/frame_block
    wrote past ``out``; the size is now exact (one line) or refused."""
    k = kernels("b64lines")
    b64 = b"QUJD" * 100
    for size in (397, 400, 402):  # the old wrapped need was 397: all of these passed
        backing, out = _guarded(size)
        with pytest.raises(ValueError, match="output too small: need 403 bytes"):
            k.frame_lines(b64, out, width)
        with pytest.raises(ValueError, match="output too small: need 403 bytes"):
            k.frame_block(b"", b64, b"", out, 0, width)
        assert (backing == 0xEE).all()
    backing, out = _guarded(403)
    assert k.frame_lines(b64, out, width) == 403
    assert out[400:].tobytes() == b" 0\n" and (backing[403:] == 0xEE).all()


@pytest.mark.parametrize("n, width", [(M, 1), (M, 76), (M - 2, M), (2**62, 1), (M // 4 * 3, 3)])
def test_framed_size_overflow_refused(kernels, n, width):
    """The old compiled framed_size returned a wrapped (negative or small) size."""
    with pytest.raises(ValueError, match="framed size overflows"):
        kernels("b64lines").framed_size(n, width)


def test_framed_size_largest_exact(kernels):
    k = kernels("b64lines")
    assert k.framed_size(M // 4, 1) == 4 * (M // 4)  # the most characters in lines of 1
    with pytest.raises(ValueError, match="overflows"):
        k.framed_size(M // 4 + 1, 1)
    assert k.framed_size(M - 3, M - 3) == M
    assert k.framed_size(M - 3, M) == M


@pytest.mark.parametrize(
    "nlines, width, nout",
    [(4, 2**62, 0), (4, 2**62, 8), (2, M, 8), (2**62, 4, 0), (3, 2**62 - 1, 2)],
)
def test_unframe_product_overflow_refused(kernels, nlines, width, nout):
    """Issue 15: ``nlines * width`` wrapped to 0 and unframe_lines wrote into a too-small
    (or empty: SIGSEGV) ``out``; now refused before any access."""
    k = kernels("b64lines")
    text = b"QUJD a\n" * 4
    backing, out = _guarded(nout)
    assert outcome(k.unframe_lines, text, nlines, out, width) == "ValueError"
    with pytest.raises(ValueError, match="output too small"):
        k.unframe_lines(text, nlines, out, width)
    assert (backing == 0xEE).all()


def test_frame_block_pos_past_out(kernels):
    k = kernels("b64lines")
    for pos in (11, M):
        with pytest.raises(ValueError, match="output too small"):
            k.frame_block(b"", b"", b"", np.zeros(10, np.uint8), pos)


HOSTILE = st.one_of(
    st.integers(-3, 90),
    st.sampled_from([M, M - 1, M - 3, 2**62, 2**62 + 1, 2**31, -(2**63), 2**63, 2**64]),
)


@given(st.binary(max_size=200), HOSTILE, HOSTILE, HOSTILE, st.integers(0, 300))
def test_b64lines_hostile_differential(raw, width, pos, nlines, nout):
    """Random (mostly invalid) sizes: the same result or the same refusal, never a crash."""
    b64 = base64.b64encode(raw)

    def sizes(k):
        return k.framed_size(nout, width), k.framed_size(pos, width)

    def lines(k):
        out = np.zeros(nout, np.uint8)
        return k.frame_lines(b64, out, width), out.tobytes()

    def block(k):
        out = np.zeros(nout, np.uint8)
        return k.frame_block(b"ab", b64, b"c", out, pos, width), out.tobytes()

    def unlines(k):
        text = frame(_kernels.load("b64lines", "reference"), b64)
        out = np.zeros(nout, np.uint8)
        res = k.unframe_lines(text, nlines, out, width)
        return tuple(res), out[: max(0, res[2] - 3 * res[1])].tobytes() if res[0] == 0 else b""

    for call in (sizes, lines, block, unlines):
        differential("b64lines", call)

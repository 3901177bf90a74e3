"""CRC-32 (zip's, ``zlib.crc32``'s) in the crc32c kernel family: known answers, differential
against :mod:`zlib` and the twin over lengths, alignments and running values on every
implementation this CPU runs, combine."""

from __future__ import annotations

import contextlib
import zlib

import numpy as np
import pytest
from _kernels_isolated import outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels

#: Random bytes the tests cut at every alignment (a few MiB: the big-buffer cases).
POOL = np.random.default_rng(32).integers(0, 256, (3 << 20) + 128, dtype=np.uint8)


def _levels() -> list[str]:
    """The compiled kernel's implementations this CPU runs (none under TENFOLD_PUREPYTHON)."""
    if _kernels.pure_python():
        return []
    return list(_kernels.load("crc32c", "compiled")._available())


@contextlib.contextmanager
def _level(name: str):
    k = _kernels.load("crc32c", "compiled")
    old = k._force(name)
    try:
        yield k
    finally:
        k._force(old)


def _zlib(data: np.ndarray, value: int = 0) -> int:
    return zlib.crc32(data.tobytes(), value)


@pytest.mark.parametrize(
    "data, value, expected",
    [
        (b"", 0, 0),
        (b"", 0x12345678, 0x12345678),
        (b"123456789", 0, 0xCBF43926),  # the catalogue check value
        (b"\x00" * 32, 0, 0x190A55AD),
        (b"\xff" * 32, 0, 0xFF6CAB0B),
        (b"The quick brown fox jumps over the lazy dog", 0, 0x414FA339),
        (b"6789", 0xCBF53A1C, 0xCBF43926),  # continuing from crc32(b"12345")
    ],
)
def test_crc32_known(kernels, data, value, expected):
    assert zlib.crc32(data, value) == expected  # the vectors themselves
    assert kernels("crc32c").crc32(data, value) == expected


@pytest.mark.parametrize("level", _levels())
def test_crc32_known_every_level(level):
    with _level(level) as k:
        assert k.implementation() == level
        assert k.crc32_implementation() == ("table" if level == "sse4.2" else level)
        assert k.crc32(b"123456789") == 0xCBF43926
        assert k.crc32(bytes(100_000)) == zlib.crc32(bytes(100_000))
        assert k.crc32c(b"123456789") == 0xE3069283  # CRC-32C unchanged beside it


@given(
    n=st.integers(0, 5000),
    align=st.integers(0, 63),
    value=st.integers(0, 2**32 - 1),
)
def test_crc32_differential(n, align, value):
    """Compiled (every level) vs zlib vs the twin (on the first 3,000 bytes: it is slow), at
    every alignment of a 64-byte line, from any running value."""
    data = POOL[align : align + n]
    want = _zlib(data, value)
    ref = _kernels.load("crc32c", "reference")
    assert ref.crc32(data[:3000], value) == _zlib(data[:3000], value)
    if _kernels.pure_python():
        return
    assert _kernels.load("crc32c", "compiled").crc32(data, value) == want
    for level in _levels():
        with _level(level) as k:
            assert k.crc32(data, value) == want, level


@pytest.mark.parametrize("level", _levels())
def test_crc32_every_length_and_alignment(level):
    """Every length 0..600 (the tails of every loop) at all 64 alignments, and random lengths
    up to a few thousand bytes."""
    rng = np.random.default_rng(7)
    with _level(level) as k:
        for align in range(64):
            for n in range(0, 601, 1 if align in (0, 1, 15, 63) else 11):
                data = POOL[align : align + n]
                assert k.crc32(data, 0xA5A5A5A5) == _zlib(data, 0xA5A5A5A5), (align, n)
        for _ in range(300):
            n, align = int(rng.integers(0, 5000)), int(rng.integers(0, 64))
            value = int(rng.integers(0, 2**32))
            data = POOL[align : align + n]
            assert k.crc32(data, value) == _zlib(data, value), (align, n, value)


@pytest.mark.parametrize("level", _levels())
def test_crc32_megabytes(level):
    """A few MiB (above the GIL threshold, every folding loop's long run) at odd addresses,
    whole and in pieces carried by the running value."""
    with _level(level) as k:
        for align, n in [(0, 3 << 20), (1, (3 << 20) - 1), (13, (2 << 20) + 77), (63, 1 << 20)]:
            data = POOL[align : align + n]
            want = _zlib(data, 0x0BADF00D)
            assert k.crc32(data, 0x0BADF00D) == want, (align, n)
            v = 0x0BADF00D
            for i in range(0, n, 300_007):
                v = k.crc32(data[i : i + 300_007], v)
            assert v == want


def test_crc32_twin_against_zlib(kernels):
    """Both implementations over a sample the twin can afford (every impl, incl. the twin)."""
    k = kernels("crc32c")
    for n in (1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1031):
        for align in (0, 3, 61):
            data = POOL[align : align + n]
            assert k.crc32(data, 99) == _zlib(data, 99)


@given(a=st.integers(0, 5000), b=st.integers(0, 5000), value=st.integers(0, 2**32 - 1))
def test_crc32_combine_differential(a, b, value):
    first, second = POOL[:a], POOL[a : a + b]
    whole = _zlib(POOL[: a + b], value)
    c1, c2 = _zlib(first, value), _zlib(second)
    for impl in ["reference"] + ([] if _kernels.pure_python() else ["compiled"]):
        assert _kernels.load("crc32c", impl).crc32_combine(c1, c2, b) == whole


@given(crc1=st.integers(0, 2**32 - 1), crc2=st.integers(0, 2**32 - 1), n=st.integers(0, 2**64 - 1))
def test_crc32_combine_lengths_differential(crc1, crc2, n):
    """Any 64-bit length: compiled and twin agree (and differ from CRC-32C's combine)."""
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    ref = _kernels.load("crc32c", "reference").crc32_combine(crc1, crc2, n)
    assert _kernels.load("crc32c", "compiled").crc32_combine(crc1, crc2, n) == ref


def test_crc32_rejects(kernels):
    k = kernels("crc32c")
    with pytest.raises(OverflowError):
        k.crc32(b"x", 2**32)
    with pytest.raises(OverflowError):
        k.crc32_combine(0, 0, -1)
    with pytest.raises(ValueError):
        k.crc32(np.zeros((2, 2), np.uint8)[:, 0])  # not contiguous
    assert k.crc32(np.frombuffer(b"123456789", np.uint8)) == 0xCBF43926  # read-only input


def test_crc32_implementation_names(kernels):
    assert kernels("crc32c").crc32_implementation() in {
        "python", "table", "pclmul", "avx2-vpclmul", "avx512-vpclmul"
    }  # fmt: skip


def test_crc32_large_in_child():
    """A 64 MiB buffer at an odd address through every level, in a forked child."""
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    k = _kernels.load("crc32c", "compiled")
    big = np.resize(POOL, 64 << 20)
    want = zlib.crc32(big[5:])

    def run() -> None:
        for level in k._available():
            k._force(level)
            if k.crc32(big[5:]) != want:
                raise ValueError(level)

    assert outcome(run, timeout=120) == "ok"

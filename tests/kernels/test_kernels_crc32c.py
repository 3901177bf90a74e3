"""crc32c kernel family: known answers, differential against the twin and the ``crc32c``
package over lengths and alignments, on every implementation this CPU runs, combine, copy; and
its CRC-32 (``zlib.crc32``'s) against :mod:`zlib` and the twin the same way."""

from __future__ import annotations

import contextlib
import zlib

import numpy as np
import pytest
from _kernels_isolated import outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels

pk = pytest.importorskip("crc32c", reason="the crc32c package is the peer oracle")

#: Random bytes the tests cut at every alignment.
POOL = np.random.default_rng(28).integers(0, 256, 100_000 + 64, dtype=np.uint8)


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


@pytest.mark.parametrize(
    "data, value, expected",
    [
        (b"", 0, 0),
        (b"", 0x12345678, 0x12345678),
        (b"123456789", 0, 0xE3069283),
        (b"\x00" * 32, 0, 0x8A9136AA),  # RFC 3720 B.4
        (b"\xff" * 32, 0, 0x62A8AB43),
        (bytes(range(32)), 0, 0x46DD794E),
        (b"6789", 0x18D12335, 0xE3069283),  # continuing from crc32c(b"12345")
    ],
)
def test_crc32c_known(kernels, data, value, expected):
    assert kernels("crc32c").crc32c(data, value) == expected


@pytest.mark.parametrize("level", _levels())
def test_crc32c_known_every_level(level):
    with _level(level) as k:
        assert k.implementation() == level
        assert k.crc32c(b"123456789") == 0xE3069283
        assert k.crc32c(bytes(100_000)) == pk.crc32c(bytes(100_000))


@given(
    n=st.integers(0, 100_000),
    align=st.integers(0, 15),
    value=st.integers(0, 2**32 - 1),
)
def test_crc32c_differential(n, align, value):
    """Compiled (every level) vs the package vs the twin (on the first 3,000 bytes: it is
    slow), at every alignment."""
    data = POOL[align : align + n]
    want = pk.crc32c(data.tobytes(), value)
    ref = _kernels.load("crc32c", "reference")
    assert ref.crc32c(data[:3000], value) == pk.crc32c(data[:3000].tobytes(), value)
    if _kernels.pure_python():
        return
    assert _kernels.load("crc32c", "compiled").crc32c(data, value) == want
    for level in _levels():
        with _level(level) as k:
            assert k.crc32c(data, value) == want, level


@pytest.mark.parametrize("level", _levels())
def test_crc32c_every_length_and_alignment(level):
    """Every length 0..600 (the tails of every loop) at all 16 alignments."""
    with _level(level) as k:
        for align in range(16):
            for n in range(0, 601, 7 if align else 1):
                data = POOL[align : align + n]
                assert k.crc32c(data, 0xA5A5A5A5) == pk.crc32c(data.tobytes(), 0xA5A5A5A5)


@given(
    n=st.integers(0, 70_000),
    src_align=st.integers(0, 15),
    dst_align=st.integers(0, 15),
    value=st.integers(0, 2**32 - 1),
)
def test_copy_crc32c_differential(n, src_align, dst_align, value):
    """copy_crc32c is a copy and a crc32c, whichever implementation and copy strategy."""
    data = POOL[src_align : src_align + n]
    want = pk.crc32c(data.tobytes(), value)
    ref = _kernels.load("crc32c", "reference")
    out = np.zeros(3000 + 16, np.uint8)
    m = min(n, 3000)
    assert ref.copy_crc32c(data[:m], out[dst_align : dst_align + m], value) == pk.crc32c(
        data[:m].tobytes(), value
    )
    assert np.array_equal(out[dst_align : dst_align + m], data[:m])
    if _kernels.pure_python():
        return
    k = _kernels.load("crc32c", "compiled")
    for level in _levels():
        for fused in (True, False):
            for stream in (False, True):
                dst = np.zeros(n + 16, np.uint8)
                old = (k._force(level), k._copy_strategy(fused), k._stream_stores(stream))
                try:
                    got = k.copy_crc32c(data, dst[dst_align : dst_align + n], value)
                    dst2 = np.zeros(n + 16, np.uint8)  # the per-call hint, not the switch
                    got2 = k.copy_crc32c(data, dst2[dst_align : dst_align + n], value, stream)
                    assert k._stream_stores() == stream  # the call put the thread's back
                finally:
                    k._force(old[0]), k._copy_strategy(old[1]), k._stream_stores(old[2])
                assert got == want == got2, (level, fused, stream)
                assert np.array_equal(dst[dst_align : dst_align + n], data)
                assert np.array_equal(dst2, dst)
                assert not dst[:dst_align].any() and not dst[dst_align + n :].any()


@given(a=st.integers(0, 5000), b=st.integers(0, 5000), value=st.integers(0, 2**32 - 1))
def test_crc32c_combine_differential(a, b, value):
    first, second = POOL[:a], POOL[a : a + b]
    whole = pk.crc32c(POOL[: a + b].tobytes(), value)
    c1, c2 = pk.crc32c(first.tobytes(), value), pk.crc32c(second.tobytes())
    for impl in ["reference"] + ([] if _kernels.pure_python() else ["compiled"]):
        assert _kernels.load("crc32c", impl).crc32c_combine(c1, c2, b) == whole


@given(crc1=st.integers(0, 2**32 - 1), crc2=st.integers(0, 2**32 - 1), n=st.integers(0, 2**64 - 1))
def test_crc32c_combine_lengths_differential(crc1, crc2, n):
    """Any 64-bit length (the compiled one must not drop the high bits of 8 * len2)."""
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    ref = _kernels.load("crc32c", "reference").crc32c_combine(crc1, crc2, n)
    assert _kernels.load("crc32c", "compiled").crc32c_combine(crc1, crc2, n) == ref


def test_copy_crc32c_rejects(kernels):
    k = kernels("crc32c")
    buf = np.zeros(64, np.uint8)
    with pytest.raises(ValueError, match="expected 32"):
        k.copy_crc32c(buf[:32], buf[32:63])
    with pytest.raises(ValueError, match="overlap"):
        k.copy_crc32c(buf[:32], buf[16:48])
    with pytest.raises(BufferError):  # a read-only destination
        k.copy_crc32c(b"abcd", b"efgh")
    with pytest.raises(OverflowError):
        k.crc32c(b"x", 2**32)
    with pytest.raises(OverflowError):
        k.crc32c_combine(0, 0, -1)
    assert k.copy_crc32c(b"", bytearray()) == 0
    assert k.crc32c(np.frombuffer(b"123456789", np.uint8)) == 0xE3069283  # read-only input


def test_crc32c_implementation_names(kernels):
    assert kernels("crc32c").implementation() in {
        "python", "table", "sse4.2", "pclmul", "avx2-vpclmul", "avx512-vpclmul"
    }  # fmt: skip


def test_force_refuses_unknown_or_unsupported():
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    k = _kernels.load("crc32c", "compiled")
    with pytest.raises(ValueError, match="expected one of"):
        k._force("sse9")
    assert "table" in k._available()


def test_crc32c_table_forced_by_environment(tmp_path):
    """TENFOLD_CRC32C=table (read at import) selects the portable tables: CI runs them."""
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    import os
    import subprocess
    import sys

    import tenfold

    code = (
        "from tenfold._kernels import crc32c as k; "
        "print(k.implementation(), k.crc32c(bytes(range(256)) * 999, 7))"
    )
    env = dict(os.environ, TENFOLD_CRC32C="table")
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(tenfold.__file__))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["table", str(pk.crc32c(bytes(range(256)) * 999, 7))]


def test_crc32c_large_in_child():
    """A 64 MiB buffer at an odd address through every level, in a forked child."""
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    k = _kernels.load("crc32c", "compiled")
    big = np.resize(POOL, 64 << 20)
    want = pk.crc32c(big[3:].tobytes())

    def run() -> None:
        for level in k._available():
            k._force(level)
            dst = np.empty(big.size - 3, np.uint8)
            if k.crc32c(big[3:]) != want or k.copy_crc32c(big[3:], dst) != want:
                raise ValueError(level)

    assert outcome(run, timeout=120) == "ok"


# -- CRC-32 (zip's, zlib.crc32's): the same loops with CRC-32's constants ----------------

#: Random bytes the CRC-32 tests cut at every alignment (a few MiB: the big-buffer cases).
POOL32 = np.random.default_rng(32).integers(0, 256, (3 << 20) + 128, dtype=np.uint8)


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
    data = POOL32[align : align + n]
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
                data = POOL32[align : align + n]
                assert k.crc32(data, 0xA5A5A5A5) == _zlib(data, 0xA5A5A5A5), (align, n)
        for _ in range(300):
            n, align = int(rng.integers(0, 5000)), int(rng.integers(0, 64))
            value = int(rng.integers(0, 2**32))
            data = POOL32[align : align + n]
            assert k.crc32(data, value) == _zlib(data, value), (align, n, value)


@pytest.mark.parametrize("level", _levels())
def test_crc32_megabytes(level):
    """A few MiB (above the GIL threshold, every folding loop's long run) at odd addresses,
    whole and in pieces carried by the running value."""
    with _level(level) as k:
        for align, n in [(0, 3 << 20), (1, (3 << 20) - 1), (13, (2 << 20) + 77), (63, 1 << 20)]:
            data = POOL32[align : align + n]
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
            data = POOL32[align : align + n]
            assert k.crc32(data, 99) == _zlib(data, 99)


@given(a=st.integers(0, 5000), b=st.integers(0, 5000), value=st.integers(0, 2**32 - 1))
def test_crc32_combine_differential(a, b, value):
    first, second = POOL32[:a], POOL32[a : a + b]
    whole = _zlib(POOL32[: a + b], value)
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
    big = np.resize(POOL32, 64 << 20)
    want = zlib.crc32(big[5:])

    def run() -> None:
        for level in k._available():
            k._force(level)
            if k.crc32(big[5:]) != want:
                raise ValueError(level)

    assert outcome(run, timeout=120) == "ok"

"""strhash kernel family: known answers on both implementations, differential, hostile ranges."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash
from _kernels_isolated import differential, outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels

M = 2**63 - 1


@pytest.mark.parametrize(
    "text, seed, lower, expected",
    [
        (b"", 0, False, 0xEF46DB3751D8E999),
        (b"abc", 0, False, 0x44BC2CF5AD770999),
        (b"ABC", 0, True, 0x44BC2CF5AD770999),
        (b"c6e609e1b6b782bf4", 0, False, 0x22C0FFF82141C152),
        (b"c5646d719f6fbcb3c", 0, False, 0x22C0FFF82141C152),
    ],
)
def test_hash_known(kernels, text, seed, lower, expected):
    out = np.zeros(1, np.uint64)
    buf = np.frombuffer(text or b"\0", np.uint8)
    kernels("strhash").hash_ranges(buf, np.array([0]), np.array([len(text)]), seed, out, lower)
    assert int(out[0]) == expected


def test_split_basenames(kernels):
    names = [b"d/x.tar.GZ", b"noext", b".hidden.cls", b"a/b/", b"\xc3\xa9.jpg"]
    buf = np.frombuffer(b"".join(names), np.uint8)
    lens = np.array([len(n) for n in names])
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]])
    outs = [np.zeros(len(names), np.int64) for _ in range(4)] + [np.zeros(len(names), np.uint8)]
    kernels("strhash").split_basenames(buf, offs, lens, *outs)
    raw = buf.tobytes()
    stems = [raw[o : o + n] for o, n in zip(outs[0], outs[1], strict=True)]
    exts = [raw[o : o + n] for o, n in zip(outs[2], outs[3], strict=True)]
    assert stems == [b"x", b"noext", b"", b"", b"\xc3\xa9"]
    assert exts == [b"tar.GZ", b"", b"hidden.cls", b"", b"jpg"]
    assert outs[4].tolist() == [1, 1, 1, 1, 0]


def test_gather_and_equal(kernels):
    k = kernels("strhash")
    buf = np.frombuffer(b"abcabdab", np.uint8)
    out = np.zeros(5, np.uint8)
    k.gather(buf, np.array([0, 6]), np.array([3, 2]), out)
    assert out.tobytes() == b"abcab"
    eq = np.zeros(3, np.uint8)
    k.ranges_equal(
        buf, np.array([0, 0, 0]), np.array([3, 2, 3]), np.array([3, 6, 6]), np.array([3, 2, 2]), eq
    )
    assert eq.tolist() == [0, 1, 0]
    with pytest.raises(ValueError):
        k.gather(buf, np.array([7]), np.array([3]), np.zeros(3, np.uint8))
    with pytest.raises(ValueError):
        k.hash_ranges(buf, np.array([0]), np.array([1]), 0, np.zeros(2, np.uint64))


class _EvilStr(str):
    def encode(self, *a: object, **k: object) -> bytes:  # type: ignore[override]
        raise AssertionError("hash_strs must not call a subclass's encode")


@pytest.mark.parametrize(
    "text, seed, expected",
    [
        ("", 0, 0xEF46DB3751D8E999),
        ("abc", 0, 0x44BC2CF5AD770999),
        ("c6e609e1b6b782bf4", 0, 0x22C0FFF82141C152),
    ],
)
def test_hash_strs_known(kernels, text, seed, expected):
    out = np.zeros(3, np.uint64)
    kernels("strhash").hash_strs([text, _EvilStr(text), text], seed, out)
    assert out.tolist() == [expected] * 3


def test_hash_strs_inputs(kernels):
    k = kernels("strhash")
    texts = ["\u00e9t\u00e9", "a\0b", "\ud800x", "x" * 100]
    want = [xxhash.xxh64_intdigest(t.encode("utf-8", "surrogatepass"), 7) for t in texts]
    for seq in (texts, tuple(texts), iter(texts)):
        out = np.zeros(len(texts), np.uint64)
        k.hash_strs(seq, 7, out)
        assert out.tolist() == want
    with pytest.raises(TypeError, match="expected str"):
        k.hash_strs(["a", b"b"], 0, np.zeros(2, np.uint64))
    with pytest.raises(ValueError, match="one entry per string"):
        k.hash_strs(["a"], 0, np.zeros(2, np.uint64))


@pytest.mark.parametrize(
    "start, stride, width", [(0, 32, 8), (3, 32, 8), (21, 32, 4), (19, 32, 2), (1, 7, 3), (5, 5, 5)]
)
def test_gather_strided(kernels, start, stride, width):
    data = bytes(range(256)) * 2
    buf = np.frombuffer(data, np.uint8)
    n = (len(data) - start - width) // stride + 1
    out = np.zeros(n * width, np.uint8)
    kernels("strhash").gather_strided(buf, start, stride, width, out)
    assert out.tobytes() == b"".join(data[start + i * stride :][:width] for i in range(n))
    with pytest.raises(ValueError, match="overrun"):
        kernels("strhash").gather_strided(
            buf, start, stride, width, np.zeros((n + 1) * width, np.uint8)
        )


@pytest.mark.parametrize(
    "start, stride, width, size", [(0, 4, 8, 16), (-1, 8, 8, 16), (0, 8, 0, 0), (0, 8, 8, 12)]
)
def test_gather_strided_bad_layout(kernels, start, stride, width, size):
    with pytest.raises(ValueError):
        kernels("strhash").gather_strided(
            np.zeros(64, np.uint8), start, stride, width, np.zeros(size, np.uint8)
        )


@given(st.lists(st.text(max_size=40), max_size=12), st.integers(0, 2**64 - 1))
def test_hash_strs_differential(texts, seed):
    ref = _kernels.load("strhash", "reference")
    impls = [ref] if _kernels.pure_python() else [ref, _kernels.load("strhash", "compiled")]
    want = [xxhash.xxh64_intdigest(t.encode("utf-8", "surrogatepass"), seed) for t in texts]
    for mod in impls:
        out = np.zeros(len(texts), np.uint64)
        mod.hash_strs(texts, seed, out)
        assert out.tolist() == want


names_st = st.lists(st.binary(max_size=70), max_size=12)


@given(names_st, st.integers(0, 2**64 - 1), st.booleans())
def test_strhash_differential(names, seed, lower):
    ref = _kernels.load("strhash", "reference")
    impls = [ref] if _kernels.pure_python() else [ref, _kernels.load("strhash", "compiled")]
    buf = np.frombuffer(b"".join(names) or b"\0", np.uint8)
    lens = np.array([len(n) for n in names], np.int64)
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64) if names else lens
    results = []
    for mod in impls:
        h = np.zeros(len(names), np.uint64)
        mod.hash_ranges(buf, offs, lens, seed, h, lower)
        outs = [np.zeros(len(names), np.int64) for _ in range(4)] + [np.zeros(len(names), np.uint8)]
        mod.split_basenames(buf, offs, lens, *outs)
        results.append((h.tolist(), [o.tolist() for o in outs]))
    for n, v in zip(names, results[0][0], strict=True):
        t = bytes(c + 32 if 65 <= c <= 90 else c for c in n) if lower else n
        assert v == xxhash.xxh64_intdigest(t, seed)
    assert all(r == results[0] for r in results)


def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _strhash_calls(k, buf):
    """One call per function with range ``(2**63 - 1, 1)`` (or a start of 2**63 - 1): the sum
    wraps negative, so the old range check let each one read far outside ``buf``."""
    o1 = [np.zeros(1, np.int64) for _ in range(4)] + [np.zeros(1, np.uint8)]
    return {
        "hash_ranges": lambda: k.hash_ranges(buf, _i64(M), _i64(1), 0, np.zeros(1, np.uint64)),
        "split_basenames": lambda: k.split_basenames(buf, _i64(M), _i64(2), *o1),
        "gather": lambda: k.gather(buf, _i64(M), _i64(1), np.zeros(1, np.uint8)),
        "ranges_equal_a": lambda: k.ranges_equal(
            buf, _i64(M), _i64(2), _i64(0), _i64(2), np.zeros(1, np.uint8)
        ),
        "ranges_equal_b": lambda: k.ranges_equal(
            buf, _i64(0), _i64(2), _i64(M), _i64(2), np.zeros(1, np.uint8)
        ),
        "gather_strided": lambda: k.gather_strided(buf, M, 8, 8, np.zeros(8, np.uint8)),
        "gather_strided_stride": lambda: k.gather_strided(buf, 8, M, 8, np.zeros(16, np.uint8)),
    }


@pytest.mark.parametrize("case", list(_strhash_calls(None, None)))
def test_wrapping_range_refused_before_any_access(kernels, case):
    """Issue 15: offset 2**63-1 gave SIGSEGV in hash_ranges/gather/gather_strided and a
    wrapping range accepted by split_basenames; now a ValueError before any access."""
    k = kernels("strhash")
    call = _strhash_calls(k, np.zeros(64, np.uint8))[case]
    assert outcome(call) == "ValueError"
    with pytest.raises(ValueError, match="outside the buffer|overrun"):
        call()


def _huge_zero_buffer(size: int) -> np.ndarray:
    """A read-only buffer of ``size`` zero bytes that takes no memory (a sparse mapping)."""
    mmap = pytest.importorskip("mmap")
    flags = (
        getattr(mmap, "MAP_PRIVATE", 0)
        | getattr(mmap, "MAP_ANONYMOUS", 0)
        | getattr(mmap, "MAP_NORESERVE", 0)
    )
    try:
        m = mmap.mmap(-1, size, flags=flags, prot=mmap.PROT_READ)
    except (OSError, OverflowError, ValueError, TypeError) as exc:
        pytest.skip(f"cannot map {size} bytes here ({exc})")
    return np.frombuffer(m, np.uint8)


@pytest.mark.skipif(
    _kernels.pure_python(),
    reason="compiled kernels disabled by "
    "TENFOLD_PUREPYTHON (the reference would copy the whole buffer)",
)
def test_gather_total_overflow_refused():
    """Every range inside the buffer, but their total does not fit an int64: refused, not
    summed into a small wrapped total that lets the copy run past ``out``."""
    k = _kernels.load("strhash", "compiled")
    buf = _huge_zero_buffer(2**46)
    # 2**18 ranges of 2**46 bytes total 2**64, which wraps to 0: with one more range of 16
    # bytes, a wrapping sum equals len(out) and the copy runs 2**46 bytes into 16
    ln = np.full(2**18 + 1, 2**46, np.int64)
    ln[-1] = 16
    off = np.zeros(ln.size, np.int64)
    out = np.zeros(16, np.uint8)
    assert outcome(k.gather, buf, off, ln, out) == "ValueError"
    with pytest.raises(ValueError, match="the ranges total more than"):
        k.gather(buf, off, ln, out)


HOSTILE = st.one_of(
    st.integers(-3, 80),
    st.sampled_from([M, M - 1, 2**62, 2**62 + 1, -(2**63), -1, 2**31, 2**32 + 5]),
)


@given(
    st.binary(max_size=64),
    st.lists(st.tuples(HOSTILE, HOSTILE), max_size=5),
    st.integers(0, 2**64 - 1),
    st.booleans(),
    st.integers(0, 200),
)
def test_strhash_hostile_ranges_differential(data, ranges, seed, lower, nout):
    """Random (mostly invalid) ranges: both implementations give the same outputs or both
    refuse with the same class, never a crash."""
    buf = np.frombuffer(data, np.uint8)
    off = np.array([r[0] for r in ranges], np.int64)
    ln = np.array([r[1] for r in ranges], np.int64)
    n = len(ranges)

    def hashes(k):
        out = np.zeros(n, np.uint64)
        k.hash_ranges(buf, off, ln, seed, out, lower)
        return out.tolist()

    def basenames(k):
        outs = [np.zeros(n, np.int64) for _ in range(4)] + [np.zeros(n, np.uint8)]
        k.split_basenames(buf, off, ln, *outs)
        return [o.tolist() for o in outs]

    def gather(k):
        total = int(ln.sum()) if (ln >= 0).all() and ln.sum() < 1000 else nout
        out = np.zeros(total if nout % 2 else nout, np.uint8)
        k.gather(buf, off, ln, out)
        return out.tobytes()

    def equal(k):
        out = np.zeros(n, np.uint8)
        k.ranges_equal(buf, off, ln, off[::-1].copy(), ln[::-1].copy(), out)
        return out.tolist()

    for call in (hashes, basenames, gather, equal):
        differential("strhash", call)


@given(st.binary(max_size=64), HOSTILE, HOSTILE, HOSTILE, st.integers(0, 70))
def test_gather_strided_hostile_differential(data, start, stride, width, nout):
    buf = np.frombuffer(data, np.uint8)

    def call(k):
        out = np.zeros(nout, np.uint8)
        k.gather_strided(buf, start, stride, width, out)
        return out.tobytes()

    differential("strhash", call)


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_seed_outside_uint64_refused_alike(seed):
    for call in (
        lambda k: k.hash_ranges(b"a", _i64(0), _i64(1), seed, np.zeros(1, np.uint64)),
        lambda k: k.hash_strs(["a"], seed, np.zeros(1, np.uint64)),
    ):
        assert differential("strhash", call) == "OverflowError"


def _alias_calls(k):
    """Calls whose output shares memory with the offsets/lengths (or the source of a copy):
    the compiled loop would write offsets it reads next, so each is refused at entry."""
    buf = np.arange(64, dtype=np.uint8)
    mem = np.zeros(4, np.int64)  # the ranges array, also viewed as an output
    n = 2
    off = mem[:n]
    ln = mem[n:]
    five = [np.zeros(n, np.int64) for _ in range(4)] + [np.zeros(n, np.uint8)]
    return {
        "hash_ranges": lambda: k.hash_ranges(buf, off, ln, 0, mem[n:].view(np.uint64)),
        "split_basenames": lambda: k.split_basenames(buf, off, ln, *five[:3], mem[:n], five[4]),
        "split_basenames_ascii": lambda: k.split_basenames(
            buf, off, ln, *five[:4], mem[n:].view(np.uint8)[:n]
        ),
        "gather": lambda: k.gather(buf, off, np.array([1, 1]), mem.view(np.uint8)[:2]),
        "gather_buf": lambda: k.gather(buf, np.array([0, 8]), np.array([4, 4]), buf[4:12]),
        "gather_strided": lambda: k.gather_strided(buf, 0, 8, 4, buf[2:10]),
        "ranges_equal": lambda: k.ranges_equal(buf, off, ln, off, ln, mem.view(np.uint8)[8:10]),
    }


@pytest.mark.parametrize("case", list(_alias_calls(None)))
def test_output_sharing_memory_with_ranges_refused(kernels, case):
    k = kernels("strhash")
    assert outcome(_alias_calls(k)[case]) == "ValueError"
    with pytest.raises(ValueError, match="overlap"):
        _alias_calls(k)[case]()


def test_outputs_beside_ranges_accepted(kernels):
    """Neighbouring (not overlapping) views of one array are fine."""
    k = kernels("strhash")
    buf = np.frombuffer(b"a/b.c", np.uint8)
    mem = np.zeros(6, np.int64)
    mem[:2] = (0, 5)
    k.split_basenames(
        buf, mem[0:1], mem[1:2], mem[2:3], mem[3:4], mem[4:5], mem[5:6], np.zeros(1, np.uint8)
    )
    assert mem.tolist() == [0, 5, 2, 1, 4, 1]

"""xxh3 kernel family: differential against the ``xxhash`` package (every length 0..2048 and
large ones, seeds, alignments, streaming with random chunkings, copy-while-hashing) on every
stripe loop this CPU runs, and the pure-Python twin against the package on small inputs."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
from _kernels_isolated import outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels

xxhash = pytest.importorskip("xxhash", reason="the xxhash package is the peer oracle")

#: Random bytes the tests cut at every alignment.
POOL = np.random.default_rng(26).integers(0, 256, 300_000 + 64, dtype=np.uint8)
SEEDS = [0, 1, 0x9E3779B185EBCA87, 2**64 - 1]


def _levels() -> list[str]:
    """The compiled kernel's stripe loops this CPU runs (none under TENFOLD_PUREPYTHON)."""
    if _kernels.pure_python():
        return []
    return list(_kernels.load("xxh3", "compiled")._available())


@contextlib.contextmanager
def _level(name: str):
    k = _kernels.load("xxh3", "compiled")
    old = k._force(name)
    try:
        yield k
    finally:
        k._force(old)


def _want(data: np.ndarray, seed: int = 0) -> int:
    return xxhash.xxh3_64_intdigest(data.tobytes(), seed)


@pytest.mark.parametrize(
    "data, seed, expected",
    [
        (b"", 0, 0x2D06800538D394C2),
        (b"a", 0, 0xE6C632B61E964E1F),
        (b"abc", 0, 0x78AF5F94892F3950),
        (b"", 1, 0x4DC5B0CC826F6703),
    ],
)
def test_xxh3_known(kernels, data, seed, expected):
    assert xxhash.xxh3_64_intdigest(data, seed) == expected  # the vectors are the package's
    assert kernels("xxh3").xxh3_64(data, seed) == expected


@pytest.mark.parametrize("level", _levels())
def test_xxh3_every_length_differential(level):
    """Every length 0..2048 (each short formula, each stripe and block boundary) at three
    alignments and four seeds, compiled against the package: "compiled" vs "reference" is the
    Hypothesis test below."""
    with _level(level) as k:
        assert k.implementation() == level
        for n in range(2049):
            for align in (0, 1, 13):
                data = POOL[align : align + n]
                seed = SEEDS[(n + align) % len(SEEDS)]
                assert k.xxh3_64(data, seed) == _want(data, seed), (n, align, seed)


@pytest.mark.parametrize("level", _levels())
def test_xxh3_large_differential(level):
    rng = np.random.default_rng(7)
    with _level(level) as k:
        for n in [2**16, 2**16 + 1, 100_003, 300_000] + list(rng.integers(2049, 300_000, 6)):
            for seed in (0, int(rng.integers(1, 2**63))):
                align = int(rng.integers(0, 64))
                data = POOL[align : align + int(n)]
                assert k.xxh3_64(data, seed) == _want(data, seed), (n, seed, align)


@given(n=st.integers(0, 700), align=st.integers(0, 63), seed=st.sampled_from(SEEDS))
def test_xxh3_twin_differential(n, align, seed):
    """The pure-Python twin against the package, and the compiled kernel against both."""
    data = POOL[align : align + n]
    want = _want(data, seed)
    assert _kernels.load("xxh3", "reference").xxh3_64(data, seed) == want
    if not _kernels.pure_python():
        assert _kernels.load("xxh3", "compiled").xxh3_64(data, seed) == want


def _stream(k, data: np.ndarray, cuts: list[int], seed: int, copy_at: set[int]) -> int:
    """Feed ``data`` to a state in the pieces ``cuts`` gives, copying the pieces whose index
    is in ``copy_at`` with copy_xxh3; checks the copy, digests along the way and at the end."""
    st_ = k.Xxh3State(seed)
    ref = xxhash.xxh3_64(seed=seed)
    out = np.zeros(data.size + 2, np.uint8)
    pos = 0
    for i, c in enumerate(cuts):
        piece = data[pos : pos + c]
        if i in copy_at:
            assert k.copy_xxh3(piece, out[1 + pos : 1 + pos + c], st_) is None
        else:
            st_.update(piece)
            out[1 + pos : 1 + pos + c] = piece
        ref.update(piece.tobytes())
        pos += c
        assert st_.total == pos
        if i % 3 == 0:
            assert st_.intdigest() == ref.intdigest(), (i, pos)
    assert np.array_equal(out[1:-1], data) and out[0] == 0 and out[-1] == 0
    assert st_.hexdigest() == ref.hexdigest() and st_.digest() == ref.digest()
    return int(st_.intdigest())


@given(
    cuts=st.lists(
        st.one_of(
            st.integers(0, 70),
            st.sampled_from([64, 128, 255, 256, 257, 1024]),
            st.integers(0, 5000),
        ),
        max_size=25,
    ),
    align=st.integers(0, 63),
    seed=st.sampled_from(SEEDS),
    copy_at=st.sets(st.integers(0, 24)),
)
def test_xxh3_streaming_differential(cuts, align, seed, copy_at):
    """Any chunking, some pieces copied with copy_xxh3, gives the one-shot digest."""
    data = POOL[align : align + sum(cuts)]
    impls = ["reference"] if _kernels.pure_python() else ["compiled", "reference"]
    if sum(cuts) > 3000:  # the twin is slow: the compiled kernel alone on long streams
        impls = [i for i in impls if i == "compiled"]
    for name in impls:
        k = _kernels.load("xxh3", name)
        assert _stream(k, data, cuts, seed, copy_at) == _want(data, seed)
    with contextlib.ExitStack() as stack:
        for level in _levels():
            k = stack.enter_context(_level(level))
            assert _stream(k, data, cuts, seed, copy_at) == _want(data, seed), level


@pytest.mark.parametrize("level", _levels())
def test_xxh3_streaming_boundaries(level):
    """Every split point of 1,500 bytes (one piece then the rest) and byte-at-a-time feeds
    around the buffer and block sizes."""
    data = POOL[3:1503]
    want = _want(data, 5)
    with _level(level) as k:
        for cut in range(data.size + 1):
            s = k.Xxh3State(5)
            s.update(data[:cut])
            s.update(data[cut:])
            assert s.intdigest() == want, cut
        s = k.Xxh3State(5)
        for i in range(data.size):
            s.update(data[i : i + 1])
            if i in (239, 240, 255, 256, 319, 320, 1023, 1024, 1025):
                assert s.intdigest() == _want(data[: i + 1], 5), i
        assert s.intdigest() == want


def test_xxh3_state_copy_and_reset(kernels):
    k = kernels("xxh3")
    a = k.Xxh3State(seed=9)
    a.update(POOL[:1000])
    b = a.copy()
    b.update(POOL[1000:1300])
    assert a.intdigest() == _want(POOL[:1000], 9)
    assert b.intdigest() == _want(POOL[:1300], 9)
    assert a.seed == b.seed == 9 and a.total == 1000
    a.reset()
    assert a.total == 0 and a.intdigest() == xxhash.xxh3_64_intdigest(b"", 9)
    assert k.Xxh3State().hexdigest() == xxhash.xxh3_64().hexdigest()


def test_copy_xxh3_differential(impl):
    """copy_xxh3 of one long piece at odd alignments on both implementations ("compiled" and
    "reference"): the copy and the digest."""
    k = _kernels.load("xxh3", impl)
    n = 300_000 if impl == "compiled" else 5000
    for src_align, dst_align in ((0, 0), (1, 7), (63, 2)):
        data = POOL[src_align : src_align + n]
        dst = np.zeros(n + 64, np.uint8)
        s = k.Xxh3State()
        k.copy_xxh3(data, dst[dst_align : dst_align + n], s)
        assert s.intdigest() == _want(data)
        assert np.array_equal(dst[dst_align : dst_align + n], data)
        assert not dst[:dst_align].any() and not dst[dst_align + n :].any()


def test_copy_xxh3_rejects(kernels):
    k = kernels("xxh3")
    buf = np.zeros(64, np.uint8)
    s = k.Xxh3State()
    with pytest.raises(ValueError, match="expected 32"):
        k.copy_xxh3(buf[:32], buf[32:63], s)
    with pytest.raises(ValueError, match="overlap"):
        k.copy_xxh3(buf[:32], buf[16:48], s)
    with pytest.raises(BufferError):  # a read-only destination
        k.copy_xxh3(b"abcd", b"efgh", s)
    with pytest.raises(TypeError):
        k.copy_xxh3(b"abcd", bytearray(4), xxhash.xxh3_64())
    with pytest.raises(OverflowError):
        k.xxh3_64(b"x", 2**64)
    with pytest.raises(OverflowError):
        k.Xxh3State(-1)
    assert s.total == 0  # nothing was hashed by the refused calls
    k.copy_xxh3(b"", bytearray(), s)
    assert s.intdigest() == xxhash.xxh3_64_intdigest(b"")
    ro = np.frombuffer(b"123456789", np.uint8)  # a read-only input
    assert k.xxh3_64(ro) == xxhash.xxh3_64_intdigest(b"123456789")


def test_xxh3_takes_any_contiguous_buffer(kernels):
    """As the package: a float32 or 2-d array, a bytearray, a memoryview, read as their bytes;
    a non-contiguous view is refused, not copied."""
    k = kernels("xxh3")
    a = POOL[:4000].view(np.float32).reshape(25, 40)
    want = xxhash.xxh3_64_intdigest(a.tobytes(), 3)
    assert k.xxh3_64(a, 3) == want
    assert k.xxh3_64(bytearray(a.tobytes()), 3) == want
    s = k.Xxh3State(3)
    s.update(memoryview(a)[:10])
    s.update(a[10:])
    assert s.intdigest() == want
    out = np.zeros((25, 40), np.float32)
    s = k.Xxh3State(3)
    k.copy_xxh3(a, out, s)
    assert s.intdigest() == want and out.tobytes() == a.tobytes()
    with pytest.raises((BufferError, ValueError)):
        k.xxh3_64(a[:, ::2])
    with pytest.raises(TypeError):
        k.xxh3_64("text")


def test_xxh3_implementation_names(kernels):
    assert kernels("xxh3").implementation() in {"python", "scalar", "sse2", "avx2", "avx512"}


def test_force_refuses_unknown_or_unsupported():
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    k = _kernels.load("xxh3", "compiled")
    with pytest.raises(ValueError, match="expected one of"):
        k._force("avx9")
    assert "scalar" in k._available()


def test_xxh3_scalar_forced_by_environment():
    """TENFOLD_XXH3=scalar (read at import) selects the portable loop: what non-x86 runs."""
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    import os
    import subprocess
    import sys

    import tenfold

    code = (
        "from tenfold._kernels import xxh3 as k; "
        "print(k.implementation(), k.xxh3_64(bytes(range(256)) * 999, 7))"
    )
    env = dict(os.environ, TENFOLD_XXH3="scalar")
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(tenfold.__file__))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["scalar", str(xxhash.xxh3_64_intdigest(bytes(range(256)) * 999, 7))]


def test_xxh3_threads_share_a_state():
    """Threads updating one state are serialised by its lock (no torn buffer): the digest is
    that of the pieces in some order, here all the same piece."""
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    k = _kernels.load("xxh3", "compiled")
    piece = POOL[: 3 * k.NOGIL_BYTES + 5]  # above the threshold: updates release the GIL
    s = k.Xxh3State()

    def work() -> None:
        for _ in range(20):
            s.update(piece)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.intdigest() == xxhash.xxh3_64_intdigest(piece.tobytes() * 80)


def test_xxh3_large_in_child():
    """A 64 MiB buffer at an odd address through every level, one-shot, streamed and copied,
    in a forked child."""
    if _kernels.pure_python():
        pytest.skip("no compiled kernel under TENFOLD_PUREPYTHON")
    k = _kernels.load("xxh3", "compiled")
    big = np.resize(POOL, 64 << 20)
    want = _want(big[3:], 11)

    def run() -> None:
        for level in k._available():
            k._force(level)
            dst = np.empty(big.size - 3, np.uint8)
            s = k.Xxh3State(11)
            k.copy_xxh3(big[3:], dst, s)
            if k.xxh3_64(big[3:], 11) != want or s.intdigest() != want:
                raise ValueError(level)
            if not np.array_equal(dst, big[3:]):
                raise ValueError(level)

    assert outcome(run, timeout=120) == "ok"


_PORTABLE_MAIN = r"""
#include "_xxh3_impl.h"
#include <stdio.h>
int main(void)
{
    static uint8_t buf[5000];
    static const size_t lens[] = {0, 3, 8, 16, 17, 128, 129, 240, 241, 1024, 1025, 5000};
    tf_x3_state st;
    size_t i;
    for (i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    tf_x3_init();
    for (i = 0; i < sizeof lens / sizeof lens[0]; i++)
        printf("%llu\n", (unsigned long long)tf_xxh3_64(buf, NULL, lens[i], i));
    tf_x3_reset(&st, 3);
    for (i = 0; i < sizeof buf; i += 333)
        tf_x3_update(&st, buf + i, NULL, sizeof buf - i < 333 ? sizeof buf - i : 333);
    printf("%llu %s\n", (unsigned long long)tf_x3_digest(&st), tf_x3_names[tf_x3_level]);
    return 0;
}
"""


def test_xxh3_portable_build(tmp_path):
    """The header built with -DTF_XXH3_PORTABLE (the scalar loop alone, as off x86-64) compiles
    without warnings and gives the package's values."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    here = _kernels.__path__[0]
    (tmp_path / "main.c").write_text(_PORTABLE_MAIN)
    exe = tmp_path / "portable"
    flags = ["-O1", "-Wall", "-Wextra", "-Werror", "-DTF_XXH3_PORTABLE", f"-I{here}"]
    subprocess.run([cc, *flags, str(tmp_path / "main.c"), "-o", str(exe)], check=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split(
        "\n"
    )
    buf = bytes((i * 131 + 7) & 0xFF for i in range(5000))
    lens = [0, 3, 8, 16, 17, 128, 129, 240, 241, 1024, 1025, 5000]
    for i, n in enumerate(lens):
        assert int(lines[i]) == xxhash.xxh3_64_intdigest(buf[:n], i), n
    assert lines[len(lens)].split() == [str(xxhash.xxh3_64_intdigest(buf, 3)), "scalar"]

"""GGML dequantisation kernels (compiled and reference): known answers, every half (subnormals,
infinities, NaN payloads), length checks, differential tests, and the ``gguf`` package's own
dequantiser where it is installed."""

from __future__ import annotations

import numpy as np
import pytest
from _kernels_isolated import differential, outcome
from hypothesis import given
from hypothesis import strategies as st

SIZES = {"q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24, "q8_0": 34}


def _run(k, kind, raw):
    out = np.empty(len(raw) // SIZES[kind] * 32, np.float32)
    getattr(k, f"dequantize_{kind}")(np.frombuffer(raw, np.uint8), out)
    return out


def test_q4_0_known_answer(kernels):
    k = kernels("ggml")
    # d = 0.5 (half 0x3800); byte j = 0x8j: low nibble j -> (j - 8) * 0.5, high 8 -> 0
    block = bytes([0x00, 0x38]) + bytes(0x80 | j for j in range(16))
    got = _run(k, "q4_0", block)
    assert got[:16].tolist() == [(j - 8) * 0.5 for j in range(16)]
    assert got[16:].tolist() == [0.0] * 16


def test_q8_0_known_answer(kernels):
    k = kernels("ggml")
    block = bytes([0x00, 0x3C]) + np.arange(-16, 16, dtype=np.int8).tobytes()  # d = 1
    assert _run(k, "q8_0", block).tolist() == list(range(-16, 16))


def test_q5_1_fifth_bit_and_minimum(kernels):
    k = kernels("ggml")
    # d = 1, m = -2 (0xC000); qh = bit 3 and bit 20 set; nibbles all 1
    qh = (1 << 3) | (1 << 20)
    block = bytes([0x00, 0x3C, 0x00, 0xC0]) + qh.to_bytes(4, "little") + bytes([0x11] * 16)
    got = _run(k, "q5_1", block)
    want = [1 - 2.0] * 32
    want[3] = 17 - 2.0
    want[20] = 17 - 2.0
    assert got.tolist() == want


@pytest.mark.parametrize("kind", sorted(SIZES))
def test_every_half_differential(kind):
    """Every one of the 65536 halves as ``d`` (and ``m``), both implementations alike."""
    size = SIZES[kind]
    halves = np.arange(1 << 16, dtype=np.uint16)
    blocks = np.zeros((halves.size, size), np.uint8)
    blocks[:, 0:2] = halves.view(np.uint8).reshape(-1, 2)
    if kind in ("q4_1", "q5_1"):
        blocks[:, 2:4] = halves[::-1].copy().view(np.uint8).reshape(-1, 2)
    rng = np.random.default_rng(1)
    blocks[:, -16:] = rng.integers(0, 256, (halves.size, 16), dtype=np.uint8)
    if kind == "q8_0":
        blocks[:, 2:] = rng.integers(0, 256, (halves.size, 32), dtype=np.uint8)
    raw = blocks.tobytes()
    got = differential("ggml", lambda k: _run(k, kind, raw).view(np.uint32).tobytes())
    assert isinstance(got, bytes) and len(got) == halves.size * 32 * 4


@given(
    kind=st.sampled_from(sorted(SIZES)),
    raw=st.binary(max_size=600),
    extra=st.integers(-2, 2),
)
def test_hostile_lengths_differential(kind, raw, extra):
    """Any bytes and any output length: the same values or the same refusal, never a crash."""
    n = max(0, len(raw) // SIZES[kind] * 32 + extra)

    def call(k):
        out = np.zeros(n, np.float32)
        getattr(k, f"dequantize_{kind}")(np.frombuffer(raw, np.uint8), out)
        return out.view(np.uint32).tobytes()

    whole = len(raw) % SIZES[kind] == 0 and n == len(raw) // SIZES[kind] * 32
    got = differential("ggml", call)
    assert (got == "ValueError") != whole


def test_out_of_bounds_is_refused_not_a_crash(kernels):
    k = kernels("ggml")
    src = np.zeros(34 * 4, np.uint8)
    for kind in SIZES:
        assert outcome(getattr(k, f"dequantize_{kind}"), src, np.zeros(1, np.float32)) == (
            "ValueError"
        )
    empty, none = np.zeros(0, np.uint8), np.zeros(0, np.float32)  # no blocks: nothing to do
    k.dequantize_q4_0(empty, none)
    k.dequantize_q4_1(empty, none)
    k.dequantize_q5_0(empty, none)
    k.dequantize_q5_1(empty, none)
    k.dequantize_q8_0(empty, none)


@pytest.mark.parametrize("kind", sorted(SIZES))
def test_matches_the_gguf_package(kernels, kind):
    gguf = pytest.importorskip("gguf", reason="the gguf package (the peers extra) is not installed")
    k = kernels("ggml")
    qtype = getattr(gguf.GGMLQuantizationType, kind.upper())
    x = np.random.default_rng(7).standard_normal((3, 128)).astype(np.float32) * 4
    blocks = gguf.quants.quantize(x, qtype)
    want = gguf.quants.dequantize(blocks, qtype)
    got = _run(k, kind, blocks.tobytes()).reshape(want.shape)
    assert got.tobytes() == want.astype(np.float32).tobytes()

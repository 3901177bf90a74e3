"""Bit-packing kernels (compiled and reference): known answers, ranges, differential tests."""

from __future__ import annotations

import numpy as np
import pytest
from _kernels_isolated import differential, outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels

M = 2**63 - 1

# Known answers of docs/formats/oinf.md (from 08_tensors_packed.json): (kind, bits, values, hex).
KNOWN = [
    ("int", 4, [0, 1, 7, -8, -1, 2, 3, -2, 5], "10872fe305"),
    ("t2", 2, [-1, 0, 1, 1, -1, 0, 0, 1, -1], "534303"),
    ("pm1", 1, [1, -1, -1, 1, 1, 1, -1, -1, 1], "3901"),
    ("int", 2, [-2, -1, 0, 1, 1, 0, -1, -2, 1], "4eb101"),
    ("int", 1, [-1, 0, 0, -1, -1, -1, 0, 0, -1], "3901"),
    ("uint", 1, [1, 0, 0, 0, 0, 0, 0, 1, 1], "8101"),
    ("uint", 4, [0, 15, 15, 14, 8, 6, 2, 4, 5], "f0ef684205"),
    ("uint", 2, [0, 3, 1, 3, 1, 1, 1, 1, 3], "dc5503"),
    ("int", 4, [], ""),
]
RANGES = {("int", 4): (-8, 7), ("int", 2): (-2, 1), ("int", 1): (-1, 0), ("t2", 2): (-1, 1)}


def _pack(k, kind, bits, values):
    out = np.zeros((len(values) * bits + 7) // 8, np.uint8)
    if kind == "uint":
        r = k.pack_uint(np.array(values, np.uint8), bits, out)
    elif kind == "pm1":
        r = k.pack_pm1(np.array(values, np.int8), out)
    else:
        lo, hi = RANGES[(kind, bits)]
        r = k.pack_int(np.array(values, np.int8), bits, lo, hi, out)
    return r, out


def _unpack(k, kind, bits, raw, n):
    src = np.frombuffer(raw, np.uint8)
    if kind == "uint":
        out = np.empty(n, np.uint8)
        k.unpack_uint(src, bits, out)
    elif kind == "pm1":
        out = np.empty(n, np.int8)
        k.unpack_pm1(src, out)
    else:
        out = np.empty(n, np.int8)
        k.unpack_int(src, bits, out)
    return out


@pytest.mark.parametrize("kind, bits, values, hexdata", KNOWN)
def test_known_answers(kernels, kind, bits, values, hexdata):
    k = kernels("bitpack")
    r, out = _pack(k, kind, bits, values)
    assert r == -1
    assert out.tobytes().hex() == hexdata
    assert _unpack(k, kind, bits, bytes.fromhex(hexdata), len(values)).tolist() == values


@pytest.mark.parametrize(
    "kind, bits, values, bad",
    [
        ("int", 4, [0, 8], 1),
        ("int", 4, [-9, 0], 0),
        ("int", 2, [1, 2], 1),
        ("int", 1, [0, 1], 1),
        ("t2", 2, [0, 1, -1, -2], 3),
        ("t2", 2, [0, 0, 0, 0, 0, 2], 5),
        ("uint", 4, [15, 16], 1),
        ("uint", 2, [4], 0),
        ("uint", 1, [0, 0, 0, 0, 0, 0, 0, 0, 2], 8),
        ("pm1", 1, [1, 0], 1),
        ("pm1", 1, [1, -1, 1, 2], 3),
    ],
)
def test_out_of_range_reported(kernels, kind, bits, values, bad):
    r, _ = _pack(kernels("bitpack"), kind, bits, values)
    assert r == bad


def test_t2_code_0b10_decodes_as_minus_two_and_is_found(kernels):
    k = kernels("bitpack")
    src = bytes.fromhex("534303")
    assert k.find_code(src, 2, 9, 2) == -1
    bad = bytes([0x52]) + src[1:]  # element 0 -> code 0b10
    assert k.find_code(bad, 2, 9, 2) == 0
    assert _unpack(k, "int", 2, bad, 9)[0] == -2
    assert k.find_code(bytes.fromhex("0080"), 2, 8, 2) == 7
    assert k.find_code(bytes.fromhex("0080"), 2, 7, 2) == -1  # beyond count: not looked at


def test_bitset_roundtrip(kernels):
    k = kernels("bitpack")
    bits = np.array([0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 1], bool)
    out = np.zeros(2, np.uint8)
    k.pack_bitset(bits.view(np.uint8), out)
    assert out.tobytes().hex() == "8a04"
    back = np.empty(11, np.uint8)
    k.unpack_bitset(out, back)
    assert back.astype(bool).tolist() == bits.tolist()
    out2 = np.zeros(1, np.uint8)
    k.pack_bitset(np.array([0, 7, 255], np.uint8), out2)  # non-zero -> 1
    assert out2[0] == 0b110


def test_length_checks(kernels):
    k = kernels("bitpack")
    with pytest.raises(ValueError):
        k.unpack_uint(b"\x00", 4, np.empty(3, np.uint8))
    with pytest.raises(ValueError):
        k.pack_uint(np.zeros(3, np.uint8), 4, np.zeros(1, np.uint8))
    with pytest.raises(ValueError):
        k.pack_uint(np.zeros(3, np.uint8), 4, np.zeros(3, np.uint8))
    with pytest.raises(ValueError):
        k.unpack_uint(b"\x00", 3, np.empty(1, np.uint8))
    with pytest.raises(ValueError):
        k.pack_int(np.zeros(1, np.int8), 2, -3, 1, np.zeros(1, np.uint8))
    with pytest.raises(ValueError):
        k.find_code(b"\x00", 2, 5, 0)
    with pytest.raises(ValueError):
        k.find_code(b"\x00", 2, 1, 4)


def test_readonly_inputs(kernels):
    k = kernels("bitpack")
    a = np.frombuffer(bytes.fromhex("10872fe305"), np.uint8)
    assert not a.flags.writeable
    out = np.empty(9, np.int8)
    k.unpack_int(a, 4, out)
    assert out.tolist() == [0, 1, 7, -8, -1, 2, 3, -2, 5]
    ro = out.copy()
    ro.flags.writeable = False
    packed = np.zeros(5, np.uint8)
    assert k.pack_int(ro, 4, -8, 7, packed) == -1


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_every_value_in_range_roundtrips(kernels, bits):
    k = kernels("bitpack")
    for kind in ("uint", "int"):
        vals = (
            list(range(1 << bits))
            if kind == "uint"
            else list(range(-(1 << (bits - 1)), 1 << (bits - 1)))
        )
        for n in range(0, 3 * (8 // bits) + 2):
            v = (vals * (n // len(vals) + 1))[:n]
            lo_hi = RANGES.get((kind, bits))
            out = np.zeros((n * bits + 7) // 8, np.uint8)
            if kind == "uint":
                assert k.pack_uint(np.array(v, np.uint8), bits, out) == -1
            else:
                assert k.pack_int(np.array(v, np.int8), bits, *lo_hi, out) == -1
            if n % (8 // bits):  # unused tail bits are zero
                assert out[-1] >> ((n * bits) % 8) == 0
            assert _unpack(k, kind, bits, out.tobytes(), n).tolist() == v


needs_compiled = pytest.mark.skipif(
    _kernels.pure_python(), reason="compiled kernels disabled by TENFOLD_PUREPYTHON"
)


@needs_compiled
@given(st.sampled_from([1, 2, 4]), st.binary(max_size=200), st.data())
def test_unpack_differential(bits, raw, data):
    comp, ref = _kernels.load("bitpack", "compiled"), _kernels.load("bitpack", "reference")
    n = data.draw(st.integers(0, len(raw) * 8 // bits))
    for kind in ("uint", "int", "pm1"):
        if kind == "pm1" and bits != 1:
            continue
        got = _unpack(comp, kind, bits, raw, n).tolist()
        assert got == _unpack(ref, kind, bits, raw, n).tolist()
    for code in range(1 << bits):
        assert comp.find_code(raw, bits, n, code) == ref.find_code(raw, bits, n, code)
    a, b = np.empty(min(n, len(raw) * 8), np.uint8), np.empty(min(n, len(raw) * 8), np.uint8)
    comp.unpack_bitset(raw, a)
    ref.unpack_bitset(raw, b)
    assert a.tolist() == b.tolist()


@needs_compiled
@given(
    st.sampled_from(
        [
            ("uint", 1),
            ("uint", 2),
            ("uint", 4),
            ("int", 1),
            ("int", 2),
            ("int", 4),
            ("t2", 2),
            ("pm1", 1),
        ]
    ),
    st.lists(st.integers(-128, 127), max_size=100),
    st.booleans(),
)
def test_pack_differential(kind_bits, values, clamp):
    kind, bits = kind_bits
    comp, ref = _kernels.load("bitpack", "compiled"), _kernels.load("bitpack", "reference")
    if clamp:  # mostly in range, so that the packed bytes are compared too
        if kind == "uint":
            values = [v % (1 << bits) for v in values]
        elif kind == "pm1":
            values = [1 if v >= 0 else -1 for v in values]
        else:
            lo, hi = RANGES[(kind, bits)]
            values = [min(max(v, lo), hi) for v in values]
    if kind == "uint":
        values = [v % 256 for v in values]
    rc, oc = _pack(comp, kind, bits, values)
    rr, orr = _pack(ref, kind, bits, values)
    assert rc == rr
    if rc == -1:
        assert oc.tobytes() == orr.tobytes()
    nb = (len(values) + 7) // 8
    bs_c, bs_r = np.zeros(nb, np.uint8), np.zeros(nb, np.uint8)
    comp.pack_bitset(np.array(values).astype(np.uint8), bs_c)
    ref.pack_bitset(np.array(values).astype(np.uint8), bs_r)
    assert bs_c.tobytes() == bs_r.tobytes()


@pytest.mark.parametrize(
    "bits, count", [(4, 2**62 + 1), (4, 2**62), (2, 2**62 + 1), (1, M), (4, M), (2, 2**61 + 3)]
)
def test_find_code_huge_count_refused(kernels, bits, count):
    """Issue 15: ``count * bits`` wrapped, so find_code(2**62 + 1 fields of 4 bits) passed the
    size check with one byte and read on past the input."""
    k = kernels("bitpack")
    src = np.zeros(1, np.uint8)  # no field equals code 1: the old loop kept reading
    assert outcome(k.find_code, src, bits, count, 1) == "ValueError"
    with pytest.raises(ValueError, match="src holds 1 bytes"):
        k.find_code(src, bits, count, 1)


def test_find_code_count_at_the_limit(kernels):
    k = kernels("bitpack")
    src = np.frombuffer(bytes.fromhex("0080"), np.uint8)
    assert k.find_code(src, 2, 8, 2) == 7
    assert k.find_code(src, 4, 4, 8) == 3
    with pytest.raises(ValueError, match="need 3"):
        k.find_code(src, 4, 5, 8)


HOSTILE = st.one_of(
    st.integers(-3, 20),
    st.sampled_from(
        [M, 2**62, 2**62 + 1, 2**61 + 1, 2**31 - 1, 2**31, -(2**31) - 1, -(2**63), 2**63, 2**64]
    ),
)


@given(st.binary(max_size=20), HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE)
def test_bitpack_hostile_differential(raw, bits, count, code, lo, hi):
    """Random (mostly invalid) bits, counts, codes and ranges: the same result or the same
    refusal (ValueError in the body, OverflowError for an int outside the C type)."""
    src = np.frombuffer(raw, np.uint8)
    n = count if 0 <= count <= 200 else 7

    def find(k):
        return k.find_code(src, bits, count, code)

    def unpack(k):
        a, b = np.zeros(n, np.uint8), np.zeros(n, np.int8)
        k.unpack_uint(src, bits, a)
        k.unpack_int(src, bits, b)
        return a.tolist(), b.tolist()

    def pack(k):
        # after a refusal (a value out of range: its index is returned) the output's
        # contents are unspecified, so they are compared only when both packs succeeded
        out = np.zeros(max(0, min(count, 30)), np.uint8)
        vals = np.frombuffer(raw, np.int8)
        bad_u = k.pack_uint(src, bits, out)
        bytes_u = out.tobytes() if bad_u == -1 else None
        bad_i = k.pack_int(vals, bits, lo, hi, out)
        return (bad_u, bytes_u, bad_i, out.tobytes() if bad_i == -1 else None)

    for call in (find, unpack, pack):
        differential("bitpack", call)


@given(st.binary(max_size=20), st.integers(0, 200), st.integers(0, 30))
def test_bitpack_wrong_sizes_differential(raw, n, nout):
    """Outputs of a wrong size: both implementations refuse (or agree on the result)."""
    src = np.frombuffer(raw, np.uint8)

    def call(k):
        a, b = np.zeros(n, np.uint8), np.zeros(n, np.int8)
        k.unpack_bitset(src, a)
        k.unpack_pm1(src, b)
        return a.tolist(), b.tolist()

    def pack(k):
        out = np.zeros(nout, np.uint8)
        r = k.pack_pm1(np.frombuffer(raw, np.int8), out)
        k.pack_bitset(src, out)
        return r, out.tobytes()

    differential("bitpack", call)
    differential("bitpack", pack)


@needs_compiled
@pytest.mark.parametrize("bits", [1, 2, 4])
def test_unpack_blocks_and_tails_at_every_alignment(bits):
    """The compiled unpack runs 16 source bytes at a time and the table loop does the tail:
    every length around the block edges, the source and the output at every misalignment,
    and partial last bytes, against the twin."""
    comp, ref = _kernels.load("bitpack", "compiled"), _kernels.load("bitpack", "reference")
    rng = np.random.default_rng(bits)
    per = 8 // bits
    buf = rng.integers(0, 256, 200, dtype=np.uint8)
    for skew in range(0, 17, 3):
        for nbytes in [*range(0, 50), 63, 64, 65, 127, 128, 129]:
            src = buf[skew : skew + nbytes]
            for n in {nbytes * per, max(nbytes * per - 1, 0), max(nbytes * per - per + 1, 0)}:
                for kind in ("uint", "int", "pm1"):
                    if kind == "pm1" and bits != 1:
                        continue
                    dt = np.uint8 if kind == "uint" else np.int8
                    big = np.zeros(n + 7, dt)
                    out = big[skew % 7 : skew % 7 + n]
                    getattr(comp, f"unpack_{kind}")(src, *(() if kind == "pm1" else (bits,)), out)
                    want = _unpack(ref, kind, bits, bytes(src), n)
                    assert out.tolist() == want.tolist(), (kind, skew, nbytes, n)
                    assert not big[: skew % 7].any() and not big[skew % 7 + n :].any()

"""dcbor kernel family: the strict deterministic-CBOR decoder, compiled vs reference.

Known answers for every rule on both implementations; every half-precision pattern and sampled
single/double patterns; Hypothesis values round-tripped through the encoder, then cut, edited
and extended: both implementations must give the same value or the same refusal (rule, offset
and detail), and a compiled call on random bytes must not crash the process.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from _kernels_isolated import differential, outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels
from tenfold._kernels._cbortypes import CborReject, Key
from tenfold.ztensor import _dcbor

DEPTH = 32


def result(k, data: bytes, max_depth: int = DEPTH) -> tuple:
    """What ``k.decode`` does, comparable across implementations (NaN-safe, by encoding)."""
    try:
        value = k.decode(data, max_depth)
    except CborReject as exc:
        return ("reject", exc.rule, exc.offset, exc.detail, str(exc))
    return ("ok", _dcbor.encode(value))


def both(data: bytes, max_depth: int = DEPTH) -> tuple:
    """The common outcome of the compiled and reference decoders (they must agree)."""
    impls = ["reference"] if _kernels.pure_python() else ["compiled", "reference"]
    got = {impl: result(_kernels.load("dcbor", impl), data, max_depth) for impl in impls}
    assert len(set(got.values())) == 1, f"{data.hex()}: {got}"
    return next(iter(got.values()))


@pytest.mark.parametrize(
    "hexdata, value",
    [
        ("00", 0),
        ("17", 23),
        ("1818", 24),
        ("19ffff", 65535),
        ("1bffffffffffffffff", 2**64 - 1),
        ("20", -1),
        ("3bffffffffffffffff", -(2**64)),
        ("3b7fffffffffffffff", -(2**63)),
        ("40", b""),
        ("4400010203", b"\x00\x01\x02\x03"),
        ("60", ""),
        ("62c3a9", "é"),
        ("7818" + "61" * 24, "a" * 24),
        ("80", []),
        ("8201820203", [1, [2, 3]]),
        ("a0", {}),
        ("a2616101616202", {"a": 1, "b": 2}),
        ("a26162016261610f", {"b": 1, "aa": 15}),
        ("f4", False),
        ("f5", True),
        ("f6", None),
        ("f93e00", 1.5),
        ("f97c00", math.inf),
        ("f98000", -0.0),
        ("fa47c35000", 100000.0),
        ("fb3ff199999999999a", 1.1),
    ],
)
def test_decode_known(kernels, hexdata, value):
    got = kernels("dcbor").decode(bytes.fromhex(hexdata), DEPTH)
    assert got == value and type(got) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, got) == math.copysign(1, value)


def test_decode_nan_and_non_text_keys(kernels):
    k = kernels("dcbor")
    assert math.isnan(k.decode(b"\xf9\x7e\x00", DEPTH))
    got = k.decode(bytes.fromhex("a3016161" + "626161" + "00" + "8101" + "02"), DEPTH)
    keys = list(got)
    assert keys[0] == Key(1, b"\x01") and keys[1] == "aa" and keys[2] == Key([1], b"\x81\x01")
    assert got[Key(1, b"\x01")] == "a" and got["aa"] == 0 and got[Key([1], b"\x81\x01")] == 2


@pytest.mark.parametrize(
    "hexdata, rule, offset, detail",
    [
        ("", "cbor-syntax", 0, "empty input"),
        ("0000", "cbor-syntax", 1, "1 trailing bytes after the item"),
        ("1805", "cbor-deterministic", 0, "non-shortest head: 5 encoded in 1 bytes"),
        ("190005", "cbor-deterministic", 0, "non-shortest head: 5 encoded in 2 bytes"),
        ("1a0000ffff", "cbor-deterministic", 0, "non-shortest head: 65535 encoded in 4 bytes"),
        (
            "1b00000000ffffffff",
            "cbor-deterministic",
            0,
            "non-shortest head: 4294967295 encoded in 8 bytes",
        ),
        ("19ff", "cbor-syntax", 0, "truncated head"),
        ("1c", "cbor-syntax", 0, "reserved additional information 28"),
        ("9f00ff", "cbor-syntax", 0, "indefinite length"),
        ("ff", "cbor-syntax", 0, "break code outside an indefinite item"),
        ("8100", None, None, None),
        ("82", "cbor-syntax", 0, "array of 2 items runs past the end"),
        ("8200", "cbor-syntax", 0, "array of 2 items runs past the end"),
        ("820000", None, None, None),
        ("81", "cbor-syntax", 0, "array of 1 items runs past the end"),
        ("8101", None, None, None),
        ("a1", "cbor-syntax", 0, "map of 1 pairs runs past the end"),
        ("a100", "cbor-syntax", 0, "map of 1 pairs runs past the end"),
        (
            "9bffffffffffffffff",
            "cbor-syntax",
            0,
            "array of 18446744073709551615 items runs past the end",
        ),
        (
            "5bffffffffffffffff00",
            "cbor-syntax",
            0,
            "string of 18446744073709551615 bytes runs past the end",
        ),
        ("6261", "cbor-syntax", 0, "string of 2 bytes runs past the end"),
        ("62fffe", "cbor-syntax", 0, "text string is not valid UTF-8"),
        ("7818" + "ff" * 24, "cbor-syntax", 0, "text string is not valid UTF-8"),
        ("a2616201616100", "cbor-deterministic", 4, "map key 'a' out of order"),
        ("a2616101616100", "cbor-duplicate-key", 4, "duplicate map key 'a'"),
        ("a2626161006162", "cbor-deterministic", 5, "map key 'b' out of order"),
        ("a201000100", "cbor-duplicate-key", 3, "duplicate map key 1"),
        ("c000", "cbor-syntax", 0, "tag 0 (tags are not allowed)"),
        ("d8ff00", "cbor-syntax", 0, "tag 255 (tags are not allowed)"),
        ("e0", "cbor-syntax", 0, "simple value 0 is not allowed"),
        ("f7", "cbor-syntax", 0, "simple value 23 is not allowed"),
        ("f820", "cbor-syntax", 0, "simple value 32 is not allowed"),
        ("f97e01", "cbor-deterministic", 0, "NaN other than f9 7e00"),
        ("f9fe00", "cbor-deterministic", 0, "NaN other than f9 7e00"),
        ("fa3fc00000", "cbor-deterministic", 0, "float 1.5 not in its shortest form"),
        ("fa7fc00000", "cbor-deterministic", 0, "float nan not in its shortest form"),
        ("fa7f800000", "cbor-deterministic", 0, "float inf not in its shortest form"),
        ("fb3ff8000000000000", "cbor-deterministic", 0, "float 1.5 not in its shortest form"),
        ("fb40f86a0000000000", "cbor-deterministic", 0, "float 100000.0 not in its shortest form"),
        ("fb8000000000000000", "cbor-deterministic", 0, "float -0.0 not in its shortest form"),
        ("81" * 33 + "00", "cbor-depth", 32, "nested deeper than 32 levels"),
        ("81" * 32 + "00", None, None, None),
        ("fb", "cbor-syntax", 0, "truncated head"),
    ],
)
def test_decode_refusals(kernels, hexdata, rule, offset, detail):
    k = kernels("dcbor")
    data = bytes.fromhex(hexdata)
    if rule is None:
        k.decode(data, DEPTH)  # accepted
        return
    with pytest.raises(CborReject) as ei:
        k.decode(data, DEPTH)
    assert ei.value.rule == rule
    if offset is not None:
        assert ei.value.offset == offset
    if detail is not None:
        assert ei.value.detail == detail
        assert str(ei.value) == f"{detail} at byte {offset}"


def test_decode_arguments(kernels):
    k = kernels("dcbor")
    for depth in (0, -1, 257):
        with pytest.raises(ValueError, match="max_depth"):
            k.decode(b"\x00", depth)
    with pytest.raises(OverflowError):
        k.decode(b"\x00", 2**40)
    with pytest.raises(TypeError):
        k.decode("text", DEPTH)
    # any C-contiguous bytes-like input, read-only too
    ro = np.frombuffer(b"\x82\x01\x02", np.uint8)
    assert k.decode(ro, DEPTH) == [1, 2]
    assert k.decode(memoryview(b"\x61a"), DEPTH) == "a"
    assert k.decode(bytearray(b"\x20"), DEPTH) == -1
    assert k.decode(b"\x81\x81\x00", 2) == [[0]]
    with pytest.raises(CborReject, match="nested deeper than 1 levels"):
        k.decode(b"\x81\x81\x00", 1)


def _float_heads() -> list[bytes]:
    out = [b"\xf9" + struct.pack(">H", h) for h in range(0, 65536, 1)]
    rng = np.random.default_rng(7)
    singles = rng.integers(0, 2**32, 3000, dtype=np.uint64).tolist()
    singles += [
        0x7F800000,
        0xFF800000,
        0x7FC00000,
        0x00000001,
        0x33800000,
        0x477FE000,
        0x477FF000,
        0x477FE001,
        0x38800000,
        0x387FC000,
        0x80000000,
        0x3F800001,
    ]
    out += [b"\xfa" + struct.pack(">I", s) for s in singles]
    doubles = rng.integers(0, 2**63, 3000, dtype=np.uint64).tolist()
    for x in (
        1.5,
        65504.0,
        65505.0,
        2**-24,
        2**-25,
        2**-149,
        2**-150,
        3.4028234663852886e38,
        3.4028235677973366e38,
        1e300,
        -1e-300,
        1.1,
        0.1,
        2**-14,
        2**-14 * (1 - 2**-10),
    ):
        doubles.append(struct.unpack(">Q", struct.pack(">d", x))[0])
        doubles.append(struct.unpack(">Q", struct.pack(">d", -x))[0])
    out += [b"\xfb" + struct.pack(">Q", d) for d in doubles]
    return out


def test_floats_differential():
    """Every half pattern and thousands of single/double patterns: both implementations
    accept the same ones (each float in its narrowest exact width) with the same value."""
    accepted = 0
    for data in _float_heads():
        got = both(data)
        if got[0] == "ok":
            accepted += 1
            assert got[1] == data  # what is accepted is exactly the canonical encoding
    assert accepted > 60000


def _values() -> st.SearchStrategy:
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**64), 2**64 - 1),
        st.floats(allow_nan=True, width=64),
        st.floats(width=32),
        st.floats(width=16),
        st.text(max_size=12),
        st.binary(max_size=12),
    )
    return st.recursive(
        leaves,
        lambda kids: st.one_of(
            st.lists(kids, max_size=4),
            st.dictionaries(st.text(max_size=6), kids, max_size=4),
            st.dictionaries(st.integers(-30, 30), kids, max_size=3),
        ),
        max_leaves=24,
    )


@given(_values(), st.data())
def test_decode_differential(value, data):
    """Encoded values decode to themselves on both; cut, edited or extended copies give the
    same value or the same refusal on both (compiled vs reference)."""
    raw = _dcbor.encode(value)
    assert both(raw) == ("ok", raw)
    blob = bytearray(raw)
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    tail = data.draw(st.binary(max_size=3))
    both(bytes(blob[:cut]) + tail)
    both(bytes(blob), data.draw(st.integers(1, 6)))


@given(st.binary(max_size=64))
def test_decode_random_bytes_differential(data):
    both(data)


def test_decode_never_crashes():
    """Compiled calls on 20000 random and mutated inputs end (a value or CborReject) in a
    forked child: never a signal or a hang."""
    if _kernels.pure_python():
        pytest.skip("the compiled kernel is not in use (TENFOLD_PUREPYTHON=1)")
    k = _kernels.load("dcbor", "compiled")
    rng = np.random.default_rng(11)
    seed = _dcbor.encode({"objects": {"w": {"shape": [2, 3], "blob": [4096, 24]}, "x": [1.5]}})
    inputs = [rng.bytes(int(rng.integers(1, 64))) for _ in range(10000)]
    for _ in range(10000):
        b = bytearray(seed)
        for _ in range(int(rng.integers(1, 4))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        inputs.append(bytes(b[: int(rng.integers(1, len(b) + 1))]))

    def call(batch: list[bytes]) -> None:
        for b in batch:
            try:
                k.decode(b, DEPTH)
            except CborReject:
                pass

    assert outcome(call, inputs) == "ok"


def test_decode_argument_differential():
    for args in [(b"\x00", 0), (b"\x00", 300), (b"", 5), (b"\x00", -(2**70)), ("x", 3)]:

        def call(k, args=args):
            try:
                return k.decode(*args)
            except CborReject as exc:
                return exc.rule

        differential("dcbor", call)

"""Reed-Solomon kernel family ``rs``: known answers, reedsolo peer, compiled vs reference."""

from __future__ import annotations

import numpy as np
import pytest
from _kernels_isolated import differential
from hypothesis import given, settings
from hypothesis import strategies as st

from tenfold import _kernels


def _parity_len(n: int, nsym: int) -> int:
    return -(-n // (255 - nsym)) * nsym


def _encode(mod, data: bytes | np.ndarray, nsym: int) -> np.ndarray:
    buf = np.frombuffer(bytes(data), np.uint8)
    out = np.zeros(_parity_len(buf.size, nsym), np.uint8)
    mod.encode_blocks(buf, nsym, out)
    return out


def _damage(rng, data, parity, nsym, nerr):
    """Flip ``nerr`` distinct symbols (data or parity) in every block, in place."""
    k = 255 - nsym
    nblocks = parity.size // nsym
    for b in range(nblocks):
        blen = min(k, data.size - b * k)
        for q in rng.choice(blen + nsym, size=min(nerr, blen + nsym), replace=False):
            flip = rng.integers(1, 256, dtype=np.uint8)
            if q < blen:
                data[b * k + q] ^= flip
            else:
                parity[b * nsym + q - blen] ^= flip


# reedsolo.RSCodec(nsym).encode(data)[len(data):] for one block
@pytest.mark.parametrize(
    "data_hex, nsym, parity_hex",
    [
        ("313233343536373839", 2, "4170"),
        ("313233343536373839", 8, "0e38e1207f6ec81f"),
        ("68656c6c6f20776f726c64", 16, "6740a6899b2716f16ca0a50be8f82120"),
        (
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f2021222324252627",
            32,
            "ed3115c135f89e46b473cc45d16cd71d8cad85c90b96fac0b0eb870874403f31",
        ),
        ("0000000000", 4, "00000000"),
        ("ff", 3, "c793ab"),
    ],
)
def test_rs_known_answers(kernels, data_hex, nsym, parity_hex):
    rs = kernels("rs")
    assert _encode(rs, bytes.fromhex(data_hex), nsym).tobytes().hex() == parity_hex


def test_rs_empty_and_layout(kernels):
    rs = kernels("rs")
    assert _encode(rs, b"", 32).size == 0
    ne = np.zeros(0, np.int32)
    assert rs.decode_blocks(np.zeros(0, np.uint8), np.zeros(0, np.uint8), 32, ne) == 0
    # 3000 bytes with rs(32): 14 blocks (13 full, one of 101 bytes), 448 parity bytes
    data = np.random.default_rng(3).integers(0, 256, 3000, dtype=np.uint8)
    par = _encode(rs, data, 32)
    assert par.size == 448
    # each block's parity is the parity of that block alone
    last = _encode(rs, data[13 * 223 :], 32)
    assert par[-32:].tobytes() == last.tobytes()


@pytest.mark.parametrize("nsym", [0, 1, 255, 300])
def test_rs_rejects_bad_nsym(kernels, nsym):
    with pytest.raises(ValueError, match="nsym"):
        kernels("rs").encode_blocks(b"abc", nsym, np.zeros(8, np.uint8))


def test_rs_rejects_bad_lengths(kernels):
    rs = kernels("rs")
    with pytest.raises(ValueError, match="parity_out"):
        rs.encode_blocks(b"abc", 32, np.zeros(31, np.uint8))
    data = np.zeros(300, np.uint8)
    with pytest.raises(ValueError, match="parity"):
        rs.decode_blocks(data, np.zeros(32, np.uint8), 32, np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="nerr_out"):
        rs.decode_blocks(data, np.zeros(64, np.uint8), 32, np.zeros(1, np.int32))
    with pytest.raises(ValueError, match="bad_out"):
        rs.check_blocks(data, np.zeros(64, np.uint8), 32, np.zeros(3, np.int32))


def test_rs_accepts_readonly_input(kernels):
    rs = kernels("rs")
    a = np.arange(500, dtype=np.uint16).astype(np.uint8)
    a.flags.writeable = False
    par = _encode(rs, a.tobytes(), 16)
    out = np.zeros_like(par)
    rs.encode_blocks(a, 16, out)
    assert (out == par).all()
    bad = np.zeros(par.size // 16, np.int32)
    assert rs.check_blocks(a, memoryview(par.tobytes()), 16, bad) == 0


@pytest.mark.parametrize("nsym", [2, 3, 16, 32, 64, 101, 254])
def test_rs_corrects_up_to_capacity(kernels, nsym):
    rs = kernels("rs")
    rng = np.random.default_rng(nsym)
    k = 255 - nsym
    n = 2 * k + max(1, k // 3)
    data = rng.integers(0, 256, n, dtype=np.uint8)
    par = _encode(rs, data, nsym)
    d2, p2 = data.copy(), par.copy()
    _damage(rng, d2, p2, nsym, nsym // 2)
    ne = np.zeros(par.size // nsym, np.int32)
    bad = np.zeros_like(ne)
    assert rs.check_blocks(d2, p2, nsym, bad) == ne.size
    assert rs.decode_blocks(d2, p2, nsym, ne) == 0
    assert ne.tolist() == [nsym // 2] * ne.size
    assert (d2 == data).all() and (p2 == par).all()


@pytest.mark.parametrize("nerr", [17, 20, 40, 100])
def test_rs_beyond_capacity_never_silently_wrong(kernels, nerr):
    """Beyond N/2 errors a block is reported (-1, left unchanged) or lands on a codeword."""
    rs = kernels("rs")
    rng = np.random.default_rng(nerr)
    data = rng.integers(0, 256, 223 * 4, dtype=np.uint8)
    par = _encode(rs, data, 32)
    d2, p2 = data.copy(), par.copy()
    _damage(rng, d2, p2, 32, nerr)
    d3, p3 = d2.copy(), p2.copy()
    ne = np.zeros(4, np.int32)
    n_bad = rs.decode_blocks(d2, p2, 32, ne)
    assert n_bad == int((ne < 0).sum())
    for b in range(4):
        sl, sp = slice(b * 223, (b + 1) * 223), slice(b * 32, (b + 1) * 32)
        if ne[b] < 0:
            assert (d2[sl] == d3[sl]).all() and (p2[sp] == p3[sp]).all()
        else:  # a miscorrection can only produce another codeword; the CRC layer catches it
            assert rs.check_blocks(d2[sl], p2[sp], 32, np.zeros(1, np.int32)) == 0
    assert n_bad >= 1


@pytest.mark.peer
def test_rs_matches_reedsolo_multiblock(kernels):
    reedsolo = pytest.importorskip(
        "reedsolo", reason="reedsolo (the reference codec) not installed"
    )
    rs = kernels("rs")
    rng = np.random.default_rng(7)
    for nsym in (16, 32, 64):
        k = 255 - nsym
        data = rng.integers(0, 256, 3 * k + 50, dtype=np.uint8)
        par = _encode(rs, data, nsym)
        codec = reedsolo.RSCodec(nsym)
        for b in range(4):
            block = bytes(data[b * k : (b + 1) * k])
            assert (
                bytes(codec.encode(block))[len(block) :] == par[b * nsym : (b + 1) * nsym].tobytes()
            )


@pytest.mark.peer
@settings(max_examples=40)
@given(st.data())
def test_rs_decode_matches_reedsolo(data):
    reedsolo = pytest.importorskip(
        "reedsolo", reason="reedsolo (the reference codec) not installed"
    )
    rs = _kernels.load("rs")
    nsym = data.draw(st.integers(2, 80), label="nsym")
    k = 255 - nsym
    msg = np.frombuffer(data.draw(st.binary(min_size=1, max_size=k), label="msg"), np.uint8)
    par = _encode(rs, msg, nsym)
    cw = bytearray(msg.tobytes() + par.tobytes())
    nerr = data.draw(st.integers(0, nsym // 2), label="nerr")
    pos = data.draw(
        st.lists(st.integers(0, len(cw) - 1), min_size=nerr, max_size=nerr, unique=True),
        label="pos",
    )
    for q in pos:
        cw[q] ^= data.draw(st.integers(1, 255))
    expected = bytes(reedsolo.RSCodec(nsym).decode(bytes(cw))[0])
    d2 = np.frombuffer(bytes(cw[: msg.size]), np.uint8).copy()
    p2 = np.frombuffer(bytes(cw[msg.size :]), np.uint8).copy()
    ne = np.zeros(1, np.int32)
    assert rs.decode_blocks(d2, p2, nsym, ne) == 0
    assert d2.tobytes() == expected == msg.tobytes()
    assert ne[0] == nerr


@settings(max_examples=60)
@given(st.data())
def test_rs_differential_compiled_vs_reference(data):
    if _kernels.pure_python():
        pytest.skip("compiled kernels disabled by TENFOLD_PUREPYTHON")
    comp, ref = _kernels.load("rs", "compiled"), _kernels.load("rs", "reference")
    nsym = data.draw(st.integers(2, 254), label="nsym")
    k = 255 - nsym
    msg = np.frombuffer(data.draw(st.binary(max_size=3 * k + 5), label="msg"), np.uint8)
    p1, p2 = _encode(comp, msg, nsym), _encode(ref, msg, nsym)
    assert p1.tobytes() == p2.tobytes()
    if msg.size == 0:
        return
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    nerr = data.draw(st.integers(0, nsym), label="nerr")  # up to twice the capacity
    d1, q1 = msg.copy(), p1.copy()
    _damage(np.random.default_rng(seed), d1, q1, nsym, nerr)
    d2, q2 = d1.copy(), q1.copy()
    n1 = np.zeros(p1.size // nsym, np.int32)
    n2 = np.zeros_like(n1)
    assert comp.decode_blocks(d1, q1, nsym, n1) == ref.decode_blocks(d2, q2, nsym, n2)
    assert n1.tolist() == n2.tolist()
    assert d1.tobytes() == d2.tobytes() and q1.tobytes() == q2.tobytes()
    if nerr <= nsym // 2:
        assert d1.tobytes() == msg.tobytes()


HOSTILE_NSYM = st.one_of(
    st.integers(-2, 260), st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63, 2**64])
)


@given(st.binary(max_size=600), HOSTILE_NSYM, st.integers(0, 80), st.integers(0, 5), st.booleans())
def test_rs_hostile_differential(raw, nsym, npar, nout, exact):
    """Any nsym and output sizes (exact or not): the same parity, corrections and counts, or
    the same refusal from both implementations."""
    data = np.frombuffer(raw, np.uint8)
    if exact and 2 <= nsym <= 254:
        npar = _parity_len(data.size, nsym)
        nout = npar // nsym

    def encode(k):
        out = np.zeros(npar, np.uint8)
        k.encode_blocks(data, nsym, out)
        return out.tobytes()

    def check(k):
        bad = np.zeros(nout, np.int32)
        par = np.arange(npar, dtype=np.uint8)
        return k.check_blocks(data, par, nsym, bad), bad.tolist()

    def decode(k):
        d, p = data.copy(), np.arange(npar, dtype=np.uint8)
        ne = np.zeros(nout, np.int32)
        return k.decode_blocks(d, p, nsym, ne), ne.tolist(), d.tobytes(), p.tobytes()

    for call in (encode, check, decode):
        differential("rs", call)

"""zt01idx: the common case of a zTensor 0.1.0 index, straight from its CBOR bytes.

The kernel accepts an index whose every entry is a well-formed dense tensor and declines
(returns None) anything else; tests/ztensor/test_ztensor_index_kernel.py checks that what it
accepts is exactly what the full parse gives.
"""

from __future__ import annotations

import numpy as np
import pytest
from _kernels_isolated import differential, outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels
from tenfold.core import cbor

DTYPES = {n: (n, np.dtype(d)) for n, d in [("float32", "<f4"), ("float64", "<f8"), ("uint8", "u1")]}
START = 1 << 20


def rec(*fields):
    return fields


def parse(k, raw: bytes, start: int = START, objects: int = 1000, ndim: int = 8, nbytes=1 << 40):
    return k.parse_dense(raw, start, objects, ndim, nbytes, DTYPES, rec)


def ent(name="a", offset=64, shape=(2, 3), dtype="float32", encoding="raw", **extra):
    size = int(np.prod(shape)) * (np.dtype(DTYPES[dtype][1]).itemsize if dtype in DTYPES else 4)
    e = {"name": name, "offset": offset, "size": size, "dtype": dtype, "shape": list(shape),
         "encoding": encoding}  # fmt: skip
    e.update(extra)
    return e


def expected(pos, e):
    return (e["name"], e["dtype"], DTYPES[e["dtype"]][1], tuple(e["shape"]), "dense",
            e["encoding"], e["offset"], e["size"], e.get("data_endianness", "little"), None,
            None, None, None, None, {}, {}, pos)  # fmt: skip


def test_parse_dense_known(kernels):
    k = kernels("zt01idx")
    es = [ent("a", 64), ent("b", 128, (4,), "float64", layout="dense", data_endianness="big"),
          ent("c", 192, (), "uint8", "zstd", size=9)]  # fmt: skip
    for indef in (False, True):
        got = parse(k, cbor.encode(es, indefinite_maps=indef))
        assert got == ([expected(i, e) for i, e in enumerate(es)], True)


def test_parse_dense_indefinite_and_long_heads(kernels):
    k = kernels("zt01idx")
    one = cbor.encode(ent("a", 64))
    # an indefinite outer array, and a definite one with a non-shortest (2-byte) count
    assert parse(k, b"\x9f" + one + b"\xff") == ([expected(0, ent("a", 64))], True)
    assert parse(k, b"\x99\x00\x01" + one) == ([expected(0, ent("a", 64))], True)
    # offset 64 written as a 4-byte head; shape as an indefinite array
    e = ent("a", 64, (2,))
    body = cbor.encode({k_: v for k_, v in e.items() if k_ not in ("offset", "shape")})
    body = bytes([body[0] + 2]) + body[1:]  # two more pairs
    raw = b"\x81" + body + cbor.encode("offset") + b"\x1a\x00\x00\x00\x40"
    raw += cbor.encode("shape") + b"\x9f\x02\xff"
    assert parse(k, raw) == ([expected(0, e)], True)
    assert parse(k, b"\x80") == ([], True)
    assert parse(k, b"\x9f\xff") == ([], True)


def test_parse_dense_unordered_blobs(kernels):
    k = kernels("zt01idx")
    assert parse(k, cbor.encode([ent("a", 128), ent("b", 64)]))[1] is False
    assert (
        parse(k, cbor.encode([ent("a", 64), ent("b", 64, (0,), encoding="zstd", size=0)])) is None
    )
    zero = ent("z", 0, (1,), "uint8", "zstd", size=0)  # empty blob: not an overlap
    assert parse(k, cbor.encode([ent("a", 64), zero, ent("b", 128)]))[1] is True


def _raw(*items) -> bytes:
    return b"".join(i if isinstance(i, bytes) else cbor.encode(i) for i in items)


DECLINED = {
    "missing name": cbor.encode([{k: v for k, v in ent().items() if k != "name"}]),
    "missing encoding": cbor.encode([{k: v for k, v in ent().items() if k != "encoding"}]),
    "negative offset": cbor.encode([ent(offset=-64)]),
    "bool size": cbor.encode([ent(size=True)]),
    "float offset": cbor.encode([ent(offset=64.0)]),
    "text size": cbor.encode([ent(size="24")]),
    "bytes name": cbor.encode([ent(name=b"a")]),
    "unknown key": cbor.encode([ent(checksum="crc32c:0x00000000")]),
    "sparse layout": cbor.encode([ent(layout="sparse")]),
    "unknown encoding": cbor.encode([ent(encoding="gzip")]),
    "unknown endianness": cbor.encode([ent(data_endianness="middle")]),
    "unknown dtype": cbor.encode([ent(dtype="float8")]),
    "zero dim": cbor.encode([ent(shape=(0, 3), size=0)]),
    "negative dim": cbor.encode([ent(shape=(2,), size=8) | {"shape": [-2]}]),
    "size mismatch": cbor.encode([ent(size=25)]),
    "misaligned": cbor.encode([ent(offset=96)]),
    "over the magic": cbor.encode([ent(offset=0)]),
    "into the index": cbor.encode([ent(offset=START - 16)]),
    "duplicate name": cbor.encode([ent("a", 64), ent("a", 128)]),
    "too many dims": cbor.encode([ent(shape=(1,) * 9)]),
    "too many dims, indefinite": _raw(
        b"\x81\xa6",
        *[x for kv in ent().items() if kv[0] != "shape" for x in kv],
        "shape",
        b"\x9f" + b"\x01" * 9 + b"\xff",
    ),  # fmt: skip
    "too many entries": cbor.encode([ent(f"t{i}", 64 * (i + 1)) for i in range(1001)]),
    "too big": cbor.encode([ent(shape=(1 << 20, 1 << 20), size=1 << 42)]),
    "huge dims": cbor.encode([ent(shape=(1 << 63, 1 << 63, 0), size=0)]),
    "not an array": cbor.encode({"a": 1}),
    "entry not a map": cbor.encode([[1, 2]]),
    "tagged offset": _raw(
        b"\x81\xa6",
        *[x for kv in ent().items() if kv[0] != "offset" for x in kv],
        "offset",
        b"\xc2\x41\x40",
    ),  # fmt: skip
    "duplicate key": _raw(b"\x81\xa7", *[x for kv in ent().items() for x in kv], "size", 24),
    "non-text key": _raw(b"\x81\xa7", *[x for kv in ent().items() for x in kv], 1, 2),
    "invalid utf-8 name": _raw(
        b"\x81\xa6",
        *[x for kv in ent().items() if kv[0] != "name" for x in kv],
        "name",
        b"\x62\xc3\x28",
    ),  # fmt: skip
    "trailing byte": cbor.encode([ent()]) + b"\x00",
    "truncated": cbor.encode([ent()])[:-1],
    "reserved head": b"\x81\xa1\x64name\x7c",
    "indefinite text": b"\x81\xa1\x64name\x7f\x61a\xff",
    "empty": b"",
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_parse_dense_declines(kernels, case):
    assert parse(kernels("zt01idx"), DECLINED[case]) is None


def test_parse_dense_limits(kernels):
    k = kernels("zt01idx")
    raw = cbor.encode([ent("a", 64, (2, 3)), ent("b", 128)])
    assert parse(k, raw, objects=2) is not None
    assert parse(k, raw, objects=1) is None
    assert parse(k, raw, ndim=2) is not None
    assert parse(k, raw, ndim=1) is None
    assert parse(k, raw, nbytes=24) is not None
    assert parse(k, raw, nbytes=23) is None
    assert parse(k, raw, start=128 + 24) is not None
    assert parse(k, raw, start=128 + 23) is None


def test_parse_dense_accepts_buffers(kernels):
    k = kernels("zt01idx")
    raw = cbor.encode([ent()])
    a = np.frombuffer(raw, np.uint8)
    assert parse(k, a) == parse(k, memoryview(raw)) == parse(k, bytearray(raw)) == parse(k, raw)


@st.composite
def indexes(draw):
    es = []
    for i in range(draw(st.integers(0, 5))):
        dtype = draw(st.sampled_from([*DTYPES, "int4"]))
        shape = draw(st.lists(st.integers(0, 5), max_size=4))
        e = ent(draw(st.sampled_from("abc")) + str(i % 3), 64 * draw(st.integers(0, 40)),
                shape, dtype, draw(st.sampled_from(["raw", "zstd", "lz4"])))  # fmt: skip
        if draw(st.booleans()):
            e["size"] += draw(st.integers(-2, 2))
        if draw(st.booleans()):
            e["layout"] = draw(st.sampled_from(["dense", "sparse"]))
        if draw(st.booleans()):
            e["data_endianness"] = draw(st.sampled_from(["little", "big"]))
        es.append(e)
    return cbor.encode(es, indefinite_maps=draw(st.booleans()))


@given(indexes(), st.integers(0, 4096), st.data())
def test_parse_dense_differential(raw, start, data):
    """Generated indexes, then byte edits and cuts: compiled and reference agree exactly."""
    differential("zt01idx", lambda k: parse(k, raw, start))
    blob = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    differential("zt01idx", lambda k: parse(k, bytes(blob), start))
    cut = bytes(blob[: data.draw(st.integers(0, len(blob)))])
    differential("zt01idx", lambda k: parse(k, cut, start, ndim=2))


def test_parse_dense_argument_differential():
    raw = cbor.encode([ent()])
    for args in [
        (raw, -1, 10, 8, 1 << 40, DTYPES, rec),
        (raw, START, -1, 8, 1 << 40, DTYPES, rec),
        (raw, START, 10, 8, 1 << 64, DTYPES, rec),
        (raw, START, 10, 8, 1 << 40, None, rec),
        (raw, START, 10, 8, 1 << 40, [], rec),
        (raw, START, 10, 8, 0, DTYPES, rec),
        ("text", START, 10, 8, 1 << 40, DTYPES, rec),
    ]:
        differential("zt01idx", lambda k, args=args: k.parse_dense(*args))


def test_parse_dense_never_crashes():
    """Compiled parses of thousands of mutated and cut indexes end in a forked child."""
    if _kernels.pure_python():
        pytest.skip("the compiled kernel is not in use (TENFOLD_PUREPYTHON=1)")
    k = _kernels.load("zt01idx", "compiled")
    seed = cbor.encode([ent("a", 64, (2, 3)), ent("b", 128, (5,), "float64", "zstd", size=7)],
                       indefinite_maps=True)  # fmt: skip
    rng = np.random.default_rng(13)
    inputs = []
    for _ in range(20000):
        b = bytearray(seed)
        for _ in range(int(rng.integers(1, 4))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        inputs.append(bytes(b[: int(rng.integers(0, len(b) + 1))]))

    def call(batch: list[bytes]) -> None:
        for b in batch:
            parse(k, b)
            parse(k, b, start=2**64 - 1, nbytes=2**64 - 1)

    assert outcome(call, inputs) == "ok"


def test_parse_dense_fields_without_make(kernels):
    """make=None: each record is the compact tuple (name, dtype, np_dtype, shape, encoding,
    offset, size, endianness, position) of the fields make would have been given."""
    k = kernels("zt01idx")
    es = [
        ent("a", 64),
        ent("b", 128, (4,), "float64", encoding="zstd", size=9),
        ent("c", 192, (3,), "float64", data_endianness="big"),
        ent("d", 256, (2,), "uint8"),
    ]
    raw = cbor.encode(es)
    recs, ordered = k.parse_dense(raw, START, 1000, 8, 1 << 40, DTYPES, None)
    full, ordered2 = parse(k, raw)
    assert ordered and ordered2
    assert recs == [(f[0], f[1], f[2], f[3], f[5], f[6], f[7], f[8], f[16]) for f in full]
    assert recs[2][7] == "big" and recs[1][4] == "zstd" and recs[3][2] == np.dtype("u1")
    assert differential(
        "zt01idx", lambda m: m.parse_dense(raw, START, 10, 8, 1 << 40, DTYPES, None)
    )

"""Hypothesis: random GGUF files read back exactly what was built (metadata values and types,
tensors' dtypes, shapes and bytes), and any mutation of one (a field set to a random value, a
byte flipped, a cut) is either a tenfold error naming its format and object, or a file whose
every tensor is the bytes at its range inside the file."""

from __future__ import annotations

import math
import os
import struct
import tempfile

import numpy as np
from _gguf_files import ARR, BOOL, F32, F64, I8, I16, I32, I64, STR, U8, U16, U32, U64, build
from hypothesis import given
from hypothesis import strategies as st

from tenfold.errors import TenfoldError
from tenfold.formats.gguf import Reader

_INTS = {U8: (0, 255), I8: (-128, 127), U16: (0, 65535), I16: (-32768, 32767),
         U32: (0, 2**32 - 1), I32: (-(2**31), 2**31 - 1), U64: (0, 2**64 - 1),
         I64: (-(2**63), 2**63 - 1)}  # fmt: skip
_NAMES = {U8: "uint8", I8: "int8", U16: "uint16", I16: "int16", U32: "uint32", I32: "int32",
          F32: "float32", BOOL: "bool", STR: "string", U64: "uint64", I64: "int64",
          F64: "float64"}  # fmt: skip
#: unquantised tensor types: code -> dtype
_DTYPES = {0: "<f4", 1: "<f2", 28: "<f8", 24: "i1", 25: "<i2", 26: "<i4", 27: "<i8"}
#: quantised: code -> (block, bytes)
_QUANT = {2: (32, 18), 8: (32, 34), 12: (256, 144), 23: (256, 136)}


def _scalar(t):
    if t in _INTS:
        return st.integers(*_INTS[t])
    if t == BOOL:
        return st.integers(0, 1)
    if t == STR:
        return st.text(max_size=8)
    width = 32 if t == F32 else 64
    return st.floats(allow_nan=False, width=width)


@st.composite
def _kv(draw, i):
    t = draw(st.sampled_from(sorted(_NAMES)) | st.just(ARR))
    key = f"k{i}." + draw(st.text("abc_.", max_size=6))
    if t != ARR:
        return (key, t, draw(_scalar(t)))
    et = draw(st.sampled_from(sorted(_NAMES)))
    if draw(st.booleans()):  # nested one level
        return (key, ARR, draw(st.lists(st.lists(_scalar(et), max_size=3), max_size=3)), (ARR, et))
    return (key, ARR, draw(st.lists(_scalar(et), max_size=5)), et)


@st.composite
def _tensor(draw, i):
    code = draw(st.sampled_from(sorted(_DTYPES) + sorted(_QUANT)))
    ndim = draw(st.integers(0 if code in _DTYPES else 1, 3))
    ne = [draw(st.integers(0, 4)) for _ in range(ndim)]
    if code in _QUANT:
        ne[0] = _QUANT[code][0] * draw(st.integers(0, 2))
        nbytes = math.prod(ne) // _QUANT[code][0] * _QUANT[code][1]
    else:
        nbytes = math.prod(ne) * np.dtype(_DTYPES[code]).itemsize
    return (f"t{i}", tuple(ne), code, draw(st.binary(min_size=nbytes, max_size=nbytes)))


@st.composite
def _file(draw):
    kvs = [draw(_kv(i)) for i in range(draw(st.integers(0, 4)))]
    tensors = [draw(_tensor(i)) for i in range(draw(st.integers(0, 4)))]
    alignment = draw(st.sampled_from([1, 8, 32, 64]))
    if alignment != 32 or draw(st.booleans()):
        kvs.append(("general.alignment", U32, alignment))
    return kvs, tensors, alignment


def _expected(v, t, et):
    if t == BOOL:
        return bool(v)
    if t == F32:
        return float(np.float32(v))
    if t == ARR:
        inner, sub = et if isinstance(et, tuple) else (et, None)
        return [_expected(x, inner, sub) for x in v]
    return v


def _type_name(t, et):
    if t != ARR:
        return _NAMES[t]
    inner, sub = et if isinstance(et, tuple) else (et, None)
    return f"array[{_type_name(inner, sub)}]"


@given(_file(), st.sampled_from([2, 3]))
def test_random_files_read_back_exactly(spec, version):
    kvs, tensors, alignment = spec
    b = build(kvs, tensors, version=version, alignment=alignment)
    with Reader(b.data) as r:
        assert r.version == version and r.alignment == alignment
        assert list(r.metadata) == [kv[0] for kv in kvs]
        for kv in kvs:
            key, t, v = kv[:3]
            et = kv[3] if len(kv) > 3 else None
            assert r.metadata[key] == _expected(v, t, et), key
            if not (t == ARR and isinstance(et, tuple) and not v):  # [] of arrays: untyped
                assert r.metadata_type(key) == _type_name(t, et), key
        assert list(r) == [t[0] for t in tensors]
        for name, ne, code, data in tensors:
            got = r[name]
            if code in _DTYPES:
                assert got.dtype == np.dtype(_DTYPES[code]) and got.shape == ne[::-1]
            else:
                assert got.dtype.itemsize == _QUANT[code][1]
                assert got.shape == (*ne[::-1][:-1], ne[0] // _QUANT[code][0])
            assert got.tobytes() == data, name


_MUTATIONS = st.one_of(
    st.tuples(
        st.just("set"),
        st.integers(0, 10**6),
        st.sampled_from(["<B", "<I", "<Q"]),
        st.integers(0, 2**64 - 1),
    ),  # fmt: skip
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(st.just("cut"), st.integers(0, 10**6)),
)


@given(_file(), st.lists(_MUTATIONS, min_size=1, max_size=3), st.booleans())
def test_mutated_files_are_refused_or_consistent(spec, mutations, mapped):
    kvs, tensors, alignment = spec
    b = build(kvs, tensors, alignment=alignment)
    data = bytearray(b.data)
    for m in mutations:
        if not data:
            break
        if m[0] == "set":
            fmt = m[2]
            size = struct.calcsize(fmt)
            if len(data) < size:
                continue
            at = m[1] % (len(data) - size + 1)
            struct.pack_into(fmt, data, at, m[3] % (1 << (8 * size)))
        elif m[0] == "flip":
            data[m[1] % len(data)] ^= 1 << m[2]
        else:
            del data[m[1] % (len(data) + 1) :]
    raw = bytes(data)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f.gguf")
        with open(path, "wb") as f:
            f.write(raw)
        try:
            r = Reader(path, mmap=mapped)
        except TenfoldError as exc:
            assert exc.fmt == "gguf" and exc.obj, exc
            return
        _consistent(r, raw)


def _consistent(r, raw):
    with r:
        ends = []
        for name in r:
            info = r.info(name)
            lo, hi = info.byte_range
            assert 0 <= lo <= hi <= len(raw) and lo % r.alignment == 0
            assert r.read_raw(name).tobytes() == raw[lo:hi]
            assert r[name].tobytes() == raw[lo:hi]
            ends.append((lo, hi))
        ends = sorted(e for e in ends if e[1] > e[0])
        for (_, hi), (lo, _) in zip(ends, ends[1:], strict=False):
            assert lo >= hi  # no two tensors share a byte
        assert r.verify().ok

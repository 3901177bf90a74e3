"""The zTensor 0.1.0 index: the kernel's common case (``zt01idx``) against the full parse.

``parse_index`` lets the kernel parse an index of well-formed dense entries and falls back to
``parse_index_full`` for anything else. For every index, valid or not, both must give the same
records or raise the same error class with the same message (naming field and offset).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenfold import _kernels
from tenfold.core import cbor
from tenfold.core.bounds import DEFAULT_LIMITS, Limits
from tenfold.errors import FormatError, TenfoldError
from tenfold.ztensor import _index

START = 1 << 16


@pytest.fixture
def use_impl(impl, monkeypatch):
    """parse_index with the ``impl`` kernel (compiled or reference)."""
    if impl == "compiled" and _kernels.pure_python():
        pytest.skip("the compiled kernel is not in use (TENFOLD_PUREPYTHON=1)")
    monkeypatch.setattr(_index, "_KERNEL", _kernels.load("zt01idx", impl))
    return impl


def result(fn, raw, start=START, limits=DEFAULT_LIMITS):
    try:
        return ("ok", fn(raw, start, limits))
    except TenfoldError as exc:
        return (type(exc).__name__, str(exc))


def _table(raw, start, limits):
    """parse_index_table's records, each built from the kernel's fields when asked for."""
    table = _index.parse_index_table(raw, start, limits)
    assert list(table) == [i.name for i in table.values()]
    return list(table.values())


def same(raw, start=START, limits=DEFAULT_LIMITS):
    """parse_index, parse_index_table and parse_index_full agree on ``raw``; returns the
    outcome."""
    fast = result(_index.parse_index, raw, start, limits)
    full = result(_index.parse_index_full, raw, start, limits)
    assert fast == full
    assert result(_table, raw, start, limits) == full
    return fast


def ent(name="a", offset=64, shape=(2, 3), dtype="float32", encoding="raw", **extra):
    size = int(np.prod(shape)) * _index._NP[dtype].itemsize if dtype in _index._NP else 4
    e = {"name": name, "offset": offset, "size": size, "dtype": dtype, "shape": list(shape),
         "encoding": encoding}  # fmt: skip
    e.update(extra)
    return e


def test_kernel_takes_the_common_case(use_impl, monkeypatch):
    """A well-formed dense index is parsed by the kernel alone (the full parse is not run)."""
    raw = cbor.encode([ent("a", 64), ent("b", 128, (4,), "bfloat16", data_endianness="big")])
    want = _index.parse_index_full(raw, START)
    monkeypatch.setattr(_index, "parse_index_full", None)
    assert _index.parse_index(raw, START) == want
    assert want[1].np_dtype == _index._NP["bfloat16"] and want[1].index_position == 1


def test_overlap_found_after_the_kernel(use_impl, monkeypatch):
    """Entries the kernel accepts whose blobs overlap out of order: the same error."""
    raw = cbor.encode([ent("a", 192), ent("b", 64, (40,))])
    kind, msg = same(raw)
    assert kind == "FormatError" and "overlaps the data blob of tensor 'b'" in msg
    with pytest.raises(FormatError, match="tensor 'a' at offset 0xc0: data blob: overlaps"):
        _index.parse_index(raw, START)
    in_order = cbor.encode([ent("a", 64, (40,)), ent("b", 192)])
    assert same(in_order)[0] == "FormatError"


HOSTILE = [
    [ent(), ent()],  # duplicate name
    [ent(offset=96)],
    [ent(offset=0)],
    [ent(offset=START - 16)],
    [ent(size=25)],
    [ent(shape=(0, 3), size=0)],
    [ent(shape=(0, 1 << 62), size=0)],
    [ent(shape=(1 << 40, 1 << 40), size=1 << 42)],
    [ent(dtype="float8")],
    [ent(layout="sparse")],
    [ent(encoding="lz4")],
    [ent(data_endianness="pdp")],
    [ent(offset=-64)],
    [ent(size=True)],
    [ent(name=7)],
    [ent(checksum="crc32c:0x12345678")],
    [ent(checksum="bogus")],
    [ent(), [1]],
    [{"name": "a"}],
    {"a": 1},
    [ent(shape=(1,) * 65)],
]


@pytest.mark.parametrize("i", range(len(HOSTILE)))
def test_hostile_indexes_same_error(use_impl, i):
    for indef in (False, True):
        same(cbor.encode(HOSTILE[i], indefinite_maps=indef))


def test_limits_same_error(use_impl):
    raw = cbor.encode([ent("a", 64), ent("b", 128)])
    for lim in [Limits(max_objects=1), Limits(max_ndim=1), Limits(max_decoded_bytes=23),
                Limits(max_index_bytes=len(raw) - 1), Limits(max_decoded_bytes=-1)]:  # fmt: skip
        assert same(raw, limits=lim)[0] != "ok"
    assert same(raw, start=128 + 23)[0] == "TruncatedError"


def test_non_contiguous_buffer_takes_the_full_parse(use_impl):
    raw = np.frombuffer(cbor.encode([ent()]) * 2, np.uint8)[::2]
    same(raw)


@st.composite
def indexes(draw):
    es = []
    for i in range(draw(st.integers(0, 6))):
        dtype = draw(st.sampled_from(["float32", "float64", "uint8", "bool", "int4"]))
        shape = draw(st.lists(st.integers(0, 6), max_size=3))
        e = ent(draw(st.sampled_from("ab")) + str(i % 4), 64 * draw(st.integers(0, 30)), shape,
                dtype, draw(st.sampled_from(["raw", "raw", "zstd", "lz4"])))  # fmt: skip
        if draw(st.integers(0, 3)) == 0:
            e["size"] += draw(st.integers(-2, 2))
        if draw(st.booleans()):
            e["layout"] = draw(st.sampled_from(["dense", "dense", "sparse", "sparsecoo"]))
        if draw(st.booleans()):
            e["data_endianness"] = draw(st.sampled_from(["little", "big"]))
        if draw(st.integers(0, 5)) == 0:
            e["note"] = "x"
        es.append(e)
    return cbor.encode(es, indefinite_maps=draw(st.booleans()))


@settings(max_examples=300, deadline=None)
@given(indexes(), st.sampled_from([START, 2048, 512]), st.data())
def test_random_indexes_same_outcome(raw, start, data):
    """Generated indexes (valid and not), then byte edits and cuts: the kernel's parse and the
    full parse agree, with each implementation of the kernel."""
    impls = ["reference"] if _kernels.pure_python() else ["compiled", "reference"]
    blob = bytearray(raw)
    for _ in range(data.draw(st.integers(0, 2))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    cut = bytes(blob[: data.draw(st.integers(1, len(blob)))])
    saved = _index._KERNEL
    try:
        for impl in impls:
            _index._KERNEL = _kernels.load("zt01idx", impl)
            for b in (raw, bytes(blob), cut):
                same(b, start)
    finally:
        _index._KERNEL = saved


def test_pure_python_runs_the_full_parse(monkeypatch):
    """Without the compiled kernel the twin is not used: it is slower than the full parse."""
    monkeypatch.setenv("TENFOLD_PUREPYTHON", "1")
    monkeypatch.setattr(_index, "_KERNEL", None)
    assert _index._kernel() is False
    raw = cbor.encode([ent("a", 64)])
    assert _index.parse_index(raw, START) == _index.parse_index_full(raw, START)


def test_the_table_builds_records_when_asked(use_impl, tmp_path):
    """A 0.1.0 file of dense tensors opens without building a record per tensor: the
    kernel's fields are kept and made into the same TensorInfo on first use; a file whose
    entries carry custom keys (here user metadata) takes the full parse."""
    import tenfold.ztensor as zt

    path = tmp_path / "m.zt"
    tensors = {f"t{i}": np.full((i + 1, 2), i, np.float32) for i in range(5)}
    zt.save(path, tensors, checksum=None)
    with zt.Reader(path) as r:
        items = r._infos._items
        assert r._infos.plain and all(type(v) is tuple for v in items.values())
        got = r.info("t3")
        assert type(items["t3"]) is _index.TensorInfo and r.info("t3") is got
        assert sum(type(v) is tuple for v in items.values()) == 4
        raw = r._mf.u8(r.index_start, r.index_size, "index")
        assert [r.info(n) for n in r] == _index.parse_index_full(raw, r.index_start)
        assert r.metadata == {}
        np.testing.assert_array_equal(r["t2"], tensors["t2"])
    meta = tmp_path / "meta.zt"
    import tenfold

    tenfold.save(meta, tensors, metadata={"author": "x"})
    with zt.Reader(meta) as r:
        assert not r._infos.plain
        assert r.metadata == {"author": "x"}


def test_bulk_spans_from_compact_records(use_impl, tmp_path):
    """tenfold.torch's bulk spans read the kernel's compact records without building a
    TensorInfo, and give what the built records give: raw little-endian (or 1-byte) tensors
    a span, big-endian and zstd ones none."""
    from _zt_build import build, entry, write

    from tenfold.interop.frameworks import open_tensors

    le = np.arange(6, dtype="<f4").tobytes()
    be = np.arange(6, dtype=">f4").tobytes()
    u8 = bytes(range(6))
    entries = [
        entry("le", 64, 24),
        entry("be", 128, 24, data_endianness="big"),
        entry("u8", 192, 6, dtype="uint8", data_endianness="big"),
    ]
    p = write(tmp_path, build(entries, {64: le, 128: be, 192: u8}))
    t = open_tensors(p)
    try:
        infos = t.reader._infos
        assert all(infos.compact(n) is not None for n in t.names)
        fast = t.spans()
        assert all(infos.compact(n) is not None for n in t.names)  # still not built
        assert [infos[n] for n in t.names]  # every record built now
        assert all(infos.compact(n) is None for n in t.names)
        assert t.spans() == fast
        spans = dict(zip(t.names, fast, strict=True))
        assert spans["be"] is None
        assert spans["le"] == (64, np.dtype("<f4"), (2, 3))
        assert spans["u8"] == (192, np.dtype("u1"), (2, 3))
        np.testing.assert_array_equal(t.array("be"), np.arange(6, dtype=np.float32).reshape(2, 3))
    finally:
        t.close()

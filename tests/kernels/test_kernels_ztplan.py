"""ztplan kernel family: the zTensor v2 manifest scan with its plain-dense fast path.

Known answers on both implementations: plain dense objects become plans; an object that breaks
any rule the full validation checks (or has any other form) is left, decoded, in ``others``;
the CBOR refusals are those of ``dcbor``. Differential tests compare the compiled scan with its
reference twin on generated manifests, mutated field by field and byte by byte.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from _kernels_isolated import differential, outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels
from tenfold._kernels._cbortypes import CborReject, Key
from tenfold.ztensor import _dcbor
from tenfold.ztensor._v2spec import ALIGN, DIGESTS, DTYPES, MAX_NAME_BYTES, MAX_RANK

REGION = 1 << 30


def scan(k, raw: bytes, region: int = REGION, max_depth: int = 32, max_rank: int = MAX_RANK):
    return k.scan_manifest(raw, max_depth, region, ALIGN, max_rank, MAX_NAME_BYTES, DTYPES, DIGESTS)


def dense(offset: int = 4096, shape=(2, 3), dtype: str = "f32", digest: str | None = None):
    n = int(np.prod(shape)) * DTYPES[dtype].itemsize if dtype in DTYPES else 4
    part: dict = {"dtype": dtype, "blob": [offset, n]}
    if digest is not None:
        part["digest"] = digest
    return {"shape": list(shape), "layout": "dense", "parts": {"data": part}}


def outcome_of(k, raw: bytes, **kw) -> tuple:
    """Comparable result of one scan (others and rest compared by their encodings)."""
    try:
        got = scan(k, raw, **kw)
    except CborReject as exc:
        return ("reject", exc.rule, exc.offset, exc.detail)
    if got is None:
        return ("none",)
    plans, others, rest, in_order, lo, hi = got
    enc = {repr(n): _dcbor.encode(v) for n, v in others.items()}
    return (
        "ok",
        [(n, p[:3], str(p[3]), p[4], p[5]) for n, p in plans.items()],
        list(enc.items()),
        _dcbor.encode(rest),
        in_order,
        lo,
        hi,
    )


def table_outcome_of(k, raw: bytes, **kw) -> tuple:
    """:func:`outcome_of` through ``scan_table``: its plans, built from the table's records,
    must be the tuples ``scan_manifest`` gives."""

    class Tabled:
        @staticmethod
        def scan_manifest(data, *args):
            got = k.scan_table(bytes(data), *args)
            if got is None:
                return None
            table, *rest = got
            assert len(table) == len(table.index)
            plans = {n: table.plan(i) for n, i in table.index.items()}
            for n, i in table.index.items():
                assert table.has_digest(i) == (plans[n][5] is not None)
            return (plans, *rest)

    return outcome_of(Tabled, raw, **kw)


def both(raw: bytes, **kw) -> tuple:
    impls = ["reference"] if _kernels.pure_python() else ["compiled", "reference"]
    got = {impl: outcome_of(_kernels.load("ztplan", impl), raw, **kw) for impl in impls}
    for impl in impls:
        got[impl + " table"] = table_outcome_of(_kernels.load("ztplan", impl), raw, **kw)
    assert len({repr(g) for g in got.values()}) == 1, f"{raw.hex()}: {got}"
    return next(iter(got.values()))


def test_plans_known(kernels):
    k = kernels("ztplan")
    objects = {
        "a": dense(4096, (2, 3), "f32", "xxh3:" + "0" * 16),
        "b": dense(8192, (4,), "u8"),
        "c": dense(12288, (), "f64", "sha256:" + "ab" * 32),
        "empty": dense(16384, (0, 5), "i16"),
    }
    root = {"objects": objects, "attributes": {"k": 1}, "x": [1]}
    plans, others, rest, in_order, lo, hi = scan(k, _dcbor.encode(root))
    assert others == {}
    assert rest == {"attributes": {"k": 1}, "x": [1]}
    assert plans["a"] == (4096, 24, "f32", DTYPES["f32"], (2, 3), "xxh3:" + "0" * 16)
    assert plans["b"] == (8192, 4, "u8", DTYPES["u8"], (4,), None)
    assert plans["c"][4] == () and plans["c"][1] == 8
    assert plans["empty"][:2] == (16384, 0)
    assert list(plans) == ["a", "b", "c", "empty"]  # manifest (CBOR key) order
    assert (in_order, lo, hi) == (True, 4096, 12296)
    shapes = [type(d) for p in plans.values() for d in p[4]]
    assert all(t is int for t in shapes)


def _variants() -> list[tuple[str, object, object]]:
    """(label, name, object) that must NOT be planned (each breaks one rule or has another
    form); the full validation decides about them."""
    base = dense(4096, (2, 3))
    out: list[tuple[str, object, object]] = []

    def edit(label, fn, name="w"):
        obj = copy.deepcopy(base)
        fn(obj)
        out.append((label, name, obj))

    edit("misaligned", lambda o: o["parts"]["data"].__setitem__("blob", [4097, 24]))
    edit("offset 0", lambda o: o["parts"]["data"].__setitem__("blob", [0, 24]))
    edit("past region", lambda o: o["parts"]["data"].__setitem__("blob", [REGION, 24]))
    edit("size", lambda o: o["parts"]["data"].__setitem__("blob", [4096, 25]))
    edit("neg length", lambda o: o["parts"]["data"].__setitem__("blob", [4096, -1]))
    edit("blob 3", lambda o: o["parts"]["data"].__setitem__("blob", [4096, 24, 0]))
    edit("blob text", lambda o: o["parts"]["data"].__setitem__("blob", "x"))
    edit("dtype", lambda o: o["parts"]["data"].__setitem__("dtype", "f128"))
    edit("dtype list", lambda o: o["parts"]["data"].__setitem__("dtype", ["f32"]))
    edit("type", lambda o: o["parts"]["data"].__setitem__("type", "bool"))
    edit("shard", lambda o: o["parts"]["data"].__setitem__("shard", "s"))
    edit("encoding", lambda o: o["parts"]["data"].__setitem__("encoding", "zt.zstd-seekable/1"))
    edit("digest upper", lambda o: o["parts"]["data"].__setitem__("digest", "xxh3:" + "A" * 16))
    edit("digest short", lambda o: o["parts"]["data"].__setitem__("digest", "xxh3:" + "a" * 15))
    edit("digest none", lambda o: o["parts"]["data"].__setitem__("digest", None))
    edit("digest algo", lambda o: o["parts"]["data"].__setitem__("digest", "-x:00"))
    edit("digest empty", lambda o: o["parts"]["data"].__setitem__("digest", "xxh3:"))
    edit("digest nl", lambda o: o["parts"]["data"].__setitem__("digest", "md5:00\n"))
    edit("layout", lambda o: o.__setitem__("layout", "zt.sparse_csr/1"))
    edit("layout bytes", lambda o: o.__setitem__("layout", b"dense"))
    edit("attributes", lambda o: o.__setitem__("attributes", {}))
    edit("extra key", lambda o: o.__setitem__("extra", 1))
    edit("no shape", lambda o: o.pop("shape"))
    edit("shape neg", lambda o: o.__setitem__("shape", [-2, -3]))
    edit("shape bool", lambda o: o.__setitem__("shape", [True, 6]))
    edit("shape float", lambda o: o.__setitem__("shape", [2.0, 3]))
    edit("rank", lambda o: o.__setitem__("shape", [1] * 65))
    edit("two parts", lambda o: o["parts"].__setitem__("more", o["parts"]["data"]))
    edit("part role", lambda o: o.__setitem__("parts", {"values": o["parts"]["data"]}))
    edit("part extra", lambda o: o["parts"]["data"].__setitem__("zz", 1))
    edit("empty name", lambda o: None, name="")
    edit("nul name", lambda o: None, name="a\x00b")
    edit("long name", lambda o: None, name="é" * 513)
    edit("int name", lambda o: None, name=7)
    out.append(("not a map", "w", [1, 2]))
    return out


@pytest.mark.parametrize("label, name, obj", _variants(), ids=[v[0] for v in _variants()])
def test_not_planned(kernels, label, name, obj):
    k = kernels("ztplan")
    raw = _dcbor.encode({"objects": {name: obj, "ok": dense(65536)}})
    plans, others, rest, in_order, lo, hi = scan(k, raw)
    key = name if isinstance(name, str) else Key(name, _dcbor.encode(name))
    assert list(plans) == ["ok"] and list(others) == [key], label
    assert _dcbor.encode(others[key]) == _dcbor.encode(obj)
    assert in_order is False and rest == {}


def test_overflowing_shape_with_a_zero_is_planned(kernels):
    """The element count is the exact product: 2**40 * 2**40 * 0 is 0, not an overflow."""
    obj = dense(4096, (2**40, 2**40, 0))
    plans, others, *_ = scan(kernels("ztplan"), _dcbor.encode({"objects": {"z": obj}}))
    assert plans["z"][1] == 0 and plans["z"][4] == (2**40, 2**40, 0)
    obj = dense(4096, (2**40, 2**40, 1))
    obj["parts"]["data"]["blob"] = [4096, 0]
    plans, others, *_ = scan(kernels("ztplan"), _dcbor.encode({"objects": {"z": obj}}))
    assert not plans and list(others) == ["z"]


@pytest.mark.parametrize(
    "root, expect",
    [
        ([1], None),
        ({"attributes": {}}, None),
        ({"objects": [1]}, None),
        ({"objects": {}}, ({}, {}, {}, True, -1, -1)),
        ({Key(1, b"\x01"): 2, "objects": {}}, ({}, {}, {Key(1, b"\x01"): 2}, True, -1, -1)),
    ],
)
def test_root_forms(kernels, root, expect):
    assert scan(kernels("ztplan"), _dcbor.encode(root)) == expect


def test_order_flags(kernels):
    k = kernels("ztplan")

    def flags(objects):
        return scan(k, _dcbor.encode({"objects": objects}))[3:]

    assert flags({"a": dense(4096), "b": dense(8192)}) == (True, 4096, 8216)
    assert flags({"a": dense(8192), "b": dense(4096)}) == (False, 4096, 8216)
    assert flags({"a": dense(4096), "b": dense(4096)}) == (False, 4096, 4120)  # identical
    assert flags({"a": dense(4096, (0,)), "b": dense(8192)}) == (True, 8192, 8216)
    assert flags({"a": dense(4096), "b": {"x": 1}}) == (False, 4096, 4120)


def test_cbor_refusals_are_dcbor_ones(kernels):
    k = kernels("ztplan")
    raw = bytearray(_dcbor.encode({"objects": {"a": dense(4096), "b": dense(8192)}}))
    for cut in range(len(raw)):
        data = bytes(raw[:cut])
        try:
            _kernels.load("dcbor", "reference").decode(data, 32)
            want = None
        except CborReject as exc:
            want = (exc.rule, exc.offset, exc.detail)
        try:
            scan(k, data)
            got = None
        except CborReject as exc:
            got = (exc.rule, exc.offset, exc.detail)
        assert got == want, cut
    with pytest.raises(CborReject, match="nested deeper than 5"):
        scan(k, bytes(raw), max_depth=5)
    assert scan(k, bytes(raw), max_depth=6)[0].keys() == {"a", "b"}


def test_arguments(kernels):
    k = kernels("ztplan")
    raw = _dcbor.encode({"objects": {}})
    with pytest.raises(ValueError):
        k.scan_manifest(raw, 0, REGION, ALIGN, 64, 1024, DTYPES, DIGESTS)
    with pytest.raises(ValueError):
        k.scan_manifest(raw, 32, REGION, 0, 64, 1024, DTYPES, DIGESTS)
    with pytest.raises(ValueError):
        k.scan_manifest(raw, 32, REGION, ALIGN, 65, 1024, DTYPES, DIGESTS)
    with pytest.raises(TypeError):
        k.scan_manifest(raw, 32, REGION, ALIGN, 64, 1024, list(DTYPES), DIGESTS)
    with pytest.raises(TypeError):
        k.scan_manifest(raw, 32, REGION, ALIGN, 64, 1024, DTYPES, None)
    with pytest.raises(OverflowError):
        k.scan_manifest(raw, 32, 2**64, ALIGN, 64, 1024, DTYPES, DIGESTS)
    assert scan(k, _dcbor.encode({"objects": {"a": dense(4096)}}), region=-5)[0] == {}


_FIELDS = st.sampled_from(["offset", "length", "dtype", "shape", "digest", "name", "extra"])


@st.composite
def manifests(draw) -> dict:
    objects: dict = {}
    for i in range(draw(st.integers(0, 6))):
        shape = draw(st.lists(st.integers(0, 5), max_size=3))
        dtype = draw(st.sampled_from(sorted(DTYPES)))
        digest = draw(st.sampled_from([None, "xxh3:" + "0" * 16, "sha256:" + "f" * 64, "x:1"]))
        obj = dense(4096 * draw(st.integers(1, 8)), shape, dtype, digest)
        for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
            field = draw(_FIELDS)
            part = obj["parts"]["data"]
            if field == "offset":
                part["blob"][0] = draw(st.integers(-1, 2**64 - 1))
            elif field == "length":
                part["blob"][1] = draw(st.integers(-1, 2**64 - 1))
            elif field == "dtype":
                part["dtype"] = draw(st.sampled_from(["f32", "bf16", "x", "", 3]))
            elif field == "shape":
                obj["shape"] = draw(st.lists(st.integers(-1, 2**64 - 1), max_size=4))
            elif field == "digest":
                part["digest"] = draw(st.text(max_size=8))
            elif field == "extra":
                obj[draw(st.sampled_from(["attributes", "z", "layout"]))] = 1
        name = draw(st.one_of(st.just(f"t{i}"), st.text(max_size=5)))
        objects[name] = obj
    return {"objects": objects}


@given(manifests(), st.one_of(st.just(REGION), st.integers(0, 1 << 16)), st.data())
def test_scan_differential(root, region, data):
    """Generated manifests, then byte edits: compiled and reference scans agree exactly."""
    raw = _dcbor.encode(root)
    both(raw, region=region)
    blob = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    both(bytes(blob[: data.draw(st.integers(1, len(blob)))]), region=region)
    both(bytes(blob), max_depth=data.draw(st.integers(1, 8)), region=region)


def test_scan_argument_differential():
    raw = _dcbor.encode({"objects": {"a": dense(4096)}})
    for args in [
        (raw, 32, REGION, 0, 64, 1024, DTYPES, DIGESTS),
        (raw, 32, REGION, ALIGN, -1, 1024, DTYPES, DIGESTS),
        (raw, 300, REGION, ALIGN, 64, 1024, DTYPES, DIGESTS),
        (raw, 32, 2**63, ALIGN, 64, 1024, DTYPES, DIGESTS),
        (raw, 32, REGION, ALIGN, 64, 1024, [], DIGESTS),
    ]:
        differential("ztplan", lambda k, args=args: k.scan_manifest(*args) is None)


def test_scan_never_crashes():
    """Compiled scans of thousands of mutated manifests end in a forked child."""
    if _kernels.pure_python():
        pytest.skip("the compiled kernel is not in use (TENFOLD_PUREPYTHON=1)")
    k = _kernels.load("ztplan", "compiled")
    seed = _dcbor.encode(
        {"objects": {"a": dense(4096, (3, 4), "f64", "xxh3:" + "1" * 16), "b": dense(8192)}}
    )
    rng = np.random.default_rng(5)
    inputs = []
    for _ in range(20000):
        b = bytearray(seed)
        for _ in range(int(rng.integers(1, 4))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        inputs.append(bytes(b[: int(rng.integers(1, len(b) + 1))]))

    def call(batch: list[bytes]) -> None:
        for b in batch:
            try:
                k.scan_table(b, 32, REGION, ALIGN, MAX_RANK, MAX_NAME_BYTES, DTYPES, DIGESTS)
            except CborReject:
                pass
            try:
                scan(k, b)
            except CborReject:
                pass

    assert outcome(call, inputs) == "ok"


# -- view: the array of a plan over a map --------------------------------------------------


def _base(n: int = 64) -> np.ndarray:
    b = np.arange(n, dtype=np.uint8)
    b.flags.writeable = False
    return b


def test_view_known(kernels):
    k = kernels("ztplan")
    base = _base()
    v = k.view(base, (8, 24, "f32", DTYPES["f32"], (2, 3), None))
    assert v.dtype == np.float32 and v.shape == (2, 3)
    assert v.tobytes() == base[8:32].tobytes()
    assert not v.flags.writeable and v.flags.c_contiguous
    assert np.shares_memory(v, base)
    assert k.view(base, (63, 1, "u8", DTYPES["u8"], (), None)).item() == 63  # 0-d, unaligned
    w = k.view(base, (1, 8, "i16", DTYPES["i16"], (4,), "xxh3:00"))  # odd offset: unaligned
    assert w.tolist() == np.frombuffer(base[1:9].tobytes(), "<i2").tolist()


def test_view_keeps_the_map_alive_after_close(kernels, tmp_path):
    """A view's base holds the map's buffer: closing the map (as a reader's close does)
    must not unmap bytes a view still shows."""
    import mmap

    p = tmp_path / "f.bin"
    p.write_bytes(bytes(range(256)) * 32)
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    base = np.frombuffer(mm, np.uint8)
    v = kernels("ztplan").view(base, (4096, 16, "u8", DTYPES["u8"], (16,), None))
    del base
    with pytest.raises(BufferError):
        mm.close()  # still exported through the view's base
    assert v.tolist() == list(range(16))


@pytest.mark.parametrize(
    "base, plan, exc",
    [
        ("not an array", (0, 4, "u8", DTYPES["u8"], (4,), None), ValueError),
        (np.zeros((2, 8), np.uint8), (0, 4, "u8", DTYPES["u8"], (4,), None), ValueError),
        (np.zeros(8, np.uint16), (0, 4, "u8", DTYPES["u8"], (4,), None), ValueError),
        (np.zeros(16, np.uint8)[::2], (0, 4, "u8", DTYPES["u8"], (4,), None), ValueError),
        (_base(8), (0, 4, "u8", DTYPES["u8"], (4,)), ValueError),
        (_base(8), (6, 4, "u8", DTYPES["u8"], (4,), None), ValueError),  # past the end
        (_base(8), (-1, 4, "u8", DTYPES["u8"], (4,), None), ValueError),
        (_base(8), (0, 4, "u8", DTYPES["u8"], (5,), None), ValueError),  # length mismatch
        (_base(8), (0, 4, "u8", DTYPES["u8"], (2, 2, 1 << 62), None), ValueError),
        (_base(8), (0, 4, "u8", "u8", (4,), None), ValueError),  # not a dtype
        (_base(8), (0, 4, "u8", DTYPES["u8"], (4, -1), None), OverflowError),
        (_base(8), (0, 4, "u8", DTYPES["u8"], [4], None), TypeError),
        (_base(8), [0, 4, "u8", DTYPES["u8"], (4,), None], TypeError),
    ],
)
def test_view_refuses(kernels, base, plan, exc):
    with pytest.raises(exc):
        kernels("ztplan").view(base, plan)


# -- map_spans: where a map's entries are encoded -------------------------------------------


def test_map_spans_known(kernels):
    k = kernels("ztplan")
    value = {"objects": {"a": dense(), "bb": dense(8192)}, "attributes": {"x": [1.5, None]}}
    raw = _dcbor.encode(value)
    spans, end = k.map_spans(raw, 0, 32)
    assert end == len(raw)
    keys = [_dcbor.decode(raw[a:b]) for a, b, _ in spans]
    assert keys == ["objects", "attributes"]  # encoded order: shorter key first
    for (_, b, c), key in zip(spans, keys, strict=True):
        assert _dcbor.decode(raw[b:c]) == value[key]
    a, b, c = spans[0]
    inner, inner_end = k.map_spans(raw, b, 32)
    assert inner_end == c
    assert [raw[x:y] for x, y, _ in inner] == [_dcbor.encode("a"), _dcbor.encode("bb")]
    assert k.map_spans(_dcbor.encode({}), 0, 1) == ([], 1)


@pytest.mark.parametrize(
    "raw, pos, depth, exc",
    [
        (b"\x82\x01\x02", 0, 32, CborReject),  # an array, not a map
        (b"\xa2\x61a\x01", 0, 32, CborReject),  # truncated: one entry of two
        (b"\xa1\x61a\x81\x81\x01", 0, 2, CborReject),  # too deep
        (b"\xa1\x61a\x01", 5, 32, ValueError),
        (b"\xa1\x61a\x01", -1, 32, ValueError),
        (b"\xa1\x61a\x01", 0, 0, ValueError),
    ],
)
def test_map_spans_refuses(kernels, raw, pos, depth, exc):
    with pytest.raises(exc):
        kernels("ztplan").map_spans(raw, pos, depth)


@given(st.binary(max_size=64), st.integers(0, 70), st.integers(1, 8))
def test_map_spans_twins_agree(raw, pos, depth):
    if _kernels.pure_python():
        return
    got = []
    for impl in ("compiled", "reference"):
        try:
            got.append(_kernels.load("ztplan", impl).map_spans(raw, pos, depth))
        except CborReject as exc:
            got.append(("reject", exc.rule, exc.offset))
        except ValueError as exc:
            got.append(("value", str(exc)))
    assert got[0] == got[1]


def test_plan_table_views(kernels):
    """PlanTable.view: the plan's array over the map, or None when the general path must
    answer (no plan, no map, an empty blob, a digest not checked yet)."""
    k = kernels("ztplan")
    objects = {
        "a": dense(8, (2, 3), "f32", "xxh3:" + "0" * 16),
        "b": dense(40, (4,), "u8"),
        "e": dense(48, (0, 5), "i16"),
    }
    raw = _dcbor.encode({"objects": objects})
    table, others, *_ = k.scan_table(raw, 32, 64, 8, MAX_RANK, MAX_NAME_BYTES, DTYPES, DIGESTS)
    assert others == {} and list(table.index) == ["a", "b", "e"]
    base = _base(64)
    b = table.view(base, "b", True, set())
    assert b.tolist() == [40, 41, 42, 43] and not b.flags.writeable
    assert np.shares_memory(b, base)
    assert table.view(base, "a", True, set()) is None  # digest to check first
    a = table.view(base, "a", True, {("a", "data")})
    assert a.shape == (2, 3) and a.tobytes() == base[8:32].tobytes()
    np.testing.assert_array_equal(table.view(base, "a", False, set()), a)
    assert table.view(base, "e", False, set()) is None  # empty blob
    assert table.view(base, "zz", False, set()) is None
    assert table.view(None, "b", False, set()) is None
    with pytest.raises(ValueError):
        table.view(_base(40), "b", False, set())  # the map is shorter than the plan
    with pytest.raises(ValueError):
        table.view(np.zeros(64, np.uint16), "b", False, set())
    with pytest.raises(IndexError):
        table.plan(3)
    with pytest.raises(TypeError):
        k.scan_table(bytearray(raw), 32, 64, 8, MAX_RANK, MAX_NAME_BYTES, DTYPES, DIGESTS)


def test_digest_checks_repeat_for_every_object(kernels):
    """The scan skips the algorithm checks for a digest with the same algorithm bytes and
    length as the last one accepted: a known algorithm with the wrong hex length, or an
    invalid algorithm name, after a good digest is still not planned."""
    k = kernels("ztplan")
    objects = {
        "a": dense(8, (2,), "u8", "xxh3:" + "0" * 16),
        "b": dense(16, (2,), "u8", "xxh3:" + "0" * 15),  # xxh3 is 16 hex digits
        "c": dense(24, (2,), "u8", "xxh3:" + "1" * 16),
        "d": dense(32, (2,), "u8", "sha256:" + "0" * 16),  # sha256 is 64
        "e": dense(40, (2,), "u8", "foo:" + "0" * 16),  # unknown algorithm: any length
        "f": dense(48, (2,), "u8", "foo:" + "0" * 15),
        "g": dense(56, (2,), "u8", "Foo:" + "0" * 16),  # upper case: not a digest
        "h": dense(64, (2,), "u8", "xxh3:" + "0" * 15 + "g"),  # not hex
    }
    raw = _dcbor.encode({"objects": objects})
    plans, others, *_ = k.scan_manifest(raw, 32, 4096, 8, MAX_RANK, MAX_NAME_BYTES, DTYPES, DIGESTS)
    assert sorted(plans) == ["a", "c", "e", "f"]
    assert sorted(others) == ["b", "d", "g", "h"]
    table, others2, *_ = k.scan_table(raw, 32, 4096, 8, MAX_RANK, MAX_NAME_BYTES, DTYPES, DIGESTS)
    assert sorted(table.index) == ["a", "c", "e", "f"] and sorted(others2) == sorted(others)


def test_table_reader_getitem(kernels):
    """TableReader[name]: the plan table's view unless ``copy``; anything that gives no view
    (no table, no base, no plan, an empty blob, a digest not checked yet) goes to the
    subclass's ``_lookup``."""
    k = kernels("ztplan")

    class R(k.TableReader):
        def __init__(self):
            self.asked = []

        def _lookup(self, name):
            self.asked.append(name)
            return "slow:" + name

    objects = {
        "a": dense(8, (2, 3), "f32", "xxh3:" + "0" * 16),
        "b": dense(40, (4,), "u8"),
        "e": dense(48, (0, 5), "i16"),
    }
    raw = _dcbor.encode({"objects": objects})
    table = k.scan_table(raw, 32, 64, 8, MAX_RANK, MAX_NAME_BYTES, DTYPES, DIGESTS)[0]
    r = R()
    assert (r._table, r._base, r._verified, r.copy, r.verify_checksums) == (
        None,
        None,
        None,
        False,
        True,
    )
    assert r["b"] == "slow:b"  # no table yet
    r._table, r._base, r._verified = table, _base(64), set()
    b = r["b"]
    assert b.tolist() == [40, 41, 42, 43] and np.shares_memory(b, r._base)
    assert r["a"] == "slow:a"  # its digest is to be checked first
    r._verified.add(("a", "data"))
    assert r["a"].shape == (2, 3)
    assert r["e"] == "slow:e" and r["zz"] == "slow:zz"
    r.verify_checksums = False
    r._verified = set()
    assert r["a"].shape == (2, 3)
    r.copy = True
    assert r["b"] == "slow:b"
    r.copy = False
    r._base = None  # a closed reader
    assert r["b"] == "slow:b"
    assert r.asked == ["b", "a", "e", "zz", "b", "b"]
    r._table = None
    assert r["b"] == "slow:b"
    assert R()["x"] == "slow:x"

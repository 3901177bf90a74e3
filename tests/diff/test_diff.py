"""``tenfold.diff`` (issue 23): every kind of difference across format pairs, the arithmetic
(bf16/fp8, integers without overflow, NaN/Inf, 0-d and empty tensors, cosine without overflow,
blocks), tensors compared by their bytes, one pair in memory at a time, the progress bar."""

from __future__ import annotations

import math
import weakref

import ml_dtypes
import numpy as np
import pytest

import tenfold
import tenfold.ztensor as zt
from tenfold import _diffstats
from tenfold.convert import convert
from tenfold.core.reader import BaseReader, TensorInfo
from tenfold.diff import SCHEMA, DiffResult

RNG = np.random.default_rng(23)
W = RNG.standard_normal((64, 48)).astype(np.float32)

A = {
    "same": W,
    "near": np.linspace(-1, 1, 50, dtype=np.float64),
    "moved": np.arange(12, dtype=np.float32).reshape(3, 4),
    "retyped": np.arange(6, dtype=np.int32),
    "reshaped": np.zeros((2, 3), np.float32),
    "gone": np.ones(4, np.int64),
    "scalar": np.array(5, np.int64),
    "empty": np.zeros((0, 3), np.float32),
}
MOVED = A["moved"].copy()
MOVED[0, 1] = 1.5  # |diff| 0.5, rel 0.5 / 1.5
MOVED[2, 3] = np.nan  # NaN on B's side only
MOVED[1, 0] = np.inf
B = {
    "same": W,
    "near": A["near"] + 1e-9,
    "moved": MOVED,
    "retyped": np.arange(6, dtype=np.int64),
    "reshaped": np.zeros((3, 2), np.float32),
    "new": np.ones(2, np.float32),
    "scalar": np.array(5, np.int64),
    "empty": np.zeros((0, 3), np.float32),
}
EXPECTED = {
    "same": "identical",
    "near": "different",
    "moved": "different",
    "retyped": "dtype",
    "reshaped": "shape",
    "scalar": "identical",
    "empty": "identical",
}


def _save(path, tensors, metadata=None):
    """Write ``tensors`` as the path's suffix (and its tag) says; return what to open."""
    name = path.name
    kw = {} if metadata is None else {"metadata": metadata}
    if name.endswith(".v2.zt"):
        tenfold.save(path, tensors, generation=2, **kw)
        return path
    if name.endswith(".sharded.safetensors"):
        tenfold.save(path, tensors, max_shard_size=256, **kw)
        index = path.parent / (name + ".index.json")
        assert index.exists()
        return index
    tenfold.save(path, tensors, **kw)
    return path


PAIRS = [
    ("a.safetensors", "b.zt"),  # zTensor 0.1.0
    ("a.v2.zt", "b.npz"),
    ("a.sharded.safetensors", "b.safetensors"),
    ("a.fold", "b.oinf"),
]


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_every_kind_of_difference(tmp_path, pair):
    a, b = _save(tmp_path / pair[0], A), _save(tmp_path / pair[1], B)
    r = tenfold.diff(a, b, metadata=False)
    got = {t.name: t.status for t in r.tensors}
    assert got == EXPECTED
    assert r.only_in_a == ["gone"] and r.only_in_b == ["new"]
    assert r.metadata is None and not r.equal and r.exit_code == 1
    t = {t.name: t for t in r.tensors}
    moved = t["moved"]
    assert moved.kind == "numeric" and not moved.identical
    assert moved.mismatched == 3 and moved.elements == 12
    assert (moved.nan_a, moved.nan_b, moved.inf_a, moved.inf_b) == (0, 1, 0, 1)
    assert moved.max_abs == 0.5 and moved.max_rel == pytest.approx(0.5 / 1.5)
    assert 0.99 < moved.cosine < 1.0
    assert t["same"].cosine == pytest.approx(1.0) and t["same"].max_abs == 0.0
    assert t["retyped"].dtype_a == "int32" and t["retyped"].dtype_b == "int64"
    assert t["retyped"].mismatched == 0 and t["retyped"].max_abs == 0  # same values
    assert (t["reshaped"].shape_a, t["reshaped"].shape_b) == ((2, 3), (3, 2))
    assert t["reshaped"].kind is None and t["reshaped"].max_abs is None
    assert t["scalar"].shape_a == () and t["empty"].elements == 0
    assert t["empty"].max_abs is None and t["empty"].cosine is None
    assert 1e-9 < t["near"].max_abs < 2e-9
    # within a tolerance, "near" is close; "moved" is still different
    r2 = tenfold.diff(a, b, atol=1e-6, metadata=False)
    assert {x.name: x.status for x in r2.tensors}["near"] == "close"
    assert {x.name: x.status for x in r2.tensors}["moved"] == "different"
    assert (r2.atol, r2.rtol) == (1e-6, 0.0)


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_a_conversion_is_identical(tmp_path, pair):
    common = {k: v for k, v in A.items()}
    a, b = _save(tmp_path / pair[0], common), _save(tmp_path / pair[1], common)
    r = tenfold.diff(a, b, metadata=False)
    assert r.identical and r.equal and r.exit_code == 0
    assert [t.status for t in r.tensors] == ["identical"] * len(common)
    assert sorted(t.name for t in r.tensors) == sorted(common)


def test_metadata_differences(tmp_path):
    a = _save(tmp_path / "a.safetensors", {"w": W}, {"step": "1", "lr": "0.1"})
    b = _save(tmp_path / "b.v2.zt", {"w": W}, {"step": "2", "seed": "7"})
    r = tenfold.diff(a, b)
    got = {(m.key, m.status, m.a, m.b) for m in r.metadata}
    assert got == {
        ("step", "changed", "1", "2"),
        ("lr", "only_in_a", "0.1", None),
        ("seed", "only_in_b", None, "7"),
    }
    assert not r.equal and r.exit_code == 1 and r.tensors[0].status == "identical"
    assert tenfold.diff(a, b, metadata=False).equal  # tensors only
    same = _save(tmp_path / "c.v2.zt", {"w": W}, {"step": "1", "lr": "0.1"})
    assert tenfold.diff(a, same).identical
    # what a reader reports of the file itself (zTensor 0.1.0's version) is not the writer's
    # metadata: a file and its 0.1.0 conversion are identical (before: "version" differed)
    old = _save(tmp_path / "d.zt", {"w": W}, {"step": "1", "lr": "0.1"})
    with tenfold.open(old) as r:
        assert r.metadata == {"step": "1", "lr": "0.1"} and r.generation == "0.1.0"
    r = tenfold.diff(a, old)
    assert r.metadata == [] and r.identical
    r = tenfold.diff(a, _save(tmp_path / "e.zt", {"w": W}, {"step": "1", "lr": "0.2"}))
    assert [(m.key, m.status) for m in r.metadata] == [("lr", "changed")]


@pytest.mark.parametrize("suffix", [".zt", ".v2.zt"])
def test_a_writer_key_named_version_survives_conversion(tmp_path, suffix):
    """A key ``version`` in the writer's metadata is the writer's: the 0.1.0 reader hid it
    under its own ``{"version": "0.1.0"}``, so a file and its conversion differed
    (``version: only in A``, exit 1) though the value was stored."""
    md = {"version": "my-model-v3", "format": "pt"}
    a = _save(tmp_path / "a.safetensors", {"w": W}, md)
    b = tmp_path / f"b{suffix}"
    convert(a, b, **({"zt_generation": 2} if suffix == ".v2.zt" else {}))
    r = tenfold.diff(a, b)
    assert r.metadata == [] and r.identical and r.exit_code == 0
    with tenfold.open(b) as rb:
        assert rb.metadata == md


def _one(x, y, **kw):
    """The :class:`TensorDiff` of one pair of arrays, through a safetensors file each."""
    return _diff_arrays({"t": x}, {"t": y}, **kw).tensors[0]


def _diff_arrays(a, b, **kw) -> DiffResult:
    return tenfold.diff(Memory(a), Memory(b), **kw)


class Memory(BaseReader):
    """A reader over a dict of arrays (what a format reader gives, without a file)."""

    fmt = "memory"

    def __init__(self, tensors, counter=None, metadata=None):
        self._t = dict(tensors)
        self._counter = counter
        self._meta = dict(metadata or {})
        self._closed = False

    def _keys(self):
        return self._t.keys()

    def info(self, name):
        v = self._t[name]
        dt = v.dtype if isinstance(v, np.ndarray) else None
        shape = v.shape if isinstance(v, np.ndarray) else (len(v),)
        return TensorInfo(name, str(dt), shape, None, "raw", None, np_dtype=dt)

    def read(self, name, index=None):
        v = self._t[name]
        if self._counter is not None:
            v = self._counter.hand_out(v)
        return v

    @property
    def metadata(self):
        return self._meta

    def verify(self):  # pragma: no cover - not used
        raise NotImplementedError

    @property
    def closed(self):
        return self._closed

    def close(self):
        self._closed = True


def test_bfloat16_and_float8():
    x = np.array([1.0, 2.0, -3.0, 0.5], ml_dtypes.bfloat16)
    y = x.copy()
    y[1] = ml_dtypes.bfloat16(2.015625)  # the next bfloat16 above 2
    t = _one(x, y)
    assert (t.status, t.dtype_a, t.mismatched) == ("different", "bfloat16", 1)
    assert t.max_abs == 0.015625 and t.max_rel == pytest.approx(0.015625 / 2.015625)
    for dt in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        f = np.array([0.5, 1.0, -2.0], dt)
        g = np.array([0.5, 1.0, -1.5], dt)
        t = _one(f, g)
        assert (t.status, t.mismatched, t.max_abs) == ("different", 1, 0.5)
        assert _one(f, f.copy()).status == "identical"
    t = _one(x, x.astype(np.float32))  # a dtype change with the same values
    assert (t.status, t.mismatched, t.max_abs, t.dtype_b) == ("dtype", 0, 0.0, "float32")


def test_integers_have_no_overflow():
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.uint64).max
    t = _one(np.array([lo, 0], np.int64), np.array([hi, 0], np.uint64))
    assert t.status == "dtype" and t.max_abs == 2**64 - 1 - lo  # exact, past 2**64
    assert isinstance(t.max_abs, int) and t.mismatched == 1
    t = _one(np.array([lo], np.int64), np.array([np.iinfo(np.int64).max], np.int64))
    assert t.max_abs == 2**64 - 1  # int64 subtraction would wrap to -1
    t = _one(np.array([200, 3], np.uint8), np.array([3, 200], np.uint8))
    assert t.max_abs == 197 and t.mismatched == 2  # uint8 subtraction would wrap
    t = _one(np.array([True, False, True]), np.array([True, True, True]))
    assert (t.status, t.mismatched, t.max_abs) == ("different", 1, 1)
    big = 2**53 + 1  # not a float64: compared exactly
    t = _one(np.array([big], np.int64), np.array([big - 1], np.int64))
    assert t.max_abs == 1
    assert _one(np.array([7, 9], np.int16), np.array([8, 9], np.int16), atol=1).status == "close"


def test_nan_inf_and_signed_zero():
    nan, inf = np.nan, np.inf
    # without a tolerance: the same bits (a zero's sign, NaN payloads count)
    t = _one(np.array([0.0, 1.0]), np.array([-0.0, 1.0]))
    assert (t.status, t.mismatched, t.max_abs) == ("different", 1, 0.0)
    assert _one(np.array([0.0, 1.0]), np.array([-0.0, 1.0]), atol=0).status == "close"
    x = np.array([nan, inf, -inf, 2.0])
    t = _one(x, x.copy())
    assert (t.status, t.nan_a, t.nan_b, t.inf_a, t.inf_b) == ("identical", 1, 1, 2, 2)
    assert t.max_abs == 0.0
    payload = x.copy()
    payload.view(np.uint64)[0] ^= 1  # another NaN
    assert _one(x, payload).status == "different"
    assert _one(x, payload, rtol=0).status == "close"  # NaN is NaN at the same place
    for other in ([1.0, inf, -inf, 2.0], [nan, -inf, -inf, 2.0], [nan, inf, inf, 2.0]):
        t = _one(x, np.array(other), atol=math.inf)  # no tolerance makes these equal
        assert (t.status, t.mismatched) == ("different", 1)
    huge = _one(np.array([1e308]), np.array([-1e308]))
    assert huge.max_abs == math.inf  # overflows float64: reported, and "inf" in JSON
    assert (
        _diff_arrays({"t": np.array([1e308])}, {"t": np.array([-1e308])}).to_json()["tensors"][0][
            "max_abs"
        ]
        == "inf"
    )


def test_rtol_is_relative_to_b():
    t = _one(np.array([1.0]), np.array([1.1]), rtol=0.095)
    assert t.status == "close"  # 0.1 <= 0.095 * 1.1
    assert _one(np.array([1.1]), np.array([1.0]), rtol=0.095).status == "different"


def test_cosine():
    assert _one(np.array([1.0, 0.0]), np.array([0.0, 2.0])).cosine == 0.0
    assert _one(np.array([1.0, 2.0]), np.array([-2.0, -4.0])).cosine == pytest.approx(-1.0)
    big = np.array([1e200, -3e200, 2e200])  # squares overflow float64: rescaled sums do not
    assert _one(big, big * 0.5).cosine == pytest.approx(1.0)
    assert _one(np.zeros(3), np.zeros(3)).cosine is None  # undefined
    assert _one(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])).cosine == 1.0  # finite only
    c = np.array([1 + 1j, 2 - 1j], np.complex64)
    assert _one(c, c.copy()).status == "identical"
    t = _one(c, c * 1j)
    assert t.max_abs == pytest.approx(math.sqrt(10)) and t.mismatched == 2  # |2-1j| |1-1j|


def test_blocks_give_the_whole_tensor_answer(monkeypatch):
    x = RNG.standard_normal(1000)
    y = x + RNG.standard_normal(1000) * 1e-3
    y[997] = x[997] + 5.0  # the largest difference, in the last block
    y[3] = np.nan
    whole = _one(x, y)
    monkeypatch.setattr(_diffstats, "BLOCK", 7)
    blocked = _one(x, y)
    for key in ("max_abs", "max_rel", "mismatched", "nan_b"):
        assert getattr(blocked, key) == getattr(whole, key), key
    assert blocked.cosine == pytest.approx(whole.cosine, rel=1e-12)
    fin = ~np.isnan(y)
    want = np.dot(x[fin], y[fin]) / (np.linalg.norm(x[fin]) * np.linalg.norm(y[fin]))
    assert blocked.cosine == pytest.approx(want, rel=1e-12)
    assert blocked.max_abs == pytest.approx(5.0, abs=0.01)
    assert _one(np.arange(50.0), np.arange(50.0)).status == "identical"


def test_big_endian_arrays_compare_by_value(tmp_path):
    x = np.arange(5, dtype=">f4")
    t = _one(x, x.astype("<f4"))
    assert t.status == "identical" and t.dtype_a == "float32"


def test_packed_objects_compare_by_bytes(tmp_path):
    """A zTensor v2 object of a layout read as its parts (zt.mx/1: float4 data and e8m0
    scales) is compared by its parts' bytes; a sparse tensor as its dense array."""

    def write(path, scale):
        with zt.Writer(path, generation=2, canonical=False) as w:
            w.add_object(
                "mx",
                [2, 32],
                {
                    "data": (np.arange(32, dtype=np.uint8), "u8", "f4_e2m1"),
                    "scales": (np.array([127, scale], np.uint8), "u8", "f8_e8m0"),
                },
                layout="zt.mx/1",
                attributes={"block_size": 32, "scale_form": "e8m0_exponent"},
            )
            w.add(
                "csr",
                zt.SparseTensor(
                    "csr",
                    (2, 3),
                    np.array([1.0, float(scale)], np.float32),
                    indices=np.array([0, 2], np.uint64),
                    indptr=np.array([0, 1, 2], np.uint64),
                ),
            )
        return path

    a, b, c = write(tmp_path / "a.zt", 127), write(tmp_path / "b.zt", 127), None
    c = write(tmp_path / "c.zt", 128)
    same = {t.name: t for t in tenfold.diff(a, b).tensors}
    assert same["mx"].kind == "raw" and same["mx"].status == "identical"
    assert same["csr"].kind == "numeric" and same["csr"].status == "identical"
    other = {t.name: t for t in tenfold.diff(a, c).tensors}
    assert other["mx"].kind == "raw" and other["mx"].status == "different"
    assert other["mx"].max_abs is None and other["mx"].mismatched is None
    assert other["csr"].max_abs == 1.0 and other["csr"].mismatched == 1  # dense values
    # raw bytes against an array: different, never an exception
    r = _diff_arrays({"t": b"\x00\x01"}, {"t": np.array([0, 1], np.uint8)})
    assert r.tensors[0].kind == "raw" and not r.tensors[0].identical and not r.equal
    r = _diff_arrays({"t": b"\x00\x01"}, {"t": b"\x00\x01"})
    assert r.tensors[0].status == "identical"


def test_strings_compare_by_bytes():
    s = np.array(["a", "bc"])
    assert _one(s, s.copy()).status == "identical"
    t = _one(s, np.array(["a", "bd"]))
    assert (t.kind, t.status, t.max_abs) == ("raw", "different", None)


class Counter:
    """Counts the arrays handed out by readers that are still alive."""

    def __init__(self):
        self.live = 0
        self.peak = 0
        self.reads = 0

    def hand_out(self, v):
        out = np.array(v)  # a new array: its lifetime is the caller's
        self.reads += 1
        self.live += 1
        self.peak = max(self.peak, self.live)
        weakref.finalize(out, self._gone)
        return out

    def _gone(self):
        self.live -= 1


def test_one_pair_in_memory_at_a_time():
    """The comparison holds one pair of tensors at a time: each pair is dropped before the
    next is read (a diff that read every tensor first would hold 2 x 20)."""
    tensors = {f"t{i}": RNG.standard_normal(1000).astype(np.float32) for i in range(20)}
    other = {k: v + 1 for k, v in tensors.items()}
    counter = Counter()
    r = tenfold.diff(Memory(tensors, counter), Memory(other, counter))
    assert counter.reads == 40 and counter.peak == 2 and counter.live == 0
    assert [t.status for t in r.tensors] == ["different"] * 20
    # shapes that differ are not read at all
    counter = Counter()
    tenfold.diff(Memory({"x": np.zeros(3)}, counter), Memory({"x": np.zeros(4)}, counter))
    assert counter.reads == 0


def test_readers_given_open_stay_open(tmp_path):
    p = _save(tmp_path / "m.safetensors", {"w": W})
    with tenfold.open(p) as ra, tenfold.open(p) as rb:
        assert tenfold.diff(ra, rb).identical
        assert not ra.closed and not rb.closed
    r = tenfold.diff(str(p), p)
    assert r.a.path == str(p) and r.a.format == "safetensors" and r.a.tensors == 1


def test_arguments(tmp_path):
    p = _save(tmp_path / "m.safetensors", {"w": W})
    for bad in ({"atol": -1}, {"rtol": float("nan")}, {"atol": "x"}):
        with pytest.raises(ValueError):
            tenfold.diff(p, p, **bad)
    with pytest.raises(FileNotFoundError) as exc:
        tenfold.diff(p, tmp_path / "nope.zt")
    from tenfold.diff import failed_source

    assert failed_source(exc.value) == str(tmp_path / "nope.zt")


def test_progress_bar_only_when_asked(tmp_path, capsys):
    p = _save(tmp_path / "m.safetensors", {f"w{i}": W for i in range(3)})
    tenfold.diff(p, p, progress=False)
    assert capsys.readouterr().err == ""
    tenfold.diff(p, p)  # not a terminal: quiet
    assert capsys.readouterr().err == ""
    tenfold.diff(p, p, progress=True)
    assert "diff" in capsys.readouterr().err


def test_to_json_follows_the_schema(tmp_path):
    a, b = _save(tmp_path / "a.safetensors", A, {"k": "1"}), _save(tmp_path / "b.zt", B)
    doc = tenfold.diff(a, b).to_json()
    validate(doc, SCHEMA)
    assert doc["summary"]["compared"] == len(EXPECTED) and doc["exit_code"] == 1
    validate(tenfold.diff(a, b, metadata=False, atol=0.1).to_json(), SCHEMA)


def validate(doc, schema, where="$"):
    """The JSON Schema keywords SCHEMA uses (type, enum, required, properties,
    additionalProperties, items), checked by hand; jsonschema too when it is installed."""
    _check(doc, schema, where)
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(doc, schema)


_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _is(value, name):
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def _check(doc, schema, where):
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        assert any(_is(doc, n) for n in names), f"{where}: {doc!r} is not {names}"
    if "enum" in schema:
        assert doc in schema["enum"], f"{where}: {doc!r} not in {schema['enum']}"
    if isinstance(doc, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", ()):
            assert key in doc, f"{where}: missing {key!r}"
        if schema.get("additionalProperties") is False:
            extra = set(doc) - set(props)
            assert not extra, f"{where}: unexpected {sorted(extra)}"
        for key, sub in props.items():
            if key in doc:
                _check(doc[key], sub, f"{where}.{key}")
    if isinstance(doc, list) and "items" in schema:
        for i, item in enumerate(doc):
            _check(item, schema["items"], f"{where}[{i}]")


def test_the_validator_is_not_blind(tmp_path):
    p = _save(tmp_path / "m.safetensors", {"w": W})
    doc = tenfold.diff(p, p).to_json()
    for broken in (
        {**doc, "extra": 1},
        {k: v for k, v in doc.items() if k != "tensors"},
        {**doc, "exit_code": 3},
        {**doc, "tensors": [{**doc["tensors"][0], "status": "same"}]},
        {**doc, "tensors": [{**doc["tensors"][0], "shape_a": ["1"]}]},
    ):
        with pytest.raises(AssertionError):
            _check(broken, SCHEMA, "$")


def test_tenfold_diff_is_the_function_and_import_stays_light():
    """``tenfold.diff`` is the function, however its module is imported, and importing
    ``tenfold`` (which imports the module) still imports no NumPy."""
    import subprocess
    import sys

    code = (
        "import sys, tenfold\n"
        "assert 'numpy' not in sys.modules, 'import tenfold imported numpy'\n"
        "import tenfold.diff\n"
        "from tenfold.diff import DiffResult\n"
        "import importlib; importlib.import_module('tenfold.diff')\n"
        "assert callable(tenfold.diff) and tenfold.diff.__name__ == 'diff'\n"
        "assert sys.modules['tenfold.diff'].DiffResult is DiffResult\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr

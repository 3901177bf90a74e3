"""zTensor v2 writer: canonical form, byte identity with ztensor 2.1.2 (both directions),
round trips of every dtype, zstd-seekable, sparse, objects of other layouts, refusals."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.errors import EncodeError
from tenfold.ztensor.v2writer import V2Writer, storage_of

VECTORS = Path(__file__).resolve().parents[1] / "conformance" / "ztensor" / "v2"
PEER_SCRIPT = Path(__file__).with_name("_zt2_peer.py")
#: An interpreter with ztensor==2.1.2 installed (kept out of the test environment, whose
#: ztensor is 0.1.4): e.g. ``python -m venv /tmp/zt212 && /tmp/zt212/bin/pip install
#: ztensor==2.1.2 numpy`` then ``TENFOLD_ZTENSOR2_PYTHON=/tmp/zt212/bin/python``.
PEER = os.environ.get("TENFOLD_ZTENSOR2_PYTHON")

DTYPES = [
    np.float64,
    np.float32,
    np.float16,
    ml_dtypes.bfloat16,
    np.int64,
    np.int32,
    np.int16,
    np.int8,
    np.uint64,
    np.uint32,
    np.uint16,
    np.uint8,
    np.bool_,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2,
    np.complex64,
    np.complex128,
]


def _random(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    a = raw.view(dt).reshape(shape)
    if dt.kind in "fc" or dt.names is None and dt.kind == "V":
        a = np.where(np.isnan(a), 0, a).astype(dt) if dt.kind in "fc" else a
    return a


def _tensors(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i, dt in enumerate(DTYPES):
        shape = [(), (0,), (3,), (2, 5), (1, 0, 4), (4, 3, 2)][(i + seed) % 6]
        out[f"t{i:02d}_{np.dtype(dt).name}"] = _random(rng, dt, shape)
    out["dup_a"] = out["dup_b"] = np.arange(7, dtype=np.int32)  # shared blob
    return out


def _spec(tensors, *, encoding=None, options=None, attributes=None) -> dict:
    objs = []
    for name in sorted(tensors, key=str.encode):
        a = np.asarray(tensors[name])
        dtype, ltype = storage_of(a.dtype, name)
        objs.append(
            {
                "name": name,
                "shape": list(a.shape),
                "layout": "dense",
                "parts": {
                    "data": {
                        "hex": a.tobytes().hex(),
                        "dtype": dtype,
                        "type": ltype,
                        "encoding": encoding,
                    }
                },
            }
        )
    return {"objects": objs, "options": options or {}, "attributes": attributes}


def _peer(*args: str) -> str:
    if not PEER:
        pytest.skip("TENFOLD_ZTENSOR2_PYTHON (an interpreter with ztensor==2.1.2) not set")
    r = subprocess.run([PEER, str(PEER_SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _peer_write(tmp_path: Path, spec: dict, name: str) -> bytes:
    sp = tmp_path / f"{name}.json"
    sp.write_text(json.dumps(spec))
    out = tmp_path / f"{name}.zt"
    _peer("write", str(sp), str(out))
    return out.read_bytes()


# -- without the peer ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "stem", ["dense_all_dtypes", "empty", "scalar_and_zero_size", "sparse_csr_coo"]
)
def test_rebuilds_canonical_vectors_byte_for_byte(stem, tmp_path):
    src = VECTORS / f"{stem}.zt"
    with zt.open(src, sparse="raw") as r:
        tensors = {n: r.read(n, copy=True) for n in r}
    out = tmp_path / "x.zt"
    zt.save(out, tensors, generation=2)
    assert out.read_bytes() == src.read_bytes()


def test_rebuilds_zstd_vector_byte_for_byte(tmp_path):
    src = VECTORS / "zstd_seekable.zt"
    with zt.open(src) as r:
        tensors = {n: r.read(n, copy=True) for n in r}
    out = tmp_path / "x.zt"
    zt.save(out, tensors, generation=2, encoding="zstd", align=4096)
    assert out.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("seed", range(3))
def test_round_trip_every_dtype(seed, tmp_path):
    tensors = _tensors(seed)
    for enc, opts in [("raw", {}), ("zstd", {"align": 4096})]:
        p = tmp_path / f"{enc}.zt"
        zt.save(p, tensors, generation=2, encoding=enc, **opts)
        with zt.open(p) as r:
            assert sorted(r) == sorted(tensors)
            for name, a in tensors.items():
                got = r[name]
                assert got.dtype == a.dtype and got.shape == a.shape, name
                assert got.tobytes() == np.ascontiguousarray(a).tobytes(), name
            shared = r.info("dup_a").offset == r.info("dup_b").offset
            assert shared == (enc == "raw")  # 2.1.2 shares raw blobs only
            assert r.verify().ok
        assert zt.verify(p).ok


def test_float4_sparse_and_profile_objects(tmp_path):
    f4 = np.array([0.5, -1.0, 6.0, 0.0, 3.0], dtype=ml_dtypes.float4_e2m1fn)
    csr = zt.SparseTensor(
        "csr",
        (2, 3),
        np.array([1.0, 2.0], np.float32),
        indices=np.array([0, 2], np.uint64),
        indptr=np.array([0, 1, 2], np.uint64),
    )
    coo = zt.SparseTensor(
        "coo", (2, 2, 2), np.array([7], np.int16), coords=np.array([[1], [0], [1]], np.uint64)
    )
    p = tmp_path / "m.zt"
    with zt.Writer(p, generation=2, canonical=False) as w:
        w.add("f4", f4)
        w.add("csr", csr)
        w.add("coo", coo)
        w.add_object(
            "mx",
            [2, 32],
            {
                "data": (np.zeros(32, np.uint8), "u8", "f4_e2m1"),
                "scales": (np.full(2, 127, np.uint8), "u8", "f8_e8m0"),
            },
            layout="zt.mx/1",
            attributes={"block_size": 32, "scale_form": "e8m0_exponent"},
        )
        w.set_attributes({"framework": "test", "n": 3, "x": 1.5})
    with zt.open(p, sparse="raw") as r:
        assert r["f4"].tolist() == f4.tolist()
        assert r.stored("f4").size == 3
        np.testing.assert_array_equal(r["csr"].todense(), csr.todense())
        np.testing.assert_array_equal(r["coo"].todense(), coo.todense())
        mx = r["mx"]
        assert isinstance(mx, zt.PartsObject) and mx.attributes["block_size"] == 32
        assert mx["scales"].tolist() == [127, 127]
        assert r.attributes == {"framework": "test", "n": 3, "x": 1.5}
        assert r.verify().ok


def test_canonical_refusals(tmp_path):
    with zt.Writer(tmp_path / "a.zt", generation=2) as w:
        w.add("b", np.zeros(1))
        with pytest.raises(EncodeError, match="ascending order"):
            w.add("a", np.zeros(1))
        with pytest.raises(EncodeError, match="NFC"):
            w.add("c\u0301", np.zeros(1))
        with pytest.raises(EncodeError, match="raw parts only"):
            w.add("d", np.zeros(1), encoding="zstd")
        with pytest.raises(EncodeError, match="duplicate"):
            w.add("b", np.zeros(1))
        with pytest.raises(EncodeError, match="cannot be stored"):
            w.add("e", np.array(["x"]))
    with pytest.raises(EncodeError, match="65536"):
        zt.Writer(tmp_path / "b.zt", generation=2, align=4096)
    with pytest.raises(EncodeError, match="multiple of 4096"):
        zt.Writer(tmp_path / "b.zt", generation=2, canonical=False, align=1000)
    assert not (tmp_path / "b.zt").exists()


def test_failed_writer_leaves_nothing(tmp_path):
    p = tmp_path / "x.zt"
    with pytest.raises(RuntimeError), zt.Writer(p, generation=2) as w:
        w.add("a", np.zeros(3))
        raise RuntimeError("boom")
    assert not p.exists() and os.listdir(tmp_path) == []


# -- against ztensor 2.1.2 ------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mode", ["canonical", "align4096", "zstd"])
def test_byte_identical_to_ztensor_2_1_2(seed, mode, tmp_path):
    tensors = _tensors(seed)
    options = {"canonical": False, "align": 4096} if mode != "canonical" else {}
    enc = "zt.zstd-seekable/1" if mode == "zstd" else None
    attrs = {"source": "tenfold test", "seed": seed}
    theirs = _peer_write(
        tmp_path, _spec(tensors, encoding=enc, options=options, attributes=attrs), "peer"
    )
    ours = tmp_path / "ours.zt"
    with V2Writer(ours, attributes=attrs, **options) as w:
        for name in sorted(tensors, key=str.encode):
            w.add(name, tensors[name], encoding=enc)
    assert ours.read_bytes() == theirs
    # and the peer reads what tenfold wrote to the same bytes
    got = json.loads(_peer("read", str(ours)))
    for name, a in tensors.items():
        want = hashlib.sha256(np.asarray(a).tobytes()).hexdigest()
        assert got[name]["parts"]["data"] == want, name


def test_sparse_byte_identical_to_ztensor_2_1_2(tmp_path):
    rng = np.random.default_rng(5)
    dense = np.where(rng.random((6, 9)) < 0.3, rng.standard_normal((6, 9)), 0).astype(np.float32)
    import scipy.sparse as sp

    csr = sp.csr_array(dense)
    parts = {
        "values": csr.data.astype(np.float32),
        "indices": csr.indices.astype(np.uint64),
        "indptr": csr.indptr.astype(np.uint64),
    }
    spec = {
        "objects": [
            {
                "name": "m",
                "shape": [6, 9],
                "layout": "zt.sparse_csr/1",
                "parts": {
                    k: {"hex": v.tobytes().hex(), "dtype": storage_of(v.dtype, k)[0]}
                    for k, v in parts.items()
                },
            }
        ],
        "options": {},
    }
    theirs = _peer_write(tmp_path, spec, "peer")
    ours = tmp_path / "ours.zt"
    zt.save(ours, {"m": csr}, generation=2)
    assert ours.read_bytes() == theirs
    with zt.open(tmp_path / "peer.zt") as r:
        np.testing.assert_array_equal(r["m"].toarray(), dense)


def test_peer_reads_every_v2_vector_tenfold_rewrites(tmp_path):
    out = tmp_path / "x.zt"
    with zt.open(VECTORS / "dense_all_dtypes.zt") as r:
        zt.save(out, {n: r.read(n, copy=True) for n in r}, generation=2)
    got = json.loads(_peer("read", str(out)))
    assert len(got) == 13


_ = sys


def test_convert_between_generations(tmp_path):
    from tenfold.cli import main

    src = tmp_path / "a.zt"
    tensors = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "m": np.array([True, False])}
    zt.save(src, tensors)
    assert zt.detect(src) == "0.1.0"
    v2 = tmp_path / "b.zt"
    assert main(["convert", str(src), str(v2), "--zt-generation", "2"]) == 0
    assert zt.detect(v2) == "v2"
    back = tmp_path / "c.zt"
    assert main(["convert", str(v2), str(back)]) == 0
    assert zt.detect(back) == "0.1.0"
    for p in (v2, back):
        got = zt.load(p)
        for k, a in tensors.items():
            np.testing.assert_array_equal(got[k], a)
            assert got[k].dtype == a.dtype
    v1 = VECTORS.parent / "v1" / "sparse_csr_coo.zt"
    out = tmp_path / "d.zt"
    assert main(["convert", str(v1), str(out), "--zt-generation", "v2"]) == 0
    with zt.open(out) as r, zt.open(v1) as r1:
        assert r.info("csr_4x6").layout == "zt.sparse_csr/1"
        np.testing.assert_array_equal(r["csr_4x6"].toarray(), r1["csr_4x6"].toarray())
    assert main(["convert", str(src), str(tmp_path / "e.npz"), "--zt-generation", "2"]) == 1


@pytest.mark.parametrize("threaded", [True, False])
def test_large_parts_hashed_on_a_second_thread_give_the_same_file(tmp_path, monkeypatch, threaded):
    """Raw parts of 8 MiB and more are written with pwrite and hashed on the writer's worker
    thread (or block by block on the writing thread): the file (blobs, digests,
    deduplicated parts) is byte for byte the file of the plain path."""
    import xxhash

    from tenfold.ztensor import _v2blobs as v2writer  # the raw-part write path

    rng = np.random.default_rng(3)
    big = rng.standard_normal((3 << 20) // 2, dtype=np.float32).reshape(-1, 1024)  # 6 MiB
    tensors = {
        "a": rng.standard_normal(9 << 18, dtype=np.float32),  # 9 MiB
        "b": big,
        "c": np.arange(10, dtype=np.int16),
        "d": rng.standard_normal(9 << 18, dtype=np.float32)[::-1],  # not contiguous
    }
    tensors["e"] = tensors["a"].copy()  # deduplicated: points at a's blob
    piped, serial = tmp_path / "p.zt", tmp_path / "s.zt"
    monkeypatch.setattr(v2writer, "_use_thread", lambda: threaded)
    monkeypatch.setattr(v2writer, "_PIPE_MIN", 1 << 20)
    zt.save(piped, tensors, generation=2)
    monkeypatch.setattr(v2writer, "_PIPE_MIN", 1 << 62)
    zt.save(serial, tensors, generation=2)
    assert piped.read_bytes() == serial.read_bytes()
    with zt.open(piped) as r:
        for name, want in tensors.items():
            np.testing.assert_array_equal(r[name], want)  # digests checked on first read
        assert r.info("e").offset == r.info("a").offset
        want = xxhash.xxh3_64_hexdigest(tensors["a"].tobytes())
        assert r.info("a").parts["data"].digest == f"xxh3:{want}"


@pytest.mark.parametrize("threaded", [True, False])
def test_pwrite_path_byte_identical_to_ztensor_2_1_2(tmp_path, monkeypatch, threaded):
    """Every raw part through the pwrite path (tiny blocks, so parts span several): still the
    bytes ztensor 2.1.2 writes."""
    from tenfold.ztensor import _v2blobs as v2writer  # the raw-part write path

    tensors = _tensors(1)
    tensors["big"] = np.random.default_rng(1).standard_normal(5000, dtype=np.float32)
    theirs = _peer_write(tmp_path, _spec(tensors), "peer")
    monkeypatch.setattr(v2writer, "_use_thread", lambda: threaded)
    monkeypatch.setattr(v2writer, "_PIPE_MIN", 1)
    monkeypatch.setattr(v2writer, "_BLOCK", 4096)
    ours = tmp_path / "ours.zt"
    zt.save(ours, tensors, generation=2)
    assert ours.read_bytes() == theirs

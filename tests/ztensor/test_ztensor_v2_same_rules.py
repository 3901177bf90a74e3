"""Never write what you refuse to read: the v2 writer checks every object with the function the
reader checks it with at open (``_v2manifest.check_entry``), and the reader accepts what
ztensor 2.1.2 writes, opens and verifies, such as a ``zt.quant_group/1`` object whose only
attribute is ``group_size`` (2.1.2 checks no attribute of that profile, nor of ``zt.mx/1``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.errors import EncodeError, FormatError, UnsupportedError

PEER_SCRIPT = Path(__file__).with_name("_zt2_peer.py")
#: an interpreter with ztensor==2.1.2 (see test_ztensor_v2_writer.py)
PEER = os.environ.get("TENFOLD_ZTENSOR2_PYTHON")

QUANT = "zt.quant_group/1"
DATA = np.arange(16, dtype=np.uint8)  # 32 4-bit codes, two per byte
SCALES = np.linspace(0.5, 4.0, 8, dtype=np.float32)  # one per group of 4 along axis 1

#: objects 2.1.2 writes, opens and deep-verifies, though they break their profile's rules
#: (probed with ztensor 2.1.2: it refuses none of them)
LAX = {
    "group_size only": (QUANT, {"group_size": 4}, {"data": DATA, "scales": SCALES}),
    "no attributes": (QUANT, None, {"data": DATA, "scales": SCALES}),
    "empty attributes": (QUANT, {}, {"data": DATA, "scales": SCALES}),
    "odd values": (QUANT, {"bits": 7, "zero_point": "x"}, {"data": DATA, "scales": SCALES}),
    "one part": (QUANT, {"group_size": 4}, {"data": DATA}),
    "wrong sizes": (QUANT, {"group_size": 4}, {"data": DATA[:3], "scales": SCALES[:1]}),
    "extra part": (QUANT, {"group_size": 4}, {"data": DATA, "scales": SCALES, "x": DATA[:1]}),
    "mx without scale_form": ("zt.mx/1", {"group_size": 4}, {"data": DATA, "scales": SCALES}),
}

#: a zt.quant_group/1 object that meets every rule of the profile
FULL_ATTRS = {
    "bits": 4,
    "group_size": 4,
    "axis": 1,
    "packing": {"word": "u8", "order": "lsb_first", "per_word": 2},
    "scale_form": "f32_factors",
    "zero_point": {"form": "implied", "value": 8},
}


def _peer(*args: str) -> str:
    if not PEER:
        pytest.skip("TENFOLD_ZTENSOR2_PYTHON (an interpreter with ztensor==2.1.2) not set")
    r = subprocess.run([PEER, str(PEER_SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _write(path: Path, layout: str, attrs, parts) -> None:
    with zt.V2Writer(path) as w:
        w.add_object("q", [4, 8], parts, layout=layout, attributes=attrs)


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _read_back(path: Path, parts) -> list[str]:
    """tenfold opens ``path``, reads every part as written, and verifies it (warnings only);
    returns the warnings."""
    with zt.open(path) as r:
        obj = r["q"]
        assert isinstance(obj, zt.PartsObject)
        assert sorted(obj) == sorted(parts)
        for role, a in parts.items():
            assert obj[role].tobytes() == np.ascontiguousarray(a).tobytes()
        report = r.verify()
    assert report.ok, report.format()
    return [f.message for f in report.warnings]


@pytest.mark.parametrize("case", sorted(LAX))
def test_tenfold_reads_back_the_profile_objects_it_writes(tmp_path, case):
    # Before: the writer wrote each of these and the reader refused the file at open
    # ("zt.quant_group/1: attribute zero_point.form must be none, implied or tensor").
    layout, attrs, parts = LAX[case]
    p = tmp_path / "q.zt"
    _write(p, layout, attrs, parts)
    warnings = _read_back(p, parts)
    assert len(warnings) == 1 and warnings[0].startswith(f"{layout}: ")
    assert "read as its parts" in warnings[0]


def test_a_complete_quant_group_object_verifies_without_a_warning(tmp_path):
    p = tmp_path / "q.zt"
    _write(p, QUANT, FULL_ATTRS, {"data": DATA, "scales": SCALES})
    assert _read_back(p, {"data": DATA, "scales": SCALES}) == []


@pytest.mark.parametrize("case", sorted(LAX))
def test_ztensor_2_1_2_reads_and_verifies_what_tenfold_writes(tmp_path, case):
    layout, attrs, parts = LAX[case]
    p = tmp_path / "q.zt"
    _write(p, layout, attrs, parts)
    found = json.loads(_peer("verify", str(p)))[str(p)]
    assert found["verified"] == [len(parts), 0]
    assert found["objects"]["q"]["layout"] == layout
    assert found["objects"]["q"]["parts"] == {r: _sha(a) for r, a in parts.items()}


@pytest.mark.parametrize("case", sorted(LAX))
def test_tenfold_reads_and_verifies_what_ztensor_2_1_2_writes(tmp_path, case):
    # Before: refused at open, though 2.1.2 wrote, opened and verified the file.
    layout, attrs, parts = LAX[case]
    spec = {
        "objects": [
            {
                "name": "q",
                "shape": [4, 8],
                "layout": layout,
                "attributes": attrs,
                "parts": {
                    r: {"hex": np.ascontiguousarray(a).tobytes().hex(), "dtype": _dtype(a)}
                    for r, a in parts.items()
                },
            }
        ],
        "options": {},
        "attributes": None,
    }
    sp = tmp_path / "spec.json"
    sp.write_text(json.dumps(spec))
    theirs = tmp_path / "theirs.zt"
    _peer("write", str(sp), str(theirs))
    _read_back(theirs, parts)
    ours = tmp_path / "ours.zt"
    _write(ours, layout, attrs, parts)
    # byte for byte (an empty attribute map included: 2.1.2 leaves it out of the object,
    # which tenfold did not before)
    assert ours.read_bytes() == theirs.read_bytes()


def _dtype(a: np.ndarray) -> str:
    return {"uint8": "u8", "float32": "f32"}[a.dtype.name]


# -- the writer refuses what the reader refuses, before writing a byte ----------------------------
REFUSED = {
    "dense size": ("dense", [4, 8], {"data": DATA[:3]}, "dense-size"),
    "dense parts": ("dense", [4, 4], {"data": DATA, "x": DATA}, "exactly one part named 'data'"),
    "csr parts": ("zt.sparse_csr/1", [4, 8], {"values": SCALES}, "parts must be values"),
    "csr signed": (
        "zt.sparse_csr/1",
        [2, 4],
        {
            "values": SCALES[:2],
            "indices": np.array([0, 1], np.int64),
            "indptr": np.array([0, 1, 2], np.int64),
        },
        "indices must be plain u32 or u64",
    ),
    "coo rank": ("zt.sparse_coo/1", [], {"values": SCALES[:1], "coords": DATA[:0]}, "rank"),
    "type stored wrong": ("dense", [2], {"data": (DATA[:2], "u16", "bool")}, "bool is stored"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_writer_refuses_what_the_reader_refuses(tmp_path, case):
    # Before: each was written, and the reader refused the file at open (FormatError).
    layout, shape, parts, match = REFUSED[case]
    p = tmp_path / "r.zt"
    with zt.V2Writer(p) as w:
        with pytest.raises(EncodeError, match=match) as info:
            w.add_object("r", shape, parts, layout=layout)
        assert info.value.obj.startswith("object 'r'")
        w.add("s", np.ones(2, np.float32))  # nothing was written: the writer goes on
    with zt.open(p) as r:
        assert list(r) == ["s"]
        assert r.verify().ok


def test_the_reader_still_refuses_them(tmp_path):
    """The same rules on the reading side: a dense object whose size does not match (written
    by hand past the writer's check) is refused at open."""
    from tenfold.ztensor import _v2manifest

    good = {"dtype": "u8", "blob": [4096, 3]}
    with pytest.raises(FormatError, match="dense-size"):
        _v2manifest.check_entry("r", {"shape": [4], "layout": "dense", "parts": {"data": good}})
    assert _v2manifest.check_entry(
        "r", {"shape": [3], "layout": "dense", "parts": {"data": good}}
    ).shape == (3,)


# -- zt.sparse_coo/1: ztensor 2.1.2 checks none of its rules -------------------------------------
def _hand_v2(manifest: dict, blobs: dict[int, bytes]) -> bytes:
    """A v2 file holding ``blobs`` at their offsets and ``manifest``, past every writer check."""
    import struct

    import xxhash

    from tenfold.ztensor import _dcbor

    magic = bytes.fromhex("895a54320d0a1a0a")
    raw = _dcbor.encode(manifest)
    end = max(off + len(b) for off, b in blobs.items())
    moff = -(-end // 4096) * 4096
    buf = bytearray(moff)
    buf[:8] = magic
    for off, b in blobs.items():
        buf[off : off + len(b)] = b
    footer = struct.pack("<QQQII", moff, len(raw), xxhash.xxh3_64_intdigest(raw), 2, 0) + magic
    return bytes(buf) + raw + footer


COO_COORDS = np.array([0, 1, 2, 1, 0, 3], np.int64)  # i64: the profile allows u32 or u64
COO_VALUES = np.array([1.5, -2, 3], np.float32)


def test_a_coo_object_breaking_its_rules_does_not_close_the_file(tmp_path):
    """ztensor 2.1.2 writes, opens and verifies a COO object with i64 coordinates (it checks no
    rule of zt.sparse_coo/1; found by test_ztensor_v2_reference_corpus). Before, tenfold
    refused the whole file at open; now the file opens, its other objects read, the object's
    parts read exactly, and assembling it as a sparse tensor is refused, as is writing it."""
    man = {
        "objects": {
            "coo": {
                "shape": [3, 4],
                "layout": "zt.sparse_coo/1",
                "parts": {
                    "coords": {"dtype": "i64", "blob": [4096, 48]},
                    "values": {"dtype": "f32", "blob": [8192, 12]},
                },
            },
            "w": {
                "shape": [4],
                "layout": "dense",
                "parts": {"data": {"dtype": "u8", "blob": [12288, 4]}},
            },
        }
    }
    p = tmp_path / "lax.zt"
    p.write_bytes(
        _hand_v2(man, {4096: COO_COORDS.tobytes(), 8192: COO_VALUES.tobytes(), 12288: b"\1\2\3\4"})
    )
    with zt.open(p) as r:
        assert r["w"].tolist() == [1, 2, 3, 4]
        assert r.decoded("coo", "coords").tobytes() == COO_COORDS.tobytes()
        assert r.decoded("coo", "values").tobytes() == COO_VALUES.tobytes()
        with pytest.raises(
            FormatError, match=r"coords must be plain u32 or u64.*\[layout-rule\]"
        ) as e:
            r["coo"]
        assert e.value.obj == "object 'coo'"
        report = r.verify()
    assert not report.ok and "coords must be plain u32 or u64" in report.format()
    with zt.V2Writer(tmp_path / "w.zt") as w:
        with pytest.raises(EncodeError, match="coords must be plain u32 or u64"):
            w.add_object(
                "coo",
                [3, 4],
                {"coords": COO_COORDS, "values": COO_VALUES},
                layout="zt.sparse_coo/1",
            )


@pytest.mark.parametrize("layout", ["csr", "coo"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float8_e4m3fn", "float4_e2m1fn"])
def test_sparse_values_scipy_cannot_hold_come_as_sparse_tensors(tmp_path, layout, dtype):
    """SciPy has no float16, bfloat16, float8 or float4 values: a CSR array of them was built
    and then failed in toarray() ("Output dtype not compatible with inputs", found through
    tenfold.numpy.load_file of ztensor 2.1.2's sparse file); with sparse="auto" such objects
    come as SparseTensor, with sparse="scipy" the refusal says so."""
    pytest.importorskip("scipy.sparse", reason="scipy not installed")
    import ml_dtypes

    import tenfold.numpy as tnp

    dt = np.dtype(getattr(ml_dtypes, dtype, dtype))
    values = np.array([1.5, -2, 3], np.float32).astype(dt)
    if layout == "csr":
        t = zt.SparseTensor("csr", (3, 4), values, indices=np.array([1, 0, 3], np.uint64),
                            indptr=np.array([0, 1, 3, 3], np.uint64))  # fmt: skip
    else:
        t = zt.SparseTensor(
            "coo", (3, 4), values, coords=np.array([[0, 1, 2], [1, 0, 3]], np.uint64)
        )
    p = tmp_path / "s.zt"
    with zt.V2Writer(p) as w:
        w.add("s", t)
    want = t.todense()
    with zt.open(p) as r:
        got = r["s"]
        assert isinstance(got, zt.SparseTensor)
        assert got.todense().tobytes() == want.tobytes()
    with zt.open(p, sparse="scipy") as r:
        with pytest.raises(UnsupportedError, match=f"has no SciPy form.*{dtype}"):
            r["s"]
    loaded = tnp.load_file(p)["s"]
    assert loaded.dtype == dt and loaded.tobytes() == want.tobytes()

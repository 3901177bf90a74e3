"""Lossless or loud at the edges of convert (issue 21): names an npz member cannot carry back,
FOLD tensor names that collide once joined as ``<chunk>/<array>``, zTensor v2 file attributes
and v2 sources and targets streamed one tensor at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tenfold
import tenfold.ztensor as zt
from tenfold import fold
from tenfold.convert import convert, write_any
from tenfold.errors import EncodeError, UnsupportedError
from tenfold.fold._spec import INTERNAL_METADATA as FOLD_INTERNAL
from tenfold.interop import write_npz

VECTORS_V1 = Path(__file__).parents[1] / "conformance" / "ztensor" / "v1"

# -- npz member names -------------------------------------------------------------------------


@pytest.mark.parametrize("src_sfx", [".zt", ".safetensors"])
def test_nul_in_a_name_is_refused_for_npz_before_anything_is_written(tmp_path, src_sfx):
    # Before: zipfile cut the member name at the NUL, so 'a\x00b' came back as 'a' (and two
    # such names as one duplicate member).
    src, dst = tmp_path / ("s" + src_sfx), tmp_path / "d.npz"
    tenfold.save(src, {"a\x00b": np.arange(3, dtype=np.int32), "c": np.ones(2)})
    assert "a\x00b" in tenfold.load(src)  # the source holds it
    with pytest.raises(EncodeError, match=r"npz: array 'a\\x00b'.*U\+0000"):
        convert(src, dst)
    assert not dst.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s" + src_sfx]


@pytest.mark.parametrize(
    "name, why",
    [
        ("a\x00b", r"U\+0000"),
        ("a\ud800", "UTF-8"),
        ("x" * 65532, "65535"),  # + ".npy": one byte over the 16-bit length field
    ],
)
def test_names_a_zip_member_cannot_carry_are_refused(tmp_path, name, why):
    dst = tmp_path / "d.npz"
    with pytest.raises(EncodeError, match=why):
        write_npz(dst, {name: np.arange(2)}, fsync=False)
    assert not dst.exists()
    with pytest.raises(EncodeError, match=why):
        tenfold.save(dst, {name: np.arange(2)})
    assert not dst.exists()
    with fold.Writer(tmp_path / "c.fold") as w:  # a FOLD NPZ0 chunk is an npz archive too
        with pytest.raises(EncodeError, match=why):
            w.add_arrays("arrays", {name: np.arange(2)})
        w.finalize()


def test_longest_member_name_and_odd_names_round_trip(tmp_path):
    names = ["a\\b", "../up", "/abs", "ü/é", "x.npy", "", "x" * 65531]
    dst = tmp_path / "d.npz"
    write_npz(dst, {n: np.arange(i + 1) for i, n in enumerate(names)}, fsync=False)
    back = tenfold.load(dst)
    assert list(back) == names
    with zipfile.ZipFile(dst) as z:
        assert [i.filename for i in z.infolist()] == [n + ".npy" for n in names]
    assert list(np.load(dst).keys()) == names


# -- FOLD <chunk>/<array> names ---------------------------------------------------------------


def _colliding_fold(path):
    with fold.Writer(path) as w:
        w.add_state_dict("x", {"y/z": np.arange(2, dtype=np.int16)})
        w.add_state_dict("x/y", {"z": np.arange(3, dtype=np.int16)})
        w.finalize()


def test_fold_chunk_array_names_that_collide_are_refused(tmp_path):
    # Before: chunk 'x' array 'y/z' and chunk 'x/y' array 'z' both became 'x/y/z' and the
    # second silently replaced the first in load() and convert().
    src = tmp_path / "c.fold"
    _colliding_fold(src)
    both = r"chunk 'x/y' array 'z'.*'x/y/z'.*chunk 'x' array 'y/z'"
    with pytest.raises(UnsupportedError, match=both):
        fold.load(src)
    with pytest.raises(UnsupportedError, match=both):
        tenfold.load(src)
    for sfx in (".safetensors", ".zt", ".npz"):
        dst = tmp_path / ("d" + sfx)
        with pytest.raises(UnsupportedError, match=both):
            convert(src, dst)
        assert not dst.exists()
    # the framework front (safe_open / tenfold.torch) builds the same names: refused too
    with pytest.raises(UnsupportedError, match=both):
        tenfold.safe_open(src, framework="np")
    # one chunk at a time is still readable
    assert fold.load(src, chunk="x")["y/z"].tolist() == [0, 1]
    assert fold.load(src, chunk="x/y")["z"].tolist() == [0, 1, 2]


def test_fold_chunks_without_collision_keep_every_name(tmp_path):
    src = tmp_path / "c.fold"
    with fold.Writer(src) as w:
        w.add_state_dict("x", {"y/z": np.arange(2, dtype=np.int16)})
        w.add_state_dict("x/y", {"w": np.arange(3, dtype=np.int16)})
        w.finalize()
    assert sorted(fold.load(src)) == ["x/y/w", "x/y/z"]
    convert(src, tmp_path / "d.safetensors")
    assert sorted(tenfold.load(tmp_path / "d.safetensors")) == ["x/y/w", "x/y/z"]


# -- zTensor v2 file attributes ---------------------------------------------------------------

ATTRS = {"model_type": "llama", "revision": "3"}  # strings that every metadata target holds


def _v2(path, attrs, tensors=None):
    tensors = {"b": np.arange(4, dtype=np.int32), "w": np.ones((2, 3), np.float32)} | (
        tensors or {}
    )
    zt.save(path, tensors, generation=2, metadata=attrs)
    with tenfold.open(path) as r:
        assert r.metadata == attrs
    return tensors


def _metadata(path):
    if str(path).endswith(".zt") and zt.detect(path) == "0.1.0":
        with zt.Reader(path) as r:
            return dict(r.info(next(iter(r))).attrs.get("__metadata__", {}))
    if str(path).endswith(".fold"):
        with fold.Reader(path) as r:
            return {k: v for k, v in r.metadata.items() if k not in FOLD_INTERNAL}
    with tenfold.open(path) as r:
        return dict(r.metadata)


@pytest.mark.parametrize("dst_sfx", [".zt", ".safetensors", ".fold", ".oinf", "v2.zt"])
def test_v2_file_attributes_travel_to_every_target_that_holds_them(tmp_path, dst_sfx):
    # Before: a v1 / v2 source was read with ztensor.load(), which has no metadata, so its file
    # attributes were dropped for every target.
    src, dst = tmp_path / "s.zt", tmp_path / ("d" + dst_sfx)
    tensors = _v2(src, ATTRS)
    convert(src, dst, zt_generation=2 if dst_sfx == "v2.zt" else None)
    assert _metadata(dst) == ATTRS
    back = tenfold.load(dst)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)


@pytest.mark.parametrize("dst_sfx", [".npz", ".wtxt"])
def test_v2_file_attributes_are_refused_where_no_metadata_goes(tmp_path, dst_sfx):
    src, dst = tmp_path / "s.zt", tmp_path / ("d" + dst_sfx)
    _v2(src, ATTRS)
    with pytest.raises(EncodeError, match=rf"metadata '\w+': {dst_sfx[1:]} has no file"):
        convert(src, dst)
    assert not dst.exists()
    convert(src, dst, metadata=False)  # dropped on purpose
    assert sorted(tenfold.load(dst)) == ["b", "w"]


@pytest.mark.parametrize("dst_sfx", [".zt", ".safetensors", ".fold", ".oinf"])
def test_v2_attributes_that_are_not_strings_are_refused_between_formats(tmp_path, dst_sfx):
    src, dst = tmp_path / "s.zt", tmp_path / ("d" + dst_sfx)
    _v2(src, {"layers": 32, "name": "m"})
    with pytest.raises(EncodeError, match="metadata 'layers': value of type int"):
        convert(src, dst)
    assert not dst.exists()


def test_v2_to_v2_keeps_every_attribute_exactly(tmp_path):
    attrs = {
        "layers": 32,
        "scale": 0.125,
        "flags": [True, None, b"\x00\xff"],
        "nested": {"a": [1, -2], "b": "c"},
    }
    src, dst = tmp_path / "s.zt", tmp_path / "d.zt"
    _v2(src, attrs)
    convert(src, dst, zt_generation=2)
    with zt.open(dst) as r:
        assert r.metadata == attrs
        assert r.manifest_blob[1] > 0
    # the attributes are the manifest's, byte for byte: the same file as the source
    assert dst.read_bytes() == src.read_bytes()


def test_safetensors_metadata_becomes_v2_file_attributes(tmp_path):
    # Before: --zt-generation 2 loaded the tensors alone and wrote no attributes.
    src, dst = tmp_path / "s.safetensors", tmp_path / "d.zt"
    write_any(src, {"w": np.arange(6, dtype=np.float32)}, metadata={"format": "pt", "x y": "1"})
    convert(src, dst, zt_generation=2)
    assert zt.detect(dst) == "v2"
    with zt.open(dst) as r:
        assert r.metadata == {"format": "pt", "x y": "1"}
    convert(src, tmp_path / "none.zt", zt_generation=2, metadata=False)
    with tenfold.open(tmp_path / "none.zt") as r:
        assert r.metadata == {}


def test_v2_attribute_keys_follow_v2s_name_rule(tmp_path):
    src, dst = tmp_path / "s.safetensors", tmp_path / "d.zt"
    write_any(src, {"w": np.arange(2)}, metadata={"a\x00b": "v"})
    with pytest.raises(EncodeError, match=r"metadata 'a\\x00b': not a zTensor v2 attribute key"):
        convert(src, dst, zt_generation=2)
    assert not dst.exists()


def test_v2_attributes_read_by_ztensor_2_1_2(tmp_path):
    peer = os.environ.get("TENFOLD_ZTENSOR2_PYTHON")
    if not peer:
        pytest.skip("TENFOLD_ZTENSOR2_PYTHON (an interpreter with ztensor==2.1.2) not set")
    src, dst = tmp_path / "s.safetensors", tmp_path / "d.zt"
    write_any(src, {"w": np.arange(6, dtype=np.float32)}, metadata={"format": "pt"})
    convert(src, dst, zt_generation=2)
    v2 = tmp_path / "v2.zt"
    _v2(v2, {"layers": 32, "nested": {"a": [1, -2]}})
    out = tmp_path / "v2b.zt"
    convert(v2, out, zt_generation=2)
    code = (
        "import json, sys, ztensor\n"
        "print(json.dumps([dict(ztensor.open(p).attributes) for p in sys.argv[1:]]))\n"
    )
    r = subprocess.run(
        [peer, "-c", code, str(dst), str(out)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"format": "pt"}, {"layers": 32, "nested": {"a": [1, -2]}}]


# -- zTensor v2 targets and sources: what else is checked ------------------------------------


def test_v2_layouts_without_another_form_are_refused_by_name(tmp_path):
    src = tmp_path / "mx.zt"
    with zt.V2Writer(src) as w:
        w.add("a", np.arange(4, dtype=np.float32))
        w.add_object(
            "b",
            [32],
            {
                "data": (np.zeros(16, np.uint8), "u8", "f4_e2m1"),
                "scales": (np.zeros(1, np.uint8), "u8", "f8_e8m0"),
            },
            layout="zt.mx/1",
            attributes={"scale_form": "e8m0_exponent", "block_size": 32},
        )
    for dst, gen in [("d.safetensors", None), ("d.zt", None), ("e.zt", 2)]:
        with pytest.raises(EncodeError, match=r"tensor 'b' has layout zt.mx/1 \(parts data"):
            convert(src, tmp_path / dst, zt_generation=gen)
        assert not (tmp_path / dst).exists()


@pytest.mark.parametrize("gen", [1, "1", "v1", 3])
def test_unknown_zt_generation_is_refused(tmp_path, gen):
    # Before: anything but 0/0.1.0 went to ztensor.save(generation=gen), which wrote 0.1.0
    # for 1, "v1" or 3 without a word.
    src = tmp_path / "s.safetensors"
    write_any(src, {"w": np.arange(3)})
    with pytest.raises(UnsupportedError, match="zt_generation must be 0.1.0 or 2"):
        convert(src, tmp_path / "d.zt", zt_generation=gen)
    assert not (tmp_path / "d.zt").exists()


def test_v2_target_refuses_a_checksum_and_compresses_on_request(tmp_path):
    src = tmp_path / "s.safetensors"
    write_any(src, {"w": np.arange(3000, dtype=np.float32)})
    with pytest.raises(EncodeError, match="does not apply to zTensor v2"):
        convert(src, tmp_path / "d.zt", zt_generation=2, checksum="sha256")
    assert not (tmp_path / "d.zt").exists()
    convert(src, tmp_path / "z.zt", zt_generation=2, compress="zstd")
    with zt.open(tmp_path / "z.zt") as r:  # before: compress was ignored (raw parts)
        assert r.info("w").encoding == "zt.zstd-seekable/1"
        assert np.array_equal(r["w"], np.arange(3000, dtype=np.float32))


def test_v2_target_holds_the_dtypes_of_v2_and_keeps_sparse(tmp_path):
    f8 = np.arange(8, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    src = tmp_path / "s.safetensors"
    write_any(src, {"f8": f8, "c": np.ones(2, np.complex64)})
    dst = tmp_path / "d.zt"
    convert(src, dst, zt_generation=2)
    back = tenfold.load(dst)
    assert back["f8"].dtype == f8.dtype and back["f8"].tobytes() == f8.tobytes()
    v1 = VECTORS_V1 / "sparse_csr_coo.zt"
    out = tmp_path / "sparse.zt"
    convert(v1, out, zt_generation=2)
    with zt.open(out, sparse="raw") as r, zt.open(v1, sparse="raw") as r1:
        for n in r1:
            assert r.info(n).layout.startswith("zt.sparse_")
            assert np.array_equal(r[n].todense(), r1[n].todense())


# -- zTensor v2 sources and targets are streamed ------------------------------------------------

MiB = 1 << 20
N, EACH = 12, MiB  # 12 tensors of 1 MiB


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("v2-stream")
    rng = np.random.default_rng(21)
    m = {
        f"layer{i:02d}.weight": rng.standard_normal(EACH // 4).astype(np.float32) for i in range(N)
    }
    paths = {
        "v2": d / "m2.zt",
        "v2-zstd": d / "z2.zt",
        "zt": d / "m.zt",
        "safetensors": d / "m.safetensors",
        "npz": d / "m.npz",
    }
    zt.save(paths["v2"], m, generation=2, fsync=False)
    zt.save(paths["v2-zstd"], m, generation=2, encoding="zstd", fsync=False)
    write_any(paths["zt"], m, fsync=False)
    write_any(paths["safetensors"], m, fsync=False)
    write_npz(paths["npz"], m, fsync=False)
    return m, paths


_STREAM_CASES = [("v2", t) for t in (".zt", ".safetensors", ".oinf", ".fold", ".wtxt", ".npz")]
_STREAM_CASES += [("v2-zstd", ".safetensors")]
_STREAM_CASES += [(k, "v2.zt") for k in ("v2", "v2-zstd", "zt", "safetensors", "npz")]


@pytest.mark.parametrize("kind, target", _STREAM_CASES)
def test_v2_conversions_hold_about_one_tensor(model_files, tmp_path, kind, target):
    # Before: a v1 / v2 source was loaded whole (ztensor.load(copy=True)) and a v2 target was
    # written from read_any(): the traced peak was the whole model (12 MiB), not one tensor.
    model, paths = model_files
    dst = tmp_path / ("out" + target)
    tracemalloc.start()
    try:
        convert(paths[kind], dst, fsync=False, zt_generation=2 if target == "v2.zt" else None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    bound = 2 * EACH + 3 * MiB  # the tensor, one transient copy at most, fixed buffers
    assert peak < bound, f"{kind} -> {target}: traced peak {peak / MiB:.1f} MiB"
    back = tenfold.load(dst)
    assert sorted(back) == sorted(model)
    for k, v in model.items():
        assert np.array_equal(back[k], v)


_RSS_CHILD = """
import sys
from tenfold.convert import convert

def status(key):
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith(key + ":"))

before = status("VmRSS")
convert(sys.argv[1], sys.argv[2], fsync=False, zt_generation=sys.argv[3] or None)
print(status("VmHWM") - before)
"""


@pytest.mark.parametrize("direction", ["from-v2", "to-v2"])
def test_v2_conversion_peak_rss_is_about_one_tensor(tmp_path, direction):
    """A fresh process converts 8 x 16 MiB (128 MiB): its peak RSS (the kernel's VmHWM, file
    pages of the source's map included) grows by about one tensor, not by the model. Before:
    +259 MiB (the model decoded, plus every page of the map; v2 -> .zt), after: +22 MiB."""
    each, n = 16 * MiB, 8
    block = np.random.default_rng(0).standard_normal(each // 4, dtype=np.float32)
    tensors = {f"layer{i}.weight": block + np.float32(i) for i in range(n)}  # no shared blobs
    if direction == "from-v2":
        src, dst, gen = tmp_path / "s.zt", tmp_path / "d.zt", ""
        zt.save(src, tensors, generation=2, fsync=False)
    else:
        src, dst, gen = tmp_path / "s.safetensors", tmp_path / "d.zt", "2"
        write_any(src, tensors, fsync=False)
    del tensors, block
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, str(src), str(dst), gen],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    grew_kib = int(r.stdout)
    assert grew_kib < 3 * each // 1024, f"{direction}: peak RSS grew by {grew_kib >> 10} MiB"
    assert dst.stat().st_size > n * each

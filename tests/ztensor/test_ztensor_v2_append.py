"""zTensor v2 append (crash-safe generations), sharded models, the content digest (`tenfold id`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.errors import EncodeError, FormatError, UnsupportedError

HERE = Path(__file__).resolve().parent
PEER = os.environ.get("TENFOLD_ZTENSOR2_PYTHON")
LIB = str(Path(zt.__file__).resolve().parents[3])  # lib/, above tenfold/formats/ztensor


def _base(p: Path) -> dict[str, np.ndarray]:
    t = {"a": np.arange(4, dtype=np.float32), "m": np.ones((3, 3), np.int16)}
    zt.save(p, t, generation=2)
    return t


def test_append_adds_without_rewriting(tmp_path):
    p = tmp_path / "m.zt"
    t = _base(p)
    before = p.read_bytes()
    with zt.Writer(p, generation=2, append=True) as w:
        w.add("new", np.arange(5, dtype=np.int64))
        w.add("b_zstd", np.zeros(1000, np.float32), encoding="zstd")
    after = p.read_bytes()
    assert after[: len(before)] == before  # no existing byte changed
    got = zt.load(p)
    for k, a in t.items():
        np.testing.assert_array_equal(got[k], a)
    np.testing.assert_array_equal(got["new"], np.arange(5))
    np.testing.assert_array_equal(got["b_zstd"], np.zeros(1000, np.float32))
    report = zt.verify(p)
    assert report.ok
    with pytest.raises(EncodeError, match="already in the file"):
        zt.append(p, {"a": np.zeros(1)})
    assert p.read_bytes() == after
    with pytest.raises(EncodeError, match="not canonical"):
        zt.Writer(p, generation=2, append=True, canonical=True)


def test_append_is_byte_identical_to_ztensor_2_1_2(tmp_path):
    if not PEER:
        pytest.skip("TENFOLD_ZTENSOR2_PYTHON (an interpreter with ztensor==2.1.2) not set")
    script = (
        "import ztensor, numpy as np, sys\n"
        "p = sys.argv[1]\n"
        "with ztensor.Writer(p) as w:\n"
        "    w.add('a', np.arange(4, dtype=np.float32).view(np.uint8), shape=[4], dtype='f32')\n"
        "with ztensor.Writer(p, append=True, canonical=False) as w:\n"
        "    w.add('b', np.arange(3, dtype=np.float32).view(np.uint8), shape=[3], dtype='f32')\n"
        "with ztensor.Writer(p, append=True, canonical=False, align=4096) as w:\n"
        "    w.add('c', np.arange(4, dtype=np.float32).view(np.uint8), shape=[4], dtype='f32')\n"
    )
    theirs = tmp_path / "peer.zt"
    subprocess.run([PEER, "-c", script, str(theirs)], check=True, timeout=60)
    ours = tmp_path / "ours.zt"
    zt.save(ours, {"a": np.arange(4, dtype=np.float32)}, generation=2)
    zt.append(ours, {"b": np.arange(3, dtype=np.float32)})
    zt.append(ours, {"c": np.arange(4, dtype=np.float32)}, align=4096)
    assert ours.read_bytes() == theirs.read_bytes()


_CHILD = """
import os, sys
sys.path.insert(0, {lib!r})
import numpy as np, tenfold.ztensor as zt
zt.append(sys.argv[1], {{"big": np.full(int(sys.argv[2]), 7, np.uint8), "small": np.arange(9)}})
"""


def _state(p: Path, old: set[str]) -> str:
    with zt.open(p) as r:
        names = set(r)
        if names == old:
            r.read_all()
            return "old"
        assert names == old | {"big", "small"}
        assert int(r["big"][-1]) == 7 and r["small"].tolist() == list(range(9))
        return "new"


@pytest.mark.parametrize("step", ["start", "grown", "blob", "written", "done"])
def test_append_killed_at_each_step_leaves_old_or_new(tmp_path, step):
    p = tmp_path / "m.zt"
    old = set(_base(p))
    env = dict(os.environ, TENFOLD_ZT_APPEND_CRASH=step)
    r = subprocess.run(
        [sys.executable, "-c", _CHILD.format(lib=LIB), str(p), "100000"], env=env, timeout=60
    )
    assert r.returncode == 9
    assert _state(p, old) == ("new" if step == "done" else "old")
    zt.append(p, {"later": np.zeros(2)})  # the file can be appended to again
    assert "later" in zt.load(p)


@pytest.mark.slow
def test_append_survives_sigkill_at_random_times(tmp_path):
    """Kill a process appending 64 MiB at random moments: every outcome opens."""
    rng = np.random.default_rng(0)
    seen = set()
    for i in range(12):
        p = tmp_path / f"m{i}.zt"
        old = set(_base(p))
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD.format(lib=LIB), str(p), str(64 << 20)]
        )
        time.sleep(float(rng.uniform(0.05, 1.2)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        seen.add(_state(p, old))
    assert seen <= {"old", "new"}


def test_sharded_model_round_trip_and_verify(tmp_path):
    t = {f"w{i}": np.full((64, 64), i, np.float32) for i in range(5)}
    root = tmp_path / "model.zt"
    paths = zt.save_sharded(root, t, shard_bytes=140000)
    assert [Path(p).name for p in paths] == [
        "model.zt",
        "model-00001.zt",
        "model-00002.zt",
        "model-00003.zt",
    ]
    with zt.open(root) as r:
        assert sorted(r.shards) == ["00001", "00002", "00003"]
        for k, a in t.items():
            np.testing.assert_array_equal(r[k], a)
        assert {p.shard for i in r.infos() for p in i.parts.values()} == set(r.shards)
    assert zt.verify(root).ok
    with zt.open(tmp_path / "model-00002.zt") as r:
        assert r.data_shard
    # a damaged shard is caught by verify (whole-file digest) and by verify_shards=True
    data = bytearray((tmp_path / "model-00002.zt").read_bytes())
    data[65536] ^= 1
    (tmp_path / "model-00002.zt").write_bytes(bytes(data))
    assert not zt.verify(root).ok
    # a missing shard: the root still opens; reading from it fails loudly
    os.unlink(tmp_path / "model-00003.zt")
    with zt.open(root, verify_checksums=False) as r:
        r["w0"]
        # a FormatError naming the shard, as for a sharded index's missing shard file
        with pytest.raises(FormatError, match=r"shard '00003'.*not found"):
            r["w4"]


def test_content_digest_ignores_layout(tmp_path):
    rng = np.random.default_rng(1)
    t = {
        "emb": rng.standard_normal((8, 4)).astype(np.float32),
        "mask": rng.random(5) < 0.5,
        "ids": np.arange(7, dtype=np.int64),
    }
    files = {
        "canonical": lambda p: zt.save(p, t, generation=2),
        "zstd4k": lambda p: zt.save(p, t, generation=2, encoding="zstd", align=4096),
        "v010": lambda p: zt.save(p, t),
        "sharded": lambda p: zt.save_sharded(p, t, shard_bytes=64),
    }
    ids = set()
    for name, write in files.items():
        p = tmp_path / f"{name}.zt"
        write(p)
        ids.add(zt.content_digest(p))
    assert len(ids) == 1
    p = tmp_path / "appended.zt"
    zt.save(p, {k: t[k] for k in ("emb", "ids")}, generation=2)
    zt.append(p, {"mask": t["mask"]})
    assert zt.content_digest(p) in ids
    t2 = dict(t, ids=np.arange(7, dtype=np.int32))  # same values, another dtype
    zt.save(tmp_path / "other.zt", t2, generation=2)
    assert zt.content_digest(tmp_path / "other.zt") not in ids
    assert zt.content_digest(tmp_path / "canonical.zt", "xxh3").startswith("xxh3:")


def test_content_digest_is_undefined_without_part_digests():
    corpus = HERE.parent / "conformance" / "ztensor" / "v2-corpus" / "valid"
    with pytest.raises(UnsupportedError, match="content digest is undefined"):
        zt.content_digest(corpus / "minimal.zt")
    assert zt.content_digest(corpus / "verify-ok.zt").startswith("sha256:")


def test_cli_id(tmp_path, capsys):
    from tenfold.cli import main

    p = tmp_path / "m.zt"
    zt.save(p, {"x": np.arange(3)}, generation=2)
    assert main(["id", str(p)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(zt.content_digest(p)) and str(p) in out
    assert main(["id", "--algo", "xxh3", str(p)]) == 0
    assert capsys.readouterr().out.startswith("xxh3:")


_ = json


def _merged(p: Path) -> bytes:
    """The manifest bytes of ``p``."""
    with zt.open(p) as r:
        moff, mlen = r.manifest_blob
        return bytes(r.stored_bytes()[moff : moff + mlen])


@pytest.mark.parametrize("attrs", [None, {"kind": "model", "n": 2}])
def test_append_manifest_is_the_encoding_of_the_merged_value(tmp_path, attrs):
    """The appender copies the old entries' bytes instead of encoding them again: the result
    must be exactly the deterministic encoding of the merged manifest, for files with file
    and object attributes, sparse objects, zstd parts and names of every length."""
    from tenfold.ztensor import _dcbor
    from tenfold.ztensor.sparse import SparseTensor

    p = tmp_path / "m.zt"
    with zt.Writer(p, generation=2, attributes={"a": [1, 2.5, None]}, canonical=False) as w:
        w.add("x", np.arange(3, dtype=np.float32), attrs={"unit": "m"})
        w.add("a_much_longer_name_than_the_others", np.ones(2, np.int8))
        w.add("z", np.zeros(100, np.float64), encoding="zstd")
        w.add(
            "s",
            SparseTensor(
                "csr",
                (2, 3),
                np.array([1.0, 2.0], np.float32),
                indices=np.array([0, 2], np.uint64),
                indptr=np.array([0, 1, 2], np.uint64),
            ),
        )
    old = _dcbor.decode(_merged(p))
    with zt.Writer(p, generation=2, append=True) as w:
        w.add("b", np.arange(2, dtype=np.int32))
        w.add("yy", np.arange(7, dtype=np.uint16), attrs={"k": True})
        if attrs is not None:
            w.set_attributes(attrs)
    got = _merged(p)
    want = dict(old)
    objects = dict(old["objects"])
    with zt.open(p) as r:
        root = r._root
    objects["b"] = root["objects"]["b"]
    objects["yy"] = root["objects"]["yy"]
    want["objects"] = objects
    if attrs is not None:
        want["attributes"] = attrs
    assert got == _dcbor.encode(want)
    with zt.open(p) as r:
        np.testing.assert_array_equal(r["yy"], np.arange(7))
        assert r.metadata == (attrs or {"a": [1, 2.5, None]})
    assert zt.verify(p).ok


def test_append_to_a_sharded_root_keeps_its_shard_table(tmp_path):
    """Appending rebuilt the root from objects and attributes only, dropping the shard table
    that the existing objects refer to: the file no longer opened."""
    t = {f"w{i}": np.full((64, 64), i, np.float32) for i in range(3)}
    root = tmp_path / "model.zt"
    zt.save_sharded(root, t, shard_bytes=20000)
    zt.append(root, {"extra": np.arange(3, dtype=np.float32)})
    with zt.open(root) as r:
        assert sorted(r.shards)
        for k, a in t.items():
            np.testing.assert_array_equal(r[k], a)
        np.testing.assert_array_equal(r["extra"], np.arange(3, dtype=np.float32))
    assert zt.verify(root).ok

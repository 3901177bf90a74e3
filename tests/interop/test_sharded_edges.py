"""Sharded checkpoints at their edges (issue 21): indexes naming themselves or each other,
``total_size`` that is not an integer, ``inspect`` checked against the index, thousands of
shards under a low descriptor limit, one ``stat`` per shard rather than per name, and
symbolic links leading out of the checkpoint's directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tenfold
import tenfold.convert
from tenfold import sharded
from tenfold.cli import main
from tenfold.errors import FormatError

ROOT = Path(__file__).resolve().parents[2]


def _model(n: int = 5, size: int = 64) -> dict[str, np.ndarray]:
    return {f"layer.{i}.weight": np.full((size,), i, np.float32) for i in range(n)}


def _write_index(path: Path, weight_map: dict, metadata: dict | None = None) -> Path:
    path.write_text(json.dumps({"metadata": metadata or {}, "weight_map": weight_map}))
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# -- an index that names itself, two that name each other ---------------------------------------
def _self_naming(tmp_path: Path) -> Path:
    p = tmp_path / "m.zt.index.json"
    p.write_text('{"weight_map": {"w": "m.zt.index.json"}}')  # 40 valid bytes
    assert p.stat().st_size == 40
    return p


def _each_other(tmp_path: Path) -> Path:
    _write_index(tmp_path / "b.index.json", {"w": "a.index.json"})
    return _write_index(tmp_path / "a.index.json", {"w": "b.index.json"})


def _index_under_tensor_suffix(tmp_path: Path) -> Path:
    _write_index(tmp_path / "x.zt", {"w": "x.zt"})  # an index by content, .zt by name
    return _write_index(tmp_path / "m.zt.index.json", {"w": "x.zt"})


@pytest.mark.parametrize(
    ("make", "shard"),
    [
        (_self_naming, "m.zt.index.json"),
        (_each_other, "b.index.json"),
        (_index_under_tensor_suffix, "x.zt"),
    ],
)
def test_a_shard_that_is_an_index_is_refused_naming_it(tmp_path, capsys, make, shard):
    p = make(tmp_path)
    match = f"shard '{shard}' is itself a sharded checkpoint's index"
    with tenfold.open(p) as r, pytest.raises(FormatError, match=match):
        r["w"]
    with pytest.raises(FormatError, match=match):
        tenfold.load(p)
    with pytest.raises(FormatError, match=match):
        sharded.inspect(p)
    with pytest.raises(FormatError, match=match):
        tenfold.convert.convert(p, tmp_path / "o.zt")
    report = sharded.verify(p)
    assert not report.ok and match in report.format()
    rc, out, err = _run(capsys, "verify", str(p))
    assert rc == 1 and match in out and "Traceback" not in out + err
    rc, out, err = _run(capsys, "inspect", str(p))
    assert rc == 1 and match in err and len(err.strip().splitlines()) == 1


def test_torch_load_of_a_self_naming_index_is_refused(tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed (extra: tenfold[torch])")
    import tenfold.torch as tt

    p = _self_naming(tmp_path)
    with pytest.raises(FormatError, match="'m.zt.index.json' is itself a sharded"):
        tt.load_file(p)


# -- total_size ----------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["1280", 1280.0, [1280], True, None])
def test_verify_refuses_a_total_size_that_is_not_an_integer(tmp_path, bad):
    tenfold.save(tmp_path / "model.zt", _model(), max_shard_size=600)
    p = tmp_path / "model.zt.index.json"
    doc = json.loads(p.read_text())
    assert doc["metadata"]["total_size"] == 1280  # right, but for its type
    doc["metadata"]["total_size"] = bad
    p.write_text(json.dumps(doc))
    report = sharded.verify(p)
    assert not report.ok
    assert (
        f"total_size: not an integer; expected an integer byte count, got {type(bad).__name__}"
        in (report.format())
    )
    doc["metadata"]["total_size"] = 1280
    p.write_text(json.dumps(doc))
    assert sharded.verify(p).ok


# -- inspect reads the index ---------------------------------------------------------------------
def test_inspect_refuses_an_entry_its_shard_lacks(tmp_path, capsys):
    tenfold.save(tmp_path / "model.zt", _model(), max_shard_size=600)
    p = tmp_path / "model.zt.index.json"
    doc = json.loads(p.read_text())
    doc["weight_map"]["ghost"] = "model-00002-of-00003.zt"
    p.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=r"shard 'model-00002-of-00003.zt'.*lacks.*'ghost'"):
        sharded.inspect(p)
    rc, _, err = _run(capsys, "inspect", str(p))
    assert rc == 1 and "'ghost'" in err


def test_inspect_lists_the_index_metadata(tmp_path, capsys):
    tenfold.save(tmp_path / "model.zt", _model(), max_shard_size=600)
    p = tmp_path / "model.zt.index.json"
    rows = sharded.inspect(p)
    assert [r["name"] for r in rows if r.get("layout") != "metadata"] == list(_model())
    assert {"name": "total_size", "dtype": "int", "layout": "metadata", "value": "1280"} in rows
    rc, out, _ = _run(capsys, "inspect", "--json", str(p))
    assert rc == 0
    assert json.loads(out)["metadata"] == [
        {"name": "total_size", "dtype": "int", "layout": "metadata", "value": "1280"}
    ]


# -- many shards ---------------------------------------------------------------------------------
def _safetensors_bytes(name: str, value: float) -> bytes:
    header = json.dumps({name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + np.float32(value).tobytes()


def _many_shards(d: Path, n: int) -> Path:
    wm = {}
    for i in range(n):
        name, file = f"t{i:05d}", f"m-{i + 1:05d}-of-{n:05d}.safetensors"
        (d / file).write_bytes(_safetensors_bytes(name, i))
        wm[name] = file
    return _write_index(d / "m.safetensors.index.json", wm, {"total_size": 4 * n})


def test_thousands_of_shards_under_a_low_descriptor_limit(tmp_path):
    """1,200 shards, 256 descriptors: load, a walk over the reader, verify and inspect close
    shards as they go (the limit is lowered in a child process, not in the test's)."""
    from tenfold import _kernels

    if _kernels.pure_python() or _kernels.load("fmap").__name__.endswith("_ref_fmap"):
        pytest.skip(
            "the pure-Python fmap maps with Python's mmap, which keeps a duplicate descriptor "
            "per live map before Python 3.13 (trackfd=False): one per shard whose arrays live"
        )
    p = _many_shards(tmp_path, 1200)
    code = textwrap.dedent(
        f"""
        import resource, sys
        import numpy as np
        import tenfold
        from tenfold import sharded
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        p = {str(p)!r}
        got = tenfold.load(p)
        assert [float(got[f"t{{i:05d}}"][0]) for i in range(1200)] == list(range(1200))
        with tenfold.open(p) as r:
            assert sum(float(r[n][0]) for n in r) == sum(range(1200))
            assert len(r._shards) <= sharded.MAX_OPEN_SHARDS
        report = sharded.verify(p)
        assert report.ok, report.format()
        assert len(sharded.inspect(p)) == 1201
        print("ok")
        """
    )
    # the tenfold this test runs (an installed wheel in CI, with its compiled kernels)
    env = dict(os.environ, PYTHONPATH=str(Path(tenfold.__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_open_shards_are_bounded_and_reopened(tmp_path):
    t = _model(8)
    tenfold.save(tmp_path / "m.zt", t, max_shard_size=300)  # 8 shards
    with tenfold.open(tmp_path / "m.zt.index.json", max_open_shards=2) as r:
        for _ in range(2):
            for k in reversed(list(t)):
                np.testing.assert_array_equal(r[k], t[k])
                assert len(r._shards) <= 2
        kept = r["layer.0.weight"]
        for k in t:
            r[k]
        np.testing.assert_array_equal(kept, t["layer.0.weight"])  # valid after its shard closed
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_open_shards"):
            tenfold.open(tmp_path / "m.zt.index.json", max_open_shards=bad)


def test_threads_never_see_a_shard_closed_under_them(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    t = _model(12)
    tenfold.save(tmp_path / "m.zt", t, max_shard_size=300)
    names = list(t) * 20
    with tenfold.open(tmp_path / "m.zt.index.json", max_open_shards=3) as r:
        with ThreadPoolExecutor(6) as ex:
            got = list(ex.map(lambda k: float(r.read(k)[0]), names))
        assert len(r._shards) <= 3
    assert got == [float(k.split(".")[1]) for k in names]


def test_torch_load_of_more_shards_than_stay_open(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (extra: tenfold[torch])")
    import tenfold.torch as tt

    t = {f"w{i}": np.arange(64, dtype=np.float32) + 1000 * i for i in range(40)}
    tenfold.save(tmp_path / "m.zt", t, max_shard_size=300)
    got = tt.load_file(tmp_path / "m.zt.index.json", max_open_shards=3)
    for k, a in t.items():
        assert torch.equal(got[k], torch.from_numpy(a)), k


def test_opening_stats_each_shard_not_each_name(tmp_path, monkeypatch):
    """An index of 10,000 names over 3 shards: the files are checked once per shard."""
    names = [f"n{i}" for i in range(10_000)]
    files = [f"m-0000{k}-of-00003.zt" for k in (1, 2, 3)]
    for k, f in enumerate(files):
        tenfold.save(tmp_path / f, {n: np.zeros(1, np.uint8) for n in names[k::3]}, fsync=False)
    p = _write_index(tmp_path / "m.zt.index.json", {n: files[i % 3] for i, n in enumerate(names)})
    calls = []
    for mod, fn in ((os, "stat"), (os, "lstat"), (os.path, "isfile"), (os.path, "exists")):
        real = getattr(mod, fn)
        monkeypatch.setattr(mod, fn, lambda *a, _r=real, **k: (calls.append(a), _r(*a, **k))[1])
    with tenfold.open(p) as r:
        assert len(r) == 10_000
    monkeypatch.undo()
    assert 0 < len(calls) < 40 * len(files), len(calls)  # per shard: a realpath and a stat


# -- symbolic links ------------------------------------------------------------------------------
@pytest.fixture
def tree(tmp_path):
    """``ckpt/`` (the index and shard 1) and ``outside/`` (a shard 2 it may not reach)."""
    t = _model(4)
    src = tmp_path / "src"
    src.mkdir()
    tenfold.save(src / "m.zt", t, max_shard_size=600)  # 2 shards
    ckpt, outside = tmp_path / "ckpt", tmp_path / "outside"
    ckpt.mkdir()
    outside.mkdir()
    os.replace(src / "m.zt.index.json", ckpt / "m.zt.index.json")
    os.replace(src / "m-00001-of-00002.zt", ckpt / "m-00001-of-00002.zt")
    os.replace(src / "m-00002-of-00002.zt", outside / "m-00002-of-00002.zt")
    return t, ckpt, outside


def _all_refuse(index: Path, link: str, **kw) -> None:
    match = f"symbolic links leading outside the index's directory.*{link!r}"
    with pytest.raises(FormatError, match=match):
        tenfold.open(index, **kw)
    with pytest.raises(FormatError, match=match):
        tenfold.load(index, **kw)
    with pytest.raises(FormatError, match=match):
        sharded.inspect(index, **kw)
    report = sharded.verify(index, **kw)
    assert not report.ok and "trust_links=True" in report.format()


def _all_read(index: Path, t: dict, **kw) -> None:
    got = tenfold.load(index, **kw)
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in t.items()}
    assert sharded.verify(index, **kw).ok
    assert len([r for r in sharded.inspect(index, **kw) if r.get("shard")]) == len(t)


def test_a_link_to_a_file_outside_is_refused_naming_it(tree):
    t, ckpt, outside = tree
    (ckpt / "m-00002-of-00002.zt").symlink_to(outside / "m-00002-of-00002.zt")
    _all_refuse(ckpt / "m.zt.index.json", "m-00002-of-00002.zt")
    with pytest.raises(FormatError, match=str(outside)):
        tenfold.open(ckpt / "m.zt.index.json")  # and where it leads
    _all_read(ckpt / "m.zt.index.json", t, trust_links=True)  # the documented opt-in


def test_a_relative_link_out_and_a_dangling_one_are_refused(tree):
    _, ckpt, outside = tree
    (ckpt / "m-00002-of-00002.zt").symlink_to("../outside/m-00002-of-00002.zt")
    _all_refuse(ckpt / "m.zt.index.json", "m-00002-of-00002.zt")
    os.unlink(ckpt / "m-00002-of-00002.zt")
    (ckpt / "m-00002-of-00002.zt").symlink_to("/nonexistent/secret.zt")
    _all_refuse(ckpt / "m.zt.index.json", "m-00002-of-00002.zt")


def test_a_link_inside_the_directory_is_followed(tree):
    t, ckpt, outside = tree
    (ckpt / "blobs").mkdir()
    os.replace(outside / "m-00002-of-00002.zt", ckpt / "blobs" / "abc123")
    (ckpt / "m-00002-of-00002.zt").symlink_to("blobs/abc123")
    _all_read(ckpt / "m.zt.index.json", t)


def test_a_shard_under_a_linked_directory_outside_is_refused(tree):
    t, ckpt, outside = tree
    p = ckpt / "m.zt.index.json"
    doc = json.loads(p.read_text())
    wm = doc["weight_map"]
    doc["weight_map"] = {k: "sub/" + v if v.startswith("m-00002") else v for k, v in wm.items()}
    p.write_text(json.dumps(doc))
    (ckpt / "sub").symlink_to(outside, target_is_directory=True)
    match = r"'sub/m-00002-of-00002.zt' \(under the link 'sub'\)"
    with pytest.raises(FormatError, match=match):
        tenfold.open(p)
    _all_refuse(p, "sub/m-00002-of-00002.zt")
    _all_read(p, t, trust_links=True)


def test_the_index_reached_through_a_linked_directory_reads(tree, tmp_path):
    t, ckpt, outside = tree
    os.replace(outside / "m-00002-of-00002.zt", ckpt / "m-00002-of-00002.zt")
    (tmp_path / "alias").symlink_to(ckpt, target_is_directory=True)
    _all_read(tmp_path / "alias" / "m.zt.index.json", t)


def _hf_cache(root: Path, t: dict) -> Path:
    """A repository in the Hugging Face cache layout: every file of the snapshot a relative
    link to ``../../blobs/<sha>``."""
    repo = root / "hub" / "models--org--name"
    snap = repo / "snapshots" / "0123abcd"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    src = root / "hf-src"
    src.mkdir()
    tenfold.save(src / "model.safetensors", t, max_shard_size=600)
    for i, f in enumerate(sorted(src.iterdir())):
        sha = f"{i:040x}"
        os.replace(f, repo / "blobs" / sha)
        (snap / f.name).symlink_to(f"../../blobs/{sha}")
    return snap / "model.safetensors.index.json"


def test_the_hugging_face_cache_layout_reads(tmp_path):
    t = _model(4)
    index = _hf_cache(tmp_path, t)
    assert index.is_symlink() and (index.parent / "model-00001-of-00002.safetensors").is_symlink()
    _all_read(index, t)
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (extra: tenfold[torch])")
    import tenfold.torch as tt

    got = tt.load_file(index)
    assert all(torch.equal(got[k], torch.from_numpy(a)) for k, a in t.items())


def test_a_cache_link_leaving_the_repository_is_refused(tmp_path):
    t = _model(4)
    index = _hf_cache(tmp_path, t)
    shard = index.parent / "model-00002-of-00002.safetensors"
    other = tmp_path / "hub" / "models--evil--repo" / "blobs"
    other.mkdir(parents=True)
    os.replace(shard.resolve(), other / "x")
    shard.unlink()
    shard.symlink_to("../../../models--evil--repo/blobs/x")
    match = "outside the index's directory or its cache repository.*'model-00002-of-00002"
    with pytest.raises(FormatError, match=match):
        tenfold.open(index)
    _all_refuse(index, "model-00002-of-00002.safetensors")
    _all_read(index, t, trust_links=True)
    pytest.importorskip("torch", reason="PyTorch is not installed (extra: tenfold[torch])")
    import tenfold.torch as tt

    with pytest.raises(FormatError, match=match):
        tt.load_file(index)
    assert sorted(tt.load_file(index, trust_links=True)) == sorted(t)


def test_a_snapshots_folder_outside_a_cache_repository_gets_no_wider_root(tmp_path):
    """``snapshots/<rev>`` under a folder not named like a cache repository: only the index's
    own directory counts."""
    t = _model(4)
    index = _hf_cache(tmp_path, t)
    os.rename(tmp_path / "hub" / "models--org--name", tmp_path / "hub" / "downloads")
    index = tmp_path / "hub" / "downloads" / "snapshots" / "0123abcd" / index.name
    with pytest.raises(FormatError, match="symbolic links leading outside the index's dir"):
        tenfold.open(index)

"""A save to a path replaces the checkpoint at that path whichever layout each save used: a
one-file save over a sharded one, a sharded save over a one-file one, and a sharded save into
fewer shards leave none of the earlier files to be served (found by a new-user trial: the old
index, or the old file, still gave the old weights)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tenfold
import tenfold.convert
from tenfold.cli import main

SHARD = 600_000  # bytes: four 256 KiB tensors make two shards


def _model(value: float, n: int = 4) -> dict[str, np.ndarray]:
    return {f"layer.{i}.weight": np.full((256, 256), value, np.float32) for i in range(n)}


def _first_value(path) -> float:
    with tenfold.open(path) as r:
        return float(r["layer.0.weight"][0, 0])


@pytest.mark.parametrize("suffix", [".safetensors", ".zt"])
def test_one_file_over_a_sharded_checkpoint_removes_index_and_shards(tmp_path, suffix):
    path = tmp_path / f"model{suffix}"
    tenfold.save(path, _model(1.0), max_shard_size=SHARD)
    assert os.path.exists(f"{path}.index.json")
    tenfold.save(path, _model(2.0))
    assert sorted(os.listdir(tmp_path)) == [path.name]
    assert _first_value(path) == 2.0


def test_sharded_over_a_one_file_checkpoint_removes_the_file(tmp_path):
    path = tmp_path / "model.safetensors"
    tenfold.save(path, _model(1.0))
    tenfold.save(path, _model(2.0), max_shard_size=SHARD)
    assert sorted(os.listdir(tmp_path)) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    assert _first_value(f"{path}.index.json") == 2.0


def test_fewer_shards_remove_the_earlier_shards_only(tmp_path):
    path = tmp_path / "model.safetensors"
    tenfold.save(path, _model(1.0, n=6), max_shard_size=SHARD)
    assert len([n for n in os.listdir(tmp_path) if "-of-00003" in n]) == 3
    (tmp_path / "model-notes.txt").write_text("mine")  # not named like a shard: stays
    (tmp_path / "other-00001-of-00003.safetensors").write_bytes(b"x")  # another stem: stays
    tenfold.save(path, _model(2.0, n=4), max_shard_size=SHARD)
    assert sorted(os.listdir(tmp_path)) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model-notes.txt",
        "model.safetensors.index.json",
        "other-00001-of-00003.safetensors",
    ]
    with tenfold.open(f"{path}.index.json") as r:
        assert sorted(r) == sorted(_model(0.0, n=4)) and _first_value(r.path) == 2.0


def test_a_sharded_save_that_fits_one_file_replaces_the_sharded_one(tmp_path):
    path = tmp_path / "model.safetensors"
    tenfold.save(path, _model(1.0), max_shard_size=SHARD)
    tenfold.save(path, _model(2.0, n=1), max_shard_size=SHARD)  # one shard: one plain file
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]


def test_convert_and_the_command_replace_the_other_layout(tmp_path):
    src = tmp_path / "src.safetensors"
    tenfold.save(src, _model(3.0))
    out = tmp_path / "out"
    out.mkdir()
    dst = out / "x.zt"
    tenfold.convert.convert(src, dst, max_shard_size=SHARD)
    assert os.path.exists(f"{dst}.index.json")
    tenfold.convert.convert(src, dst)
    assert sorted(os.listdir(out)) == ["x.zt"]
    assert main(["convert", str(src), str(dst), "--max-shard-size", str(SHARD)]) == 0
    assert sorted(os.listdir(out)) == [
        "x-00001-of-00002.zt",
        "x-00002-of-00002.zt",
        "x.zt.index.json",
    ]
    assert _first_value(f"{dst}.index.json") == 3.0


def test_a_one_file_save_with_no_index_beside_it_lists_no_directory(tmp_path, monkeypatch):
    # the common case costs one stat: a folder of many files is not listed on every save
    listed = []
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda d=".": listed.append(d) or real(d))
    tenfold.save(tmp_path / "m.safetensors", _model(1.0, n=1))
    assert listed == []


def test_a_path_through_a_link_cleans_the_folder_written_to(tmp_path):
    # "link/../b/model.x" is written through the link (into real/b), while its text folds to
    # "b/model.x": the cleanup must act where the files went, never in the folder the text
    # names (there another checkpoint lost its shards)
    (tmp_path / "real" / "b").mkdir(parents=True)
    (tmp_path / "real" / "a").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "link").symlink_to(tmp_path / "real" / "a")
    (tmp_path / "work" / "b").mkdir()  # another checkpoint, at work/b
    tenfold.save(tmp_path / "work" / "b" / "model.safetensors", _model(7.0, n=6),
                 max_shard_size=SHARD)  # fmt: skip
    theirs = sorted(os.listdir(tmp_path / "work" / "b"))
    path = os.path.join(tmp_path, "work", "link", "..", "b", "model.safetensors")
    tenfold.save(path, _model(1.0), max_shard_size=SHARD)
    tenfold.save(path, _model(2.0))
    assert sorted(os.listdir(tmp_path / "work" / "b")) == theirs
    assert _first_value(tmp_path / "work" / "b" / "model.safetensors.index.json") == 7.0
    assert sorted(os.listdir(tmp_path / "real" / "b")) == ["model.safetensors"]


@pytest.mark.parametrize(
    "src", ["model-00001-of-00002.safetensors", "model.safetensors.index.json"]
)
def test_convert_refuses_to_replace_its_own_source(tmp_path, src):
    # the save would remove the layout the source belongs to: shard 2's tensors, or every input
    path = tmp_path / "model.safetensors"
    tenfold.save(path, _model(1.0), max_shard_size=SHARD)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(tenfold.errors.EncodeError, match="write to another path"):
        tenfold.convert.convert(tmp_path / src, path)
    assert main(["convert", str(tmp_path / src), str(path)]) == 1
    assert sorted(os.listdir(tmp_path)) == before
    tenfold.convert.convert(tmp_path / src, tmp_path / "elsewhere.safetensors")


def test_the_drop_in_writers_replace_a_sharded_checkpoint_too(tmp_path):
    import tenfold.numpy

    path = tmp_path / "model.safetensors"
    tenfold.save(path, _model(1.0), max_shard_size=SHARD)
    tenfold.numpy.save_file(_model(2.0), path)
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]
    torch = pytest.importorskip("torch", reason="torch is not installed")
    tft = pytest.importorskip("tenfold.torch")
    tenfold.save(path, _model(1.0), max_shard_size=SHARD)
    tft.save_file({k: torch.from_numpy(v) for k, v in _model(3.0).items()}, path)
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]
    assert _first_value(path) == 3.0

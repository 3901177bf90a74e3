"""zTensor v2 data shards on disk: a missing one is a FormatError naming it (not a bare
FileNotFoundError), and a shard that is a symbolic link leading out of the root file's
directory is refused naming it unless ``trust_links=True`` (the rule of tenfold.core.links)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tenfold
import tenfold.ztensor as zt
from tenfold.errors import FormatError


def _model(d, name="m.zt"):
    tensors = {f"t{i}": np.full(2048, i, np.float32) for i in range(4)}
    paths = zt.save_sharded(str(d / name), tensors, shard_bytes=16384, fsync=False)
    assert len(paths) >= 3  # the root and at least two data shards
    return paths, tensors


def test_missing_data_shard_is_a_format_error_naming_it(tmp_path):
    paths, tensors = _model(tmp_path)
    os.remove(paths[1])
    with zt.open(paths[0]) as r:
        missing = [n for n in tensors if r.info(n).main_part.shard is not None]
        with pytest.raises(FormatError, match=r"shard '00001'.*not found"):
            for n in missing:
                np.asarray(r[n])
    with pytest.raises(FormatError, match="not found"):
        tenfold.load(paths[0])


def test_shards_inside_the_directory_read(tmp_path):
    paths, tensors = _model(tmp_path)
    got = tenfold.load(paths[0])
    assert all(np.array_equal(got[k], v) for k, v in tensors.items())


def test_data_shard_linked_out_of_the_directory_is_refused(tmp_path):
    inner, outer = tmp_path / "ckpt", tmp_path / "elsewhere"
    inner.mkdir()
    outer.mkdir()
    paths, tensors = _model(inner)
    target = outer / os.path.basename(paths[1])
    os.replace(paths[1], target)
    os.symlink(target, paths[1])
    with pytest.raises(FormatError, match=r"symbolic link leading outside.*m-00001\.zt"):
        tenfold.load(paths[0])
    got = tenfold.load(paths[0], trust_links=True)  # the documented opt-in
    assert all(np.array_equal(got[k], v) for k, v in tensors.items())


def test_data_shard_linked_inside_the_directory_reads(tmp_path):
    paths, tensors = _model(tmp_path)
    store = tmp_path / "store"
    store.mkdir()
    target = store / "blob"
    os.replace(paths[1], target)
    os.symlink(os.path.relpath(target, tmp_path), paths[1])
    got = tenfold.load(paths[0])
    assert all(np.array_equal(got[k], v) for k, v in tensors.items())


def test_trust_links_is_accepted_by_every_generation(tmp_path):
    # the multi-file options mean nothing for a one-file 0.1.0 checkpoint: accepted, as by v2
    for gen in (None, 2):
        p = tmp_path / f"g{gen}.zt"
        tenfold.save(
            p, {"w": np.arange(3, dtype=np.float32)}, **({"generation": gen} if gen else {})
        )
        with tenfold.open(p, trust_links=True) as r:
            assert r["w"].tolist() == [0, 1, 2]

"""The TARIDX split parameter is ``split`` (issue 11 item 4); ``fold=`` / ``--fold`` still work
for one release with a deprecation warning; ``Index.from_buffer(root=, split=)`` reads samples."""

from __future__ import annotations

import pytest
from test_taridx_members import _fold, _truth

import tenfold.taridx as tx
from tenfold.cli import main as cli_main
from tenfold.errors import UnsupportedError


@pytest.fixture
def split(tmp_path):
    _fold(tmp_path, shards=(0, 1), per=3)
    tx.build(tmp_path, "t", show_progress=False)
    return tmp_path


def _samples(ds):
    return [{e: bytes(v) for e, v in ds[i].items()} for i in range(len(ds))]


def test_split_keyword_everywhere(split, tmp_path):
    with tx.Dataset(split, split="t") as ds:
        assert ds.split == "t" and len(ds) == 6
        want = _samples(ds)
    assert len(tx.shard_paths(split, split="t")) == 2
    with tx.Index.open(split / "t.taridx", root=split, split="t") as idx:
        assert tx.stale_shards(idx, split, split="t") == {}
        assert len(idx) == 6
    assert tx.verify(split / "t.taridx", root=split, split="t").ok
    # split without root: the shards beside the index (this crashed on an assert before)
    rep = tx.verify(split / "t.taridx", split="t")
    assert rep.ok and "2 shards match the index" in str(rep.findings)
    assert tx.build(split, split="t", out=tmp_path / "again.taridx", show_progress=False)
    assert tx.export_wids(split, split="t").exists()
    truth = _truth(split)
    assert sorted(truth.values()) == sorted(v for s in want for v in s.values())


def test_fold_keyword_deprecated_but_works(split, tmp_path):
    with pytest.warns(DeprecationWarning, match=r"Dataset\(fold=\.\.\.\) is deprecated"):
        ds = tx.Dataset(split, fold="t")
    with ds:
        assert ds.split == "t"
        with pytest.warns(DeprecationWarning, match="Dataset.fold is deprecated"):
            assert ds.fold == "t"
    with pytest.warns(DeprecationWarning, match="build"):
        tx.build(split, fold="t", out=tmp_path / "b.taridx", show_progress=False)
    with pytest.warns(DeprecationWarning, match="shard_paths"):
        assert len(tx.shard_paths(split, fold="t")) == 2
    with pytest.warns(DeprecationWarning, match=r"Index.open"):
        idx = tx.Index.open(split / "t.taridx", root=split, fold="t")
    with idx:
        assert len(idx.read(idx.stems()[0])) == 2
        with pytest.warns(DeprecationWarning, match="stale_shards"):
            assert tx.stale_shards(idx, split, fold="t") == {}
    with pytest.warns(DeprecationWarning, match="verify"):
        assert tx.verify(split / "t.taridx", root=split, fold="t").ok
    with pytest.warns(DeprecationWarning, match="export_wids"):
        tx.export_wids(split, fold="t", out=tmp_path / "w.json")
    with pytest.warns(DeprecationWarning, match="export_dali"):
        tx.export_dali(split, fold="t", out_dir=tmp_path)
    # the same name twice is accepted; two names, or none, are refused
    with pytest.warns(DeprecationWarning):
        tx.Dataset(split, "t", fold="t").close()
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="split= only"):
        tx.Dataset(split, "t", fold="u")
    with pytest.raises(TypeError, match="missing the split name"):
        tx.Dataset(split)
    with pytest.raises(TypeError, match="missing the split name"):
        tx.build(split)


def test_cli_fold_option_deprecated(split, capsys):
    assert cli_main(["index", "check", str(split), "--split", "t"]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert cli_main(["index", "check", str(split), "--fold", "t"]) == 0
    assert "--fold is deprecated; use --split" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["index", "check", str(split)])  # one of them is required
    capsys.readouterr()


def test_index_from_buffer_reads_samples(split):
    data = (split / "t.taridx").read_bytes()
    with tx.Dataset(split, "t") as ds:
        want = {stem: s for stem, s in zip(ds.index.stems(), _samples(ds), strict=True)}
    with tx.Index.from_buffer(data, root=split, split="t") as idx:
        assert {k: {e: bytes(v) for e, v in idx[k].items()} for k in idx} == want
    with tx.Index.from_buffer(data) as idx:  # no root given: it cannot know the shards
        with pytest.raises(UnsupportedError, match="pass root= and split="):
            idx.read(next(iter(want)))
    # a Dataset over the index's bytes (what from_buffer uses), also through pickling
    import pickle

    with tx.Dataset(split, "t", index=data) as ds:
        assert ds.index_path == "<buffer>"
        assert _samples(pickle.loads(pickle.dumps(ds))) == list(want.values())

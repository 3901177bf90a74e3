"""Webdataset's shard naming ``<split>-<digits>.tar`` (``train-000000.tar``) beside
``<split>_<digits>.tar``: ``tenfold index build DIR --split train`` used to find only the
underscore form ("no shards train-_<id>.tar" for ``--split train-``, exit 2)."""

from __future__ import annotations

import io
import tarfile

import pytest

import tenfold.taridx as tx
from tenfold.cli import main as cli_main
from tenfold.errors import FormatError


def _shards(root, sep, split="train", n=3):
    want = []
    for k in range(n):
        with tarfile.open(
            root / f"{split}{sep}{k:06d}.tar", "w", format=tarfile.USTAR_FORMAT
        ) as tf:
            for j in range(2):
                stem = f"{k * 2 + j:06d}"
                for ext, data in (("jpg", bytes([k, j]) * 40), ("cls", b"%d" % j)):
                    info = tarfile.TarInfo(f"{stem}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
                want.append((stem, ext, data))
    return want


def test_cli_builds_dash_named_shards(tmp_path, capsys):
    _shards(tmp_path, "-")
    assert cli_main(["index", "build", str(tmp_path), "--split", "train"]) == 0
    capsys.readouterr()
    assert tx.shard_paths(tmp_path, "train") == [tmp_path / f"train-{k:06d}.tar" for k in range(3)]
    with tx.Dataset(tmp_path, "train") as ds:
        assert ds.shards == [f"train-{k:06d}.tar" for k in range(3)]
        assert len(ds) == 6
        assert ds.get("000005") == {"jpg": bytes([2, 1]) * 40, "cls": b"1"}
    assert cli_main(["index", "check", str(tmp_path), "--split", "train"]) == 0


def test_cli_split_with_trailing_separator_says_what_to_type(tmp_path, capsys):
    _shards(tmp_path, "-")
    assert cli_main(["index", "build", str(tmp_path), "--split", "train-"]) == 2
    err = capsys.readouterr().err
    assert "no shards train-_<id>.tar or train--<id>.tar" in err
    assert "the split is the name before the separator: 'train'" in err


def test_both_separators_in_one_split_refused(tmp_path):
    _shards(tmp_path, "-", n=2)
    _shards(tmp_path, "_", n=1)
    with pytest.raises(FormatError, match=r"train_000000\.tar.*train-000000\.tar.*one naming"):
        tx.build(tmp_path, "train", show_progress=False)


def test_other_splits_and_names_not_taken(tmp_path):
    _shards(tmp_path, "-", n=1)
    _shards(tmp_path, "-", split="train-extra", n=1)  # another split: train-extra-000000.tar
    (tmp_path / "train-x1.tar").write_bytes(b"")
    assert [p.name for p in tx.shard_paths(tmp_path, "train")] == ["train-000000.tar"]


def test_remote_listing_takes_dash_named_shards(tmp_path):
    fsspec = pytest.importorskip("fsspec", reason="fsspec is not installed")
    _shards(tmp_path, "-", n=2)
    tx.build(tmp_path, "train", show_progress=False)
    fs = fsspec.filesystem("memory")
    for f in tmp_path.iterdir():
        fs.pipe(f"/taridx-dash/{f.name}", f.read_bytes())
    ds = tx.Dataset("memory://taridx-dash", "train")
    assert ds.shards == ["train-000000.tar", "train-000001.tar"]
    assert ds.get("000003") == {"jpg": bytes([1, 1]) * 40, "cls": b"1"}


def test_sample_by_key(tmp_path):
    _shards(tmp_path, "-", n=2)
    tx.build(tmp_path, "train", show_progress=False)
    with tx.Dataset(tmp_path, "train") as ds:
        assert ds["000001"] == ds.get("000001") == ds[1] == {"jpg": bytes([0, 1]) * 40, "cls": b"1"}
        with pytest.raises(KeyError, match="nope"):
            ds["nope"]

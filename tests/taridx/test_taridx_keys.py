"""Dataset keys (webdataset's ``__key__``: ``with_keys=True``, ``ds.key(i)``) and slices."""

from __future__ import annotations

import io
import tarfile

import pytest

import tenfold.taridx as tx
from tenfold.errors import IntegrityError

#: member names covering webdataset's split rule: directory part kept, first dot after the
#: last slash, extension case, a pax long name, a leading ./, non-ASCII directory and stem
NAMES = [
    "a.jpg",
    "a.cls",
    "dir/b.x.JPG",
    "dir/b.x.txt",
    "long" * 40 + "/deep/c.jpg",
    "./d.jpg",
    "d.e/d2.Tar.GZ",
    "é/ü.jpg",
    "é/ü.json",
]


def _tar(names: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for k, name in enumerate(names):
            data = f"{name}:{k}".encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _webdataset_samples(blob: bytes) -> list[dict]:
    wds = pytest.importorskip("webdataset.tariterators", reason="webdataset is not installed")
    files = wds.tar_file_iterator(io.BytesIO(blob))
    return list(wds.group_by_keys(dict(f, __url__="x") for f in files))


@pytest.fixture
def root(tmp_path):
    (tmp_path / "train_0000.tar").write_bytes(_tar(NAMES))
    tx.build(tmp_path, "train", show_progress=False)
    return tmp_path


@pytest.fixture
def remote(root):
    fsspec = pytest.importorskip("fsspec", reason="fsspec is not installed")
    fs = fsspec.filesystem("memory")
    url = "memory://taridx-keys"
    for f in root.iterdir():
        fs.pipe(f"{url}/{f.name}", f.read_bytes())
    yield url
    fs.rm(url, recursive=True)


def _all_paths(ds) -> None:
    """Every way to a sample gives webdataset's key and payloads."""
    n = len(ds)
    keys = [ds.key(i) for i in range(n)]
    assert [ds.key(i - n) for i in range(n)] == keys
    for i, sample in enumerate(ds):
        assert sample["__key__"] == keys[i]
        assert ds[i]["__key__"] == keys[i]
        assert ds[keys[i]]["__key__"] == keys[i]
        assert ds.get(keys[i])["__key__"] == keys[i]
    assert [s["__key__"] for s in ds.__getitems__(list(range(n))[::-1])] == keys[::-1]
    assert [s["__key__"] for s in ds[1::2]] == keys[1::2]


@pytest.mark.parametrize("payload", ["bytes", "memoryview"])
@pytest.mark.parametrize("where", ["local", "remote", "remote_nocache"])
def test_keys_are_webdatasets(root, request, where, payload):
    wds = _webdataset_samples((root / "train_0000.tar").read_bytes())
    at = root if where == "local" else request.getfixturevalue("remote")
    opts = {"cache_bytes": 0} if where == "remote_nocache" else {}
    with tx.Dataset(at, "train", with_keys=True, payload=payload, **opts) as ds:
        assert len(ds) == len(wds) == 6
        assert [ds.key(i) for i in range(len(ds))] == [s["__key__"] for s in wds]
        assert wds[2]["__key__"] == "long" * 40 + "/deep/c"  # a pax long name
        for s in wds:
            got = ds[s["__key__"]]
            assert list(got)[0] == "__key__"  # first, as in webdataset's samples
            assert {k: bytes(v) if k != "__key__" else v for k, v in got.items()} == {
                k: v for k, v in s.items() if k != "__url__"
            }
        _all_paths(ds)


def test_keys_off_by_default_and_with_options(root):
    with tx.Dataset(root, "train") as ds:
        assert "__key__" not in ds[0] and "__key__" not in ds.__getitems__([0])[0]
        assert ds.key(1) == "dir/b"  # the method works either way
        with pytest.raises(IndexError):
            ds.key(6)
        with pytest.raises(IndexError):
            ds.key(-7)
    with tx.Dataset(root, "train", ["cls"], {"cls": len}, with_keys=True) as ds:
        assert ds[0] == {"__key__": "a", "cls": len(b"a.cls:1")}  # decoders leave it alone
        assert ds[1] == {"__key__": "dir/b"}  # no wanted member: the key still


def test_directory_keys_lookup(root, remote):
    for at in (root, remote):
        with tx.Dataset(at, "train") as ds:
            assert ds["dir/b"] == ds["b"] == ds.get("dir/b")
            assert ds.get("other/b") is None  # the index groups by stem: the directory is checked
            with pytest.raises(KeyError):
                ds["other/b"]
            assert ds.get("é/ü")["json"] == "é/ü.json:8".encode()


def test_key_of_a_changed_shard_is_refused(root):
    index = (root / "train.taridx").read_bytes()
    names = ["z.jpg" if n == "a.jpg" else n for n in NAMES]
    (root / "train_0000.tar").write_bytes(_tar(names))  # same layout, another first name
    with tx.Dataset(root, "train", index=index, verify_headers=False) as ds:
        assert ds.key(1) == "dir/b"
        with pytest.raises(IntegrityError, match="member name"):
            ds.key(0)
        with pytest.raises(IntegrityError, match="member name"):
            tx.Dataset(root, "train", index=index, verify_headers=False, with_keys=True)[0]


@pytest.mark.parametrize("where", ["local", "remote"])
def test_slices_are_lists_read_as_a_batch(root, request, where, monkeypatch):
    at = root if where == "local" else request.getfixturevalue("remote")
    with tx.Dataset(at, "train") as ds:
        every = [ds[i] for i in range(len(ds))]
        batches = []
        real = ds.__getitems__
        monkeypatch.setattr(ds, "__getitems__", lambda ix: batches.append(list(ix)) or real(ix))
        for sl in (
            slice(1, 3),
            slice(None),
            slice(None, None, -1),
            slice(-2, None),
            slice(5, 2),
            slice(-100, 100, 2),
            slice(4, 0, -3),
        ):
            got = ds[sl]
            assert type(got) is list and got == every[sl], sl
        assert len(batches) == 7 and batches[0] == [1, 2]
        with pytest.raises(ValueError):
            ds[::0]

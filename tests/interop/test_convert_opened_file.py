"""``tenfold convert``'s raw block copies read the file the source's reader opened, and the
file each range is in (:class:`tenfold.tensor_source.RawRange`).

Before: the copies opened the source's path again, so a source file replaced under its name
(an atomic rename of a new version) after the conversion opened it was read from the new
file for the tensors copied raw (the rest from the old one: a mixed, silently wrong result);
and a range was a range of "the source's main file", whatever file its tensor lay in.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tenfold
import tenfold.convert
from tenfold.errors import IntegrityError

OLD = {
    "w": np.arange(4096, dtype=np.float32).reshape(64, 64),
    "b": np.arange(100, dtype=np.int64),
    "h": np.linspace(-1, 1, 300).astype(np.float16),
}
NEW = {k: (v[::-1] + 7).astype(v.dtype).reshape(v.shape) for k, v in OLD.items()}

_open_source = tenfold.convert.open_source
SOURCES = [".zt", ".safetensors", ".oinf", ".fold"]
TARGETS = [".safetensors", ".zt", ".npz", ".oinf", ".fold"]


def _write(path, tensors):
    if os.fspath(path).endswith(".fold"):  # uncompressed: its tensors are copied raw
        from tenfold.fold import save

        save(path, tensors, compress=None)
    else:
        tenfold.save(path, tensors)


def _same(path, want):
    got = tenfold.load(path)
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        a = np.asarray(got[k])
        assert a.dtype == v.dtype and a.shape == v.shape, k
        assert a.tobytes() == v.tobytes(), f"tensor {k!r}: other bytes than the source's"


def _ranges(path):
    with _open_source(path) as s:
        got = {n: s.raw(n) for n in s.names}
        assert all(r is not None for r in got.values())  # every tensor is copied raw
        return {n: (r[0], r[1]) for n, r in got.items()}  # offset, nbytes


@pytest.fixture
def replaced_after_open(monkeypatch):
    """Make ``convert`` open its source, then replace the source file under its name (a new
    version renamed over it) before anything is copied."""
    real = tenfold.convert.open_source

    def open_then_replace(path, **kw):
        src = real(path, **kw)
        fresh = f"{os.fspath(path)}.new{os.path.splitext(os.fspath(path))[1]}"
        _write(fresh, NEW)
        os.replace(fresh, path)
        return src

    monkeypatch.setattr(tenfold.convert, "open_source", open_then_replace)


@pytest.mark.parametrize("dst", TARGETS)
@pytest.mark.parametrize("suffix", SOURCES)
def test_a_source_replaced_during_a_conversion_is_copied_as_it_was_opened(
    tmp_path, replaced_after_open, suffix, dst
):
    src, out = tmp_path / f"a{suffix}", tmp_path / f"b{dst}"
    _write(src, OLD)
    # the replacement has the same layout (names, types, shapes, tensor offsets): only the
    # values differ, so a copy that reads the new file gives plausible, wrong values
    _write(tmp_path / f"probe{suffix}", NEW)
    assert _ranges(tmp_path / f"probe{suffix}") == _ranges(src)
    tenfold.convert.convert(src, out, metadata=False)
    _same(src, NEW)  # the path names the new file now
    _same(out, OLD)  # the conversion copied the file it opened


def test_a_torch_checkpoint_replaced_during_a_conversion_is_copied_as_it_was_opened(
    tmp_path, monkeypatch
):
    torch = pytest.importorskip("torch", reason="writing a .pt source needs torch")
    src, out = tmp_path / "a.pt", tmp_path / "b.safetensors"
    torch.save({k: torch.from_numpy(v.copy()) for k, v in OLD.items()}, src)
    real = tenfold.convert.open_source

    def open_then_replace(path, **kw):
        s = real(path, **kw)
        torch.save({k: torch.from_numpy(v.copy()) for k, v in NEW.items()}, tmp_path / "n.pt")
        os.replace(tmp_path / "n.pt", path)
        return s

    monkeypatch.setattr(tenfold.convert, "open_source", open_then_replace)
    tenfold.convert.convert(src, out, metadata=False)
    _same(out, OLD)


# -- a multi-file zTensor v2 model: each range is in its own data shard ----------------------
def _multi_file(tmp_path):
    from tenfold.formats.ztensor.v2writer import save_sharded

    t = {
        "a": np.full(1000, 3, np.float32),
        "b": np.arange(2000, dtype=np.int32),
        "c": np.full(1000, -1.5, np.float64),
    }
    paths = save_sharded(tmp_path / "m.zt", t, shard_bytes=4096)
    assert len(paths) == 4  # the root and one data shard per tensor
    return t, paths


def test_a_multi_file_v2_range_carries_its_data_shard(tmp_path):
    t, (root, *shards) = _multi_file(tmp_path)
    with tenfold.convert.open_source(root) as s:
        files = set()
        for n, v in t.items():
            raw = s.raw(n)
            assert raw is not None, n  # before: no range (they were copied through get())
            assert raw.file.path in shards and raw.checksum.startswith("xxh3:")
            files.add(raw.file.path)
            got = b"".join(bytes(b) for b in s.blocks(raw))
            assert got == v.tobytes(), n
            # the same range of the root file holds other bytes: a range without its file
            # could be read from the wrong one
            with open(root, "rb") as f:
                f.seek(raw.offset)
                assert f.read(raw.nbytes) != got
        assert len(files) == 3


@pytest.mark.parametrize("dst", TARGETS)
def test_a_multi_file_v2_model_converts_from_its_data_shards(tmp_path, dst):
    t, (root, *_) = _multi_file(tmp_path)
    tenfold.convert.convert(root, tmp_path / f"out{dst}", metadata=False)
    _same(tmp_path / f"out{dst}", t)


@pytest.mark.parametrize("dst", TARGETS)
def test_a_damaged_data_shard_is_caught_on_the_way(tmp_path, dst):
    # the xxh3 digest of each part is checked as its blocks are copied
    t, (root, *shards) = _multi_file(tmp_path)
    with tenfold.open(root) as r:
        part = r.info("b").parts["data"]
        where, at = r.shard_path(part.shard), part.offset + 40
    with open(where, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(IntegrityError, match="'b'"):
        tenfold.convert.convert(root, tmp_path / f"out{dst}", metadata=False)
    assert not (tmp_path / f"out{dst}").exists()

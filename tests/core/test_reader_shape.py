"""One reader shape for every format (issue 9 item 4) and the resources the core owns (issue 11
item 1): the protocol over all seven formats, fork safety, no leaked descriptors."""

from __future__ import annotations

import collections.abc
import gc
import os
import time
from pathlib import Path

import numpy as np
import pytest

import tenfold
from tenfold.core.reader import INFO_FIELDS, MappedReader, TensorReader

FORMATS = ["ztensor", "oinf", "fold", "wtxt", "taridx", "safetensors", "npz"]

ARRAYS = {
    "w": np.arange(12, dtype=np.float32).reshape(3, 4),
    "b": np.array([1, -2, 3], dtype=np.int32),
}

BIG = 5 << 20  # a FOLD chunk above the 4 MiB that sends its SHA-256 to a worker thread


def make(fmt: str, directory: Path, *, big: bool = False) -> Path:
    """A small file of ``fmt`` in ``directory`` (FOLD: JSON, STEN and BLOB chunks)."""
    directory.mkdir(parents=True, exist_ok=True)
    if fmt == "taridx":
        import tenfold.taridx as tx

        return Path(tx.demo(directory))
    if fmt == "fold":
        import tenfold.fold as fold

        p = directory / "m.fold"
        blob = np.random.default_rng(3).integers(0, 256, BIG if big else 3000, dtype=np.uint8)
        with fold.Writer(p, ecc="rs(32)") as w:
            w.add_json("meta", {"a": 1, "b": [1, 2]})
            w.add_state_dict("tensors", ARRAYS)
            w.add_chunk("blob", "BLOB", blob)
            w.finalize({"model": "test"})
        return p
    suffix = {
        "ztensor": ".zt",
        "oinf": ".oinf",
        "wtxt": ".wtxt",
        "safetensors": ".safetensors",
        "npz": ".npz",
    }[fmt]
    p = directory / f"m{suffix}"
    tenfold.save(p, ARRAYS)
    return p


def same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, memoryview):
        return isinstance(b, memoryview) and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_has_the_one_reader_shape(tmp_path, fmt):
    p = make(fmt, tmp_path)
    assert tenfold.detect(p) == fmt
    with tenfold.open(p) as r:
        assert isinstance(r, TensorReader)
        assert isinstance(r, collections.abc.Mapping)
        assert isinstance(r, MappedReader)
        assert not r.closed and r.path == os.fspath(p) and r.size == p.stat().st_size
        keys = list(r)
        assert keys and len(r) == len(keys) == len(set(keys))
        assert list(r.keys()) == keys
        assert all(k in r for k in keys)
        assert "no such key" not in r and 7 not in r
        with pytest.raises(KeyError):
            r["no such key"]
        with pytest.raises(KeyError):
            r.info("no such key")
        assert r.get("no such key") is None
        sentinel = object()
        assert r.get("no such key", sentinel) is sentinel
        values = list(r.values())
        items = list(r.items())
        assert [k for k, _ in items] == keys
        for k, v, (_, v2) in zip(keys, values, items, strict=True):
            assert same(r[k], v) and same(r.get(k), v) and same(v2, v)
            info = r.info(k)
            for field in INFO_FIELDS:
                assert hasattr(info, field), (fmt, field)
            assert info.name == k and isinstance(info.dtype, str)
            assert isinstance(info.shape, tuple) and all(isinstance(d, int) for d in info.shape)
            assert info.byte_range is None or (
                0 <= info.byte_range[0] <= info.byte_range[1] <= r.size
            )
            assert isinstance(info.encoding, str)
            assert info.checksum is None or isinstance(info.checksum, str)
            assert isinstance(info.extras, collections.abc.Mapping)
        assert isinstance(r.metadata, collections.abc.Mapping)
        assert r.verify().ok
        assert repr(r).startswith("<") and os.path.basename(p) in repr(r)
        assert r == r and r != 0  # readers compare by identity (never read both files)
        assert hash(r) == hash(r)
    assert r.closed


@pytest.mark.parametrize("fmt", ["ztensor", "oinf", "wtxt", "safetensors", "npz"])
def test_tensor_formats_give_the_arrays_that_were_saved(tmp_path, fmt):
    p = make(fmt, tmp_path)
    with tenfold.open(p) as r:
        assert sorted(r) == sorted(ARRAYS)
        for k, want in ARRAYS.items():
            got = r[k]
            assert isinstance(got, np.ndarray) and np.array_equal(got, want)
            assert same(r.read(k), got)
            assert r.info(k).shape == want.shape
    assert {k: v.tolist() for k, v in tenfold.load(p).items()} == {
        k: v.tolist() for k, v in ARRAYS.items()
    }


def test_fold_open_gives_what_load_gives(tmp_path):
    """Issue 22: ``tenfold.open`` of a FOLD file gives the tensors (as ``tenfold.load``), the
    chunks staying available through the FOLD API (``tenfold.fold.open``)."""

    p = make("fold", tmp_path)
    loaded = tenfold.load(p)
    with tenfold.open(p) as r:
        assert list(r) == list(loaded) == list(ARRAYS)
        assert same(dict(r.items()), loaded)
        assert r.info("w").np_dtype == np.float32 and r.info("w").shape == (3, 4)
        assert r.info("w").extras["chunk"] == "tensors"
        assert same(r.read("w", (slice(1, 3), 2)), ARRAYS["w"][1:3, 2])
        assert r.metadata == {"model": "test"}  # the index's bookkeeping left out
        assert [c.name for c in r.chunks_reader.chunks] == ["meta", "tensors", "blob"]
        assert r.verify().ok
    assert r.closed and r.chunks_reader.closed


def test_fold_values_are_decoded_by_chunk_type(tmp_path):
    import tenfold.fold as fold

    p = make("fold", tmp_path)
    with fold.open(p) as r:
        assert list(r) == ["meta", "tensors", "blob"]
        assert r["meta"] == {"a": 1, "b": [1, 2]}  # JSON: the decoded value
        assert same(r["tensors"], ARRAYS)  # STEN / NPZ0 / TSAV: a dict of arrays
        blob = r["blob"]  # any other type: the payload, a read-only uint8 array
        assert blob.dtype == np.uint8 and blob.size == 3000 and not blob.flags.writeable
        assert same(r.read("blob"), blob)
        info = r.info("blob")
        assert info.shape == (3000,) and info.extras["ctype"] == "BLOB"
        assert r.metadata["model"] == "test"


def test_taridx_is_a_mapping_of_sample_key_to_sample(tmp_path):
    import tenfold.taridx as tx

    p = make("taridx", tmp_path)
    # the Index mapping's samples are zero-copy views, as the Dataset's with payload="memoryview";
    # the Dataset's default payloads are bytes of the same content
    views = tx.Dataset(tmp_path, "demo", payload="memoryview")
    with tenfold.open(p) as r, views as ds, tx.Dataset(tmp_path, "demo") as plain:
        assert len(r) == len(ds) == 6
        keys = list(r)
        assert keys == [f"sample{i:04d}" for i in range(6)]
        for i, k in enumerate(keys):
            assert set(r[k]) == {"jpg", "cls"}
            assert same(r[k], ds[i]) and same(ds.get(k), ds[i])
            assert plain[i] == {e: v.tobytes() for e, v in r[k].items()}
            assert sorted(r.info(k).extras["members"]) == ["cls", "jpg"]
        assert r.metadata["ext"] == ["jpg", "cls"] and r.metadata["samples"] == 6


def test_dataset_get_is_dict_like(tmp_path):
    import tenfold.taridx as tx

    make("taridx", tmp_path)
    with tx.Dataset(tmp_path, "demo") as ds:
        assert ds.get("nope") is None
        assert ds.get("nope", 5) == 5
        assert same(ds.get("sample0002", 5), ds[2])
        assert len(ds) == 6 and same(ds[-1], ds[5])  # still a sequence by position


# -- fork: read in the parent, fork, read in the child (issue 11) -------------------------------


def _read_all(r: object) -> None:
    for k in r:  # type: ignore[attr-defined]
        v = r[k]  # type: ignore[index]
        if isinstance(v, dict):
            for x in v.values():
                bytes(memoryview(x)) if isinstance(x, memoryview) else np.asarray(x).sum()
        elif isinstance(v, np.ndarray):
            v.sum()


def _in_child(fn, timeout: float = 60.0) -> int:
    """Run ``fn`` in a forked child; its exit status (or fail on a hang)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            fn()
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported through the exit status
            os.write(2, f"child: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(f"forked child still reading after {timeout} s (hung)")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("fmt", FORMATS)
def test_readers_work_in_a_forked_child(tmp_path, fmt):
    p = make(fmt, tmp_path, big=True)
    with tenfold.open(p) as r:
        _read_all(r)  # the parent reads first (FOLD: a 5 MiB chunk, SHA-256 on a worker thread)

        def child() -> None:
            _read_all(r)  # the reader inherited from the parent
            with tenfold.open(p) as r2:  # and one opened in the child
                _read_all(r2)

        assert _in_child(child) == 0
        _read_all(r)  # the parent still reads afterwards


# -- descriptors: a reader dropped without close() leaks nothing (issue 11) --------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("fmt", FORMATS)
def test_dropped_readers_close_their_descriptors(tmp_path, fmt):
    p = make(fmt, tmp_path)
    gc.collect()
    before = _open_fds()
    with pytest.warns(ResourceWarning, match="unclosed"):
        readers = [tenfold.open(p) for _ in range(200)]
        assert _open_fds() >= before + 200
        del readers
        gc.collect()
    assert _open_fds() <= before


def test_closed_reader_gives_no_warning(tmp_path):
    import warnings

    p = make("ztensor", tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = tenfold.open(p)
        r.close()
        del r
        gc.collect()


def test_views_outlive_a_dropped_reader(tmp_path):
    p = make("ztensor", tmp_path)
    with pytest.warns(ResourceWarning):
        r = tenfold.open(p)
        w = r["w"]
        del r
        gc.collect()
    assert w.tolist() == ARRAYS["w"].tolist()  # the map lives as long as the view


@pytest.mark.parametrize("fmt", ["ztensor", "oinf", "fold", "taridx", "safetensors", "npz"])
def test_a_closed_reader_reads_nothing_more(tmp_path, fmt):
    p = make(fmt, tmp_path)
    r = tenfold.open(p)
    key = next(iter(r))
    r.close()
    r.close()  # twice is fine
    with pytest.raises(ValueError, match="closed file"):
        r[key]

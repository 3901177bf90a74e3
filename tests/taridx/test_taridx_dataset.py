"""Dataset: local and remote (fsspec memory, HTTP range server), pickling, workers, samplers."""

from __future__ import annotations

import hashlib
import http.server
import json
import multiprocessing
import os
import pickle
import threading

import numpy as np
import pytest

import tenfold.taridx as tx
from tenfold.errors import TruncatedError


@pytest.fixture
def fold(conformance):
    return conformance / "taridx" / "basic_ustar"


def _sha(buf) -> str:
    return hashlib.sha256(bytes(buf)).hexdigest()


def _expected(conformance, vec, fold_name):
    side = json.loads((conformance / "taridx" / vec / f"{fold_name}.expected.json").read_text())
    out: dict[str, dict[str, str]] = {}
    for r in side["rows"]:
        out.setdefault(r["stem"], {})[r["ext"]] = r["payload_sha256"]
    return out


def test_local_samples_match_sidecar(conformance, fold):
    want = _expected(conformance, "basic_ustar", "train")
    with tx.Dataset(fold, "train") as ds:
        assert len(ds) == 10 and ds.open_shards == 0
        got = {}
        for i, sample in enumerate(ds):
            assert set(sample) == {"jpg", "json", "cls"}
            assert all(type(v) is bytes for v in sample.values())  # pickle, as webdataset's
            got[f"sample{i:04d}"] = {k: _sha(v) for k, v in sample.items()}
        assert got == want
        assert {k: _sha(v) for k, v in ds.get("sample0007").items()} == want["sample0007"]
        assert _sha(ds[-1]["jpg"]) == want["sample0009"]["jpg"]
        assert ds.get("nope") is None  # dict-like get (was KeyError / TypeError)
        sentinel = object()
        assert ds.get("nope", sentinel) is sentinel
        assert ds.get("sample0007", sentinel) is not sentinel
        with pytest.raises(IndexError):
            ds[10]
        assert ds.lookup(["sample0003", "x"]).tolist() == [3, -1]


def test_buffers_are_zero_copy_views_of_the_shard(fold):
    with tx.Dataset(fold, "train", payload="memoryview") as ds:
        v = ds[0]["jpg"]
        assert isinstance(v, memoryview) and v.readonly
        assert all(isinstance(x, memoryview) for x in ds.__getitems__([1, 0])[1].values())
        arr = np.frombuffer(v, np.uint8)
        raw = (fold / "train_0000.tar").read_bytes()
        assert arr.tobytes() == raw[512 : 512 + len(v)]
        assert not arr.flags.writeable and not arr.flags.owndata


def test_extensions_and_decoders(fold):
    ds = tx.Dataset(
        fold,
        "train",
        extensions=["CLS", "json"],
        decoders={"json": lambda b: json.loads(bytes(b)), "cls": lambda b: int(bytes(b))},
    )
    s = ds[2]
    assert set(s) == {"cls", "json"} and isinstance(s["json"], dict) and isinstance(s["cls"], int)


def test_noncontiguous_and_crash_samples(conformance):
    ds = tx.Dataset(conformance / "taridx" / "crash_collision", "train")
    want = _expected(conformance, "crash_collision", "train")
    for stem in want:
        assert {k: _sha(v) for k, v in ds.get(stem).items()} == want[stem]


def test_lru_bounds_open_shards(conformance):
    ds = tx.Dataset(conformance / "taridx" / "shard_order_lexicographic", "train", max_open=2)
    for i in range(len(ds)):
        ds[i]
        assert ds.open_shards <= 2
    assert ds.open_shards == 2
    kept = ds[0]["jpg"]
    for i in range(1, len(ds)):
        ds[i]
    assert bytes(kept)[:1] is not None  # an evicted shard's view stays valid


def test_pickle_carries_no_open_state(fold):
    ds = tx.Dataset(fold, "train")
    ds[0]
    blob = pickle.dumps(ds)
    assert b"mmap" not in blob
    clone = pickle.loads(blob)
    assert clone.open_shards == 0 and clone._idx is None and len(clone) == 10
    assert bytes(clone[4]["cls"]) == bytes(ds[4]["cls"])


def _worker_read(args):
    ds, i = args
    sample = ds[i]
    return os.getpid(), {k: _sha(v) for k, v in sample.items()}, ds.open_shards


def test_spawned_worker_processes(conformance, fold):
    want = _expected(conformance, "basic_ustar", "train")
    ds = tx.Dataset(fold, "train")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        res = pool.map(_worker_read, [(ds, i) for i in range(10)])
    assert [r[1] for r in res] == [want[f"sample{i:04d}"] for i in range(10)]
    assert ds.open_shards == 0  # the parent opened nothing


def test_fork_resets_state(fold):
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork start method on this platform")
    ds = tx.Dataset(fold, "train")
    ds[0]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        pid, _, n_open = pool.apply(_worker_read, ((ds, 9),))
    assert pid != os.getpid() and n_open == 1


def _decode_int(b):
    return int(bytes(b))


def _decode_sha(b):
    return _sha(b)


@pytest.mark.slow
def test_torch_dataloader(conformance, fold):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    want = _expected(conformance, "basic_ustar", "train")
    ds = tx.Dataset(
        fold, "train", extensions=["cls", "jpg"], decoders={"cls": _decode_int, "jpg": _decode_sha}
    )
    sampler = tx.EpochSampler(ds, seed=3)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=2, num_workers=2, sampler=sampler, multiprocessing_context="spawn"
    )
    got = [sha for batch in loader for sha in batch["jpg"]]
    order = list(sampler)
    assert got == [want[f"sample{i:04d}"]["jpg"] for i in order]
    assert ds.open_shards == 0
    sampler.set_epoch(1)
    assert [sha for batch in loader for sha in batch["jpg"]] != got


def test_truncated_shard_is_an_error(conformance, tmp_path):
    src = conformance / "taridx" / "basic_ustar"
    raw = (src / "val_0000.tar").read_bytes()
    # shard cut, then the index written: the shard is not newer, the read itself finds it short
    (tmp_path / "val_0000.tar").write_bytes(raw[:4000])
    (tmp_path / "val.taridx").write_bytes((src / "val.taridx").read_bytes())
    os.utime(tmp_path / "val.taridx", ns=(2**62, 2**62))
    ds = tx.Dataset(tmp_path, "val")
    ds[0]
    with pytest.raises(TruncatedError, match=r"shard val_0000.tar at offset 0xe00"):
        ds[1]


def test_shard_cut_after_indexing_is_caught_on_open(conformance, tmp_path):
    src = conformance / "taridx" / "basic_ustar"
    for f in ("val.taridx", "val_0000.tar"):
        (tmp_path / f).write_bytes((src / f).read_bytes())
    os.utime(tmp_path / "val.taridx", ns=(10**18, 10**18))
    (tmp_path / "val_0000.tar").write_bytes((src / "val_0000.tar").read_bytes()[:4000])
    ds = tx.Dataset(tmp_path, "val")
    with pytest.raises(
        TruncatedError,
        match=r"shard val_0000.tar: changed since .*val.taridx "
        r"was built: size 4000 is smaller than the indexed data end",
    ):
        ds[0]  # sample 0 is whole, but its shard changed after the index was written


def test_missing_shard(tmp_path, fold):
    (tmp_path / "train.taridx").write_bytes((fold / "train.taridx").read_bytes())
    (tmp_path / "train_0000.tar").write_bytes((fold / "train_0000.tar").read_bytes())
    with pytest.raises(TruncatedError, match="shards missing"):
        tx.Dataset(tmp_path, "train")


# -- remote ------------------------------------------------------------------------------------
def test_fsspec_memory_filesystem(conformance, fold):
    fsspec = pytest.importorskip("fsspec", reason="fsspec is not installed")
    fs = fsspec.filesystem("memory")
    for f in fold.iterdir():
        fs.pipe(f"/tfx/{f.name}", f.read_bytes())
    want = _expected(conformance, "basic_ustar", "train")
    ds = tx.Dataset("memory://tfx", "train")
    assert ds.shards == ["train_0000.tar", "train_0001.tar"]
    assert {k: _sha(v) for k, v in ds.get("sample0006").items()} == want["sample0006"]
    clone = pickle.loads(pickle.dumps(ds))
    assert _sha(clone[1]["jpg"]) == want["sample0001"]["jpg"]
    # local index, remote shards
    ds2 = tx.Dataset("memory://tfx", "train", index=fold / "train.taridx")
    assert _sha(ds2[9]["json"]) == want["sample0009"]["json"]


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    ranges: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - http.server API
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        if rng is None or os.path.isdir(path):
            return super().do_GET()
        _RangeHandler.ranges.append(rng)
        with open(path, "rb") as f:
            data = f.read()
        a, _, b = rng.removeprefix("bytes=").partition("-")
        start, end = int(a), (int(b) + 1 if b else len(data))
        body = data[start:end]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_http_range_reads(conformance, fold):
    pytest.importorskip("aiohttp", reason="aiohttp is needed by fsspec's HTTP filesystem")

    def handler(*a, **k):
        return _RangeHandler(*a, directory=str(fold), **k)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        want = _expected(conformance, "basic_ustar", "train")
        ds = tx.Dataset(url, "train", shards=["train_0000.tar", "train_0001.tar"])
        _RangeHandler.ranges.clear()
        got = {k: _sha(v) for k, v in ds.get("sample0008").items()}
        assert got == want["sample0008"]
        assert len(_RangeHandler.ranges) == 1  # one range request for the sample
        listed = tx.Dataset(url, "train")  # shard list from the server's directory page
        assert listed.shards == ["train_0000.tar", "train_0001.tar"]
        assert _sha(listed[0]["jpg"]) == want["sample0000"]["jpg"]
        listed.close()
        ds.close()
    finally:
        server.shutdown()
        server.server_close()


# -- sampler -----------------------------------------------------------------------------------
def test_epoch_order_is_deterministic_and_partitions():
    a = tx.epoch_order(103, seed=5, epoch=1)
    assert a.tolist() == tx.epoch_order(103, seed=5, epoch=1).tolist()
    assert a.tolist() != tx.epoch_order(103, seed=5, epoch=2).tolist()
    assert sorted(a.tolist()) == list(range(103))
    parts = [tx.epoch_order(103, seed=5, epoch=1, rank=r, world_size=4) for r in range(4)]
    assert {len(p) for p in parts} == {26}
    assert set(np.concatenate(parts).tolist()) == set(range(103))
    dl = [
        tx.epoch_order(103, seed=5, epoch=1, rank=r, world_size=4, drop_last=True) for r in range(4)
    ]
    assert {len(p) for p in dl} == {25} and len(set(np.concatenate(dl).tolist())) == 100
    assert tx.epoch_order(5, shuffle=False).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        tx.epoch_order(5, rank=2, world_size=2)


def test_epoch_sampler():
    s = tx.EpochSampler(10, seed=1, rank=1, world_size=3)
    first = list(s)
    assert len(first) == len(s) == 4 and list(s) == first
    s.set_epoch(1)
    assert list(s) != first

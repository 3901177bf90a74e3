"""tenfold.taridx.read_ray: read tasks planned from the index, on a local Ray cluster, checked
sample by sample against the Dataset and against ray.data.read_webdataset on the same shards."""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest

import tenfold.taridx as tx
from tenfold.core.optional import MissingDependencyError
from tenfold.errors import IntegrityError
from tenfold.taridx import raydata


def write_fold(root: Path, fold: str = "f", shards: int = 3, per_shard: int = 40) -> dict:
    """Shards of samples {jpg, cls} (every 7th sample also has a txt), random sizes; returns
    ``{stem: {ext: bytes}}``."""
    rng = np.random.default_rng(5)
    want: dict[str, dict[str, bytes]] = {}
    k = 0
    for sh in range(shards):
        with tarfile.open(root / f"{fold}_{sh:04d}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
            for _ in range(per_shard):
                stem = f"s{k:05d}"
                exts = ["jpg", "cls"] + (["txt"] if k % 7 == 0 else [])
                for ext in exts:
                    data = rng.bytes(int(rng.integers(1, 4000)))
                    info = tarfile.TarInfo(f"{stem}.{ext}")
                    info.size, info.mtime = len(data), 1_700_000_000
                    tf.addfile(info, io.BytesIO(data))
                    want.setdefault(stem, {})[ext] = data
                k += 1
    tx.build(root, fold, show_progress=False)
    return want


@pytest.fixture(scope="module")
def fold(tmp_path_factory):
    root = tmp_path_factory.mktemp("rayfold")
    return root, write_fold(root)


# -- planning: no Ray needed ------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 5, 7, 120, 500])
def test_plan_exact_rows_and_bytes(fold, k):
    root, want = fold
    with tx.Dataset(root, "f") as ds:
        p = raydata.plan(ds, k)
        assert len(p) == min(k, len(want))
        assert sum(p.rows) == len(want) and min(p.rows) >= 1
        assert p.samples.tolist() == list(range(len(want)))
        sizes = [sum(len(v) for v in ds[i].values()) for i in range(len(ds))]
        for t in range(len(p)):
            a, b = int(p.bounds[t]), int(p.bounds[t + 1])
            assert p.payload[t] == sum(sizes[a:b])
        # balanced by bytes: each task is within one sample of the ideal share
        if len(p) < len(want):
            share = sum(sizes) / len(p)
            assert max(p.payload) <= share + max(sizes)
            assert min(p.payload) >= share - max(sizes)


def test_plan_balances_bytes_not_rows(tmp_path):
    """Half the samples carry 20x the bytes: the cut follows the bytes."""
    rng = np.random.default_rng(1)
    with tarfile.open(tmp_path / "g_0000.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(100):
            data = rng.bytes(2000 if i < 50 else 100)
            info = tarfile.TarInfo(f"k{i:03d}.bin")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    tx.build(tmp_path, "g", show_progress=False)
    with tx.Dataset(tmp_path, "g") as ds:
        p = raydata.plan(ds, 2)
    assert p.rows[0] < 30 < p.rows[1]  # ~26 big samples, then the rest
    assert abs(p.payload[0] - p.payload[1]) <= 2000


def test_plan_key_subset_and_missing_keys(fold):
    root, want = fold
    keys = ["s00100", "s00003", "s00050"]
    with tx.Dataset(root, "f") as ds:
        p = raydata.plan(ds, 2, keys=keys)
        assert p.samples.tolist() == [100, 3, 50]
        with pytest.raises(KeyError, match=r"2 of the 3 keys.*not in the index"):
            raydata.plan(ds, 2, keys=["s00001", "nope", "nada"])


@pytest.fixture
def arrow():
    """The read task body builds pyarrow tables (pyarrow comes with ``ray[data]``)."""
    return pytest.importorskip(
        "pyarrow", reason='pyarrow is not installed (pip install "tenfold[ray]")'
    )


def test_read_samples_without_ray(fold, arrow):
    """The read task body on its own: tables shaped like read_webdataset's rows."""
    root, want = fold
    with tx.Dataset(root, "f") as ds:
        args = raydata._dataset_args(ds)
    tables = list(raydata.read_samples(args, np.array([7, 0, 119])))
    assert len(tables) == 1
    t = tables[0].to_pylist()
    assert [r["__key__"] for r in t] == ["s00007", "s00000", "s00119"]
    for r in t:
        assert {e: r[e] for e in ("jpg", "cls", "txt") if r[e] is not None} == want[r["__key__"]]
        assert r["__url__"].endswith(f"f_{int(r['__key__'][1:]) // 40:04d}.tar")


def rename_first_member(shard: Path, new: bytes) -> None:
    """Rewrite the first member's name (same length) with a valid checksum, keeping the
    shard's times: only reading the header can tell."""
    st = shard.stat()
    data = bytearray(shard.read_bytes())
    data[0 : len(new)] = new
    data[148:156] = b" " * 8
    data[148:156] = b"%06o\0 " % sum(data[0:512])
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_read_samples_refuses_a_changed_shard(tmp_path, arrow):
    write_fold(tmp_path, shards=1, per_shard=5)
    rename_first_member(tmp_path / "f_0000.tar", b"t00000")
    with tx.Dataset(tmp_path, "f") as ds:
        args = raydata._dataset_args(ds)
    with pytest.raises(IntegrityError, match=r"f_0000\.tar.*member name"):
        list(raydata.read_samples(args, np.array([0])))
    # without the payload header check, and with the index looking newer than the shard (no
    # staleness check on open), the key read still refuses it
    idx = tmp_path / "f.taridx"
    later = idx.stat().st_mtime_ns + 10**10
    os.utime(idx, ns=(later, later))
    args["verify_headers"] = False
    with pytest.raises(IntegrityError, match=r"f_0000\.tar.*member name.*keyhash"):
        list(raydata.read_samples(args, np.array([0])))
    assert len(list(raydata.read_samples(args, np.array([1, 2])))[0]) == 2


def test_missing_ray_names_the_extra(fold, monkeypatch):
    root, _ = fold
    monkeypatch.setitem(sys.modules, "ray.data", None)
    with pytest.raises(MissingDependencyError, match=r'pip install "tenfold\[ray\]"'):
        tx.read_ray(root, "f")


# -- on a local Ray cluster ---------------------------------------------------------------------


#: Ray's own deprecation notices (about its settings, not ours) are not this suite's errors.
on_ray = [
    pytest.mark.slow,  # a local cluster starts in 5-15 s here
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


def on_ray_cluster(fn):
    for mark in on_ray:
        fn = mark(fn)
    return fn


@pytest.fixture(scope="module")
def ray_cluster():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        pytest.skip('ray is not installed (pip install "tenfold[ray]")')
    # ray's session files (sockets: the path must stay short) in a directory removed after
    temp = tempfile.mkdtemp(prefix="ray-")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             _temp_dir=temp)  # fmt: skip
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def by_key(rows: list[dict]) -> dict[str, dict]:
    out = {r["__key__"]: r for r in rows}
    assert len(out) == len(rows)
    return out


@on_ray_cluster
def test_read_ray_matches_dataset_and_read_webdataset(fold, ray_cluster):
    ray = ray_cluster
    root, want = fold
    rd = tx.read_ray(root, "f", override_num_blocks=4)
    ours = by_key(rd.take_all())
    peer = by_key(
        ray.data.read_webdataset(str(root), decoder=None, file_extensions=["tar"]).take_all()
    )
    assert ours.keys() == peer.keys() == want.keys()
    with tx.Dataset(root, "f") as ds:
        stems = ds.index.stems()
        for i, stem in enumerate(stems):
            sample = {e: bytes(v) for e, v in ds[i].items()}
            assert sample == want[stem]
            mine = {e: ours[stem][e] for e in ("jpg", "cls", "txt") if ours[stem][e] is not None}
            theirs = {e: peer[stem][e] for e in ("jpg", "cls", "txt") if e in peer[stem]}
            theirs = {e: v for e, v in theirs.items() if isinstance(v, bytes)}  # NaN = absent
            assert mine == sample == theirs, stem
            assert ours[stem]["__url__"] == peer[stem]["__url__"]


@on_ray_cluster
def test_read_tasks_metadata_is_exact(fold, ray_cluster):
    """Each task's planned rows and bytes equal what its blocks hold (Arrow's nbytes, as Ray
    counts it), up to the keys' characters, which only the read learns."""
    root, _ = fold
    src = raydata.TaridxDatasource(root, "f")
    import pickle

    assert type(pickle.loads(pickle.dumps(src))) is type(src)  # by name, as Ray ships it
    tasks = src.get_read_tasks(3)
    assert len(tasks) == 3
    # the estimate is the one-task plan's size: bitmaps round up per task
    est = src.estimate_inmemory_data_size()
    assert 0 <= sum(t.metadata.size_bytes for t in tasks) - est <= 3 * len(tasks)
    for task in tasks:
        blocks = list(task())
        rows = sum(b.num_rows for b in blocks)
        keys = sum(len(k.encode()) for b in blocks for k in b.column("__key__").to_pylist())
        assert rows == task.metadata.num_rows
        assert sum(b.nbytes for b in blocks) == task.metadata.size_bytes + keys
        urls = {u for b in blocks for u in b.column("__url__").to_pylist()}
        assert urls == set(task.metadata.input_files)


@on_ray_cluster
def test_read_ray_key_subset_and_extensions(fold, ray_cluster):
    root, want = fold
    keys = ["s00119", "s00000", "s00077", "s00041"]
    rows = tx.read_ray(
        root, "f", ["cls"], keys=keys, include_url=False, override_num_blocks=1
    ).take_all()
    assert [r["__key__"] for r in rows] == keys
    assert all(set(r) == {"__key__", "cls"} for r in rows)
    assert [r["cls"] for r in rows] == [want[k]["cls"] for k in keys]


@on_ray_cluster
def test_read_ray_from_s3_server(fold, ray_cluster):
    """read_ray on an s3:// root (moto's S3 server on 127.0.0.1, read through s3fs in Ray's
    worker processes): every sample's bytes as on disk."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    s3fs = pytest.importorskip("s3fs", reason="s3fs is not installed")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    root, want = fold
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        opts = {"key": "k", "secret": "s", "endpoint_url": f"http://{host}:{port}"}
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
        fs.mkdir("rayfold")
        for p in sorted(root.iterdir()):
            fs.put_file(str(p), f"rayfold/{p.name}")
        rows = tx.read_ray("s3://rayfold", "f", storage_options=opts, override_num_blocks=2)
        got = by_key(rows.take_all())
        assert got.keys() == want.keys()
        for stem, sample in want.items():
            assert {e: got[stem][e] for e in sample} == sample, stem
            assert all(got[stem][e] is None for e in ("jpg", "cls", "txt") if e not in sample)
        assert {r["__url__"] for r in got.values()} == {
            f"s3://rayfold/f_{k:04d}.tar" for k in range(3)
        }
    finally:
        server.stop()


def test_read_samples_odd_members(tmp_path, arrow):
    """A pax long name (its key read through the extended header), a directory, an extension
    given twice in one sample (the later member wins, as in Dataset), samples without some
    extension (nulls)."""
    with tarfile.open(tmp_path / "o_0000.tar", "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in (
            ("d" * 120 + "/k1.jpg", b"jpeg1"),
            ("d" * 120 + "/k1.txt", b"t1"),
            ("a/k2.jpg", b"jpeg2"),
            ("b/k2.jpg", b"jpeg2-later"),
            ("k3.txt", b"t3"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    tx.build(tmp_path, "o", show_progress=False)
    with tx.Dataset(tmp_path, "o") as ds:
        args = raydata._dataset_args(ds)
        want = [{e: bytes(v) for e, v in ds[i].items()} for i in range(len(ds))]
    (table,) = raydata.read_samples(args, np.arange(3), url=False)
    rows = table.to_pylist()
    assert [r["__key__"] for r in rows] == ["k1", "k2", "k3"]
    assert [{e: r[e] for e in ("jpg", "txt") if r[e] is not None} for r in rows] == want
    assert want[1] == {"jpg": b"jpeg2-later"}


def test_read_samples_remote(fold, arrow):
    """The fsspec path (memory://) gives the same table as the local one."""
    fsspec = pytest.importorskip("fsspec", reason="fsspec is not installed")
    root, _ = fold
    fs = fsspec.filesystem("memory")
    for p in root.iterdir():
        fs.pipe_file(f"/rayfold/{p.name}", p.read_bytes())
    with tx.Dataset(root, "f") as ds:
        local = raydata._dataset_args(ds)
    with tx.Dataset("memory://rayfold", "f") as ds:
        remote = raydata._dataset_args(ds)
    ids = np.array([5, 0, 63, 119])
    (a,) = raydata.read_samples(local, ids)
    (b,) = raydata.read_samples(remote, ids)
    assert a.drop_columns(["__url__"]).to_pylist() == b.drop_columns(["__url__"]).to_pylist()
    assert b.column("__url__").to_pylist()[0] == "memory://rayfold/f_0000.tar"

"""Issue 14 item 2 remotely: batches are one ``cat_ranges`` call with neighbouring ranges
merged, counted on real servers started and stopped here (moto's S3 server with s3fs, and an
``http.server`` serving Range requests); a shard missing mid-epoch is an ``OSError`` naming
its URL; remote shards are checked (size, modification time) before their bytes are used."""

from __future__ import annotations

import http.server
import os
import threading

import numpy as np
import pytest
from test_taridx_members import _fold, _tar, _truth

import tenfold.taridx as tx
from tenfold.errors import IntegrityError, TruncatedError


def _small_fold(root, n_shards=2, per=60):
    _fold(root, shards=tuple(range(n_shards)), per=per)
    return tx.build(root, "t", show_progress=False)


def _check_all(ds, truth, stems, batch):
    for i, s in zip(batch, ds.__getitems__(batch), strict=True):
        assert {e: bytes(v) for e, v in s.items()} == {
            e: truth[(stems[i], e)] for e in ("jpg", "cls")
        }


# -- S3 (moto server mode) -------------------------------------------------------------------------
@pytest.fixture
def s3(tmp_path):
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    from werkzeug.serving import make_server

    log: list[tuple[str, str, str | None]] = []

    class Counting(moto_server.ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = moto_server.DomainDispatcherApplication(moto_server.create_backend_app)

            def counted(environ, start_response):
                log.append(
                    (environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("HTTP_RANGE"))
                )
                return app(environ, start_response)

            self._server = make_server(self._ip_address, self._port, counted, True)
            self._server_ready_event.set()
            self._server.serve_forever()

    server = Counting(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        opts = {
            "key": "testing",
            "secret": "testing",
            "endpoint_url": f"http://{host}:{port}",
            "skip_instance_cache": True,
        }
        yield opts, log
    finally:
        server.stop()


def _s3fs(opts):
    import s3fs

    return s3fs.S3FileSystem(**opts)


def _upload(fs, local, bucket):
    fs.mkdir(bucket)
    for f in sorted(local.glob("t_*.tar")):  # shards first, index last (as a builder would)
        fs.put_file(str(f), f"{bucket}/{f.name}")
    fs.put_file(str(local / "t.taridx"), f"{bucket}/t.taridx")


def _gets(log):
    return [r for r in log if r[0] == "GET" and r[2] is not None]


def test_s3_batches_count_requests(s3, tmp_path):
    opts, log = s3
    _small_fold(tmp_path)
    truth = _truth(tmp_path)
    fs = _s3fs(opts)
    _upload(fs, tmp_path, "tfx")
    ds = tx.Dataset("s3://tfx", "t", storage_options=opts, cache_bytes=0, calibrate=False)
    stems = tx.Dataset(tmp_path, "t").index.stems()
    n = len(ds)
    assert n == 120 and ds.shards == ["t_0000.tar", "t_0001.tar"]
    rng = np.random.default_rng(0)
    batch = rng.choice(n, 64, replace=False).tolist()
    log.clear()
    _check_all(ds, truth, stems, batch)
    # the shards are listed (sizes, ETags): no lookup per shard; the holes between a shard's
    # rows are far below what a request costs (the default link model: 1 MB), so one range
    # per shard
    assert not [r for r in log if r[0] == "HEAD"]
    wide = [_span(r[2]) for r in _gets(log)]
    assert len(wide) == 2
    log.clear()
    for i in batch[:16]:  # one sample at a time: one request each
        ds[i]
    assert len(_gets(log)) == 16
    # no merging across holes: at least one request per sample
    tight = tx.Dataset(
        "s3://tfx", "t", storage_options=opts, max_gap=0, cache_bytes=0, calibrate=False
    )
    log.clear()
    _check_all(tight, truth, stems, batch)
    rows = [_span(r[2]) for r in _gets(log)]
    assert len(rows) >= 64
    # ranges bounded by max_range: every Range header asks for at most that many bytes
    short = tx.Dataset(
        "s3://tfx", "t", storage_options=opts, max_range=8192, cache_bytes=0, calibrate=False
    )
    log.clear()
    _check_all(short, truth, stems, batch)
    spans = [_span(r[2]) for r in _gets(log)]
    assert 2 < len(spans) < len(rows) and max(spans) <= 8192
    # a byte budget per batch between the two: the smallest holes are read first, so the
    # batch stays within it and needs fewer requests than reading no hole at all
    budget = (sum(rows) + sum(wide)) // 2
    lean = tx.Dataset(
        "s3://tfx",
        "t",
        storage_options=opts,
        max_batch_bytes=budget,
        cache_bytes=0,
        calibrate=False,
    )
    log.clear()
    _check_all(lean, truth, stems, batch)
    lean_spans = [_span(r[2]) for r in _gets(log)]
    assert sum(lean_spans) <= budget
    assert 2 < len(lean_spans) < len(rows) // 2
    for d in (ds, tight, short, lean):
        d.close()


def test_s3_link_model_calibrated_from_calls(s3, tmp_path):
    """By default the link model is refitted to each ``cat_ranges`` call (the request counts
    then depend on the server's speed: only the samples and the model are checked here)."""
    opts, log = s3
    _small_fold(tmp_path)
    truth = _truth(tmp_path)
    stems = tx.Dataset(tmp_path, "t").index.stems()
    _upload(_s3fs(opts), tmp_path, "tfk")
    ds = tx.Dataset("s3://tfk", "t", storage_options=opts, cache_bytes=0)
    fixed = tx.Dataset("s3://tfk", "t", storage_options=opts, cache_bytes=0, calibrate=False)
    rng = np.random.default_rng(3)
    for _ in range(3):
        batch = rng.choice(len(ds), 40, replace=False).tolist()
        _check_all(ds, truth, stems, batch)
        _check_all(fixed, truth, stems, batch)
        for i in batch[:4]:
            ds[i]
    assert ds.link.observations == 3 + 12 and fixed.link.observations == 0
    assert (ds.link.per_request, ds.link.bandwidth) != (0.010, 100e6)
    assert (fixed.link.per_request, fixed.link.bandwidth) == (0.010, 100e6)
    ds.close()
    fixed.close()


def _span(header):
    a, _, b = header.removeprefix("bytes=").partition("-")
    return int(b) + 1 - int(a)


def test_s3_small_shards_cached_whole(s3, tmp_path):
    """A batch whose plan reads at least half of a shard fetches it whole (once, in
    ``max_range`` chunks) and later reads of it make no request; ``cache_bytes`` bounds it."""
    opts, log = s3
    _small_fold(tmp_path)
    truth = _truth(tmp_path)
    stems = tx.Dataset(tmp_path, "t").index.stems()
    fs = _s3fs(opts)
    _upload(fs, tmp_path, "tfc")
    sizes = {f.name: f.stat().st_size for f in tmp_path.glob("t_*.tar")}
    ds = tx.Dataset("s3://tfc", "t", storage_options=opts, max_range=16384, calibrate=False)
    n = len(ds)
    log.clear()
    _check_all(ds, truth, stems, list(range(0, n, 2)))
    got = _gets(log)
    assert sum(_span(r[2]) for r in got) == sum(sizes.values())
    assert len(got) == sum(-(-s // 16384) for s in sizes.values())
    log.clear()
    _check_all(ds, truth, stems, list(range(n)))
    for i in range(0, n, 7):
        ds[i]
    assert _gets(log) == []
    # max_range left to the model (here 9,000 bytes): still one request per shard read
    # whole, its whole size (by the model, a request that large runs at full bandwidth)
    whole = tx.Dataset(
        "s3://tfc", "t", storage_options=opts, per_request=1e-3, bandwidth=1e6, calibrate=False
    )
    assert whole.link.max_range == 9000 < min(sizes.values())
    log.clear()
    _check_all(whole, truth, stems, list(range(n)))
    assert sorted((p, _span(r)) for _, p, r in _gets(log)) == sorted(
        (f"/tfc/{name}", size) for name, size in sizes.items()
    )
    whole.close()
    # too small a cache: nothing kept, every batch fetches again
    small = tx.Dataset("s3://tfc", "t", storage_options=opts, cache_bytes=min(sizes.values()) - 1)
    log.clear()
    _check_all(small, truth, stems, list(range(n)))
    _check_all(small, truth, stems, list(range(n)))
    assert len(_gets(log)) == 4
    # room for one shard only: a batch over both keeps one and reads the other by ranges
    one = tx.Dataset(
        "s3://tfc", "t", storage_options=opts, cache_bytes=max(sizes.values()), calibrate=False
    )
    for _ in range(2):
        _check_all(one, truth, stems, list(range(n)))
    assert len(one._cache) == 1
    ds.close()
    small.close()
    one.close()


def test_s3_locality_blocked_epoch(s3, tmp_path):
    """Runs of 16 neighbouring samples, shuffled: an epoch costs about one request per run;
    the same batches in a plain shuffled order cost about one per sample."""
    opts, log = s3
    _fold(tmp_path, shards=(0, 1), per=200)
    tx.build(tmp_path, "t", show_progress=False)
    truth = _truth(tmp_path)
    stems = tx.Dataset(tmp_path, "t").index.stems()
    fs = _s3fs(opts)
    _upload(fs, tmp_path, "tfl")
    ds = tx.Dataset(
        "s3://tfl", "t", storage_options=opts, max_gap=16 << 10, cache_bytes=0, calibrate=False
    )
    n = len(ds)
    counts = {}
    for block in (16, 1):
        order = list(tx.EpochSampler(n, seed=3, block=block))
        assert sorted(order) == list(range(n))
        log.clear()
        for k in range(0, n, 32):
            _check_all(ds, truth, stems, order[k : k + 32])
        counts[block] = len(_gets(log))
    assert counts[16] <= n // 8 < n // 2 <= counts[1]
    ds.close()


def test_s3_shard_missing_mid_epoch(s3, tmp_path):
    opts, log = s3
    _small_fold(tmp_path)
    fs = _s3fs(opts)
    _upload(fs, tmp_path, "tfy")
    ds = tx.Dataset("s3://tfy", "t", storage_options=opts, cache_bytes=0, calibrate=False)
    ds.__getitems__(list(range(len(ds))))  # both shards read once
    fs.rm("tfy/t_0001.tar")
    ds.__getitems__([0, 1])  # shard 0 still reads
    with pytest.raises(FileNotFoundError, match="tfy/t_0001.tar") as info:
        ds.__getitems__([0, len(ds) - 1])
    assert isinstance(info.value, OSError)
    # a fresh process-view looks the shard up first: the same error, before any read
    fresh = tx.Dataset("s3://tfy", "t", storage_options=opts, shards=["t_0000.tar", "t_0001.tar"])
    with pytest.raises(FileNotFoundError, match="tfy/t_0001.tar"):
        fresh[len(fresh) - 1]


def test_s3_shard_changed_after_index(s3, tmp_path):
    opts, _ = s3
    _small_fold(tmp_path, per=4)
    fs = _s3fs(opts)
    _upload(fs, tmp_path, "tfz")
    # same layout, other names, uploaded after the index (S3 times have 1 s resolution)
    import time

    time.sleep(1.1)
    _tar(
        tmp_path / "other.tar",
        [
            (f"z{j:03d}.{e}", b"q" * (300 + 7 * j + (e == "cls")))
            for j in range(4)
            for e in ("jpg", "cls")
        ],
    )
    fs.put_file(str(tmp_path / "other.tar"), "tfz/t_0001.tar")
    for vh in (True, False):  # the open-time check does not depend on the read-time switch
        ds = tx.Dataset("s3://tfz", "t", storage_options=opts, verify_headers=vh)
        assert len(ds.__getitems__([0])) == 1  # shard 0 is unchanged
        with pytest.raises(IntegrityError, match="rebuild the index"):
            ds.__getitems__([len(ds) - 1])


# -- fsspec memory filesystem: size and time checks ------------------------------------------------
def test_memory_remote_shard_too_short_and_newer(tmp_path):
    fsspec = pytest.importorskip("fsspec", reason="fsspec is not installed")
    _small_fold(tmp_path, per=4)
    fs = fsspec.filesystem("memory")
    root = "memory://tfx-checks"
    try:
        for f in sorted(tmp_path.glob("t_*.tar")):
            fs.pipe(f"{root}/{f.name}", f.read_bytes())
        fs.pipe(f"{root}/t.taridx", (tmp_path / "t.taridx").read_bytes())
        ds = tx.Dataset(root, "t")
        assert len(ds.__getitems__(list(range(len(ds))))) == len(ds)
        raw = (tmp_path / "t_0001.tar").read_bytes()
        fs.pipe(f"{root}/t_0001.tar", raw[:3000])  # cut, and newer than the index
        cut = tx.Dataset(root, "t", verify_headers=False)
        with pytest.raises(TruncatedError, match=r"shard memory://tfx-checks/t_0001.tar: .*"):
            cut[len(cut) - 1]
        assert len(cut[0]) == 2  # the other shard reads
    finally:
        fs.rm(root, recursive=True)


# -- HTTP Range server ---------------------------------------------------------------------------
class _Counting(http.server.SimpleHTTPRequestHandler):
    log: list[tuple[str, str | None]] = []

    def log_message(self, *args):
        pass

    def do_HEAD(self):  # noqa: N802 - http.server API
        _Counting.log.append(("HEAD", None))
        return super().do_HEAD()

    def do_GET(self):  # noqa: N802 - http.server API
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        _Counting.log.append(("GET", rng))
        if rng is None or os.path.isdir(path):
            return super().do_GET()
        if not os.path.isfile(path):
            self.send_error(404)
            return
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


def test_http_batches_count_requests(tmp_path):
    pytest.importorskip("aiohttp", reason="aiohttp is needed by fsspec's HTTP filesystem")
    _small_fold(tmp_path)
    truth = _truth(tmp_path)
    stems = tx.Dataset(tmp_path, "t").index.stems()

    def handler(*a, **k):
        return _Counting(*a, directory=str(tmp_path), **k)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        ds = tx.Dataset(
            url, "t", shards=["t_0000.tar", "t_0001.tar"], cache_bytes=0, calibrate=False
        )
        n = len(ds)
        batch = np.random.default_rng(1).choice(n, 48, replace=False).tolist()
        _Counting.log.clear()
        _check_all(ds, truth, stems, batch)
        ranged = [r for r in _Counting.log if r[0] == "GET" and r[1] is not None]
        assert len(ranged) == 2  # one merged range per shard
        assert len(_Counting.log) - len(ranged) <= 2  # each shard looked up once (size)
        _Counting.log.clear()
        _check_all(ds, truth, stems, batch)
        assert len(_Counting.log) == 2  # looked up once per process
        _Counting.log.clear()
        for i in batch[:10]:
            ds[i]
        assert len(_Counting.log) == 10
        os.remove(tmp_path / "t_0000.tar")  # missing mid-epoch
        with pytest.raises(FileNotFoundError, match=rf"{url}/t_0000.tar"):
            ds.__getitems__([0, n - 1])
        ds.close()
    finally:
        server.shutdown()
        server.server_close()


def test_s3_etag_compared_on_later_opens(s3, tmp_path):
    """The ETag first seen (listing) travels with the dataset: a worker's copy, or the same
    dataset reopened after ``close()``, refuses a shard object replaced since, naming the URL
    and both ETags; unchanged shards read as before."""
    import pickle

    opts, _ = s3
    _small_fold(tmp_path, per=4)
    fs = _s3fs(opts)
    _upload(fs, tmp_path, "tfe")
    ds = tx.Dataset("s3://tfe", "t", storage_options=opts, cache_bytes=0, calibrate=False)
    assert set(ds.etags) == {"t_0000.tar", "t_0001.tar"}
    old = ds.etags["t_0001.tar"]
    n = len(ds)
    assert len(ds.__getitems__(list(range(n)))) == n
    worker = pickle.loads(pickle.dumps(ds))
    assert worker.etags == ds.etags
    assert len(worker.__getitems__(list(range(n)))) == n  # unchanged: reads
    raw = bytearray((tmp_path / "t_0001.tar").read_bytes())
    raw[-1100] ^= 1  # inside the end-of-archive blocks: same layout, another object
    fs.pipe("tfe/t_0001.tar", bytes(raw))
    new = fs.info("tfe/t_0001.tar", refresh=True)["ETag"]
    assert new != old
    for later in (pickle.loads(pickle.dumps(ds)), ds):
        later.close()  # a reopen looks every shard up again
        assert len(later[0]) == 2  # shard 0 did not change
        with pytest.raises(IntegrityError, match="ETag") as info:
            later[n - 1]
        msg = str(info.value)
        assert "s3://tfe/t_0001.tar" in msg and old in msg and new in msg
    # a new dataset records the new ETag and reads
    assert len(tx.Dataset("s3://tfe", "t", storage_options=opts)[n - 1]) == 2


def test_s3_dataset_creation_requests(s3, tmp_path):
    """Making a dataset over an ``s3://`` root costs the index's one GET (with ``shards=``),
    or that and the root's listing (without); no HEAD, no request for any shard. A shard is
    looked up on its first use only (given names: one HEAD, then its ranges)."""
    opts, log = s3
    _small_fold(tmp_path, per=8)
    fs = _s3fs(opts)
    _upload(fs, tmp_path, "tfn")
    log.clear()
    listed = tx.Dataset("s3://tfn", "t", storage_options=opts, cache_bytes=0, calibrate=False)
    assert listed.shards == ["t_0000.tar", "t_0001.tar"]
    assert sorted((m, p) for m, p, _ in log) == [("GET", "/tfn"), ("GET", "/tfn/t.taridx")]
    assert listed._remote_index_mtime is not None  # the index's time, from the same GET
    log.clear()
    assert len(listed.__getitems__([0])) == 1  # the listing named sizes and ETags: no HEAD
    assert [(m, p) for m, p, _ in log] == [("GET", "/tfn/t_0000.tar")]
    names = ["t_0000.tar", "t_0001.tar"]
    log.clear()
    given = tx.Dataset("s3://tfn", "t", storage_options=opts, shards=names, calibrate=False)
    assert [(m, p, r) for m, p, r in log] == [("GET", "/tfn/t.taridx", None)]
    assert given._remote_index_mtime is not None
    log.clear()
    n = len(given)
    assert len(given[n - 1]) == 2  # only the shard used is looked up
    assert [m for m, p, _ in log if p == "/tfn/t_0001.tar"] == ["HEAD", "GET"]
    assert not [p for _, p, _ in log if p == "/tfn/t_0000.tar"]
    # a missing shard named by ``shards=`` is found when first needed, naming its URL
    log.clear()
    gone = tx.Dataset("s3://tfn", "t", storage_options=opts, shards=[names[0], "t_0009.tar"])
    assert [p for _, p, _ in log] == ["/tfn/t.taridx"]
    assert len(gone[0]) == 2
    with pytest.raises(FileNotFoundError, match="tfn/t_0009.tar"):
        gone[n - 1]
    for d in (listed, given, gone):
        d.close()
    # a missing index: FileNotFoundError naming its URL, listed or not
    fs.rm("tfn/t.taridx")
    for kw in ({}, {"shards": names}):
        with pytest.raises(FileNotFoundError, match="s3://tfn/t.taridx"):
            tx.Dataset("s3://tfn", "t", storage_options=opts, **kw)

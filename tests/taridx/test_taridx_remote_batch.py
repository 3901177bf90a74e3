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
    ds = tx.Dataset("s3://tfx", "t", storage_options=opts)
    stems = tx.Dataset(tmp_path, "t").index.stems()
    n = len(ds)
    assert n == 120 and ds.shards == ["t_0000.tar", "t_0001.tar"]
    rng = np.random.default_rng(0)
    batch = rng.choice(n, 64, replace=False).tolist()
    log.clear()
    _check_all(ds, truth, stems, batch)
    # the shards are listed (sizes, ETags): no lookup per shard; each shard's rows lie within
    # max_gap of each other here, so one range per shard
    assert not [r for r in log if r[0] == "HEAD"]
    assert len(_gets(log)) == 2
    log.clear()
    for i in batch[:16]:  # one sample at a time: one request each
        ds[i]
    assert len(_gets(log)) == 16
    # no merging across gaps: at least one request per sample
    tight = tx.Dataset("s3://tfx", "t", storage_options=opts, max_gap=0)
    log.clear()
    _check_all(tight, truth, stems, batch)
    assert len(_gets(log)) >= 64
    ds.close()
    tight.close()


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
    ds = tx.Dataset("s3://tfl", "t", storage_options=opts, max_gap=16 << 10)
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
    ds = tx.Dataset("s3://tfy", "t", storage_options=opts)
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
        ds = tx.Dataset(url, "t", shards=["t_0000.tar", "t_0001.tar"])
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

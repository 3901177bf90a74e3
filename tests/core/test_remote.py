"""Remote reads through fsspec (issue 13 items 4 and 5), against real servers on 127.0.0.1:
moto's S3 in server mode with s3fs, and a small HTTP server honouring Range and If-Match.
Requests and bytes are counted on the server side."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tenfold
import tenfold.interop.safetensors_reader
from tenfold.errors import FormatError, IntegrityError

fsspec = pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's HTTP filesystem) is not installed")

from _servers import RangeServer, file_server_fixtures  # noqa: E402

ROWS, COLS = 256, 512  # 512 KiB float32 tensors: bigger than the speculative blocks
TENSORS = {
    f"layer{i}.w": np.random.default_rng(i).standard_normal((ROWS, COLS)).astype(np.float32)
    for i in range(6)
}
TENSORS["bias"] = np.arange(100, dtype=np.float16)


def _files(d: Path) -> dict[str, bytes]:
    from tenfold.ztensor.v2writer import V2Writer

    out = {}
    for name in ("m.zt", "m.safetensors", "m.oinf"):
        tenfold.save(d / name, TENSORS)
        out[name] = (d / name).read_bytes()
    tenfold.save(d / "c.zt", TENSORS, checksum="sha256")
    out["c.zt"] = (d / "c.zt").read_bytes()
    with V2Writer(d / "v2.zt") as w:
        for k in sorted(TENSORS):
            w.add(k, TENSORS[k])
    out["v2.zt"] = (d / "v2.zt").read_bytes()
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: Any) -> dict[str, bytes]:
    return _files(tmp_path_factory.mktemp("remote"))


http, s3, server = file_server_fixtures("bkt")


def _index_bytes(name: str, data: bytes) -> int:
    """Bytes of the index/header of a file (what one open may fetch beyond a tensor)."""
    if name.endswith(".safetensors"):
        return 8 + int.from_bytes(data[:8], "little")
    with _buf(data) as r:
        if hasattr(r, "index_size"):
            return int(r.index_size) + 8
        return int(r.manifest_blob[1]) + 48


def _buf(data: bytes) -> Any:
    import tenfold.ztensor as zt

    return zt.open(data)


def _gets(log: list) -> list:
    return [e for e in log if e[0] == "GET"]


@pytest.mark.parametrize("name", ["m.zt", "c.zt", "v2.zt", "m.safetensors"])
def test_open_and_one_tensor_read_request_counts(server, files, name):
    url = server.url(name)
    server.log.clear()
    with tenfold.open(url, **server.opts()) as r:
        assert len(server.log) <= 2, server.log  # metadata + one speculative block
        opened = sum(e[3] for e in server.log)
        server.log.clear()
        got = r["layer3.w"]
        assert np.array_equal(got, TENSORS["layer3.w"])
        assert len(server.log) <= 2, server.log
        sent = sum(e[3] for e in server.log)
        assert sent <= TENSORS["layer3.w"].nbytes + _index_bytes(name, files[name]), server.log
        assert opened < len(files[name]) // 4  # never the whole object
        server.log.clear()
        again = r["layer3.w"]  # served from what was fetched: no request
        assert np.array_equal(again, got) and server.log == []


@pytest.mark.parametrize("name", ["m.zt", "v2.zt", "m.safetensors"])
def test_slice_reads_its_rows_only(server, name):
    with tenfold.open(server.url(name), **server.opts()) as r:
        r["layer0.w"]  # settles a deferred magic check: what follows is the slice alone
        server.log.clear()
        got = r.read("layer1.w", slice(ROWS // 8, ROWS // 4))
        assert np.array_equal(got, TENSORS["layer1.w"][ROWS // 8 : ROWS // 4])
        assert len(server.log) == 1
        assert server.log[0][3] == TENSORS["layer1.w"].nbytes // 8


@pytest.mark.parametrize("name", ["m.zt", "v2.zt", "m.safetensors"])
def test_load_coalesces_adjacent_tensors(server, name):
    server.log.clear()
    got = tenfold.load(server.url(name), **server.opts())
    assert got.keys() == TENSORS.keys()
    assert all(np.array_equal(got[k], v) for k, v in TENSORS.items())
    assert len(server.log) <= 4, server.log  # metadata, block, one coalesced run (+ magic)


@pytest.mark.parametrize("name", ["m.zt", "m.safetensors"])
def test_object_changed_between_fetches_is_an_integrity_error(server, files, name):
    with tenfold.open(server.url(name), **server.opts()) as r:
        data = bytearray(files[name])
        data[-1] ^= 0xFF  # same size, other content: a new ETag
        server.replace(name, bytes(data))
        try:
            with pytest.raises(IntegrityError, match=r"changed on the server.*ETag"):
                r["layer2.w"]
        finally:
            server.replace(name, files[name])


def test_checksums_are_verified_on_fetched_bytes(http, files):
    data = bytearray(files["c.zt"])
    with _buf(files["c.zt"]) as r0:
        off = r0.info("layer4.w").offset
    data[off + 5] ^= 1
    http.srv.put("bad.zt", bytes(data))
    with tenfold.open(http.url("bad.zt")) as r:
        assert np.array_equal(r["layer3.w"], TENSORS["layer3.w"])
        with pytest.raises(IntegrityError, match=r"'layer4.w'.*sha256"):
            r["layer4.w"]


def test_deferred_magic_check_still_refuses_a_bad_head(http, files):
    data = bytearray(files["m.zt"])
    data[0:8] = b"ZTENXXXX"
    http.srv.put("badmagic.zt", bytes(data))
    with tenfold.open(http.url("badmagic.zt")) as r:
        with pytest.raises(FormatError, match=r"zt: file at offset 0x0: magic.*ZTENXXXX"):
            r["layer3.w"]


def test_misnamed_file_is_still_read_by_content(http, files):
    url = http.srv.put("really-safetensors.zt", files["m.safetensors"])
    assert tenfold.detect(url) == "safetensors"
    assert tenfold.detect(http.url("v2.zt")) == "ztensor"
    with tenfold.open(url) as r:
        assert type(r) is tenfold.interop.safetensors_reader.Reader
        assert np.array_equal(r["bias"], TENSORS["bias"])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_server_down_is_an_oserror_naming_the_url():
    url = f"http://127.0.0.1:{_closed_port()}/m.zt"
    with pytest.raises(OSError, match=rf"{url}.*(Connect|connect)") as ei:
        tenfold.open(url)
    assert not isinstance(ei.value, tenfold.TenfoldError)


def test_server_going_down_after_open_is_an_oserror_naming_the_url(files):
    with RangeServer() as srv:
        url = srv.put("m.safetensors", files["m.safetensors"])
        r = tenfold.open(url)
    with r, pytest.raises(OSError, match=rf"{url}"):
        r["layer5.w"]


def test_s3_missing_object_and_server_down(s3):
    with pytest.raises(FileNotFoundError, match=r"s3://bkt/nope.zt"):
        tenfold.open("s3://bkt/nope.zt", **s3.opts())
    opts = s3.srv.storage_options(
        config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": 1}
    )
    opts["client_kwargs"] = {
        "endpoint_url": f"http://127.0.0.1:{_closed_port()}",
        "region_name": "eu-west-1",
    }
    with pytest.raises(OSError, match=r"s3://bkt/m.zt"):
        tenfold.open("s3://bkt/m.zt", storage_options=opts)


def test_open_fsspec_file_object(s3):
    with s3.fs.open("bkt/m.safetensors", "rb") as f:
        s3.log.clear()
        with tenfold.open(f) as r:
            assert np.array_equal(r["layer0.w"], TENSORS["layer0.w"])
        assert len(s3.log) <= 3  # the file's details are reused: no metadata request


def test_memory_and_simplecache(files, tmp_path):
    fs = fsspec.filesystem("memory")
    fs.pipe("/tf/m.zt", files["m.zt"])
    with tenfold.open("memory://tf/m.zt") as r:
        assert np.array_equal(r["layer1.w"], TENSORS["layer1.w"])
        fs.pipe("/tf/m.zt", files["m.zt"][:-1])  # a filesystem without ETag: size + stamp
        with pytest.raises(IntegrityError, match="changed"):
            r["layer2.w"]
    fs.pipe("/tf/m.zt", files["m.zt"])
    url = "simplecache::memory://tf/m.zt"
    got = tenfold.load(url, storage_options={"simplecache": {"cache_storage": str(tmp_path)}})
    assert all(np.array_equal(got[k], v) for k, v in TENSORS.items())


def test_every_remote_result_equals_the_local_one(http, files, tmp_path):
    for name in ("m.zt", "v2.zt", "m.safetensors", "m.oinf"):
        p = tmp_path / name
        p.write_bytes(files[name])
        with tenfold.open(http.url(name)) as r, tenfold.open(p) as loc:
            assert list(r) == list(loc)
            for k in loc:
                assert np.array_equal(r[k], loc[k]), (name, k)
            assert r.verify().ok


def test_missing_fsspec_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(ImportError, match=r'pip install "tenfold\[remote\]"'):
        tenfold.open("s3://bkt/m.zt")


@pytest.mark.parametrize(
    "fmt", ["ztensor", "ztensor-v2", "ztensor-zstd", "oinf", "fold", "wtxt", "safetensors", "npz"]
)
def test_every_format_reads_remotely(tmp_path, fmt):
    from test_source import _load, _make

    p = _make(fmt, tmp_path)
    fs = fsspec.filesystem("memory")
    fs.pipe(f"/every/{p.name}", p.read_bytes())
    with tenfold.open(f"memory://every/{p.name}") as r, tenfold.open(p) as loc:
        a, b = _load(r), _load(loc)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in b)
        assert r.verify().ok
        assert r.path == f"memory://every/{p.name}"


def test_remote_reader_works_in_a_forked_worker(http):
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork start method on this platform")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    with tenfold.open(http.url("m.safetensors")) as r:
        r["bias"]  # the parent has used its filesystem (and its event loop thread)
        p = ctx.Process(target=_sum_in_child, args=(r, "layer2.w", q))  # inherited, not pickled
        p.start()
        got = q.get(timeout=60)
        p.join(60)
    assert p.exitcode == 0
    assert got == float(TENSORS["layer2.w"].astype(np.float64).sum())


def _sum_in_child(r: Any, name: str, q: Any) -> None:
    try:
        q.put(float(np.asarray(r[name]).astype(np.float64).sum()))
    except BaseException as exc:  # report, never hang the parent
        q.put(repr(exc))
        raise


@pytest.mark.parametrize("name", ["m.zt", "m.safetensors"])
def test_remote_reader_shared_by_threads(http, name):
    from concurrent.futures import ThreadPoolExecutor

    with tenfold.open(http.url(name)) as r:
        names = list(TENSORS) * 3
        with ThreadPoolExecutor(4) as ex:
            got = list(ex.map(lambda k: (k, r[k]), names))
        assert all(np.array_equal(v, TENSORS[k]) for k, v in got)
        with ThreadPoolExecutor(4) as ex:
            parts = list(ex.map(lambda i: r.read("layer1.w", slice(i, i + 8)), range(0, 64, 8)))
        assert np.array_equal(np.concatenate(parts), TENSORS["layer1.w"][:64])

"""Remote reads that would mix versions or fail for no reason (issue 21): each response to a
range request is checked on its own, against a real HTTP server on 127.0.0.1 that misbehaves
on demand (``_badserver.py``), and against moto's S3 with ``If-Match`` stripped.

The consistency model under test is the one ``docs/readers.md`` states ("Remote reads:
consistency model")."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tenfold
import tenfold.core.source as source
from tenfold.errors import IntegrityError, TenfoldError

fsspec = pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
aiohttp = pytest.importorskip("aiohttp", reason="aiohttp (fsspec's HTTP filesystem) is missing")

from _badserver import BadServer, Lazy  # noqa: E402

TENSORS = {
    f"t{i}": np.random.default_rng(i).standard_normal((256, 512)).astype(np.float32)
    for i in range(3)
}  # 512 KiB each: larger than the speculative head block, so each is its own request
SMALL = {"s": np.arange(1000, dtype=np.int32)}  # fetched whole at open


def _unverified() -> type[Warning]:
    from tenfold import errors

    cls = getattr(errors, "UnverifiedRemoteWarning", None)
    assert cls is not None, "tenfold.errors.UnverifiedRemoteWarning is missing"
    return cls  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def blobs(tmp_path_factory: Any) -> dict[str, bytes]:
    d: Path = tmp_path_factory.mktemp("consistency")
    tenfold.save(d / "m.safetensors", TENSORS)
    tenfold.save(d / "small.safetensors", SMALL)
    return {
        "m.safetensors": (d / "m.safetensors").read_bytes(),
        "small.safetensors": (d / "small.safetensors").read_bytes(),
    }


@pytest.fixture(scope="module")
def server_once() -> Any:
    with BadServer() as srv:
        yield srv


@pytest.fixture
def srv(server_once: BadServer, blobs: dict[str, bytes]) -> BadServer:
    server_once.reset()
    for k, v in blobs.items():
        server_once.put(k, v)
    return server_once


def _other_version(data: bytes) -> bytes:
    """Same size, other tensor bytes (the last byte of the last tensor flipped)."""
    b = bytearray(data)
    b[-1] ^= 0xFF
    return bytes(b)


# -- a server that ignores If-Match ------------------------------------------------------------
def test_replaced_object_behind_a_server_ignoring_if_match_is_an_integrity_error(srv, blobs):
    srv.behaviour.ignore_preconditions = True
    url = srv.url("m.safetensors")
    with tenfold.open(url) as r:
        np.testing.assert_array_equal(r["t0"], TENSORS["t0"])
        srv.put("m.safetensors", _other_version(blobs["m.safetensors"]))
        with pytest.raises(IntegrityError, match=r"changed on the server.*ETag") as e:
            r["t2"]  # the server answers with the new version: caught by its ETag
        assert url in str(e.value)


def test_replaced_object_with_last_modified_only_is_an_integrity_error(srv, blobs):
    srv.behaviour.validators = "lastmod"
    srv.behaviour.ignore_preconditions = True
    with tenfold.open(srv.url("m.safetensors")) as r:
        srv.put("m.safetensors", _other_version(blobs["m.safetensors"]))
        with pytest.raises(IntegrityError, match=r"changed on the server.*Last-Modified"):
            r["t2"]


def test_last_modified_only_is_sent_as_if_unmodified_since(srv, blobs):
    srv.behaviour.validators = "lastmod"
    with tenfold.open(srv.url("m.safetensors")) as r:
        srv.put("m.safetensors", _other_version(blobs["m.safetensors"]))
        srv.behaviour.log.clear()
        with pytest.raises(IntegrityError, match="HTTP 412"):
            r["t2"]
    (get,) = [h for m, _r, h in srv.behaviour.log if m == "GET"]
    assert "If-Unmodified-Since" in get and "If-Match" not in get


# -- weak ETags --------------------------------------------------------------------------------
def test_weak_etag_is_never_sent_as_if_match(srv):
    srv.behaviour.validators = "weak"  # the server 412s If-Match with a weak tag, as RFC 9110 says
    with tenfold.open(srv.url("m.safetensors")) as r:
        for k, v in TENSORS.items():
            np.testing.assert_array_equal(r[k], v)
    gets = [h for m, _r, h in srv.behaviour.log if m == "GET"]
    assert gets and not any("If-Match" in h for h in gets)


def test_weak_etag_still_catches_a_replaced_object(srv, blobs):
    srv.behaviour.validators = "weak"
    srv.behaviour.ignore_preconditions = True
    with tenfold.open(srv.url("m.safetensors")) as r:
        srv.put("m.safetensors", _other_version(blobs["m.safetensors"]))
        with pytest.raises(IntegrityError, match=r"ETag"):
            r["t1"]


# -- no validator at all -----------------------------------------------------------------------
def test_no_validator_warns_on_open_with_its_own_class(srv):
    cls = _unverified()
    assert issubclass(cls, UserWarning)
    srv.behaviour.validators = "none"
    url = srv.url("m.safetensors")
    with pytest.warns(cls, match="no ETag or Last-Modified") as w:
        r = tenfold.open(url)
    assert url in str(w[0].message)
    with r:
        np.testing.assert_array_equal(r["t1"], TENSORS["t1"])


def test_no_validator_warning_can_be_made_an_error(srv):
    cls = _unverified()
    srv.behaviour.validators = "none"
    with warnings.catch_warnings():
        warnings.simplefilter("error", cls)
        with pytest.raises(cls):
            tenfold.open(srv.url("m.safetensors"))


def test_no_validator_still_catches_a_size_change_per_response(srv, blobs):
    srv.behaviour.validators = "none"
    with pytest.warns(_unverified()):
        r = tenfold.open(srv.url("m.safetensors"))
    with r:
        srv.put("m.safetensors", blobs["m.safetensors"] + b"\0" * 64)
        srv.behaviour.log.clear()
        with pytest.raises(IntegrityError, match=r"size \(Content-Range\)"):
            r["t2"]
    assert [m for m, _r, _h in srv.behaviour.log] == ["GET"]  # from the response itself


# -- a server that ignores Range ---------------------------------------------------------------
def _big_safetensors(nbytes: int) -> Lazy:
    n = nbytes // 4
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}})
    header += " " * (-len(header) % 8)
    head = len(header).to_bytes(8, "little") + header.encode()
    return Lazy(head, len(head) + 4 * n)


def test_range_ignored_reads_no_further_than_asked(srv):
    srv.put("big.safetensors", _big_safetensors(256 << 20))
    srv.behaviour.ignore_range = True
    with pytest.raises(OSError, match="ignored the Range header") as e:
        with tenfold.open(srv.url("big.safetensors")) as r:
            assert list(r.keys()) == ["w"]  # the header comes from a 200 cut short
            r["w"]  # a range inside the object: refused, not downloaded from the start
    assert srv.url("big.safetensors") in str(e.value)
    assert srv.sent < 32 << 20, srv.sent  # of 256 MiB: socket buffers at most


def test_range_ignored_small_object_read_whole_at_open(srv):
    srv.behaviour.ignore_range = True
    with tenfold.open(srv.url("small.safetensors")) as r:
        np.testing.assert_array_equal(r["s"], SMALL["s"])


def test_sharded_index_fetch_stops_at_its_limit(srv):
    from tenfold.sharded import MAX_INDEX_BYTES

    srv.put("model.safetensors.index.json", Lazy(b'{"weight_map": {"a": "', 192 << 20))
    srv.behaviour.ignore_range = True
    with pytest.raises((TenfoldError, OSError)):
        tenfold.open(srv.url("model.safetensors.index.json"))
    assert srv.sent < MAX_INDEX_BYTES + (32 << 20), srv.sent  # of 192 MiB


def test_fetch_prefix_of_a_range_honouring_and_a_range_ignoring_server(srv, blobs):
    fs = fsspec.filesystem("http")
    url = srv.url("m.safetensors")
    assert source.fetch_prefix(fs, url, 1000) == blobs["m.safetensors"][:1000]
    srv.behaviour.ignore_range = True
    assert source.fetch_prefix(fs, url, 1000) == blobs["m.safetensors"][:1000]
    assert source.fetch_prefix(fs, url, 10 << 20) == blobs["m.safetensors"]


# -- a range other than the one asked ----------------------------------------------------------
def test_shifted_content_range_is_refused(srv):
    with tenfold.open(srv.url("m.safetensors")) as r:
        srv.behaviour.shift = 1
        with pytest.raises(OSError, match="Content-Range mismatch") as e:
            r["t1"]
        assert srv.url("m.safetensors") in str(e.value)


# -- no Content-Length ---------------------------------------------------------------------------
def test_chunked_answers_without_content_length(srv):
    srv.behaviour.chunked = True
    with tenfold.open(srv.url("m.safetensors")) as r:
        for k, v in TENSORS.items():
            np.testing.assert_array_equal(r[k], v)


# -- timeouts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["get", "all"])
def test_stalled_server_is_a_timeout_naming_the_url(srv, monkeypatch, where):
    monkeypatch.setattr(source, "READ_TIMEOUT", 0.3)
    url = srv.url("m.safetensors")
    srv.behaviour.stall = where
    with pytest.raises(TimeoutError, match="timed out") as e:
        tenfold.open(url)
    assert isinstance(e.value, OSError) and url in str(e.value)


def test_a_timeout_in_storage_options_is_used_instead(srv, monkeypatch):
    monkeypatch.setattr(source, "READ_TIMEOUT", 3600.0)  # would hang the test if used
    srv.behaviour.stall = "get"
    opts = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(sock_read=0.3)}}
    with pytest.raises(TimeoutError, match="timed out"):
        tenfold.open(srv.url("m.safetensors"), storage_options=opts)


# -- S3 whose server ignores If-Match ------------------------------------------------------------
class _StripIfMatch:
    def __init__(self, app: Any) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Any) -> Any:
        environ.pop("HTTP_IF_MATCH", None)
        return self.app(environ, start_response)


def test_s3_replaced_object_is_an_integrity_error_even_without_if_match(blobs):
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    from _servers import S3Server

    with S3Server() as s3:
        srv = s3.server._server
        srv.app = _StripIfMatch(srv.app)  # type: ignore[union-attr]
        fs = s3.filesystem()
        fs.mkdir("cons")
        fs.pipe("cons/m.safetensors", blobs["m.safetensors"])
        with tenfold.open("s3://cons/m.safetensors", storage_options=s3.storage_options()) as r:
            np.testing.assert_array_equal(r["t0"], TENSORS["t0"])
            fs.pipe("cons/m.safetensors", _other_version(blobs["m.safetensors"]))
            with pytest.raises(IntegrityError, match=r"changed on the server.*ETag"):
                r["t2"]


# -- our own errors are a type, not a message prefix ----------------------------------------------
def test_remote_failures_are_remote_oserrors_wrapped_once(srv, monkeypatch):
    # Before: core.source recognised the OSErrors it had already made (naming the URL) by the
    # start of their message; they are now RemoteOSError, each also the builtin class a
    # caller catches (FileNotFoundError, TimeoutError, OSError)
    from tenfold.core._http import (
        RemoteNotFoundError,
        RemoteOSError,
        RemoteTimeoutError,
    )

    url = srv.url("m.safetensors")
    with tenfold.open(url) as r:
        srv.behaviour.shift = 1
        with pytest.raises(RemoteOSError, match="Content-Range mismatch") as e:
            r["t1"]
    assert str(e.value).count(url) == 1 and not isinstance(e.value.__cause__, RemoteOSError)
    srv.behaviour.shift = 0
    missing = srv.url("absent.safetensors")
    with pytest.raises(RemoteNotFoundError) as e:
        tenfold.open(missing)
    assert isinstance(e.value, FileNotFoundError) and missing in str(e.value)
    assert not isinstance(e.value.__cause__, RemoteOSError)
    monkeypatch.setattr(source, "READ_TIMEOUT", 0.3)
    srv.behaviour.stall = "get"
    with pytest.raises(RemoteTimeoutError) as e:
        tenfold.open(url)
    assert isinstance(e.value, TimeoutError) and url in str(e.value)
    assert not isinstance(e.value.__cause__, RemoteOSError)

"""Sharded checkpoints (Hugging Face index + shards) read remotely, against the HTTP Range
server and moto's S3 server on 127.0.0.1: the index is fetched with one request, shard names
are resolved against the index URL, hostile names are refused before any shard is fetched,
and each shard is opened on first use only. Requests are counted on the server side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tenfold
from tenfold.errors import FormatError

fsspec = pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's HTTP filesystem) is not installed")

from _servers import file_server_fixtures  # noqa: E402

TENSORS = {
    f"model.layers.{i}.weight": np.random.default_rng(i).standard_normal((64, 256), np.float32)
    for i in range(4)
}
TENSORS["lm_head.bias"] = np.arange(50, dtype=np.float16)


def _hostile(shard: str, first: str = "model-00001-of-00002.zt") -> bytes:
    doc = {"metadata": {}, "weight_map": {"a": first, "b": shard}}
    return json.dumps(doc).encode()


@pytest.fixture(scope="module")
def files(tmp_path_factory: Any) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("remote-sharded")
    out: dict[str, bytes] = {}
    for sub, suffix in (("hub", ".safetensors"), ("zt", ".zt")):
        (d / sub).mkdir()
        tenfold.save(d / sub / f"model{suffix}", TENSORS, max_shard_size=100_000)
        for p in sorted((d / sub).iterdir()):
            out[f"{sub}/{p.name}"] = p.read_bytes()
    out["zt/renamed.json"] = out["zt/model.zt.index.json"]  # recognised by content
    first = sorted(k for k in out if k.startswith("zt/model-"))[0]
    out["secret.zt"] = out[first]
    for i, bad in enumerate(["../secret.zt", "%2e%2e/secret.zt", "/secret.zt", "x?y=1"]):
        out[f"zt/bad{i}.index.json"] = _hostile(bad, first[3:])
    out["zt/missing.index.json"] = _hostile("model-00009-of-00009.zt", first[3:])
    return out


http, s3, server = file_server_fixtures("shards")


def _paths(log: list) -> list[str]:
    return [str(e[1]) for e in log]


@pytest.mark.parametrize("index", ["hub/model.safetensors.index.json", "zt/model.zt.index.json"])
def test_remote_index_opens_with_one_request_and_shards_lazily(server, files, index):
    server.log.clear()
    with tenfold.open(server.url(index), **server.opts()) as r:
        assert len(server.log) == 1, server.log  # the index, once; no shard touched
        assert sorted(r) == sorted(TENSORS)
        assert r.metadata["total_size"] == sum(a.nbytes for a in TENSORS.values())
        first = next(iter(TENSORS))
        shard = r.weight_map[first]
        server.log.clear()
        assert np.array_equal(r[first], TENSORS[first])
        touched = _paths(server.log)
        assert touched and all(shard in p for p in touched), touched  # only its shard
        assert len(server.log) <= 4, server.log  # shard open (<= 2) + one tensor (<= 2)
        for k, a in TENSORS.items():
            assert np.array_equal(r[k], a), k


def test_remote_index_recognised_by_content(http):
    with tenfold.open(http.url("zt/renamed.json")) as r:
        assert all(np.array_equal(r[k], a) for k, a in TENSORS.items())


@pytest.mark.parametrize("index", ["hub/model.safetensors.index.json", "zt/model.zt.index.json"])
def test_torch_and_safe_open_of_a_remote_index(server, index):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (extra: tenfold[torch])")
    import tenfold.torch as tt

    state = tt.load_file(server.url(index), **server.opts())
    assert sorted(state) == sorted(TENSORS)
    for k, a in TENSORS.items():
        assert torch.equal(state[k], torch.from_numpy(a)), k
    with tt.safe_open(server.url(index), **server.opts()) as f:
        k = "model.layers.2.weight"
        assert sorted(f.keys()) == sorted(TENSORS)
        assert torch.equal(f.get_slice(k)[8:16, ::4], torch.from_numpy(TENSORS[k][8:16, ::4]))
    got = tenfold.load(server.url(index), **server.opts())
    assert all(np.array_equal(got[k], a) for k, a in TENSORS.items())


@pytest.mark.parametrize("i", range(4))
def test_hostile_shard_names_are_refused_before_any_shard_fetch(server, i):
    server.log.clear()
    with pytest.raises(FormatError, match="refused"):
        tenfold.open(server.url(f"zt/bad{i}.index.json"), **server.opts())
    assert len(server.log) == 1, server.log  # the index only
    assert not any("secret" in p for p in _paths(server.log))


def test_a_missing_remote_shard_is_a_format_error_naming_it(server):
    with tenfold.open(server.url("zt/missing.index.json"), **server.opts()) as r:
        with pytest.raises(FormatError, match="model-00009-of-00009.zt"):
            r["b"]


def test_a_missing_remote_index_is_an_oserror_naming_the_url(server):
    url = server.url("zt/nothing.index.json")
    with pytest.raises(FileNotFoundError, match="nothing.index.json"):
        tenfold.open(url, **server.opts())


def test_url_dir_drops_query_and_keeps_chains():
    from tenfold.sharded import _url_dir

    assert _url_dir("https://h/a/b/m.index.json?sig=x") == "https://h/a/b/"
    assert _url_dir("simplecache::s3://bkt/m/m.zt.index.json") == "simplecache::s3://bkt/m/"


def test_local_index_still_refuses_missing_shards_at_open(tmp_path: Path):
    (tmp_path / "m.index.json").write_bytes(_hostile("model-00009-of-00009.zt"))
    with pytest.raises(FormatError, match="missing shard files"):
        tenfold.open(tmp_path / "m.index.json")

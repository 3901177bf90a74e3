"""A sharded checkpoint's index read remotely at its edges (issue 21), against the HTTP Range
server on 127.0.0.1: ``tenfold verify URL`` and ``tenfold inspect [--json] URL`` of an index,
and an index that names itself (or a shard that is an index by content) refused after a small,
bounded number of requests. Requests are counted on the server side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tenfold
from tenfold import sharded
from tenfold.cli import main
from tenfold.errors import FormatError

fsspec = pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's HTTP filesystem) is not installed")

from _servers import RangeServer  # noqa: E402

TENSORS = {f"w{i}": np.full(64, i, np.float32) for i in range(4)}


@pytest.fixture(scope="module")
def http(tmp_path_factory: Any) -> Any:
    d: Path = tmp_path_factory.mktemp("remote-sharded-edges")
    tenfold.save(d / "m.zt", TENSORS, max_shard_size=600)  # 2 shards
    with RangeServer() as srv:
        for p in d.iterdir():
            srv.put(p.name, p.read_bytes())
        srv.put("self.index.json", b'{"weight_map": {"w": "self.index.json"}}')
        srv.put("a.index.json", b'{"weight_map": {"w": "b.index.json"}}')
        srv.put("b.index.json", b'{"weight_map": {"w": "a.index.json"}}')
        srv.put("byname.index.json", b'{"weight_map": {"w": "x.zt"}}')
        srv.put("x.zt", b'{"weight_map": {"w": "x.zt"}}')  # an index by content
        yield srv


def _run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_cli_verify_and_inspect_of_a_remote_index(http: RangeServer, capsys: Any) -> None:
    url = http.url("m.zt.index.json")
    rc, out, err = _run(capsys, "verify", url)
    assert (rc, err) == (0, ""), out
    assert url in out and "m-00002-of-00002.zt: tensor 'w3'" in out and "0 errors" in out
    rc, out, err = _run(capsys, "inspect", url)
    assert (rc, err) == (0, "")
    assert out.startswith(f"{url}: sharded, 4 objects") and "total_size (int) = 1024" in out
    rc, out, err = _run(capsys, "inspect", "--json", url)
    assert (rc, err) == (0, "")
    doc = json.loads(out)
    assert doc["file"] == url and doc["format"] == "sharded"
    assert [(o["name"], o["shard"]) for o in doc["objects"]] == [
        ("w0", "m-00001-of-00002.zt"),
        ("w1", "m-00001-of-00002.zt"),
        ("w2", "m-00002-of-00002.zt"),
        ("w3", "m-00002-of-00002.zt"),
    ]
    assert sharded.verify(url).ok
    with tenfold.open(url) as r:
        assert r.verify().ok


@pytest.mark.parametrize(
    ("index", "shard"),
    [("self.index.json", "self.index.json"), ("a.index.json", "b.index.json"),
     ("byname.index.json", "x.zt")],
)  # fmt: skip
def test_a_remote_shard_that_is_an_index_is_refused_in_few_requests(
    http: RangeServer, capsys: Any, index: str, shard: str
) -> None:
    url = http.url(index)
    match = f"shard '{shard}' is itself a sharded checkpoint's index"
    del http.log[:]
    with pytest.raises(FormatError, match=match):
        tenfold.load(url)
    assert len(http.log) <= 4, http.log  # the index, then at most the shard's head
    del http.log[:]
    with tenfold.open(url) as r, pytest.raises(FormatError, match=match):
        r["w"]
    assert len(http.log) <= 4, http.log
    for argv in (["verify", url], ["inspect", url]):
        del http.log[:]
        rc, out, err = _run(capsys, *argv)
        assert rc == 1 and match in out + err and "Traceback" not in out + err
        assert len(http.log) <= 6, http.log

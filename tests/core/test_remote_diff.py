"""``tenfold.diff`` and ``tenfold diff`` on URLs (issue 23), against a local HTTP server
honouring Range: a remote file against a local one and against another remote one, fetched
with range requests, each tensor once."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import tenfold
from tenfold.cli import main

pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's HTTP filesystem) is not installed")

from _servers import RangeServer  # noqa: E402

BIG = np.arange(256 * 1024, dtype=np.float32).reshape(512, 512)  # 1 MiB
STEP1 = {"big": BIG, "bias": np.zeros(7, np.float32), "step": np.array(1, np.int64)}
STEP2 = {"big": BIG, "bias": np.full(7, 0.25, np.float32), "step": np.array(2, np.int64)}


@pytest.fixture(scope="module")
def files(tmp_path_factory: Any) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("diff_urls")
    for name, tensors in (("s1.safetensors", STEP1), ("s2.safetensors", STEP2)):
        tenfold.save(d / name, tensors)
    tenfold.save(d / "s1.zt", STEP1, generation=2)
    return {p.name: p for p in d.iterdir()}


@pytest.fixture
def http(files: dict[str, Any]) -> Any:
    with RangeServer() as srv:
        for name, path in files.items():
            srv.put(name, path.read_bytes())
        yield srv


def test_a_url_against_a_local_file(http: RangeServer, files: dict[str, Any]) -> None:
    r = tenfold.diff(http.url("s1.safetensors"), files["s1.zt"])
    assert r.identical and r.a.path == http.url("s1.safetensors")
    assert r.a.format == "safetensors" and r.b.format == "ztensor"
    r = tenfold.diff(files["s1.safetensors"], http.url("s2.safetensors"))
    got = {t.name: (t.status, t.max_abs) for t in r.tensors}
    assert got == {"big": ("identical", 0.0), "bias": ("different", 0.25), "step": ("different", 1)}


def test_two_urls_read_by_ranges(http: RangeServer, files: dict[str, Any]) -> None:
    http.log.clear()
    r = tenfold.diff(http.url("s1.safetensors"), http.url("s1.zt"))
    assert r.identical
    sent = sum(n for *_, n in http.log)
    whole = files["s1.safetensors"].stat().st_size + files["s1.zt"].stat().st_size
    assert all(rng is not None for method, _, rng, _ in http.log if method == "GET")
    assert sent < whole + 64 * 1024  # each tensor once, plus the indexes' reads


def test_the_cli_on_urls(http: RangeServer, files: dict[str, Any], capsys: Any) -> None:
    rc = main(["diff", "--json", http.url("s1.safetensors"), http.url("s2.safetensors")])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["a"]["path"] == http.url("s1.safetensors")
    assert {t["name"]: t["status"] for t in doc["tensors"]}["bias"] == "different"
    assert main(["diff", "-q", http.url("s1.safetensors"), str(files["s1.zt"])]) == 0
    rc = main(["diff", http.url("s1.safetensors"), http.url("gone.safetensors")])
    err = capsys.readouterr().err
    assert rc == 2 and "gone.safetensors" in err and err.count("\n") == 1

"""The command line on URLs (issue 13): ``tenfold inspect`` / ``verify`` / ``convert`` take an
fsspec URL (``https://``, ``s3://``, ``memory://``...) for every tensor format, against a local
HTTP server honouring Range; an unreachable URL is one line naming it, never a traceback."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tenfold
from tenfold.cli import main

fsspec = pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's HTTP filesystem) is not installed")

from _servers import RangeServer  # noqa: E402

BIG = np.arange(256 * 1024, dtype=np.float32).reshape(512, 512)  # 1 MiB: more than one block
TENSORS = {"big": BIG, "small": np.arange(7, dtype=np.int16)}
SUFFIXES = ("zt", "safetensors", "oinf", "fold", "npz", "wtxt")


@pytest.fixture(scope="module")
def files(tmp_path_factory: Any) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("cli_urls")
    out = {}
    for sfx in SUFFIXES:
        tensors = TENSORS if sfx != "wtxt" else {"small": TENSORS["small"]}  # text: keep small
        tenfold.save(d / f"m.{sfx}", tensors)
        out[f"m.{sfx}"] = (d / f"m.{sfx}").read_bytes()
    return out


@pytest.fixture
def http(files: dict[str, bytes]) -> Any:
    with RangeServer() as srv:
        for name, data in files.items():
            srv.put(name, data)
        yield srv


def _run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.parametrize("sfx", SUFFIXES)
def test_inspect_and_verify_an_http_url(http: RangeServer, capsys: Any, sfx: str) -> None:
    url = http.url(f"m.{sfx}")
    rc, out, err = _run(capsys, "inspect", url)
    assert (rc, err) == (0, "")
    assert out.startswith(f"{url}: ")
    assert ("tensors" if sfx == "fold" else "small") in out  # FOLD lists its chunks
    rc, out, err = _run(capsys, "verify", url)
    assert (rc, err) == (0, ""), out
    assert url in out and "0 errors" in out


def test_inspect_json_names_the_url_and_fetches_no_whole_object(
    http: RangeServer, files: dict[str, bytes], capsys: Any
) -> None:
    url = http.url("m.zt")
    del http.log[:]
    rc, out, _ = _run(capsys, "inspect", "--json", url)
    assert rc == 0
    doc = json.loads(out)
    assert doc["file"] == url and doc["format"] == "ztensor"
    assert doc["size"] == len(files["m.zt"])
    assert {o["name"] for o in doc["objects"]} == {"big", "small"}
    sent = sum(row[3] for row in http.log)
    assert sent < BIG.nbytes // 2, http.log  # the index, not the 1 MiB tensor


def test_verify_a_damaged_remote_file_exits_1(
    http: RangeServer, files: dict[str, bytes], capsys: Any
) -> None:
    data = bytearray(files["m.zt"])
    data[64 + 1000] ^= 0xFF  # inside tensor 'big' (crc32c checked)
    url = http.put("bad.zt", bytes(data))
    rc, out, _ = _run(capsys, "verify", url)
    assert rc == 1
    assert "big" in out


def test_convert_from_an_http_url(http: RangeServer, tmp_path: Path, capsys: Any) -> None:
    for sfx in ("zt", "fold", "npz"):
        dst = tmp_path / f"out-{sfx}.safetensors"
        rc, out, err = _run(capsys, "convert", "-q", http.url(f"m.{sfx}"), str(dst))
        assert (rc, err) == (0, "")
        back = tenfold.load(dst)
        assert back.keys() == TENSORS.keys()
        for k, v in TENSORS.items():
            assert np.array_equal(back[k], v)


def test_memory_url(files: dict[str, bytes], capsys: Any) -> None:
    mem = fsspec.filesystem("memory")
    mem.pipe("/tenfold-cli/m.oinf", files["m.oinf"])
    try:
        rc, out, _ = _run(capsys, "inspect", "memory://tenfold-cli/m.oinf")
        assert rc == 0 and "big" in out
        rc, _, _ = _run(capsys, "verify", "-q", "memory://tenfold-cli/m.oinf")
        assert rc == 0
    finally:
        mem.rm("/tenfold-cli", recursive=True)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_unreachable_url_is_one_line_naming_it(capsys: Any, command: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/m.zt"
    rc, out, err = _run(capsys, command, url)
    assert rc == 1  # an I/O error, as a local read error
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("tenfold: error: ") and url in err
    assert "Traceback" not in err


def test_missing_object_is_a_usage_error_naming_it(http: RangeServer, capsys: Any) -> None:
    url = http.url("absent.zt")
    rc, _, err = _run(capsys, "inspect", url)
    assert rc == 2  # as a missing local file
    assert err.count("\n") == 1 and url in err


def test_a_remote_taridx_is_refused_clearly(tmp_path: Path, capsys: Any) -> None:
    from tenfold import taridx

    path = taridx.demo(tmp_path)
    with RangeServer() as srv:
        url = srv.put("demo.taridx", path.read_bytes())
        rc, _, err = _run(capsys, "inspect", url)
    assert rc == 1
    assert err.count("\n") == 1 and url in err and "TARIDX" in err

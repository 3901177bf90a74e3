"""Remote reads of PyTorch checkpoints (``.pt``, the zip and the legacy layout) and GGUF files,
over HTTP Range requests and S3 (moto's server), both on 127.0.0.1: every tensor, slice,
metadata value and dequantised block equals the local read of the same bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tenfold

pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's HTTP filesystem) is not installed")

from _servers import file_server_fixtures  # noqa: E402

RNG = np.random.default_rng(25)
W = RNG.standard_normal((300, 257)).astype(np.float32)  # bigger than the speculative blocks


def _torch_files(d: Path) -> dict[str, bytes]:
    from tenfold.formats.torchpickle._demo import write_checkpoint

    out = {}
    write_checkpoint(d / "own.pt", {"model": {"w": W, "b": np.arange(7, dtype=np.float16)},
                                    "epoch": 3})  # fmt: skip
    out["own.pt"] = (d / "own.pt").read_bytes()
    try:
        import torch
    except ImportError:
        return out
    x = torch.from_numpy(W.copy())
    sd = {"x": x, "t": x.t(), "s": x[1:, ::3], "bf": x.bfloat16()[:4], "tied": x,
          "i": torch.arange(10, dtype=torch.int64), "z": torch.tensor(2.5), "n": 7}  # fmt: skip
    torch.save(sd, d / "torch.pt")
    torch.save(sd, d / "legacy.pt", _use_new_zipfile_serialization=False)
    out["torch.pt"] = (d / "torch.pt").read_bytes()
    out["legacy.pt"] = (d / "legacy.pt").read_bytes()
    return out


def _gguf_files(d: Path) -> dict[str, bytes]:
    try:
        import gguf
    except ImportError:
        return {}
    w = gguf.GGUFWriter(str(d / "m.gguf"), "llama")
    w.add_uint32("ctx", 2048)
    w.add_array("tokens", ["<s>", "", "hi"])
    w.add_tensor("w", W)
    w.add_tensor("h", np.arange(40, dtype=np.float16).reshape(5, 8))
    w.add_tensor("i", np.arange(12, dtype=np.int32))
    q = gguf.quants.quantize(W[:, :256].copy(), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q8", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"m.gguf": (d / "m.gguf").read_bytes()}


@pytest.fixture(scope="module")
def files(tmp_path_factory: Any) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("ckpt")
    return {**_torch_files(d), **_gguf_files(d)}


http, s3, server = file_server_fixtures("ckpt")

NAMES = ["own.pt", "torch.pt", "legacy.pt", "m.gguf"]


def _local(files: dict[str, bytes], name: str, tmp_path: Path) -> Path:
    if name not in files:
        pytest.skip(f"{name} needs torch or gguf, not installed")
    p = tmp_path / name
    p.write_bytes(files[name])
    return p


def _same(a: Any, b: Any, what: str) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    assert a.tobytes() == b.tobytes(), what


@pytest.mark.parametrize("name", NAMES)
def test_remote_reads_equal_local_reads(server, files, tmp_path, name):
    p = _local(files, name, tmp_path)
    url = server.url(name)
    with tenfold.open(url, **server.opts()) as r, tenfold.open(p) as loc:
        assert list(r) == list(loc) and r.metadata == loc.metadata
        for k in loc:
            _same(r[k], loc[k], k)
            assert r.info(k).dtype == loc.info(k).dtype and r.info(k).shape == loc.info(k).shape
            if loc.info(k).shape and loc.info(k).shape[0] > 2:
                _same(r.read(k, slice(1, 3)), loc.read(k, slice(1, 3)), f"{k}[1:3]")
        assert r.verify().ok
    got, want = tenfold.load(url, copy=True, **server.opts()), tenfold.load(p, copy=True)
    assert got.keys() == want.keys()
    for k in want:
        _same(got[k], want[k], k)


def test_remote_pt_values_equal_torch_load(http, files, tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    for name in ("torch.pt", "legacy.pt"):
        p = _local(files, name, tmp_path)
        want = torch.load(p, weights_only=True)
        with tenfold.open(http.url(name)) as r:
            for k, v in want.items():
                if isinstance(v, torch.Tensor):
                    got = (
                        torch.from_numpy(np.array(r[k]).view(np.uint16)).view(torch.bfloat16)
                        if v.dtype == torch.bfloat16
                        else torch.from_numpy(np.array(r[k]))
                    )
                    assert torch.equal(got, v), (name, k)


def test_remote_gguf_dequantises_like_the_local_file(server, files, tmp_path):
    p = _local(files, "m.gguf", tmp_path)
    with tenfold.open(server.url("m.gguf"), dequantize=True, **server.opts()) as r:
        with tenfold.open(p, dequantize=True) as loc:
            got, want = r.read("q8", copy=True), loc.read("q8", copy=True)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert np.allclose(got, W[:, :256], atol=0.05)

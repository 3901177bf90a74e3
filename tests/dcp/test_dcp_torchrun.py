"""tenfold as DCP's storage under ``torchrun`` on the CPU (gloo), issue #26: 2 ranks save a
sharded state (DTensors over a CPU mesh, Adam state, 0-d and bfloat16 tensors, non-tensor
entries) with ``dcp.save`` and ``dcp.async_save``; it loads exactly into 3 ranks and 1 rank
(resharded, with and without ``verify_partial``) and into one process without a process group;
``tenfold convert`` consolidates it into a ``.safetensors`` that ``safetensors`` opens; a rank
killed mid-save leaves the previous checkpoint loadable and the new path absent."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from _run import single_process, skip_without_distributed, torchrun

skip_without_distributed()

import _worker  # noqa: E402
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

import tenfold  # noqa: E402
import tenfold.convert  # noqa: E402
import tenfold.torch  # noqa: E402
from tenfold.cli import main as cli  # noqa: E402
from tenfold.errors import EncodeError, FormatError  # noqa: E402
from tenfold.interop import dcp_files  # noqa: E402
from tenfold.interop.dcp_files import read_document  # noqa: E402
from tenfold.torch import dcp as tdcp  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("dcp-save")
    for mode in ("save", "asave"):
        got = torchrun(2, mode, str(out))
        assert got.returncode == 0, got.stdout[-6000:]
    return out


def _tensors(value):
    return {k: v for k, v in value.items() if isinstance(v, torch.Tensor)}


def test_two_ranks_save_and_async_save_commit_complete_directories(saved):
    assert sorted(p.name for p in saved.glob("*save-*.ok")) == [
        "asave-2-0.ok",
        "asave-2-1.ok",
        "save-2-0.ok",
        "save-2-1.ok",
    ]
    _no_gloo_thread_left(saved, "save", 2)
    # after async_save, once torch's DTensor sharding caches are cleared (see the worker)
    _no_gloo_thread_left(saved, "asave", 2)
    for name in ("sync", "async"):
        files = sorted(os.listdir(saved / name))
        assert files == ["dcp-metadata.json", "dcp-rank-00000.zt", "dcp-rank-00001.zt"]
    assert not [p for p in os.listdir(saved) if p.startswith(".")]  # no staging left
    assert tenfold.detect(saved / "sync") == "torch_dcp"


@pytest.mark.parametrize(("nproc", "which"), [(3, "sync"), (1, "async")])
def test_loads_exactly_into_another_world_size(saved, nproc, which):
    got = torchrun(nproc, "load", str(saved), str(saved / which))
    assert got.returncode == 0, got.stdout[-6000:]
    assert len(list(saved.glob(f"load-{nproc}-*.ok"))) == nproc
    _no_gloo_thread_left(saved, "load", nproc)


def _no_gloo_thread_left(out, mode, nproc):
    """After ``destroy_process_group()`` no rank has a gloo thread left: neither tenfold's
    storage nor the worker holds the group (a thread that outlives it can abort the process
    at exit)."""
    counts = [int((out / f"{mode}-{nproc}-{r}.gloo").read_text()) for r in range(nproc)]
    if sys.platform.startswith("linux"):
        assert counts == [0] * nproc, counts


def test_loads_in_one_process_without_a_process_group(saved):
    want = _worker.expected()
    state = {
        "model": {k: torch.zeros_like(v) for k, v in _worker.full_state()["model"].items()},
        "optim": _zeros(_worker.full_state()["optim"]),
        "epoch": 0,
    }
    with single_process():
        dcp.load(state, storage_reader=tdcp.TenfoldStorageReader(saved / "sync"), no_dist=True)
    _worker.check(state)
    assert state["epoch"] == want["epoch"] == 7


def _zeros(v):
    if isinstance(v, dict):
        return {k: _zeros(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_zeros(x) for x in v]
    return torch.zeros_like(v) if isinstance(v, torch.Tensor) else v


def test_consolidated_safetensors_opens_in_safetensors_and_equals_the_state(saved, tmp_path):
    safetensors = pytest.importorskip("safetensors")
    out = tmp_path / "model.safetensors"
    with pytest.raises(EncodeError, match="non-tensor entries pickled by DCP"):
        tenfold.convert.convert(saved / "sync", out)
    assert cli(["convert", str(saved / "sync"), str(out), "--no-metadata", "-q"]) == 0
    want = _tensors(_worker.expected())
    with safetensors.safe_open(str(out), framework="pt") as f:
        assert sorted(f.keys()) == sorted(want)
        for k, v in want.items():
            got = f.get_tensor(k)
            assert got.dtype == v.dtype and got.shape == v.shape, k
            assert torch.equal(got, v), k
    shards = tmp_path / "sh.zt"
    assert (
        cli(
            [
                "convert",
                str(saved / "async"),
                str(shards),
                "--no-metadata",
                "--max-shard-size",
                "600B",
                "-q",
            ]
        )
        == 0
    )
    index = tmp_path / "sh.zt.index.json"
    assert index.exists()
    back = tenfold.torch.load_file(index)
    assert sorted(back) == sorted(want) and all(torch.equal(back[k], want[k]) for k in want)


@pytest.mark.parametrize("verify_partial", [True, False])
def test_dcp_stores_shard_1_chunks_at_later_offsets_and_slices_read_them(saved, verify_partial):
    # Shard(1) of model.proj (8, 6) over 2 ranks: DCP's chunks lie at [0, 0] and [0, 3]
    doc = read_document(saved / "sync")
    chunks = doc.entries["model.proj"].chunks
    assert sorted((tuple(c.offsets), tuple(c.sizes)) for c in chunks) == [
        ((0, 0), (8, 3)),
        ((0, 3), (8, 3)),
    ]
    want = _worker.expected()["model.proj"].numpy()
    indices = [(slice(1, 7), slice(2, 5)), (Ellipsis, 4), (3, slice(None, None, -1)), (5, 2)]
    with tenfold.open(saved / "sync", verify_partial=verify_partial) as r:
        for index in indices:
            got = r.read("model.proj", index)
            assert np.asarray(got).tobytes() == np.asarray(want[index]).tobytes(), index


def test_rank_killed_mid_save_leaves_the_previous_checkpoint_and_no_new_one(tmp_path, capsys):
    got = torchrun(2, "kill", str(tmp_path), timeout=240)
    assert got.returncode != 0, got.stdout[-4000:]
    assert (tmp_path / "prev").is_dir()
    assert not (tmp_path / "next").exists()
    staged = [p for p in tmp_path.iterdir() if p.name.startswith(".next.tenfold-")]
    assert len(staged) == 1, got.stdout[-4000:]  # the dead save's staging directory
    assert "dcp-rank-00000.zt" in os.listdir(staged[0])  # rank 0 had written its file
    assert "exitcode  : 3" in got.stdout  # rank 1 died in its write (os._exit(3))
    for p in staged:  # what the dead save left is refused, never read
        with pytest.raises(FormatError, match="incomplete"):
            tdcp.TenfoldStorageReader(p).read_metadata()
    state = {
        "model": {k: torch.zeros_like(v) for k, v in _worker.full_state()["model"].items()},
        "optim": _zeros(_worker.full_state()["optim"]),
        "epoch": 0,
    }
    with single_process():
        dcp.load(state, storage_reader=tdcp.TenfoldStorageReader(tmp_path / "prev"), no_dist=True)
    _worker.check(state)
    # the job is gone (torchrun ended every rank): its attempt is dead, and the retry's
    # commit to the same path removes what it left; before, it stayed forever
    assert cli(["verify", str(staged[0])]) == 1  # incomplete: the staging of a dead save
    assert "of a save that died" in capsys.readouterr().out
    report = dcp_files.verify(tmp_path / "next")  # no checkpoint there; what is beside it
    assert [f.status for f in report.findings] == ["warning", "error"]
    assert staged[0].name in report.findings[0].obj
    with single_process():
        dcp.save(state, storage_writer=tdcp.TenfoldStorageWriter(tmp_path / "next"), no_dist=True)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert sorted(os.listdir(tmp_path / "next"))[0] == "dcp-metadata.json"

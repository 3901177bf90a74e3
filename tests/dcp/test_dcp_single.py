"""tenfold's DCP storage in one process (``no_dist=True``, issue #26): what is stored
(no pickle but DCP's own bytes for non-tensor entries), the commit (refuse or replace an
existing path; a failed save leaves the previous checkpoint as it was), damage named by rank,
file and tensor, and a single file turned into a checkpoint DCP loads."""

from __future__ import annotations

import os
import pickle

import pytest
from _run import single_process, skip_without_distributed

skip_without_distributed()

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import tenfold  # noqa: E402
import tenfold.torch  # noqa: E402
from tenfold.errors import EncodeError, IntegrityError  # noqa: E402
from tenfold.interop.dcp_files import META_NAME, read_document  # noqa: E402
from tenfold.torch import dcp as tdcp  # noqa: E402


def _state(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "model": {
            "w": torch.randn(6, 4, generator=g),
            "b": torch.randn(5, generator=g).bfloat16(),
            "scale": torch.tensor(2.5 + seed),
            "mask": torch.tensor([True, False, True]),
        },
        "epoch": 7 + seed,
    }


def _zeros(sd):
    return {"model": {k: torch.zeros_like(v) for k, v in sd["model"].items()}, "epoch": 0}


def _save(sd, path, **kw):
    with single_process():
        dcp.save(sd, storage_writer=tdcp.TenfoldStorageWriter(path, **kw), no_dist=True)


def _load(path, like, **kw):
    out = _zeros(like)
    with single_process():
        dcp.load(out, storage_reader=tdcp.TenfoldStorageReader(path, **kw), no_dist=True)
    return out


def _failure(exc):
    """The one rank's error DCP wraps (a ``CheckpointException`` is a ``BaseException``)."""
    ((err, _trace),) = exc.failures.values()
    return err


def _same(a, b):
    assert a["epoch"] == b["epoch"]
    for k, v in a["model"].items():
        assert b["model"][k].dtype == v.dtype and torch.equal(b["model"][k], v), k


@pytest.mark.parametrize("file_format", [None, "safetensors"])
def test_round_trip_in_one_process(tmp_path, file_format):
    sd = _state()
    _save(sd, tmp_path / "ck", file_format=file_format)
    _same(sd, _load(tmp_path / "ck", sd))
    doc = read_document(tmp_path / "ck")
    assert doc.entries["epoch"].kind == "bytes" and doc.entries["model.b"].dtype == "bfloat16"
    assert tdcp.TenfoldStorageReader.validate_checkpoint_id(tmp_path / "ck")
    assert not tdcp.TenfoldStorageReader.validate_checkpoint_id(tmp_path)


def test_metadata_and_tensors_are_read_without_unpickling(tmp_path, monkeypatch):
    sd = {"model": _state()["model"]}  # tensors only: no bytes DCP would unpickle itself
    _save(sd, tmp_path / "ck")

    def refuse(*a, **k):
        raise AssertionError("unpickled")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    out = {"model": {k: torch.zeros_like(v) for k, v in sd["model"].items()}}
    with single_process():
        dcp.load(out, storage_reader=tdcp.TenfoldStorageReader(tmp_path / "ck"), no_dist=True)
    assert all(torch.equal(out["model"][k], v) for k, v in sd["model"].items())


def test_an_existing_checkpoint_is_refused_before_anything_is_written(tmp_path):
    _save(_state(0), tmp_path / "ck")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(CheckpointException) as e:
        _save(_state(1), tmp_path / "ck")
    err = _failure(e.value)
    assert isinstance(err, EncodeError) and "exists; pass overwrite=True" in str(err)
    assert sorted(os.listdir(tmp_path)) == before  # no staging directory either
    _same(_state(0), _load(tmp_path / "ck", _state(0)))


def test_overwrite_replaces_the_checkpoint_whole(tmp_path):
    _save(_state(0), tmp_path / "ck")
    _save(_state(1), tmp_path / "ck", overwrite=True)
    _same(_state(1), _load(tmp_path / "ck", _state(1)))
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # neither the old one nor the staging left


class _Failing(tdcp.TenfoldStorageWriter):
    """Fails in the middle of its rank's write (after the first item)."""

    def write_data(self, plan, planner):
        resolve, seen = planner.resolve_data, []

        def failing(item):
            if seen:
                raise OSError(28, "No space left on device (injected)")
            seen.append(item)
            return resolve(item)

        planner.resolve_data = failing
        return super().write_data(plan, planner)


def test_a_failed_save_over_a_checkpoint_leaves_it_as_it_was(tmp_path):
    _save(_state(0), tmp_path / "ck")
    with single_process(), pytest.raises(CheckpointException) as e:
        dcp.save(_state(1), storage_writer=_Failing(tmp_path / "ck", overwrite=True), no_dist=True)
    assert "injected" in str(_failure(e.value))
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # the failed rank's staging is removed
    _same(_state(0), _load(tmp_path / "ck", _state(0)))
    assert not (tmp_path / "ck" / META_NAME).is_symlink()


def test_a_corrupt_chunk_is_an_error_naming_rank_file_and_tensor(tmp_path):
    _save(_state(), tmp_path / "ck")
    c = read_document(tmp_path / "ck").entries["model.w"].chunks[0]
    with open(tmp_path / "ck" / c.file, "r+b") as f:
        f.seek(c.byte_range[0] + 3)
        f.write(b"\xff")
    with pytest.raises(CheckpointException) as e:
        _load(tmp_path / "ck", _state())
    err = _failure(e.value)
    assert isinstance(err, IntegrityError) and "digest" in str(err)
    assert "dcp: rank 0 file 'dcp-rank-00000.zt' tensor 'model.w'" in str(err)
    with pytest.raises(IntegrityError):
        tenfold.load(tmp_path / "ck")


def test_from_file_is_a_checkpoint_dcp_loads(tmp_path):
    sd = _state()["model"]
    tenfold.torch.save_file(sd, tmp_path / "m.safetensors")
    tdcp.from_file(tmp_path / "m.safetensors", tmp_path / "ck", world_size=2)
    out = {k: torch.zeros_like(v) for k, v in sd.items()}
    with single_process():
        dcp.load(out, storage_reader=tdcp.TenfoldStorageReader(tmp_path / "ck"), no_dist=True)
    assert all(torch.equal(out[k], v) for k, v in sd.items())
    assert len(read_document(tmp_path / "ck").entries["w"].chunks) == 2


def test_targets_read_straight_into_or_copied_into_load_alike(tmp_path):
    """A contiguous CPU target is filled straight from the rank file (digest checked in the
    same pass); a non-contiguous one (a transposed view) is read then copied: both exact."""
    sd = _state()
    _save(sd, tmp_path / "ck")
    out = _zeros(sd)
    out["model"]["w"] = torch.zeros(4, 6).t()  # (6, 4), not contiguous
    with single_process():
        dcp.load(out, storage_reader=tdcp.TenfoldStorageReader(tmp_path / "ck"), no_dist=True)
    assert not out["model"]["w"].is_contiguous()
    _same(sd, out)


def _numpy_of(t):
    """The NumPy array of CPU tensor ``t`` (bfloat16 through ml_dtypes), read-only as a
    rank file's mapped bytes are."""
    import ml_dtypes

    arr = (
        t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        if t.dtype == torch.bfloat16
        else t.numpy()
    )
    arr = arr.copy()
    arr.setflags(write=False)
    return arr


@pytest.mark.parametrize("dtype", [torch.complex128, torch.complex64, torch.bfloat16, torch.bool])
def test_the_fallback_copy_fills_strided_targets_of_every_element_size(dtype):
    """``_copy_into`` (for a target the one-pass read cannot fill) copies into any strides
    and storage offset for every element size: complex128 (16 bytes) had no same-size
    integer view before and failed."""
    g = torch.Generator().manual_seed(5)
    want = torch.randn(6, 4, generator=g, dtype=torch.float32 if dtype == torch.bool else None)
    want = (want > 0) if dtype == torch.bool else torch.randn(6, 4, generator=g).to(dtype)
    if dtype.is_complex:
        want = want + 1j * torch.randn(6, 4, generator=g).to(dtype)
    transposed = torch.zeros(4, 6, dtype=dtype).t()
    offset = torch.zeros(3, 6, 5, dtype=dtype)[1, :, 1:]  # inside a larger storage
    for target in (transposed, offset):
        for src in (_numpy_of(want), _numpy_of(want.t().contiguous()).T):  # C and F order
            target.zero_()
            tdcp._copy_into(target, src)
            assert not target.is_contiguous() and torch.equal(target, want)
    assert torch.count_nonzero(torch.zeros(3, 6, 5, dtype=dtype)) == 0


@pytest.mark.parametrize("dtype", [torch.complex64, torch.bfloat16])
def test_strided_targets_of_complex_and_bf16_load_exactly(tmp_path, dtype):
    g = torch.Generator().manual_seed(6)
    sd = {"x": torch.randn(6, 4, generator=g).to(dtype), "y": torch.randn(5, generator=g).to(dtype)}
    with single_process():
        dcp.save(sd, storage_writer=tdcp.TenfoldStorageWriter(tmp_path / "ck"), no_dist=True)
    out = {"x": torch.zeros(4, 6, dtype=dtype).t(), "y": torch.zeros(2, 5, dtype=dtype)[1]}
    base = out["y"]._base
    with single_process():
        dcp.load(out, storage_reader=tdcp.TenfoldStorageReader(tmp_path / "ck"), no_dist=True)
    assert torch.equal(out["x"], sd["x"]) and torch.equal(out["y"], sd["y"])
    assert torch.count_nonzero(base[0]) == 0  # nothing written outside the target

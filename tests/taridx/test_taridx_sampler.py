"""Issue 14 item 1: resumable distributed sampling (EpochSampler state, torch.distributed, a
real ``torchrun --nproc-per-node 2`` job on CPU with gloo, stopped and resumed)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_taridx_members import _fold

import tenfold
import tenfold.taridx as tx
from tenfold.errors import FormatError, IntegrityError


def test_plain_order_unchanged():
    """block=1 (the default) is the order of before: one permutation per (seed, epoch)."""
    for n, w in ((103, 4), (10, 3), (7, 1)):
        perm = np.random.default_rng([5, 2]).permutation(n)
        pad = (-n) % w
        full = np.concatenate([perm, perm[:pad]])
        for r in range(w):
            assert tx.epoch_order(n, seed=5, epoch=2, rank=r, world_size=w).tolist() == (
                full[r::w].tolist()
            )
    s = tx.EpochSampler(10, seed=1, rank=1, world_size=3)
    assert list(s) == tx.epoch_order(10, seed=1, rank=1, world_size=3).tolist()


@pytest.mark.parametrize("n", [0, 1, 5, 64, 101])
@pytest.mark.parametrize("w", [1, 2, 3])
@pytest.mark.parametrize("block", [1, 4, 16])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_partition_the_epoch(n, w, block, drop_last):
    parts = [
        tx.epoch_order(n, seed=9, epoch=1, rank=r, world_size=w, block=block, drop_last=drop_last)
        for r in range(w)
    ]
    lens = {len(p) for p in parts}
    per = n // w if drop_last else -(-n // w)
    assert lens == {per} and all(
        len(tx.EpochSampler(n, rank=r, world_size=w, drop_last=drop_last, block=block)) == per
        for r in range(w)
    )
    seen = np.concatenate(parts).tolist() if parts else []
    if drop_last:
        assert len(set(seen)) == len(seen) == per * w  # nothing twice
    else:
        assert set(seen) == set(range(n))  # everything, padding repeats < w samples
        assert len(seen) - len(set(seen)) == per * w - n


def test_block_locality_runs():
    order = tx.epoch_order(64, seed=1, block=8)
    runs = order.reshape(8, 8)
    for run in runs:  # each run is 8 neighbouring sample numbers, shuffled within
        assert sorted(run.tolist()) == list(range(run.min(), run.min() + 8))
        assert run.min() % 8 == 0
    assert order.tolist() != list(range(64))
    with pytest.raises(ValueError, match="block"):
        tx.epoch_order(5, block=0)


def test_state_resumes_exactly():
    s = tx.EpochSampler(50, seed=4, rank=1, world_size=2)
    s.set_epoch(3)
    full = list(s)
    it = iter(s)
    head = [next(it) for _ in range(7)]
    state = s.state_dict()
    assert state["position"] == 7 and state["epoch"] == 3 and state["rank"] == 1
    assert json.loads(json.dumps(state)) == state  # plain JSON
    t = tx.EpochSampler(50, seed=4, rank=1, world_size=2)
    t.load_state_dict(state)
    t.set_epoch(3)  # the training loop's call for the resumed epoch keeps the position
    assert head + list(t) == full
    assert list(t) == full  # the next pass is the whole epoch again
    t.load_state_dict(state)
    t.set_epoch(4)  # another epoch: from its start
    assert len(list(t)) == 25 and t.position == 25
    done = t.state_dict()
    u = tx.EpochSampler(50, seed=4, rank=1, world_size=2)
    u.load_state_dict(done)
    assert list(u) == []  # the epoch was finished


def test_state_mismatch_refused(tmp_path):
    _fold(tmp_path, shards=(0,), per=6)
    tx.build(tmp_path, "t", show_progress=False)
    ds = tx.Dataset(tmp_path, "t")
    state = tx.EpochSampler(ds, seed=1, rank=0, world_size=2).state_dict()
    assert len(state["fingerprint"]) == 32
    for kw, field in (
        ({"seed": 2}, "seed"),
        ({"world_size": 3}, "world_size"),
        ({"rank": 1}, "rank"),
        ({"block": 4}, "block"),
        ({"shuffle": False}, "shuffle"),
        ({"drop_last": True}, "drop_last"),
    ):
        args = {"seed": 1, "rank": 0, "world_size": 2, **kw}
        with pytest.raises(IntegrityError, match=rf"taridx: sampler state: {field}: "):
            tx.EpochSampler(ds, **args).load_state_dict(state)
    other = tmp_path / "o"
    other.mkdir()
    _fold(other, shards=(0, 1), per=3)  # also 6 samples, other stems
    tx.build(other, "t", show_progress=False)
    with pytest.raises(IntegrityError, match="fingerprint: saved for another dataset"):
        tx.EpochSampler(tx.Dataset(other, "t"), seed=1, rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(IntegrityError, match="n: saved for another number"):
        tx.EpochSampler(7, seed=1, rank=0, world_size=2).load_state_dict(
            tx.EpochSampler(6, seed=1, rank=0, world_size=2).state_dict() | {"fingerprint": "n=7"}
        )
    s = tx.EpochSampler(ds, seed=1, rank=0, world_size=2)
    for bad in ({**state, "position": 99}, {**state, "epoch": "1"}, {"version": 1}, [1]):
        with pytest.raises(FormatError):
            s.load_state_dict(bad)  # type: ignore[arg-type]
    with pytest.raises(FormatError, match="version"):
        s.load_state_dict({**state, "version": 2})


def _sample_id(sample):
    return bytes(sample["jpg"][:1])[0]  # _fold's payload bytes: 16 * shard + member


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11
def test_stateful_dataloader_resume(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed")
    sdl = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed")
    _fold(tmp_path, shards=(0, 1), per=9)
    tx.build(tmp_path, "t", show_progress=False)

    def collate(batch):
        return [_sample_id(s) for s in batch]

    for workers in (0, 2):
        ds = tx.Dataset(tmp_path, "t")
        s = tx.EpochSampler(ds, seed=2, rank=0, world_size=1)
        s.set_epoch(1)
        dl = sdl.StatefulDataLoader(
            ds, batch_size=4, sampler=s, collate_fn=collate, num_workers=workers
        )
        full = list(dl)
        assert sorted(x for b in full for x in b) == sorted(
            16 * k + j for k in (0, 1) for j in range(9)
        )
        it = iter(dl)
        head = [next(it), next(it)]
        state = dl.state_dict()
        del it
        ds2 = tx.Dataset(tmp_path, "t")
        s2 = tx.EpochSampler(ds2, seed=2, rank=0, world_size=1)
        s2.set_epoch(1)
        dl2 = sdl.StatefulDataLoader(
            ds2, batch_size=4, sampler=s2, collate_fn=collate, num_workers=workers
        )
        dl2.load_state_dict(state)
        assert head + list(dl2) == full, workers


# -- a real torchrun job -------------------------------------------------------------------------
_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch.distributed as dist
    from torchdata.stateful_dataloader import StatefulDataLoader
    import tenfold.taridx as tx

    root, mode, out, stop_after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = tx.Dataset(root, "t")
    sampler = tx.EpochSampler(ds, seed=11)  # rank and world size from torch.distributed
    assert (sampler.rank, sampler.world_size) == (rank, 2), (sampler.rank, sampler.world_size)
    dl = StatefulDataLoader(
        ds, batch_size=3, sampler=sampler, collate_fn=lambda b: [bytes(s["jpg"][:1])[0] for s in b]
    )
    seen = {0: [], 1: [], 2: []}
    first = 0
    if mode == "resume":
        with open(f"{out}/state{rank}.json") as f:
            saved = json.load(f)
        first = saved["epoch"]
        dl.load_state_dict(saved["loader"])
    for epoch in range(first, 3):
        sampler.set_epoch(epoch)
        for b, batch in enumerate(dl):
            seen[epoch] += batch
            if mode == "stop" and epoch == 1 and b + 1 == stop_after:
                with open(f"{out}/state{rank}.json", "w") as f:
                    json.dump({"epoch": epoch, "loader": dl.state_dict()}, f)
                break
        if mode == "stop" and epoch == 1:
            break
    with open(f"{out}/{mode}{rank}.json", "w") as f:
        json.dump(seen, f)
    dist.barrier()
    dist.destroy_process_group()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(script, args, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    env["TMPDIR"] = str(tmp_path)  # torchrun's torchelastic_* directories, removed with it
    env["PYTHONPATH"] = os.pathsep.join([str(Path(tenfold.__file__).parents[1])] + sys.path)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        str(script),
        *args,
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_torchrun_two_ranks_stop_and_resume(tmp_path):
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    root = tmp_path / "data"
    root.mkdir()
    _fold(root, shards=(0, 1), per=11)  # 22 samples: 11 per rank, batches of 3, 3, 3, 2
    tx.build(root, "t", show_progress=False)
    everything = sorted(16 * k + j for k in (0, 1) for j in range(11))
    script = tmp_path / "job.py"
    script.write_text(_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    _torchrun(script, [str(root), "full", str(out), "0"], tmp_path)
    _torchrun(script, [str(root), "stop", str(out), "2"], tmp_path)  # a rerun, stopped
    _torchrun(script, [str(root), "resume", str(out), "0"], tmp_path)
    runs = {
        (mode, r): {int(k): v for k, v in json.loads((out / f"{mode}{r}.json").read_text()).items()}
        for mode in ("full", "stop", "resume")
        for r in (0, 1)
    }
    for epoch in (0, 1, 2):
        per_rank = [runs["full", r][epoch] for r in (0, 1)]
        assert sorted(per_rank[0] + per_rank[1]) == everything  # once each, across ranks
        assert len(per_rank[0]) == len(per_rank[1]) == 11
    assert runs["full", 0][0] != runs["full", 0][1]  # reshuffled per epoch
    for r in (0, 1):
        full, stop, resume = runs["full", r], runs["stop", r], runs["resume", r]
        assert stop[0] == full[0]  # identical order on a rerun
        assert stop[1] == full[1][:6]  # two batches of three, then stopped
        assert resume[0] == [] and resume[1] == full[1][6:]  # exactly the rest
        assert resume[2] == full[2]

"""``torch.distributed.checkpoint`` storage cases for scripts/bench_peers.py: tenfold's
:class:`~tenfold.interop.dcp.TenfoldStorageWriter` / ``TenfoldStorageReader`` against DCP's
``FileSystemWriter`` / ``FileSystemReader`` and, where the installed torch has them, its
``HuggingFaceStorageWriter`` / ``HuggingFaceStorageReader``, on the same state dict and world
size.

How it runs: ``run()`` starts ``torchrun`` (2 CPU ranks, gloo, rendezvous on 127.0.0.1 at a
free port) on this file with ``--worker``; each rank builds the same state, float32 DTensors
sharded on dimension 0 over the 2 ranks (1 GiB in all; ``--quick``: 64 MiB), and every storage
saves it to a fresh directory and loads it back into zeros, the storages in turns (each round
starting with the next one), 5 rounds (``--quick``: 2). A time is the slowest rank's, between
two barriers. fsync on every side (tenfold's and DCP's defaults), page cache warm for loads
(each load reads what was just written). Rank 0 writes the times as JSON, which ``run()``
turns into rows: the median of the rounds, their range and the load average in the note.
To run only these cases::

    python scripts/bench_peers.py --format dcp [--quick]

The machine that runs the test suite is shared and noisy: no figures from it are recorded.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(os.path.dirname(os.path.dirname(HERE)), "lib")


def _storages(dcp, tdcp):  # type: ignore[no-untyped-def]
    out = {
        "tenfold": (lambda p: tdcp.TenfoldStorageWriter(p), lambda p: tdcp.TenfoldStorageReader(p)),
        "FileSystemWriter": (lambda p: dcp.FileSystemWriter(p), lambda p: dcp.FileSystemReader(p)),
    }
    if hasattr(dcp, "HuggingFaceStorageWriter"):
        out["HuggingFaceStorage"] = (
            lambda p: dcp.HuggingFaceStorageWriter(p, save_distributed=True),
            lambda p: dcp.HuggingFaceStorageReader(p),
        )
    return out


def _timed(dist, fn) -> float:  # type: ignore[no-untyped-def]
    import torch

    dist.barrier()
    t = time.perf_counter()
    fn()
    dist.barrier()
    took = torch.tensor([time.perf_counter() - t], dtype=torch.float64)
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    return float(took.item())


def _one(dist, dcp, mesh, state, full, writer, reader, got) -> None:  # type: ignore[no-untyped-def]
    """One save and one load of ``state`` with one storage, timed into ``got``."""
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor

    got["save"].append(_timed(dist, lambda: dcp.save(state, storage_writer=writer)))
    into = {k: distribute_tensor(torch.zeros_like(v), mesh, [Shard(0)]) for k, v in full.items()}
    got["load"].append(_timed(dist, lambda: dcp.load(into, storage_reader=reader)))
    # each rank its own rows: full_tensor() (a functional collective) would keep the group's
    # gloo threads past destroy_process_group() and the rank could abort at exit (docs/dcp.md)
    rank, world = dist.get_rank(), dist.get_world_size()
    ok = all(torch.equal(into[k].to_local(), full[k].chunk(world)[rank]) for k in full)
    wrong = torch.tensor([0 if ok else 1])
    dist.all_reduce(wrong, op=dist.ReduceOp.MAX)  # rank 0, which reports, hears of any rank's
    assert not wrong.item(), "a rank loaded other values than were saved"


def worker(out_dir: str, total: int, rounds: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from tenfold.torch import dcp as tdcp

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    n = 16
    rows = total // n // (1024 * 4)
    g = torch.Generator().manual_seed(0)
    full = {f"layer{i}.weight": torch.randn(rows, 1024, generator=g) for i in range(n)}
    state = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full.items()}
    times: dict[str, dict[str, list[float]]] = {}
    for r in range(rounds):
        storages = list(_storages(dcp, tdcp).items())
        k = r % len(storages)  # each round starts with the next storage: none always goes first
        for name, (writer, reader) in storages[k:] + storages[:k]:
            path = os.path.join(out_dir, name)
            if dist.get_rank() == 0 and os.path.exists(path):
                shutil.rmtree(path)
            got = times.setdefault(name, {"save": [], "load": []})
            try:
                _one(dist, dcp, mesh, state, full, writer(path), reader(path), got)
            except Exception as exc:  # a peer this torch cannot run: reported, not fatal
                got["error"] = [f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"]  # type: ignore[list-item]
    if dist.get_rank() == 0:
        with open(os.path.join(out_dir, "times.json"), "w") as f:
            loadavg = (
                " ".join(open("/proc/loadavg").read().split()[:3])
                if os.path.exists("/proc/loadavg")
                else "?"
            )
            nbytes = sum(v.numel() * 4 for v in full.values())
            json.dump({"bytes": nbytes, "times": times, "loadavg": loadavg}, f)
    del state, mesh  # nothing may hold the group at destroy_process_group()
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(quick: bool = False) -> list[dict]:
    from _timing import row

    try:
        import torch.distributed as dist
    except ImportError:
        return [row("dcp: torch not installed", 0.0, note="skipped")]
    if not (dist.is_available() and dist.is_gloo_available()):
        return [row("dcp: torch.distributed with gloo not available", 0.0, note="skipped")]
    total, rounds = (64 * MiB, 2) if quick else (1024 * MiB, 5)
    tmp = tempfile.mkdtemp(prefix="tenfold-bench-dcp-")
    try:
        env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            GLOO_SOCKET_IFNAME="lo",
            PYTHONPATH=os.pathsep.join(filter(None, [LIB, os.environ.get("PYTHONPATH")])),
        )
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "--nnodes=1",
            "--master-addr=127.0.0.1",
            f"--master-port={_free_port()}",
            __file__,
            "--worker",
            tmp,
            str(total),
            str(rounds),
        ]
        subprocess.run(cmd, env=env, check=True, timeout=3600)
        with open(os.path.join(tmp, "times.json")) as f:
            got = json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = f"{got['bytes'] / MiB:.0f} MiB"
    load = f"load {got.get('loadavg', '?')}"
    ours = got["times"].pop("tenfold")
    rows = []
    for op in ("save", "load"):
        for peer, t in got["times"].items():
            note = "; ".join(t.get("error", []))
            peer_value = statistics.median(t[op]) if t[op] and not note else None
            spread = (
                f"tenfold {min(ours[op]):.3g}-{max(ours[op]):.3g} s, "
                f"{peer} {min(t[op]):.3g}-{max(t[op]):.3g} s"
                if peer_value is not None
                else ""
            )
            rows.append(
                row(
                    f"dcp {op}, 2 ranks, {size}",
                    statistics.median(ours[op]),
                    peer,
                    peer_value,
                    target=">= 1.5x" if peer == "FileSystemWriter" else ">= 1x",
                    note=note
                    or f"fsync on both sides; median of {len(ours[op])} rounds ({spread}); {load}",
                )
            )
    return rows


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))

"""What each rank runs under ``torchrun`` for tests/dcp/test_dcp_torchrun.py (CPU, gloo).

``python -m torch.distributed.run --nproc-per-node N _worker.py MODE DIR [CKPT]``:

* ``save``: N ranks save the state of :func:`state` (DTensors sharded over a 1-D CPU mesh,
  real Adam state, 0-d and bfloat16 tensors, non-tensor entries) to ``DIR/sync`` with
  ``dcp.save``; ``asave``: the same to ``DIR/async`` with ``dcp.async_save``;
* ``load``: N ranks load ``CKPT`` into the same state sharded for N ranks (zeros first), with
  ``verify_partial`` on and off, and check every value against :func:`expected`;
* ``kill``: N ranks save ``DIR/prev``, then start ``DIR/next`` and rank 1 dies (``os._exit``)
  after resolving its first item.

Each rank writes ``DIR/<mode>-<world>-<rank>.ok`` when it finished without error, and
``DIR/<mode>-<world>-<rank>.gloo``: how many gloo threads it has left once the process group
is destroyed (see :func:`gloo_threads`).
"""

from __future__ import annotations

import gc
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from tenfold.torch import dcp as tdcp

#: global shapes (independent of the world size) and how each is sharded
SPECS = {
    "embed": ((12, 8), torch.float32, 0),
    "proj": ((8, 6), torch.float32, 1),
    "table": ((10, 4), torch.bfloat16, 0),
}


def full_params() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(26)
    return {n: torch.randn(shape, generator=g).to(dt) for n, (shape, dt, _) in SPECS.items()}


def full_state() -> dict:
    """The unsharded state: parameters, the state of one real Adam step (float32 params
    only: Adam's state of a bf16 parameter would be bf16 as well), 0-d tensors and plain
    Python values (which DCP pickles itself)."""
    params = full_params()
    fp = {n: torch.nn.Parameter(params[n].clone()) for n in ("embed", "proj")}
    opt = torch.optim.Adam(fp.values(), lr=0.01, betas=(0.9, 0.99))
    g = torch.Generator().manual_seed(7)
    for p in fp.values():
        p.grad = torch.randn(p.shape, generator=g)
    opt.step()
    ids = dict(zip(range(len(fp)), fp, strict=True))
    state = {ids[i]: dict(s) for i, s in opt.state_dict()["state"].items()}
    return {
        "model": {
            **{n: fp[n].detach().clone() for n in fp},
            "table": params["table"],
            "scale": torch.tensor(1.5),
            "count": torch.tensor(41, dtype=torch.int64),
        },
        "optim": {"state": state, "param_groups": [{"lr": 0.01, "betas": [0.9, 0.99]}]},
        "epoch": 7,
    }


def _dim(path: tuple[str, ...]) -> int | None:
    """The dimension a tensor at ``path`` is sharded on (None: a plain tensor)."""
    name = path[2] if path[0] == "optim" else path[1]
    spec = SPECS.get(name)
    if spec is None or path[-1] == "step":
        return None
    return spec[2]


def expected() -> dict:
    """``{flattened key: value}`` as DCP flattens the state (dots, list indexes)."""
    out: dict = {}

    def walk(v: object, path: tuple) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, (*path, str(k)))
        elif isinstance(v, list) and not all(isinstance(x, (int, float)) for x in v):
            for i, x in enumerate(v):
                walk(x, (*path, str(i)))
        else:
            out[".".join(path)] = v

    walk(full_state(), ())
    return out


def sharded(value: dict, mesh: object, zeros: bool = False) -> dict:
    """``value`` with each shardable tensor a DTensor over ``mesh`` (zeros when ``zeros``)."""

    def walk(v: object, path: tuple) -> object:
        if isinstance(v, dict):
            return {k: walk(x, (*path, str(k))) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, (*path, str(i))) for i, x in enumerate(v)]
        if not isinstance(v, torch.Tensor):
            return 0 if zeros and isinstance(v, int) else v
        t = torch.zeros_like(v) if zeros else v
        dim = _dim(path)
        return t.clone() if dim is None else distribute_tensor(t, mesh, [Shard(dim)])

    return walk(value, ())  # type: ignore[return-value]


def check(loaded: dict) -> None:
    """Every loaded value equals :func:`expected` exactly: a DTensor's local shard against
    that rank's part of the expected tensor (split as DTensor splits it). Not with
    ``full_tensor()``: a functional collective keeps the process group's gloo threads past
    ``destroy_process_group()`` (torch 2.13), and a process exiting while one of them
    releases a tensor aborts ("terminate called without an active exception")."""
    want = expected()
    flat: dict = {}

    def walk(v: object, path: tuple) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, (*path, str(k)))
        elif isinstance(v, list) and not all(isinstance(x, (int, float)) for x in v):
            for i, x in enumerate(v):
                walk(x, (*path, str(i)))
        else:
            flat[".".join(path)] = v

    walk(loaded, ())
    assert flat.keys() == want.keys(), (sorted(flat), sorted(want))
    for k, v in want.items():
        got = flat[k]
        if isinstance(v, torch.Tensor):
            assert got.dtype == v.dtype and got.shape == v.shape, (k, got.dtype, got.shape)
            if isinstance(got, DTensor):
                v = distribute_tensor(v, got.device_mesh, got.placements).to_local()
                got = got.to_local()
                assert got.shape == v.shape, (k, got.shape, v.shape)
            assert (
                torch.equal(got.view(torch.uint8), v.view(torch.uint8))
                if v.dim()
                else torch.equal(got, v)
            ), k
        else:
            assert got == v, (k, got, v)


def run(mode: str, out: str, world: int) -> None:
    """What ``mode`` does; the mesh and every DTensor are gone when it returns (a process
    group a live DeviceMesh holds keeps its threads past ``destroy_process_group()``)."""
    mesh = init_device_mesh("cpu", (world,))
    if mode == "save":
        dcp.save(
            sharded(full_state(), mesh),
            storage_writer=tdcp.TenfoldStorageWriter(os.path.join(out, "sync")),
        )
    elif mode == "asave":
        fut = dcp.async_save(
            sharded(full_state(), mesh),
            storage_writer=tdcp.TenfoldStorageWriter(os.path.join(out, "async")),
        )
        fut.result()
    elif mode == "load":
        for partial in (True, False):
            sd = sharded(full_state(), mesh, zeros=True)
            dcp.load(
                sd, storage_reader=tdcp.TenfoldStorageReader(sys.argv[3], verify_partial=partial)
            )
            check(sd)
    elif mode == "kill":
        dcp.save(
            sharded(full_state(), mesh),
            storage_writer=tdcp.TenfoldStorageWriter(os.path.join(out, "prev")),
        )
        dist.barrier()
        dcp.save(sharded(full_state(), mesh), storage_writer=_Dying(os.path.join(out, "next")))


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    run(mode, out, world)
    gc.collect()  # check()'s recursive walk closures are cycles that hold DTensors (the mesh)
    with open(os.path.join(out, f"{mode}-{world}-{rank}.ok"), "w") as f:
        f.write("ok")
    dist.barrier()
    if mode == "asave":
        release_dtensor_caches()
    dist.destroy_process_group()
    left = gloo_threads()
    with open(os.path.join(out, f"{mode}-{world}-{rank}.gloo"), "w") as f:
        f.write(str(left))
    if left > 0:
        # something still holds the group (the test fails on the count): finalizing the
        # interpreter with its threads running can abort the process, and everything this rank
        # had to do is done, so leave without finalizing
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def release_dtensor_caches() -> None:
    """Let go of the DeviceMesh that torch's DTensor sharding-propagation caches hold.

    dcp.async_save stages the state with DTensor operations on this thread; torch caches the
    sharding of each operation (its C++ fast-path cache), and the cached specs hold the mesh,
    whose groups then outlive ``destroy_process_group()`` and abort the process at exit (torch
    2.13: the cache is freed after the interpreter has begun to finalize). torch's debug module
    clears both caches (a private helper; the docs show the same line)."""
    from torch.distributed.tensor import debug

    clear = getattr(debug, "_clear_sharding_prop_cache", None)
    if clear is not None:  # (a private helper: a torch without it leaves the count to tell)
        clear()
    gc.collect()


def gloo_threads() -> int:
    """How many of this process's threads are gloo's (named ``pt_gloo_*`` by torch): none
    once nothing holds the destroyed process group, so none can outlive the interpreter;
    -1 where /proc/self/task is not there to tell."""
    tasks = "/proc/self/task"
    if not os.path.isdir(tasks):
        return -1
    n = 0
    for tid in os.listdir(tasks):
        try:
            with open(os.path.join(tasks, tid, "comm")) as f:
                n += f.read().startswith("pt_gloo")
        except OSError:  # the thread ended meanwhile
            pass
    return n


def _dying_writer() -> type:
    class Dying(tdcp.TenfoldStorageWriter):
        """Rank 1 dies after resolving its first item (its file half written)."""

        def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
            if plan.storage_data["rank"] == 1:
                resolve = planner.resolve_data

                def dying(item):  # type: ignore[no-untyped-def]
                    got = resolve(item)
                    if dying.n:
                        os._exit(3)
                    dying.n += 1
                    return got

                dying.n = 0
                planner.resolve_data = dying
            return super().write_data(plan, planner)

    return Dying


def _Dying(path: str) -> object:  # noqa: N802
    return _dying_writer()(path)


if __name__ == "__main__":
    main()

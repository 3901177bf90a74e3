"""``tenfold.torch.save_file`` against ``safetensors.torch.save_file`` for the same durability.

Data: a llama-like state dict of torch tensors, two bf16 for each float32, 1 GiB in about 200
tensors (``--quick``: 64 MiB), held in memory by both libraries. Each case writes a new file
(the destination is removed and ``os.sync()`` runs before every run, both untimed, so that no
run waits on the previous one's writeback), tenfold and safetensors in turns for a few rounds
so both see the same machine load; a row gives the best times, their ratio (how many times
faster tenfold is) and, in the note, the ratio of the medians and the one-minute load average
before and after.

* ``fsync=False``: tenfold writes a temporary file and renames it into place (atomic, no
  fsync); safetensors writes the file in place. Target: at least as fast (>= 1x).
* durable (tenfold's default): tenfold fsyncs the temporary file, renames it and fsyncs the
  directory; the peer is ``safetensors.torch.save_file`` followed by ``os.fsync`` of the file
  (which leaves the new name itself not yet durable). Target: within 1.2x (>= 0.83x).

``.zt`` carries a CRC-32C per tensor (tenfold's default); ``.safetensors`` has no checksum.
Every directory in ``TENFOLD_BENCH_DIRS`` (``:``-separated) is measured; the default is the
system's temporary directory and ``/dev/shm`` where it exists. ``TENFOLD_BENCH_SAVE_MIB`` and
``TENFOLD_BENCH_ROUNDS`` change the size and the number of rounds.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time

from _timing import median, row

TARGET_NOFSYNC = ">= 1x"
TARGET_DURABLE = ">= 0.83x (within 1.2x)"


def _dirs() -> list[str]:
    env = os.environ.get("TENFOLD_BENCH_DIRS")
    if env:
        return [d for d in env.split(":") if d]
    dirs = [tempfile.gettempdir()]
    if os.path.isdir("/dev/shm"):
        dirs.append("/dev/shm")
    return dirs


def state_dict(torch, total: int) -> dict:
    """Llama-like 2-D weights, float32 one in three and bf16 otherwise, ``total`` bytes in all."""
    gen = torch.Generator().manual_seed(0)
    out, size, i = {}, 0, 0
    while size < total:
        dtype = torch.float32 if i % 3 == 0 else torch.bfloat16
        rows = 256 if total < (256 << 20) else 1024
        t = torch.randn((rows, 1024 + 512 * (i % 4)), generator=gen, dtype=dtype)
        out[f"model.layers.{i // 8}.w{i % 8}"] = t
        size += t.numel() * t.element_size()
        i += 1
    return out


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _turns(cases: list, rounds: int) -> list[list[float]]:
    """Run each ``(function, destination)`` of ``cases`` in turns; the times of each."""
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(rounds):
        for (fn, dst), acc in zip(cases, times, strict=True):
            if os.path.exists(dst):
                os.unlink(dst)
            os.sync()
            gc.collect()
            t = time.perf_counter()
            fn(dst)
            acc.append(time.perf_counter() - t)
            os.unlink(dst)
    return times


def run(quick: bool) -> list[dict]:
    try:
        import safetensors.torch as st
        import torch
    except ImportError as exc:
        return [row("tenfold.torch.save_file", 0.0, note=f"skipped: {exc}")]
    import tenfold.torch as tt

    total = int(os.environ.get("TENFOLD_BENCH_SAVE_MIB", 64 if quick else 1024)) << 20
    rounds = int(os.environ.get("TENFOLD_BENCH_ROUNDS", 2 if quick else 5))
    tensors = state_dict(torch, total)
    size = f"{sum(t.numel() * t.element_size() for t in tensors.values()) / 2**30:.2f} GiB"
    n = len(tensors)

    def st_plain(p: str) -> None:
        st.save_file(tensors, p)

    def st_durable(p: str) -> None:
        st.save_file(tensors, p)
        _fsync_file(p)

    rows: list[dict] = []
    for where in _dirs():
        tmp = tempfile.mkdtemp(prefix="tenfold-bench-save-", dir=where)
        try:
            warm = {"w": torch.ones(4)}  # imports and first-call costs, untimed
            for suffix in (".zt", ".safetensors"):
                tt.save_file(warm, os.path.join(tmp, "warm" + suffix))
            st.save_file(warm, os.path.join(tmp, "warm.st"))
            peer_st = os.path.join(tmp, "peer.safetensors")
            for suffix, sums in ((".zt", "CRC-32C per tensor"), (".safetensors", "no checksum")):
                dst = os.path.join(tmp, "tenfold" + suffix)
                for durable in (False, True):
                    peer = st_durable if durable else st_plain

                    def ours(p: str, durable: bool = durable) -> None:
                        tt.save_file(tensors, p, fsync=durable)

                    load0 = os.getloadavg()[0]
                    ta, tb = _turns([(ours, dst), (peer, peer_st)], rounds)
                    load1 = os.getloadavg()[0]
                    mode = "durable (fsync)" if durable else "fsync=False"
                    rows.append(
                        row(
                            f"save_file {size}, {n} tensors, {suffix} {mode}, in {where}",
                            min(ta),
                            "safetensors.torch.save_file" + (" + os.fsync" if durable else ""),
                            min(tb),
                            target=TARGET_DURABLE if durable else TARGET_NOFSYNC,
                            note=f"{sums}; median ratio {median(tb) / median(ta):.2f}x, "
                            f"{rounds} alternating rounds, load {load0:.1f} -> {load1:.1f}",
                        )
                    )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return rows

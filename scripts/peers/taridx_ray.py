"""Ray Data over TARIDX (``tenfold.taridx.read_ray``) vs ``ray.data.read_webdataset``, on the
same shards, in the same run, on a local cluster started here (``num_cpus`` = the machine's).

Data: 200,000 samples x {jpg, cls} in 20 shards (payloads 100-1000 random bytes), written to
/tmp at run time and removed after; page cache warm. ``--quick``: 10,000 samples in 4 shards.
Each read is consumed whole (``iter_batches(batch_format="pyarrow")``, rows counted), with
Ray's defaults for the number of read tasks on both sides; ``read_webdataset`` with
``decoder=None`` so both return raw bytes. The cluster's start is not timed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from _timing import best, row
from taridx_loaders import make_fold

import tenfold.taridx as tx


def _count(ds) -> int:  # type: ignore[no-untyped-def]
    n = 0
    for b in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        n += b.num_rows
    return n


def run(quick: bool) -> list[dict]:
    try:
        import ray
        import ray.data
    except ImportError:
        return [row("Ray Data read", None, note='ray not installed (pip install "tenfold[ray]")')]
    n = 10_000 if quick else 200_000
    n_shards = 4 if quick else 20
    tmp = Path(tempfile.mkdtemp(prefix="tenfold-ray-bench-"))
    out = []
    try:
        make_fold(tmp, "r", n, n_shards, seed=7)
        tx.build(tmp, "r", show_progress=False)
        for p in tx.shard_paths(tmp, "r"):
            p.read_bytes()
        ray.init(
            num_cpus=os.cpu_count() or 1,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        try:
            got = {}

            def ours() -> None:
                got["ours"] = _count(tx.read_ray(tmp, "r"))

            def theirs() -> None:
                got["theirs"] = _count(
                    ray.data.read_webdataset(str(tmp), decoder=None, file_extensions=["tar"])
                )

            ours()  # warm the workers for both
            repeat = 1 if quick else 2
            t_ours = best(ours, repeat=repeat)
            t_theirs = best(theirs, repeat=repeat)
            assert got["ours"] == got["theirs"] == n, got
            out.append(
                row(
                    f"Ray Data read, {n:,} samples, {n_shards} shards",
                    n / t_ours,
                    "ray.data.read_webdataset",
                    n / t_theirs,
                    unit="samples/s",
                    higher_is_better=True,
                    target=">= 1x read_webdataset",
                    note=f"ray {ray.__version__}, {os.cpu_count()} CPUs, default read tasks",
                )
            )
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    import sys

    for r in run("--quick" in sys.argv):
        print(r)

"""TARIDX index build vs glzn's own scanner (the format's reference), same shard, same run.

glzn (github.com/dsb-ifi/glzn) is not on PyPI and its package imports torch, pydantic and more;
its index builder (``glzn/data/itar``: ``iTarDirectory(root).parse_folder(serialize=True)``)
needs only NumPy and xxhash. Point ``TENFOLD_GLZN_SRC`` at a checkout (the folder holding
``glzn/``) and that subpackage is loaded on its own; an installed ``glzn`` is used otherwise.
Without either the rows say so.

One ustar shard of 100,000 members (50,000 samples x {jpg, cls}, payloads 700-1500 bytes, as
``taridx.make_tar``; ``--quick``: 4,000), warm in the page cache. Rounds interleave tenfold with
the default thread count, tenfold with one thread and glzn; best of each. tenfold writes with
``fsync=False`` (glzn writes its index without fsync), and the two indexes must be identical
byte for byte (plain ustar: they are).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _timing import row

import tenfold.taridx as tx
from tenfold.core import parallel

GLZN_ENV = "TENFOLD_GLZN_SRC"


def load_glzn() -> Any | None:
    """glzn's ``itar.fold`` module, or None."""
    src = os.environ.get(GLZN_ENV)
    if src:
        d = Path(src) / "glzn" / "data" / "itar"
        if not (d / "fold.py").is_file():
            raise SystemExit(f"{GLZN_ENV}={src}: no glzn/data/itar/fold.py there")
        spec = importlib.util.spec_from_file_location(
            "_glzn_itar", d / "__init__.py", submodule_search_locations=[str(d)]
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_glzn_itar"] = mod
        spec.loader.exec_module(mod)
        return importlib.import_module("_glzn_itar.fold")
    try:
        return importlib.import_module("glzn.data.itar.fold")
    except Exception:  # noqa: BLE001 - not installed, or its package imports fail
        return None


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run(quick: bool) -> list[dict]:
    from taridx import make_tar

    n_samples = 2_000 if quick else 50_000
    rounds = 2 if quick else 5
    glzn = load_glzn()
    tmp = Path(tempfile.mkdtemp(prefix="tenfold-taridx-glzn-"))
    out: list[dict] = []
    saved = os.environ.get(parallel.THREADS_ENV)
    try:
        shard = tmp / "bench_0000.tar"
        make_tar(shard, n_samples)
        shard.read_bytes()
        members = 2 * n_samples
        nt = parallel.threads()
        ours = tmp / "bench.tf"

        def build(threads: int | None, fsync: bool = False) -> None:
            if threads is None:
                os.environ.pop(parallel.THREADS_ENV, None)
                if saved is not None:
                    os.environ[parallel.THREADS_ENV] = saved
            else:
                os.environ[parallel.THREADS_ENV] = str(threads)
            tx.build(tmp, "bench", out=ours, show_progress=False, fsync=fsync)

        def glzn_build() -> None:
            assert glzn is not None
            glzn.iTarDirectory(tmp).parse_folder(serialize=True, idxext="glzn")

        cases: dict[str, Any] = {
            "default": lambda: build(None),
            "one": lambda: build(1),
            "durable": lambda: build(None, True),
        }
        if glzn is not None:
            cases["glzn"] = glzn_build
        for fn in cases.values():
            fn()  # warm-up
        identical = glzn is not None and (ours.read_bytes() == (tmp / "bench.glzn").read_bytes())
        load0 = os.getloadavg()[0]
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(rounds):
            for k, fn in cases.items():
                times[k].append(_timed(fn))
        load1 = os.getloadavg()[0]
        best = {k: min(v) for k, v in times.items()}
        g = best.get("glzn")
        peer = "glzn iTarDirectory.parse_folder" if g is not None else None
        cond = (
            f"best of {rounds} interleaved rounds, load average {load0:.1f} -> {load1:.1f}"
            + (f"; indexes byte-identical: {identical}" if g is not None else "")
            + ("" if g is not None else f"; glzn not found (set {GLZN_ENV})")
        )
        out.append(
            row(
                f"build index, {members:,} members, {nt} threads (default) vs glzn",
                best["default"],
                peer,
                g,
                target=">= 10x glzn",
                note=f"fsync=False like glzn; {cond}",
            )
        )
        out.append(
            row(
                f"build index, {members:,} members, 1 thread vs glzn",
                best["one"],
                peer,
                g,
                note="TENFOLD_THREADS=1",
            )
        )
        out.append(
            row(
                f"build index, {members:,} members, durable (fsync) vs glzn",
                best["durable"],
                peer,
                g,
                note="the default: fsync of the index and its directory; glzn does neither",
            )
        )
    finally:
        if saved is None:
            os.environ.pop(parallel.THREADS_ENV, None)
        else:
            os.environ[parallel.THREADS_ENV] = saved
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    for r in run("--quick" in sys.argv):
        print(r)

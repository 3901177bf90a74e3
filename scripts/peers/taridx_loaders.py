"""TARIDX against the loaders people use on the same tar shards, same samples, same run.

Data: 100,000 samples x {jpg, cls} (200,000 members; payloads 700-1500 bytes of random data,
each sample's own), in 10 shards, written to /tmp at run time and removed after; page cache
warm. ``--quick``: 4,000 samples in 4 shards.

* wids 0.1.11 (``wids.ShardListDataset``): its index build is what it does on opening a shard
  (``IndexedTarSamples``: a Python walk over every header, then grouping); random reads go
  through ``ShardListDataset[i]`` with the shard list tenfold exports, vs ``Dataset[i]``, the
  same random order. Each library's samples as it returns them: wids copies each payload into
  a ``BytesIO``, tenfold returns ``memoryview`` s of the map; a second row touches every
  payload byte on both sides (``bytes(...)`` / ``getvalue()``).
* webdataset 1.0.2: no random access; a full pass over the fold in order (``WebDataset`` with
  no decoding) vs ``Dataset[i]`` for every ``i`` in order.
* mosaicml-streaming (MDS): conversion (``MDSWriter`` writing every sample, its input already
  in memory) vs TARIDX, which converts nothing (its index build); random reads (``LocalDataset
  [i]``, the same order) vs ``Dataset[i]``. MDS would downgrade numpy and bring a torchvision
  that fails beside torch 2.13 here, so it runs in its own interpreter: set
  ``TENFOLD_MDS_PYTHON`` to a Python with ``mosaicml-streaming`` (the columns stay empty
  without it). The peer times itself with the same best-of-N method, on the same samples
  (it reads them from the same shards, untimed), and hashes what it read back so the run
  fails if the samples differ.
* the export of DALI + wids indexes for the fold (200,000 members) vs wids' own per-shard
  count (``IndexedTarSamples``, what ``widsindex create`` runs per shard besides its md5).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import numpy as np
from _timing import best, row

import tenfold.taridx as tx
from tenfold.taridx import export as tex

MDS = os.environ.get("TENFOLD_MDS_PYTHON")

_MDS_SCRIPT = r"""
import gc, hashlib, importlib.machinery, json, os, shutil, sys, tarfile, time, types

def best(fn, repeat, setup=None):
    ts = []
    for _ in range(repeat):
        if setup: setup()
        gc.collect()
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return min(ts)

try:
    import torchvision  # noqa: F401
except Exception:
    # streaming's vision subpackage imports two torchvision names at import time; the MDS
    # writer and reader measured here never call them. Stand-ins keep the import working
    # where no torchvision matches the installed torch.
    tv = types.ModuleType("torchvision")
    tv.datasets = types.ModuleType("torchvision.datasets")
    tv.datasets.VisionDataset = object
    tv.datasets.CIFAR10 = object
    tv.transforms = types.ModuleType("torchvision.transforms")
    tv.transforms.functional = types.ModuleType("torchvision.transforms.functional")
    tv.transforms.functional.to_tensor = None
    for name, mod in (("torchvision", tv), ("torchvision.datasets", tv.datasets),
                      ("torchvision.transforms", tv.transforms),
                      ("torchvision.transforms.functional", tv.transforms.functional)):
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = mod
import streaming
from streaming import LocalDataset, MDSWriter

shards, out, order_path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
order = json.load(open(order_path))
samples = []
for shard in shards:  # the same samples, from the same shards (untimed)
    with tarfile.open(shard) as tf:
        cur = None
        for m in tf:
            key, ext = m.name.split(".", 1)
            if cur is None or cur["__key__"] != key:
                cur = {"__key__": key}
                samples.append(cur)
            cur[ext] = tf.extractfile(m).read()
cols = {"__key__": "str", "jpg": "bytes", "cls": "bytes"}

def fresh():
    shutil.rmtree(out, ignore_errors=True)

def convert():
    with MDSWriter(out=out, columns=cols, compression=None) as w:
        for s in samples:
            w.write(s)

res = {"version": streaming.__version__}
res["convert"] = best(convert, 2, fresh)
ds = LocalDataset(local=out)
assert len(ds) == len(samples)
def reads():
    for i in order:
        ds[i]
reads()
res["reads"] = best(reads, 3)
h = hashlib.sha256()
for i in order[:2000]:
    s = ds[i]
    h.update(s["__key__"].encode()); h.update(s["jpg"]); h.update(s["cls"])
res["digest"] = h.hexdigest()
json.dump(res, sys.stdout)
"""


def make_fold(root: Path, fold: str, n_samples: int, n_shards: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    per = -(-n_samples // n_shards)
    k = 0
    for sh in range(n_shards):
        with open(root / f"{fold}_{sh:04d}.tar", "wb") as f:
            for _ in range(min(per, n_samples - k)):
                for ext in ("jpg", "cls"):
                    data = rng.bytes(int(rng.integers(700, 1500)))
                    info = tarfile.TarInfo(f"sample{k:08d}.{ext}")
                    info.size, info.mtime = len(data), 1_700_000_000
                    f.write(info.tobuf(tarfile.USTAR_FORMAT))
                    f.write(data + b"\0" * (-len(data) % 512))
                k += 1
            f.write(b"\0" * 1024)


def _digest(ds: tx.Dataset, order: list[int], stems: list[str]) -> str:
    h = hashlib.sha256()
    for i in order[:2000]:
        s = ds[i]
        h.update(stems[i].encode())
        h.update(s["jpg"])
        h.update(s["cls"])
    return h.hexdigest()


def run(quick: bool) -> list[dict]:
    n = 4_000 if quick else 100_000
    n_shards = 4 if quick else 10
    n_reads = 20_000 if quick else 100_000
    out: list[dict] = []
    tmp = Path(tempfile.mkdtemp(prefix="tenfold-loaders-bench-"))
    try:
        make_fold(tmp, "d", n, n_shards)
        shards = tx.shard_paths(tmp, "d")
        for p in shards:
            p.read_bytes()
        t_build = best(lambda: tx.build(tmp, "d", show_progress=False, fsync=False), repeat=5)
        ds = tx.Dataset(tmp, "d", payload="memoryview")  # zero copy: the "as returned" rows
        ds_bytes = tx.Dataset(tmp, "d")  # the default: every payload copied out as bytes
        stems = ds.index.stems()
        rng = np.random.default_rng(2)
        order = rng.integers(0, n, n_reads).tolist()
        mine = _digest(ds, order, stems)

        def read_tf() -> None:
            for i in order:
                ds[i]

        def read_tf_bytes() -> None:
            for i in order:
                ds_bytes[i]

        t_tf = best(read_tf, repeat=3)
        t_tf_b = best(read_tf_bytes, repeat=3)

        # -- export ---------------------------------------------------------------------------
        t_export = best(
            lambda: tex.export(tmp, "d", dali=tmp, wids=tmp / "d.wids.json", fsync=False),
            repeat=5,
        )

        # -- wids -----------------------------------------------------------------------------
        try:
            import contextlib

            import wids

            def wids_index() -> None:
                with contextlib.redirect_stdout(io.StringIO()):
                    for p in shards:
                        wids.wids.IndexedTarSamples(path=str(p)).close()

            t_wids_build = best(wids_index, repeat=2 if quick else 1)
            out.append(
                row(
                    f"index build, {n_shards} shards, {2 * n:,} members",
                    t_build,
                    "wids IndexedTarSamples",
                    t_wids_build,
                    target=">= 4x wids",
                    note="what wids does on opening each shard; tenfold: fsync=False",
                )
            )
            out.append(
                row(
                    f"export DALI .idx + wids list, {2 * n:,} members",
                    t_export,
                    "wids IndexedTarSamples",
                    t_wids_build,
                    target="< 0.5 s",
                    note="wids' own count per shard (widsindex also runs an md5)",
                )
            )
            cwd = os.getcwd()
            os.chdir(tmp)  # wids' lock files next to the shards
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    wd = wids.ShardListDataset(
                        str(tmp / "d.wids.json"), localname=lambda u: u, transformations=[]
                    )
                assert len(wd) == n
                w0 = wd[order[0]]
                assert w0["__key__"] == stems[order[0]]
                assert w0[".jpg"].getvalue() == bytes(ds[order[0]]["jpg"])

                def read_wids() -> None:
                    for i in order:
                        wd[i]

                def read_wids_bytes() -> None:
                    for i in order:
                        s = wd[i]
                        s[".jpg"].getvalue()
                        s[".cls"].getvalue()

                t_wids = best(read_wids, repeat=3)
                t_wids_b = best(read_wids_bytes, repeat=3)
                wd.close()
            finally:
                os.chdir(cwd)
            out.append(
                row(
                    f"random sample reads vs wids, {n_reads:,} of {n:,}",
                    n_reads / t_tf,
                    "wids ShardListDataset[i]",
                    n_reads / t_wids,
                    unit="samples/s",
                    higher_is_better=True,
                    note="tenfold payload='memoryview' (zero copy) vs BytesIO copies",
                )
            )
            out.append(
                row(
                    "random reads vs wids, every payload copied to bytes",
                    n_reads / t_tf_b,
                    "wids ShardListDataset[i]",
                    n_reads / t_wids_b,
                    unit="samples/s",
                    higher_is_better=True,
                    note="bytes on both sides: tenfold's default payloads / BytesIO.getvalue()",
                )
            )
        except ImportError:
            out.append(row("index build vs wids", t_build, note="wids not installed"))
            out.append(
                row(f"export DALI .idx + wids list, {2 * n:,} members", t_export, target="< 0.5 s")
            )

        # -- webdataset -----------------------------------------------------------------------
        try:
            import webdataset as wds

            urls = [str(p) for p in shards]

            def wds_pass() -> None:
                for _ in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
                    pass

            def tf_pass() -> None:
                for i in range(n):
                    ds[i]

            t_wds = best(wds_pass, repeat=2 if quick else 1)
            t_pass = best(tf_pass, repeat=3)
            out.append(
                row(
                    f"full pass in order, {n:,} samples",
                    n / t_pass,
                    "webdataset WebDataset (no decode)",
                    n / t_wds,
                    unit="samples/s",
                    higher_is_better=True,
                    note="webdataset has no random access: its sequential pass",
                )
            )
        except ImportError:
            out.append(row("full pass vs webdataset", None, note="webdataset not installed"))

        # -- mosaicml-streaming (own interpreter) ---------------------------------------------
        if MDS and os.path.exists(MDS):
            order_path = tmp / "order.json"
            order_path.write_text(json.dumps(order))
            proc = subprocess.run(
                [
                    MDS,
                    "-c",
                    _MDS_SCRIPT,
                    json.dumps([str(p) for p in shards]),
                    str(tmp / "mds"),
                    str(order_path),
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode:
                raise RuntimeError(f"MDS peer failed:\n{proc.stderr[-3000:]}")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            if res["digest"] != mine:
                raise RuntimeError("MDS read back other samples than tenfold: not comparable")
            out.append(
                row(
                    f"conversion, {n:,} samples",
                    t_build,
                    f"MDSWriter (streaming {res['version']})",
                    res["convert"],
                    note="TARIDX converts nothing: its index build; MDS input in memory",
                )
            )
            out.append(
                row(
                    f"random sample reads vs MDS, {n_reads:,} of {n:,}",
                    n_reads / t_tf,
                    "MDS LocalDataset[i]",
                    n_reads / res["reads"],
                    unit="samples/s",
                    higher_is_better=True,
                    note="tenfold payload='memoryview'; MDS decodes its bytes columns to bytes",
                )
            )
            out.append(
                row(
                    "random reads vs MDS, tenfold copying to bytes",
                    n_reads / t_tf_b,
                    "MDS LocalDataset[i]",
                    n_reads / res["reads"],
                    unit="samples/s",
                    higher_is_better=True,
                    note="tenfold's default: bytes payloads, as MDS gives",
                )
            )
        else:
            out.append(
                row(
                    "conversion / random reads vs MDS",
                    None,
                    note="TENFOLD_MDS_PYTHON not set (a Python with mosaicml-streaming)",
                )
            )
            print("skipped MDS: TENFOLD_MDS_PYTHON not set (a Python with mosaicml-streaming)")
        ds.close()
        ds_bytes.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    import sys

    for r in run("--quick" in sys.argv):
        print(r)

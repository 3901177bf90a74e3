"""TARIDX batched reads (issue 14 item 2) and the cost of the header check (issue 15).

* header check: random samples of one ~368 MB shard from the page cache (the fold of
  ``peers/taridx.py``), ``verify_headers`` on vs off, runs interleaved, for ``ds[i]`` one at a
  time and ``ds.__getitems__`` in batches of 256, each with and without touching the first
  byte of every payload (what any decoder does). Wall-clock best of N, and process CPU time
  (best of N), since the 2-core machine is shared and wall time includes waiting for a core.
* remote: the same kind of fold (4 shards) in a local S3 server (moto's ``ThreadedMotoServer``
  on 127.0.0.1, read through s3fs): ``ds[i]`` per sample (one request each) vs random
  batches of 256 through ``__getitems__`` (one ``cat_ranges`` per batch, planned by the link
  cost model, or with the old fixed 64 KiB ``max_gap``) vs batches of a locality-blocked
  epoch (``EpochSampler(block=64)``), and a whole random epoch from cold (shard cache on)
  against wids reading the same shards from the same server: both sides making their S3 client
  in the timer (wids: a new boto3 client and presigned URLs), and both with a client made
  before. ``--remote`` runs only these; ``--remote --epoch`` only the whole-epoch cases.

``--quick`` uses 2,000 local samples and 2,000 remote samples.
"""

from __future__ import annotations

import gc
import logging
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _timing import CountingApp, row

import tenfold.taridx as tx


def _make_tar(path: Path, n_samples: int, prefix: str, seed: int = 0) -> None:
    """``n_samples`` x {jpg, cls}, payloads 700-1500 bytes, ustar (as ``peers/taridx.py``)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(700, 1500, size=(n_samples, 2))
    blob = rng.bytes(2048)
    with open(path, "wb") as f:
        for i in range(n_samples):
            for j, ext in enumerate(("jpg", "cls")):
                info = tarfile.TarInfo(f"{prefix}{i:08d}.{ext}")
                info.size, info.mtime = int(sizes[i, j]), 1_700_000_000
                f.write(info.tobuf(tarfile.USTAR_FORMAT))
                f.write(blob[: info.size])
                f.write(b"\0" * (-info.size % 512))
        f.write(b"\0" * 1024)


def _best2(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(best wall seconds, best process CPU seconds) of ``repeat`` runs."""
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        gc.collect()
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - w)
        cpu = min(cpu, time.process_time() - c)
    return wall, cpu


def header_check_rows(root: Path, n_samples: int, n_reads: int) -> list[dict]:
    """verify_headers on vs off, per-sample and batched, payload touched or not."""
    _make_tar(root / "bench_0000.tar", n_samples, "sample")
    tx.build(root, "bench", show_progress=False)
    (root / "bench_0000.tar").read_bytes()  # warm the page cache
    order = np.random.default_rng(0).integers(0, n_samples, n_reads).tolist()
    batches = [order[k : k + 256] for k in range(0, len(order), 256)]
    sets = {vh: tx.Dataset(root, "bench", verify_headers=vh) for vh in (True, False)}
    for ds in sets.values():
        ds.__getitems__(list(range(n_samples)))  # map every page once, as a long run has

    def item(ds: tx.Dataset, touch: bool) -> None:
        if touch:
            for i in order:
                for v in ds[i].values():
                    v[0]
        else:
            for i in order:
                ds[i]

    def batch(ds: tx.Dataset, touch: bool) -> None:
        if touch:
            for b in batches:
                for s in ds.__getitems__(b):
                    for v in s.values():
                        v[0]
        else:
            for b in batches:
                ds.__getitems__(b)

    cases = [
        ("ds[i]", item, False),
        ("ds[i] + 1st payload byte", item, True),
        ("__getitems__(256)", batch, False),
        ("__getitems__(256) + 1st payload byte", batch, True),
    ]
    res: dict[tuple[str, bool], tuple[float, float]] = {}
    for _ in range(4):  # interleaved: the machine's load drifts between runs
        for name, fn, touch in cases:
            for vh, ds in sets.items():
                w, c = _best2(lambda ds=ds, fn=fn, touch=touch: fn(ds, touch), repeat=2)
                old = res.get((name, vh), (float("inf"), float("inf")))
                res[name, vh] = (min(old[0], w), min(old[1], c))
    out = []
    for name, _fn, _touch in cases:
        (w_on, c_on), (w_off, c_off) = res[name, True], res[name, False]
        out.append(
            row(
                f"random reads, {name}: header check on vs off (wall)",
                n_reads / w_on,
                "verify_headers=False",
                n_reads / w_off,
                unit="samples/s",
                higher_is_better=True,
                target="check < 10%",
                note=f"check costs {100 * (1 - w_off / w_on):.0f}% wall, "
                f"{100 * (1 - c_off / c_on):.0f}% CPU "
                f"({n_reads / c_on:,.0f} vs {n_reads / c_off:,.0f} samples per CPU-second)",
            )
        )
    for ds in sets.values():
        ds.close()
    return out


def _batches(d: Any, order: list[int], size: int = 256) -> None:
    for k in range(0, len(order), size):
        d.__getitems__(order[k : k + size])


def _wids_epochs(shards: list[dict], order: list[int], cache: Path, second: list) -> None:
    """wids from cold: a fresh cache directory, ``ds[i]`` for every sample of ``order`` (it
    downloads each shard whole with curl on first use, then reads it locally); then a second
    epoch, timed separately into ``second``."""
    import wids

    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    ds = wids.ShardListDataset(shards, cache_dir=str(cache), transformations=[])
    for k in range(0, len(order), 256):
        [ds[i] for i in order[k : k + 256]]
    t = time.perf_counter()
    for k in range(0, len(order), 256):
        [ds[i] for i in order[k : k + 256]]
    second.append((t - t0, time.perf_counter() - t))


def _presigned(opts: dict, bucket: str, names: list[str], per_shard: int) -> list[dict]:
    """What a wids user does first: make a boto3 S3 client and presign each shard's URL. The
    client comes from a new boto3 session, as each new s3fs client makes a new aiobotocore
    session (boto3's default session, reused, took 12 ms here instead of 60-120)."""
    import boto3

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=opts["endpoint_url"],
        aws_access_key_id=opts["key"],
        aws_secret_access_key=opts["secret"],
        region_name="us-east-1",
    )
    return [
        {
            "url": client.generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": n}, ExpiresIn=3600
            ),
            "nsamples": per_shard,
        }
        for n in names
    ]


def _wids_presign_epochs(
    opts: dict, names: list[str], per_shard: int, order: list[int], cache: Path, out: list
) -> None:
    """wids from cold, its shard list made in the timer (a new boto3 client, presigned URLs)."""
    t0 = time.perf_counter()
    shards = _presigned(opts, "bench", names, per_shard)
    t1 = time.perf_counter()
    first: list = []
    _wids_epochs(shards, order, cache, first)
    out.append((t1 - t0 + first[0][0], first[0][1]))
    _PRESIGN.append(t1 - t0)


#: seconds each presigning (client + URLs) took
_PRESIGN: list[float] = []


def _tenfold_epochs(open_ds: Callable[[], Any], order: list[int], second: list) -> None:
    """tenfold from cold (a new dataset: listing, index, shards), then a second epoch."""
    t0 = time.perf_counter()
    ds = open_ds()
    _batches(ds, order)
    t = time.perf_counter()
    _batches(ds, order)
    second.append((t - t0, time.perf_counter() - t))
    ds.close()


def remote_rows(
    root: Path, n_samples: int, n_per_sample: int, rounds: int = 5, epoch_only: bool = False
) -> list[dict]:
    """A local S3 server: one request per sample vs batches of 256 planned by the link's cost
    model (calibrated, shard cache off), the old fixed ``max_gap`` of 64 KiB, a
    locality-blocked epoch, and a whole random epoch from cold with the shard cache against
    wids from cold on the same server. Requests and bytes are counted on the server."""
    try:
        import s3fs
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        print(f"remote batch benchmark skipped: {exc}")
        return []
    import contextlib
    import io
    import os

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's request log
    per_shard = n_samples // 4
    for k in range(4):
        _make_tar(root / f"r_{k:04d}.tar", per_shard, f"s{k}_", seed=k)
    tx.build(root, "r", show_progress=False)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    log: list = []
    server._server.app = CountingApp(server._server.app, log)
    load = [os.getloadavg()[0]]
    try:
        host, port = server.get_host_and_port()
        opts = {
            "key": "bench",
            "secret": "bench",
            "endpoint_url": f"http://{host}:{port}",
            "skip_instance_cache": True,  # no listing cached between datasets
        }
        fs = s3fs.S3FileSystem(**opts)
        fs.mkdir("bench")
        for f in sorted(root.glob("r_*.tar")):
            fs.put_file(str(f), f"bench/{f.name}")
        fs.put_file(str(root / "r.taridx"), "bench/r.taridx")
        shard_mb = sum(f.stat().st_size for f in root.glob("r_*.tar")) / 4e6

        def open_ds(**kw: Any) -> tx.Dataset:
            return tx.Dataset("s3://bench", "r", storage_options=opts, **kw)

        shared_opts = {k: v for k, v in opts.items() if k != "skip_instance_cache"}
        shared = s3fs.S3FileSystem(**shared_opts)  # fsspec's instance cache hands it out
        shared.ls("bench")

        def open_shared() -> tx.Dataset:
            """A new dataset in a process whose s3fs client exists already (fsspec's default
            instance cache), its listing cache emptied: all data is fetched anew."""
            shared.invalidate_cache()
            return tx.Dataset("s3://bench", "r", storage_options=shared_opts)

        one_ds = open_ds(cache_bytes=0)
        model = open_ds(cache_bytes=0)
        fixed = open_ds(cache_bytes=0, max_gap=64 << 10, calibrate=False)
        defaults = open_ds(cache_bytes=0, calibrate=False)
        n = len(model)
        rng = np.random.default_rng(1)
        one = rng.integers(0, n, n_per_sample).tolist()
        rand = rng.permutation(n).tolist()[: 16 * 256]  # 16 batches of 256
        epoch = rng.permutation(n).tolist()  # a whole random epoch
        blocked = list(tx.EpochSampler(n, seed=2, block=64))
        warm = rng.permutation(n).tolist()[: 4 * 256]
        for d in (one_ds, model, fixed, defaults):  # shards looked up, clients warm
            _batches(d, warm)  # (and, for ``model``, calls the link model is fitted to)
        names = [f.name for f in sorted(root.glob("r_*.tar"))]
        shards = [
            {"url": fs.url(f"bench/{name}", expires=3600), "nsamples": per_shard} for name in names
        ]
        cases: dict[str, Callable[[], Any]] = {}
        if not epoch_only:
            cases = {
                "one": lambda: [one_ds[i] for i in one],
                "model": lambda: _batches(model, rand),
                "defaults": lambda: _batches(defaults, rand),
                "fixed": lambda: _batches(fixed, rand[: 4 * 256]),  # slow: 4 batches
                "blocked": lambda: _batches(model, blocked),
            }
        cases["cold"] = lambda: _tenfold_epochs(open_ds, epoch, second["cold"])
        cases["cold_client"] = lambda: _tenfold_epochs(open_shared, epoch, second["cold_client"])
        try:
            import wids  # noqa: F401

            cases["wids"] = lambda: _wids_epochs(shards, epoch, root / "wids-cache", second["wids"])
            import boto3  # noqa: F401

            cases["wids_presign"] = lambda: _wids_presign_epochs(
                opts, names, per_shard, epoch, root / "wids-cache", second["wids_presign"]
            )
        except ImportError as exc:
            print(f"wids (or boto3 for its URLs) skipped: {exc}")
        #: (first epoch, second epoch) seconds of each run
        second: dict[str, list[tuple[float, float]]] = {
            "cold": [],
            "cold_client": [],
            "wids": [],
            "wids_presign": [],
        }
        best_t: dict[str, float] = {}
        io_of: dict[str, tuple[int, int]] = {}
        for _ in range(rounds):  # interleaved: the machine's load drifts between runs
            for name, fn in cases.items():
                gc.collect()
                log.clear()
                t = time.perf_counter()
                with contextlib.redirect_stderr(io.StringIO()):  # wids prints its shards
                    fn()
                dt = time.perf_counter() - t
                if dt < best_t.get(name, float("inf")):
                    best_t[name] = dt
                    gets = [b for m, b in log if m == "GET"]
                    io_of[name] = (len(gets), sum(gets))
                load.append(os.getloadavg()[0])
        link = repr(model.link)
        for d in (one_ds, model, fixed, defaults):
            d.close()
    finally:
        server.stop()
        shutil.rmtree(root / "wids-cache", ignore_errors=True)
    first_t = {k: min(a for a, _ in v) for k, v in second.items() if v}
    second_t = {k: min(b for _, b in v) for k, v in second.items() if v}
    la = f"load average {min(load):.1f}-{max(load):.1f}"
    out = (
        []
        if epoch_only
        else _batch_rows(best_t, io_of, n_per_sample, len(rand), n, link, la, shard_mb)
    )
    if "wids" in first_t:
        out += _epoch_rows(first_t, second_t, io_of, n, la)
    return out


def _batch_rows(
    best_t: dict,
    io_of: dict,
    n_per_sample: int,
    n_rand: int,
    n: int,
    link: str,
    la: str,
    shard_mb: float,
) -> list[dict]:
    base = n_per_sample / best_t["one"]
    nb = -(-n_rand // 256)

    def per_batch(name: str, n_batches: int) -> str:
        req, nb = io_of[name]
        return f"{req / n_batches:.1f} requests and {nb / n_batches / 1e6:.1f} MB per batch"

    return [
        row(
            "remote random batches of 256, cost-model plan (local S3 server, moto + s3fs)",
            n_rand / best_t["model"],
            "ds[i], one request per sample",
            base,
            unit="samples/s",
            higher_is_better=True,
            target=">= 5x",
            note=f"{n:,} samples in 4 shards of {shard_mb:.0f} MB, {nb} batches, shard cache "
            f"off, link model fitted to the dataset's earlier calls ({link}); "
            f"{per_batch('model', nb)}; {la}",
        ),
        row(
            "remote random batches of 256, default link model (not calibrated)",
            n_rand / best_t["defaults"],
            "ds[i], one request per sample",
            base,
            unit="samples/s",
            higher_is_better=True,
            note=f"10 ms, 100 MB/s: holes up to 1 MB read; {per_batch('defaults', nb)}",
        ),
        row(
            "remote random batches of 256, fixed max_gap=64 KiB (the old default)",
            4 * 256 / best_t["fixed"],
            "ds[i], one request per sample",
            base,
            unit="samples/s",
            higher_is_better=True,
            note=per_batch("fixed", 4) + " (4 batches timed)",
        ),
        row(
            "remote batches of 256, locality-blocked epoch (block=64)",
            n / best_t["blocked"],
            "ds[i], one request per sample",
            base,
            unit="samples/s",
            higher_is_better=True,
            note=f"a whole epoch, shard cache off; {per_batch('blocked', -(-n // 256))}",
        ),
    ]


def _epoch_rows(first_t: dict, second_t: dict, io_of: dict, n: int, la: str) -> list[dict]:
    """A whole random epoch from cold, tenfold vs wids, like for like: both making their S3
    client in the timer, and both with a client made before it."""
    req_c, nb_c = io_of["cold"]
    req_s, nb_s = io_of["cold_client"]
    req_w, nb_w = io_of["wids"]
    wids_what = (
        "wids starts with an empty cache directory, downloads each shard whole with curl "
        f"({req_w} GETs, {nb_w / 1e6:.0f} MB), indexes it and reads ds[i]; raw bytes, no "
        "decoding"
    )
    out = []
    if "wids_presign" in first_t:
        presign = min(_PRESIGN) if _PRESIGN else float("nan")
        out.append(
            row(
                "remote random epoch from cold, each side making its S3 client",
                n / first_t["cold"],
                "wids 0.1.11 from cold, its presigned URLs made in the timer",
                n / first_t["wids_presign"],
                unit="samples/s",
                higher_is_better=True,
                target=">= 2x wids",
                note=f"a whole epoch of {n:,} samples in one random order, timed from "
                "nothing: tenfold makes a new s3fs client, lists the bucket and fetches the "
                f"index (one round trip), then the shards ({req_c} GETs, {nb_c / 1e6:.0f} MB, "
                "kept in memory); wids' user makes a boto3 client and presigns the 4 shard "
                f"URLs (best {presign * 1e3:.0f} ms), then {wids_what}; {la}",
            )
        )
    out.append(
        row(
            "remote random epoch from cold, each side with its S3 client made before",
            n / first_t["cold_client"],
            "wids 0.1.11 from cold, presigned URLs made before",
            n / first_t["wids"],
            unit="samples/s",
            higher_is_better=True,
            target=">= 2x wids",
            note="timed from making the dataset: tenfold gets the process's existing s3fs "
            "client (fsspec's instance cache, as any dataset after the first in a process), "
            f"its listing cache emptied ({req_s} GETs, {nb_s / 1e6:.0f} MB); wids gets "
            "its shard list with URLs presigned before the timer",
        )
    )
    out.append(
        row(
            "remote random epoch from cold, tenfold's new client vs wids' URLs made before",
            n / first_t["cold"],
            "wids 0.1.11 from cold, presigned URLs made before",
            n / first_t["wids"],
            unit="samples/s",
            higher_is_better=True,
            note="the mixed case (the table's earlier row): tenfold pays for its client, wids not",
        )
    )
    out.append(
        row(
            "remote random epoch, the second (shards already fetched)",
            n / second_t["cold"],
            "wids 0.1.11, second epoch (its disk cache)",
            n / second_t["wids"],
            unit="samples/s",
            higher_is_better=True,
            note="the same datasets right after their first epoch; no requests by either",
        )
    )
    return out


def run(quick: bool) -> list[dict]:
    tmp = Path(tempfile.mkdtemp(prefix="tenfold-taridx-batch-"))
    try:
        local = tmp / "local"
        local.mkdir()
        out = header_check_rows(local, 2_000 if quick else 100_000, 20_000 if quick else 200_000)
        shutil.rmtree(local, ignore_errors=True)
        remote = tmp / "remote"
        remote.mkdir()
        out += remote_rows(remote, 2_000 if quick else 20_000, 200 if quick else 500)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    import sys

    if "--remote" in sys.argv:
        with tempfile.TemporaryDirectory(prefix="tenfold-taridx-remote-") as d:
            quick = "--quick" in sys.argv
            for r in remote_rows(
                Path(d),
                2_000 if quick else 20_000,
                200 if quick else 500,
                epoch_only="--epoch" in sys.argv,
            ):
                print(r)
    else:
        for r in run("--quick" in sys.argv):
            print(r)

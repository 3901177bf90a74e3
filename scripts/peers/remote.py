"""Remote and sliced reads for scripts/bench_peers.py (issue 13): requests, bytes and time.

Data: a 1 GiB .zt (256 float32 tensors of 4 MiB; ``--quick``: 64 MiB, 16 tensors) served by
moto's S3 in server mode on 127.0.0.1 and read through s3fs; a 256 MiB tensor (``--quick``:
32 MiB) for the slice cases. Requests and bytes are counted on the server (a WSGI wrapper
around moto's app) or, for local ``pread``, by the source. Peers: reading the same tensor
without range requests (s3fs downloads the whole object, then it is parsed from memory), and
``safetensors.safe_open(...).get_slice`` for the local slice.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np
from _timing import CountingApp, alternate, best, median, row

import tenfold


def _s3():
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    log: list = []
    srv._server.app = CountingApp(srv._server.app, log)
    host, port = srv.get_host_and_port()
    opts = {
        "key": "bench",
        "secret": "bench",
        "client_kwargs": {"endpoint_url": f"http://{host}:{port}", "region_name": "eu-west-1"},
        "skip_instance_cache": True,
    }
    return srv, log, opts


def _put(fs: Any, path: str, key: str) -> None:
    """One PUT (moto's multipart completion loses parts of large uploads)."""
    bucket, name = key.split("/", 1)
    with open(path, "rb") as f:
        fs.call_s3("put_object", Bucket=bucket, Key=name, Body=f.read())


def run(quick: bool) -> list[dict]:
    rows: list[dict] = []
    try:
        import s3fs  # noqa: F401
        from moto.server import ThreadedMotoServer  # noqa: F401
    except ImportError as exc:
        return [row("remote cases", 0.0, note=f"skipped: {exc}")]
    n = 16 if quick else 256
    rng = np.random.default_rng(0)
    tensors = {f"t{i:03d}": rng.standard_normal((1024, 1024), dtype=np.float32) for i in range(n)}
    size = sum(a.nbytes for a in tensors.values())
    one = tensors[f"t{n // 2:03d}"]
    tmp = tempfile.mkdtemp(prefix="tenfold-bench-remote-")
    srv, log, opts = _s3()
    try:
        path = os.path.join(tmp, "m.zt")
        tenfold.save(path, tensors, fsync=False)
        del tensors
        import s3fs

        # one slow PUT of 1 GiB must not be retried (moto loses the first copy then)
        fs = s3fs.S3FileSystem(
            **opts, config_kwargs={"read_timeout": 900, "retries": {"max_attempts": 1}}
        )
        fs.mkdir("bench")
        _put(fs, path, "bench/m.zt")
        url = "s3://bench/m.zt"
        note = f"{size / 2**30:.3g} GiB .zt, {n} tensors of 4 MiB, moto S3 on 127.0.0.1"

        log.clear()
        t = time.perf_counter()
        r = tenfold.open(url, storage_options=opts)
        t_open = time.perf_counter() - t
        open_req, open_bytes = len(log), sum(b for _, b in log)
        log.clear()
        t = time.perf_counter()
        got = r[f"t{n // 2:03d}"]
        t_read = time.perf_counter() - t
        assert np.array_equal(got, one)
        read_req, read_bytes = len(log), sum(b for _, b in log)
        r.close()

        def open_and_read() -> None:
            with tenfold.open(url, storage_options=opts) as rr:
                rr[f"t{n // 2:03d}"]

        t_both = best(open_and_read, 5)
        rows += [
            row("S3: open, requests", open_req, unit="requests", target="<= 2", note=note),
            row("S3: open, bytes", open_bytes, unit="bytes", note=note),
            row("S3: open, time", t_open, note="first open (new connection)"),
            row("S3: one 4 MiB tensor, requests", read_req, unit="requests", target="<= 2"),
            row(
                "S3: one 4 MiB tensor, bytes",
                read_bytes,
                unit="bytes",
                target="< 4.1 MiB",
                note=f"tensor {one.nbytes} B; the 8-byte magic check rides along",
            ),
            row("S3: one 4 MiB tensor, time", t_read),
        ]

        def whole() -> None:  # no range requests: fetch the object, then parse
            import tenfold.ztensor as zt

            data = fs.cat_file("bench/m.zt")
            with zt.open(data) as rr:
                rr[f"t{n // 2:03d}"]

        rows.append(
            row(
                "S3: open + one tensor",
                t_both,
                "s3fs cat + parse (whole object)",
                best(whole, 2),
                note="best of 5 / best of 2",
            )
        )

        # -- slices: 1/8 of the rows of a 256 MiB tensor ---------------------------------
        rows_n = 8192 if quick else 65536
        big = rng.standard_normal((rows_n, 1024), dtype=np.float32)
        sl = slice(rows_n // 2, rows_n // 2 + rows_n // 8)
        bnote = f"{big.nbytes / 2**20:.0f} MiB tensor, rows [{sl.start}, {sl.stop})"
        zp = os.path.join(tmp, "big.zt")
        sp = os.path.join(tmp, "big.safetensors")
        tenfold.save(zp, {"w": big}, fsync=False)
        tenfold.save(sp, {"w": big})
        del big
        with tenfold.open(zp, mmap=False) as rr:
            b0 = rr._mf.stats["bytes"]
            part = rr.read("w", sl)
            fraction = (rr._mf.stats["bytes"] - b0) / (rows_n * 1024 * 4)
        del part
        rows.append(
            row("slice 1/8 rows, pread: fraction of bytes read", fraction, unit="ratio", note=bnote)
        )
        _put(fs, zp, "bench/big.zt")
        with tenfold.open("s3://bench/big.zt", storage_options=opts) as rr:
            rr.read("w", slice(0, 1))  # settles the deferred magic check
            log.clear()
            rr.read("w", sl)
            rows.append(
                row(
                    "slice 1/8 rows, S3: requests / fraction of bytes",
                    len(log),
                    unit="requests",
                    note=f"{sum(b for _, b in log) / (rows_n * 4096):.4f} of the tensor's bytes",
                )
            )
        try:
            from safetensors import safe_open
        except ImportError:
            safe_open = None

        def ours() -> Any:
            with tenfold.open(sp) as rr:
                return np.array(rr.read("w", sl))

        def theirs() -> Any:
            with safe_open(sp, framework="np") as f:
                return f.get_slice("w")[sl]

        ta, tb = alternate(ours, theirs if safe_open else None, rounds=15)
        med = f"; median ratio {median(tb) / median(ta):.2f}x, 15 alternating rounds" if tb else ""
        rows.append(
            row(
                "slice 1/8 rows, local .safetensors (copy)",
                min(ta),
                "safetensors get_slice" if safe_open else None,
                min(tb) if tb else None,
                note=bnote + "; open + slice + copy on both sides" + med,
            )
        )
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return rows

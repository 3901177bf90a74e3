"""Diagnostics for the device load (issue 28): can a file's page-cache pages go to the GPU by DMA
without a host copy?

    python scripts/gpu_diag.py --gb 3 --repeat 3 --out diag.json

The staging ring copies every byte once on the CPU (page cache -> pinned buffer) before the
device copy; on the lent H200 VM that copy runs at 35-38 GB/s over 16 threads against 55 GB/s for
the device copy, so the ring cannot reach 80% of the copy limit. This script measures the one
way around the host copy: registering the file's read-only memory map with the CUDA driver
(``cudaHostRegister`` with ``cudaHostRegisterReadOnly``), copying each tensor straight from the
map, and checking the CRC-32C on CPU threads over the same pages while the DMA runs. It times
the registration alone (whole file, and in chunks on 1 and 16 threads), the registered load
unverified and verified, a pipelined variant (chunks registered by workers while earlier chunks
are in flight), a copy from unregistered (pageable) map memory, and the current ring, all in
one run with the copy limit. Printed as a table and written as JSON.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import json
import mmap
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gpu_bench import copy_limit, make_model, timed  # noqa: E402

import tenfold.torch  # noqa: E402
from tenfold import _kernels, ztensor  # noqa: E402
from tenfold.interop import _device  # noqa: E402
from tenfold.interop.frameworks import open_tensors  # noqa: E402

READ_ONLY = 8  # cudaHostRegisterReadOnly
PAGE = mmap.PAGESIZE


def cudart() -> ctypes.CDLL:
    """The libcudart torch loaded (found in this process's maps)."""
    torch.cuda.init()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "libcudart.so" in path:
                lib = ctypes.CDLL(path)
                lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
                lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
                lib.cudaGetErrorString.restype = ctypes.c_char_p
                return lib
    raise RuntimeError("libcudart not found in /proc/self/maps")


class Mapped:
    """A file mapped read-only, its tensors' (name, offset, nbytes, dtype, shape, crc)."""

    def __init__(self, path: pathlib.Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.mm = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)
        self.u8 = np.frombuffer(self.mm, np.uint8)
        self.addr = self.u8.ctypes.data
        t = open_tensors(path)
        self.tensors = []
        for n in t.names:
            mf, off, dtype, shape, check = _device.file_source(t, n)  # type: ignore[misc]
            nbytes = int(np.prod(shape)) * dtype.itemsize
            tdt = getattr(torch, {"bfloat16": "bfloat16"}.get(str(dtype), str(dtype)))
            exp = None if check is None else int(check.expected, 16)
            self.tensors.append((n, off, nbytes, tdt, tuple(shape), exp))
        t.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.host = torch.from_numpy(self.u8)  # read-only view, never written

    def close(self) -> None:
        del self.host
        del self.u8
        self.mm.close()
        os.close(self.fd)


def check(lib: ctypes.CDLL, err: int, what: str) -> None:
    if err:
        raise RuntimeError(f"{what}: cuda error {err} {lib.cudaGetErrorString(err).decode()}")


def chunks(size: int, chunk: int) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos < size:
        end = min(size, pos + chunk)
        out.append((pos, end))
        pos = end
    return out


def register_all(lib: ctypes.CDLL, m: Mapped, parts: list[tuple[int, int]], threads: int) -> float:
    t0 = time.perf_counter()
    if threads <= 1:
        for a, b in parts:
            check(lib, lib.cudaHostRegister(m.addr + a, b - a, READ_ONLY), "register")
    else:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            errs = list(
                pool.map(
                    lambda p: lib.cudaHostRegister(m.addr + p[0], p[1] - p[0], READ_ONLY), parts
                )
            )
        for e in errs:
            check(lib, e, "register")
    return time.perf_counter() - t0


def unregister_all(lib: ctypes.CDLL, m: Mapped, parts: list[tuple[int, int]]) -> float:
    t0 = time.perf_counter()
    for a, _ in parts:
        check(lib, lib.cudaHostUnregister(m.addr + a), "unregister")
    return time.perf_counter() - t0


def copies(m: Mapped, dsts: list[Any], bounds: list[int] | None = None) -> None:
    """Each tensor's bytes copied from the map to its device tensor, cut at ``bounds``
    (registration boundaries) so that no copy spans two registrations."""
    for (_n, off, nbytes, *_), dst in zip(m.tensors, dsts, strict=True):
        flat = dst.reshape(-1).view(torch.uint8)
        pos = 0
        while pos < nbytes:
            end = nbytes
            if bounds is not None:
                nxt = next((b for b in bounds if b > off + pos), None)
                if nxt is not None:
                    end = min(end, nxt - off)
            flat[pos:end].copy_(m.host[off + pos : off + end], non_blocking=True)
            pos = end


def empties(m: Mapped) -> list[Any]:
    return [torch.empty(shape, dtype=tdt, device="cuda") for _, _, _, tdt, shape, _ in m.tensors]


def crc_all(m: Mapped, pool: concurrent.futures.ThreadPoolExecutor, piece: int) -> None:
    """CRC-32C of every tensor over the map, in pieces on ``pool``, combined and compared."""
    k = _kernels.load("crc32c")
    futs = []
    for n, off, nbytes, _, _, exp in m.tensors:
        for a, b in chunks(nbytes, piece):
            futs.append((n, a, b, exp, pool.submit(k.crc32c, m.u8[off + a : off + b])))
    by: dict[str, list[tuple[int, int, int]]] = {}
    for n, a, b, _exp, f in futs:
        by.setdefault(n, []).append((a, b - a, f.result()))
    for n, _off, _nbytes, _, _, exp in m.tensors:
        parts = sorted(by.get(n, []))
        v = parts[0][2] if parts else 0
        for _, ln, c in parts[1:]:
            v = k.crc32c_combine(v, c, ln)
        if exp is not None and v != exp:
            raise RuntimeError(f"crc mismatch {n}: {v:08x} != {exp:08x}")


def hybrid(lib: ctypes.CDLL, m: Mapped, frac: float, ring_threads: int, crc_threads: int,
           repeat: int, chunk: int = 64 << 20) -> list[float]:  # fmt: skip
    """The first ``frac`` of the bytes (whole tensors, in file order) sent by DMA straight from
    the registered map (chunks registered one after another on one thread, each unregistered
    once its copies are done, CRC-32C over the map on ``crc_threads``), the rest through the
    staging ring on ``ring_threads``, both at once."""
    import threading

    from tenfold.interop import _staging

    k = _kernels.load("crc32c")
    dev = torch.device("cuda")
    dsts = empties(m)
    order = sorted(range(len(m.tensors)), key=lambda i: m.tensors[i][1])
    total = sum(t[2] for t in m.tensors)
    direct, acc = [], 0
    for i in order:
        if acc >= frac * total:
            break
        direct.append(i)
        acc += m.tensors[i][2]
    ring_ids = [i for i in order if i not in set(direct)]
    ring = _staging.Ring(_device.TorchBackend(torch, dev))

    def err(name: str) -> Callable[[str], BaseException]:
        return lambda got: RuntimeError(f"crc mismatch {name}: {got}")

    def jobs() -> list[Any]:
        out = []
        for i in ring_ids:
            n, off, nbytes, _, _, exp = m.tensors[i]
            src = m.u8[off : off + nbytes]
            chk = None if exp is None else _staging.Check("crc32c", f"{exp:08x}", err(n))
            out.append(_staging.Job(nbytes, _staging.array_reader(src),
                                    dsts[i].reshape(-1).view(torch.uint8), chk, src))  # fmt: skip
        return out

    def run_direct(stream: Any, pool: concurrent.futures.ThreadPoolExecutor,
                   failed: list[BaseException]) -> None:  # fmt: skip
        try:
            if not direct:
                return
            lo = m.tensors[direct[0]][1] // PAGE * PAGE
            last = m.tensors[direct[-1]]
            hi = min(
                (last[1] + last[2] + PAGE - 1) // PAGE * PAGE, (m.size + PAGE - 1) // PAGE * PAGE
            )
            crcs = []
            for i in direct:
                n, off, nbytes, _, _, exp = m.tensors[i]
                parts = chunks(nbytes, 16 << 20)
                crcs.append((n, exp, [(b - a, pool.submit(k.crc32c, m.u8[off + a : off + b]))
                                      for a, b in parts]))  # fmt: skip
            pending: list[tuple[Any, int]] = []
            with torch.cuda.stream(stream):
                for a, b in chunks(hi - lo, chunk):
                    a, b = lo + a, lo + b
                    check(lib, lib.cudaHostRegister(m.addr + a, b - a, READ_ONLY), "register")
                    for i in direct:
                        _, off, nbytes, *_ = m.tensors[i]
                        s, e = max(off, a), min(off + nbytes, b)
                        if s < e:
                            dsts[i].reshape(-1).view(torch.uint8)[s - off : e - off].copy_(
                                m.host[s:e], non_blocking=True)  # fmt: skip
                    ev = torch.cuda.Event()
                    ev.record(stream)
                    pending.append((ev, a))
                    while pending and pending[0][0].query():
                        check(lib, lib.cudaHostUnregister(m.addr + pending.pop(0)[1]), "unreg")
            for ev, a in pending:
                ev.synchronize()
                check(lib, lib.cudaHostUnregister(m.addr + a), "unregister")
            for n, exp, parts in crcs:
                v = parts[0][1].result()
                for ln, f in parts[1:]:
                    v = k.crc32c_combine(v, f.result(), ln)
                if exp is not None and v != exp:
                    raise RuntimeError(f"crc mismatch {n}")
        except BaseException as e:  # noqa: BLE001
            failed.append(e)

    times = []
    with concurrent.futures.ThreadPoolExecutor(max(1, crc_threads)) as pool:
        for _ in range(repeat + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            failed: list[BaseException] = []
            th = threading.Thread(target=run_direct,
                                  args=(torch.cuda.current_stream(dev), pool, failed))  # fmt: skip
            th.start()
            ring.run(jobs(), threads=ring_threads)
            th.join()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            if failed:
                raise failed[0]
    ring.release()
    return times[1:]  # the first allocated the ring's pinned buffers


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lib = cudart()
    where = pathlib.Path(tempfile.mkdtemp(prefix="tenfold-gpu-diag-"))
    rows: list[dict[str, Any]] = []
    sync = torch.cuda.synchronize

    def add(case: str, times: list[float] | None, total: int, err: str | None = None,
            **extra: Any) -> None:  # fmt: skip
        row: dict[str, Any] = {"case": case, **extra}
        if times:
            row.update(best_s=min(times), median_s=statistics.median(times), times_s=times,
                       gb_per_s=total / min(times) / 1e9)  # fmt: skip
        if err:
            row["error"] = err
        rows.append(row)
        print(f"  {case}: {f'{min(times):.4f} s' if times else err} {extra or ''}", flush=True)

    def attempt(case: str, fn: Callable[[], list[float]], total: int) -> None:
        try:
            add(case, fn(), total)
        except Exception as e:  # noqa: BLE001 - reported, the run goes on
            add(case, None, total, f"{type(e).__name__}: {e}")

    try:
        model = make_model(args.gb, False)
        total = sum(a.nbytes for a in model.values())
        zt = where / "model.zt"
        ztensor.save(zt, model, checksum="crc32c", fsync=False)
        del model
        print(f"{total / 1e9:.3f} GB, file {zt.stat().st_size / 1e9:.3f} GB", flush=True)
        r = args.repeat
        add("copy limit (pinned host -> device)", copy_limit(total, "cuda", r, sync), total)

        def ring_load() -> list[float]:
            return timed(lambda: tenfold.torch.load_file(zt, device="cuda"), r, sync)

        attempt("ring: tenfold .zt crc32c verified (current)", ring_load, total)
        m = Mapped(zt)
        m.u8.sum(dtype=np.uint64)  # page cache warm, map faulted in once
        whole = [(0, (m.size + PAGE - 1) // PAGE * PAGE)]
        for label, parts, threads in (
            ("register whole file", whole, 1),
            ("register 64 MiB chunks, 1 thread", chunks(m.size, 64 << 20), 1),
            ("register 64 MiB chunks, 16 threads", chunks(m.size, 64 << 20), 16),
            ("register 16 MiB chunks, 16 threads", chunks(m.size, 16 << 20), 16),
        ):
            try:
                reg, unreg = [], []
                for _ in range(r):
                    reg.append(register_all(lib, m, parts, threads))
                    unreg.append(unregister_all(lib, m, parts))
                add(label, reg, total, unregister_s=min(unreg))
            except Exception as e:  # noqa: BLE001
                add(label, None, total, f"{type(e).__name__}: {e}")
                try:
                    unregister_all(lib, m, parts)
                except Exception:  # noqa: BLE001, S110
                    pass

        def pageable() -> list[float]:
            dsts = empties(m)
            return timed(lambda: copies(m, dsts), r, sync)

        attempt("map -> device, no registration (pageable)", pageable, total)

        def registered(
            verify: bool, parts: list[tuple[int, int]], threads: int
        ) -> Callable[[], list[float]]:
            bounds = [b for _, b in parts]

            def run() -> list[float]:
                dsts = empties(m)
                times = []
                with concurrent.futures.ThreadPoolExecutor(16) as pool:
                    for _ in range(r):
                        sync()
                        t0 = time.perf_counter()
                        register_all(lib, m, parts, threads)
                        copies(m, dsts, bounds)
                        if verify:
                            crc_all(m, pool, 16 << 20)
                        sync()
                        unregister_all(lib, m, parts)
                        times.append(time.perf_counter() - t0)
                return times

            return run

        for frac, rt, ct in ((0.0, 16, 1), (0.35, 14, 2), (0.5, 12, 4), (0.5, 14, 2),
                             (0.65, 12, 4), (0.8, 10, 6)):  # fmt: skip
            attempt(f"hybrid: {frac:.0%} registered DMA (crc {ct} thr), rest ring {rt} thr",
                    lambda f=frac, a=rt, b=ct: hybrid(lib, m, f, a, b, r), total)  # fmt: skip
        attempt("registered whole, copy, unverified", registered(False, whole, 1), total)
        attempt("registered whole, copy + crc32c 16 thr", registered(True, whole, 1), total)
        c64 = chunks(m.size, 64 << 20)
        attempt("registered 64 MiB x16 thr, copy + crc", registered(True, c64, 16), total)

        def pipelined() -> list[float]:
            """Chunks registered by workers; each chunk's copies enqueued once it is."""
            parts = chunks(m.size, 64 << 20)
            dsts = empties(m)
            times = []
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                for _ in range(r):
                    sync()
                    t0 = time.perf_counter()
                    futs = [pool.submit(lib.cudaHostRegister, m.addr + a, b - a, READ_ONLY)
                            for a, b in parts]  # fmt: skip
                    crc = pool.submit(crc_all, m, pool, 16 << 20)
                    done = 0
                    for (a, b), f in zip(parts, futs, strict=True):
                        check(lib, f.result(), "register")
                        done = b
                        for (_n, off, nbytes, *_), dst in zip(m.tensors, dsts, strict=True):
                            lo, hi = max(off, a), min(off + nbytes, b)
                            if lo < hi:
                                dst.reshape(-1).view(torch.uint8)[lo - off : hi - off].copy_(
                                    m.host[lo:hi], non_blocking=True)  # fmt: skip
                    assert done >= m.size
                    crc.result()
                    sync()
                    unregister_all(lib, m, parts)
                    times.append(time.perf_counter() - t0)
            return times

        attempt("pipelined: register 64 MiB chunks on workers + copy + crc", pipelined, total)
        m.close()
    finally:
        shutil.rmtree(where, ignore_errors=True)
    limit = rows[0].get("best_s")
    print()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {os.cpu_count()} CPUs")
    for row in rows:
        frac = f"{limit / row['best_s']:.0%}" if limit and "best_s" in row else ""
        shown = (
            f"{row['best_s']:.4f} s {row['gb_per_s']:7.1f} GB/s {frac:>5}"
            if "best_s" in row
            else row.get("error", "")
        )
        print(f"{row['case']:58} {shown}")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

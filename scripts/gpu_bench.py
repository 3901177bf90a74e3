"""Loading a checkpoint onto the GPU: tenfold against safetensors and the pinned copy limit.

    python scripts/gpu_bench.py                       # ~3 GB bf16, best of 5, onto cuda
    python scripts/gpu_bench.py --gb 1 --repeat 3 --out result.json
    python scripts/gpu_bench.py --smoke               # tiny model on the CPU (CI: the script runs)

One run, on one machine, with the page cache warm (each file is loaded once untimed first):

* the copy limit: one pinned host buffer of the checkpoint's total bytes copied to the device
  (``copy_(non_blocking=True)`` then ``synchronize``), the best any loader can do from host
  memory;
* ``safetensors.torch.load_file(path, device="cuda")``;
* ``tenfold.torch.load_file(path, device="cuda")`` of the same tensors as ``.safetensors``, as
  zTensor 0.1.0 with a CRC-32C per tensor and as zTensor v2 (xxh3 per tensor), each with
  checksums verified and with ``verify_checksums=False``; and, as diagnostics, the 0.1.0 file
  read with ``pread`` instead of the memory map, the host side alone (the staging ring
  filled, checked or not, with no device copy), the device tensors allocated alone, and the
  staging ring with other buffer, piece and thread settings;
* the kernels alone (``--kernels-mib`` MiB, 1 GiB by default, split over 1/2/4/8/16 threads):
  tenfold's CRC-32C, ``copy_crc32c`` into a pinned buffer (stores cached and streamed), a
  plain NumPy copy, and on one thread the ``crc32c`` package and xxh3-64 for comparison.

The model is llama-like (Qwen2-style q/k/v biases): 16 layers of 12 tensors plus embedding,
final norm and head, 195 tensors, the hidden size chosen to make ``--gb`` GB in bfloat16. Every
timing has ``torch.cuda.synchronize()`` inside it. Prints a table (best and median seconds,
GB/s, fraction of the copy limit, speed against safetensors) and writes it with the machine's
facts as JSON to ``--out``. Tenfold's result is checked bit for bit against safetensors' once.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

try:
    import tenfold
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lib"))
    import tenfold
import ml_dtypes
import numpy as np
import torch

import tenfold.torch
from tenfold import ztensor
from tenfold.core import parallel
from tenfold.interop import _device, _staging

VOCAB = 32000
LAYERS = 16


def shapes(gb: float, smoke: bool) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of a llama-like model of about ``gb`` GB in bfloat16."""
    if smoke:
        h, inter, vocab, layers = 64, 176, 256, 2
    else:
        vocab, layers = VOCAB, LAYERS
        # params = layers * (4 h^2 + 3 h * 2.6875 h + 5 h) + 2 * vocab * h + h
        a, b = layers * (4 + 3 * 2.6875), 2 * vocab + layers * 5
        h = (-b + (b * b + 4 * a * gb * 1e9 / 2) ** 0.5) / (2 * a)
        h = max(128, int(round(h / 128)) * 128)
        inter = int(round(h * 2.6875 / 128)) * 128
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, h)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for proj in ("q", "k", "v", "o"):
            out[p + f"self_attn.{proj}_proj.weight"] = (h, h)
        for proj in ("q", "k", "v"):
            out[p + f"self_attn.{proj}_proj.bias"] = (h,)
        out[p + "mlp.gate_proj.weight"] = (inter, h)
        out[p + "mlp.up_proj.weight"] = (inter, h)
        out[p + "mlp.down_proj.weight"] = (h, inter)
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "post_attention_layernorm.weight"] = (h,)
    out["model.norm.weight"] = (h,)
    out["lm_head.weight"] = (vocab, h)
    return out


def make_model(gb: float, smoke: bool) -> dict[str, np.ndarray]:
    """bfloat16 arrays of random bits (a 16 MiB random block, tiled: fast to make)."""
    block = np.random.default_rng(28).integers(0, 1 << 16, 8 << 20, dtype=np.uint16)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    out = {}
    for i, (name, shape) in enumerate(shapes(gb, smoke).items()):
        n = int(np.prod(shape))
        a = np.resize(np.roll(block, i), n)  # a different start per tensor
        out[name] = a.view(bf16).reshape(shape)
    return out


def write_files(model: dict[str, np.ndarray], where: pathlib.Path) -> dict[str, pathlib.Path]:
    from safetensors.torch import save_file

    paths = {
        "safetensors": where / "model.safetensors",
        "zt": where / "model.zt",
        "zt2": where / "model-v2.zt",
    }
    t0 = time.perf_counter()
    as_torch = {
        k: torch.from_numpy(v.view(np.uint16)).view(torch.bfloat16) for k, v in model.items()
    }
    save_file(as_torch, str(paths["safetensors"]))
    ztensor.save(paths["zt"], model, checksum="crc32c", fsync=False)
    ztensor.save(paths["zt2"], model, generation=2, fsync=False)
    print(f"wrote the three files in {time.perf_counter() - t0:.1f} s", flush=True)
    return paths


def timed(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> list[float]:
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
        del out
    return times


def copy_limit(total: int, device: str, repeat: int, sync: Callable[[], None]) -> list[float]:
    """Seconds to copy ``total`` bytes from one pinned host buffer to the device."""
    cuda = device.startswith("cuda")
    host = torch.empty(total, dtype=torch.uint8, pin_memory=cuda)
    host.fill_(7)
    dst = torch.empty(total, dtype=torch.uint8, device=device)
    return timed(lambda: dst.copy_(host, non_blocking=cuda), repeat, sync)


def host_only(path: pathlib.Path, repeat: int, verify: bool = True) -> list[float]:
    """The staging ring filled from ``path`` and checked (unless not ``verify``), with no
    device copy (diagnostic)."""

    class NoDevice:
        def alloc(self, n: int) -> tuple[np.ndarray, Any]:
            a = np.empty(n, np.uint8)
            return a, a

        def copy(self, *args: Any) -> None:
            pass

        def record(self) -> None:
            return None

        def wait(self, ev: Any) -> None:
            pass

        def synchronize(self) -> None:
            pass

    from tenfold.interop.frameworks import open_tensors

    ring = _staging.Ring(NoDevice())

    def run() -> None:
        t = open_tensors(path)
        try:
            jobs = []
            for n in t.names:
                got = _device.file_source(t, n)
                assert got is not None, n
                mf, off, dtype, shape, check = got
                nbytes = int(np.prod(shape)) * dtype.itemsize
                src = mf.u8(off, nbytes, n)
                check = check if verify else None
                jobs.append(_staging.Job(nbytes, _staging.array_reader(src), None, check, src))
            ring.run(jobs)
        finally:
            t.close()

    return timed(run, repeat, lambda: None)


def alloc_only(
    path: pathlib.Path, device: str, repeat: int, sync: Callable[[], None]
) -> list[float]:
    """``torch.empty`` of every tensor of ``path`` on the device, nothing copied (diagnostic:
    what the load spends allocating before its first copy)."""
    specs = [(t.shape, t.dtype) for t in tenfold.torch.load_file(path).values()]

    def run() -> Any:
        return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in specs]

    return timed(run, repeat, sync)


def cold(fn: Callable[[], Any], device: str, repeat: int, sync: Callable[[], None]) -> list[float]:
    """``fn`` timed with the CUDA caching allocator emptied before each run (as a first load
    in a process finds it: every device tensor a ``cudaMalloc``)."""
    times = []
    for _ in range(repeat):
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
        del out
    return times


def kernel_rates(mib: int, device: str, repeat: int) -> list[dict[str, Any]]:
    """GB/s of the checksum and copy kernels on ``mib`` MiB, split over 1..16 threads (each
    thread one contiguous part; the best of ``repeat``)."""
    import concurrent.futures

    import xxhash

    from tenfold import _kernels

    n = mib << 20
    src = np.resize(np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8), n)
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=device.startswith("cuda"))
    dst = pinned.numpy()
    dst.fill(1)  # touched: no page faults in the timed runs
    rows: list[dict[str, Any]] = []
    k = None if _kernels.pure_python() else _kernels.load("crc32c")
    if k is not None and k.implementation() == "python":
        k = None

    def rate(case: str, threads: int, fn: Callable[[int, int], Any]) -> None:
        bounds = [n * i // threads // 4096 * 4096 for i in range(threads)] + [n]
        parts = list(zip(bounds[:-1], bounds[1:], strict=True))
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                list(pool.map(lambda p: fn(*p), parts))
                times.append(time.perf_counter() - t0)
        gbs = n / min(times) / 1e9
        rows.append({"case": case, "threads": threads, "gb_per_s": gbs, "best_s": min(times)})
        print(f"  kernel {case}, {threads} threads: {gbs:.1f} GB/s", flush=True)

    import crc32c as pkg

    rate("crc32c package", 1, lambda a, b: pkg.crc32c(src[a:b]))
    rate("xxh3-64 (xxhash)", 1, lambda a, b: xxhash.xxh3_64_intdigest(src[a:b]))
    counts = [t for t in (1, 2, 4, 8, 16) if t <= max(1, parallel.threads())] or [1]
    for t in counts:
        rate("np.copyto", t, lambda a, b: np.copyto(dst[a:b], src[a:b]))
    if k is None:
        return rows
    x = _kernels.load("xxh3")
    for t in (1, counts[-1]):
        rate(f"tenfold xxh3-64 ({x.implementation()})", t, lambda a, b: x.xxh3_64(src[a:b]))
    for t in counts:
        rate(f"tenfold crc32c ({k.implementation()})", t, lambda a, b: k.crc32c(src[a:b]))
    for t in counts:
        rate("tenfold copy_crc32c", t, lambda a, b: k.copy_crc32c(src[a:b], dst[a:b]))
    old = k._stream_stores(True)
    try:
        rate("tenfold copy_crc32c, streaming stores", counts[-1],
             lambda a, b: k.copy_crc32c(src[a:b], dst[a:b]))  # fmt: skip
    finally:
        k._stream_stores(old)
    return rows


def same_bits(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if list(a) != list(b) and sorted(a) != sorted(b):
        return False
    return all(
        a[k].dtype == b[k].dtype and torch.equal(a[k].view(torch.int16), b[k].view(torch.int16))
        for k in a
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=3.0, help="checkpoint size in GB (default 3)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of each case (best kept)")
    ap.add_argument("--dir", default=None, help="where the files go (default: a temporary dir)")
    ap.add_argument("--out", default=None, help="also write the results as JSON here")
    ap.add_argument("--device", default=None, help="default cuda (cpu with --smoke)")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny model, CPU, 2 runs: checks the script"
    )
    ap.add_argument("--keep", action="store_true", help="keep the files")
    ap.add_argument(
        "--kernels-mib", type=int, default=None,
        help="buffer of the kernel rates in MiB (default 1024; 16 with --smoke; 0: skip them)",
    )  # fmt: skip
    ap.add_argument(
        "--check", action="store_true", help="only check correctness on the device (seconds)"
    )
    args = ap.parse_args(argv)
    device = args.device or ("cpu" if args.smoke else "cuda")
    repeat = 2 if args.smoke else args.repeat
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("no CUDA device: use --smoke (or --device cpu)", file=sys.stderr)
        return 2
    if not cuda:
        _device.FORCE_CPU = True  # the staging ring on the CPU (unpinned buffers)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    where = pathlib.Path(args.dir or tempfile.mkdtemp(prefix="tenfold-gpu-bench-"))
    where.mkdir(parents=True, exist_ok=True)
    if args.check:
        try:
            return check(where, device, sync)
        finally:
            if not args.keep and args.dir is None:
                shutil.rmtree(where, ignore_errors=True)
    facts = {
        "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "torch": torch.__version__,
        "tenfold": tenfold.__version__,
        "python": platform.python_version(),
        "os.cpu_count": os.cpu_count(),
        "sched_getaffinity": len(os.sched_getaffinity(0)),
        "staging_threads": parallel.threads(),
        "TENFOLD_THREADS": os.environ.get(parallel.THREADS_ENV),
        "ring": f"{_staging.BUFFERS} x {_staging.BUFFER_BYTES >> 20} MiB",
        "compiled_kernels_missing": _missing_kernels(),
        "crc32c": _crc32c_facts(),
        "repeat": repeat,
    }
    try:
        import safetensors

        facts["safetensors"] = safetensors.__version__
    except ImportError:
        pass
    print(json.dumps(facts), flush=True)
    rows: list[dict[str, Any]] = []
    try:
        model = make_model(args.gb, args.smoke)
        total = sum(a.nbytes for a in model.values())
        facts["tensors"] = len(model)
        facts["total_bytes"] = total
        print(f"{len(model)} tensors, {total / 1e9:.3f} GB bf16", flush=True)
        paths = write_files(model, where)
        del model
        cases = build_cases(paths, device)
        rows = run_cases(cases, total, device, repeat, sync, paths)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(where, ignore_errors=True)
    mib = args.kernels_mib if args.kernels_mib is not None else (16 if args.smoke else 1024)
    kernels: list[dict[str, Any]] = []
    if mib > 0:
        try:
            kernels = kernel_rates(mib, device, 3 if not args.smoke else 1)
        except Exception as e:  # noqa: BLE001 - reported; the loads were measured
            kernels = [{"case": "kernel rates", "error": f"{type(e).__name__}: {e}"}]
            print(f"  kernel rates: {kernels[0]['error']}", flush=True)
    report = {"facts": facts, "rows": rows, "kernels": kernels, "verdict": verdict(rows)}
    print_table(rows, facts)
    print_kernels(kernels)
    print(json.dumps(report["verdict"]), flush=True)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _crc32c_facts() -> str:
    from tenfold.core import checksums

    try:
        return checksums.crc32c_implementation()
    except Exception as e:  # noqa: BLE001 - a fact, not a failure
        return f"{type(e).__name__}: {e}"


def _missing_kernels() -> list[str]:
    from tenfold import _kernels

    missing = []
    for family in _kernels.FAMILIES:
        try:
            _kernels.load(family, "compiled")
        except ImportError:
            missing.append(family)
    return missing


def check(where: pathlib.Path, device: str, sync: Callable[[], None]) -> int:
    """Every path of the device load on a small model, against the source bits: the three
    formats, a tensor larger than a ring buffer, tiny and empty tensors, ``get_tensor`` and
    a slice, a corrupt tensor (the reader's error), ``verify_checksums=False``. 0 when all
    hold (each result is printed)."""
    from safetensors.torch import save_file

    from tenfold.errors import IntegrityError

    rng = np.random.default_rng(5)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    big = _staging.BUFFER_BYTES // 2 + 12345  # elements: more bytes than one ring buffer
    model = {
        "big": rng.integers(0, 1 << 16, big, dtype=np.uint16).view(bf16),
        "w": rng.standard_normal((257, 129)).astype(np.float32),
        "tiny": np.arange(3, dtype=np.int64),
        "empty": np.zeros((0, 5), np.float16),
        "scalar": np.array(1.5, np.float64),
        "mask": rng.integers(0, 2, 77).astype(bool),
        **{f"n{i}": rng.standard_normal(64).astype(np.float16) for i in range(40)},
    }
    paths = {
        "safetensors": where / "c.safetensors",
        "zt": where / "c.zt",
        "zt2": where / "c2.zt",
        "zt-zstd": where / "c3.zt",
    }
    save_file(
        {
            k: torch.from_numpy(v.view(np.uint16)).view(torch.bfloat16) if k == "big" else
            torch.from_numpy(v.copy())
            for k, v in model.items()
        },
        str(paths["safetensors"]),
    )  # fmt: skip
    ztensor.save(paths["zt"], model, checksum="crc32c", fsync=False)
    ztensor.save(paths["zt2"], model, generation=2, fsync=False)
    ztensor.save(paths["zt-zstd"], model, encoding="zstd", checksum="crc32c", fsync=False)
    failures = 0

    def same(t: Any, a: np.ndarray) -> bool:
        t = t.detach().to("cpu")
        return tuple(t.shape) == a.shape and (
            t.reshape(-1).view(torch.uint8).numpy().tobytes() == np.ascontiguousarray(a).tobytes()
        )

    def report(what: str, ok: bool, detail: str = "") -> None:
        nonlocal failures
        failures += not ok
        print(f"check {'ok  ' if ok else 'FAIL'} {what} {detail}", flush=True)

    for kind, path in paths.items():
        try:
            got = tenfold.torch.load_file(path, device=device)
            sync()
            bad = [k for k, a in model.items() if not same(got[k], a)]
            on = {str(t.device) for t in got.values()}
            report(f"load_file {kind}", not bad and len(got) == len(model), f"{on} {bad[:3]}")
            with tenfold.torch.safe_open(path, device=device) as f:
                ok = all(same(f.get_tensor(k), model[k]) for k in ("big", "w", "empty", "tiny"))
                part = f.get_slice("w")[3:100:2, 7:]
                sync()
                ok = ok and same(part, model["w"][3:100:2, 7:])
            report(f"safe_open {kind}", ok)
        except Exception as e:  # noqa: BLE001 - reported
            report(f"{kind}", False, f"{type(e).__name__}: {e}")
    for kind in ("zt", "zt2"):
        path = paths[kind]
        with tenfold.open(path) as r:
            plans = getattr(r, "_plans", None)
            off, length = plans["w"][:2] if plans else (r.info("w").offset, r.info("w").size)
        with open(path, "r+b") as fh:
            fh.seek(off + length // 2)
            b = fh.read(1)
            fh.seek(off + length // 2)
            fh.write(bytes([b[0] ^ 1]))
        try:
            tenfold.torch.load_file(path, device=device)
            report(f"corrupt {kind} raises", False, "no error")
        except IntegrityError as e:
            report(f"corrupt {kind} raises", "'w'" in str(e), str(e))
        got = tenfold.torch.load_file(path, device=device, verify_checksums=False)
        sync()
        report(f"corrupt {kind} unverified loads", same(got["big"], model["big"]))
    leftover = [t.name for t in __import__("threading").enumerate() if "staging" in t.name]
    report("no staging thread left", not leftover, str(leftover))
    print(f"check: {failures} failure(s)", flush=True)
    return 1 if failures else 0


def build_cases(paths: dict[str, pathlib.Path], device: str) -> list[tuple[str, Callable[[], Any]]]:
    from safetensors.torch import load_file as st_load

    def tf(path: pathlib.Path, **kw: Any) -> Callable[[], Any]:
        return lambda: tenfold.torch.load_file(path, device=device, **kw)

    def varied(path: pathlib.Path, **settings: Any) -> Callable[[], Any]:
        """The load with module settings (READ, BUFFERS, BUFFER_BYTES) or TENFOLD_THREADS
        changed for its duration."""

        def run() -> Any:
            saved = {}
            env = settings.get("threads")
            old_env = os.environ.get(parallel.THREADS_ENV)
            for key, value in settings.items():
                mod = _device if key == "READ" else _staging
                if key != "threads":
                    saved[key] = getattr(mod, key)
                    setattr(mod, key, value)
            if env is not None:
                os.environ[parallel.THREADS_ENV] = str(env)
            try:
                return tenfold.torch.load_file(path, device=device)
            finally:
                for key, value in saved.items():
                    setattr(_device if key == "READ" else _staging, key, value)
                if env is not None:
                    if old_env is None:
                        os.environ.pop(parallel.THREADS_ENV, None)
                    else:
                        os.environ[parallel.THREADS_ENV] = old_env

        return run

    return [
        (
            "safetensors.torch .safetensors",
            lambda: st_load(str(paths["safetensors"]), device=device),
        ),
        ("tenfold .safetensors", tf(paths["safetensors"])),
        ("tenfold .zt crc32c verified", tf(paths["zt"])),
        ("tenfold .zt crc32c unverified", tf(paths["zt"], verify_checksums=False)),
        ("tenfold .zt v2 xxh3 verified", tf(paths["zt2"])),
        ("tenfold .zt v2 xxh3 unverified", tf(paths["zt2"], verify_checksums=False)),
        ("diag: tenfold .zt crc32c verified, pread", varied(paths["zt"], READ="pread")),
        ("diag: tenfold .zt v2 xxh3 verified, pread", varied(paths["zt2"], READ="pread")),
        ("diag: tenfold .zt crc32c verified, ring 8 x 64 MiB", varied(paths["zt"], BUFFERS=8)),
        (
            "diag: tenfold .zt crc32c verified, ring 8 x 16 MiB",
            varied(paths["zt"], BUFFERS=8, BUFFER_BYTES=16 << 20, PIECE=2 << 20),
        ),
        ("diag: tenfold .zt crc32c verified, 8 threads", varied(paths["zt"], threads=8)),
        ("diag: tenfold .zt crc32c verified, 4 threads", varied(paths["zt"], threads=4)),
        ("diag: tenfold .zt crc32c verified, piece 1 MiB", varied(paths["zt"], PIECE=1 << 20)),
        ("diag: tenfold .zt crc32c verified, piece 4 MiB", varied(paths["zt"], PIECE=4 << 20)),
        ("diag: tenfold .zt crc32c verified, piece 32 MiB", varied(paths["zt"], PIECE=32 << 20)),
        (
            "diag: tenfold .zt crc32c verified, ring 3 x 128 MiB",
            varied(paths["zt"], BUFFERS=3, BUFFER_BYTES=128 << 20),
        ),
        ("diag: tenfold .safetensors, 8 threads", varied(paths["safetensors"], threads=8)),
        ("diag: tenfold .safetensors, pread", varied(paths["safetensors"], READ="pread")),
    ]


def run_cases(
    cases: list[tuple[str, Callable[[], Any]]],
    total: int,
    device: str,
    repeat: int,
    sync: Callable[[], None],
    paths: dict[str, pathlib.Path],
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(name: str, times: list[float] | None, error: str | None = None, **extra: Any) -> None:
        row: dict[str, Any] = {"case": name, **extra}
        if times:
            row.update(best_s=min(times), median_s=statistics.median(times), times_s=times,
                       gb_per_s=total / min(times) / 1e9)  # fmt: skip
        if error:
            row["error"] = error
        rows.append(row)
        shown = f"{min(times):.4f} s" if times else error
        print(f"  {name}: {shown}", flush=True)

    try:
        add("copy limit (pinned host -> device)", copy_limit(total, device, repeat, sync))
    except Exception as e:  # noqa: BLE001 - reported, the other cases still run
        add("copy limit (pinned host -> device)", None, f"{type(e).__name__}: {e}")
    reference = None
    for name, fn in cases:
        try:
            fn()  # warm: page cache, CUDA context, pinned buffers
            sync()
            if reference is None:
                reference = fn()
                extra: dict[str, Any] = {}
            else:
                got = fn()
                sync()
                extra = {"same_bits_as_safetensors": same_bits(got, reference)}
                del got
            add(name, timed(fn, repeat, sync), **extra)
        except Exception as e:  # noqa: BLE001
            add(name, None, f"{type(e).__name__}: {e}")
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    del reference
    for name, diag in (
        ("diag: host side only (.zt crc32c, no device copy)",
         lambda: host_only(paths["zt"], repeat)),
        ("diag: host side only (.zt unverified, no device copy)",
         lambda: host_only(paths["zt"], repeat, verify=False)),
        ("diag: device tensors allocated only (no copy)",
         lambda: alloc_only(paths["safetensors"], device, repeat, sync)),
        ("diag: cold allocator, device tensors allocated only",
         lambda: cold(lambda: alloc_only(paths["safetensors"], device, 1, sync), device, repeat,
                      sync)),
        ("diag: cold allocator, tenfold .zt crc32c verified",
         lambda: cold(lambda: tenfold.torch.load_file(paths["zt"], device=device), device,
                      repeat, sync)),
        ("diag: cold allocator, safetensors.torch .safetensors",
         lambda: cold(lambda: _st_load(paths["safetensors"], device), device, repeat, sync)),
    ):  # fmt: skip
        try:
            add(name, diag())
        except Exception as e:  # noqa: BLE001
            add(name, None, f"{type(e).__name__}: {e}")
    limit = _best(rows, "copy limit")
    st = _best(rows, "safetensors.torch")
    for r in rows:
        if "best_s" in r:
            if limit:
                r["of_copy_limit"] = limit / r["best_s"]
            if st:
                r["x_safetensors"] = st / r["best_s"]
    return rows


def _st_load(path: pathlib.Path, device: str) -> Any:
    from safetensors.torch import load_file

    return load_file(str(path), device=device)


def _best(rows: list[dict[str, Any]], prefix: str) -> float | None:
    for r in rows:
        if r["case"].startswith(prefix) and "best_s" in r:
            return float(r["best_s"])
    return None


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 28's bar: .safetensors and checksummed .zt at >= 80% of the copy limit, and at
    least 4x safetensors."""
    out: dict[str, Any] = {}
    for case in (
        "tenfold .safetensors",
        "tenfold .zt crc32c verified",
        "tenfold .zt v2 xxh3 verified",
    ):
        r = next((r for r in rows if r["case"] == case), None)
        if r is None or "best_s" not in r:
            out[case] = "not measured"
            continue
        frac, x = r.get("of_copy_limit"), r.get("x_safetensors")
        out[case] = {
            "of_copy_limit": frac,
            "x_safetensors": x,
            "met": bool(frac is not None and x is not None and frac >= 0.8 and x >= 4),
        }
    return out


def print_table(rows: list[dict[str, Any]], facts: dict[str, Any]) -> None:
    print()
    print(
        f"{facts['device']}, torch {facts['torch']}, {facts['os.cpu_count']} CPUs "
        f"({facts['sched_getaffinity']} usable, {facts['staging_threads']} staging threads), "
        f"{facts.get('tensors')} tensors, {facts.get('total_bytes', 0) / 1e9:.2f} GB"
    )
    head = f"{'case':52} {'best s':>8} {'median s':>9} {'GB/s':>7} {'of limit':>9} {'x st':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        if "best_s" not in r:
            print(f"{r['case']:52} {r.get('error', '')}")
            continue
        frac = f"{r['of_copy_limit']:.0%}" if "of_copy_limit" in r else ""
        x = f"{r['x_safetensors']:.2f}" if "x_safetensors" in r else ""
        print(f"{r['case']:52} {r['best_s']:8.4f} {r['median_s']:9.4f} {r['gb_per_s']:7.1f} "
              f"{frac:>9} {x:>6}")  # fmt: skip


def print_kernels(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print()
    head = f"{'kernel (one buffer split over threads)':52} {'threads':>7} {'GB/s':>7}"
    print(head)
    print("-" * len(head))
    for r in rows:
        if "gb_per_s" not in r:
            print(f"{r['case']:52} {r.get('error', '')}")
            continue
        print(f"{r['case']:52} {r['threads']:7d} {r['gb_per_s']:7.1f}")


if __name__ == "__main__":
    sys.exit(main())

"""zTensor cases for scripts/bench_peers.py: tenfold vs ztensor 0.1.4, safetensors and NumPy.

Data: 1 GiB of float32 in 64 tensors of 4096 x 1024 (``--quick``: 64 MiB), written once into a
temporary directory; every case runs with the page cache warm (each file is read once before
timing).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
from _timing import best, row

import tenfold.ztensor as zt
from tenfold.core.compression import zstd_compress, zstd_decompress_into


def touch(arrays) -> int:
    """Read every byte (an OR-reduction over u64 words; memory bound)."""
    acc = 0
    for a in arrays:
        acc |= int(np.bitwise_or.reduce(a.reshape(-1).view(np.uint64)))
    return acc


def _optional(name):
    try:
        return __import__(name, fromlist=["_"])
    except ImportError:
        return None


def run(quick: bool) -> list[dict]:
    rows = []
    n_tensors = 64
    rows_per = 4096 if not quick else 256
    rng = np.random.default_rng(0)
    tensors = {
        f"layer{i:02d}.weight": rng.standard_normal((rows_per, 1024), dtype=np.float32)
        for i in range(n_tensors)
    }
    nbytes = sum(a.nbytes for a in tensors.values())
    gib = nbytes / 2**30
    tmp = tempfile.mkdtemp(prefix="tenfold-bench-")
    try:
        zpath = os.path.join(tmp, "m.zt")
        zt.save(zpath, tensors, fsync=False)
        npy = os.path.join(tmp, "m.npy")
        np.save(npy, np.concatenate([a.reshape(-1) for a in tensors.values()]))
        st = _optional("safetensors.numpy")
        zt014 = _optional("ztensor")
        stpath = os.path.join(tmp, "m.safetensors")
        if st is not None:
            st.save_file(tensors, stpath)
        size_note = f"{gib:.3g} GiB float32, {n_tensors} tensors"

        # -- open and map every tensor ---------------------------------------------------
        def open_tenfold():
            with zt.Reader(zpath) as r:
                return [r[n] for n in r]

        t_open = best(open_tenfold, 20)
        if zt014 is not None and hasattr(zt014.Reader, "read_tensor"):

            def open_zt014():
                r = zt014.Reader(zpath)
                return [r.read_tensor(n) for n in r.get_tensor_names()]

            rows.append(
                row(
                    "open + map all tensors",
                    t_open,
                    "ztensor 0.1.4",
                    best(open_zt014, 20),
                    target="< 2 ms",
                    note=size_note,
                )
            )
        else:
            rows.append(row("open + map all tensors", t_open, target="< 2 ms", note=size_note))

        # -- touch every byte through the views vs np.memmap of one .npy -------------------
        views = open_tenfold()
        touch(views)
        t_touch = best(lambda: touch(views), 5)
        mm = np.load(npy, mmap_mode="r")
        touch([mm])
        t_mm = best(lambda: touch([mm]), 5)
        rows.append(
            row(
                "touch every byte (GB/s)",
                nbytes / t_touch / 1e9,
                "np.memmap .npy",
                nbytes / t_mm / 1e9,
                unit="GB/s",
                higher_is_better=True,
                target=">= 12 GB/s",
                note="same reduction over the mapped bytes",
            )
        )
        views = mm = None  # release the maps

        # -- load(copy=True) --------------------------------------------------------------
        t_load = best(lambda: zt.load(zpath, copy=True), 5)
        if st is not None:
            rows.append(
                row(
                    "load(copy=True)",
                    t_load,
                    "safetensors.numpy.load_file",
                    best(lambda: st.load_file(stpath), 5),
                    target=">= 2x",
                    note=f"{t_load / gib:.3f} s/GiB",
                )
            )
        rows.append(
            row(
                "load(copy=True) vs np.load .npy",
                t_load,
                "np.load",
                best(lambda: np.load(npy), 5),
                note="one array, same bytes",
            )
        )

        # -- write: to a new file (targets removed, untimed, before each run), and over an
        # existing file (ext4 then starts writeback at the rename or truncation)
        out = os.path.join(tmp, "w")
        flat = np.concatenate([a.reshape(-1) for a in tensors.values()])

        def fresh(path):
            return lambda: os.path.exists(path) and os.unlink(path)

        def sync_fresh(path):
            def f():
                fresh(path)()
                os.sync()

            return f

        t_w = best(lambda: zt.save(out + ".zt", tensors, fsync=False), 3, sync_fresh(out + ".zt"))
        t_w_sync = best(lambda: zt.save(out + ".zt", tensors), 3, sync_fresh(out + ".zt"))
        t_np = best(lambda: np.save(out + ".npy", flat), 3, sync_fresh(out + ".npy"))
        if st is not None:
            t_st = best(
                lambda: st.save_file(tensors, out + ".safetensors"),
                3,
                sync_fresh(out + ".safetensors"),
            )
            rows.append(
                row(
                    "save to a new file (fsync=False)",
                    t_w,
                    "safetensors.numpy.save_file",
                    t_st,
                    target=">= 1.5x",
                )
            )
        rows.append(
            row(
                "save to a new file (fsync=False)",
                t_w,
                "np.save",
                t_np,
                target="within 1.3x (ratio >= 0.77)",
            )
        )
        rows.append(
            row(
                "save to a new file (default: fsync + rename)",
                t_w_sync,
                "np.save (no fsync)",
                t_np,
                note="the fsync is the durability cost",
            )
        )
        t_wo = best(lambda: zt.save(out + ".zt", tensors, fsync=False), 3, os.sync)
        t_npo = best(lambda: np.save(out + ".npy", flat), 3, os.sync)
        if st is not None:
            t_sto = best(lambda: st.save_file(tensors, out + ".safetensors"), 3, os.sync)
            rows.append(
                row(
                    "save over an existing file (fsync=False)",
                    t_wo,
                    "safetensors.numpy.save_file",
                    t_sto,
                    target=">= 1.5x",
                )
            )
        rows.append(
            row(
                "save over an existing file (fsync=False)",
                t_wo,
                "np.save",
                t_npo,
                note="atomic rename vs in-place truncation",
            )
        )
        flat = None  # release 1 GiB

        # -- zstd decode into a preallocated buffer ----------------------------------------
        bf16 = rng.standard_normal(nbytes // 8, dtype=np.float32).view(np.uint32) >> 16
        bf16 = bf16.astype(np.uint16)  # bfloat16 bit patterns of N(0, 1)
        frame = zstd_compress(bf16, 3)
        dst = np.empty(bf16.nbytes, np.uint8)
        t_dec = best(lambda: zstd_decompress_into(frame, dst), 5)
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        t_plain = best(lambda: dctx.decompress(frame), 5)
        rows.append(
            row(
                "zstd decode (GB/s)",
                bf16.nbytes / t_dec / 1e9,
                "zstandard.decompress",
                bf16.nbytes / t_plain / 1e9,
                unit="GB/s",
                higher_is_better=True,
                target=">= 0.8 GB/s",
                note=f"level 3, bf16-like, ratio {bf16.nbytes / len(frame):.2f}",
            )
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows

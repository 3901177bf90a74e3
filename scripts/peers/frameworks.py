"""PyTorch cases for scripts/bench_peers.py: tenfold.torch vs safetensors.torch.

Data: 1 GiB of float32 in 256 tensors of 1024 x 1024 (``--quick``: 64 MiB), written once as
``.zt`` (without and with per-tensor CRC-32C) and as ``.safetensors``; plus 4096 small tensors
(64 x 64) for the per-tensor cost. Page cache warm (every file is read once before timing);
torch runs with one thread so that touching the data is not a race between page faults.

Both loaders are lazy: ``load_file`` maps the file and returns tensors over the map, so the
"load" cases measure the per-tensor work and the "load + read" cases the bytes. A ``.zt`` with
checksums is verified as it is loaded (every byte is read and CRC-checked); safetensors
files carry no checksum. Both sides return a ``dict`` of CPU tensors usable as they are
(writable, copy-on-write over the file): nothing is copied after the timed call.

Timing: the two libraries run in turns (tenfold, safetensors, tenfold, ...) for many rounds,
``gc.collect()`` before each run and the result dropped outside the timed region, so both see
the same machine load. Each row gives the best times and their ratio; the note gives the
ratio of the medians too.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
from _timing import alternate, median, row

PER = "open + every tensor, divided by the count"


def _optional(name):
    try:
        return __import__(name, fromlist=["_"])
    except ImportError:
        return None


def touch(state) -> float:
    return sum(float(t.view(-1)[:: 1 << 10].sum()) + float(t.sum()) for t in state.values())


def _st_open_close(st, path):
    with st.safe_open(path, framework="pt"):
        pass


def run(quick: bool) -> list[dict]:
    torch = _optional("torch")
    st = _optional("safetensors.torch")
    stn = _optional("safetensors.numpy")
    if torch is None:
        return [row("tenfold.torch", 0.0, note="skipped: PyTorch is not installed")]
    import tenfold
    import tenfold.torch as tt

    torch.set_num_threads(1)
    rows: list[dict] = []
    n_big = 256 if not quick else 16
    rng = np.random.default_rng(0)
    big = {f"layer.{i:03d}.weight": rng.standard_normal((1024, 1024), dtype=np.float32)
           for i in range(n_big)}  # fmt: skip
    small = {f"block.{i:04d}.w": rng.standard_normal((64, 64), dtype=np.float32)
             for i in range(4096 if not quick else 512)}  # fmt: skip
    gib = sum(a.nbytes for a in big.values()) / 2**30
    tmp = tempfile.mkdtemp(prefix="tenfold-bench-torch-")
    try:
        names = ("big.zt", "big_crc.zt", "big.safetensors", "small.zt", "small.safetensors")
        p = {k: os.path.join(tmp, k) for k in names}
        tenfold.save(p["big.zt"], big, checksum=None, fsync=False)
        tenfold.save(p["big_crc.zt"], big, fsync=False)
        tenfold.save(p["small.zt"], small, checksum=None, fsync=False)
        if stn is not None:
            stn.save_file(big, p["big.safetensors"])
            stn.save_file(small, p["small.safetensors"])
        del big
        for f in p.values():
            if os.path.exists(f):
                with open(f, "rb") as fh:
                    while fh.read(1 << 24):
                        pass
        size = f"{gib:.2f} GiB"
        peer = "safetensors" if st is not None else None

        def both(case, tf, sf, target="", note="", rounds=21, per=1):
            ta, tb = alternate(tf, sf if st is not None else None, rounds=rounds)
            a = min(ta) / per
            b = min(tb) / per if tb else None
            if tb:
                med = median(tb) / median(ta)
                extra = f"median ratio {med:.2f}x, {rounds} alternating rounds"
                note = f"{note}; {extra}" if note else extra
            rows.append(row(case, a, peer, b, target=target, note=note))

        both(f"load_file {size} .zt (lazy)", lambda: tt.load_file(p["big.zt"]),
             lambda: st.load_file(p["big.safetensors"]), target=">= 2x", rounds=41,
             note="both map the file: per-tensor cost only")  # fmt: skip
        both(f"load_file + read every byte {size}", lambda: touch(tt.load_file(p["big.zt"])),
             lambda: touch(st.load_file(p["big.safetensors"])), rounds=5)  # fmt: skip
        both(f"load_file {size} .zt with CRC-32C (verified)",
             lambda: tt.load_file(p["big_crc.zt"]),
             lambda: st.load_file(p["big.safetensors"]), rounds=5,
             note="tenfold reads and checks every byte; safetensors has no checksum")  # fmt: skip
        n_small = len(small)
        both(f"load_file {n_small} small tensors", lambda: tt.load_file(p["small.zt"]),
             lambda: st.load_file(p["small.safetensors"]))  # fmt: skip

        def tf_get(path):
            with tt.safe_open(path) as f:
                return [f.get_tensor(k) for k in f.keys()]

        def st_get(path):
            with st.safe_open(path, framework="pt") as f:
                return [f.get_tensor(k) for k in f.keys()]

        both("safe_open().get_tensor, per tensor (.zt vs .safetensors)",
             lambda: tf_get(p["small.zt"]), lambda: st_get(p["small.safetensors"]),
             target=">= 1x", per=n_small, note=PER)  # fmt: skip
        both("safe_open().get_tensor, per tensor (both .safetensors)",
             lambda: tf_get(p["small.safetensors"]), lambda: st_get(p["small.safetensors"]),
             target=">= 1x", per=n_small, note=PER)  # fmt: skip

        name = "layer.000.weight"
        both(f"safe_open of the {n_big}-tensor file", lambda: tt.safe_open(p["big.zt"]).close(),
             lambda: _st_open_close(st, p["big.safetensors"]),
             note="tenfold: zTensor 0.1.0 index parse")  # fmt: skip
        with tt.safe_open(p["big.zt"]) as f_tf, tt.safe_open(p["big.safetensors"]) as f_ts:
            g = st.safe_open(p["big.safetensors"], framework="pt") if st else None
            for label, index in (("rows 0:128", (slice(0, 128),)),
                                 ("every 8th row", (slice(None, None, 8),)),
                                 ("columns ::8", (slice(None), slice(None, None, 8)))):  # fmt: skip
                try:
                    if g is not None:
                        g.get_slice(name)[index]
                    sf = (lambda index=index: g.get_slice(name)[index].clone()) if g else None
                    note = ""
                except Exception as exc:  # noqa: BLE001 - a peer that cannot do it is a result
                    sf, note = None, f"safetensors: {type(exc).__name__}"
                for f, which in ((f_tf, ".zt"), (f_ts, ".safetensors")):
                    both(f"get_slice {label} of a 4 MiB tensor (+ clone), {which} open",
                         lambda index=index, f=f: f.get_slice(name)[index].clone(), sf,
                         note=note, rounds=41)  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows

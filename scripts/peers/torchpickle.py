"""PyTorch checkpoint cases for scripts/bench_peers.py: tenfold's reader (no unpickling) vs
``torch.load(mmap=True, weights_only=True)`` on the same file.

Data: a state dict of 64 float32 tensors of 1024 x 1024 (256 MiB; ``--quick``: 64 x 128 x
1024, 32 MiB) plus 64 bf16 biases and one transposed view, written once with ``torch.save``
into a temporary directory; the page cache is warm (the file is read once before timing).
Cases: open the file and map every tensor; open and read every byte of every tensor; open and
map the state dict of a ``torch.nn`` model of 1,200 small tensors. The two
sides run in turns (same machine load; best of 21 and 9 rounds). Needs torch (skipped without
it).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
from _timing import alternate, row

from tenfold.formats.torchpickle import reader as tp


def touch(arrays) -> int:
    """Read every byte (an OR-reduction over bytes; memory bound)."""
    acc = 0
    for a in arrays:
        acc |= int(np.bitwise_or.reduce(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))
    return acc


def run(quick: bool) -> list[dict]:
    try:
        import torch
    except ImportError:
        return [row("torch.load", 0.0, note="skipped: torch is not installed")]
    n, rows_per = 64, (128 if quick else 1024)
    g = torch.Generator().manual_seed(0)
    sd = {f"layers.{i}.weight": torch.randn(rows_per, 1024, generator=g) for i in range(n)}
    sd.update({f"layers.{i}.bias": torch.randn(1024, generator=g).bfloat16() for i in range(n)})
    sd["head.weight_t"] = sd["layers.0.weight"].t()
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    note = f"{nbytes / 2**20:.0f} MiB, {len(sd)} tensors"
    tmp = tempfile.mkdtemp(prefix="tenfold-bench-")
    rows = []
    try:
        path = os.path.join(tmp, "pytorch_model.bin")
        torch.save(sd, path)
        with open(path, "rb") as f:  # warm the page cache
            while f.read(1 << 24):
                pass

        def open_tenfold():
            with tp.open(path) as r:
                return [r[k] for k in r]

        def open_torch():
            d = torch.load(path, mmap=True, weights_only=True)
            return list(d.values())

        def read_tenfold():
            with tp.open(path) as r:
                return touch(r[k] for k in r)

        def read_torch():
            d = torch.load(path, mmap=True, weights_only=True)
            return touch(t.view(torch.uint8).numpy() if t.dtype == torch.bfloat16
                         else t.numpy() for t in d.values())  # fmt: skip

        peer = f"torch {torch.__version__} load(mmap=True, weights_only=True)"
        ta, tb = alternate(open_tenfold, open_torch, rounds=21)
        rows.append(row("open + map all tensors", min(ta), peer, min(tb), target=">= 1x",
                        note=note))  # fmt: skip
        ta, tb = alternate(read_tenfold, read_torch, rounds=9)
        rows.append(row("open + read every tensor", min(ta), peer, min(tb), target=">= 1x",
                        note=note))  # fmt: skip
        rows.append(_many(torch, tmp, peer, quick))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def _many(torch, tmp: str, peer: str, quick: bool) -> dict:
    """Open + map the state dict of a real ``torch.nn`` model with many small tensors (300
    Linear + LayerNorm blocks of width 64: 1,200 tensors; ``--quick``: 30 blocks), where the
    per-tensor cost of the pickle walk and the record building shows."""
    blocks = 30 if quick else 300
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(
        *[nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64)) for _ in range(blocks)]
    )
    path = os.path.join(tmp, "many.pt")
    torch.save(model.state_dict(), path)

    def ours():
        with tp.open(path) as r:
            return [r[k] for k in r]

    def theirs():
        return list(torch.load(path, mmap=True, weights_only=True).values())

    ta, tb = alternate(ours, theirs, rounds=15)
    return row(f"open + map a {4 * blocks:,}-tensor nn state dict", min(ta), peer, min(tb),
               target=">= 1x", note=f"{os.path.getsize(path) / 2**20:.1f} MiB")  # fmt: skip

"""OINF: tenfold against openinfer-oinf 0.1.1 (writer) and a vectorised NumPy bit-packer.

Cases (same data, same run):
* writing a model with one 1e6-element bf16 / f8 / i4 tensor, tenfold vs openinfer-oinf;
* opening a 10,000-tensor model and parsing every table (tenfold only; target < 50 ms);
* unpacking each packed type (GB/s of unpacked output) vs NumPy shift-and-mask;
* packing 4/2/1-bit fields (GB/s of input) vs NumPy shift-and-or.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

import numpy as np
from _timing import best, row

from tenfold import _kernels, oinf


def _np_unpack(src: np.ndarray, bits: int, n: int, signed: bool) -> np.ndarray:
    per = 8 // bits
    shifts = np.arange(per, dtype=np.uint8) * np.uint8(bits)
    f = ((src[:, None] >> shifts[None, :]) & np.uint8((1 << bits) - 1)).reshape(-1)[:n]
    if signed:
        half = np.uint8(1 << (bits - 1))
        return ((f ^ half).view(np.int8) - half.astype(np.int8)).astype(np.int8)
    return f


def _np_pack(vals: np.ndarray, bits: int) -> np.ndarray:
    per = 8 // bits
    v = (vals.view(np.uint8) & np.uint8((1 << bits) - 1)).reshape(-1, per)
    out = v[:, 0].copy()
    for k in range(1, per):
        out |= v[:, k] << np.uint8(k * bits)
    return out


def _peer_write_cases(quick: bool, tmp: str) -> list[dict]:
    rows = []
    try:
        import oinf_encoder as enc
    except ImportError:
        enc = None
    n = 10_000 if quick else 1_000_000
    rng = np.random.default_rng(0)
    data = {
        "bf16": rng.standard_normal(n).astype(np.float32),
        "f8": rng.standard_normal(n).astype(np.float32),
        "i4": rng.integers(-8, 8, n).astype(np.int8),
    }
    path = os.path.join(tmp, "w.oinf")
    for kind, arr in data.items():
        ours = best(
            lambda arr=arr, kind=kind: oinf.write(path, tensors={"w": oinf.Tensor(arr, kind)}),
            repeat=5,
        )
        peer_t = None
        if enc is not None:
            model_cls = dataclasses.make_dataclass(
                "Model", [("sizevars", dict), ("metadata", dict), ("tensors", dict)]
            )
            m = model_cls({}, {}, {"w": enc.TensorSpec(arr, dtype=kind)})

            def peer(m=m):
                with open(path, "wb") as f:
                    f.write(enc.dataclass_to_oinf(m))

            peer_t = best(peer, repeat=1 if not quick else 3)
        rows.append(
            row(
                f"write 1 {kind} tensor of {n:,} elements",
                ours,
                "openinfer-oinf 0.1.1" if enc else None,
                peer_t,
                target=">= 100x" if not quick else "",
            )
        )
    return rows


def _open_case(quick: bool, tmp: str) -> dict:
    n = 1_000 if quick else 10_000
    path = os.path.join(tmp, "many.oinf")
    rng = np.random.default_rng(1)
    tensors = {}
    for i in range(n):
        shape = tuple(int(d) for d in rng.integers(1, 5, i % 3 + 1))
        tensors[f"layer{i:05d}.w"] = (
            np.zeros(shape, np.float32) if i % 2 else oinf.Tensor(np.zeros(shape, np.int8), "i4")
        )
    oinf.write(path, tensors=tensors, metadata={f"k{i}": i for i in range(100)})

    def run():
        with oinf.open(path) as r:
            assert len(r.names) == n
            r.metadata  # noqa: B018 - parse the metadata values too

    t = best(run, repeat=7)
    return row(
        f"open a {n:,}-tensor model, parse all tables",
        t * 1e3,
        unit="ms",
        target="< 50 ms" if not quick else "",
    )


def _kernel_cases(quick: bool) -> list[dict]:
    k = _kernels.load("bitpack")
    rows = []
    n = 1 << (18 if quick else 24)
    rng = np.random.default_rng(2)
    for name, bits, mode in [
        ("i4", 4, "int"),
        ("u4", 4, "uint"),
        ("i2", 2, "int"),
        ("u2", 2, "uint"),
        ("t2", 2, "int"),
        ("i1", 1, "int"),
        ("u1", 1, "uint"),
        ("t1", 1, "pm1"),
    ]:
        src = rng.integers(0, 256, n * bits // 8, dtype=np.uint8)
        if name == "t2":  # valid ternary codes only: every 0b10 field becomes 0b11
            src = src | ((src >> 1) & np.uint8(0x55))
        out = np.empty(n, np.int8 if mode != "uint" else np.uint8)
        if mode == "int":
            t = best(lambda src=src, bits=bits, out=out: k.unpack_int(src, bits, out), repeat=7)
        elif mode == "uint":
            t = best(lambda src=src, bits=bits, out=out: k.unpack_uint(src, bits, out), repeat=7)
        else:
            t = best(lambda src=src, out=out: k.unpack_pm1(src, out), repeat=7)
        signed = mode != "uint"
        tn = best(
            lambda src=src, bits=bits, signed=signed: _np_unpack(src, bits, n, signed), repeat=3
        )
        target = ">= 1.5 GB/s" + ("; >= 5x" if bits == 2 else "")
        rows.append(
            row(
                f"unpack {name} ({n:,} elements)",
                n / t / 1e9,
                "numpy shift-and-mask",
                n / tn / 1e9,
                unit="GB/s",
                higher_is_better=True,
                target=target,
            )
        )
    for bits in (4, 2, 1):
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        vals = rng.integers(lo, hi, n, endpoint=True).astype(np.int8)
        out = np.empty(n * bits // 8, np.uint8)
        t = best(
            lambda vals=vals, bits=bits, lo=lo, hi=hi, out=out: k.pack_int(vals, bits, lo, hi, out),
            repeat=7,
        )
        tn = best(lambda vals=vals, bits=bits: _np_pack(vals, bits), repeat=3)
        rows.append(
            row(
                f"pack {bits}-bit with range check ({n:,} elements)",
                n / t / 1e9,
                "numpy shift-and-or (no check)",
                n / tn / 1e9,
                unit="GB/s",
                higher_is_better=True,
                target=">= 3x",
            )
        )
    return rows


def run(quick: bool) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        rows = _peer_write_cases(quick, tmp)
        rows.append(_open_case(quick, tmp))
    rows += _kernel_cases(quick)
    return rows

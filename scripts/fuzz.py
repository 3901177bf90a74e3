#!/usr/bin/env python
"""Fuzz every reader, verifier, converter and the CLI with format-aware mutations.

Each case takes a valid seed file of one format, applies one or two mutations and runs every
public operation of that format on the result in a forked child process whose address space is
capped (``RLIMIT_AS``) and which is killed after a timeout. Each operation's outcome is one of

    ok        the operation succeeded
    tenfold   it raised a ``tenfold.errors`` exception (the promised way to refuse input)
    other     it raised anything else                       -> finding
    memory    it raised MemoryError                         -> finding
    signal    the child died from a signal (crash)          -> finding
    timeout   the child did not finish in time (hang)       -> finding

Mutators know each format's fields and lie in them (lengths, offsets, dtypes, shapes, counts,
flags), keeping the rest of the file valid (checksums recomputed where the lie must reach a
parser behind them: FOLD payloads are rewritten through the writer); generic mutators flip,
truncate, extend and overwrite bytes.

Three kinds put a directory behind each case (a :class:`Bundle`) and judge more than the
exception's class:

    ztensor2  zTensor v2 files (manifest, footer, digests, appends cut short, data shards);
              a crashed append's file must read as the old generation
    sharded   an index and its shards, plain or in the Hugging Face cache layout; the oracle
              knows the links it planted out of the index's directory (or, in the cache, out of
              the repository's folder): a read through one that succeeds, an error that shows
              the outside file, or a refusal that does not name the link is a finding
    remote    a seed served by a misbehaving HTTP server on 127.0.0.1 (a thread of this
              process); every tensor read must equal one consistent version of the object
              (``MixedVersions``/``WrongValues`` otherwise), and a network failure must be an
              OSError naming the URL (outcome ``oserror``, not a finding)

Valid input of these kinds must read (``RefusedValid``); warnings are allowed except a
``ResourceWarning`` from tenfold (a leak). These findings are class ``other``.

Every finding is saved under ``--out`` with the mutated file (the reproducer; ``case.tar`` for
the kinds above, links and FIFOs kept) and a JSON record (format, seed, case, mutation,
operation, traceback). ``--replay FILE --format F`` runs the operations on one file (or a
``case.tar``) in this process and prints what each one raised.

Every tenfold error names its format and object (``fmt``, ``obj``; issue #22). A refusal whose
error does not is not a finding, but ``summary.json`` lists it under ``unnamed`` with where
tenfold raised it (``tests/scripts/test_fuzz_smoke.py`` asserts that list is empty).

Examples::

    python scripts/fuzz.py --minutes 10                  # all formats
    python scripts/fuzz.py --seconds 30 --seed 1 --format fold,npz
    python scripts/fuzz.py --replay fuzz-findings/<id>/case.fold --format fold
    python scripts/fuzz.py --replay fuzz-findings/<id>/case.tar --format sharded

Exit status: 0 when no finding, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import http.server
import io
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import tenfold
from tenfold.errors import TenfoldError

#: kinds whose case is a directory (a Bundle) with its own oracle: zTensor v2 files, sharded
#: indexes, remote reads through a misbehaving HTTP server
KINDS = ["ztensor2", "sharded", "remote"]
FORMATS = [
    "ztensor", "oinf", "fold", "wtxt", "taridx", "npz", "safetensors", "onnx", "gguf",
    "torchpickle", "hdf5", *KINDS,
]  # fmt: skip
SUFFIX = {
    "ztensor": ".zt",
    "oinf": ".oinf",
    "fold": ".fold",
    "wtxt": ".wtxt",
    "taridx": ".taridx",
    "npz": ".npz",
    "safetensors": ".safetensors",
    "onnx": ".onnx",
    "gguf": ".gguf",
    "torchpickle": ".pt",
    "hdf5": ".h5",
}
CONVERT_TARGETS = [".zt", ".oinf", ".fold", ".npz", ".safetensors", ".wtxt"]
FINDINGS = ("other", "memory", "signal", "timeout")

INTS = [
    0, 1, 2, 3, 7, 8, 63, 64, 65, 255, 256, 4096, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
    2**32, 2**40, 2**53, 2**62, 2**63 - 1, 2**63, 2**64 - 1,
]  # fmt: skip
ODD = [None, True, False, -1, -(2**63), 1.5, float("nan"), "x", "", [], {}, [1], {"a": 1}, b"\0"]
SHAPES = [
    [0, 2**63], [2**63, 0], [0, 2**62, 4], [2**32, 2**32], [2**17, 2**17], [2**31], [-1], [],
    [0], [1] * 70, [[1]], [1.5], [True], [2**64 - 1], [2**63 - 1, 0], [3, 0, 2**61],
]  # fmt: skip


# ------------------------------------------------------------------------------------------
# seeds


def make_seeds(d: Path) -> dict[str, list[tuple[str, Any]]]:
    """Valid files of every format (each module's demo plus variants that reach more code)."""
    import tenfold.fold as fold
    import tenfold.oinf as oinf
    import tenfold.taridx as taridx
    import tenfold.wtxt as wtxt
    import tenfold.ztensor as zt
    from tenfold.interop import write_safetensors
    from tenfold.ztensor.sparse import SparseTensor

    rng = np.random.default_rng(1)
    d.mkdir(parents=True, exist_ok=True)
    seeds: dict[str, list[tuple[str, Any]]] = defaultdict(list)

    def add(fmt: str, name: str, path: Path) -> None:
        seeds[fmt].append((name, path.read_bytes()))

    add("ztensor", "demo", zt.demo(d))
    p = d / "variants.zt"
    with zt.Writer(p, fsync=False) as w:
        w.add("z", np.arange(40, dtype=np.int32).reshape(4, 10), encoding="zstd")
        w.add("e", np.zeros((0, 3), np.float32))
        w.add("s", np.array(1.5, np.float64), checksum="sha256")
        w.add("bf", np.arange(6, dtype=np.float32).astype(tenfold.core.BFLOAT16))
        w.add(
            "coo",
            SparseTensor(
                "coo",
                (3, 4, 5),
                np.array([1.0, 2.0], np.float32),
                coords=np.array([[0, 2], [1, 3], [4, 0]], np.uint64),
            ),
        )
    add("ztensor", "variants", p)
    p = d / "sparse_bomb.zt"  # a tiny sparse file whose dense form is 128 GiB
    with zt.Writer(p, fsync=False) as w:
        w.add(
            "big",
            SparseTensor(
                "csr",
                (2**17, 2**17),
                np.array([1.0]),
                indices=np.array([5], np.uint64),
                indptr=np.concatenate([[0], np.ones(2**17, np.uint64)]).astype(np.uint64),
            ),
        )
    add("ztensor", "sparse_bomb", p)

    add("oinf", "demo", oinf.demo(d))
    p = d / "small.oinf"
    oinf.write(
        p,
        metadata={"n": oinf.Tensor(np.arange(6).reshape(2, 3), "i32"), "s": "abc"},
        tensors={
            "a": np.ones((2, 2), np.float32),
            "b": oinf.Tensor([1, 0, 1], "u1"),
            "c": np.zeros((0, 4), np.int8),
        },
    )
    add("oinf", "small", p)

    add("fold", "demo", Path(fold.demo(d)))
    p = d / "variants.fold"
    with fold.Writer(p, compress=None, created_at_unix=1.0) as w:
        w.add_arrays("npz_stored", {"a": np.arange(10, dtype=np.int64), "b": np.eye(3)})
        w.add_arrays("npz_deflated", {"z": np.zeros(1000, np.float32)}, compressed=True)
        w.add_state_dict("sten", {"w": np.ones((3, 2), np.float16)})
        w.add_json("meta", {"k": [1, 2, 3]})
        w.finalize({"x": 1})
    add("fold", "variants", p)
    p = d / "zstd.fold"
    with fold.Writer(p, compress="zstd", ecc="rs(16)", created_at_unix=1.0) as w:
        w.add_arrays("arrays", {"a": np.arange(100, dtype=np.float64)})
        w.add_chunk("raw", "BLOB", bytes(range(256)) * 4)
        w.finalize()
    add("fold", "zstd_rs", p)

    add("wtxt", "demo", Path(wtxt.demo(d)))
    p = d / "plain.wtxt"
    wtxt.write(
        p,
        {"a": np.arange(12, dtype=np.int16).reshape(3, 4), "e": np.zeros(0, np.float32)},
        ts="2025-01-01T00:00:00Z",
        schema="s/1",
        gen=1,
        build="fuzz",
    )
    add("wtxt", "plain", p)

    tdir = d / "taridx"
    add("taridx", "demo", Path(taridx.demo(tdir)))

    p = d / "plain.npz"
    np.savez(p, a=np.arange(10), b=np.ones((2, 3), np.float32), c=np.array(True))
    add("npz", "stored", p)
    p = d / "deflated.npz"
    np.savez_compressed(p, z=np.zeros(5000), f=np.asfortranarray(np.arange(6).reshape(2, 3)))
    add("npz", "deflated", p)

    try:
        if os.environ.get("TENFOLD_FUZZ_TORCH", "1") != "1":
            raise ImportError("torch seeds disabled")
        import torch

        from tenfold.fold import _payloads

        p = d / "tsav.fold"
        with fold.Writer(p, compress=None, created_at_unix=1.0) as w:
            w.add_chunk("torch_state", "TSAV", _payloads.torch_bytes({"w": torch.ones(2, 3)}))
            w.finalize()
        add("fold", "tsav", p)
    except ImportError:
        pass

    if os.environ.get("TENFOLD_FUZZ_BOMB", "1") == "1":
        p = d / "npz_bomb.fold"  # the review's case: two 1 GiB zero members in a few MB
        with fold.Writer(p, compress=None, created_at_unix=1.0) as w:
            w.add_chunk("arrays", "NPZ0", zero_bomb_npz(2, 1 << 30))
            w.finalize()
        add("fold", "npz_bomb", p)

    # the conformance vectors (valid and damaged files from the reference implementations)
    roots = [Path(__file__).resolve().parents[1] / "tests" / "conformance"]
    if os.environ.get("TENFOLD_SHARED"):
        roots.append(Path(os.environ["TENFOLD_SHARED"]) / "conformance")
    for root in roots:
        for fmt, subdirs in (
            ("ztensor", ["ztensor/v0_1_0"]),
            ("oinf", ["oinf/v1", "oinf/v2"]),
            ("fold", ["fold/v102", "fold/head"]),
        ):
            for sub in subdirs:
                for f in sorted((root / sub).rglob("*")) if (root / sub).is_dir() else []:
                    small = f.is_file() and f.stat().st_size < 1 << 18
                    if small and f.suffix in (".zt", ".oinf", ".fold", ".mind"):
                        seeds[fmt].append((f"{sub}/{f.name}", f.read_bytes()))
        if any(n.startswith("oinf/") for n, _ in seeds.get("oinf", [])):
            break  # one copy of the vectors is enough

    p = d / "a.safetensors"
    write_safetensors(
        p,
        {
            "w": rng.standard_normal((4, 3)).astype(np.float32),
            "i": np.arange(5, dtype=np.int64),
            "e": np.zeros((0, 2), np.uint8),
        },
        {"k": "v"},
    )
    add("safetensors", "basic", p)
    seeds["onnx"].extend(onnx_seeds())
    seeds["gguf"].extend(gguf_seeds())
    torchpickle_seeds(d / "torchpickle", add)
    seeds["hdf5"].extend(hdf5_seeds(d / "hdf5"))
    seeds["ztensor2"].extend(v2_seeds(d / "v2"))
    seeds["sharded"].extend(sharded_seeds(d / "sharded"))
    seeds["remote"].extend(remote_seeds(d / "remote"))
    return dict(seeds)


def torchpickle_seeds(d: Path, add: Callable[[str, str, Path], None]) -> None:
    """PyTorch checkpoints: tenfold's own small writer (no torch needed) and, with torch,
    what torch.save writes (strided views, tied storages, bf16, the legacy layout)."""
    from tenfold.formats.torchpickle._demo import write_checkpoint

    d.mkdir(parents=True, exist_ok=True)
    p = d / "state.pt"
    write_checkpoint(p, {"model": {"w": np.arange(12, dtype=np.float32).reshape(3, 4),
                                   "b": np.zeros(3, np.float16)},
                         "epoch": 3, "cfg": {"lr": 0.1, "betas": (0.9, 0.99)}})  # fmt: skip
    add("torchpickle", "state", p)
    try:
        if os.environ.get("TENFOLD_FUZZ_TORCH", "1") != "1":
            raise ImportError("torch seeds disabled")
        import torch
    except ImportError:
        return
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    sd = {"x": x, "t": x.t(), "s": x[1:, ::2], "bf": x.bfloat16()[0], "tied": x, "n": 1}
    torch.save(sd, d / "views.pt")
    add("torchpickle", "views", d / "views.pt")
    torch.save(sd, d / "legacy.pt", _use_new_zipfile_serialization=False)
    add("torchpickle", "legacy", d / "legacy.pt")


def zero_bomb_npz(members: int, size: int) -> bytes:
    """An .npz of ``members`` uint8 arrays of ``size`` bytes (.npy header included) of zeros,
    deflated once and stored under every name (a few MB for GiBs)."""
    import zlib

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "|u1", "fortran_order": False, "shape": (size - 128,)}
    )
    assert head.tell() == 128
    comp = zlib.compressobj(1, zlib.DEFLATED, -15)
    piece = bytes(16 << 20)
    parts, crc, left = [comp.compress(head.getvalue())], zlib.crc32(head.getvalue()), size - 128
    while left:
        n = min(left, len(piece))
        parts.append(comp.compress(piece[:n]))
        crc = zlib.crc32(piece[:n], crc)
        left -= n
    parts.append(comp.flush())
    data = b"".join(parts)
    out, central = bytearray(), bytearray()
    for i in range(members):
        name = f"m{i}.npy".encode()
        fields = struct.pack("<HHHHHIII", 20, 0, 8, 0, 0x21, crc, len(data), size)
        central += (
            b"PK\x01\x02"
            + struct.pack("<H", 20)
            + fields
            + struct.pack("<HHHHHII", len(name), 0, 0, 0, 0, 0, len(out))
            + name
        )
        out += b"PK\x03\x04" + fields + struct.pack("<HH", len(name), 0) + name + data
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, members, members, len(central), len(out), 0)
    return bytes(out + central + eocd)


# ------------------------------------------------------------------------------------------
# mutators


def hostile_int(rng: random.Random, near: int | None = None) -> int:
    r = rng.random()
    if near is not None and r < 0.3:
        return max(0, near + rng.choice([-64, -8, -1, 1, 8, 64, near, -near // 2]))
    if r < 0.85:
        return rng.choice(INTS)
    return rng.randrange(0, 2**64)


def hostile_value(rng: random.Random, old: Any) -> Any:
    if isinstance(old, bool) or not isinstance(old, (int, list, str)):
        return rng.choice(ODD + INTS)
    if isinstance(old, int):
        return hostile_int(rng, old) if rng.random() < 0.85 else rng.choice(ODD)
    if isinstance(old, list):
        return rng.choice(SHAPES) if rng.random() < 0.8 else rng.choice(ODD)
    return rng.choice(ODD + ["float128", "bfloat16", "int4", "sparse", "zstd", "raw", old * 40])


def mut_generic(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    b = bytearray(data)
    kind = rng.choice(["flip", "truncate", "extend", "zero", "copy", "u64", "u32"])
    n = len(b)
    if n == 0:
        return bytes(rng.randbytes(rng.randrange(1, 64))), "random bytes"
    if kind == "flip":
        k = rng.randrange(1, 9)
        for _ in range(k):
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b), f"flip {k} bits"
    if kind == "truncate":
        m = rng.randrange(n)
        return bytes(b[:m]), f"truncate to {m}"
    if kind == "extend":
        extra = rng.choice([bytes(rng.randrange(1, 4096)), rng.randbytes(rng.randrange(1, 512))])
        return bytes(b) + extra, f"extend by {len(extra)}"
    if kind == "zero":
        i = rng.randrange(n)
        m = rng.randrange(1, 64)
        b[i : i + m] = bytes(len(b[i : i + m]))
        return bytes(b), f"zero {m} at {i}"
    if kind == "copy":
        i, j = rng.randrange(n), rng.randrange(n)
        m = rng.randrange(1, 64)
        piece = b[i : i + m]
        b[j : j + len(piece)] = piece
        return bytes(b[:n]), f"copy {m} from {i} to {j}"
    size = 8 if kind == "u64" else 4
    if n < size:
        return bytes(b[:-1]), "truncate by 1"
    i = rng.randrange(0, n - size + 1)
    v = hostile_int(rng) & ((1 << (8 * size)) - 1)
    b[i : i + size] = v.to_bytes(size, rng.choice(["little", "big"]))
    return bytes(b), f"{kind} {v} at {i}"


# -- zTensor --------------------------------------------------------------------------------


def mut_ztensor(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    from tenfold.core import cbor

    n = int.from_bytes(data[-8:], "little")
    start = len(data) - 8 - n
    entries = cbor.decode(data[start:-8], fmt="zt", what="index", offset=start, limit=1 << 30)
    e = rng.choice(entries)
    kind = rng.random()
    desc = ""
    if kind < 0.12:  # zero-dim bomb / shape lie with a matching size
        e["shape"] = rng.choice(SHAPES[:6])
        if rng.random() < 0.5:
            e["size"] = 0
        desc = f"{e.get('name')}: shape={e['shape']} size={e.get('size')}"
    elif kind < 0.2 and "checksum" in e:  # damage the blob behind a dropped checksum
        del e["checksum"]
        b = bytearray(data)
        if e.get("size"):
            i = e["offset"] + rng.randrange(e["size"])
            if i < start:
                b[i] ^= 0xFF
        data = bytes(b)
        desc = f"{e.get('name')}: checksum dropped, blob flipped"
    elif kind < 0.28:  # turn a dense tensor into a sparse one with hostile fields
        e["layout"] = rng.choice(["sparse", "sparsecsr", "sparsecoo"])
        e["sparse_format"] = rng.choice(["csr", "coo", 3])
        e["nnz"] = hostile_int(rng, 1)
        for k in ("indptr", "indices", "coords"):
            e[f"{k}_offset"] = rng.choice([64, 128, hostile_int(rng)])
            e[f"{k}_size"] = hostile_int(rng, 8)
        desc = f"{e.get('name')}: made {e['layout']}"
    else:
        keys = list(e) + ["nnz", "data_endianness", "checksum", "layout", "indptr_size"]
        key = rng.choice(keys)
        old = e.get(key)
        e[key] = hostile_value(rng, old)
        if key == "shape" and isinstance(e[key], list) and rng.random() < 0.5:
            e["size"] = 0
        desc = f"{e.get('name')!r}.{key}: {old!r} -> {e[key]!r}"[:200]
    try:
        raw = cbor.encode(entries, indefinite_maps=rng.random() < 0.5)
    except (TypeError, ValueError):
        return mut_generic(data, rng)
    size_field = len(raw)
    if rng.random() < 0.05:
        size_field = hostile_int(rng, size_field) & (2**64 - 1)
        desc += f"; index size field {size_field}"
    return data[:start] + raw + size_field.to_bytes(8, "little"), desc


# -- OINF -----------------------------------------------------------------------------------

_OINF_HDR = struct.Struct("<5sIIIIIIQQQQQ")


def _oinf_walk(data: bytes) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """Field positions: header fields, metadata entries, tensor entries."""
    h = _OINF_HDR.unpack_from(data, 0)
    version, n_meta, n_t = h[1], h[4], h[5]
    off_meta, off_t = h[8], h[9]
    hdr = [(5 + 4 * i, 4) for i in range(6)] + [(29 + 8 * i, 8) for i in range(5)]
    metas = []
    pos = off_meta
    for _ in range(n_meta):
        (ln,) = struct.unpack_from("<I", data, pos)
        q = pos + ((ln + 11) & ~7)
        tag, _f, nb, off = struct.unpack_from("<IIQQ", data, q)
        metas.append((pos, q, tag, nb, off))
        pos = q + 24
    tensors = []
    pos = off_t
    tail = 32 if version == 2 else 16
    for _ in range(n_t):
        (ln,) = struct.unpack_from("<I", data, pos)
        q = pos + ((ln + 11) & ~7)
        _tag, nd, _fl = struct.unpack_from("<III", data, q)
        tensors.append((pos, q, nd))
        pos = q + 12 + 8 * nd + tail
    return hdr, metas, tensors


def mut_oinf(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    hdr, metas, tensors = _oinf_walk(data)
    b = bytearray(data)

    def put(pos: int, size: int, v: int) -> None:
        b[pos : pos + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")

    r = rng.random()
    if r < 0.15 and hdr:
        pos, size = rng.choice(hdr)
        v = hostile_int(rng)
        put(pos, size, v)
        return bytes(b), f"header field at {pos} = {v}"
    if r < 0.4 and metas:
        pos, q, tag, nb, off = rng.choice(metas)
        choice = rng.choice(["tag", "flags", "nbytes", "offset", "payload"])
        if choice == "payload" and tag in (12, 13, 14):  # STRING / BITSET / NDARRAY payload head
            field = rng.choice([0, 4, 8, 16])
            if off + field + 8 <= len(b):
                v = rng.choice([0, 2**63, hostile_int(rng)])
                put(off + field, 8 if field >= 8 else 4, v)
                return bytes(b), f"metadata payload @{off}+{field} = {v}"
        rel = {"tag": (0, 4), "flags": (4, 4), "nbytes": (8, 8), "offset": (16, 8)}.get(
            choice, (8, 8)
        )
        v = hostile_int(rng, nb if rel[0] == 8 else None)
        put(q + rel[0], rel[1], v)
        return bytes(b), f"metadata entry @{pos} {choice} = {v}"
    if tensors:
        pos, q, nd = rng.choice(tensors)
        choice = rng.choice(["tag", "ndim", "flags", "dim", "nbytes", "offset", "zero-bomb"])
        if choice == "zero-bomb" and nd >= 1:
            put(q + 12, 8, 0)
            if nd >= 2:
                put(q + 20, 8, rng.choice([2**63, 2**64 - 1, 2**62]))
            put(q + 12 + 8 * nd, 8, 0)
            return bytes(b), f"tensor @{pos}: zero dim + huge dim, nbytes 0"
        if choice == "dim" and nd:
            i = rng.randrange(nd)
            v = hostile_int(rng)
            put(q + 12 + 8 * i, 8, v)
            return bytes(b), f"tensor @{pos}: dim {i} = {v}"
        rel = {
            "tag": (0, 4),
            "ndim": (4, 4),
            "flags": (8, 4),
            "nbytes": (12 + 8 * nd, 8),
            "offset": (20 + 8 * nd, 8),
        }.get(choice, (0, 4))
        v = hostile_int(rng)
        put(q + rel[0], rel[1], v)
        return bytes(b), f"tensor @{pos}: {choice} = {v}"
    return mut_generic(data, rng)


# -- npz ------------------------------------------------------------------------------------


def _npy_header(shape: Any, descr: Any, fortran: Any = False) -> bytes:
    text = "{'descr': " + repr(descr) + ", 'fortran_order': " + repr(fortran) + ", 'shape': "
    text += repr(shape) + ", }"
    body = text.encode("latin-1")
    pad = -(10 + len(body) + 1) % 64
    body += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body


def mut_npz(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    r = rng.random()
    if r < 0.45:  # central directory / local header lies
        b = bytearray(data)
        eocd = data.rfind(b"PK\x05\x06")
        if eocd < 0:
            return mut_generic(data, rng)
        cd_off = struct.unpack_from("<I", data, eocd + 16)[0]
        heads = [m.start() for m in re.finditer(b"PK\x01\x02", data[cd_off:])]
        if not heads:
            return mut_generic(data, rng)
        c = cd_off + rng.choice(heads)
        lho = struct.unpack_from("<I", data, c + 42)[0]
        field = rng.choice(["encrypt", "method", "comp", "uncomp", "both", "offset", "namelen"])
        if field == "encrypt":
            b[c + 8] |= 1
            if rng.random() < 0.5 and lho + 8 <= len(b):
                b[lho + 6] |= 1
            return bytes(b), "member flagged encrypted"
        if field == "method":
            m = rng.choice([1, 6, 9, 12, 14, 93, 99, 0xFFFF])
            struct.pack_into("<H", b, c + 10, m)
            if lho + 10 <= len(b):
                struct.pack_into("<H", b, lho + 8, m)
            return bytes(b), f"method {m}"
        v = rng.choice([2**31, 2**32 - 1, 2**31 - 1, 0, 1, hostile_int(rng) & 0xFFFFFFFF])
        if field in ("comp", "both"):
            struct.pack_into("<I", b, c + 20, v)
        if field in ("uncomp", "both"):
            struct.pack_into("<I", b, c + 24, v)
        if field == "offset":
            struct.pack_into("<I", b, c + 42, v)
        if field == "namelen":
            struct.pack_into("<H", b, c + 28, v & 0xFFFF)
        return bytes(b), f"central directory {field} = {v}"
    if r < 0.8:  # rebuild with a lying .npy header
        try:
            zin = zipfile.ZipFile(io.BytesIO(data))
            names = zin.namelist()
            if sum(i.file_size for i in zin.infolist()) > 1 << 26:  # a bomb: lie in its directory
                return mut_generic(data, rng)
            members = {n: zin.read(n) for n in names}
        except Exception:  # noqa: BLE001 - seed already damaged
            return mut_generic(data, rng)
        name = rng.choice(names)
        shape = rng.choice(
            [tuple(s) for s in SHAPES if all(type(x) is int for x in s)] + [(True,), ()]
        )
        descr = rng.choice(
            [
                "<f8",
                "|u1",
                "|O",
                "<U0",
                "|V0",
                "|V2147483647",
                "<f16",
                "|b1",
                [("a", "<f8", (2**40,))],
                [("a", "|O")],
                ("<f8", (1000, 1000)),
                "nonsense",
                5,
            ]
        )
        body = members[name]
        hdr = _npy_header(shape, descr, rng.random() < 0.2)
        data_part = body[10 + struct.unpack_from("<H", body, 8)[0] :] if len(body) > 10 else b""
        members[name] = hdr + data_part[: rng.choice([len(data_part), 0, 8])]
        out = io.BytesIO()
        method = rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
        with zipfile.ZipFile(out, "w", compression=method) as z:
            for n, v in members.items():
                z.writestr(n, v)
        return out.getvalue(), f"{name}: npy header shape={shape} descr={descr!r}"
    return mut_generic(data, rng)


# -- safetensors ----------------------------------------------------------------------------


def mut_safetensors(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    n = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + n])
    except ValueError:
        return mut_generic(data, rng)
    body = data[8 + n :]
    r = rng.random()
    names = [k for k in header if k != "__metadata__"]
    if r < 0.1:
        v = hostile_int(rng, n)
        return (v & (2**64 - 1)).to_bytes(8, "little") + data[8:], f"header length {v}"
    if r < 0.2:
        header["__metadata__"] = rng.choice(ODD)
        desc = f"__metadata__ = {header['__metadata__']!r}"
    elif names:
        name = rng.choice(names)
        e = header[name]
        key = rng.choice(["dtype", "shape", "data_offsets", "entry"])
        if key == "entry":
            header[name] = rng.choice(ODD)
        elif key == "dtype":
            e["dtype"] = rng.choice([["F32"], {"F32": 1}, 7, None, "F128", "I4", "U8", "BOOL"])
        elif key == "shape":
            e["shape"] = rng.choice(SHAPES + [None, "2,3", {"a": 1}])
        else:
            e["data_offsets"] = rng.choice(
                [
                    [0, 2**64],
                    [5, 3],
                    [-1, 4],
                    [0],
                    [0, 2**63],
                    [hostile_int(rng), hostile_int(rng)],
                    "0:4",
                ]
            )
        desc = f"{name}.{key} = {header[name] if key == 'entry' else e.get(key)!r}"[:200]
    else:
        return mut_generic(data, rng)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + body, desc


# -- PyTorch checkpoints --------------------------------------------------------------------

#: globals a mutation names instead of one of the pickle's: refused ones and accepted ones
#: in the wrong place
TORCH_GLOBALS = [("os", "system"), ("builtins", "eval"), ("torch._utils", "_rebuild_tensor_v2"),
                 ("collections", "OrderedDict"), ("torch", "FloatStorage"), ("torch", "Size"),
                 ("torch", "float16"), ("_codecs", "encode"), ("builtins", "set")]  # fmt: skip


def _mut_pickle(pkl: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One lie in a pickle: an integer argument, a global, a string, an opcode, a cut."""
    import pickletools

    ops = list(pickletools.genops(pkl))
    op, arg, at = rng.choice(ops)
    end = next((a for _, _, a in ops if a > at), len(pkl))
    r = rng.random()
    if r < 0.35 and isinstance(arg, int):
        v = hostile_int(rng, arg) * rng.choice([1, -1])
        v = max(-(2**63), min(v, 2**63 - 1))
        raw = v.to_bytes(8, "little", signed=True)
        return pkl[:at] + b"\x8a\x08" + raw + pkl[end:], f"pickle {op.name}@{at} -> {v}"
    if r < 0.55 and op.name in ("GLOBAL", "STACK_GLOBAL"):
        mod, name = rng.choice(TORCH_GLOBALS)
        new = b"c" + f"{mod}\n{name}\n".encode()
        if op.name == "STACK_GLOBAL":
            new = b"0" + b"0" + new  # drop the two names it would pop
        return pkl[:at] + new + pkl[end:], f"pickle global@{at} -> {mod}.{name}"
    if r < 0.7 and isinstance(arg, str):
        s = rng.choice(["", "0", "1", "../x", "a" * 300, "storage", "\x00"])
        raw = s.encode()
        return pkl[:at] + b"X" + len(raw).to_bytes(4, "little") + raw + pkl[end:], f"str@{at}={s!r}"
    if r < 0.85:
        code = bytes([rng.choice(b"(.0123abeqhjtusRQN)]}\x85\x86\x87\x88\x89\x93\x94")])
        return pkl[:at] + code + pkl[at + 1 :], f"pickle opcode@{at} -> {code!r}"
    cut = rng.randrange(len(pkl))
    return pkl[:cut] + pkl[rng.randrange(len(pkl)) :], f"pickle spliced at {cut}"


def mut_torchpickle(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    if data[:4] != b"PK\x03\x04":
        return mut_generic(data, rng)  # the legacy layout: pickles and raw storages
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = [(zi.filename, z.read(zi.filename)) for zi in z.infolist()]
    i = next(i for i, (n, _) in enumerate(members) if n.endswith("/data.pkl"))
    r = rng.random()
    if r < 0.7:
        new, desc = _mut_pickle(members[i][1], rng)
        members[i] = (members[i][0], new)
    else:
        j = rng.randrange(len(members))
        name, raw = members[j]
        choice = rng.choice(["cut", "grow", "drop", "byteorder"])
        if choice == "cut":
            members[j] = (name, raw[: rng.randrange(len(raw) + 1)])
        elif choice == "grow":
            members[j] = (name, raw + b"\x00" * rng.choice([1, 4, 64]))
        elif choice == "drop" and j != i:
            del members[j]
        else:
            members = [(n, rng.choice([b"big", b"", b"middle"]) if n.endswith("/byteorder")
                        else v) for n, v in members]  # fmt: skip
        desc = f"member {name} {choice}"
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if rng.random() < 0.1 else zipfile.ZIP_STORED
    with zipfile.ZipFile(out, "w", method) as z:
        for n, v in members:
            z.writestr(n, v)
    return out.getvalue(), desc


# -- FOLD -----------------------------------------------------------------------------------


# -- onnx -----------------------------------------------------------------------------------
# A model is a protobuf tree; the mutator parses it into (number, wire, value) lists down to
# the tensors, lies in one field (dims, data_type, raw_data, typed fields, external data,
# lengths) and encodes it again, so that every enclosing length stays consistent.
def _pb_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v >> 7 else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _pb_field(number: int, wire: int, value: Any) -> bytes:
    tag = _pb_varint(number << 3 | wire)
    if wire == 0:
        return tag + _pb_varint(value)
    if wire == 2:
        return tag + _pb_varint(len(value)) + value
    return tag + value


def _pb_parse(data: bytes) -> list[list]:
    from tenfold.formats.onnx._wire import LEN, fields

    out = []
    for number, wire, v, _ in fields(data, 0, len(data), "fuzz"):
        if wire == LEN:
            v = data[v[0] : v[0] + v[1]]
        elif wire in (1, 5):
            v = data[v : v + (8 if wire == 1 else 4)]
        out.append([number, wire, v])
    return out


def _pb_encode(fs: list[list]) -> bytes:
    return b"".join(_pb_field(n, w, v) for n, w, v in fs)


def onnx_seeds() -> list[tuple[str, bytes]]:
    """Small models written field by field (no onnx package needed): raw and typed fields,
    packed sub-byte types, a sparse initializer, model metadata."""
    f = _pb_field

    def tensor(name: str, code: int, dims: list[int], *rest: bytes) -> bytes:
        return b"".join(f(1, 0, d) for d in dims) + f(2, 0, code) + f(8, 2, name.encode()) + \
            b"".join(rest)  # fmt: skip

    w = np.arange(12, dtype=np.float32)
    tensors = [
        tensor("w", 1, [3, 4], f(9, 2, w.tobytes())),
        tensor("i", 7, [3], f(7, 2, b"".join(_pb_varint(x) for x in (1, 2**40, -3)))),
        tensor("h", 10, [2], f(5, 2, _pb_varint(15360) + _pb_varint(49152))),
        tensor("q", 22, [5], f(9, 2, bytes([0x21, 0xF3, 0x07]))),
        tensor("d", 11, [2], f(10, 2, np.array([0.5, -1], "<f8").tobytes())),
    ]
    sparse = f(1, 2, tensor("s", 1, [2], f(9, 2, np.array([1, 2], "<f4").tobytes()))) + f(
        2, 2, tensor("s_i", 7, [2], f(7, 2, _pb_varint(1) + _pb_varint(5)))) + f(3, 0, 2) + \
        f(3, 0, 3)  # fmt: skip
    graph = b"".join(f(5, 2, t) for t in tensors) + f(15, 2, sparse) + f(2, 2, b"g")
    props = f(14, 2, f(1, 2, b"author") + f(2, 2, b"fuzz"))
    model = f(1, 0, 9) + f(2, 2, b"fuzz") + f(7, 2, graph) + f(8, 2, f(2, 0, 17)) + props
    return [("basic", model), ("one", f(1, 0, 8) + f(7, 2, f(5, 2, tensors[0])))]


def mut_onnx(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    model = _pb_parse(data)
    graph_at = next(i for i, fld in enumerate(model) if fld[0] == 7)
    graph = _pb_parse(model[graph_at][2])
    inits = [i for i, fld in enumerate(graph) if fld[0] in (5, 15)]
    gi = rng.choice(inits)
    t = _pb_parse(graph[gi][2])
    if graph[gi][0] == 15:  # a sparse one: lie in its values or indices
        part = rng.choice([i for i, fld in enumerate(t) if fld[0] in (1, 2)] or [0])
        inner = _pb_parse(t[part][2]) if t and t[part][1] == 2 else t
        desc = _lie_tensor(inner, rng)
        if t and t[part][1] == 2:
            t[part][2] = _pb_encode(inner)
    else:
        desc = _lie_tensor(t, rng)
    graph[gi][2] = _pb_encode(t)
    model[graph_at][2] = _pb_encode(graph)
    return _pb_encode(model), f"onnx: initializer #{gi}: {desc}"


def _lie_tensor(t: list[list], rng: random.Random) -> str:
    kind = rng.choice(["dims", "dtype", "raw", "typed", "external", "location", "dup"])
    if kind == "dims":
        dims = [i for i, fld in enumerate(t) if fld[0] == 1]
        value = hostile_int(rng)
        if dims and rng.random() < 0.7:
            t[rng.choice(dims)][2] = value
        else:
            t.insert(0, [1, 0, value])
        return f"dims {value}"
    if kind == "dtype":
        code = rng.choice([0, 8, 14, 15, 21, 23, 25, 27, 29, 99, 2**31, 2**64 - 1])
        t[:] = [fld for fld in t if fld[0] != 2] + [[2, 0, code]]
        return f"data_type {code}"
    if kind == "raw":
        raw = next((fld for fld in t if fld[0] == 9), None)
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        if raw is None:
            t.append([9, 2, blob])
        else:
            raw[2] = raw[2][: rng.randrange(len(raw[2]) + 1)] if rng.random() < 0.5 else blob
        return "raw_data"
    if kind == "typed":
        number = rng.choice([4, 5, 7, 10, 11])
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        t.append([number, 2, blob] if rng.random() < 0.7 else [number, 0, hostile_int(rng)])
        return f"typed field {number}"
    if kind == "external":
        loc = rng.choice(["../x", "/etc/passwd", "data.bin", "", "a//b", "x\0y", "."])
        entries = [("location", loc), ("offset", str(hostile_int(rng))),
                   ("length", rng.choice(["-1", "12", str(2**64), "x"]))]  # fmt: skip
        for k, v in entries[: rng.randrange(1, 4)]:
            t.append([13, 2, _pb_field(1, 2, k.encode()) + _pb_field(2, 2, v.encode())])
        t.append([14, 0, 1])
        return f"external data {loc!r}"
    if kind == "location":
        t.append([14, 0, rng.choice([1, 2, 2**63])])
        return "data_location"
    t.append([8, 2, rng.choice([b"", b"\xff\xfe", b"w"])])
    return "name"


def _fold_chunks(data: bytes) -> tuple[dict, list[tuple[dict, bytes]]]:
    """The index and each chunk's payload (decoded with the tenfold reader, unverified)."""
    import tenfold.fold as fold

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fold.Reader(data) as r:
            out = [(dict(c.__dict__), r.read(c.name, verify=False).tobytes()) for c in r.chunks]
            return dict(r.index), out


def mut_fold(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    import tenfold.fold as fold

    magic, hlen, index_off, index_len = struct.unpack_from(">8sIQQ", data, 0)
    r = rng.random()
    if r < 0.4:  # payload lie behind valid checksums: rewrite through the writer
        index, chunks = _fold_chunks(data)
        i = rng.randrange(len(chunks))
        c, payload = chunks[i]
        if c["ctype"] == "NPZ0":
            payload, desc = mut_npz(payload, rng)
        elif c["ctype"] == "STEN":
            payload, desc = mut_safetensors(payload, rng)
        else:
            payload, desc = mut_generic(payload, rng)
        with tempfile.TemporaryDirectory() as td:
            p = Path(td) / "m.fold"
            compress = rng.choice([None, "zstd"])
            with fold.Writer(
                p, compress=compress, ecc=rng.choice([None, "rs(8)"]), created_at_unix=1.0
            ) as w:
                for j, (cj, pj) in enumerate(chunks):
                    w.add_chunk(cj["name"], cj["ctype"], payload if j == i else pj)
                w.finalize()
            return p.read_bytes(), f"chunk {c['name']!r} ({c['ctype']}): {desc}"
    if r < 0.85:  # index and/or binary chunk header lies
        try:
            index = json.loads(data[index_off : index_off + index_len])
        except ValueError:
            return mut_generic(data, rng)
        chunks = index.get("chunks") or []
        if not chunks:
            return mut_generic(data, rng)
        c = rng.choice(chunks)
        key = rng.choice(
            [
                "uncomp_len",
                "comp_len",
                "offset",
                "flags",
                "ecc_len",
                "ecc_algo",
                "ctype",
                "crc32c",
                "sha256",
                "name",
                "header_len",
                "uncomp_both",
            ]
        )
        b = bytearray(data[:index_off])
        if key == "uncomp_both":  # index and binary header agree on the lie
            v = rng.choice([2**31, 2**31 - 1, 2**30, 0, 1, c["uncomp_len"] + 1])
            c["uncomp_len"] = v
            struct.pack_into(">Q", b, c["offset"] + 8, v)
            desc = f"{c['name']!r}: uncomp_len {v} in index and header"
        else:
            old = c.get(key)
            c[key] = (
                hostile_value(rng, old)
                if rng.random() < 0.8
                else rng.choice(
                    ["rs(0)", "rs(255)", "rs(-1)", "none", "NPZ0", "STEN", "TSAV", "JSON"]
                )
            )
            desc = f"{c.get('name')!r}.{key}: {old!r} -> {c[key]!r}"[:200]
        try:
            raw = json.dumps(index, ensure_ascii=False, separators=(",", ":")).encode()
        except ValueError:
            return mut_generic(data, rng)
        struct.pack_into(">Q", b, 20, len(raw))
        return bytes(b) + raw, desc
    # header fields
    b = bytearray(data)
    field = rng.choice([(8, ">I"), (12, ">Q"), (20, ">Q")])
    v = hostile_int(rng)
    struct.pack_into(field[1], b, field[0], v & ((1 << (8 * struct.calcsize(field[1]))) - 1))
    return bytes(b), f"fold header @{field[0]} = {v}"


# -- WTXT -----------------------------------------------------------------------------------

_TOKEN = re.compile(rb"([a-z_0-9]+)=([^ \n]+)")


def mut_wtxt(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = data.split(b"\n")
    r = rng.random()
    if r < 0.6:
        toks = list(_TOKEN.finditer(data))
        if toks:
            m = rng.choice(toks)
            v = rng.choice(
                [
                    b"9" * 4400,
                    b"0",
                    b"-1",
                    b"18446744073709551616",
                    b"2**63",
                    str(hostile_int(rng)).encode(),
                    b"",
                    b"x",
                    b"0,9223372036854775808",
                    b"f8",
                    b"u1",
                    b"f16",
                    m.group(2) * 2,
                    b"0" * 12,
                ]
            )
            return data[: m.start(2)] + v + data[m.end(2) :], f"{m.group(1)!r} = {v[:40]!r}"
    if r < 0.8 and len(lines) > 2:
        i = rng.randrange(len(lines) - 1)
        op = rng.choice(["delete", "dup", "swap"])
        if op == "delete":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        else:
            j = rng.randrange(len(lines) - 1)
            lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines), f"line {i + 1} {op}"
    return mut_generic(data, rng)


# -- TARIDX ---------------------------------------------------------------------------------


def mut_taridx(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    b = bytearray(data)
    if len(b) < 64:
        return mut_generic(data, rng)
    off_arr = struct.unpack_from("<Q", b, 48)[0]
    if rng.random() < 0.4:
        pos, size = rng.choice(
            [
                (8, 2),
                (10, 2),
                (12, 2),
                (14, 2),
                (16, 8),
                (24, 8),
                (32, 4),
                (36, 4),
                (40, 8),
                (48, 8),
                (56, 1),
            ]
        )
        v = hostile_int(rng) & ((1 << (8 * size)) - 1)
        b[pos : pos + size] = v.to_bytes(size, "little")
        return bytes(b), f"header @{pos} = {v}"
    nrows = (len(b) - off_arr) // 32 if off_arr <= len(b) else 0
    if nrows:
        row = off_arr + 32 * rng.randrange(nrows)
        pos, size = rng.choice([(0, 2), (2, 8), (10, 8), (18, 2), (20, 4), (24, 8)])
        v = hostile_int(rng) & ((1 << (8 * size)) - 1)
        b[row + pos : row + pos + size] = v.to_bytes(size, "little")
        return bytes(b), f"row @{row}+{pos} = {v}"
    return mut_generic(data, rng)


# -- GGUF -----------------------------------------------------------------------------------
# Built here byte by byte (tenfold writes no GGUF): key/values of every kind, unquantised and
# block-quantised tensors, two alignments.


def _gguf_str(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def _gguf_file(kvs: list[tuple[bytes, int, bytes]], tensors: list, align: int) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        out += _gguf_str(key) + struct.pack("<I", vtype) + value
    rel, body = 0, b""
    for name, ne, code, data in tensors:
        out += _gguf_str(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, code, rel)
        body += data + bytes(-len(data) % align)
        rel = len(body)
    return out + bytes(-len(out) % align) + body


def gguf_seeds() -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(5)
    strs = struct.pack("<IQ", 8, 3) + b"".join(_gguf_str(t) for t in (b"<s>", b"", b"hi"))
    nested = struct.pack("<IQ", 9, 2) + struct.pack("<IQi", 5, 1, 7) + struct.pack("<IQ", 5, 0)
    kvs = [(b"general.architecture", 8, _gguf_str(b"llama")), (b"tokens", 9, strs),
           (b"nested", 9, nested), (b"flag", 7, b"\x01"), (b"ctx", 4, struct.pack("<I", 2048)),
           (b"scores", 9, struct.pack("<IQ2f", 6, 2, 0.5, -1.0))]  # fmt: skip
    q8 = bytes(rng.integers(0, 256, 2 * 34, dtype=np.uint8))
    q4k = bytes(rng.integers(0, 256, 144, dtype=np.uint8))
    tensors = [(b"w", (4, 3), 0, rng.standard_normal(12).astype(np.float32).tobytes()),
               (b"h", (5,), 1, np.arange(5, dtype=np.float16).tobytes()),
               (b"b", (2,), 30, bytes(4)), (b"i", (3,), 26, bytes(12)), (b"q8", (32, 2), 8, q8),
               (b"q4k", (256,), 12, q4k), (b"e", (0, 4), 0, b"")]  # fmt: skip
    aligned = [(b"general.alignment", 4, struct.pack("<I", 64)), *kvs]
    return [("basic", _gguf_file(kvs, tensors, 32)), ("align64", _gguf_file(aligned, tensors, 64))]


def _gguf_fields(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, size, name) of every integer field of a GGUF header (counts, lengths, types,
    dimensions, offsets), walked independently of tenfold."""
    fields = [(4, 4, "version"), (8, 8, "tensor_count"), (16, 8, "kv_count")]
    n_t, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24

    def string(label: str) -> None:
        nonlocal pos
        fields.append((pos, 8, f"{label} length"))
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]

    def value(t: int, label: str) -> None:
        nonlocal pos
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        if t == 8:
            string(label)
        elif t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            fields.extend([(pos, 4, f"{label} etype"), (pos + 4, 8, f"{label} count")])
            pos += 12
            for i in range(min(n, 64)):
                value(et, f"{label}[{i}]")
        else:
            pos += sizes[t]

    for i in range(min(n_kv, 64)):
        string(f"kv {i} key")
        fields.append((pos, 4, f"kv {i} type"))
        pos += 4
        value(struct.unpack_from("<I", data, pos - 4)[0], f"kv {i}")
    for i in range(min(n_t, 64)):
        string(f"tensor {i} name")
        nd = struct.unpack_from("<I", data, pos)[0]
        fields.append((pos, 4, f"tensor {i} n_dims"))
        fields.extend((pos + 4 + 8 * k, 8, f"tensor {i} ne[{k}]") for k in range(min(nd, 8)))
        pos += 4 + 8 * nd
        fields.extend([(pos, 4, f"tensor {i} type"), (pos + 4, 8, f"tensor {i} offset")])
        pos += 12
    return [f for f in fields if f[0] + f[1] <= len(data)]


def mut_gguf(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    fields = _gguf_fields(data)
    if not fields or rng.random() < 0.15:
        return mut_generic(data, rng)
    at, size, name = rng.choice(fields)
    old = int.from_bytes(data[at : at + size], "little")
    if name.endswith("type") and rng.random() < 0.5:
        v = rng.choice([0, 1, 2, 7, 8, 9, 12, 13, 15, 23, 29, 30, 31, 34, 41, 42, 99, 2**31])
    elif name == "version" and rng.random() < 0.5:
        v = rng.choice([1, 2, 4, 3 << 24, 2 << 24])
    else:
        v = hostile_int(rng, old)
    v &= (1 << (8 * size)) - 1
    b = bytearray(data)
    b[at : at + size] = v.to_bytes(size, "little")
    return bytes(b), f"{name} @{at} = {v}"


# -- hdf5 -----------------------------------------------------------------------------------
#: signatures of HDF5's metadata structures (object headers, B-trees, heaps, chunk indexes)
H5_SIGNATURES = (b"\x89HDF", b"OHDR", b"OCHK", b"TREE", b"HEAP", b"SNOD", b"BTHD", b"BTLF",
                 b"BTIN", b"FRHP", b"FHDB", b"FHIB", b"FSHD", b"FSSE", b"GCOL", b"EAHD",
                 b"EAIB", b"EADB", b"FAHD", b"FADB")  # fmt: skip


def hdf5_seeds(d: Path) -> list[tuple[str, bytes]]:
    """Small files h5py writes (old and latest layouts): contiguous, big-endian, chunked with
    each filter h5py has (gzip, shuffle, Fletcher-32, lzf, scale-offset), never written (the
    fill value), attributes on the root, a group and a dataset; none without h5py."""
    try:
        import h5py
    except ImportError:
        return []
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    out = []
    for libver in ("earliest", "latest"):
        p = d / f"{libver}.h5"
        with h5py.File(p, "w", libver=libver) as f:
            f["w"] = rng.standard_normal((6, 5)).astype(np.float32)
            f["g/be"] = np.arange(12, dtype=">i4").reshape(3, 4)
            f.create_dataset(
                "g/gz",
                data=np.arange(300, dtype=np.int16).reshape(30, 10),
                chunks=(8, 10),
                compression="gzip",
                shuffle=True,
                fletcher32=True,
            )
            f.create_dataset(
                "lzf", data=np.arange(64, dtype=np.float64), chunks=(16,), compression="lzf"
            )
            f.create_dataset("so", data=np.arange(50, dtype=np.int32), chunks=(10,), scaleoffset=0)
            f.create_dataset("fill", (4, 4), dtype=np.uint8, fillvalue=7)
            f.create_dataset("s", data=np.array(1.5, np.float16))
            f.attrs["epoch"] = 3
            f["g"].attrs["name"] = "enc"
            f["w"].attrs["lr"] = np.array([0.1, 0.2])
        out.append((libver, p.read_bytes()))
    return out


def mut_hdf5(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A lie in an integer near one of the metadata structures (lengths, addresses, counts,
    versions, sizes that follow a signature), else a generic mutation."""
    spots = [m.start() for sig in H5_SIGNATURES for m in re.finditer(re.escape(sig), data)]
    if not spots or rng.random() < 0.2:
        return mut_generic(data, rng)
    at = rng.choice(spots) + rng.randrange(4, 64)
    size = rng.choice([1, 1, 2, 4, 8])
    if at + size > len(data):
        return mut_generic(data, rng)
    old = int.from_bytes(data[at : at + size], "little")
    v = hostile_int(rng, old) & ((1 << (8 * size)) - 1)
    b = bytearray(data)
    b[at : at + size] = v.to_bytes(size, "little")
    return bytes(b), f"u{8 * size} @{at} = {v} (was {old})"


MUTATORS: dict[str, Callable[[bytes, random.Random], tuple[bytes, str]]] = {
    "ztensor": mut_ztensor,
    "oinf": mut_oinf,
    "fold": mut_fold,
    "wtxt": mut_wtxt,
    "taridx": mut_taridx,
    "npz": mut_npz,
    "safetensors": mut_safetensors,
    "onnx": mut_onnx,
    "gguf": mut_gguf,
    "torchpickle": mut_torchpickle,
    "hdf5": mut_hdf5,
}


def mutate(fmt: str, data: bytes, rng: random.Random) -> tuple[bytes, str]:
    descs = []
    for _ in range(1 if rng.random() < 0.75 else 2):
        if rng.random() < 0.75:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    data, d = MUTATORS[fmt](data, rng)
            except Exception:  # noqa: BLE001 - the previous mutation broke the structure
                data, d = mut_generic(data, rng)
        else:
            data, d = mut_generic(data, rng)
        descs.append(d)
    return data, "; ".join(descs)


# ------------------------------------------------------------------------------------------
# kinds whose cases are more than one file: zTensor v2, sharded indexes, remote reads
#
# A case of these kinds is a Bundle: files (and symbolic links, FIFOs) under the case's work
# directory, the one the operations open (``entry``) and what the oracle expects (``ctx``,
# JSON): links planted out of the index's directory (``escapes``), valid input that must be
# read (``must_read``), reference files a successful read must equal one of (``refs``), the
# misbehaviour of the HTTP server (``remote``).

OUTSIDE_SECRET = b"root:x:0:0:root:/root:/bin/bash\nfuzz-outside-secret\n"
SECRET_MARKS = ("fuzz-outside-secret", "root:x:0")
WORK = "{work}"  # a link target starting with this is made absolute under the case's directory


@dataclasses.dataclass(frozen=True)
class Link:
    """A symbolic link to ``target`` (``{work}/...`` is made absolute)."""

    target: str


@dataclasses.dataclass(frozen=True)
class Fifo:
    """A named pipe (a reader must refuse it at once, never block on it)."""


@dataclasses.dataclass
class Bundle:
    """Files of a case, by path relative to the case's work directory."""

    files: dict[str, Any]
    entry: str
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def copy(self) -> Bundle:
        return Bundle(dict(self.files), self.entry, dict(self.extra))


def materialize(b: Bundle, work: Path) -> Path:
    for rel, v in b.files.items():
        p = work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(v, Link):
            os.symlink(v.target.replace(WORK, str(work)), p)
        elif isinstance(v, Fifo):
            os.mkfifo(p)
        else:
            p.write_bytes(v)
    return work / b.entry


def bundle_tar(b: Bundle, ctx: dict) -> bytes:
    """The case as a tar (links keep their ``{work}`` targets; ``fuzz-case.json`` holds the
    entry and the oracle's expectations): what ``--replay`` takes."""
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:

        def put(
            name: str, data: bytes | None = None, kind: bytes = tarfile.REGTYPE, link: str = ""
        ) -> None:
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = kind, link
            ti.size = len(data) if data is not None else 0
            t.addfile(ti, io.BytesIO(data) if data is not None else None)

        meta = {"entry": b.entry, "ctx": ctx}
        put("fuzz-case.json", json.dumps(meta, indent=2, default=repr).encode())
        for rel, v in b.files.items():
            if isinstance(v, Link):
                put(rel, kind=tarfile.SYMTYPE, link=v.target)
            elif isinstance(v, Fifo):
                put(rel, kind=tarfile.FIFOTYPE)
            else:
                put(rel, v)
    return out.getvalue()


def bundle_from_tar(path: Path) -> tuple[Bundle, dict]:
    import tarfile

    files: dict[str, Any] = {}
    meta: dict = {}
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if m.name == "fuzz-case.json":
                meta = json.loads(t.extractfile(m).read())  # type: ignore[union-attr]
            elif m.issym():
                files[m.name] = Link(m.linkname)
            elif m.isfifo():
                files[m.name] = Fifo()
            elif m.isfile():
                files[m.name] = t.extractfile(m).read()  # type: ignore[union-attr]
    return Bundle(files, meta["entry"]), meta["ctx"]


def fingerprint(value: Any) -> Any:
    """What a read gave, comparable across reads (dtype, shape and bytes of every array)."""
    if isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        return [a.dtype.str, list(a.shape), hashlib.sha256(a.view(np.uint8).data).hexdigest()]
    if hasattr(value, "numpy") and hasattr(value, "dtype"):  # a torch tensor
        return fingerprint(value.numpy())
    if isinstance(value, Mapping):
        return {str(k): fingerprint(value[k]) for k in value}
    fields = getattr(value, "__dict__", None) or {
        k: getattr(value, k) for k in getattr(value, "__slots__", ()) if hasattr(value, k)
    }
    if fields:
        return {k: fingerprint(v) for k, v in fields.items() if not callable(v)}
    if isinstance(value, (list, tuple)):
        return [fingerprint(v) for v in value]
    return repr(value)[:200]


def read_all(r: Any) -> dict:
    """Every tensor of a reader, fingerprinted (read each by name, as a user would)."""
    return {n: fingerprint(r[n]) for n in list(r)}


# -- zTensor v2 -----------------------------------------------------------------------------


def v2_seeds(d: Path) -> list[tuple[str, Bundle]]:
    import ml_dtypes

    import tenfold.ztensor as zt
    from tenfold.ztensor.sparse import SparseTensor

    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2)
    small = {"canonical": False, "align": 4096, "fsync": False}
    out: list[tuple[str, Bundle]] = []

    def one(name: str, path: Path, **extra: Any) -> None:
        out.append((name, Bundle({"case/case.zt": path.read_bytes()}, "case/case.zt", extra)))

    p = d / "dense.zt"
    with zt.Writer(p, generation=2, attributes={"k": "v", "n": [1, 2]}, **small) as w:
        w.add("f32", rng.standard_normal((3, 5)).astype(np.float32), attrs={"a": 1})
        w.add("bf16", np.arange(6, dtype=np.float32).astype(tenfold.core.BFLOAT16))
        w.add("i8", np.arange(-4, 4, dtype=np.int8).reshape(2, 4))
        w.add("u64", np.array([2**64 - 1, 0], np.uint64))
        w.add("b", np.array([True, False, True]))
        w.add("c64", np.array([1 + 2j, 3 - 4j], np.complex64))
        w.add("e4m3", np.arange(4, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn))
        w.add("f4", np.array([0.5, 1.0, -2.0], np.float32).astype(ml_dtypes.float4_e2m1fn))
        w.add("scalar", np.array(2.5, np.float64))
        w.add("empty", np.zeros((0, 3), np.float16))
    one("dense", p)
    p = d / "dedup.zt"  # identical parts stored once (aliased blobs)
    same = np.arange(1024, dtype=np.int32)
    with zt.Writer(p, generation=2, **small) as w:
        w.add("a", same)
        w.add("b", same.copy())
        w.add("c", same[:512].copy())
    one("dedup", p)
    p = d / "sparse.zt"
    with zt.Writer(p, generation=2, **small) as w:
        w.add(
            "csr",
            SparseTensor(
                "csr",
                (3, 4),
                np.array([1.0, 2.0, 3.0], np.float32),
                indices=np.array([0, 3, 1], np.uint64),
                indptr=np.array([0, 2, 2, 3], np.uint64),
            ),
        )
        w.add(
            "coo",
            SparseTensor(
                "coo",
                (3, 4, 5),
                np.array([1.0, 2.0], np.float64),
                coords=np.array([[0, 2], [1, 3], [4, 0]], np.uint64),
            ),
        )
        w.add("d", np.ones(3, np.float32))
    one("sparse", p)
    p = d / "zstd.zt"
    with zt.Writer(p, generation=2, **small) as w:
        w.add("z", np.arange(3000, dtype=np.int64).reshape(30, 100), encoding="zstd")
        w.add("r", np.zeros(10, np.float32), encoding="zstd")
        w.add("raw", np.ones(4, np.uint16))
    one("zstd", p)
    p = d / "append.zt"
    with zt.Writer(p, generation=2, **small) as w:
        w.add("old", np.arange(12, dtype=np.float32).reshape(3, 4))
        w.add("old2", np.ones(5, np.int16))
    old = p.read_bytes()
    zt.append(
        p, {"new": np.arange(7, dtype=np.int64), "new_z": np.zeros(50, np.float32)}, fsync=False
    )
    zt.append(p, {"newer": same[:16].copy()}, encoding="zstd", fsync=False)
    one("append", p, old=old)
    p = d / "canonical.zt"  # the default form (64 KiB placement)
    zt.save(p, {"x": np.arange(10, dtype=np.float32), "y": same[:8]}, generation=2, fsync=False)
    one("canonical", p)
    p = d / "sh" / "m.zt"  # a root manifest with a shard table, data shards beside it
    p.parent.mkdir(exist_ok=True)
    paths = zt.save_sharded(
        p,
        {"a": same, "b": np.ones((4, 4), np.float32), "c": same[:4]},
        shard_bytes=4096,
        align=4096,
        digest=rng.choice(["sha256", "xxh3"]),
        fsync=False,
    )
    files = {f"case/{Path(q).name}": Path(q).read_bytes() for q in paths}
    out.append(("sharded", Bundle(files, "case/m.zt")))
    root = Path(__file__).resolve().parents[1] / "tests" / "conformance" / "ztensor"
    for sub in ("v2", "v2-corpus/valid", "v2-corpus/reject"):
        for f in sorted((root / sub).glob("*.zt")) if (root / sub).is_dir() else []:
            if f.stat().st_size < 1 << 18 and not f.stem.startswith(("data-shard", "shard")):
                out.append(
                    (f"{sub}/{f.name}", Bundle({"case/case.zt": f.read_bytes()}, "case/case.zt"))
                )
    return out


def _v2_parse(data: bytes) -> tuple[int, int, dict]:
    from tenfold.ztensor import _dcbor

    moff, mlen = struct.unpack_from("<QQ", data, len(data) - 40)
    return moff, mlen, _dcbor.decode(data[moff : moff + mlen])


def _v2_build(data: bytes, moff: int, root: Any, rng: random.Random) -> bytes:
    """``data`` up to ``moff`` + ``root`` encoded + a footer with the right hash (so the lie
    reaches the manifest's checks), or now and then somewhere else."""
    import xxhash

    from tenfold.ztensor import _dcbor
    from tenfold.ztensor.v2writer import footer_bytes

    raw = _dcbor.encode(root)
    if rng.random() < 0.1:  # the manifest after the current end (a new generation)
        moff = len(data) - 40 + (-(len(data) - 40) % 4096)
        data = data[:-40] + bytes(moff - len(data) + 40)
    return data[:moff] + raw + footer_bytes(moff, len(raw), xxhash.xxh3_64_intdigest(raw))


def _v2_digest(algo: str, raw: bytes) -> str:
    import xxhash

    if algo == "sha256":
        return "sha256:" + hashlib.sha256(raw).hexdigest()
    return f"xxh3:{xxhash.xxh3_64_intdigest(raw):016x}"


def mut_ztensor2(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Lie in a v2 file's manifest (parts, objects, shard table), footer or digests."""
    r = rng.random()
    if r < 0.15:  # footer fields
        b = bytearray(data)
        pos, size, name = rng.choice(
            [
                (-40, 8, "manifest_offset"),
                (-32, 8, "manifest_length"),
                (-24, 8, "manifest_hash"),
                (-16, 4, "version"),
                (-12, 4, "reserved"),
                (-8, 8, "magic"),
                (0, 8, "head magic"),
            ]
        )
        n = len(b)
        old = int.from_bytes(b[n + pos : n + pos + size] if pos < 0 else b[:size], "little")
        v = hostile_int(rng, old) & ((1 << (8 * size)) - 1)
        if name == "manifest_offset" and rng.random() < 0.5:
            v = rng.choice([8, 4096, old + 4096, old - 4096, n - 40, n]) & (2**64 - 1)
        at = n + pos if pos < 0 else 0
        b[at : at + size] = v.to_bytes(size, "little")
        return bytes(b), f"footer {name}: {old} -> {v}"
    moff, mlen, root = _v2_parse(data)
    objects = root.get("objects") if isinstance(root, dict) else None
    if not isinstance(objects, dict) or not objects:
        root = {
            "objects": {
                "x": {
                    "shape": [2],
                    "layout": "dense",
                    "parts": {"data": {"dtype": "u8", "blob": [8, 2]}},
                }
            }
        }
        return _v2_build(data, moff, root, rng), "manifest replaced by a one-object lie"
    name = rng.choice(sorted(objects))
    obj = objects[name]
    parts = obj.get("parts") if isinstance(obj, dict) else None
    role = rng.choice(sorted(parts)) if isinstance(parts, dict) and parts else None
    part = parts[role] if role is not None and isinstance(parts[role], dict) else None
    all_blobs = [
        p.get("blob")
        for o in objects.values()
        if isinstance(o, dict)
        for p in (o.get("parts") or {}).values()
        if isinstance(p, dict)
    ]
    all_blobs = [x for x in all_blobs if isinstance(x, list) and len(x) == 2]
    desc = f"{name!r}"
    if r < 0.45 and part is not None:  # a part's field
        key = rng.choice(
            [
                "dtype",
                "type",
                "blob",
                "blob",
                "encoding",
                "decoded_length",
                "digest",
                "digest",
                "shard",
                "zzz",
            ]
        )
        old = part.get(key)
        if key == "dtype":
            v = rng.choice(["f64", "f32", "f16", "bf16", "i64", "u8", "i8", "f128", "", "F32", 3])
        elif key == "type":
            v = rng.choice(
                [
                    "bool",
                    "f4_e2m1",
                    "complex64",
                    "complex128",
                    "f8_e4m3fn",
                    "f8_e8m0",
                    "x.unknown/1",
                    "",
                    7,
                    None,
                ]
            )
        elif key == "blob":
            off, ln = old if isinstance(old, list) and len(old) == 2 else (8, 8)
            v = rng.choice(
                [
                    [hostile_int(rng, off), ln],
                    [off, hostile_int(rng, ln)],
                    [off + 1, ln],
                    [off - 4096, ln],
                    [moff, mlen],
                    [moff, ln],
                    [len(data) - 40, 40],
                    [0, 8],
                    [off, ln, 0],
                    [off],
                    [off, -1],
                    ["0", ln],
                    [off + 4096, ln],
                    [off, ln + 1],
                    rng.choice(all_blobs) if all_blobs else [off, ln],
                    [off, 2**63],
                    [2**64 - 4096, 4096],
                ]
            )
        elif key == "encoding":
            v = rng.choice(["zt.zstd-seekable/1", "zt.unknown/1", "", 1, None])
            if v == "zt.zstd-seekable/1" and "decoded_length" not in part:
                part["decoded_length"] = (old or 0) if rng.random() < 0.2 else hostile_int(rng, 64)
        elif key == "decoded_length":
            v = hostile_int(rng, old if isinstance(old, int) else 64)
        elif key == "digest":  # valid-looking but wrong
            b0 = all_blobs and rng.choice(all_blobs)
            other = data[b0[0] : b0[0] + b0[1]] if b0 and 0 <= b0[0] < len(data) else b"x"
            v = rng.choice(
                [
                    _v2_digest("xxh3", other),
                    _v2_digest("sha256", other),
                    f"xxh3:{rng.getrandbits(64):016x}",
                    "sha256:" + os.urandom(32).hex(),
                    "xxh3:" + "F" * 16,
                    "md5:" + "0" * 32,
                    "xxh3:",
                    "xxh3:" + "0" * 15,
                    5,
                ]
            )
        elif key == "shard":
            v = rng.choice(["00001", "../case", "", "x" * 70, ".hidden", "a/b", 1, "case"])
        else:
            v = rng.choice(ODD)
        part[key] = v
        desc += f" part {role!r}.{key}: {old!r} -> {v!r}"
    elif r < 0.6 and part is not None and "blob" in part and rng.random() < 0.8:
        # the data lies behind a matching digest: the part's bytes changed and its digest
        # recomputed, so the lie reaches the layout checks (CSR/COO indices, bool bytes, f4)
        off, ln = part["blob"]
        if not (isinstance(off, int) and isinstance(ln, int) and 0 < ln and off + ln <= moff):
            return mut_generic(data, rng)
        b = bytearray(data)
        how = rng.choice(["flip", "max", "zero", "pattern"])
        for _ in range(rng.randrange(1, 4)):
            i = off + rng.randrange(ln)
            b[i] = {
                "flip": b[i] ^ (1 << rng.randrange(8)),
                "max": 0xFF,
                "zero": 0,
                "pattern": 0x7F,
            }[how]
        if part.get("encoding") is None and isinstance(part.get("digest"), str):
            part["digest"] = _v2_digest(part["digest"].split(":")[0], bytes(b[off : off + ln]))
        data = bytes(b)
        desc += f" part {role!r}: bytes changed ({how}), digest recomputed"
    elif r < 0.75:  # the object
        key = rng.choice(
            [
                "shape",
                "shape",
                "layout",
                "drop part",
                "rename part",
                "extra part",
                "attributes",
                "name",
            ]
        )
        if key == "shape":
            old = obj.get("shape")
            obj["shape"] = rng.choice(SHAPES + [[1] * 65, [2**32, 2**32, 2**32], None, "3"])
            desc += f" shape {old!r} -> {obj['shape']!r}"
        elif key == "layout":
            obj["layout"] = rng.choice(
                [
                    "dense",
                    "zt.sparse_csr/1",
                    "zt.sparse_coo/1",
                    "zt.mx/1",
                    "zt.quant_group/1",
                    "x.unknown/1",
                    "",
                    3,
                ]
            )
            desc += f" layout -> {obj['layout']!r}"
        elif key == "drop part" and role is not None:
            del parts[role]
            desc += f" part {role!r} dropped"
        elif key == "rename part" and role is not None:
            parts[rng.choice(["data", "values", "indices", "indptr", "coords", "scales", "x"])] = (
                parts.pop(role)
            )
            desc += f" part {role!r} renamed"
        elif key == "extra part" and part is not None:
            alias = dict(part)
            if all_blobs and rng.random() < 0.5:
                alias["blob"] = rng.choice(all_blobs)
            parts[rng.choice(["data", "values", "indices", "scales", "extra"])] = alias
            desc += " extra part aliasing a blob"
        elif key == "attributes":
            deep: Any = 1
            for _ in range(rng.choice([3, 30, 40])):
                deep = [deep]
            obj["attributes"] = rng.choice([deep, {"": 1}, {"a\0": 1}, [], "x", {"k": deep}])
            desc += " attributes lie"
        else:
            new = rng.choice(["", "a\0b", "x" * 2000, "e\u0301", "\u00e9", name + "/..", "."])
            objects[new] = objects.pop(name)
            desc = f"object {name!r} renamed {new!r}"
    elif r < 0.85:  # the root: shard table, attributes, objects' type
        key = rng.choice(["shards", "shards", "objects", "attributes", "extra"])
        if key == "shards":
            shards = root.get("shards") if isinstance(root.get("shards"), dict) else {}
            label = rng.choice(sorted(shards)) if shards and rng.random() < 0.7 else "00001"
            entry = dict(shards.get(label) or {"size": 4096, "digest": "sha256:" + "0" * 64})
            f = rng.choice(["size", "digest", "name", "drop"])
            if f == "size":
                entry["size"] = hostile_int(rng, entry.get("size") or 0)
            elif f == "digest":
                entry["digest"] = rng.choice(
                    ["sha256:" + os.urandom(32).hex(), "xxh3:" + "0" * 16, "sha256:", 1]
                )
            elif f == "name":
                shards.pop(label, None)
                label = rng.choice(["../case", "", ".x", "a/b", "x" * 65, "case", "00001"])
            else:
                shards.pop(label, None)
                entry = None
            if entry is not None:
                shards[label] = entry
            root["shards"] = shards
            if rng.random() < 0.5 and part is not None:
                part["shard"] = label
            desc = f"shard table {label!r}: {f}"
        elif key == "objects":
            root["objects"] = rng.choice([[], "x", None, {"a": 1}, {"a": {"shape": []}}])
            desc = f"objects -> {root['objects']!r}"
        elif key == "attributes":
            root["attributes"] = rng.choice([[], "x", {"": 1}, {"k": [[[[[]]]]]}])
            desc = f"file attributes -> {root['attributes']!r}"
        else:
            root[rng.choice(["zzz", "version", "objectz"])] = rng.choice(ODD)
            desc = "unknown root key"
    else:
        return mut_generic(data, rng)
    try:
        return _v2_build(data, moff, root, rng), desc[:200]
    except (TypeError, ValueError, OverflowError):
        return mut_generic(data, rng)


def build_ztensor2(seed: Bundle, rng: random.Random) -> tuple[Bundle, str, dict]:
    b = seed.copy()
    old = seed.extra.get("old")
    main = b.files[b.entry]
    ctx: dict[str, Any] = {}
    if old is not None and rng.random() < 0.35:  # an append cut short
        n = len(main)
        how = rng.choice(["hole", "unlinked", "old size", "anywhere"])
        if how == "hole":  # step 1 of an append: old bytes, a hole, the old footer at the end
            b.files[b.entry] = old + bytes(max(0, n - len(old) - 40)) + old[-40:]
        elif how == "unlinked":  # step 2: new blobs and manifest written, the old footer
            b.files[b.entry] = main[:-40] + old[-40:]
        elif how == "old size":
            b.files[b.entry] = main[: len(old)]
        else:
            b.files[b.entry] = main[: rng.randrange(len(old), n)]
        if how != "anywhere":  # the file means the old generation: it must read as the old one
            b.files["ref/old.zt"] = old
            ctx.update(must_read=True, refs=["ref/old.zt"])
        return b, f"append cut short ({how})", ctx
    if len(b.files) > 1 and rng.random() < 0.3:  # a data shard of a sharded v2 model
        shard = rng.choice(sorted(k for k in b.files if k != b.entry))
        b.files[shard], desc = mut_generic(b.files[shard], rng)
        if rng.random() < 0.2:
            del b.files[shard]
            desc = "removed"
        return b, f"{shard}: {desc}", ctx
    data, descs = main, []
    for _ in range(1 if rng.random() < 0.75 else 2):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                data, d = (mut_ztensor2 if rng.random() < 0.8 else mut_generic)(data, rng)
        except Exception:  # noqa: BLE001 - the previous mutation broke the structure
            data, d = mut_generic(data, rng)
        descs.append(d)
    b.files[b.entry] = data
    return b, "; ".join(descs), ctx


def ops_ztensor2(p: str, work: Path) -> list[tuple[str, Callable, set]]:
    import tenfold.ztensor as zt

    def read() -> dict:
        with tenfold.open(p) as r:
            for n in list(r):
                info = r.info(n)
                for role in getattr(info, "parts", {}) or {}:
                    r.stored(n, role)
                    r.decoded(n, role)
                if getattr(info, "layout", None) == "dense" and len(info.shape) and info.shape[0]:
                    r.read(n, (slice(0, 2),))
                    r.read(n, (-1,))
                r.read(n, copy=True)
            return read_all(r)

    def unchecked() -> None:
        with zt.V2Reader(p, verify_checksums=False, sparse="raw", mmap=False) as r:
            read_all(r)

    def verify() -> None:
        rep = zt.verify(p)
        if not rep.ok:
            raise _refused(rep, "; ".join(f.message for f in rep.errors)[:300])

    def append() -> None:
        q = work / "appended.zt"
        shutil.copyfile(p, q)
        for s in Path(p).parent.glob(Path(p).stem + "-*.zt"):  # its data shards, if any
            shutil.copyfile(s, work / ("appended" + s.name[len(Path(p).stem) :]))
        zt.append(q, {"fuzz_new": np.arange(3, dtype=np.int32)}, fsync=False)
        got = zt.load(q)
        if not np.array_equal(got["fuzz_new"], np.arange(3)):
            raise AssertionError("appended tensor reads back wrong")

    return [
        ("zt2.read", read, {"reads"}),
        ("zt2.read_unchecked", unchecked, set()),
        ("zt2.verify", verify, {"must"}),
        ("zt2.inspect", lambda: zt.inspect(p), set()),
        ("zt2.content_digest", lambda: zt.content_digest(p), set()),
        ("zt2.append", append, set()),
        ("load", lambda: read_all(tenfold.load(p)), {"reads"}),
        ("load_copy", lambda: read_all(tenfold.load(p, copy=True)), {"reads"}),
    ]


# -- sharded indexes ------------------------------------------------------------------------


def sharded_seeds(d: Path) -> list[tuple[str, Bundle]]:
    import tenfold.sharded as sharded

    rng = np.random.default_rng(3)
    tensors = {
        "embed.weight": rng.standard_normal((8, 4)).astype(np.float32),
        "layer.0.w": np.arange(24, dtype=np.int64).reshape(4, 6),
        "layer.0.b": np.ones(6, np.float16),
        "layer.1.w": np.arange(24, dtype=np.int32).reshape(6, 4),
        "head": np.zeros(3, np.float64),
    }
    out = []
    for ext in (".safetensors", ".zt"):
        sub = d / ext[1:]
        sub.mkdir(parents=True, exist_ok=True)
        paths = sharded.save(sub / f"model{ext}", tensors, 200, fsync=False)
        files = {f"case/{Path(q).name}": Path(q).read_bytes() for q in paths}
        index = f"case/model{ext}.index.json"
        out.append((f"plain{ext}", Bundle(files, index)))
        # the Hugging Face cache: snapshots/<rev>/<file> -> ../../blobs/<sha256 of the file>
        repo = "case/hub/models--org--m"
        hf: dict[str, Any] = {}
        for rel, data in files.items():
            sha = hashlib.sha256(data).hexdigest()
            hf[f"{repo}/blobs/{sha}"] = data
            hf[f"{repo}/snapshots/abc123/{Path(rel).name}"] = Link(f"../../blobs/{sha}")
        hf[f"{repo}/refs/main"] = b"abc123"
        out.append(
            (
                f"hf-cache{ext}",
                Bundle(hf, f"{repo}/snapshots/abc123/model{ext}.index.json", {"hf": repo}),
            )
        )
    return out


def _index(b: Bundle) -> dict | None:
    try:
        doc = json.loads(_content(b, b.entry))
    except (ValueError, TypeError, KeyError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("weight_map"), dict) else None


def _content(b: Bundle, rel: str) -> bytes:
    """The bytes at ``rel`` of the bundle, following its links (a few hops)."""
    for _ in range(8):
        v = b.files[rel]
        if not isinstance(v, Link):
            return v
        rel = os.path.normpath(os.path.join(os.path.dirname(rel), v.target))
    raise KeyError(rel)


def _put_index(b: Bundle, rel: str, doc: Any) -> None:
    """Write an index to ``rel`` (through the link there, if any: the HF cache's blob)."""
    v = b.files.get(rel)
    if isinstance(v, Link):
        rel = os.path.normpath(os.path.join(os.path.dirname(rel), v.target))
    b.files[rel] = json.dumps(doc, indent=1).encode() if not isinstance(doc, bytes) else doc


def build_sharded(seed: Bundle, rng: random.Random) -> tuple[Bundle, str, dict]:
    b = seed.copy()
    doc = _index(b)
    assert doc is not None
    wm: dict[str, str] = doc["weight_map"]
    here = os.path.dirname(b.entry)
    shards = sorted(set(wm.values()))
    ctx: dict[str, Any] = {}
    r = rng.random()
    if r < 0.08:  # unchanged: valid input must read
        ctx["must_read"] = True
        return b, "valid", ctx
    if r < 0.13:  # the index's directory reached through a link (allowed: the target is inside)
        files = {}
        for rel, v in b.files.items():
            files[rel.replace("case/", "case/real/", 1) if rel.startswith("case/") else rel] = v
        files["case/via"] = Link("real")
        b.files = files
        b.entry = b.entry.replace("case/", "case/via/", 1)
        ctx["must_read"] = True
        return b, "index's directory is a link to a directory inside the case", ctx
    if r < 0.4:  # links
        shard = rng.choice(shards)
        at = f"{here}/{shard}"
        moved = f"outside/{shard}"
        how = rng.choice(
            [
                "moved out",
                "moved out abs",
                "passwd",
                "subdir",
                "dev",
                "other repo",
                "inside",
                "dangling",
                "loop",
                "to index",
                "to dir",
                "fifo",
            ]
        )
        out_target = os.path.relpath(moved, here)
        escape = None
        if how in ("moved out", "moved out abs"):  # the shard lives outside, a link points at it
            b.files[moved] = _content(b, at)
            b.files[at] = Link(out_target if how == "moved out" else f"{WORK}/{moved}")
            escape = [shard]
        elif how == "passwd":
            b.files["outside/passwd"] = OUTSIDE_SECRET
            b.files[at] = Link(os.path.relpath("outside/passwd", here))
            escape = [shard]
        elif how == "subdir":  # a directory link out of the index's directory
            b.files[moved] = _content(b, at)
            del b.files[at]
            b.files[f"{here}/sub"] = Link(os.path.relpath("outside", here))
            for n, s in wm.items():
                if s == shard:
                    wm[n] = f"sub/{shard}"
            _put_index(b, b.entry, doc)
            escape = [f"sub/{shard}", "sub"]
        elif how == "dev":
            b.files[at] = Link("/dev/zero")
            escape = [shard]
        elif how == "other repo" and "hf" in seed.extra:  # a blob of another repository
            other = seed.extra["hf"].replace("models--org--m", "models--org--other")
            b.files[f"{other}/blobs/x"] = _content(b, at)
            b.files[at] = Link(os.path.relpath(f"{other}/blobs/x", here))
            escape = [shard]
        elif how == "inside":  # a link to another shard in the directory (allowed)
            b.files[at] = Link(rng.choice(shards))
        elif how == "dangling":
            b.files[at] = Link("nowhere.safetensors")
        elif how == "loop":
            b.files[at] = Link(shard)
        elif how == "to index":
            b.files[at] = Link(os.path.basename(b.entry))
        elif how == "to dir":
            b.files[at] = Link(rng.choice([".", "..", "/"]))
            escape = [shard] if b.files[at].target != "." else None
        else:
            b.files[at] = Fifo()
        if escape:
            ctx["escapes"] = escape
        return b, f"shard {shard!r}: {how}", ctx
    if r < 0.55:  # index cycles
        own = os.path.basename(b.entry)
        how = rng.choice(["self", "self all", "mutual", "nested", "nested cycle"])
        if how.startswith("self"):
            for n in list(wm) if how == "self all" else [rng.choice(list(wm))]:
                wm[n] = own
        elif how == "mutual":
            other = f"other{Path(own).suffixes[0]}.index.json"
            name = rng.choice(list(wm))
            wm[name] = other
            b.files[f"{here}/{other}"] = json.dumps(
                {"metadata": {}, "weight_map": {name: own}}
            ).encode()
        else:  # a shard that is itself an index (of the real shards, or of the first index)
            inner = f"inner{Path(own).suffixes[0]}.index.json"
            shard = rng.choice(shards)
            names = [n for n, s in wm.items() if s == shard]
            target = shard if how == "nested" else own
            b.files[f"{here}/{inner}"] = json.dumps(
                {"metadata": {}, "weight_map": {n: target for n in names}}
            ).encode()
            for n in names:
                wm[n] = inner
        _put_index(b, b.entry, doc)
        return b, f"index cycle: {how}", ctx
    if r < 0.68:  # names
        name = rng.choice(list(wm))
        v = rng.choice(
            [
                "../outside/x.safetensors",
                "/etc/passwd",
                f"{WORK}/outside/passwd",
                "sub/../../x",
                "a\\..\\b",
                "C:/x",
                "",
                ".",
                "./" + shards[0],
                "%2e%2e/x",
                "x\0y",
                "..",
                "~/x",
                " " + shards[0],
                shards[0] + "/",
                "a" * 5000,
                "case",
                "\u2025/x",
            ]
        )
        if v.startswith(WORK):
            b.files["outside/passwd"] = OUTSIDE_SECRET
        wm[name] = v.replace(WORK, str(Path(tempfile.gettempdir()) / "no-such-fuzz-dir"))
        _put_index(b, b.entry, doc)
        return b, f"weight_map[{name!r}] = {v[:60]!r}", ctx
    if r < 0.8:  # shards and tensors
        how = rng.choice(["missing", "lacks", "extra", "mutate"])
        shard = rng.choice(shards)
        if how == "missing":
            del b.files[f"{here}/{shard}"]
        elif how == "lacks":
            name = rng.choice(list(wm))
            wm[name] = rng.choice([s for s in shards if s != wm[name]] or shards)
            if rng.random() < 0.3:
                wm["fuzz.absent"] = shard
            _put_index(b, b.entry, doc)
        elif how == "extra":
            wm.pop(rng.choice(list(wm)))
            _put_index(b, b.entry, doc)
        else:
            at = f"{here}/{shard}"
            fmt = "safetensors" if shard.endswith(".safetensors") else "ztensor"
            data, d = mutate(fmt, _content(b, at), rng)
            if isinstance(b.files[at], Link):
                del b.files[at]
            b.files[at] = data
            return b, f"shard {shard!r}: {d}", ctx
        return b, f"shard {shard!r}: {how}", ctx
    if r < 0.9:  # metadata and JSON types
        how = rng.choice(["total_size", "metadata", "weight_map", "doc", "value"])
        if how == "total_size":
            doc.setdefault("metadata", {})
            if not isinstance(doc["metadata"], dict):
                doc["metadata"] = {}
            doc["metadata"]["total_size"] = rng.choice(
                [-1, -(2**63), 2**70, 1.5, "100", None, [], {}, True, float("nan"), 0]
            )
        elif how == "metadata":
            doc["metadata"] = rng.choice([[], "x", 3, None, {"total_size": {"a": [1]}}])
        elif how == "weight_map":
            doc["weight_map"] = rng.choice(
                [[], "x", None, {}, {"a": 1}, {"a": None}, {"a": ["x"]}, {"": shards[0]}]
            )
        elif how == "doc":
            doc = rng.choice([[], "x", 1, None])  # type: ignore[assignment]
        else:
            doc["weight_map"] = {k: rng.choice([v, 1, None, [v], {"f": v}]) for k, v in wm.items()}
        _put_index(b, b.entry, doc)
        return b, f"json {how}", ctx
    # size and shape of the JSON itself
    how = rng.choice(["deep", "deep metadata", "wide", "long name", "bytes", "over limit"])
    if how == "deep":
        raw = b'{"weight_map": ' + b"[" * 200000 + b"]" * 200000 + b"}"
    elif how == "deep metadata":
        raw = b'{"metadata": ' + b'{"a":' * 50000 + b"1" + b"}" * 50001
        raw = raw[:-1] + b', "weight_map": ' + json.dumps(wm).encode() + b"}"
    elif how == "wide":
        big = dict(wm)
        big.update({f"t{i}": shards[0] for i in range(200000)})
        doc["weight_map"] = big
        raw = json.dumps(doc).encode()
    elif how == "long name":
        wm["n" * (1 << 20)] = shards[0]
        raw = json.dumps(doc).encode()
    elif how == "bytes":
        raw = rng.choice(
            [
                b"\xef\xbb\xbf" + json.dumps(doc).encode(),
                b"\xff\xfe{}",
                b'{"weight_map": {"a": "x", "a": "y"}}',
                b'{"weight_map": NaN}',
                b"{" * 10,
                b'{"weight_map": {"a": "\\ud800"}}',
                b"",
            ]
        )
    elif rng.random() < 0.2:  # just over the 64 MiB index limit
        raw = b'{"weight_map": {}, "metadata": {"pad": "' + b"x" * (64 << 20) + b'"}}'
    else:
        raw = b'{"weight_map": {}, "metadata": {"pad": "' + b"x" * (4 << 20) + b'"}}'
    _put_index(b, b.entry, raw)
    return b, f"json {how} ({len(raw)} bytes)", ctx


def ops_sharded(p: str, work: Path) -> list[tuple[str, Callable, set]]:
    import tenfold.convert as conv
    import tenfold.sharded as sharded

    def top_open() -> dict:
        with tenfold.open(p) as r:
            for n in list(r):
                r.info(n)
                r.read(n)
            return read_all(r)

    def verify() -> None:
        rep = sharded.verify(p)
        if not rep.ok:
            raise _refused(rep, "; ".join(f.message for f in rep.errors)[:1000])

    def convert() -> None:
        tensors = conv.read_any(p)
        with contextlib.suppress(TenfoldError):
            conv.write_any(work / "out.safetensors", tensors)

    ops: list[tuple[str, Callable, set]] = [
        ("detect", lambda: tenfold.detect(p), set()),
        ("open", top_open, {"reads", "shards"}),
        ("load", lambda: read_all(tenfold.load(p)), {"reads", "shards"}),
        ("load_copy", lambda: read_all(tenfold.load(p, copy=True)), {"reads", "shards"}),
        ("sharded.verify", verify, {"shards"}),
        ("sharded.inspect", lambda: sharded.inspect(p), {"shards"}),
        ("convert", convert, {"shards"}),
        ("cli.inspect", lambda: _cli(["inspect", p]), {"shards"}),
        ("cli.verify", lambda: _cli(["verify", p]), {"shards"}),
    ]
    if os.environ.get("TENFOLD_FUZZ_TORCH", "1") == "1":
        with contextlib.suppress(ImportError):
            import torch  # noqa: F401

            import tenfold.torch as tt

            ops.append(("torch.load_file", lambda: read_all(tt.load_file(p)), {"reads", "shards"}))
    return ops


# -- remote reads through a misbehaving HTTP server -----------------------------------------

#: What the server does wrong, chosen per case. ``BENIGN`` ones serve the object faithfully
#: (a valid file must then read, and equal the local read); the others may make a read fail,
#: but only with a tenfold error or an OSError naming the URL, never with wrong values.
REMOTE_MODES = [
    "honest",
    "ignore-range",
    "short",
    "short-cl",
    "shift",
    "total-lie",
    "change",
    "change-no-if-match",
    "weak-etag",
    "weak-etag-change",
    "no-validators",
    "last-modified",
    "last-modified-change",
    "chunked",
    "no-length",
    "stall-head",
    "stall-body",
    "error-500",
]
BENIGN = {"honest", "weak-etag", "no-validators", "last-modified", "chunked"}
STALLS = {"stall-head", "stall-body"}
CHANGES = {"change", "change-no-if-match", "weak-etag-change", "last-modified-change"}
#: seconds a child waits on the network before its read must fail (with an OSError)
REMOTE_TIMEOUT = 2.0


def remote_options(seconds: float) -> dict[str, Any]:
    """The options every remote read in a child gets for a short network timeout: the one
    place to change when tenfold names its own option (issue #21).

    ``TENFOLD_FUZZ_TIMEOUT_OPTION=name`` passes ``name=seconds`` to ``tenfold.open``;
    ``=storage:name`` passes it in ``storage_options``. By default: tenfold's ``timeout``
    option where ``tenfold.core.source.open_file`` takes one, else aiohttp's ``ClientTimeout``
    through fsspec's ``client_kwargs`` (what fsspec's HTTP filesystem takes today).
    """
    import inspect

    style = os.environ.get("TENFOLD_FUZZ_TIMEOUT_OPTION", "")
    if style.startswith("storage:"):
        return {"storage_options": {style[8:]: seconds}}
    if style:
        return {style: seconds}
    from tenfold.core import source

    if "timeout" in inspect.signature(source.open_file).parameters:
        return {"timeout": seconds}
    import aiohttp

    t = aiohttp.ClientTimeout(total=seconds, sock_connect=seconds, sock_read=seconds)
    return {"storage_options": {"client_kwargs": {"timeout": t}}}


class RemoteCase:
    """One case's objects (path -> [version A, version B]) and misbehaviour."""

    def __init__(self, objects: dict[str, list[bytes]], cfg: dict) -> None:
        self.objects = objects
        self.cfg = cfg
        self.requests = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()


class _MisbehavingHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._serve(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        srv = self.server
        with srv.lock:
            srv.active += 1
        try:
            self._answer(head)
        except OSError:
            self.close_connection = True  # the client went away
        finally:
            with srv.lock:
                srv.active -= 1

    def _answer(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        token, _, rest = path.lstrip("/").partition("/")
        case = self.server.cases.get(token)
        versions = case.objects.get("/" + rest) if case else None
        if case is None or versions is None:
            self._reply(404, b"not found", {})
            return
        cfg = case.cfg
        mode = cfg["mode"]
        with case.lock:
            case.requests += 1
            n = case.requests
        active = n >= cfg["from"]
        which = 1 if mode in CHANGES and active else 0
        data = versions[which]
        size = len(data)
        tag = hashlib.md5(data).hexdigest()
        hdr: dict[str, str] = {"Accept-Ranges": "bytes"}
        if mode.startswith("weak-etag"):
            hdr["ETag"] = f'W/"{tag}"'
        elif mode.startswith("last-modified"):
            hdr["Last-Modified"] = [
                "Mon, 01 Jan 2024 00:00:00 GMT",
                "Tue, 02 Jan 2024 00:00:00 GMT",
            ][which]
        elif mode != "no-validators":
            hdr["ETag"] = f'"{tag}"'
        if mode in STALLS and active and (mode == "stall-head" or not head):
            if mode == "stall-body":  # headers, then nothing
                self.send_response(206 if self.headers.get("Range") else 200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                self.wfile.flush()
            case.stop.wait(600)
            self.close_connection = True
            return
        if mode == "error-500" and active:
            self._reply(500, b"internal error", {})
            return
        want = self.headers.get("If-Match")
        etag = hdr.get("ETag", "")
        if want is not None and mode != "change-no-if-match":
            # RFC 9110: If-Match compares strongly, so a weak tag never matches
            if want != etag or want.startswith("W/") or etag.startswith("W/"):
                self._reply(412, b"precondition failed", {})
                return
        if head:
            if mode == "no-length":
                hdr["Transfer-Encoding"] = "chunked"
                self._reply(200, b"", hdr, length=None, body=False)
            else:
                self._reply(200, b"", hdr, length=size, body=False)
            return
        m = re.match(r"^bytes=(\d*)-(\d*)$", self.headers.get("Range") or "")
        if not m or mode == "ignore-range" and active:
            self._reply(200, data, hdr, chunked=mode in ("chunked", "no-length"))
            return
        a, z = m.groups()
        if a == "":
            start, end = max(0, size - int(z)), size
        else:
            start, end = int(a), min(size, int(z) + 1 if z else size)
        if start >= size or start >= end:
            self._reply(416, b"", {"Content-Range": f"bytes */{size}"})
            return
        total = size
        if active:
            if mode == "short":
                end = start + max(0, (end - start) // 2)
            elif mode == "shift":
                k = cfg["shift"]
                start, end = max(0, min(size - 1, start + k)), max(1, min(size, end + k))
            elif mode == "total-lie":
                total = size + cfg["shift"]
        body = data[start:end]
        hdr["Content-Range"] = f"bytes {start}-{max(start, end - 1)}/{total}"
        if mode == "short-cl" and active:
            self._reply(206, body[: len(body) // 2], hdr, length=len(body))
            self.close_connection = True
            return
        self._reply(206, body, hdr, chunked=mode in ("chunked", "no-length"))

    def _reply(
        self,
        code: int,
        payload: bytes,
        hdr: dict[str, str],
        *,
        length: int | None = -1,
        body: bool = True,
        chunked: bool = False,
    ) -> None:
        self.send_response(code)
        for k, v in hdr.items():
            self.send_header(k, v)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif length is not None:
            self.send_header("Content-Length", str(len(payload) if length == -1 else length))
        self.end_headers()
        if not body:
            return
        if chunked:
            for i in range(0, len(payload), 1000):
                piece = payload[i : i + 1000]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.wfile.write(payload)


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer (a stall, a timeout): nothing to report


class MisbehavingServer:
    """An HTTP server on 127.0.0.1 (a thread of the fuzzer's parent process) serving each
    case's objects under ``/<token>/`` with that case's misbehaviour."""

    def __init__(self) -> None:
        self.httpd = _QuietServer(("127.0.0.1", 0), _MisbehavingHandler)
        self.httpd.cases = {}  # type: ignore[attr-defined]
        self.httpd.lock = threading.Lock()  # type: ignore[attr-defined]
        self.httpd.active = 0  # type: ignore[attr-defined]
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add(self, token: str, case: RemoteCase) -> str:
        self.httpd.cases[token] = case  # type: ignore[attr-defined]
        return f"http://127.0.0.1:{self.port}/{token}/"

    def end(self, token: str) -> None:
        case = self.httpd.cases.pop(token, None)  # type: ignore[attr-defined]
        if case is not None:
            case.stop.set()
        deadline = time.monotonic() + 2
        while self.httpd.active and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.005)  # no handler mid-request when the next child forks

    def close(self) -> None:
        for case in self.httpd.cases.values():  # type: ignore[attr-defined]
            case.stop.set()
        for token in list(self.httpd.cases):  # type: ignore[attr-defined]
            self.end(token)
        self.httpd.shutdown()
        self.httpd.server_close()


REMOTE_FORMATS = ["safetensors", "npz", "oinf", "ztensor", "ztensor2"]


def remote_seeds(d: Path) -> list[tuple[str, Bundle]]:
    """Two versions of one file per format: same names, dtypes and shapes, other values."""
    import tenfold.oinf as oinf
    import tenfold.ztensor as zt
    from tenfold.interop import write_safetensors

    d.mkdir(parents=True, exist_ok=True)
    out = []
    for fmt in REMOTE_FORMATS:
        ext = ".zt" if fmt.startswith("ztensor") else SUFFIX[fmt]
        vers = []
        for v in (0, 1):
            t = {
                "w": (np.arange(40, dtype=np.float32).reshape(5, 8) + v),
                "i": np.arange(9, dtype=np.int64) * (v + 1),
                "big": np.full(70000, v + 1, np.int32),  # past the first speculative block
            }
            p = d / f"{fmt}{v}{ext}"
            if fmt == "safetensors":
                write_safetensors(p, t, {"v": str(v)})
            elif fmt == "npz":
                np.savez(p, **t)
            elif fmt == "oinf":
                oinf.write(p, tensors=t)
            elif fmt == "ztensor":
                zt.save(p, t, fsync=False)
            else:
                zt.save(p, t, generation=2, canonical=False, align=4096, fsync=False)
            vers.append(p.read_bytes())
        out.append(
            (
                fmt,
                Bundle(
                    {f"A/case{ext}": vers[0], f"B/case{ext}": vers[1]}, f"A/case{ext}", {"fmt": fmt}
                ),
            )
        )
    return out


def build_remote(seed: Bundle, rng: random.Random) -> tuple[Bundle, str, dict]:
    b = seed.copy()
    fmt = seed.extra["fmt"]
    ext = Path(b.entry).suffix
    modes = os.environ.get("TENFOLD_FUZZ_REMOTE_MODES")  # e.g. "stall-body,change"
    mode = rng.choice(modes.split(",") if modes else REMOTE_MODES)
    desc = ""
    if mode not in CHANGES and rng.random() < 0.5:  # a damaged file, served (no second version)
        data = b.files[b.entry]
        if fmt == "ztensor2":
            data, desc = mut_ztensor2(data, rng) if rng.random() < 0.8 else mut_generic(data, rng)
        else:
            data, desc = mutate(fmt, data, rng)
        b.files[b.entry] = data
    cfg = {
        "mode": mode,
        "from": rng.choice([1, 1, 2, 2, 3, 4, 6]),  # the first request that misbehaves
        "shift": rng.choice([1, 8, 4096, -8]),
        "object": f"/case{ext}",
    }
    if mode not in CHANGES:
        del b.files[f"B/case{ext}"]
    ctx: dict[str, Any] = {"remote": cfg, "refs": sorted(b.files), "changed": mode in CHANGES}
    if mode in BENIGN and not desc:
        ctx["must_read"] = True
    return (
        b,
        f"{fmt} served with {mode} from request {cfg['from']}" + (f"; {desc}" if desc else ""),
        ctx,
    )


def ops_remote(url: str, ctx: dict) -> list[tuple[str, Callable, set]]:
    opts = remote_options(REMOTE_TIMEOUT)

    def top_open() -> dict:
        with tenfold.open(url, **opts) as r:
            return read_all(r)

    def verify() -> None:
        with tenfold.open(url, **opts) as r:
            rep = r.verify()
            if rep is not None and not getattr(rep, "ok", True):
                raise _refused(rep, "; ".join(f.message for f in rep.errors)[:300])

    ops = [
        ("remote.open", top_open, {"reads"}),
        ("remote.load", lambda: read_all(tenfold.load(url, copy=True, **opts)), {"reads"}),
        ("remote.verify", verify, {"must"}),
    ]
    if ctx["remote"]["mode"] not in STALLS:  # the CLI takes no timeout option
        ops.append(("remote.cli.inspect", lambda: _cli(["inspect", url]), set()))
    return ops


# -- the oracle of the kinds above ----------------------------------------------------------


class Refs:
    """The fingerprints a successful read may give (read locally from ``ctx['refs']``)."""

    def __init__(self, ctx: dict, work: Path) -> None:
        self.paths = [work / p for p in ctx.get("refs", [])]
        self._got: list | None = None

    def get(self) -> list:
        if self._got is None:
            self._got = []
            for p in self.paths:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        self._got.append(read_all(tenfold.load(p, copy=True)))
                except Exception:  # noqa: BLE001 - a damaged reference: nothing to compare
                    pass
        return self._got


def _refused(rep: Any, message: str) -> TenfoldError:
    """A verify report's errors as the refusal of the operation (naming the format and file,
    as the library's own errors do)."""
    return TenfoldError(message, fmt=rep.fmt, obj=str(rep.path))


_LIB = Path(tenfold.__file__).resolve().parent


def _names(exc: TenfoldError) -> dict[str, Any]:
    """What the record keeps of a tenfold error's names: its format, whether it names its
    object (``lines`` does for WTXT), and, when it does not, where tenfold raised it."""
    named = exc.fmt is not None and (exc.obj is not None or exc.lines is not None)
    out: dict[str, Any] = {"fmt": exc.fmt, "named": named}
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if Path(f.filename).resolve().is_relative_to(_LIB)]
    if not named and inside:
        rel = Path(inside[-1].filename).resolve().relative_to(_LIB).as_posix()
        out["site"] = f"{rel}:{inside[-1].lineno}"
    return out


def _named(msg: str, names: list[str]) -> bool:
    return any(n in msg for n in names)


def run_op(name: str, fn: Callable, tags: set, ctx: dict | None, refs: Refs | None) -> dict:
    """Run one operation and classify it (``ctx`` None: the plain formats' rules)."""
    rec: dict[str, Any] = {"op": name}
    result = None
    full = ""  # the whole message of a refusal (the record keeps its first 500 characters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always" if ctx is not None else "ignore")
        try:
            result = fn()
            rec["outcome"] = "ok"
        except MemoryError:
            rec.update(outcome="memory", exc="MemoryError", tb=traceback.format_exc())
        except TenfoldError as exc:
            full = str(exc)
            rec.update(outcome="tenfold", exc=type(exc).__name__, msg=full[:500], **_names(exc))
            if "in a checking process" in full:  # HDF5: libhdf5 failed in tenfold's check
                rec["contained"] = full[:300]
        except OSError as exc:
            full = str(exc)
            rec.update(
                outcome="other",
                exc=type(exc).__name__,
                msg=str(exc)[:500],
                tb=traceback.format_exc(),
            )
            if ctx is not None and ctx.get("url") and ctx["url"] in str(exc):
                rec["outcome"] = "oserror"  # a network failure, named: as promised
                rec.pop("tb")
        except Exception as exc:  # noqa: BLE001 - that is what we are looking for
            rec.update(
                outcome="other",
                exc=type(exc).__name__,
                msg=str(exc)[:500],
                tb=traceback.format_exc(),
            )
    if ctx is None:
        return rec
    leaks = [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if issubclass(w.category, ResourceWarning) and "tenfold" in w.filename
    ]
    if rec["outcome"] in ("ok", "tenfold", "oserror") and leaks:
        rec.update(outcome="other", exc="ResourceWarning", msg="; ".join(leaks)[:500])
        return rec
    others = sorted({w.category.__name__ for w in caught})
    if others:
        rec["warnings"] = others  # allowed (a missing validator may be warned about)
    bad = None
    msg = full or rec.get("msg", "")
    escapes = ctx.get("escapes") or []
    if rec["outcome"] == "ok":
        if escapes and "shards" in tags:
            bad = ("LinkFollowed", f"read through a link out of the directory: {escapes}")
        elif "reads" in tags and refs is not None and refs.paths:
            want = refs.get()
            if want and result not in want:
                kind = "MixedVersions" if ctx.get("changed") else "WrongValues"
                bad = (kind, f"values equal none of {len(want)} reference read(s)")
    elif rec["outcome"] in ("tenfold", "oserror"):
        if escapes and any(m in msg for m in SECRET_MARKS):
            bad = ("LinkFollowed", "the error shows the outside file's content")
        elif escapes and "shards" in tags and not _named(msg, escapes):
            bad = ("RefusalNotNamingLink", f"refused without naming {escapes}: {msg[:300]}")
        elif ctx.get("must_read") and tags & {"reads", "shards", "must"}:
            bad = ("RefusedValid", f"{rec['exc']}: {msg[:400]}")
    if bad is not None:
        rec.update(outcome="other", exc=bad[0], msg=bad[1])
    return rec


# ------------------------------------------------------------------------------------------
# operations (run in the child)


def _cli(args: list[str]) -> None:
    from tenfold.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as exc:
            rc = exc.code  # type: ignore[assignment]
    if rc not in (0, 1):
        raise RuntimeError(f"cli {args[0]}: exit {rc}: {err.getvalue()[-300:]}")
    if rc == 1:
        # refused: a one-line message on stderr, or (verify) the report on stdout
        message = (err.getvalue().strip() or out.getvalue().strip())[-2000:]
        raise TenfoldError(message, fmt="cli", obj=f"tenfold {args[0]}")


def _drain(mapping: Any) -> None:
    for k in list(mapping.keys() if hasattr(mapping, "keys") else mapping):
        v = mapping[k]
        if hasattr(v, "toarray") or hasattr(v, "todense"):
            continue
        if getattr(v, "dtype", None) is not None and v.dtype.kind in "biuf":
            np.asarray(v).sum()  # touch every element


def operations(fmt: str, path: Path, work: Path, rng: random.Random) -> list[tuple[str, Callable]]:
    """(name, callable) for every public operation that applies to ``fmt``."""
    import tenfold.convert as conv

    ops: list[tuple[str, Callable]] = []
    p = str(path)
    if fmt == "ztensor":
        import tenfold.ztensor as zt

        def zt_read() -> None:
            with zt.Reader(p) as r:
                for n in r:
                    r.info(n)
                    r.read(n)
                    r.read(n, copy=True)
                r.read_all(copy=True)

        def zt_raw() -> None:
            with zt.Reader(p, sparse="raw", verify_checksums=False) as r:
                _drain(r)

        ops += [
            ("zt.read", zt_read),
            ("zt.read_raw", zt_raw),
            ("zt.verify", lambda: zt.verify(p)),
            ("zt.inspect", lambda: zt.inspect(p)),
        ]
    elif fmt == "oinf":
        import tenfold.oinf as oinf

        def oi_read() -> None:
            with oinf.open(p) as r:
                r.infos()
                r.sizevars  # noqa: B018
                r.metadata  # noqa: B018
                for n in r.names:
                    if n in r:
                        r.tensor(n)
                        r.tensor(n, packed=True)
                        r.tensor(n, copy=True)
                r.load(copy=True)

        ops += [
            ("oinf.read", oi_read),
            ("oinf.verify", lambda: oinf.verify(p)),
            ("oinf.inspect", lambda: oinf.inspect(p)),
        ]
    elif fmt == "fold":
        import tenfold.fold as fold

        def fo_read() -> None:
            with fold.Reader(p) as r:
                for c in r.chunks:
                    with contextlib.suppress(TenfoldError):
                        r.read(c.name)
                        r.read(c.name, verify="crc")
                    if c.ctype == "JSON":
                        r.read_json(c.name)
                    elif c.ctype == "NPZ0":
                        r.read_arrays(c.name)
                    elif c.ctype in ("STEN", "TSAV"):
                        r.read_state_dict(c.name)
                r.verify()

        ops += [
            ("fold.read", fo_read),
            ("fold.verify", lambda: fold.verify(p)),
            ("fold.repair", lambda: fold.repair(p, str(work / "repaired.fold"))),
            ("fold.inspect", lambda: fold.inspect(p)),
        ]
    elif fmt == "wtxt":
        import tenfold.wtxt as wtxt

        ops += [
            ("wtxt.read", lambda: wtxt.read(p)),
            ("wtxt.verify", lambda: wtxt.verify(p)),
            ("wtxt.inspect", lambda: wtxt.inspect(p)),
            ("wtxt.recover", lambda: wtxt.recover(p)),
        ]
    elif fmt == "taridx":
        import tenfold.taridx as taridx

        ops += [
            ("taridx.load", lambda: taridx.load(p, copy=True)),
            ("taridx.inspect", lambda: taridx.inspect(p)),
            ("taridx.verify", lambda: taridx.verify(p)),
        ]
    elif fmt == "npz":
        from tenfold.interop import read_npz

        ops += [("npz.read", lambda: read_npz(p))]
    elif fmt == "onnx":
        import tenfold.formats.onnx as onnx_reader

        ops += [
            ("onnx.verify", lambda: onnx_reader.verify(p)),
            ("onnx.inspect", lambda: onnx_reader.inspect(p)),
        ]
    elif fmt == "safetensors":
        from tenfold.interop import read_safetensors

        ops += [
            ("safetensors.read", lambda: read_safetensors(p)),
            ("safetensors.read_copy", lambda: read_safetensors(p, copy=True)),
        ]
    elif fmt == "gguf":
        import tenfold.formats.gguf as gg

        def gg_read() -> None:
            with gg.Reader(p) as r:
                _drain(r)
                json.dumps(r.metadata)  # JSON values, whatever the file says
                r.verify()
            with gg.Reader(p, dequantize=True, mmap=False) as r:
                for n in r:
                    with contextlib.suppress(TenfoldError):  # a type with no dequantiser
                        r.read(n, copy=True)

        ops += [
            ("gguf.read", gg_read),
            ("gguf.verify", lambda: gg.verify(p)),
            ("gguf.inspect", lambda: gg.inspect(p)),
        ]
    elif fmt == "torchpickle":
        from tenfold.formats.torchpickle import reader as tp

        def tp_read() -> None:
            with tp.open(p) as r:
                r.metadata  # noqa: B018
                for n in r:
                    r.info(n)
                    r.span(n)
                    np.asarray(r.read(n)).sum()
                    r.read(n, copy=True)

        ops += [
            ("torchpickle.read", tp_read),
            ("torchpickle.verify", lambda: tp.verify(p)),
            ("torchpickle.inspect", lambda: tp.inspect(p)),
        ]
    elif fmt == "hdf5":
        from tenfold.formats import hdf5 as h5

        def h5_read() -> None:  # through the check (the default): libhdf5 crashes there
            with h5.open(p) as r:
                r.metadata  # noqa: B018
                for n in r:
                    r.info(n)
                    with contextlib.suppress(TenfoldError):  # a refused type, named
                        r.span(n)
                        np.asarray(r.read(n)).sum()
                        r.read(n, (slice(1, None, 2),) if r.info(n).shape else None, copy=True)

        ops += [
            ("hdf5.read", h5_read),
            ("hdf5.verify", lambda: h5.verify(p)),
            ("hdf5.inspect", lambda: h5.inspect(p)),
        ]
    if fmt not in ("npz", "safetensors"):

        def top_open() -> None:
            r = tenfold.open(p)
            try:
                if hasattr(r, "keys"):
                    _drain(r)
            finally:
                if hasattr(r, "close"):
                    r.close()

        ops += [
            ("detect", lambda: tenfold.detect(p)),
            ("open", top_open),
            ("load", lambda: _drain(tenfold.load(p))),
            ("load_copy", lambda: _drain(tenfold.load(p, copy=True))),
        ]

    def convert_all() -> None:
        tensors = conv.read_any(p)
        for ext in CONVERT_TARGETS:
            out = work / f"out{ext}"
            try:
                conv.write_any(out, tensors)
            except TenfoldError:
                pass  # a value the target cannot hold: refused, as promised

    ops.append(("convert", convert_all))
    ops.append(("cli.inspect", lambda: _cli(["inspect", p])))
    ops.append(("cli.verify", lambda: _cli(["verify", p])))
    target = str(work / f"cli{rng.choice(CONVERT_TARGETS)}")
    ops.append(("cli.convert", lambda: _cli(["convert", p, target])))
    return ops


def kind_operations(fmt: str, path: Path, work: Path, ctx: dict) -> list[tuple]:
    """(name, callable, tags) of a kind's case; tags: ``reads`` (returns the fingerprints of
    what it read), ``shards`` (reaches every shard an index names), ``must`` (succeeds on
    valid input, like the other two)."""
    if fmt == "ztensor2":
        ops: list[tuple] = ops_ztensor2(str(path), work)
        mine = {op[0] for op in ops}
        rng = random.Random(0)
        ops += [op + (set(),) for op in operations(fmt, path, work, rng) if op[0] not in mine]
        return ops
    if fmt == "sharded":
        return ops_sharded(str(path), work)
    return ops_remote(ctx["url"] + Path(ctx["remote"]["object"]).name, ctx)


def run_child(
    fmt: str,
    path: Path,
    work: Path,
    seed: int,
    write: Callable[[dict], None],
    subprocess_cli: bool,
    ctx: dict | None = None,
) -> None:
    rng = random.Random(seed)
    warnings.simplefilter("ignore")
    if ctx is None:
        ops: list[tuple] = [op + (set(),) for op in operations(fmt, path, work, rng)]
        refs = None
    else:
        ops = kind_operations(fmt, path, work, ctx)
        refs = Refs(ctx, work)
    for name, fn, tags in ops:
        write({"start": name})
        write(run_op(name, fn, tags, ctx, refs))
    if subprocess_cli and fmt != "remote":
        write({"start": "cli.subprocess"})
        proc = subprocess.run(
            [sys.executable, "-m", "tenfold", "verify", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        bad = proc.returncode not in (0, 1) or "Traceback" in proc.stderr
        write(
            {
                "op": "cli.subprocess",
                "outcome": "other" if bad else ("ok" if proc.returncode == 0 else "tenfold"),
                "exc": f"exit {proc.returncode}",
                "tb": proc.stderr[-2000:],
            }
        )


def run_case(
    fmt: str,
    path: Path,
    work: Path,
    seed: int,
    *,
    timeout: float,
    mem_cap: int,
    subprocess_cli: bool,
    ctx: dict | None = None,
) -> list[dict]:
    """Fork a child, cap its memory, run the operations; return one record per operation."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(rfd)
            if mem_cap:
                resource.setrlimit(resource.RLIMIT_AS, (mem_cap, mem_cap))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            out = os.fdopen(wfd, "w", buffering=1)

            def write(rec: dict) -> None:
                out.write(json.dumps(rec) + "\n")

            run_child(fmt, path, work, seed, write, subprocess_cli, ctx)
            out.flush()
        except BaseException:  # noqa: BLE001
            code = 3
        os._exit(code)
    os.close(wfd)
    records: list[dict] = []
    current = None
    buf = b""
    deadline = time.monotonic() + timeout
    timed_out = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([rfd], [], [], left)
        if not ready:
            continue
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            rec = json.loads(line)
            if "start" in rec:
                current = rec["start"]
            else:
                records.append(rec)
                current = None
    os.close(rfd)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        records.append({"op": current or "?", "outcome": "timeout", "exc": f"> {timeout}s"})
    elif os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        records.append({"op": current or "?", "outcome": "signal", "exc": signal.Signals(sig).name})
    elif current is not None:
        records.append(
            {
                "op": current,
                "outcome": "other",
                "exc": f"child exit {os.WEXITSTATUS(status)} during the operation",
            }
        )
    return records


# ------------------------------------------------------------------------------------------
# driver


def _finding_key(fmt: str, rec: dict) -> str:
    frame = ""
    tb = rec.get("tb") or ""
    files = re.findall(r'File "([^"]+)", line (\d+)', tb)
    if files:
        f, line = files[-1]
        frame = f"{os.path.basename(f)}:{line}"
    return f"{fmt}|{rec['op']}|{rec['outcome']}|{rec.get('exc')}|{frame}"


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


BUILDERS: dict[str, Callable[[Bundle, random.Random], tuple[Bundle, str, dict]]] = {
    "ztensor2": build_ztensor2,
    "sharded": build_sharded,
    "remote": build_remote,
}


def prepare(fmt: str, seed: Any, crng: random.Random, work: Path, root: Path,
            server: Any, token: str) -> tuple[Path, str, dict | None, Any]:  # fmt: skip
    """Write the case under ``work``: ``(path, mutation, ctx, saved)``; ``saved`` is what a
    finding keeps (the file's bytes, or a Bundle)."""
    if fmt not in KINDS:
        mutated, desc = mutate(fmt, seed, crng)
        if fmt == "taridx":  # the index next to its shards
            for s in (root / "seeds" / "taridx").glob("*.tar"):
                os.symlink(s, work / s.name)
            case = work / "demo.taridx"
        else:
            case = work / f"case{SUFFIX[fmt]}"
        case.write_bytes(mutated)
        return case, desc, None, mutated
    bundle, desc, ctx = BUILDERS[fmt](seed, crng)
    path = materialize(bundle, work)
    ctx = {**ctx, "work": str(work)}
    if fmt == "remote":
        ctx["url"] = start_remote(server, token, bundle, ctx)
    return path, desc, ctx, bundle


def start_remote(server: MisbehavingServer, token: str, b: Bundle, ctx: dict) -> str:
    """Serve the case's versions (``A/``, and ``B/`` when the object changes) under
    ``/<token>/``; the URL of that folder."""
    name = ctx["remote"]["object"]
    a = b.files["A" + name]
    objects = {name: [a, b.files.get("B" + name, a)]}
    return server.add(token, RemoteCase(objects, ctx["remote"]))


def _save_finding(d: Path, fmt: str, case: Path, saved: Any, ctx: dict | None) -> str:
    """The reproducer under ``d``; returns the path ``--replay`` takes."""
    if ctx is None:
        (d / case.name).write_bytes(saved)
        return str(d / case.name)
    public = {k: v for k, v in ctx.items() if k not in ("work", "url")}
    (d / "case.tar").write_bytes(bundle_tar(saved, public))
    if len(saved.files) == 1 or fmt == "ztensor2":  # the file itself too, for other tools
        (d / Path(saved.entry).name).write_bytes(saved.files[saved.entry])
    return str(d / "case.tar")


def _contained(seen: dict[str, dict], out_dir: Path, fmt: str, case: Path, saved: Any,
               rec: dict, meta: dict) -> None:  # fmt: skip
    """Save a case whose libhdf5 crash, hang or blow-up the HDF5 check caught: not a finding
    (the file was refused, named, as promised) but a libhdf5 bug worth its reproducer."""
    what = re.search(r"crashed reading it[^)]*\)|did not finish|ran out of memory|failed "
                     r"\(exit status -?\d+\)", rec["contained"])  # fmt: skip
    key = f"{fmt}|{what.group(0) if what else rec['contained'][-80:]}"  # one per kind of failure
    if key in seen:
        seen[key]["count"] += 1
        return
    cid = hashlib.sha256(key.encode()).hexdigest()[:12]
    d = out_dir / "contained" / cid
    d.mkdir(parents=True, exist_ok=True)
    (d / case.name).write_bytes(saved)
    seen[key] = {
        "id": cid,
        "format": fmt,
        "op": rec["op"],
        "exc": rec["exc"],
        "msg": rec["contained"],
        **meta,
        "count": 1,
        "replay": f"python scripts/fuzz.py --replay {d / case.name} --format {fmt}",
    }
    (d / "finding.json").write_text(json.dumps(seen[key], indent=2))
    print(f"CONTAINED {cid}: {fmt} {rec['op']} {rec['contained'][:160]}", flush=True)


def _count_unnamed(unnamed: dict[tuple, dict], fmt: str, rec: dict) -> None:
    """Count a refusal whose tenfold error lacks its format or object (by where raised)."""
    if rec.get("named", True):
        return
    key = (fmt, rec["op"], rec["exc"], rec.get("site"))
    if key not in unnamed:
        unnamed[key] = {
            "format": fmt,
            "op": rec["op"],
            "exc": rec["exc"],
            "site": rec.get("site"),
            "fmt": rec.get("fmt"),
            "msg": rec.get("msg", "")[:200],
            "count": 0,
        }
    unnamed[key]["count"] += 1


def fuzz(args: argparse.Namespace) -> int:
    formats = FORMATS if args.format == "all" else args.format.split(",")
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise SystemExit(f"unknown format(s) {sorted(unknown)}; expected {FORMATS}")
    root = Path(tempfile.mkdtemp(prefix="tenfold-fuzz-"))
    out_dir = Path(args.out)
    server = None
    try:
        seeds = make_seeds(root / "seeds")
        missing = [f for f in formats if not seeds.get(f)]
        if missing:  # a format whose library is not installed (hdf5 without h5py)
            print(f"no seeds for {', '.join(missing)} (not installed?): skipped", flush=True)
            formats = [f for f in formats if seeds.get(f)]
        if os.environ.get("TENFOLD_FUZZ_TORCH", "1") == "1":
            with contextlib.suppress(ImportError):
                import torch  # noqa: F401 - loaded once here rather than in every child
        # preload every module the children use, so a fork is cheap and the cap is fair
        import tenfold.cli  # noqa: F401
        import tenfold.convert  # noqa: F401
        import tenfold.interop  # noqa: F401
        import tenfold.sharded  # noqa: F401

        if "hdf5" in formats:
            with contextlib.suppress(ImportError):
                import h5py  # noqa: F401

                import tenfold.formats.hdf5._isolate as h5check

                # a hang caught by the check in every operation of a case fits in its timeout
                h5check.CHECK_SECONDS = max(2.0, args.timeout / 16)

        for f in ("ztensor", "oinf", "fold", "wtxt", "taridx"):
            __import__(f"tenfold.{f}")
        if "remote" in formats:
            import aiohttp  # noqa: F401
            import fsspec.implementations.http  # noqa: F401

            server = MisbehavingServer()
        mem_cap = _address_space() + (args.mem_mb << 20) if args.mem_mb else 0
        rng = random.Random(args.seed)
        stop = time.monotonic() + args.seconds
        counts: dict[str, Counter] = defaultdict(Counter)
        cases: Counter = Counter()
        findings: dict[str, dict] = {}
        unnamed: dict[tuple, dict] = {}  # tenfold errors without fmt/obj, by where raised
        contained: dict[str, dict] = {}  # libhdf5 failures the check caught, by message kind
        n = 0
        work = root / "work"
        while time.monotonic() < stop and (not args.cases or n < args.cases):
            fmt = formats[n % len(formats)] if args.round_robin else rng.choice(formats)
            own = [sd for sd in seeds[fmt] if "/" not in sd[0]]
            pool = own if own and rng.random() < 0.5 else seeds[fmt]
            # one draw of a fixed size (rng.choice draws more or less with the list's length):
            # torch adds seeds to formats that have seeds without it (FOLD, torchpickle), and
            # the cases of every other format must not change with it (a format with no seed
            # at all, as hdf5 without h5py, is left out and does shift the round robin)
            seed_name, data = pool[int(rng.random() * len(pool))]
            case_seed = rng.randrange(2**32)
            crng = random.Random(case_seed)
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            token = f"c{n}"
            case, desc, ctx, saved = prepare(fmt, data, crng, work, root, server, token)
            try:
                records = run_case(
                    fmt,
                    case,
                    work,
                    case_seed,
                    timeout=args.timeout,
                    mem_cap=mem_cap,
                    subprocess_cli=crng.random() < args.subprocess_rate,
                    ctx=ctx,
                )
            finally:
                if server is not None and fmt == "remote":
                    server.end(token)
            cases[fmt] += 1
            n += 1
            for rec in records:
                counts[fmt][rec["outcome"]] += 1
                _count_unnamed(unnamed, fmt, rec)
                if rec.get("contained"):
                    meta = {"seed_file": seed_name, "case_seed": case_seed, "mutation": desc}
                    _contained(contained, out_dir, fmt, case, saved, rec, meta)
                if rec["outcome"] in FINDINGS:
                    key = _finding_key(fmt, rec)
                    if key in findings:
                        findings[key]["count"] += 1
                        continue
                    fid = hashlib.sha256(key.encode()).hexdigest()[:12]
                    d = out_dir / fid
                    d.mkdir(parents=True, exist_ok=True)
                    where = _save_finding(d, fmt, case, saved, ctx)
                    meta = {
                        "id": fid,
                        "format": fmt,
                        "seed_file": seed_name,
                        "run_seed": args.seed,
                        "case": n,
                        "case_seed": case_seed,
                        "mutation": desc,
                        **rec,
                        "replay": f"python scripts/fuzz.py --replay {where} --format {fmt}",
                    }
                    (d / "finding.json").write_text(json.dumps(meta, indent=2))
                    findings[key] = {"count": 1, **meta}
                    print(
                        f"FINDING {fid}: {fmt} {rec['op']} {rec['outcome']} {rec.get('exc')}"
                        f" ({desc[:120]})",
                        flush=True,
                    )
            if args.progress and n % args.progress == 0:
                print(f"{n} cases, {len(findings)} findings", flush=True)
        summary = {
            "seconds": args.seconds,
            "seed": args.seed,
            "cases": dict(cases),
            "total_cases": n,
            "outcomes": {f: dict(c) for f, c in counts.items()},
            "findings": [{k: v for k, v in f.items() if k != "tb"} for f in findings.values()],
            "unnamed": list(unnamed.values()),
            "contained": list(contained.values()),
        }
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        print(f"{n} cases in {args.seconds:.0f} s, seed {args.seed}")
        cols = ["ok", "tenfold", "oserror", "other", "memory", "signal", "timeout"]
        print(f"{'format':12} {'cases':>6} " + " ".join(f"{c:>8}" for c in cols))
        for f in formats:
            print(f"{f:12} {cases[f]:>6} " + " ".join(f"{counts[f][c]:>8}" for c in cols))
        print(f"findings: {len(findings)} distinct")
        if unnamed:
            print(f"tenfold errors without fmt/obj: {len(unnamed)} distinct (summary: unnamed)")
        if contained:
            print(f"libhdf5 failures contained by the check: {len(contained)} distinct "
                  f"(summary: contained; inputs under {out_dir / 'contained'}; a check that "
                  "did not finish may only mean a loaded machine: replay it)")  # fmt: skip
        return 1 if findings else 0
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(root, ignore_errors=True)


def replay(args: argparse.Namespace) -> int:
    path = Path(args.replay)
    fmt = args.format
    if fmt == "all":
        raise SystemExit("--replay needs --format")
    work = Path(tempfile.mkdtemp(prefix="tenfold-replay-"))
    server = None
    bad = 0
    try:
        if fmt in KINDS:
            tar = path / "case.tar" if path.is_dir() else path
            if tar.suffix != ".tar":  # a single file (a zTensor v2 reproducer): no oracle
                bundle, ctx = Bundle({"case/" + path.name: path.read_bytes()},
                                     "case/" + path.name), {}  # fmt: skip
            else:
                bundle, ctx = bundle_from_tar(tar)
            case = materialize(bundle, work)
            ctx = {**ctx, "work": str(work)}
            if fmt == "remote":
                server = MisbehavingServer()
                ctx["url"] = start_remote(server, "r0", bundle, ctx)
            ops = kind_operations(fmt, case, work, ctx)
            refs = Refs(ctx, work)
        else:
            ctx, refs = None, None
            ops = [op + (set(),) for op in operations(fmt, path, work, random.Random(0))]
        for name, fn, tags in ops:
            rec = run_op(name, fn, tags, ctx, refs)
            if rec["outcome"] in FINDINGS:
                bad += 1
                print(f"{name}: FINDING {rec.get('exc')}: {rec.get('msg', '')}")
                if rec.get("tb"):
                    print(rec["tb"])
            elif rec["outcome"] == "ok":
                print(f"{name}: ok")
            else:
                print(f"{name}: {rec['exc']}: {rec.get('msg', '')[:200]}")
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, help="how long to run")
    ap.add_argument("--seconds", type=float, help="how long to run (instead of --minutes)")
    ap.add_argument("--cases", type=int, default=0, help="stop after this many cases")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    ap.add_argument("--format", default="all", help=f"comma list of {','.join(FORMATS)}")
    ap.add_argument("--out", default="fuzz-findings", help="where findings are saved")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    ap.add_argument(
        "--mem-mb",
        type=int,
        default=1536,
        help="address space a child may add to the parent's (0: no cap)",
    )
    ap.add_argument(
        "--subprocess-rate",
        type=float,
        default=0.03,
        help="share of cases also run as `python -m tenfold verify`",
    )
    ap.add_argument("--round-robin", action="store_true", help="cycle through the formats")
    ap.add_argument("--progress", type=int, default=0, help="print a line every N cases")
    ap.add_argument("--replay", help="run every operation on this file and show the outcomes")
    args = ap.parse_args(argv)
    if args.replay:
        return replay(args)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    if args.seconds is None:
        args.seconds = 60.0 * (args.minutes if args.minutes is not None else 1.0)
    return fuzz(args)


if __name__ == "__main__":
    sys.exit(main())

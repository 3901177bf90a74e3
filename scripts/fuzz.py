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

Every finding is saved under ``--out`` with the mutated file (the reproducer) and a JSON record
(format, seed, case, mutation, operation, traceback). ``--replay FILE --format F`` runs the
operations on one file in this process and prints what each one raised.

Examples::

    python scripts/fuzz.py --minutes 10                  # all formats
    python scripts/fuzz.py --seconds 30 --seed 1 --format fold,npz
    python scripts/fuzz.py --replay fuzz-findings/<id>/case.fold --format fold

Exit status: 0 when no finding, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
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
import time
import traceback
import warnings
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tenfold
from tenfold.errors import TenfoldError

FORMATS = ["ztensor", "oinf", "fold", "wtxt", "taridx", "npz", "safetensors"]
SUFFIX = {
    "ztensor": ".zt",
    "oinf": ".oinf",
    "fold": ".fold",
    "wtxt": ".wtxt",
    "taridx": ".taridx",
    "npz": ".npz",
    "safetensors": ".safetensors",
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


def make_seeds(d: Path) -> dict[str, list[tuple[str, bytes]]]:
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
    seeds: dict[str, list[tuple[str, bytes]]] = defaultdict(list)

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
    return dict(seeds)


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


# -- FOLD -----------------------------------------------------------------------------------


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


MUTATORS: dict[str, Callable[[bytes, random.Random], tuple[bytes, str]]] = {
    "ztensor": mut_ztensor,
    "oinf": mut_oinf,
    "fold": mut_fold,
    "wtxt": mut_wtxt,
    "taridx": mut_taridx,
    "npz": mut_npz,
    "safetensors": mut_safetensors,
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
        raise TenfoldError(err.getvalue().strip()[-300:])  # refused with a one-line message


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
    elif fmt == "safetensors":
        from tenfold.interop import read_safetensors

        ops += [
            ("safetensors.read", lambda: read_safetensors(p)),
            ("safetensors.read_copy", lambda: read_safetensors(p, copy=True)),
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


def run_child(
    fmt: str, path: Path, work: Path, seed: int, write: Callable[[dict], None], subprocess_cli: bool
) -> None:
    rng = random.Random(seed)
    warnings.simplefilter("ignore")
    for name, fn in operations(fmt, path, work, rng):
        write({"start": name})
        rec: dict[str, Any] = {"op": name}
        try:
            fn()
            rec["outcome"] = "ok"
        except MemoryError:
            rec.update(outcome="memory", exc="MemoryError", tb=traceback.format_exc())
        except TenfoldError as exc:
            rec.update(outcome="tenfold", exc=type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - that is what we are looking for
            rec.update(
                outcome="other",
                exc=type(exc).__name__,
                msg=str(exc)[:500],
                tb=traceback.format_exc(),
            )
        write(rec)
    if subprocess_cli:
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

            run_child(fmt, path, work, seed, write, subprocess_cli)
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


def fuzz(args: argparse.Namespace) -> int:
    formats = FORMATS if args.format == "all" else args.format.split(",")
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise SystemExit(f"unknown format(s) {sorted(unknown)}; expected {FORMATS}")
    root = Path(tempfile.mkdtemp(prefix="tenfold-fuzz-"))
    out_dir = Path(args.out)
    try:
        seeds = make_seeds(root / "seeds")
        if os.environ.get("TENFOLD_FUZZ_TORCH", "1") == "1":
            with contextlib.suppress(ImportError):
                import torch  # noqa: F401 - loaded once here rather than in every child
        # preload every module the children use, so a fork is cheap and the cap is fair
        import tenfold.cli  # noqa: F401
        import tenfold.convert  # noqa: F401
        import tenfold.interop  # noqa: F401

        for f in ("ztensor", "oinf", "fold", "wtxt", "taridx"):
            __import__(f"tenfold.{f}")
        mem_cap = _address_space() + (args.mem_mb << 20) if args.mem_mb else 0
        rng = random.Random(args.seed)
        stop = time.monotonic() + args.seconds
        counts: dict[str, Counter] = defaultdict(Counter)
        cases: Counter = Counter()
        findings: dict[str, dict] = {}
        n = 0
        work = root / "work"
        while time.monotonic() < stop and (not args.cases or n < args.cases):
            fmt = formats[n % len(formats)] if args.round_robin else rng.choice(formats)
            own = [sd for sd in seeds[fmt] if "/" not in sd[0]]
            seed_name, data = rng.choice(own if own and rng.random() < 0.5 else seeds[fmt])
            case_seed = rng.randrange(2**32)
            crng = random.Random(case_seed)
            mutated, desc = mutate(fmt, data, crng)
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            if fmt == "taridx":  # the index next to its shards
                for s in (root / "seeds" / "taridx").glob("*.tar"):
                    os.symlink(s, work / s.name)
                case = work / "demo.taridx"
            else:
                case = work / f"case{SUFFIX[fmt]}"
            case.write_bytes(mutated)
            records = run_case(
                fmt,
                case,
                work,
                case_seed,
                timeout=args.timeout,
                mem_cap=mem_cap,
                subprocess_cli=crng.random() < args.subprocess_rate,
            )
            cases[fmt] += 1
            n += 1
            for rec in records:
                counts[fmt][rec["outcome"]] += 1
                if rec["outcome"] in FINDINGS:
                    key = _finding_key(fmt, rec)
                    if key in findings:
                        findings[key]["count"] += 1
                        continue
                    fid = hashlib.sha256(key.encode()).hexdigest()[:12]
                    d = out_dir / fid
                    d.mkdir(parents=True, exist_ok=True)
                    (d / case.name).write_bytes(mutated)
                    meta = {
                        "id": fid,
                        "format": fmt,
                        "seed_file": seed_name,
                        "run_seed": args.seed,
                        "case": n,
                        "case_seed": case_seed,
                        "mutation": desc,
                        **rec,
                        "replay": f"python scripts/fuzz.py --replay {d / case.name} --format {fmt}",
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
        }
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        print(f"{n} cases in {args.seconds:.0f} s, seed {args.seed}")
        cols = ["ok", "tenfold", "other", "memory", "signal", "timeout"]
        print(f"{'format':12} {'cases':>6} " + " ".join(f"{c:>8}" for c in cols))
        for f in formats:
            print(f"{f:12} {cases[f]:>6} " + " ".join(f"{counts[f][c]:>8}" for c in cols))
        print(f"findings: {len(findings)} distinct")
        return 1 if findings else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def replay(args: argparse.Namespace) -> int:
    path = Path(args.replay)
    fmt = args.format
    if fmt == "all":
        raise SystemExit("--replay needs --format")
    work = Path(tempfile.mkdtemp(prefix="tenfold-replay-"))
    bad = 0
    try:
        for name, fn in operations(fmt, path, work, random.Random(0)):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn()
                print(f"{name}: ok")
            except TenfoldError as exc:
                print(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
            except Exception:  # noqa: BLE001
                bad += 1
                print(f"{name}: FINDING\n{traceback.format_exc()}")
    finally:
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

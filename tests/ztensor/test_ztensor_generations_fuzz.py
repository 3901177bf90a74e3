"""Hypothesis over the v1 and v2 readers: random and mutated files (raw byte edits, and edits
of the v2 manifest with its hash fixed up so the parser and the validator are reached) give only
tenfold.errors exceptions, never a crash, a hang or an allocation past the limits."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import xxhash
from hypothesis import given
from hypothesis import strategies as st

import tenfold.ztensor as zt
from tenfold.core import Limits
from tenfold.errors import TenfoldError

LIMITS = Limits(max_decoded_bytes=1 << 24, max_index_bytes=1 << 20)
V1_SEED = (
    Path(__file__).resolve().parents[1] / "conformance" / "ztensor" / "v1" / "zstd_and_checksums.zt"
).read_bytes()
V1_SPARSE = (
    Path(__file__).resolve().parents[1] / "conformance" / "ztensor" / "v1" / "sparse_csr_coo.zt"
).read_bytes()


def _v2_seed() -> bytes:
    d = tempfile.mkdtemp()  # made at import time, before any tmp_path exists
    p = os.path.join(d, "seed.zt")
    with zt.Writer(p, generation=2, canonical=False, align=4096, fsync=False) as w:
        w.add("a", np.arange(12, dtype=np.float32).reshape(3, 4))
        w.add("b", np.arange(50, dtype=np.int16), encoding="zstd")
        w.add("c", np.array([True, False]))
        w.add("f4", np.array([1.0, 0.5, -2.0], ml_dtypes.float4_e2m1fn))
        w.add(
            "sp",
            zt.SparseTensor(
                "csr",
                (2, 3),
                np.ones(2, np.float32),
                indices=np.array([0, 2], np.uint64),
                indptr=np.array([0, 1, 2], np.uint64),
            ),
        )
        w.add(
            "coo",
            zt.SparseTensor(
                "coo", (2, 2, 2), np.ones(1, np.int8), coords=np.array([[1], [0], [1]], np.uint64)
            ),
        )
        w.add_object(
            "mx",
            [1, 32],
            {
                "data": (np.zeros(16, np.uint8), "u8", "f4_e2m1"),
                "scales": (np.ones(1, np.uint8), "u8", "f8_e8m0"),
            },
            layout="zt.mx/1",
            attributes={"block_size": 32, "scale_form": "e8m0_exponent"},
        )
        w.set_attributes({"k": [1, 2.5, None, {"x": b"y"}]})
    with open(p, "rb") as f:
        data = f.read()
    shutil.rmtree(d)
    return data


V2_SEED = _v2_seed()
MOFF, MLEN = struct.unpack("<QQ", V2_SEED[-40:-24])


def exercise(data: bytes) -> None:
    try:
        with zt.open(data, limits=LIMITS, sparse="raw") as r:
            for name in r:
                try:
                    r.read(name)
                    r.read(name, copy=True)
                    info = r.info(name)
                    for part in getattr(info, "parts", {}):
                        r.verify_part(name, part)
                except TenfoldError:
                    pass
            if hasattr(r, "verify"):
                assert isinstance(r.verify().ok, bool)
    except TenfoldError:
        pass
    report = zt.verify(data, limits=LIMITS)  # never raises
    assert isinstance(report.ok, bool)


def test_seeds_are_valid():
    for seed in (V1_SEED, V1_SPARSE, V2_SEED):
        assert zt.verify(seed).ok


@given(st.binary(max_size=300))
def test_random_bytes(data):
    exercise(b"ZTEN1000" + data)
    exercise(b"ZTEN1000" + data + b"ZTEN1000")
    exercise(b"\x89ZT2\r\n\x1a\n" + data)


_EDITS = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8)


def _apply(seed: bytes, edits, start: int = 0, length: int | None = None) -> bytes:
    out = bytearray(seed)
    n = len(seed) - start if length is None else length
    for pos, val in edits:
        out[start + pos % n] = val
    return bytes(out)


@given(_EDITS)
def test_mutated_v1(edits):
    exercise(_apply(V1_SEED, edits))
    exercise(_apply(V1_SPARSE, edits, len(V1_SPARSE) - 330))  # mostly the manifest


@given(_EDITS, st.integers(0, 60))
def test_mutated_v2_anywhere(edits, cut):
    data = _apply(V2_SEED, edits)
    exercise(data)
    exercise(data[: len(data) - cut])


def _with_manifest(raw: bytes) -> bytes:
    head = V2_SEED[:MOFF]
    footer = struct.pack("<QQQII", MOFF, len(raw), xxhash.xxh3_64_intdigest(raw), 2, 0)
    return head + raw + footer + V2_SEED[-8:]


@given(_EDITS)
def test_mutated_v2_manifest_with_valid_hash(edits):
    """Edits inside the manifest, hash recomputed: reaches CBOR parsing and validation."""
    raw = _apply(V2_SEED[MOFF : MOFF + MLEN], edits)
    exercise(_with_manifest(raw))


@given(st.integers(0, MLEN), st.binary(max_size=12))
def test_v2_manifest_insertions(pos, blob):
    raw = V2_SEED[MOFF : MOFF + MLEN]
    exercise(_with_manifest(raw[:pos] + blob + raw[pos:]))

"""FOLD cases for scripts/bench_peers.py: tenfold vs reedsolo (and creedsolo when importable).

Cases (``--quick`` divides the sizes by 16):

* RS(32) encode: tenfold's ``rs`` kernel over 16 MiB of random bytes vs ``reedsolo.RSCodec(32)``
  on a 64 KiB sample of the same bytes (pure Python; it would take minutes on 16 MiB);
  throughput in MB/s.
* RS(32) correction: 16 damaged bytes in every 255-byte block (the code's capacity), tenfold
  over 4 MiB vs reedsolo on the first 40 blocks; MB/s of data corrected.
* Clean read of a 256 MiB chunk written with rs(32): ``Reader.read`` with CRC-32C and SHA-256
  checked (the ECC is not decoded when the CRC holds); GB/s.
* Write of 256 MiB of random bytes without compression or ECC, tenfold vs pyfolds 1.0.2
  (``FoldWriter``, the FOLD reference), like with like: (a) each with its default durability
  (tenfold: temp file, fsync, rename, directory fsync; pyfolds: writes in place and fsyncs
  twice in ``finalize``); (b) no fsync on either side (tenfold ``fsync=False``; pyfolds with
  ``os.fsync`` replaced by a no-op in its module only). Every run writes a fresh path: the
  target is removed and ``os.sync()`` called before each run, untimed, so no run pays for the
  previous one's writeback.
* Write of 64 MiB of compressible float16 with zstd level 3: tenfold on all cores vs one
  thread (byte-identical to pyfolds) and vs pyfolds.

pyfolds needs torch at import (``pip install --no-deps pyfolds==1.0.2 google-crc32c``; without
``google-crc32c`` it checksums in pure Python). Its payloads must be ``bytes``: the copy is
made once, untimed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import types

import numpy as np
from _timing import best, row

import tenfold.fold as fold
from tenfold import _kernels


def _optional(name):
    try:
        return __import__(name)
    except ImportError:
        return None


def _pyfolds():
    try:
        from pyfolds.serialization import foldio
    except ImportError:
        return None
    return foldio


def _fresh(path: str) -> None:
    """Remove ``path`` and flush dirty pages (untimed setup of write cases)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.sync()


def _best_interleaved(fns: dict, repeat: int, setup) -> dict:
    """Best-of-``repeat`` time of each function, running them in turn (one of each per round)
    so that a change of machine load hits every case alike."""
    out: dict = {}
    for _ in range(repeat):
        for key, fn in fns.items():
            out[key] = min(out.get(key, float("inf")), best(fn, repeat=1, setup=setup))
    return out


def _damage(data: np.ndarray, nsym: int, nerr: int, rng) -> np.ndarray:
    out = data.copy()
    k = 255 - nsym
    nblocks = -(-data.size // k)
    for b in range(nblocks):
        blen = min(k, data.size - b * k)
        pos = rng.choice(blen, size=min(nerr, blen), replace=False)
        out[b * k + pos] ^= rng.integers(1, 256, size=pos.size, dtype=np.uint8)
    return out


def run(quick: bool) -> list[dict]:
    rows = []
    div = 16 if quick else 1
    rng = np.random.default_rng(0)
    rs = _kernels.load("rs")
    reedsolo = _optional("reedsolo")
    creedsolo = _optional("creedsolo")
    nsym = 32
    k = 255 - nsym

    # -- RS(32) encode -------------------------------------------------------------------
    n = (16 << 20) // div
    data = rng.integers(0, 256, n, dtype=np.uint8)
    parity = np.empty(-(-n // k) * nsym, np.uint8)
    t = best(lambda: rs.encode_blocks(data, nsym, parity), repeat=5)
    ours = n / t / 1e6
    sample = bytes(data[: 64 << 10])
    for name, mod in (("reedsolo 1.7", reedsolo), ("creedsolo", creedsolo)):
        if mod is None:
            rows.append(
                row(
                    "RS(32) encode",
                    ours,
                    f"{name} (not installed)",
                    None,
                    unit="MB/s",
                    higher_is_better=True,
                    target=">= 100 MB/s",
                )
            )
            continue
        codec = mod.RSCodec(nsym)
        tp = best(lambda codec=codec: codec.encode(sample), repeat=3)
        rows.append(
            row(
                "RS(32) encode",
                ours,
                name,
                len(sample) / tp / 1e6,
                unit="MB/s",
                higher_is_better=True,
                target=">= 100 MB/s",
                note=f"tenfold {n >> 20} MiB, peer 64 KiB sample",
            )
        )

    # -- RS(32) correction at capacity ---------------------------------------------------
    n = (4 << 20) // div
    clean = data[:n]
    cpar = np.empty(-(-n // k) * nsym, np.uint8)
    rs.encode_blocks(clean, nsym, cpar)
    bad = _damage(clean, nsym, 16, rng)
    nerr = np.zeros(cpar.size // nsym, np.int32)
    work = {}

    def setup():
        work["d"], work["p"] = bad.copy(), cpar.copy()

    def correct():
        assert rs.decode_blocks(work["d"], work["p"], nsym, nerr) == 0

    t = best(correct, repeat=3, setup=setup)
    assert np.array_equal(work["d"], clean)
    ours = n / t / 1e6
    nb = 40
    cws = [
        bytes(bad[i * k : (i + 1) * k]) + bytes(cpar[i * nsym : (i + 1) * nsym]) for i in range(nb)
    ]
    for name, mod in (("reedsolo 1.7", reedsolo), ("creedsolo", creedsolo)):
        if mod is None:
            rows.append(
                row(
                    "RS(32) correct 16 errors/block",
                    ours,
                    f"{name} (not installed)",
                    None,
                    unit="MB/s",
                    higher_is_better=True,
                    target=">= 10 MB/s",
                )
            )
            continue
        codec = mod.RSCodec(nsym)
        tp = best(lambda codec=codec: [codec.decode(c) for c in cws], repeat=2)
        rows.append(
            row(
                "RS(32) correct 16 errors/block",
                ours,
                name,
                nb * k / tp / 1e6,
                unit="MB/s",
                higher_is_better=True,
                target=">= 10 MB/s",
                note=f"tenfold {n >> 20} MiB, peer {nb} blocks",
            )
        )

    # -- clean read and writes -----------------------------------------------------------
    tmp = tempfile.mkdtemp(prefix="tenfold-fold-bench-")
    try:
        n = (256 << 20) // div
        big = rng.integers(0, 256, n, dtype=np.uint8)
        p = os.path.join(tmp, "rs.fold")
        with fold.Writer(p, compress=None, ecc="rs(32)", fsync=False) as w:
            w.add_chunk("blob", "BLOB", big)

        for mode, label in ((True, "CRC-32C + SHA-256"), ("crc", "CRC-32C only")):

            def read(mode=mode):
                with fold.Reader(p) as r:
                    r.read("blob", verify=mode)

            read()
            t = best(read, repeat=5)
            rows.append(
                row(
                    f"clean read {n >> 20} MiB chunk, rs(32), {label}",
                    n / t / 1e9,
                    unit="GB/s",
                    higher_is_better=True,
                    target=">= 1 GB/s",
                )
            )

        p2 = os.path.join(tmp, "plain.fold")
        foldio = _pyfolds()
        big_bytes = big.tobytes() if foldio is not None else b""
        no_fsync_os = types.SimpleNamespace(
            **{k: getattr(os, k) for k in dir(os) if not k.startswith("__")}
        )
        no_fsync_os.fsync = lambda fd: None

        def write(fsync):
            with fold.Writer(p2, compress=None, fsync=fsync) as w:
                w.add_chunk("blob", "BLOB", big)
                w.finalize({})

        def peer_write(fsync, compress="none", payload=big_bytes):
            if not fsync:
                foldio.os = no_fsync_os  # pyfolds' module only
            try:
                with foldio.FoldWriter(p2, compress=compress) as w:
                    w.add_chunk("blob", "BLOB", payload)
                    w.finalize({})
            finally:
                foldio.os = os

        cases = {"ours-fsync": lambda: write(True), "ours-nofsync": lambda: write(False)}
        if foldio is not None:
            cases["peer-fsync"] = lambda: peer_write(True)
            cases["peer-nofsync"] = lambda: peer_write(False)
        times = _best_interleaved(cases, repeat=7, setup=lambda: _fresh(p2))
        for fsync, label, peer_label in (
            ("fsync", "default durability (fsync)", "pyfolds 1.0.2 (fsyncs twice)"),
            ("nofsync", "no fsync either side", "pyfolds 1.0.2, fsync patched out"),
        ):
            rows.append(
                row(
                    f"write {n >> 20} MiB, no compression, {label}",
                    times[f"ours-{fsync}"],
                    peer_label if foldio is not None else "pyfolds (not installed)",
                    times.get(f"peer-{fsync}"),
                    unit="s",
                    target="2x faster than pyfolds",
                    note="fresh path each run; runs interleaved",
                )
            )

        n = (64 << 20) // div
        smooth = np.cumsum(rng.standard_normal(n // 4), dtype=np.float32).astype(np.float16)
        smooth = np.repeat(smooth, 2)

        def zwrite(threads):
            with fold.Writer(p2, compress="zstd", threads=threads, fsync=False) as w:
                w.add_chunk("x", "BLOB", smooth)

        t1 = best(lambda: zwrite(0), repeat=3, setup=lambda: _fresh(p2))
        t2 = best(lambda: zwrite(-1), repeat=3, setup=lambda: _fresh(p2))
        rows.append(
            row(
                f"write {n >> 20} MiB zstd-3, all cores",
                t2,
                "tenfold threads=0",
                t1,
                unit="s",
                note="threads=0 is byte-identical to pyfolds; no fsync",
            )
        )
        if foldio is not None:
            smooth_bytes = smooth.tobytes()
            tp = best(
                lambda: peer_write(False, "zstd", smooth_bytes), repeat=3, setup=lambda: _fresh(p2)
            )
            rows.append(
                row(
                    f"write {n >> 20} MiB zstd-3, all cores",
                    t2,
                    "pyfolds 1.0.2, fsync patched out",
                    tp,
                    unit="s",
                    note="no fsync either side",
                )
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows

"""HDF5: tenfold (through h5py, contiguous datasets as views of its own map) against h5py's own
reads, on the same file in the same run.

Cases:
* read every dataset of a file of contiguous datasets, tenfold.load vs ``f[name][()]`` for
  each;
* the same with gzip-compressed chunked datasets (both decode through h5py);
* open and list (names, dtypes, shapes), tenfold.open vs h5py.File + visititems;
* the same, the first time this process opens the file: tenfold's default, libhdf5 reads the
  file in a checking process first (a process start; the file is touched before each round
  so that the check runs every time).

tenfold's side opens with ``trusted=True`` except in the last case (the check is once per
file and process; those rows compare the work done in this process). Both sides run in
turns (the same machine load), best of 7 (21 for the open).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from _timing import alternate, row

import tenfold


def _files(tmp: str, quick: bool) -> tuple[str, str] | None:
    try:
        import h5py
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    n, side = (20, 64) if quick else (100, 512)
    plain, packed = os.path.join(tmp, "plain.h5"), os.path.join(tmp, "gzip.h5")
    with h5py.File(plain, "w") as f, h5py.File(packed, "w") as g:
        for i in range(n):
            a = rng.standard_normal((side, side)).astype(np.float32)
            f[f"layers/{i}/weight"] = a
            g.create_dataset(f"layers/{i}/weight", data=a, compression="gzip", chunks=True)
    return plain, packed


def _touch(tensors: dict) -> float:
    return float(sum(float(np.asarray(a).reshape(-1)[-1]) for a in tensors.values()))


def _h5py_all(path: str) -> dict:
    import h5py

    out: dict = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda k, o: out.__setitem__(k, o[()]) if isinstance(o, h5py.Dataset) else None
        )
    return out


def run(quick: bool) -> list[dict]:
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = _files(tmp, quick)
        if paths is None:
            return [row("hdf5 files", 0.0, note="h5py not installed: skipped")]
        import h5py

        repeat = 3 if quick else 7
        for label, path in zip(("contiguous", "gzip chunks"), paths, strict=True):
            ours, peer = alternate(
                lambda p=path: _touch(tenfold.load(p, trusted=True)),
                lambda p=path: _touch(_h5py_all(p)),
                rounds=repeat,
            )
            rows.append(row(f"read every dataset ({label})", min(ours), "h5py", min(peer)))

        def ours_list(p: str = paths[0], trusted: bool = True) -> int:
            if not trusted:
                os.utime(p)  # changed since the last check: checked again
            with tenfold.open(p, trusted=trusted) as r:
                return len([r.info(k).shape for k in r])

        def peer_list(p: str = paths[0]) -> int:
            out: list = []
            with h5py.File(p, "r") as f:
                f.visititems(
                    lambda k, o: out.append(o.shape) if isinstance(o, h5py.Dataset) else None
                )
            return len(out)

        ours, peer = alternate(ours_list, peer_list, rounds=3 * repeat)
        rows.append(row("open and list datasets", min(ours), "h5py", min(peer)))
        ours, peer = alternate(lambda: ours_list(trusted=False), peer_list, rounds=repeat)
        rows.append(row("open and list, checked (first open)", min(ours), "h5py", min(peer)))
    return rows

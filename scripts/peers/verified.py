"""Checked reads of a 256 MiB checkpoint: what verifying every checksum costs (issue 28).

The same 16 float32 tensors of 16 MiB (256 MiB; 4 x 4 MiB with --quick) written as zTensor 0.1.0
with a CRC-32C per tensor (``tenfold.save``'s default), as zTensor v2 (XXH3-64 per tensor) and as
``.safetensors`` (no checksum). Page cache warm (each file read once untimed); every case in
turns with its comparison, best of 7. Effective GB/s is the tensors' bytes over the time.

* ``tenfold.load(path)`` (views over the map, every checksum checked: the default) of each
  .zt, against the same call with ``verify_checksums=False``; the issue's bar is 30 GB/s
  effective on 2 cores;
* ``tenfold.torch.load_file`` of the 0.1.0 .zt against the same tensors as ``.safetensors``
  through tenfold (the difference is the checking alone);
* ``tenfold.load(path, copy=True)`` verified against unverified (the bar: within 1.15x, one pass
  over the bytes).
"""

from __future__ import annotations

import os
import pathlib
import tempfile

import _timing
import numpy as np

import tenfold


def _files(where: pathlib.Path, quick: bool) -> tuple[dict[str, pathlib.Path], int]:
    count, elems = (4, 1 << 20) if quick else (16, 4 << 20)
    rng = np.random.default_rng(28)
    model = {
        f"layer.{i}.weight": rng.standard_normal(elems, dtype=np.float32) for i in range(count)
    }
    paths = {
        "zt": where / "m.zt",
        "zt2": where / "m2.zt",
        "safetensors": where / "m.safetensors",
    }
    tenfold.save(paths["zt"], model, fsync=False)
    tenfold.save(paths["zt2"], model, zt_generation=2, fsync=False)
    tenfold.save(paths["safetensors"], model, fsync=False)
    return paths, sum(a.nbytes for a in model.values())


def _pair(fn_a, fn_b, rounds: int = 7) -> tuple[float, float]:
    a, b = _timing.alternate(fn_a, fn_b, rounds)
    return min(a), min(b)


def run(quick: bool) -> list[dict]:
    rows: list[dict] = []
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="tenfold-verified-") as tmp:
        paths, total = _files(pathlib.Path(tmp), quick)
        size = f"{total >> 20} MiB"
        for p in paths.values():
            tenfold.load(p, copy=True)  # page cache warm

        def load(path, **kw):
            return lambda: tenfold.load(path, **kw)

        for key, label in (("zt", "zTensor 0.1.0, CRC-32C"), ("zt2", "zTensor v2, XXH3-64")):
            t_on, t_off = _pair(load(paths[key]), load(paths[key], verify_checksums=False))
            rows.append(
                _timing.row(
                    f"open + map + every checksum, {label}, {size}", total / t_on / 1e9,
                    "same, verify_checksums=False", total / t_off / 1e9, unit="GB/s",
                    higher_is_better=True, target=">= 30 GB/s on 2 cores",
                    note=f"{cores} cores; {t_on * 1e3:.1f} ms verified, {t_off * 1e3:.2f} ms not",
                )
            )  # fmt: skip
        try:
            import tenfold.torch as tt
        except ImportError as exc:  # the torch extra
            rows.append(_timing.row("tenfold.torch.load_file", 0.0, note=f"skipped: {exc}"))
        else:
            t_zt, t_st = _pair(
                lambda: tt.load_file(paths["zt"]), lambda: tt.load_file(paths["safetensors"])
            )
            rows.append(
                _timing.row(
                    f"tenfold.torch.load_file .zt CRC-32C verified, {size}", total / t_zt / 1e9,
                    "tenfold.torch.load_file .safetensors (nothing to check)",
                    total / t_st / 1e9, unit="GB/s", higher_is_better=True,
                    target=">= 30 GB/s on 2 cores",
                    note=f"{cores} cores; {t_zt * 1e3:.1f} ms against {t_st * 1e3:.2f} ms",
                )
            )  # fmt: skip
        t_on, t_off = _pair(
            load(paths["zt"], copy=True), load(paths["zt"], copy=True, verify_checksums=False)
        )
        rows.append(
            _timing.row(
                f"load(copy=True) verified vs unverified, zTensor 0.1.0, {size}", t_on,
                "load(copy=True, verify_checksums=False)", t_off, unit="s",
                target="within 1.15x (ratio >= 0.87x)",
                note=f"{cores} cores; verified / unverified = {t_on / t_off:.2f}",
            )
        )  # fmt: skip
    return rows

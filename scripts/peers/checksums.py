"""CRC-32C speed on one core: tenfold's ``crc32c`` kernel vs the ``crc32c`` package and xxh3-64;
CRC-32 (zip's): the same kernel's ``crc32`` vs ``zlib.crc32``.

The issue's target: CRC-32C as fast as xxh3 on one core of a CPU with carry-less multiply
(ratio vs ``xxhash.xxh3_64`` at least 0.8x). Every case hashes the same buffer of random bytes
(256 MiB, out of the caches; 16 MiB with --quick) in the same run, best of 5, on the calling
thread only; the kernel, the package and xxh3 run in turns, so that all three see the same
machine load. GB/s is 10^9 bytes per second. The copy case compares ``copy_crc32c`` (one
pass) with a NumPy copy followed by the package's CRC of the copy (two passes). Each of the
kernel's implementations this CPU runs gets a row (``_force``: what CPUs without this one's
features run), for CRC-32C and for CRC-32.
"""

from __future__ import annotations

import zlib

import _timing
import numpy as np

from tenfold import _kernels


def _gbs(nbytes: int, fn) -> float:
    return nbytes / _timing.best(fn) / 1e9


def run(quick: bool) -> list[dict]:
    try:
        import crc32c as pkg
        import xxhash
    except ImportError as exc:
        return [_timing.row("crc32c", 0.0, note=f"skipped: {exc}")]
    if _kernels.pure_python():
        return [_timing.row("crc32c", 0.0, note="skipped: TENFOLD_PUREPYTHON")]
    k = _kernels.load("crc32c", "compiled")
    n = (16 if quick else 256) << 20
    buf = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    dst = np.ones_like(buf)  # touched: no page faults in the timed copies
    size = f"{n >> 20} MiB"
    assert k.crc32c(buf) == pkg.crc32c(buf)
    # in turns (ours, the package, xxh3, ours...): all three see the same machine load
    t_ours, t_pkg = _timing.alternate(lambda: k.crc32c(buf), lambda: pkg.crc32c(buf), 5)
    t_ours2, t_xxh3 = _timing.alternate(
        lambda: k.crc32c(buf), lambda: xxhash.xxh3_64_intdigest(buf), 5
    )
    ours = n / min(t_ours + t_ours2) / 1e9
    package = n / min(t_pkg) / 1e9
    xxh3 = n / min(t_xxh3) / 1e9
    rows = [
        _timing.row(
            f"crc32c {size}, 1 thread ({k.implementation()})", ours, "crc32c package",
            package, unit="GB/s", higher_is_better=True,
        ),
        _timing.row(
            f"crc32c {size}, 1 thread vs xxh3-64", ours, "xxhash.xxh3_64", xxh3, unit="GB/s",
            higher_is_better=True, target=">= 0.8x",
        ),
    ]  # fmt: skip
    assert k.crc32(buf) == zlib.crc32(buf)
    t_ours, t_zlib = _timing.alternate(lambda: k.crc32(buf), lambda: zlib.crc32(buf), 5)
    rows.append(
        _timing.row(
            f"crc32 {size}, 1 thread ({k.crc32_implementation()})", n / min(t_ours) / 1e9,
            "zlib.crc32", n / min(t_zlib) / 1e9, unit="GB/s", higher_is_better=True,
            note=f"zlib {zlib.ZLIB_RUNTIME_VERSION}",
        )
    )  # fmt: skip
    small = buf[: 1 << 20]
    reps = 64

    def many(fn):
        def go():
            for _ in range(reps):
                fn()

        return go

    rows.append(
        _timing.row(
            "crc32c 1 MiB (in cache), 1 thread vs xxh3-64",
            _gbs(reps << 20, many(lambda: k.crc32c(small))), "xxhash.xxh3_64",
            _gbs(reps << 20, many(lambda: xxhash.xxh3_64_intdigest(small))), unit="GB/s",
            higher_is_better=True, target=">= 0.8x",
        )
    )  # fmt: skip

    def two_passes():
        np.copyto(dst, buf)
        pkg.crc32c(dst)

    fused = _gbs(n, lambda: k.copy_crc32c(buf, dst))
    copy = _gbs(n, lambda: np.copyto(dst, buf))
    rows.append(
        _timing.row(
            f"copy + crc32c {size}, 1 thread (copy_crc32c)", fused,
            "np.copyto + crc32c package", _gbs(n, two_passes), unit="GB/s",
            higher_is_better=True, note=f"np.copyto alone {copy:.1f} GB/s",
        )
    )  # fmt: skip
    best = k.implementation()
    try:
        for level in k._available()[:-1][::-1]:
            k._force(level)
            rows.append(
                _timing.row(
                    f"crc32c {size}, 1 thread, forced {level}", _gbs(n, lambda: k.crc32c(buf)),
                    "crc32c package", package, unit="GB/s", higher_is_better=True,
                    note="for CPUs without the best level's features",
                )
            )  # fmt: skip
            if level != "sse4.2":  # CRC-32 runs the tables there
                rows.append(
                    _timing.row(
                        f"crc32 {size}, 1 thread, forced {level}", _gbs(n, lambda: k.crc32(buf)),
                        "zlib.crc32", n / min(t_zlib) / 1e9, unit="GB/s", higher_is_better=True,
                        note="for CPUs without the best level's features",
                    )
                )  # fmt: skip
    finally:
        k._force(best)
    return rows

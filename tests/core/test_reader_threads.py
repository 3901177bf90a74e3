"""The thread-safety contract of the reader protocol (issue 22, ``tenfold.core.reader``'s module
doc): one opened reader shared by many threads gives, for every format, what one thread reads.

Each case opens one file, reads every tensor in one thread (the reference), then has 8 threads
read every tensor again for several rounds, in a different order each, with ``read``, ``[]``,
``get``, ``info``, ``span``, ``verified`` and a row slice, all starting together on a barrier,
from a freshly opened reader (so that the first-use caches: checksums verified once, FOLD
chunks decoded once, v2 records built lazily, are filled by the racing threads).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tenfold
import tenfold.fold
import tenfold.ztensor

THREADS = 8
ROUNDS = 4

ARRAYS = {
    f"t{i:02d}": np.arange(i * 7, i * 7 + 48 * (i + 1), dtype=dt).reshape(-1, 4 * (i % 3 + 1))
    for i, dt in enumerate(["<f4", "<i8", "<u2", "<f8", "<i4", "<u1", "<f4", "<i2"] * 2)
}
ARRAYS["scalar"] = np.array(3.5, dtype=np.float32)


def _write(kind: str, d: Path) -> Path:
    arrays = dict(ARRAYS)
    if kind == "zt010":
        p = d / "m.zt"
        tenfold.ztensor.save(p, arrays, checksum="crc32c")
    elif kind == "zt010_zstd":
        p = d / "m.zt"
        tenfold.ztensor.save(p, arrays, encoding="zstd", checksum="sha256")
    elif kind == "zt2":
        p = d / "m.zt"
        tenfold.ztensor.save(p, arrays, generation=2)
    elif kind == "zt2_zstd":
        p = d / "m.zt"
        tenfold.ztensor.save(p, arrays, generation=2, encoding="zstd")
    elif kind == "fold":
        p = d / "m.fold"
        with tenfold.fold.Writer(p, ecc="rs(32)") as w:  # two chunks: <chunk>/<array> names
            names = list(arrays)
            w.add_state_dict("a", {k: arrays[k] for k in names[::2]})
            w.add_state_dict("b", {k: arrays[k] for k in names[1::2]})
            w.finalize()
    elif kind == "fold_raw":
        p = d / "m.fold"  # one uncompressed STEN chunk: slices read rows from its header
        tenfold.fold.save(p, arrays, compress=None)
    elif kind == "sharded":
        p = d / "model.safetensors"
        tenfold.save(p, arrays, max_shard_size=2000)
        p = d / "model.safetensors.index.json"
    else:
        p = d / f"m.{kind}"
        tenfold.save(p, arrays)
    return p


KINDS = ["zt010", "zt010_zstd", "zt2", "zt2_zstd", "oinf", "fold", "fold_raw", "wtxt",
         "safetensors", "npz", "sharded"]  # fmt: skip


def _one(r: Any, name: str) -> dict[str, Any]:
    """Everything one thread reads of ``name``."""
    info = r.info(name)
    whole = np.asarray(r[name])
    got = {
        "read": np.asarray(r.read(name)),
        "item": whole,
        "get": np.asarray(r.get(name)),
        "info": (info.name, info.dtype, tuple(info.shape), info.byte_range, info.np_dtype),
        "span": r.span(name),
        "verified_bool": isinstance(r.verified(name), bool),
    }
    if whole.ndim:
        got["slice"] = np.asarray(r.read(name, (slice(1, None, 2), ...)))
    return got


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, np.ndarray):
            if not (v.dtype == w.dtype and v.shape == w.shape and np.array_equal(v, w)):
                return False
        elif k != "span" and v != w:  # a span may appear once a checksum is verified
            return False
    return True


@pytest.mark.parametrize("kind", KINDS)
def test_one_reader_read_from_many_threads_gives_what_one_thread_reads(tmp_path, kind):
    p = _write(kind, tmp_path)
    with tenfold.open(p) as r:
        names = list(r)
        assert sorted(n.split("/", 1)[-1] for n in names) == sorted(ARRAYS)
        want = {n: _one(r, n) for n in names}
    for n, w in want.items():  # the single-threaded read is the saved array
        key = n.split("/", 1)[-1]
        assert np.array_equal(w["read"], ARRAYS[key]), (kind, n)
    errors: list[BaseException] = []
    bad: list[tuple[int, str]] = []
    for _ in range(ROUNDS):
        with tenfold.open(p) as r:  # fresh: the threads race to fill its caches
            barrier = threading.Barrier(THREADS)

            def work(t: int, r: Any = r, barrier: threading.Barrier = barrier) -> None:
                order = names[t % len(names) :] + names[: t % len(names)]
                if t % 2:
                    order.reverse()
                try:
                    barrier.wait()
                    for n in order:
                        if not _same(_one(r, n), want[n]):
                            bad.append((t, n))
                    assert len(r) == len(names) and list(r) == names
                    assert all(n in r for n in names)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    if errors:
        raise errors[0]
    assert not bad, bad[:5]


@pytest.mark.parametrize("kind", KINDS)
def test_a_read_after_close_raises_and_arrays_handed_out_stay_valid(tmp_path, kind):
    """The contract's ``close()``: arrays already returned stay valid, a read that starts
    after it raises (WTXT, which keeps its text in memory, returned the array)."""
    p = _write(kind, tmp_path)
    r = tenfold.open(p)
    names = list(r)
    got = {n: r[n] for n in names}
    r.close()
    for n, a in got.items():
        assert np.array_equal(a, ARRAYS[n.split("/", 1)[-1]])
    n = next(n for n in names if np.ndim(got[n]))
    for read in (lambda: r[n], lambda: r.read(n), lambda: r.read(n, (slice(0, 1),))):
        with pytest.raises((ValueError, tenfold.TenfoldError), match="closed"):
            read()

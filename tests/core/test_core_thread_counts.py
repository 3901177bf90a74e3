"""Pools that scale with cores take their size from parallel.threads() (the CPUs this process
may use, capped by TENFOLD_THREADS), never from a constant."""

from __future__ import annotations

import numpy as np
import pytest

from tenfold import _kernels
from tenfold.core import parallel
from tenfold.fold import writer as fold_writer


@pytest.fixture
def five_cpus(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(5)))
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)


def test_the_shared_pool_has_a_worker_per_cpu(monkeypatch, five_cpus):
    monkeypatch.setattr(parallel, "_shared", None)
    monkeypatch.setattr(parallel, "_shared_pid", -1)
    pool = parallel.shared()
    try:
        assert pool._max_workers == 5
        monkeypatch.setattr(parallel, "_shared", None)
        monkeypatch.setenv(parallel.THREADS_ENV, "1")
        small = parallel.shared()
        assert small._max_workers == 2  # never fewer than two
        small.shutdown()
    finally:
        pool.shutdown()


def test_fold_parity_is_split_over_the_cpus(monkeypatch, five_cpus):
    rs = _kernels.load("rs")
    calls: list[int] = []
    encode = rs.encode_blocks

    def spy(src, nsym, out):
        calls.append(len(src))
        return encode(src, nsym, out)

    monkeypatch.setattr(rs, "encode_blocks", spy)
    comp = np.random.default_rng(1).integers(0, 256, 8 << 20, dtype=np.uint8)
    nsym, k = 8, 247
    ecc_len = -(-comp.size // k) * nsym
    with parallel.scoped(5) as pool:
        got = fold_writer._parity(memoryview(comp), nsym, ecc_len, pool)
    assert len(calls) == 4  # 8 MiB: parts of at least 2 MiB, one per CPU allowed
    calls.clear()
    want = fold_writer._parity(memoryview(comp), nsym, ecc_len, None)
    assert calls == [comp.size] and np.array_equal(got, want)


def test_zt_v2_hashing_thread_follows_the_cap(monkeypatch, five_cpus):
    from tenfold.formats.ztensor import _v2blobs

    assert _v2blobs._use_thread()
    monkeypatch.setenv(parallel.THREADS_ENV, "1")
    assert not _v2blobs._use_thread()  # TENFOLD_THREADS=1: the writer stays on one thread

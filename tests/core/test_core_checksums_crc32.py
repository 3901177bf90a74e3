"""tenfold.core.checksums.crc32: ``zlib.crc32``'s value from the compiled kernel when the
kernels are in use, from :mod:`zlib` otherwise (never the kernel's slow pure-Python twin on a
payload); large buffers on several threads, joined with crc32_combine."""

from __future__ import annotations

import threading
import zlib

import numpy as np
import pytest

from _meet import Meet
from tenfold import _kernels
from tenfold.core import checksums


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(checksums, "_CRC32", {})


def _data():
    return np.random.default_rng(3).integers(0, 256, (3 << 20) + 5, dtype=np.uint8)


def test_crc32_uses_the_compiled_kernel(fresh):
    if _kernels.pure_python():
        pytest.skip("TENFOLD_PUREPYTHON: the kernels are not in use")
    k = _kernels.load("crc32c", "compiled")
    if k.crc32_implementation() == "table":
        pytest.skip("no carry-less multiply here (or TENFOLD_CRC32C): zlib is used")
    assert checksums.crc32_implementation() == f"tenfold kernel ({k.crc32_implementation()})"
    assert checksums._crc32_backend()[0] is k.crc32
    data = _data()
    assert checksums.crc32(data[1:], 5) == zlib.crc32(data[1:].tobytes(), 5)
    assert checksums.crc32(b"123456789") == checksums.CRC32_CHECK == 0xCBF43926
    assert checksums.crc32(memoryview(data.tobytes())[3:]) == zlib.crc32(data[3:].tobytes())


def test_crc32_uses_zlib_where_the_kernel_runs_only_its_tables(fresh):
    """The kernel's slice-by-8 tables run at about half zlib's speed: where the CPU cannot
    fold (off x86-64, or TENFOLD_CRC32C=table), zlib checks."""
    if _kernels.pure_python():
        pytest.skip("TENFOLD_PUREPYTHON: the kernels are not in use")
    k = _kernels.load("crc32c", "compiled")
    old = k._force("table")
    try:
        assert checksums.crc32_implementation() == "zlib"
        assert checksums.crc32(b"123456789") == 0xCBF43926
    finally:
        k._force(old)


def test_crc32_under_purepython_uses_zlib_not_the_twin(fresh, monkeypatch):
    monkeypatch.setenv("TENFOLD_PUREPYTHON", "1")
    ref = _kernels.load("crc32c", "reference")
    monkeypatch.setattr(ref, "crc32", lambda *a: pytest.fail("the twin checked a payload"))
    assert checksums.crc32_implementation() == "zlib"
    data = _data()
    assert checksums.crc32(data, 7) == zlib.crc32(data.tobytes(), 7)
    assert checksums.crc32(data.reshape(-1)[::2]) == zlib.crc32(data[::2].tobytes())


@pytest.mark.parametrize("pure", ["0", "1"])
def test_a_large_buffer_is_checked_on_several_threads(fresh, monkeypatch, pure):
    """At least PARALLEL_BYTES: blocks on the threads parallel.threads() allows, joined with
    crc32_combine into zlib's value."""
    from tenfold.core import parallel

    monkeypatch.setenv("TENFOLD_PUREPYTHON", pure)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)
    fn = checksums._crc32_backend()[0]
    seen: list[tuple[str, int]] = []

    meet = Meet()

    def spy(mv, value):
        seen.append((threading.current_thread().name, len(mv)))
        meet()  # the first two blocks on two threads at once
        return fn(mv, value)

    monkeypatch.setitem(checksums._CRC32, _kernels.pure_python(), (spy, "spy"))
    data = np.resize(_data(), checksums.PARALLEL_BYTES + 12345)
    want = zlib.crc32(data, 9)
    assert checksums.crc32(data, 9) == want
    assert len(seen) == 3 and sum(n for _, n in seen) == data.size
    names = {name for name, _ in seen}  # this thread and the shared pool's workers
    assert len(names) >= 2
    assert all(n.startswith("tenfold-shared") for n in names - {threading.current_thread().name})
    seen.clear()
    assert checksums.crc32(data, 9, threads=1) == want
    assert len(seen) == 1


@pytest.mark.parametrize("pure", ["0", "1"])
def test_crc32_combine(monkeypatch, pure):
    monkeypatch.setenv("TENFOLD_PUREPYTHON", pure)
    data = _data()[:10_000].tobytes()
    for cut in (0, 1, 4096, 10_000):
        a, b = data[:cut], data[cut:]
        assert checksums.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(data)
    twin = _kernels.load("crc32c", "reference")
    assert checksums.crc32_combine(5, 9, 2**64 - 1) == twin.crc32_combine(5, 9, 2**64 - 1)
    assert checksums.crc32c_combine(5, 9, 7) == twin.crc32c_combine(5, 9, 7)  # not CRC-32's
    assert checksums.crc32c_combine(5, 9, 7) != checksums.crc32_combine(5, 9, 7)

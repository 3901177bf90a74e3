"""tenfold.core.checksums.crc32c: the compiled kernel when the kernels are in use, the ``crc32c``
package otherwise (never the kernel's slow pure-Python twin on a payload)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from _meet import Meet
from tenfold import _kernels
from tenfold.core import checksums

pk = pytest.importorskip("crc32c", reason="the crc32c package is the oracle")


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(checksums, "_CRC", {})


def _data():
    return np.random.default_rng(1).integers(0, 256, (3 << 20) + 5, dtype=np.uint8)


def test_crc32c_uses_the_compiled_kernel(fresh, monkeypatch):
    if _kernels.pure_python():
        pytest.skip("TENFOLD_PUREPYTHON: the kernels are not in use")
    assert checksums.crc32c_implementation().startswith("tenfold kernel (")
    data = _data()
    assert checksums.crc32c(data[1:], 5) == pk.crc32c(data[1:].tobytes(), 5)


def test_crc32c_under_purepython_uses_the_package_not_the_twin(fresh, monkeypatch):
    monkeypatch.setenv("TENFOLD_PUREPYTHON", "1")
    ref = _kernels.load("crc32c", "reference")
    monkeypatch.setattr(ref, "crc32c", lambda *a: pytest.fail("the twin checked a payload"))
    assert checksums.crc32c_implementation() == "crc32c package"
    data = _data()
    assert checksums.crc32c(data, 7) == pk.crc32c(data.tobytes(), 7)
    assert checksums.crc32c(data.reshape(-1)[::2]) == pk.crc32c(data[::2].tobytes())


def test_a_large_buffer_is_checked_on_several_threads(fresh, monkeypatch):
    """At least PARALLEL_BYTES: blocks on the threads parallel.threads() allows, joined."""
    from tenfold.core import parallel

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)
    fn = checksums._crc_backend()[0]
    seen: list[tuple[str, int]] = []

    meet = Meet()

    def spy(mv, value):
        seen.append((threading.current_thread().name, len(mv)))
        meet()  # the first two blocks on two threads at once
        return fn(mv, value)

    monkeypatch.setitem(checksums._CRC, _kernels.pure_python(), (spy, "spy"))
    data = np.resize(_data(), checksums.PARALLEL_BYTES + 12345)
    want = pk.crc32c(data.tobytes(), 9)
    assert checksums.crc32c(data, 9) == want
    assert len(seen) == 3 and sum(n for _, n in seen) == data.size
    names = {name for name, _ in seen}  # this thread and the shared pool's workers
    assert len(names) >= 2
    assert all(n.startswith("tenfold-shared") for n in names - {threading.current_thread().name})
    seen.clear()
    assert checksums.crc32c(data, 9, threads=1) == want  # from code already parallel
    assert len(seen) == 1
    seen.clear()
    monkeypatch.setenv(parallel.THREADS_ENV, "2")
    assert checksums.crc32c(data, 9) == want
    assert len(seen) == 2
    seen.clear()
    assert checksums.crc32c(data[: checksums.PARALLEL_BYTES - 1], 9) == pk.crc32c(
        data[: checksums.PARALLEL_BYTES - 1].tobytes(), 9
    )
    assert len(seen) == 1  # below the threshold: one call


@pytest.mark.parametrize("pure", ["0", "1"])
def test_crc32c_combine(monkeypatch, pure):
    monkeypatch.setenv("TENFOLD_PUREPYTHON", pure)
    data = _data()[:10_000].tobytes()
    for cut in (0, 1, 4096, 10_000):
        a, b = data[:cut], data[cut:]
        got = checksums.crc32c_combine(pk.crc32c(a), pk.crc32c(b), len(b))
        assert got == pk.crc32c(data)
    twin = _kernels.load("crc32c", "reference")  # the pure-Python combine
    assert checksums.crc32c_combine(5, 9, 2**64 - 1) == twin.crc32c_combine(5, 9, 2**64 - 1)


@pytest.fixture
def fresh_xxh3(monkeypatch):
    monkeypatch.setattr(checksums, "_X3", {})


def test_xxh3_uses_the_compiled_kernel(fresh_xxh3):
    if _kernels.pure_python():
        pytest.skip("TENFOLD_PUREPYTHON: the kernels are not in use")
    xxhash = pytest.importorskip("xxhash")
    k = _kernels.load("xxh3", "compiled")
    assert checksums.xxh3_implementation() == f"tenfold kernel ({k.implementation()})"
    data = _data()
    assert checksums.xxh3_64(data[1:], 5) == xxhash.xxh3_64_intdigest(data[1:].tobytes(), 5)
    h = checksums.xxh3_hasher()
    assert isinstance(h, k.Xxh3State)
    out = np.empty_like(data)
    checksums.copy_xxh3(data, out, h)
    assert np.array_equal(out, data) and h.intdigest() == checksums.xxh3_64(data)


def test_xxh3_under_purepython_uses_the_package_not_the_twin(fresh_xxh3, monkeypatch):
    """TENFOLD_PUREPYTHON: the xxhash package, never the compiled kernel nor the slow twin."""
    xxhash = pytest.importorskip("xxhash")
    monkeypatch.setenv("TENFOLD_PUREPYTHON", "1")
    ref = _kernels.load("xxh3", "reference")
    for name in ("xxh3_64", "copy_xxh3"):
        monkeypatch.setattr(ref, name, lambda *a: pytest.fail("the twin hashed a payload"))
    if not _kernels.pure_python():
        comp = _kernels.load("xxh3", "compiled")
        for name in ("xxh3_64", "copy_xxh3"):
            monkeypatch.setattr(comp, name, lambda *a: pytest.fail("the kernel was used"))
    assert checksums.xxh3_implementation() == "xxhash package"
    data = _data()
    assert checksums.xxh3_64(data, 7) == xxhash.xxh3_64_intdigest(data.tobytes(), 7)
    assert checksums.xxh3_hex(data[::2]) == xxhash.xxh3_64_hexdigest(data[::2].tobytes())
    h = checksums.xxh3_hasher(3)
    assert isinstance(h, xxhash.xxh3_64)
    out = np.empty_like(data)
    checksums.copy_xxh3(data, out, h)
    assert np.array_equal(out, data) and h.intdigest() == checksums.xxh3_64(data, 3)

"""The zTensor 0.1.0 writer's checksums while writing: with two CPUs or more a large piece is
hashed on the writer's hashing thread while the writing thread copies it into the file; the
checksums are those of the bytes written, whatever the thread, the piece sizes or the
algorithm, and the thread never outlives the writer. With fsync, each tensor's bytes are handed
to the disk as soon as they are written (the final fsync then waits for less)."""

from __future__ import annotations

import gc
import hashlib
import threading

import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.core import parallel, prealloc
from tenfold.core.checksums import crc32c
from tenfold.ztensor import _checksum, _v2values

pytestmark = pytest.mark.filterwarnings("error")


def _sum_threads() -> list[threading.Thread]:
    gc.collect()  # a writer another test dropped unclosed is aborted by its finalizer
    return [t for t in threading.enumerate() if t.name.startswith("tenfold-zt-sum")]


@pytest.fixture
def cpus(monkeypatch):
    """``cpus(n)``: this process may run on ``n`` CPUs (and TENFOLD_THREADS is unset)."""
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)

    def set_cpus(n: int) -> None:
        monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(n)))

    return set_cpus


@pytest.fixture
def small_overlap(monkeypatch):
    """Every piece of 4 KiB or more takes the hashing thread."""
    monkeypatch.setattr(_checksum, "OVERLAP_MIN", 4096)


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        "tiny": rng.standard_normal(3).astype(np.float32),
        "edge": rng.integers(0, 256, 4096, dtype=np.uint8),
        "big": rng.standard_normal(50_000).astype(np.float32),
        # big-endian and strided: converted in slices, so several pieces of one tensor
        "strided": rng.standard_normal((400, 300))[:, ::2].astype(">f8"),
        "empty": np.zeros((0, 4), np.float32),
    }


def _stored(a: np.ndarray) -> bytes:
    le = a.astype(a.dtype.newbyteorder("<"), copy=False) if a.dtype.byteorder == ">" else a
    return np.ascontiguousarray(le).tobytes()


@pytest.mark.parametrize("n_cpus", [1, 5])
@pytest.mark.parametrize("algo", ["crc32c", "sha256"])
def test_checksums_are_those_of_the_bytes(tmp_path, cpus, small_overlap, monkeypatch, n_cpus, algo):
    cpus(n_cpus)
    monkeypatch.setattr(_v2values, "_SLICE", 64 << 10)  # strided input: 64 KiB pieces
    data = _data()
    p = tmp_path / "a.zt"
    zt.save(p, data, checksum=algo)
    with zt.open(p) as r:
        for name, a in data.items():
            info = r.info(name)
            want = _stored(a)
            if algo == "crc32c":
                assert info.checksum_hex == f"{crc32c(want):08x}", name
            else:
                assert info.checksum_hex == hashlib.sha256(want).hexdigest(), name
            assert np.array_equal(r[name], a)
    assert _sum_threads() == []


@pytest.mark.parametrize("n_cpus", [1, 5])
def test_add_raw_pieces_hashed_while_written(tmp_path, cpus, small_overlap, n_cpus):
    cpus(n_cpus)
    raw = np.random.default_rng(2).integers(0, 256, 3 * 8192 + 5, dtype=np.uint8)
    pieces = [raw[:5], raw[5:8197], raw[8197:]]  # small, large, large
    p = tmp_path / "r.zt"
    with zt.Writer(p) as w:
        digest = w.add_raw("r", np.uint8, [raw.size], pieces, checksum="crc32c")
    assert digest == f"{crc32c(raw):08x}"
    with zt.open(p) as r:
        assert np.array_equal(r["r"], raw)
    assert _sum_threads() == []


def _crc_threads(monkeypatch) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []
    real = _checksum.crc32c

    def spy(data, value=0, **kw):
        seen.append((threading.current_thread().name, memoryview(data).nbytes))
        return real(data, value, **kw)

    monkeypatch.setattr(_checksum, "crc32c", spy)
    return seen


def test_large_pieces_are_hashed_on_the_writer_thread(tmp_path, cpus, monkeypatch):
    cpus(5)
    seen = _crc_threads(monkeypatch)
    big = np.arange(1 << 18, dtype=np.float32)  # 1 MiB: OVERLAP_MIN
    zt.save(tmp_path / "a.zt", {"big": big, "small": np.ones(8, np.float32)}, checksum="crc32c")
    threads = dict((n, t) for t, n in seen)
    assert threads[big.nbytes].startswith("tenfold-zt-sum")
    assert threads[32] == threading.current_thread().name  # small: inline, no hand-off


def test_one_thread_allowed_hashes_inline(tmp_path, cpus, monkeypatch):
    cpus(5)
    monkeypatch.setenv(parallel.THREADS_ENV, "1")
    seen = _crc_threads(monkeypatch)
    big = np.arange(1 << 20, dtype=np.float32)
    zt.save(tmp_path / "a.zt", {"big": big}, checksum="crc32c")
    assert seen and {t for t, _ in seen} == {threading.current_thread().name}
    assert _sum_threads() == []


def test_write_error_mid_tensor_keeps_old_file_and_stops_thread(
    tmp_path, cpus, small_overlap, monkeypatch
):
    cpus(5)
    p = tmp_path / "a.zt"
    zt.save(p, {"old": np.ones(4, np.float32)})
    before = p.read_bytes()
    w = zt.Writer(p)
    real = w._f.write

    def failing(b):
        if memoryview(b).nbytes >= 4096:
            raise OSError(28, "No space left on device")
        return real(b)

    monkeypatch.setattr(w._f, "write", failing)
    with pytest.raises(OSError, match="No space"):
        w.add("big", np.ones(1 << 14, np.float32), checksum="crc32c")
    with pytest.raises(ValueError, match="failed earlier"):
        w.close()
    assert p.read_bytes() == before
    assert _sum_threads() == []


@pytest.mark.parametrize("fsync", [True, False])
def test_writeback_started_only_when_fsyncing(tmp_path, monkeypatch, fsync):
    ranges: list[tuple[int, int]] = []
    monkeypatch.setattr(prealloc, "start_writeback", lambda fd, o, n: ranges.append((o, n)))
    monkeypatch.setattr(prealloc, "WRITEBACK_STEP", 4096, raising=False)
    data = {f"t{i}": np.full(1500 * (i + 1), i, np.float32) for i in range(5)}
    data["z"] = np.zeros(1 << 14, np.float32)
    p = tmp_path / "a.zt"
    with zt.Writer(p, fsync=fsync) as w:
        for k, v in data.items():
            w.add(k, v, checksum="crc32c", encoding="zstd" if k == "z" else "raw")
        w.add_raw("r", np.uint8, [9000], [np.ones(9000, np.uint8)])
    if not fsync:
        assert ranges == []
        return
    with zt.open(p) as r:
        ends = [r.info(k).offset + r.info(k).size for k in [*data, "r"]]
        assert np.array_equal(r["t4"], data["t4"])
    assert ranges and ranges[0][0] == len(b"ZTEN0001")  # from the first byte after the magic
    pos = ranges[0][0]
    for off, n in ranges:  # contiguous steps of at least WRITEBACK_STEP, each ending a tensor
        assert off == pos and n >= 4096 and off + n in ends
        pos += n

"""The staging ring behind ``device="cuda"`` (tenfold.interop._staging, ._device), on the CPU.

The engine is driven with NumPy buffers and a device whose copies run later, on a thread of
their own, reading the host buffer when they run (as a GPU's DMA does): a buffer written again
before its copies are done would deliver wrong bytes, and every read also asserts that its
buffer range has no copy in flight. The PyTorch path runs with ``FORCE_CPU`` (unpinned buffers,
synchronous copies) and is compared with the CPU load of the same files.
"""

from __future__ import annotations

import queue
import threading
import time

import crc32c
import ml_dtypes
import numpy as np
import pytest
import xxhash

import tenfold
from tenfold import ztensor
from tenfold.core import parallel
from tenfold.errors import IntegrityError
from tenfold.interop import _staging
from tenfold.interop._staging import Check, Job, Ring, array_reader, crc32c_combine, plan

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(
    torch is None, reason="PyTorch is not installed (extra: tenfold[torch])"
)


class LateDevice:
    """A backend whose copies run on their own thread, ``delay`` seconds after being started."""

    def __init__(self, delay: float = 0.0003) -> None:
        self.delay = delay
        self.q: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.in_flight: list[np.ndarray] = []  # host ranges whose copy has not run yet
        self.allocated = 0
        self.live: list[np.ndarray] = []
        self.thread = threading.Thread(target=self._loop, name="late-device", daemon=True)
        self.thread.start()

    def alloc(self, nbytes):
        self.allocated += 1
        a = np.full(nbytes, 0xEE, np.uint8)
        self.live.append(a)
        return a, a

    def copy(self, dst, dst_start, handle, start, nbytes):
        src = handle[start : start + nbytes]
        with self.lock:
            self.in_flight.append(src)
        self.q.put(("copy", dst, dst_start, src))

    def record(self):
        ev = threading.Event()
        self.q.put(("event", ev))
        return ev

    def wait(self, event):
        assert event.wait(30), "late device: an event never came"

    def synchronize(self):
        self.wait(self.record())

    def busy(self, out: np.ndarray) -> bool:
        with self.lock:
            return any(np.shares_memory(out, r) for r in self.in_flight)

    def close(self):
        self.q.put(None)
        self.thread.join(10)

    def _loop(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            if item[0] == "event":
                item[1].set()
                continue
            _, dst, dst_start, src = item
            time.sleep(self.delay)
            dst[dst_start : dst_start + src.size] = src
            with self.lock:
                self.in_flight = [r for r in self.in_flight if r is not src]


@pytest.fixture
def device():
    d = LateDevice()
    yield d
    d.close()


def _staging_threads():
    return [t for t in threading.enumerate() if t.name.startswith("tenfold-staging")]


def _jobs(device, sources, checks=None, seen=None, in_place=False):
    """One job per source array, into a fresh destination; each read asserts that no copy
    out of the range it writes is in flight. ``in_place``: the jobs say where their bytes
    are (``Job.source``)."""
    dsts = [np.zeros(s.nbytes, np.uint8) for s in sources]
    jobs = []
    for i, (s, d) in enumerate(zip(sources, dsts, strict=True)):
        inner = array_reader(s)

        def read(out, start, inner=inner):
            assert not device.busy(out), "a buffer was written while a copy out of it ran"
            if seen is not None:
                seen.add(threading.current_thread().name)
            inner(out, start)

        check = None if checks is None else checks[i]
        jobs.append(Job(s.nbytes, read, d, check, s if in_place else None))
    return jobs, dsts


def _sources(seed=3):
    rng = np.random.default_rng(seed)
    sizes = [0, 1, 100_000, 7, 20_000, 65_536, 0, 3, 150_001, 511, 513, 4096]
    return [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]


def _digest(algo, data):
    if algo == "crc32c":
        return f"{crc32c.crc32c(data):08x}"
    if algo == "xxh3":
        return f"{xxhash.xxh3_64_intdigest(data):016x}"
    import hashlib

    return hashlib.sha256(data).hexdigest()


class Mismatch(IntegrityError):
    pass


# -- the engine -------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("buffers", [2, 3])
def test_every_byte_arrives_through_late_copies(device, threads, buffers):
    sources = _sources()
    jobs, dsts = _jobs(device, sources)
    ring = Ring(device, buffers=buffers, buffer_bytes=64 << 10, piece=8 << 10)
    ring.run(jobs, threads=threads)
    for s, d in zip(sources, dsts, strict=True):
        assert d.tobytes() == s.tobytes()
    assert device.allocated <= buffers  # never more buffers than the ring has
    assert not device.in_flight
    assert not _staging_threads()


def test_a_ring_is_reused_by_later_runs_without_waiting_at_their_end(device):
    ring = Ring(device, buffers=2, buffer_bytes=32 << 10, piece=4 << 10)
    for seed in range(4):  # runs that return with copies in flight (sync=False)
        sources = _sources(seed)
        jobs, dsts = _jobs(device, sources)
        ring.run(jobs, threads=3, sync=False)
        device.synchronize()
        for s, d in zip(sources, dsts, strict=True):
            assert d.tobytes() == s.tobytes()
    assert device.allocated <= 2
    ring.release()
    assert not device.in_flight


def test_many_tiny_jobs_share_one_buffer(device):
    sources = [np.full(3, i % 256, np.uint8) for i in range(1000)]
    jobs, dsts = _jobs(device, sources)
    Ring(device, buffers=4, buffer_bytes=1 << 20, piece=64 << 10).run(jobs, threads=4)
    assert all(d.tobytes() == s.tobytes() for s, d in zip(sources, dsts, strict=True))
    assert device.allocated == 1


def test_plan_splits_large_jobs_and_aligns_segments():
    gens = plan([0, 10, 3000, 1, 600], capacity=1024, piece=256)
    assert all(g.used <= 1024 for g in gens)
    covered: dict[int, int] = {}
    for g in gens:
        for j, start, off, n in g.segments:
            assert off % _staging.ALIGN == 0 and n > 0
            assert covered.get(j, 0) == start  # each job's bytes in order, no gap
            covered[j] = start + n
        pieces = [p for t in g.tasks for p in t]
        assert sum(p[3] for p in pieces) == sum(s[3] for s in g.segments)
        assert all(sum(p[3] for p in t) <= 256 for t in g.tasks)
    assert covered == {1: 10, 2: 3000, 3: 1, 4: 600}


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("algo", ["crc32c", "xxh3", "sha256"])
def test_checksums_are_checked_on_the_way(device, algo, in_place):
    sources = _sources()
    done: list[int] = []
    checks = [
        Check(algo, _digest(algo, s.tobytes()), Mismatch, lambda i=i: done.append(i))
        for i, s in enumerate(sources)
    ]
    jobs, dsts = _jobs(device, sources, checks, in_place=in_place)
    Ring(device, buffers=3, buffer_bytes=16 << 10, piece=2 << 10).run(jobs, threads=4)
    assert done == list(range(len(sources)))  # each checked once, in order
    assert all(d.tobytes() == s.tobytes() for s, d in zip(sources, dsts, strict=True))


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("algo", ["crc32c", "xxh3", "sha256"])
@pytest.mark.parametrize("threads", [1, 4])
def test_a_mismatch_in_the_middle_raises_and_leaves_nothing_running(
    device, algo, threads, in_place
):
    sources = _sources()
    bad = 4  # 20 000 bytes, in the middle
    checks = [Check(algo, _digest(algo, s.tobytes()), Mismatch) for s in sources]
    want = _digest(algo, sources[bad].tobytes())
    checks[bad] = Check(
        algo, "0" * len(want), lambda got: Mismatch(f"tensor 'w4': expected 0..., got {got}")
    )
    jobs, _ = _jobs(device, sources, checks, in_place=in_place)
    ring = Ring(device, buffers=2, buffer_bytes=16 << 10, piece=2 << 10)
    with pytest.raises(Mismatch, match=f"tensor 'w4': expected 0..., got {want}"):
        ring.run(jobs, threads=threads)
    assert not _staging_threads()
    assert not device.in_flight  # the copies started were waited for
    # the ring works again afterwards
    jobs, dsts = _jobs(device, sources)
    ring.run(jobs, threads=threads)
    assert all(d.tobytes() == s.tobytes() for s, d in zip(sources, dsts, strict=True))


def test_a_reading_error_in_a_worker_is_raised(device):
    sources = _sources()
    jobs, _ = _jobs(device, sources)
    inner = jobs[8].read

    def broken(out, start):
        if start > 50_000:
            raise OSError(5, "input/output error")
        inner(out, start)

    jobs[8] = Job(jobs[8].nbytes, broken, jobs[8].dst)
    with pytest.raises(OSError, match="input/output error"):
        Ring(device, buffers=3, buffer_bytes=16 << 10, piece=2 << 10).run(jobs, threads=4)
    assert not _staging_threads()
    assert not device.in_flight


def test_crc32c_pieces_join_to_the_whole():
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    for cut in (0, 1, 7, 4096, 9_999, 10_000):
        a, b = data[:cut], data[cut:]
        assert crc32c_combine(crc32c.crc32c(a), crc32c.crc32c(b), len(b)) == crc32c.crc32c(data)


@pytest.mark.parametrize("kernel", ["compiled", "package"])
@pytest.mark.parametrize("in_place", [False, True])
def test_crc32c_jobs_through_the_kernel_and_the_package(device, monkeypatch, kernel, in_place):
    """The same run with the compiled crc32c kernel and with the ``crc32c`` package (what
    TENFOLD_PUREPYTHON and a missing build use): same bytes, same verdicts."""
    if kernel == "compiled" and _staging.crc_kernel() is None:
        pytest.skip("no compiled crc32c kernel (TENFOLD_PUREPYTHON or no build)")
    if kernel == "package":
        monkeypatch.setattr(_staging, "crc_kernel", lambda: None)
    sources = _sources()
    checks = [Check("crc32c", _digest("crc32c", s.tobytes()), Mismatch) for s in sources]
    bad = 8  # 150 001 bytes: several pieces, joined
    checks[bad] = Check("crc32c", "00000000", lambda got: Mismatch(f"w8 got {got}"))
    jobs, _ = _jobs(device, sources, checks, in_place=in_place)
    ring = Ring(device, buffers=3, buffer_bytes=16 << 10, piece=3 << 10)
    with pytest.raises(Mismatch, match=f"w8 got {_digest('crc32c', sources[bad].tobytes())}"):
        ring.run(jobs, threads=3)
    checks[bad] = Check("crc32c", _digest("crc32c", sources[bad].tobytes()), Mismatch)
    jobs, dsts = _jobs(device, sources, checks, in_place=in_place)
    ring.run(jobs, threads=3)
    assert all(d.tobytes() == s.tobytes() for s, d in zip(sources, dsts, strict=True))


def test_a_crc32c_job_in_place_is_copied_and_checked_in_one_pass(device):
    """With the compiled kernel, the pieces of a CRC-32C job whose bytes lie in place are
    copied from there by ``copy_crc32c`` (GIL released): its ``read`` is never called."""
    if _staging.crc_kernel() is None:
        pytest.skip("no compiled crc32c kernel (TENFOLD_PUREPYTHON or no build)")
    src = np.random.default_rng(9).integers(0, 256, 100_000, dtype=np.uint8)
    dst = np.zeros_like(src)

    def read(out, start):
        raise AssertionError("read called for a CRC-32C job with a source")

    check = Check("crc32c", _digest("crc32c", src.tobytes()), Mismatch)
    ring = Ring(device, buffers=2, buffer_bytes=32 << 10, piece=4 << 10)
    ring.run([Job(src.size, read, dst, check, src)], threads=2)
    assert dst.tobytes() == src.tobytes()


def test_lazy_destinations_are_made_during_the_run(device):
    """A callable ``dst`` is made on the calling thread just before its bytes' buffer is
    waited for: the device allocation of a later tensor overlaps the reading of earlier ones."""
    sources = [np.full(40_000, i + 1, np.uint8) for i in range(3)]  # a generation each
    events: list[str] = []
    made: list[np.ndarray] = []
    jobs = []
    for i, src in enumerate(sources):
        inner = array_reader(src)

        def read(out, start, i=i, inner=inner):
            events.append(f"read {i}")
            inner(out, start)

        def make(i=i):
            events.append(f"make {i}")
            made.append(np.zeros(40_000, np.uint8))
            return made[-1]

        jobs.append(Job(src.size, read, make))
    Ring(device, buffers=3, buffer_bytes=40_000, piece=8 << 10).run(jobs, threads=2)
    assert [d.tobytes() for d in made] == [s.tobytes() for s in sources]
    assert [j.dst for j in jobs] == made and not any(j.lazy for j in jobs)
    for i in (1, 2):  # every read of the previous tensor came before this one was made
        last_read = max(k for k, e in enumerate(events) if e == f"read {i - 1}")
        assert events.index(f"make {i}") > last_read


# -- how many threads -------------------------------------------------------------------------
def test_threads_come_from_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)
    assert parallel.threads() == len(__import__("os").sched_getaffinity(0))
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 2, 5})
    assert parallel.threads() == 3
    monkeypatch.setenv(parallel.THREADS_ENV, "2")
    assert parallel.threads() == 2
    monkeypatch.setenv(parallel.THREADS_ENV, "64")
    assert parallel.threads() == 3  # a cap, never more than the CPUs allowed
    for bad in ("0", "-1", "many"):
        monkeypatch.setenv(parallel.THREADS_ENV, bad)
        with pytest.raises(ValueError, match="TENFOLD_THREADS: expected a positive integer"):
            parallel.threads()


@pytest.mark.parametrize("cap", ["1", "3"])
def test_a_run_uses_no_more_threads_than_the_cap(device, monkeypatch, cap):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setenv(parallel.THREADS_ENV, cap)
    seen: set[str] = set()
    sources = _sources()
    jobs, dsts = _jobs(device, sources, seen=seen)
    Ring(device, buffers=4, buffer_bytes=16 << 10, piece=1 << 10).run(jobs)
    assert all(d.tobytes() == s.tobytes() for s, d in zip(sources, dsts, strict=True))
    if cap == "1":
        assert seen == {threading.current_thread().name}  # no worker thread at all
    else:
        assert len(seen) <= 3 and all(n.startswith("tenfold-staging") for n in seen)


# -- through tenfold.torch (FORCE_CPU: the CUDA path's logic on the CPU) ----------------------
BF16 = np.dtype(ml_dtypes.bfloat16)


def _model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "embed": rng.integers(0, 65535, (300, 257), dtype=np.uint16).view(BF16),
        "norm": rng.standard_normal(257).astype(np.float32),
        "empty": np.zeros((0, 4), np.float32),
        "scalar": np.array(2.5, np.float64),
        "ids": rng.integers(-5, 5, (7, 3), dtype=np.int64),
        "mask": rng.integers(0, 2, 33).astype(bool),
        **{f"layer{i}.w": rng.standard_normal((64, 96)).astype(np.float16) for i in range(12)},
    }


def _write(path, fmt):
    model = _model()
    if fmt == "zt":
        ztensor.save(path, model, checksum="crc32c")
    elif fmt == "zt-sha256":
        ztensor.save(path, model, checksum="sha256")
    elif fmt == "v2":
        ztensor.save(path, model, generation=2)
    elif fmt == "zt-zstd":
        ztensor.save(path, model, encoding="zstd", checksum="crc32c")
    else:
        tenfold.save(path, model)
    return model


@pytest.fixture
def staged(monkeypatch):
    from tenfold.interop import _device

    monkeypatch.setattr(_device, "FORCE_CPU", True)
    monkeypatch.setattr(_staging, "BUFFERS", 3)
    monkeypatch.setattr(_staging, "BUFFER_BYTES", 64 << 10)  # several generations
    monkeypatch.setattr(_staging, "PIECE", 8 << 10)
    allocs: list[int] = []
    alloc = _device.TorchBackend.alloc
    monkeypatch.setattr(
        _device.TorchBackend, "alloc", lambda self, n: (allocs.append(n), alloc(self, n))[1]
    )
    return allocs


def _same_bits(t, a):
    assert tuple(t.shape) == a.shape
    assert t.reshape(-1).view(torch.uint8).numpy().tobytes() == np.ascontiguousarray(a).tobytes()


FORMATS = ["safetensors", "zt", "zt-sha256", "v2", "zt-zstd"]
SUFFIX = {"safetensors": ".safetensors"}


@needs_torch
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("read", ["map", "pread"])
def test_load_file_through_the_ring(tmp_path, staged, monkeypatch, fmt, read):
    import tenfold.torch
    from tenfold.interop import _device

    monkeypatch.setattr(_device, "READ", read)
    path = tmp_path / f"m{SUFFIX.get(fmt, '.zt')}"
    model = _write(path, fmt)
    got = tenfold.torch.load_file(path, device="cpu")
    with tenfold.open(path) as r:
        assert list(got) == list(r.keys())
    for n, a in model.items():
        _same_bits(got[n], a)
    assert len(staged) <= 3  # the ring's buffers, not one per tensor
    # every tensor is its own memory, none a view of the file or of another tensor
    ptrs = [t.untyped_storage().data_ptr() for t in got.values() if t.numel()]
    assert len(set(ptrs)) == len(ptrs)
    got["embed"].zero_()
    assert tenfold.torch.load_file(path, device="cpu")["embed"].count_nonzero() > 0


@needs_torch
@pytest.mark.parametrize("fmt", FORMATS)
def test_safe_open_get_tensor_and_slices_through_the_ring(tmp_path, staged, fmt):
    import tenfold.torch

    path = tmp_path / f"m{SUFFIX.get(fmt, '.zt')}"
    model = _write(path, fmt)
    with tenfold.torch.safe_open(path, device="cpu") as f:
        for n in f.keys():
            _same_bits(f.get_tensor(n), model[n])
        part = f.get_slice("embed")[::3, 5:-7]  # not contiguous in the file: read, then staged
        _same_bits(part, np.ascontiguousarray(model["embed"][::3, 5:-7]))
        with pytest.raises(KeyError, match="nope"):
            f.get_tensor("nope")
    assert len(staged) <= 3


def _corrupt(path, name):
    """Flip one byte in the middle of tensor ``name``'s stored bytes."""
    with tenfold.open(path) as r:
        if hasattr(r, "_plans") and name in getattr(r, "_plans", {}):
            off, length = r._plans[name][:2]
        else:
            info = r.info(name)
            off, length = info.offset, info.size
    with open(path, "r+b") as fh:
        fh.seek(off + length // 2)
        b = fh.read(1)
        fh.seek(off + length // 2)
        fh.write(bytes([b[0] ^ 0x40]))


@needs_torch
@pytest.mark.parametrize("fmt", ["zt", "zt-sha256", "v2"])
def test_a_corrupt_tensor_raises_what_a_cpu_read_raises(tmp_path, staged, monkeypatch, fmt):
    import tenfold.torch
    from tenfold.interop import _device

    path = tmp_path / "m.zt"
    _write(path, fmt)
    _corrupt(path, "layer5.w")
    monkeypatch.setattr(_device, "FORCE_CPU", False)
    with pytest.raises(IntegrityError) as cpu:
        tenfold.torch.load_file(path)  # the reader's check, on the CPU path
    monkeypatch.setattr(_device, "FORCE_CPU", True)
    with pytest.raises(IntegrityError) as ring:
        tenfold.torch.load_file(path, device="cpu")
    assert str(ring.value) == str(cpu.value) and "layer5.w" in str(ring.value)
    assert type(ring.value) is type(cpu.value)
    assert not _staging_threads()
    with tenfold.torch.safe_open(path, device="cpu") as f:
        _same_bits(f.get_tensor("layer4.w"), _model()["layer4.w"])
        with pytest.raises(IntegrityError, match="layer5.w"):
            f.get_tensor("layer5.w")
    # verify_checksums=False delivers the bytes as stored
    state = tenfold.torch.load_file(path, device="cpu", verify_checksums=False)
    assert state["layer5.w"].shape == (64, 96)


@needs_torch
def test_a_tensor_checked_on_the_way_is_marked_verified(tmp_path, staged):
    from tenfold.interop.frameworks import safe_open

    path = tmp_path / "m.zt"
    _write(path, "zt")
    with safe_open(path, framework="pt", device="cpu") as f:
        f.get_tensor("norm")
        assert "norm" in f._t.reader._verified


@pytest.mark.parametrize("in_place", [False, True])
def test_a_device_copy_never_waits_for_an_in_order_hash(device, monkeypatch, in_place):
    """A large tensor's XXH3 is computed in order, piece after piece, by one worker; its
    pieces are hashed after the worker's task is counted done, so a generation's device copy
    starts without waiting for them. Here the hash of the first piece waits until a device
    copy has been started: before, the first task held its generation until that hash was
    done, the copy never started and the hash waited in vain."""
    from tenfold.interop import _staging as st

    copied = threading.Event()
    waited: list[bool] = []

    class Gated:
        def __init__(self) -> None:
            self.h = xxhash.xxh3_64()

        def update(self, data) -> None:
            if not waited:
                waited.append(copied.wait(5))
            self.h.update(data)

        def hexdigest(self) -> str:
            return self.h.hexdigest()

    monkeypatch.setattr(st, "xxh3_hasher", Gated)
    real_copy = device.copy

    def copy(*args):
        copied.set()
        real_copy(*args)

    monkeypatch.setattr(device, "copy", copy)
    src = np.random.default_rng(9).integers(0, 256, 200_000, dtype=np.uint8)
    check = Check("xxh3", _digest("xxh3", src), lambda got: Mismatch(got))
    jobs, dsts = _jobs(device, [src], [check], in_place=in_place)
    Ring(device, buffers=3, buffer_bytes=64 << 10, piece=16 << 10).run(jobs, threads=2)
    assert waited == [True]
    assert dsts[0].tobytes() == src.tobytes()

"""Byte ranges streamed to a device through a ring of reused host buffers, checked on the way.

The engine behind ``device="cuda"`` in :mod:`tenfold.torch` (:mod:`._device` adapts it to
PyTorch and to the readers). It knows no framework and no format: what it needs of the device
comes in a *backend* with five operations, so that the CPU tests drive it with NumPy buffers
and a deliberately late copy:

* ``alloc(nbytes) -> (u8, handle)``: one host buffer (pinned, for CUDA) as a writable NumPy
  ``uint8`` array, and the object ``copy`` is given for it;
* ``copy(dst, dst_start, handle, start, nbytes)``: start copying ``nbytes`` of the buffer at
  ``start`` into the destination ``dst`` at ``dst_start`` (asynchronously, for CUDA);
* ``record() -> event``: mark the copies started so far; ``wait(event)``: block until they are
  done; ``synchronize()``: block until every copy is done.

A run delivers a list of :class:`Job` (``nbytes`` to read from a source into a destination,
and optionally a :class:`Check`). It is planned in *generations*: each fills one buffer of the
ring with consecutive pieces of the jobs, every segment starting at a multiple of
:data:`ALIGN`; a job larger than a buffer is split over several generations and small jobs
share one. Worker threads fill a generation's buffer in tasks of about ``piece`` bytes (the
copy from the source, then the checksum of the bytes just copied, while they are in the CPU's
cache); the calling thread starts the device copies of a generation once it is full, and hands
its buffer back to the workers only after those copies are done (its event) and every checksum
reading it has finished. So at most ``buffers`` host buffers exist, none is allocated per job,
and reading, checking and copying to the device overlap.

CRC-32C is computed piece by piece in parallel and the pieces joined with
:func:`crc32c_combine`. With the compiled ``crc32c`` kernel, a piece whose bytes are readable
in place (:attr:`Job.source`) is copied into the buffer and checked in one pass with the GIL
released (``copy_crc32c``); other pieces are read, then checked every :data:`STEP` bytes while
those are in the CPU's cache (by the ``crc32c`` package when the kernels are not compiled, or
under ``TENFOLD_PUREPYTHON``). xxh3-64 and SHA-256 need the bytes in order, so a job's pieces are
hashed in order by whichever worker finished the piece that comes next (no worker waits). A
job whose bytes are also readable in place (:attr:`Job.source`, e.g. a memory map) has them
hashed there, so its buffers are not held while one thread works through a large tensor.

An error in a worker, or a checksum that does not match (checked as soon as a job's last byte
is hashed), stops the run: no new piece starts, the workers finish the piece they are in, the
copies already started are waited for, and the error is raised (a mismatch raises what the
job's :class:`Check` builds, an :class:`~tenfold.errors.IntegrityError` naming the tensor).
No thread outlives a run.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ..core import parallel
from ..core.bounds import align_up
from ..core.checksums import crc32c, crc32c_combine, crc_kernel, xxh3_hasher

__all__ = ["Backend", "Check", "Job", "Ring", "crc32c_combine", "ALIGN", "BUFFERS"]

#: Host buffers in a ring, and the size of each (a run needing less allocates less).
BUFFERS = 4
BUFFER_BYTES = 64 << 20
#: Bytes one worker task reads (several small segments are one task). 16 MiB measured best on
#: a 16-core H200 node (0.088 s for 3.1 GB against 0.104 s with 4 MiB pieces and 0.192 s with
#: 1 MiB: docs/gpu_runs/2026-11-26-run3.txt).
PIECE = 16 << 20
#: CRC-32C is computed every STEP bytes of a piece, while they are in the CPU's cache.
STEP = 1 << 20
#: Segment starts in a buffer are multiples of this (DMA from aligned host addresses).
ALIGN = 512
#: Smallest buffer a ring allocates (a single small tensor allocates no more).
MIN_BUFFER = 1 << 20

#: Checksum algorithms a :class:`Check` may name.
ALGORITHMS = ("crc32c", "xxh3", "sha256")


class Backend(Protocol):
    def alloc(self, nbytes: int) -> tuple[np.ndarray, Any]: ...
    def copy(self, dst: Any, dst_start: int, handle: Any, start: int, nbytes: int) -> None: ...
    def record(self) -> Any: ...
    def wait(self, event: Any) -> None: ...
    def synchronize(self) -> None: ...


class Check:
    """What a job's bytes must hash to: ``algo`` (one of :data:`ALGORITHMS`), ``expected``
    (lowercase hex), ``error(got_hex)`` building the exception to raise when they differ, and
    ``done()`` called (on the calling thread) once they are found to match."""

    __slots__ = ("algo", "expected", "error", "done")

    def __init__(
        self,
        algo: str,
        expected: str,
        error: Callable[[str], BaseException],
        done: Callable[[], None] | None = None,
    ) -> None:
        if algo not in ALGORITHMS:
            raise ValueError(f"staging: checksum {algo!r}: expected one of {ALGORITHMS}")
        self.algo = algo
        self.expected = expected.lower()
        self.error = error
        self.done = done


class Job:
    """``nbytes`` to deliver to ``dst`` (whatever the backend's ``copy`` takes), read by
    ``read(out, start)``, which fills the ``uint8`` array ``out`` with the bytes at ``start``
    of the job (it is called from worker threads, for disjoint ranges). ``source``, when
    given, is the same bytes as a ``uint8`` array: an in-order checksum reads them there, and
    the pieces of a CRC-32C job are copied from there and checked in one pass (not by
    ``read``) when the compiled kernel is loaded. ``dst`` may be a callable making the
    destination (``lazy``): the run calls it on the calling thread just before waiting for
    the first buffer holding the job's bytes, so that allocating on the device overlaps the
    workers' reading; :attr:`dst` is the destination afterwards."""

    __slots__ = ("nbytes", "read", "dst", "check", "source", "lazy")

    def __init__(
        self,
        nbytes: int,
        read: Callable[[np.ndarray, int], None],
        dst: Any,
        check: Check | None = None,
        source: np.ndarray | None = None,
    ) -> None:
        self.nbytes = int(nbytes)
        self.read = read
        self.dst = dst
        self.check = check
        self.source = source
        self.lazy = callable(dst)


def array_reader(src: np.ndarray) -> Callable[[np.ndarray, int], None]:
    """A :attr:`Job.read` copying from the bytes of the contiguous array ``src``."""
    flat = src.reshape(-1).view(np.uint8)

    def read(out: np.ndarray, start: int) -> None:
        out[...] = flat[start : start + out.size]

    return read


# -- planning ---------------------------------------------------------------------------------
class _Gen:
    """One buffer's worth: ``segments`` (job, start in job, start in buffer, nbytes), the
    ``tasks`` workers run (lists of such pieces), and ``used`` bytes of the buffer."""

    __slots__ = ("segments", "tasks", "used")

    def __init__(self, segments: list[tuple[int, int, int, int]], piece: int) -> None:
        self.segments = segments
        self.used = segments[-1][2] + segments[-1][3]
        tasks: list[list[tuple[int, int, int, int]]] = []
        cur: list[tuple[int, int, int, int]] = []
        size = 0
        for j, start, off, n in segments:
            pos = 0
            while pos < n:
                take = min(piece, n - pos)
                if cur and size + take > piece:
                    tasks.append(cur)
                    cur, size = [], 0
                cur.append((j, start + pos, off + pos, take))
                size += take
                pos += take
        if cur:
            tasks.append(cur)
        self.tasks = tasks


def plan(sizes: Sequence[int], capacity: int, piece: int = PIECE) -> list[_Gen]:
    """Generations for jobs of ``sizes`` bytes through buffers of ``capacity`` bytes."""
    if capacity < ALIGN:
        raise ValueError(f"staging: buffer of {capacity} bytes; expected at least {ALIGN}")
    gens: list[_Gen] = []
    segs: list[tuple[int, int, int, int]] = []
    pos = 0
    for j, n in enumerate(sizes):
        start = 0
        while start < n:
            if pos >= capacity:
                gens.append(_Gen(segs, piece))
                segs, pos = [], 0
            take = min(n - start, capacity - pos)
            segs.append((j, start, pos, take))
            start += take
            pos = align_up(pos + take, ALIGN)
    if segs:
        gens.append(_Gen(segs, piece))
    return gens


# -- the ring ---------------------------------------------------------------------------------
class Ring:
    """``buffers`` (at least 2) host buffers of up to ``buffer_bytes`` each, allocated by
    ``backend`` on first use and kept for later runs, and :meth:`run` (one at a time)."""

    def __init__(
        self,
        backend: Backend,
        buffers: int = BUFFERS,
        buffer_bytes: int = BUFFER_BYTES,
        piece: int = PIECE,
    ) -> None:
        if buffers < 2:
            raise ValueError(f"staging: {buffers} buffers; expected at least 2")
        self.backend = backend
        self.buffer_bytes = max(ALIGN, int(buffer_bytes))
        self.piece = max(1, int(piece))
        self._bufs: list[tuple[np.ndarray, Any] | None] = [None] * buffers
        self._pending: list[Any] = [None] * buffers  # the last copies out of each buffer
        self._next = 0  # the buffer the next run starts with
        self._lock = threading.Lock()
        self.allocations = 0  # buffers allocated so far (the tests read it)

    @property
    def buffers(self) -> int:
        return len(self._bufs)

    def _buffer(self, slot: int, need: int) -> tuple[np.ndarray, Any]:
        ev = self._pending[slot]
        if ev is not None:
            self.backend.wait(ev)
            self._pending[slot] = None
        got = self._bufs[slot]
        if got is None or got[0].size < need:
            self._bufs[slot] = None  # the old one goes before the new one comes
            size = min(self.buffer_bytes, max(need, MIN_BUFFER))
            u8, handle = self.backend.alloc(size)
            if u8.dtype != np.uint8 or u8.size < size or not u8.flags.writeable:
                raise ValueError(f"staging: alloc({size}) gave no writable uint8 buffer")
            got = self._bufs[slot] = (u8, handle)
            self.allocations += 1
        return got

    def run(self, jobs: Sequence[Job], *, threads: int | None = None, sync: bool = True) -> None:
        """Deliver ``jobs``, checking their checksums; with ``sync`` wait for the last copy
        (without, a later run or :meth:`release` waits before reusing a buffer)."""
        with self._lock:
            _Run(self, jobs, parallel.threads() if threads is None else threads).go(sync)

    def release(self) -> None:
        """Wait for the copies in flight and drop the buffers."""
        with self._lock:
            if any(ev is not None for ev in self._pending):
                self.backend.synchronize()
            self._pending = [None] * len(self._bufs)
            self._bufs = [None] * len(self._bufs)


class _Ordered:
    """The in-order hash of one job: pieces read out of order wait in ``ready``."""

    __slots__ = ("lock", "hash", "next", "ready", "busy")

    def __init__(self, algo: str) -> None:
        self.lock = threading.Lock()
        # tenfold's XXH3 kernel where compiled (the GIL released: tensors hashed side by side)
        self.hash: Any = xxh3_hasher() if algo == "xxh3" else hashlib.sha256()
        self.next = 0
        self.ready: dict[int, tuple[np.ndarray, int | None]] = {}
        self.busy = False


class _Run:
    def __init__(self, ring: Ring, jobs: Sequence[Job], threads: int) -> None:
        self.ring = ring
        self.jobs = jobs
        self.gens = plan([j.nbytes for j in jobs], ring.buffer_bytes, ring.piece)
        window = sum(len(g.tasks) for g in self.gens[: ring.buffers - 1])
        self.workers = max(1, min(int(threads), window))
        self.cv = threading.Condition()
        self.error: BaseException | None = None
        self.stop = False
        self.reads = [len(g.tasks) for g in self.gens]  # tasks not yet finished, per generation
        # in-order pieces not yet hashed: those hashed in a buffer, per generation, and all
        self.hashes = [0] * len(self.gens)
        self.unhashed = 0
        self.bufs: list[np.ndarray | None] = [None] * len(self.gens)
        self.crc: dict[int, list[tuple[int, int, int]]] = {}  # job -> (start, nbytes, crc)
        self.ordered: dict[int, _Ordered] = {}
        for i, job in enumerate(jobs):
            if job.check is None or not job.nbytes:
                continue
            if job.check.algo == "crc32c":
                self.crc[i] = []
            else:
                self.ordered[i] = _Ordered(job.check.algo)
        for g, gen in enumerate(self.gens):
            for task in gen.tasks:
                for p in task:
                    if p[0] in self.ordered:
                        self.unhashed += 1
                        self.hashes[g] += jobs[p[0]].source is None
        self.unchecked = [i for i, job in enumerate(jobs) if job.check is not None]
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        kernel = crc_kernel()
        self.copy_crc = None if kernel is None else kernel.copy_crc32c
        self.crc_step = _one_thread_crc if kernel is None else kernel.crc32c
        self.combine = crc32c_combine if kernel is None else kernel.crc32c_combine

    # -- the calling thread
    def go(self, sync: bool) -> None:
        ring, gens, backend = self.ring, self.gens, self.ring.backend
        k = ring.buffers
        base = ring._next
        ok = False
        if self.workers > 1:
            self.pool = concurrent.futures.ThreadPoolExecutor(
                self.workers, thread_name_prefix="tenfold-staging"
            )
        try:
            self._check_ready(final=False)  # empty jobs
            for h in range(min(k - 1, len(gens))):
                self._submit(h, (base + h) % k)
            for g, gen in enumerate(gens):
                for j, *_ in gen.segments:  # destinations made now, while the workers read
                    job = self.jobs[j]
                    if job.lazy:
                        job.dst, job.lazy = job.dst(), False
                self._wait(lambda g=g: self.reads[g] == 0)  # type: ignore[misc]
                slot = (base + g) % k
                buf = ring._bufs[slot]
                assert buf is not None
                handle = buf[1]
                for j, start, off, n in gen.segments:
                    backend.copy(self.jobs[j].dst, start, handle, off, n)
                ring._pending[slot] = backend.record()
                self._check_ready(final=False)
                h = g + k - 1
                if h < len(gens):
                    self._submit(h, (base + h) % k)
            self._wait(lambda: not self.unhashed)
            self._check_ready(final=True)
            ok = True
        finally:
            self.stop = not ok
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
            ring._next = (base + len(gens)) % k
            if sync or not ok:
                backend.synchronize()
                ring._pending = [None] * k

    def _submit(self, h: int, slot: int) -> None:
        k = self.ring.buffers
        if h >= k:  # in-order hashes still reading the buffer's previous generation
            self._wait(lambda: self.hashes[h - k] == 0)
        self.bufs[h] = self.ring._buffer(slot, self.gens[h].used)[0]
        for task in self.gens[h].tasks:
            if self.pool is None:
                self._task(h, task)
            else:
                self.pool.submit(self._task, h, task)

    def _wait(self, done: Callable[[], bool]) -> None:
        with self.cv:
            while self.error is None and not done():
                self.cv.wait()
            if self.error is not None:
                raise self.error

    def _check_ready(self, final: bool) -> None:
        """Check the jobs whose every byte is hashed, in order, up to the first that is not."""
        while self.unchecked:
            i = self.unchecked[0]
            job = self.jobs[i]
            assert job.check is not None
            got = self._digest(i)
            if got is None:
                if final:  # every piece was hashed: a bug, never a silent pass
                    raise RuntimeError(f"staging: job {i}: checksum incomplete at the end")
                return
            self.unchecked.pop(0)
            if got != job.check.expected:
                raise job.check.error(got)
            if job.check.done is not None:
                job.check.done()

    def _digest(self, i: int) -> str | None:
        job = self.jobs[i]
        assert job.check is not None
        algo = job.check.algo
        if not job.nbytes:
            if algo == "crc32c":
                return "00000000"
            return _Ordered(algo).hash.hexdigest()  # type: ignore[no-any-return]
        if algo == "crc32c":
            parts = self.crc[i]
            if sum(p[1] for p in parts) != job.nbytes:
                return None
            parts.sort()
            value = parts[0][2]
            combine = self.combine
            for _, n, crc in parts[1:]:
                value = combine(value, crc, n)
            return f"{value:08x}"
        o = self.ordered[i]
        with o.lock:  # the last piece is hashed before ``next`` reaches the end
            if o.next != job.nbytes:
                return None
        return o.hash.hexdigest()  # type: ignore[no-any-return]

    # -- the workers
    def _fail(self, e: BaseException) -> None:
        with self.cv:
            if self.error is None:
                self.error = e
            self.cv.notify_all()

    def _task(self, h: int, pieces: list[tuple[int, int, int, int]]) -> None:
        # pieces of in-order hashes, hashed once the task's copies are counted done: the
        # generation's device copy never waits for a hash (a large tensor's pieces are hashed
        # in order by one worker, which may take longer than the copies of several buffers)
        later: list[tuple[int, int, np.ndarray, int | None]] = []
        try:
            self._copy_pieces(h, pieces, later)
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            self._fail(e)
        finally:
            with self.cv:
                self.reads[h] -= 1
                self.cv.notify_all()
        try:
            for j, start, view, hh in later:
                if self.error is not None:
                    return  # the run is failing: it waits for no hash
                self._in_order(j, start, view, hh)
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            self._fail(e)

    def _copy_pieces(
        self,
        h: int,
        pieces: list[tuple[int, int, int, int]],
        later: list[tuple[int, int, np.ndarray, int | None]],
    ) -> None:
        buf = self.bufs[h]
        assert buf is not None
        for j, start, off, n in pieces:
            if self.stop or self.error is not None:
                return
            job = self.jobs[j]
            out = buf[off : off + n]
            parts = self.crc.get(j)
            if parts is not None:
                if job.source is not None and self.copy_crc is not None:
                    # one pass over the bytes, the GIL released; the host buffer is read
                    # by the device's copy, not by the CPU: stored past the caches
                    value = self.copy_crc(job.source[start : start + n], out, 0, True)
                else:
                    value, pos = 0, 0
                    while pos < n:
                        step = out[pos : pos + STEP]
                        job.read(step, start + pos)
                        value = self.crc_step(step, value)
                        pos += step.size
                parts.append((start, n, value))
                continue
            if j not in self.ordered and job.source is not None and self.copy_crc is not None:
                self.copy_crc(job.source[start : start + n], out, 0, True)  # as above
                continue
            job.read(out, start)
            if j in self.ordered:
                if job.source is None:
                    later.append((j, start, out, h))
                else:  # hashed where it lies: the buffer is free once copied
                    later.append((j, start, job.source[start : start + n], None))

    def _in_order(self, j: int, start: int, out: np.ndarray, h: int | None) -> None:
        o = self.ordered[j]
        with o.lock:
            o.ready[start] = (out, h)
            if o.busy:
                return  # the worker hashing this job takes it
            o.busy = True
        while True:
            with o.lock:
                item = o.ready.pop(o.next, None)
                if item is None:
                    o.busy = False
                    return
            view, g = item
            o.hash.update(view)
            with o.lock:
                o.next += view.size
            with self.cv:
                self.unhashed -= 1
                if g is not None:
                    self.hashes[g] -= 1
                self.cv.notify_all()


def _one_thread_crc(data: np.ndarray, value: int) -> int:
    """:func:`tenfold.core.checksums.crc32c` on this worker's thread (the ring is parallel)."""
    return crc32c(data, value, threads=1)

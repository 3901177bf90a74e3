"""Writing a large raw part while a second thread computes its XXH3-64 digest.

:class:`PartHasher` is one long-lived worker thread per writer: the writing thread hands it
the part's blocks in order (a little ahead of writing them, so that the write copies a block
the hasher has just brought into the shared cache) and asks for the digest at the end of the
part. The XXH3-64 (``core.checksums``: tenfold's kernel, or the ``xxhash`` package) releases
the GIL while it hashes and ``os.pwrite`` while it writes, so with a free core the digest costs
the writer almost no time.

:func:`pwrite_all` writes a buffer at an offset straight from the caller's memory (no copy
into a Python buffer), repeating short writes.
"""

from __future__ import annotations

import errno
import os
import queue
import threading

from ...core.checksums import xxh3_hasher

__all__ = ["PartHasher", "pwrite_all"]

#: marks the end of a part in the job queue
_END = object()


def _hash_jobs(jobs: queue.SimpleQueue[object], out: queue.SimpleQueue[object]) -> None:
    """The worker: hash the blocks it is given; at each end mark hand over the digest (or the
    error that stopped the hashing of that part); stop at None."""
    h = xxh3_hasher()
    failed: BaseException | None = None
    while (job := jobs.get()) is not None:
        if job is _END:
            out.put(h.intdigest() if failed is None else failed)
            h.reset()
            failed = None
        elif failed is None:
            try:
                h.update(job)  # type: ignore[arg-type]
            except BaseException as exc:  # noqa: BLE001 - handed to the writing thread
                failed = exc


class PartHasher:
    """XXH3-64 of a sequence of blocks, computed on a worker thread (see the module doc).

    ``update`` for each block of a part in order, then ``digest()`` (waits for the worker,
    returns the digest and starts the next part). ``close()`` stops the thread. The blocks must
    stay unchanged until ``digest()`` returns.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._out: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.pid = os.getpid()
        # The thread holds only the two queues, never the writer, so a dropped writer is
        # still collected (and its finalizer closes this).
        self._thread = threading.Thread(
            target=_hash_jobs, args=(self._jobs, self._out), name="tenfold-zt-xxh3", daemon=True
        )
        self._thread.start()

    @property
    def alive(self) -> bool:
        """True in the process that started the thread while it runs (not in a forked child)."""
        return self.pid == os.getpid() and self._thread.is_alive()

    def update(self, block: memoryview) -> None:
        self._jobs.put(block)

    def digest(self) -> int:
        """The digest of the blocks given since the last call (raises the worker's error)."""
        self._jobs.put(_END)
        got = self._out.get()
        if isinstance(got, BaseException):
            raise got
        assert isinstance(got, int)
        return got

    def discard(self) -> None:
        """End the current part without its digest (after a failed write)."""
        self._jobs.put(_END)
        self._out.get()

    def close(self) -> None:
        if self._thread.is_alive() and self.pid == os.getpid():
            self._jobs.put(None)
            self._thread.join()


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of ``fd`` (repeating short writes)."""
    while data.nbytes:
        n = os.pwrite(fd, data, offset)
        if n <= 0:  # a regular file does not do this; never loop on it
            raise OSError(errno.EIO, "write made no progress", f"fd {fd}")
        data = data[n:]
        offset += n

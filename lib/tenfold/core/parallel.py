"""Thread pools that survive ``fork``: one place that owns every worker thread tenfold starts.

Threads do not cross ``fork``: a child inherits a ``ThreadPoolExecutor`` object whose workers do
not exist there, and whose next task never runs (the PyTorch ``DataLoader`` worker pattern hangs
on it). So tenfold never keeps an executor in a module global of its own:

* :func:`shared` is a process-wide pool created lazily on first use and forgotten in a forked
  child (``os.register_at_fork``), which creates its own on its first use;
* :func:`scoped` is a pool for one operation (a ``with`` block), shut down at its end;
* :class:`Pool` is a pool owned by one object (a reader or writer): created lazily, shut down by
  :meth:`Pool.close`, recreated in a forked child.

How many threads an operation that scales with cores starts comes from :func:`threads`: the
CPUs this process may run on, capped by the environment variable ``TENFOLD_THREADS``.

>>> with scoped(2, "demo") as pool:
...     sorted(pool.map(abs, [-2, 1]))
[1, 2]
>>> shared().submit(sum, [1, 2]).result()
3
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

_T = TypeVar("_T")

__all__ = [
    "shared",
    "scoped",
    "pool_for",
    "Inline",
    "Pool",
    "submit",
    "each",
    "threads",
    "THREADS_ENV",
]

_lock = threading.Lock()
_shared: concurrent.futures.ThreadPoolExecutor | None = None
_shared_pid = -1
_SHARED_MIN = 2  # the shared pool never has fewer workers (two tasks may wait on each other)

#: The environment variable that caps :func:`threads` (a positive integer).
THREADS_ENV = "TENFOLD_THREADS"


def threads() -> int:
    """Worker threads for one operation that scales with cores: the CPUs this process may run
    on (``os.sched_getaffinity(0)``, so a ``taskset`` or container CPU set counts, not the
    machine's cores; ``os.cpu_count()`` where there is no affinity), capped by
    ``TENFOLD_THREADS`` when that is set. Read at each call.

    >>> threads() >= 1
    True
    """
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    cap = os.environ.get(THREADS_ENV)
    if cap is not None and cap.strip():
        try:
            limit = int(cap)
        except ValueError:
            limit = 0
        if limit < 1:
            raise ValueError(f"{THREADS_ENV}: expected a positive integer, got {cap!r}")
        n = min(n, limit)
    return max(1, n)


def _after_fork_in_child() -> None:
    global _shared, _lock
    # The parent's workers are gone and its lock may have been held mid-fork: start afresh.
    _lock = threading.Lock()
    _shared = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def shared() -> concurrent.futures.ThreadPoolExecutor:
    """The process-wide pool (``tenfold-shared-*`` threads): :func:`threads` workers, at
    least 2, counted when it is created."""
    global _shared, _shared_pid
    pid = os.getpid()
    pool = _shared
    if pool is not None and _shared_pid == pid:
        return pool
    with _lock:
        if _shared is None or _shared_pid != pid:  # first use, or a fork we were not told of
            _shared = concurrent.futures.ThreadPoolExecutor(
                max(_SHARED_MIN, threads()), thread_name_prefix="tenfold-shared"
            )
            _shared_pid = pid
        return _shared


def submit(fn: Any, *args: Any, **kw: Any) -> concurrent.futures.Future[Any]:
    """Run ``fn(*args, **kw)`` on the process-wide pool."""
    return shared().submit(fn, *args, **kw)


def each(fn: Callable[[Any], _T], items: Iterable[Any], workers: int | None = None) -> list[_T]:
    """``[fn(x) for x in items]`` on ``workers`` threads (default :func:`threads`): this
    thread and ``workers - 1`` tasks of the :func:`shared` pool take the items in order, so no
    thread is started per call and this thread works too. Items are taken in the order given
    (put the largest first). The first exception (in item order; an interrupt such as
    ``KeyboardInterrupt`` before any) is raised once the items under way have finished; after
    one, no new item is started. Safe to call from a task of
    the shared pool: helpers that have not started when this thread runs out of items are
    cancelled, not waited for.

    >>> each(abs, [-3, 2, -1], workers=2)
    [3, 2, 1]
    """
    todo = list(items)
    n = len(todo)
    w = min(threads() if workers is None else max(1, workers), n)
    if w < 2:
        return [fn(x) for x in todo]
    out: list[Any] = [None] * n
    errors: dict[int, BaseException] = {}
    taken = iter(range(n))
    lock = threading.Lock()

    def drain() -> None:
        while not errors:
            with lock:
                k = next(taken, None)
            if k is None:
                return
            try:
                out[k] = fn(todo[k])
            except BaseException as exc:  # re-raised below, on the calling thread
                errors[k] = exc

    helpers: list[concurrent.futures.Future[None]] = []
    try:
        for _ in range(w - 1):
            helpers.append(shared().submit(drain))
        drain()
    finally:
        errors.setdefault(n, _Stop())  # helpers stop after their current item
        # a helper not started is cancelled (never waited for: its worker may be waiting on
        # this very call); one that started is waited for, even if this thread is interrupted
        started = [fut for fut in helpers if not fut.cancel()]
        concurrent.futures.wait(started)
    errors.pop(n)
    if errors:  # an interrupt (KeyboardInterrupt, SystemExit) before any item's error
        stop = [e for _, e in sorted(errors.items()) if not isinstance(e, Exception)]
        raise stop[0] if stop else errors[min(errors)]
    return out


class _Stop(BaseException):
    """Marks ``each``'s items as finished for its helpers (never raised)."""


@contextlib.contextmanager
def scoped(workers: int, name: str = "tenfold") -> Iterator[concurrent.futures.Executor]:
    """A pool of ``workers`` (at least 1) threads for one ``with`` block, shut down at its end."""
    pool = concurrent.futures.ThreadPoolExecutor(max(1, workers), thread_name_prefix=name)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class Inline(concurrent.futures.Executor):
    """An executor that runs each task in the caller's thread when it is submitted (what an
    operation given one worker uses, so it keeps one code path); an exception goes into the
    returned future, as with a pool.

    >>> Inline().submit(divmod, 7, 2).result()
    (3, 1)
    """

    def submit(self, fn: Any, /, *args: Any, **kw: Any) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            fut.set_result(fn(*args, **kw))
        except Exception as e:
            fut.set_exception(e)
        return fut


@contextlib.contextmanager
def pool_for(workers: int, name: str = "tenfold") -> Iterator[concurrent.futures.Executor]:
    """:func:`scoped` for two or more ``workers``; :class:`Inline` (no thread) for one."""
    if workers > 1:
        with scoped(workers, name) as pool:
            yield pool
    else:
        yield Inline()


class Pool:
    """A pool owned by one object: created on first :meth:`get`, shut down by :meth:`close`.

    In a forked child the parent's pool is dropped (its threads do not exist there) and a new
    one is created on the next :meth:`get`.
    """

    def __init__(self, workers: int, name: str = "tenfold") -> None:
        self.workers = max(1, int(workers))
        self.name = name
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pid = -1

    def get(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None or self._pid != os.getpid():
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.workers, thread_name_prefix=self.name
            )
            self._pid = os.getpid()
        return self._pool

    def submit(self, fn: Any, *args: Any, **kw: Any) -> concurrent.futures.Future[Any]:
        return self.get().submit(fn, *args, **kw)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=True)

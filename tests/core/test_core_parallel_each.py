"""parallel.each: this thread and tasks of the shared pool take items in order; results in
order; the first error in item order; safe from inside the shared pool; no thread started per
call."""

from __future__ import annotations

import os
import threading
import time

import pytest

from _child import wait_child
from tenfold.core import parallel


def test_results_come_back_in_item_order():
    def slow_first(x):
        if x == 0:
            time.sleep(0.05)
        return x * x

    assert parallel.each(slow_first, range(20), workers=3) == [x * x for x in range(20)]


def test_the_calling_thread_works_and_no_thread_is_started_per_call():
    pool = parallel.shared()
    for _ in range(3):  # the executor starts its workers on first submits
        parallel.each(abs, range(64), workers=pool._max_workers + 1)  # noqa: SLF001
    before = _shared_threads()
    for _ in range(5):
        seen: set[int | None] = set()
        gate = threading.Barrier(2, timeout=5)

        def record(x, seen=seen, gate=gate):
            seen.add(threading.get_ident())
            if x < 2:
                gate.wait()  # the first two items run at the same time, on two threads
            return x

        assert parallel.each(record, range(8), workers=2) == list(range(8))
        assert threading.get_ident() in seen
        assert len(seen) == 2
    assert _shared_threads() == before


def test_the_first_error_in_item_order_is_raised_and_later_items_are_not_started():
    started: list[int] = []

    def fail_at(x):
        started.append(x)
        if x in (3, 5):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 3"):
        parallel.each(fail_at, range(1000), workers=1)
    assert max(started) == 3
    started.clear()
    with pytest.raises(ValueError, match="item 3"):  # every lower item has started by then
        parallel.each(fail_at, range(1000), workers=2)
    assert max(started) < 100  # stopped soon after the error, not every item run


def test_an_error_reports_the_lowest_failing_item():
    release = threading.Event()

    def later_fails_first(x):
        if x == 0:
            release.wait(5)  # item 1 fails while item 0 is still running
            raise KeyError("zero")
        if x == 1:
            try:
                raise KeyError("one")
            finally:
                release.set()
        return x

    with pytest.raises(KeyError, match="zero"):
        parallel.each(later_fails_first, range(4), workers=2)


def test_called_from_every_worker_of_the_shared_pool_it_does_not_deadlock():
    pool = parallel.shared()
    width = pool._max_workers  # noqa: SLF001 (a test reads the pool's size)

    def outer(k):
        return sum(parallel.each(lambda x: x + k, range(50), workers=4))

    futures = [pool.submit(outer, k) for k in range(width * 2)]
    assert [f.result(timeout=30) for f in futures] == [
        sum(range(50)) + 50 * k for k in range(width * 2)
    ]


def _shared_threads() -> set[int | None]:
    return {t.ident for t in threading.enumerate() if t.name.startswith("tenfold-shared")}


def test_an_interrupt_wins_over_an_earlier_items_error():
    """A KeyboardInterrupt in a later item is raised, not lost behind an ordinary error of an
    earlier one."""
    gate = threading.Barrier(2, timeout=10)

    def fn(x):
        if x == 0:
            gate.wait()
            raise ValueError("item 0 failed")
        if x == 1:
            gate.wait()
            raise KeyboardInterrupt
        return x

    with pytest.raises(KeyboardInterrupt):
        parallel.each(fn, range(6), workers=2)


def test_a_helper_that_could_not_be_submitted_leaves_no_work_running(monkeypatch):
    """The pool refuses the second helper (as at interpreter shutdown): each() raises, and
    the helper already submitted stops instead of running the remaining items after it."""
    real = parallel.shared()
    ran_after: list[int] = []
    returned = threading.Event()

    class Refusing:
        def __init__(self):
            self.calls = 0

        def submit(self, fn, *a):
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            return real.submit(fn, *a)

    pool = Refusing()
    monkeypatch.setattr(parallel, "shared", lambda: pool)

    def fn(x):
        if returned.is_set():
            ran_after.append(x)
        time.sleep(0.001)
        return x

    with pytest.raises(RuntimeError, match="cannot schedule"):
        parallel.each(fn, range(200), workers=3)
    returned.set()
    time.sleep(0.3)
    assert ran_after == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_works_in_a_forked_child():
    parallel.each(abs, range(10), workers=2)  # the parent's shared pool exists
    pid = os.fork()
    if pid == 0:  # child: exit code says whether it worked
        try:
            ok = parallel.each(lambda x: -x, range(10), workers=2) == [-x for x in range(10)]
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    status = wait_child(pid, 60, poll=0.05)  # bounded: a hung child is what this test is for
    if status is None:
        pytest.fail("each() hung in a forked child")
    assert os.waitstatus_to_exitcode(status) == 0

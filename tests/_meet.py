"""A gate for tests that spy on which threads do the work: the first ``parties`` calls wait
for each other, so they must come from that many threads at once (a pool that runs everything
on one thread fails with ``BrokenBarrierError`` after ``timeout``); later calls pass. Unlike a
sleep in the spy, it does not depend on how the scheduler treats a busy machine."""

from __future__ import annotations

import threading


class Meet:
    def __init__(self, parties: int = 2, timeout: float = 20.0) -> None:
        self._barrier = threading.Barrier(parties, timeout=timeout)
        self._lock = threading.Lock()
        self._calls = 0

    def __call__(self) -> None:
        with self._lock:
            self._calls += 1
            first = self._calls <= self._barrier.parties
        if first:
            self._barrier.wait()

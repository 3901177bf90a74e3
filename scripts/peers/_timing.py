"""Timing helpers shared by the peer benchmark cases (best of N wall-clock runs)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any


def best(fn: Callable[[], Any], repeat: int = 5, setup: Callable[[], Any] | None = None) -> float:
    """Fastest of ``repeat`` runs of ``fn`` in seconds (``setup`` runs untimed before each)."""
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        gc.collect()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def row(
    case: str,
    tenfold: float,
    peer: str | None = None,
    peer_value: float | None = None,
    *,
    unit: str = "s",
    higher_is_better: bool = False,
    target: str = "",
    note: str = "",
) -> dict:
    """One table row; ``ratio`` is how many times better tenfold is than the peer."""
    ratio = None
    if peer_value is not None and tenfold:
        ratio = (tenfold / peer_value) if higher_is_better else (peer_value / tenfold)
    return {
        "case": case,
        "tenfold": tenfold,
        "peer": peer,
        "peer_value": peer_value,
        "unit": unit,
        "ratio": ratio,
        "target": target,
        "note": note,
    }


def alternate(
    fa: Callable[[], Any], fb: Callable[[], Any] | None, rounds: int = 21
) -> tuple[list[float], list[float]]:
    """Wall times of ``fa`` and ``fb`` run in turns (a, b, a, b...), ``rounds`` of each, with
    ``gc.collect()`` before every run and the result dropped outside the timed region: both
    see the same machine load, so their ratio is fairer than two separate best-of runs."""
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(rounds):
        for fn, acc in ((fa, ta), (fb, tb)):
            if fn is None:
                continue
            gc.collect()
            t = time.perf_counter()
            got = fn()
            acc.append(time.perf_counter() - t)
            del got
    return ta, tb


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


class CountingApp:
    """WSGI wrapper (around moto's app, for the remote cases): logs ``(method, bytes sent)``
    of every request into ``log``."""

    def __init__(self, app: Any, log: list) -> None:
        self.app, self.log = app, log

    def __call__(self, environ: dict, start_response: Any) -> Any:
        chunks = list(self.app(environ, start_response))
        sent = 0 if environ.get("REQUEST_METHOD") == "HEAD" else sum(map(len, chunks))
        self.log.append((environ.get("REQUEST_METHOD"), sent))
        return chunks

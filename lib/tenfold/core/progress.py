"""Progress bars for long work: shown on a terminal, silent in scripts and CI.

``progress(iterable, total=..., desc=...)`` wraps an iterable. The bar is drawn (with ``tqdm``
when it is installed, otherwise a minimal built-in bar on stderr) only when stderr is a terminal
and ``TENFOLD_PROGRESS`` is not ``0``; ``show=True/False`` forces it either way.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

__all__ = ["progress", "wants_progress"]


def wants_progress(show: bool | None = None) -> bool:
    """Whether a bar should be drawn: ``show`` if given, else a terminal on stderr."""
    if show is not None:
        return show
    if os.environ.get("TENFOLD_PROGRESS", "") == "0" or os.environ.get("CI"):
        return False
    return sys.stderr.isatty()


def progress(
    items: Iterable[T],
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    show: bool | None = None,
) -> Iterator[T]:
    """Yield from ``items``, drawing a progress bar when :func:`wants_progress` says so."""
    if not wants_progress(show):
        yield from items
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield from _plain(items, total, desc, unit)
        return
    yield from tqdm(items, total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)


def _plain(items: Iterable[T], total: int | None, desc: str, unit: str) -> Iterator[T]:
    start = last = time.monotonic()
    n = 0
    for n, item in enumerate(items, 1):
        yield item
        now = time.monotonic()
        if now - last > 0.2:
            last = now
            of = f"/{total}" if total else ""
            sys.stderr.write(f"\r{desc} {n}{of} {unit} ({n / (now - start):.0f} {unit}/s)")
            sys.stderr.flush()
    sys.stderr.write(f"\r{desc} {n} {unit} done{' ' * 20}\n")

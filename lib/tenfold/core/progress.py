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

__all__ = ["progress", "wants_progress", "ByteProgress", "human"]


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


class ByteProgress:
    """A byte counter drawn as ``desc  1.2 GiB / 4.0 GiB  810 MiB/s  ETA 0:03`` on a terminal
    (tqdm when installed), nothing otherwise. Use as a context manager; call ``update(n)``."""

    def __init__(self, total: int, *, desc: str = "", show: bool | None = None) -> None:
        self.total = total
        self.desc = desc
        self.done = 0
        self._on = wants_progress(show)
        self._bar = None
        self._start = self._last = time.monotonic()
        if self._on:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True,
                             unit_divisor=1024, file=sys.stderr, leave=False)  # fmt: skip

    def update(self, n: int) -> None:
        self.done += n
        if not self._on:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last < 0.2 and self.done < self.total:
            return
        self._last = now
        rate = self.done / max(now - self._start, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        sys.stderr.write(
            f"\r{self.desc}  {human(self.done)} / {human(self.total)}  {human(rate)}/s  "
            f"ETA {int(eta) // 60}:{int(eta) % 60:02d}   "
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._on:
            sys.stderr.write("\r" + " " * 72 + "\r")
            sys.stderr.flush()

    def __enter__(self) -> ByteProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def human(n: float) -> str:
    """``n`` bytes in B, KiB, MiB, GiB or TiB (one decimal above bytes).

    >>> human(512), human(1536), human(3 << 30)
    ('512 B', '1.5 KiB', '3.0 GiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"

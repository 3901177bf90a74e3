"""WTXT in ``tenfold convert`` (the hooks of :mod:`tenfold.conversion`): its source (each array
decoded and checked again only when asked for) and its target (no file metadata)."""

from __future__ import annotations

from typing import Any

from ...conversion import Lazy, Target, WriteOptions
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...tensor_source import Source, reader_source
from ._format import FORMAT


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The arrays of a WTXT file (``convert_source``), each decoded (and checked again) only
    when asked for: the reader checks every chunk, hash and signature when it opens the file
    but keeps no decoded bytes. Its keys are the tensor names (``tenfold_names`` decoded, as
    :func:`tenfold.wtxt.load` does)."""
    from . import open as wtxt_open

    return reader_source(FORMAT, wtxt_open(path, limits=limits))


def target(fmt: Any, dst: Any, generation: Any = None) -> Target:
    """The target of a ``.wtxt`` destination (``convert_target``)."""
    return WtxtTarget(fmt, dst, generation)


class WtxtTarget(Target):
    """WTXT: every chunk has its parity and CRC; no file metadata (the descriptor's)."""

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        from . import save

        # the writer fetches each array once (its digests and its text side by side);
        # threads: 0 or -1 every CPU this process may use (the writer's default), n > 0 n
        workers = opts.threads if opts.threads > 0 else None
        save(dst, {n: Lazy(s, n, bar) for n in s.names}, fsync=opts.fsync, workers=workers)

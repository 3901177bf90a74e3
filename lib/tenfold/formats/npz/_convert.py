"""NumPy npz in ``tenfold convert`` (the hooks of :mod:`tenfold.conversion`): its source (one
member at a time through the hardened parser), the fallback for zips and ``.npz`` names, and
its target (deflate when asked, or kept from a deflated npz source; no file metadata)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...conversion import Lazy, RawTensor, Target, WriteOptions, raw_or_lazy
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...errors import FormatError
from ...tensor_source import Source
from ._format import FORMAT, LOCAL_HEADER


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """Arrays of an ``.npz`` (``convert_source``), one member at a time through the hardened
    parser (:class:`tenfold.interop.npz.Archive`: the zip directory and every ``.npy`` header
    are checked when the source opens, before anything is written). A stored member is a view
    of the file map (its CRC-32 checked; the writers give its pages back), a deflated one is
    decompressed alone into an array charged to a fresh decode budget.
    :func:`tenfold.convert.read_any` sets ``budget``: then every array is an owned copy
    charged to that one budget."""
    from ...core.mapped import MappedFile
    from .writer import Archive

    mf = MappedFile(path, fmt=FORMAT.name)
    try:
        what = label if label is not None else os.fspath(path)
        a = Archive(mf.buffer(), what=what, limits=limits)
        members = {n: a.member(n) for n in a.members}
    except FormatError:
        from .reader import truncation

        cause = truncation(mf, limits, what)  # a file that ends early: said so
        mf.close()
        if cause is not None:
            raise cause from None
        raise
    except BaseException:
        mf.close()
        raise

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        m = members[n]
        assert m.dtype is not None
        return np.dtype(m.dtype), m.shape

    def get(n: str) -> np.ndarray:
        if src.budget is not None:
            return a.read(n, src.budget)
        return a.read(n, copy=False)

    def close() -> None:
        a.close()
        mf.close()

    src = Source(FORMAT.name, list(members), spec, get, close=close)
    src.compressed = any(not m.stored for m in members.values())
    return src


def claims(head: bytes, label: str) -> bool:
    """A zip, or a file named ``.npz``, is read as an npz although its first member is no
    ``.npy`` (``convert_fallback``): the parser says what is wrong with it."""
    return label.lower().endswith(FORMAT.suffixes) or head[:4] == LOCAL_HEADER


def target(fmt: Any, dst: Any, generation: Any = None) -> Target:
    """The target of a ``.npz`` destination (``convert_target``)."""
    return NpzTarget(fmt, dst, generation)


class NpzTarget(Target):
    """npz: NumPy's own types, no file metadata (the descriptor's); ``compress="deflate"``
    deflates (zip's method: zstd is refused)."""

    compressions = ("deflate",)

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        from ...core.release import release
        from .writer import write_npz

        def done(a: np.ndarray) -> None:
            bar.update(a.nbytes)
            release(a)

        # raw tensors copied in blocks (they credit the bar themselves), others fetched alone
        lazy = {n: raw_or_lazy(s, n, bar) for n in s.names}
        lazy = {n: v if isinstance(v, RawTensor) else Lazy(s, n) for n, v in lazy.items()}
        write_npz(dst, lazy, compressed=opts.compress is not None, fsync=opts.fsync,  # type: ignore[arg-type]
                  done=done)  # fmt: skip

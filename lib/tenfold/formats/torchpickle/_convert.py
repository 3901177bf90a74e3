"""PyTorch checkpoints in ``tenfold convert`` (the ``convert_source`` hook of
:mod:`tenfold.conversion`): the tensors through the reader, each a view of the file (an owned
copy when the caller sets a budget), a contiguous tensor of a stored storage copied straight
from its byte range, and the file metadata."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Limits
from ...tensor_source import RawRange, Source
from ._format import FMT, FORMAT


def claims(head: bytes, label: str) -> bool:
    """A file named ``.pt`` or ``.pth`` that does not look like a checkpoint is read as one
    anyway (``convert_fallback``): the reader then says what is wrong with it."""
    return label.lower().endswith(FORMAT.suffixes)


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The tensors of a checkpoint (``convert_source``): opened and checked now, each tensor
    read when the conversion asks for it."""
    from .reader import Reader

    r = Reader(path, limits=limits)
    try:
        infos = {n: r.info(n) for n in r}
        md = r.metadata
    except BaseException:
        r.close()
        raise

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        i = infos[n]
        assert i.np_dtype is not None
        return i.np_dtype, i.shape

    def get(n: str) -> np.ndarray:
        a = r.read(n)
        if src.budget is None:
            return a
        src.budget.take(a.nbytes, FMT, f"tensor {n!r}")
        return np.array(a)

    def raw(n: str) -> RawRange | None:
        rng = infos[n].byte_range
        return None if rng is None else RawRange(rng[0], rng[1] - rng[0], None, r.file)

    where = path if isinstance(path, (str, os.PathLike)) else None
    src = Source(FMT, list(infos), spec, get, metadata=md, close=r.close, raw=raw, path=where)
    return src

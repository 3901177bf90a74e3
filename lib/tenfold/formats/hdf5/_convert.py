"""HDF5 in ``tenfold convert`` (the hooks of :mod:`tenfold.conversion`): its source (the
datasets, contiguous ones copied as byte ranges of the file), the suffix fallback (a file
whose superblock follows a user block), and the attributes ``inspect`` lists."""

from __future__ import annotations

from typing import Any

from ...conversion import span_source
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...tensor_source import Source
from ._format import FORMAT


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The datasets of an HDF5 file (``convert_source``)."""
    from .reader import Reader

    return span_source(FORMAT.name, Reader(path, limits=limits), path)


def claims(head: bytes, label: str) -> bool:
    """A file named ``.h5`` / ``.hdf5`` is read as HDF5 although it does not start with the
    signature (a user block first, or damage h5py then reports)."""
    return label.lower().endswith(FORMAT.suffixes)


def metadata(source: Any) -> dict[str, Any]:
    """The attributes (``tenfold inspect``)."""
    from .reader import Reader

    with Reader(source) as r:
        return r.metadata

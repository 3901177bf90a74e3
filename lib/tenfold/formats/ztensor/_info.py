"""The record of one zTensor 0.1.0 tensor, as its index entry describes it:
:class:`TensorInfo` (and :class:`Blob`, one stored byte range)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["Blob", "TensorInfo", "U64"]

U64 = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class Blob:
    """One stored byte range: where it is and how many bytes it has on disk."""

    offset: int
    size: int


@dataclasses.dataclass(slots=True)
class TensorInfo:
    """Everything the index says about one tensor.

    ``dtype`` is the zTensor name (``"bfloat16"``); ``np_dtype`` the little-endian NumPy dtype of
    the decoded tensor. For sparse tensors ``offset``/``size`` describe the values blob and
    ``components`` the index blobs (``indptr``/``indices`` or ``coords``).
    """

    name: str
    dtype: str
    np_dtype: np.dtype
    shape: tuple[int, ...]
    layout: str
    encoding: str
    offset: int
    size: int
    endianness: str
    checksum: str | None
    checksum_algo: str | None
    checksum_hex: str | None
    sparse_format: str | None = None
    nnz: int | None = None
    components: Mapping[str, Blob] = dataclasses.field(default_factory=dict)
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    index_position: int = 0

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the decoded dense tensor (or, for sparse, of the values)."""
        count = self.nnz if self.nnz is not None else self.numel
        return count * self.np_dtype.itemsize

    @property
    def zero_copy(self) -> bool:
        """True when reading gives a view of the file (dense, raw, little-endian)."""
        return (
            self.layout == "dense"
            and self.encoding == "raw"
            and (self.endianness == "little" or self.np_dtype.itemsize == 1)
        )

    # -- the fields every format's info record has (see tenfold.core.reader.TensorInfo) --------
    @property
    def byte_range(self) -> tuple[int, int]:
        """``(start, end)`` of the (values) blob in the file."""
        return (self.offset, self.offset + self.size)

    @property
    def extras(self) -> dict[str, Any]:
        """The zTensor-specific fields: layout, endianness, sparse parts, custom keys."""
        d = self.as_dict()
        for k in ("name", "dtype", "shape", "encoding", "checksum"):
            d.pop(k)
        return d

    def as_dict(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "dtype": self.dtype,
            "shape": self.shape,
            "layout": self.layout,
            "encoding": self.encoding,
            "offset": self.offset,
            "size": self.size,
            "data_endianness": self.endianness,
            "checksum": self.checksum,
        }
        if self.sparse_format is not None:
            d["sparse_format"] = self.sparse_format
            d["nnz"] = self.nnz
            d.update({k: (b.offset, b.size) for k, b in self.components.items()})
        d["attrs"] = dict(self.attrs)
        return d

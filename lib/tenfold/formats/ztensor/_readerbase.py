"""What the zTensor readers of every generation share, on top of
:class:`~tenfold.core.reader.MappedReader` (which owns the file, ``close``, the context manager
and the finalizer): the ``Mapping`` face over the records in ``self._infos`` (name -> record,
in the reader's order), ``info`` / ``infos``, the whole file as bytes, and the ``repr``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.reader import MappedReader

__all__ = ["ZtReader"]


class ZtReader(MappedReader):
    """Base of :class:`~tenfold.ztensor.Reader`, ``V1Reader`` and ``V2Reader``."""

    fmt = "zt"
    #: The class as ``repr`` names it.
    _label = "tenfold.ztensor.Reader"
    _infos: Mapping[str, Any]
    _verified: set[Any]

    def _keys(self) -> Mapping[str, Any]:
        return self._infos

    def __repr__(self) -> str:
        where = self._mf.path or "<buffer>"
        return f"<{self._label} {where!r} {self._state()}>"

    def _state(self) -> str:
        return "closed" if self.closed else f"{len(self)} tensors"

    def info(self, name: str) -> Any:
        """The record of ``name`` (see the generation's reader for its fields)."""
        try:
            return self._infos[name]
        except KeyError:
            raise KeyError(f"zt: no tensor named {name!r}") from None

    def infos(self) -> list[Any]:
        """Every record, in the reader's order."""
        return list(self._infos.values())

    def forget_verified(self) -> None:
        """Forget which checksums have been checked: the next read of each tensor checks its
        checksum again (what a verification starts with)."""
        self._verified.clear()

    def stored_bytes(self) -> np.ndarray:
        """The whole file as a read-only ``uint8`` view."""
        return self._mf.buffer()

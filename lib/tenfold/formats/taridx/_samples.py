"""A TARIDX index's rows grouped by sample: :class:`Samples` (the groups and the hash table
of their keys) and :func:`hash_stems`, the key hash lookups probe it with."""

from __future__ import annotations

import numpy as np

from ... import _kernels
from ...errors import UnsupportedError, describe
from ._spec import FMT

__all__ = ["Samples", "hash_stems"]


def hash_stems(stems: list[str] | tuple[str, ...]) -> np.ndarray:
    """xxh64 (seed 0) of each stem's UTF-8 encoding, vectorised (one kernel call, no copies)."""
    out = np.empty(len(stems), np.uint64)
    _kernels.load("strhash").hash_strs(stems, 0, out)
    return out


class Samples:
    """Rows grouped by sample key ``(keyhash, crashid)``.

    Attributes
    ----------
    order
        Row numbers in sample order (``None`` when the rows already are: contiguous index).
    starts
        ``starts[i]:starts[i+1]`` are sample ``i``'s positions in ``order`` (length n + 1).
    keyhash, crashid
        The key of each sample. Samples are in order of their first row in the file.
    """

    def __init__(
        self, order: np.ndarray | None, starts: np.ndarray, keyhash: np.ndarray, crashid: np.ndarray
    ) -> None:
        self.order = order
        self.starts = starts
        self.keyhash = keyhash
        self.crashid = crashid
        self._table: tuple[np.ndarray, dict[tuple[int, int], int]] | None = None

    def __len__(self) -> int:
        return len(self.starts) - 1

    def rows_of(self, i: int) -> np.ndarray:
        """Row numbers of sample ``i``."""
        a, b = int(self.starts[i]), int(self.starts[i + 1])
        return np.arange(a, b) if self.order is None else self.order[a:b]

    def table(self) -> tuple[np.ndarray, dict[tuple[int, int], int]]:
        """Hash table of the canonical samples (crash id 0) and a dict of the crash samples."""
        if self._table is None:
            ht = _kernels.load("hashtable")
            crashed = self.crashid != 0
            canon = (
                np.flatnonzero(~crashed) if crashed.any() else np.arange(self.crashid.size)
            ).astype(np.int64, copy=False)
            if canon.size > 0x7FFFFFFF:
                raise UnsupportedError(describe(FMT, "index", detail="more than 2**31 samples"))
            m = 1 << max(1, int(2 * canon.size).bit_length())
            table = np.full(m, -1, np.int32)
            ht.insert(self.keyhash, canon, table)
            crash = {
                (int(self.keyhash[i]), int(self.crashid[i])): int(i)
                for i in np.flatnonzero(crashed).tolist()
            }
            self._table = (table, crash)
        return self._table

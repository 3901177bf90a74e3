"""A TARIDX file's header, name blocks and row region, read and checked when it is opened
(everything that costs O(1): magic, version, sizes, region offsets, row count against the file
size, the extension and crash blocks): :class:`IndexFile`, the base of
:class:`~tenfold.formats.taridx.reader.Index`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.bounds import Limits, check_limit, empty_file
from ...core.reader import MappedReader
from ...errors import FormatError, TruncatedError, UnsupportedError, describe
from ._spec import FMT, HDR_SIZE, HEADER, HEADER_DT, MAGIC, MAJOR, REC_SIZE, ROW_DT, E

__all__ = ["IndexFile", "split_block"]


def split_block(raw: bytes, count: int, what: str, offset: int) -> list[str]:
    """Decode a ``\\n``-joined block of ``count`` names (split on ``\\n`` only).

    An empty block is zero names when ``count == 0`` and one empty name when ``count == 1``.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            describe(FMT, what, offset=offset + exc.start, detail="not valid UTF-8")
        ) from None
    names = text.split("\n") if (raw or count) else []
    if len(names) != count:
        field = "n_ext" if what.startswith("ext") else "n_crash"
        raise FormatError(
            describe(
                FMT,
                what,
                offset=offset,
                field=field,
                detail="does not match the names in the block",
                expected=len(names),
                got=count,
            )
        )
    return names


class IndexFile(MappedReader):
    """The header fields, the decoded name tables (``ext``, ``crash``) and the row array
    (``rows``) of an opened ``.taridx`` file, checked by :meth:`_parse` (a base class)."""

    limits: Limits

    @property
    def name(self) -> str:
        return self.path if self.path is not None else "<buffer>"

    # -- parsing ------------------------------------------------------------------------------
    def _err(self, cls: type[FormatError], what: str, **kw: Any) -> FormatError:
        return E(cls, f"{self.name}: {what}", **kw)

    def _parse(self) -> None:
        """Read and check the header, the name blocks and the row region (not the rows)."""
        mf = self._mf
        size = mf.size
        if size == 0:
            raise empty_file(self.name)  # as every format (and tenfold.open) says it
        if size < HDR_SIZE:
            raise self._err(
                TruncatedError,
                "header",
                offset=0,
                detail="file shorter than header",
                expected=f">= {HDR_SIZE} bytes",
                got=size,
            )
        hdr = mf.records(HEADER_DT, 1, 0, "header")
        h = hdr[0]
        major, minor = self._check_identity(h)
        n_rows, n_ext, n_crash, off_crash, off_arr = self._check_layout(h, size)
        n_stems = self._check_stems(h, n_rows)
        self.header = hdr
        self.major, self.minor = major, minor
        self.n_rows, self.n_stems, self.n_ext, self.n_crash = n_rows, n_stems, n_ext, n_crash
        self.off_crash, self.off_arr = off_crash, off_arr
        self.flags = int(h["flags"])
        self.ext = split_block(
            mf.bytes(HDR_SIZE, off_crash - HDR_SIZE, "extension block"),
            n_ext,
            "extension block",
            HDR_SIZE,
        )
        self.crash = split_block(
            mf.bytes(off_crash, off_arr - off_crash, "crash block"),
            n_crash,
            "crash block",
            off_crash,
        )
        self.rows = mf.records(ROW_DT, n_rows, off_arr, "rows")
        self._cols: dict[str, np.ndarray] = {}

    def _check_identity(self, h: Any) -> tuple[int, int]:
        """Magic, major version, record and header sizes; returns ``(major, minor)``."""
        mf = self._mf
        magic = mf.bytes(HEADER.offset("magic"), HEADER.field_size("magic"), "magic")
        if magic != MAGIC:
            raise self._err(
                FormatError,
                "header",
                offset=HEADER.offset("magic"),
                field="magic",
                expected=MAGIC,
                got=magic,
            )
        major, minor = int(h["major"]), int(h["minor"])
        if major != MAJOR:
            raise self._err(
                UnsupportedError,
                "header",
                offset=HEADER.offset("major"),
                field="major",
                detail="unsupported version",
                expected=MAJOR,
                got=major,
            )
        for field, want in (("rec_size", REC_SIZE), ("hdr_size", HDR_SIZE)):
            off = HEADER.offset(field)
            if int(h[field]) != want:
                raise self._err(
                    FormatError, "header", offset=off, field=field, expected=want, got=int(h[field])
                )
        return major, minor

    def _check_layout(self, h: Any, size: int) -> tuple[int, int, int, int, int]:
        """Block offsets within the file, rows filling the rest, and the limits; returns
        ``(n_rows, n_ext, n_crash, off_crash, off_arr)``."""
        n_rows, n_ext, n_crash = int(h["n_rows"]), int(h["n_ext"]), int(h["n_crash"])
        off_crash, off_arr = int(h["off_crash"]), int(h["off_arr"])
        if not HDR_SIZE <= off_crash <= size:
            raise self._err(
                FormatError,
                "header",
                offset=HEADER.offset("off_crash"),
                field="off_crash",
                expected=f"{HDR_SIZE} <= off_crash <= {size}",
                got=off_crash,
            )
        if not off_crash <= off_arr <= size:
            raise self._err(
                FormatError,
                "header",
                offset=HEADER.offset("off_arr"),
                field="off_arr",
                expected=f"{off_crash} <= off_arr <= {size}",
                got=off_arr,
            )
        region = size - off_arr
        if region != REC_SIZE * n_rows:
            cls = TruncatedError if region < REC_SIZE * n_rows else FormatError
            raise self._err(
                cls,
                "rows",
                offset=off_arr,
                field="row region size",
                detail=f"{n_rows} rows of {REC_SIZE} bytes do not fill the file",
                expected=REC_SIZE * n_rows,
                got=region,
            )
        check_limit(
            FMT,
            f"{self.name}: rows",
            n_rows,
            self.limits.max_objects,
            field="n_rows",
            offset=HEADER.offset("n_rows"),
        )
        check_limit(
            FMT,
            f"{self.name}: name blocks",
            off_arr - HDR_SIZE,
            self.limits.max_index_bytes,
            field="extension + crash block bytes",
            offset=HDR_SIZE,
        )
        return n_rows, n_ext, n_crash, off_crash, off_arr

    def _check_stems(self, h: Any, n_rows: int) -> int:
        """``n_stems``: at most ``n_rows``, and zero exactly when there are no rows."""
        n_stems = int(h["n_stems"])
        if n_stems > n_rows:
            raise self._err(
                FormatError,
                "header",
                offset=HEADER.offset("n_stems"),
                field="n_stems",
                expected=f"<= n_rows ({n_rows})",
                got=n_stems,
            )
        if (n_rows > 0) != (n_stems > 0):
            raise self._err(
                FormatError,
                "header",
                offset=HEADER.offset("n_stems"),
                field="n_stems",
                expected="> 0" if n_rows else 0,
                got=n_stems,
            )
        return n_stems

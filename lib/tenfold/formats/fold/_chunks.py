"""The FOLD chunk pipeline: binary chunk header, CRC-32C, Reed-Solomon correction, SHA-256,
decompression.

A chunk is read in the order docs/formats/fold.md says: CRC-32C of the stored bytes first; when it
holds, the chunk is good and its ECC is not decoded (clean reads run at checksum speed and the
wrong multi-block parity pyfolds 1.0.2 wrote is never used). Only on a mismatch are the blocks
corrected with Reed-Solomon, after which CRC-32C and SHA-256 are checked again, so a correction
beyond capacity is reported, never returned.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any

import numpy as np

from ... import _kernels
from ...core import parallel
from ...core.alloc import empty
from ...core.bounds import Budget, Limits, check_limit
from ...core.checksums import crc32c, sha256_hex
from ...core.compression import zstd_content_size, zstd_decode_pieces, zstd_decompress_into
from ...core.mapped import MappedFile
from ...errors import (
    FormatError,
    IntegrityError,
    TruncatedError,
    UncorrectableError,
    UnsupportedError,
)
from . import _digest
from ._index import ChunkInfo
from ._spec import (
    CHUNK_HEADER,
    CHUNK_HEADER_LEN,
    FLAG_NONE,
    FLAG_ZSTD,
    FMT,
    HEADER_LEN,
    MAX_CHUNK_SIZE,
    ecc_len_for,
)

__all__ = ["ChunkStatus", "ChunkReading"]

_ABOVE_CHUNK = "above MAX_CHUNK_SIZE"
#: Chunks at least this large are hashed in a worker thread while the CRC runs here.
_PARALLEL_MIN = 4 << 20


@dataclasses.dataclass
class ChunkStatus:
    """Outcome of loading one chunk's stored bytes (used by verify and repair)."""

    comp: np.ndarray  # verified (or, with verify=False, unverified) stored bytes
    state: str  # "ok", "repaired", "unverified"
    corrected: int = 0  # bytes fixed by RS
    header_fixes: tuple[str, ...] = ()


class ChunkReading:
    """The chunk pipeline of :class:`~tenfold.fold.reader.Reader` (a mixin over its state)."""

    _mf: MappedFile
    _key: bytes | None
    _chunk_hashes: dict[str, Any]
    _bound: dict[str, tuple[int, str]]
    header: dict[str, int]
    limits: Limits

    def chunk(self, name: str) -> ChunkInfo:  # pragma: no cover - the Reader's
        raise NotImplementedError

    def _header_fields(self, c: ChunkInfo, tolerate: bool = False) -> dict[str, Any]:
        """Validate the chunk's binary header against limits, the file and the index.

        With ``tolerate`` the limits and extents are checked on the index's values instead
        (the header is then only compared with the index, by the caller).
        """
        mf = self._mf
        if c.offset < HEADER_LEN:
            raise FormatError(
                fmt=FMT,
                obj=c.what,
                offset=c.offset,
                field="offset",
                detail="inside the file header",
                expected=f">= {HEADER_LEN}",
                got=c.offset,
            )
        mf.check(c.offset, CHUNK_HEADER_LEN, f"{c.what} header")
        rec = mf.records(CHUNK_HEADER.dtype, 1, c.offset, f"{c.what} header")[0]
        h = {
            "ctype": rec["ctype"].tobytes().ljust(4, b"\0").decode("latin-1"),
            "flags": int(rec["flags"]),
            "uncomp_len": int(rec["uncomp_len"]),
            "comp_len": int(rec["comp_len"]),
            "crc32c": int(rec["crc32c"]),
            "ecc_len": int(rec["ecc_len"]),
        }
        src: Any = c.__dict__ if tolerate else h
        for field in ("uncomp_len", "comp_len", "ecc_len"):
            check_limit(
                FMT,
                c.what,
                src[field],
                MAX_CHUNK_SIZE,
                field=field,
                offset=c.offset + CHUNK_HEADER.offset(field),
                detail=_ABOVE_CHUNK,
            )
        end = c.payload_offset + src["comp_len"] + src["ecc_len"]
        if end > mf.size:
            raise TruncatedError(
                fmt=FMT,
                obj=c.what,
                offset=c.offset,
                detail="payload ends past end of file",
                expected=f"end <= {mf.size}",
                got=end,
            )
        bound, what = self._bound[c.name]
        if end > bound:
            raise FormatError(
                fmt=FMT,
                obj=c.what,
                offset=c.offset,
                detail=f"payload overlaps {what}",
                expected=f"end <= {bound}",
                got=end,
            )
        return h

    def _check_header(self, c: ChunkInfo, h: dict[str, Any]) -> list[str]:
        """Fields where the binary header disagrees with the index (raise unless asked not to)."""
        return [f for f in CHUNK_HEADER.names if h[f] != getattr(c, f)]

    def _header_error(self, c: ChunkInfo, h: dict[str, Any], field: str) -> Exception:
        cls = IntegrityError if field == "crc32c" else FormatError
        return cls(
            fmt=FMT,
            obj=c.what,
            offset=c.offset + CHUNK_HEADER.offset(field),
            field=f"header {field}",
            detail="disagrees with the index",
            expected=getattr(c, field),
            got=h[field],
        )

    def _nsym(self, c: ChunkInfo) -> int:
        nsym = c.nsym
        if nsym is None:
            raise UnsupportedError(
                fmt=FMT,
                obj=c.what,
                offset=c.offset,
                field="ecc_algo",
                detail="unsupported codec",
                expected="none | rs(2..254)",
                got=c.ecc_algo,
            )
        want = ecc_len_for(c.comp_len, nsym)
        if c.ecc_len != want:
            raise FormatError(
                fmt=FMT,
                obj=c.what,
                offset=c.offset,
                field="ecc_len",
                detail=f"inconsistent with {c.ecc_algo}",
                expected=want,
                got=c.ecc_len,
            )
        return nsym

    def _check_digest(
        self, c: ChunkInfo, comp: np.ndarray, repaired: bool, sha: Any = None
    ) -> None:
        actual = sha.result() if sha is not None else sha256_hex(comp)
        ok = _digest.matches(c.sha256, actual, self._key)
        if ok is None:
            raise IntegrityError(
                fmt=FMT,
                obj=c.what,
                offset=c.payload_offset,
                field="sha256",
                detail="hmac-sha256 digest and no hmac_key given",
            )
        if not ok:
            cls = UncorrectableError if repaired else IntegrityError
            raise cls(
                fmt=FMT,
                obj=c.what,
                offset=c.payload_offset,
                field="sha256",
                detail="mismatch" + (" after ECC correction" if repaired else ""),
                expected=c.sha256,
                got=actual,
            )
        listed = self._chunk_hashes.get(c.name)
        if listed is not None and listed != c.sha256:
            raise IntegrityError(
                fmt=FMT,
                obj=c.what,
                offset=self.header["index_off"],
                field="metadata.chunk_hashes",
                detail="disagrees with the chunk's sha256",
                expected=c.sha256,
                got=listed,
            )

    def _correct(self, c: ChunkInfo, comp: np.ndarray, nsym: int) -> tuple[np.ndarray, int]:
        """RS-correct a copy of the stored bytes; UncorrectableError when it cannot."""
        ecc = self._mf.u8(c.payload_offset + c.comp_len, c.ecc_len, f"{c.what} ecc")
        data = comp.copy()
        parity = ecc.copy()
        k = 255 - nsym
        nblocks = c.ecc_len // nsym
        nerr = np.zeros(nblocks, np.int32)
        bad = _kernels.load("rs").decode_blocks(data, parity, nsym, nerr)
        if bad:
            first = int(np.flatnonzero(nerr < 0)[0])
            raise UncorrectableError(
                fmt=FMT,
                obj=c.what,
                offset=c.payload_offset + first * k,
                detail=f"crc32c mismatch and {bad} of {nblocks} {c.ecc_algo} blocks have more "
                f"errors than the code corrects (first: block {first})",
            )
        got = crc32c(data)
        if got != c.crc32c:
            raise UncorrectableError(
                fmt=FMT,
                obj=c.what,
                offset=c.payload_offset,
                field="crc32c",
                detail="mismatch after ECC correction",
                expected=c.crc32c,
                got=got,
            )
        data.flags.writeable = False
        return data, int(nerr.sum())

    def load_comp(
        self, name: str, verify: bool | str = True, *, tolerate_header: bool = False
    ) -> ChunkStatus:
        """The stored (compressed) bytes of chunk ``name``, verified and repaired in memory.

        With ``tolerate_header`` a binary header that disagrees with the index is reported in
        :attr:`ChunkStatus.header_fixes` instead of raising: the index's values are used, and
        the payload must still verify against the index's CRC-32C and SHA-256 (used by verify
        and repair).
        """
        c = self.chunk(name)
        tolerate = bool(tolerate_header and verify)
        h = self._header_fields(c, tolerate)
        nsym = self._nsym(c)
        diffs = self._check_header(c, h)
        if diffs and not tolerate:
            layout = [f for f in diffs if f in ("comp_len", "ecc_len")]
            raise self._header_error(c, h, (layout or diffs)[0])
        comp = self._mf.u8(c.payload_offset, c.comp_len, c.what)
        if not verify:
            return ChunkStatus(comp, "unverified")
        # SHA-256 of a large chunk runs in a second thread while CRC-32C runs here
        sha = _sha_async(comp) if verify != "crc" and comp.size >= _PARALLEL_MIN else None
        if crc32c(comp) == c.crc32c:
            if verify != "crc":
                self._check_digest(c, comp, repaired=False, sha=sha)
            return ChunkStatus(comp, "ok", header_fixes=tuple(diffs))
        if nsym == 0 or c.comp_len == 0:
            raise IntegrityError(
                fmt=FMT,
                obj=c.what,
                offset=c.payload_offset,
                field="crc32c",
                expected=c.crc32c,
                got=crc32c(comp),
            )
        fixed, n = self._correct(c, comp, nsym)
        if verify != "crc":
            self._check_digest(c, fixed, repaired=True)
        return ChunkStatus(fixed, "repaired", n, header_fixes=tuple(diffs))

    def decode(self, c: ChunkInfo, comp: np.ndarray, budget: Budget | None = None) -> np.ndarray:
        """Decompress verified stored bytes into the chunk's payload (read-only uint8); the
        output is charged to ``budget`` (default: a fresh one from ``limits``)."""
        if not self._compressed(c, comp):
            return comp
        out = empty(
            c.uncomp_len,
            np.uint8,
            fmt=FMT,
            what=c.what,
            offset=c.payload_offset,
            budget=self.limits.budget() if budget is None else budget,
        )
        zstd_decompress_into(comp, out, fmt=FMT, what=c.what, offset=c.payload_offset)
        out.flags.writeable = False
        return out

    def check_decode(self, c: ChunkInfo, comp: np.ndarray) -> None:
        """Every check of :meth:`decode`, keeping nothing: a zstd chunk is decoded in pieces
        through one small buffer (verify and repair), so memory does not grow with
        ``uncomp_len``."""
        if self._compressed(c, comp):
            pieces = zstd_decode_pieces(
                comp, c.uncomp_len, fmt=FMT, what=c.what, offset=c.payload_offset
            )
            for _ in pieces:
                pass

    def _compressed(self, c: ChunkInfo, comp: np.ndarray) -> bool:
        """Whether ``comp`` is to be decompressed (after checking flags and sizes), or is the
        payload itself."""
        if c.flags == FLAG_NONE:
            if c.comp_len != c.uncomp_len:
                raise FormatError(
                    fmt=FMT,
                    obj=c.what,
                    offset=c.offset,
                    field="uncomp_len",
                    detail="uncompressed chunk",
                    expected=c.comp_len,
                    got=c.uncomp_len,
                )
            return False
        if c.flags != FLAG_ZSTD:
            raise UnsupportedError(
                fmt=FMT,
                obj=c.what,
                offset=c.offset + CHUNK_HEADER.offset("flags"),
                field="flags",
                detail="unknown compression",
                expected="0 (none) | 1 (zstd)",
                got=c.flags,
            )
        check_limit(
            FMT,
            c.what,
            c.uncomp_len,
            MAX_CHUNK_SIZE,
            field="uncomp_len",
            offset=c.offset + CHUNK_HEADER.offset("uncomp_len"),
            detail=_ABOVE_CHUNK,
        )
        declared = zstd_content_size(comp)
        if declared is not None and declared != c.uncomp_len:  # refuse before allocating
            raise IntegrityError(
                fmt=FMT,
                obj=c.what,
                offset=c.payload_offset,
                field="zstd content size",
                detail="differs from uncomp_len",
                expected=c.uncomp_len,
                got=declared,
            )
        return True


def _sha_async(buf: np.ndarray) -> concurrent.futures.Future:
    """SHA-256 hex of ``buf`` computed in a worker thread (hashlib releases the GIL).

    The pool is :func:`tenfold.core.parallel.shared`, which a forked child recreates.
    """
    return parallel.submit(sha256_hex, buf)

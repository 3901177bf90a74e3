"""Read FOLD / MIND files: header, JSON index, chunks with CRC-32C, SHA-256 and RS repair.

A chunk is read in the order docs/formats/fold.md says: CRC-32C of the stored bytes first; when it
holds, the chunk is good and its ECC is not decoded (clean reads run at checksum speed and the
wrong multi-block parity pyfolds 1.0.2 wrote is never used). Only on a mismatch are the blocks
corrected with Reed-Solomon, after which CRC-32C and SHA-256 are checked again, so a correction
beyond capacity is reported, never returned.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import dataclasses
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .. import _kernels
from ..core import jsonio, parallel
from ..core.alloc import empty
from ..core.bounds import DEFAULT_LIMITS, Budget, Limits
from ..core.checksums import crc32c, sha256_hex
from ..core.compression import zstd_content_size, zstd_decompress_into
from ..core.reader import MappedReader, TensorInfo
from ..errors import (
    FormatError,
    IntegrityError,
    LimitError,
    TruncatedError,
    UncorrectableError,
    UnsupportedError,
    describe,
)
from . import _digest, _payloads
from ._spec import (
    CHUNK_HEADER,
    CHUNK_HEADER_LEN,
    ENTRY_KEYS,
    FLAG_NONE,
    FLAG_ZSTD,
    FMT,
    FORMAT_NAME,
    HEADER,
    HEADER_LEN,
    KNOWN_VERSIONS,
    MAGIC,
    MAX_CHUNK_SIZE,
    MAX_INDEX_SIZE,
    MIND_CHUNKS,
    ecc_len_for,
    parse_ecc_algo,
)

__all__ = ["Reader", "ChunkInfo", "FoldWarning"]


class FoldWarning(UserWarning):
    """A FOLD file is readable but something about it deserves attention (non-strict mode)."""


@dataclasses.dataclass(frozen=True)
class ChunkInfo:
    """One chunk as the index describes it."""

    name: str
    ctype: str
    flags: int
    offset: int
    header_len: int
    comp_len: int
    uncomp_len: int
    crc32c: int
    sha256: str
    ecc_algo: str
    ecc_len: int

    @property
    def nsym(self) -> int | None:
        """RS parity symbols per block (0 without ECC, None for an unknown codec)."""
        return parse_ecc_algo(self.ecc_algo)

    @property
    def compression(self) -> str:
        return {FLAG_NONE: "none", FLAG_ZSTD: "zstd"}.get(self.flags, f"flags={self.flags}")

    @property
    def payload_offset(self) -> int:
        return self.offset + CHUNK_HEADER_LEN

    @property
    def what(self) -> str:
        return f"chunk {self.name!r}"


@dataclasses.dataclass
class ChunkStatus:
    """Outcome of loading one chunk's stored bytes (used by verify and repair)."""

    comp: np.ndarray  # verified (or, with verify=False, unverified) stored bytes
    state: str  # "ok", "repaired", "unverified"
    corrected: int = 0  # bytes fixed by RS
    header_fixes: tuple[str, ...] = ()


def _is_int(v: object) -> bool:
    return type(v) is int and v >= 0


#: Chunk types whose value (``reader[name]``) is a ``dict`` of arrays.
TENSOR_CTYPES = ("STEN", "NPZ0", "TSAV")
#: Chunk types whose value is the decoded JSON.
JSON_CTYPES = ("JSON",)


class Reader(MappedReader, Mapping[str, Any]):
    """A FOLD / MIND file opened for reading: a ``Mapping`` of chunk name to decoded chunk.

    ``reader[name]`` decodes by chunk type: ``JSON`` gives the JSON value; ``STEN``, ``NPZ0``
    and ``TSAV`` give a ``dict`` of NumPy arrays (:meth:`read_state_dict`); every other type
    gives the payload as a read-only ``uint8`` array (:meth:`read`, which returns the payload
    array for every chunk type).

    Parameters
    ----------
    source
        Path or buffer of the file. The file is memory-mapped read-only.
    strict
        Raise :class:`~tenfold.errors.IntegrityError` on a ``manifest_hash`` mismatch (default:
        a :class:`FoldWarning`), and :class:`~tenfold.errors.UnsupportedError` for an
        unknown ``1.x`` version (default: a warning).
    hmac_key
        Key of ``hmac-sha256:`` digests (str or bytes). Without it such digests cannot be
        checked and :meth:`read` with ``verify=True`` refuses the chunk.
    limits
        Bounds on decoded sizes: each call (:meth:`read`, :meth:`read_arrays`,
        :meth:`read_state_dict`, :func:`~tenfold.fold.load`) may allocate at most
        ``limits.decode_budget`` bytes in total.

    Examples
    --------
    >>> import tempfile, pathlib, tenfold.fold as fold
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.fold"
    >>> with fold.Writer(p, ecc="rs(32)") as w:
    ...     _ = w.add_json("meta", {"a": 1})
    >>> with fold.Reader(p) as r:
    ...     r.read_json("meta"), r.chunks[0].ecc_algo
    ({'a': 1}, 'rs(32)')
    """

    def __init__(
        self,
        source: Any,
        *,
        strict: bool = False,
        hmac_key: str | bytes | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.strict = strict
        self.limits = limits
        self._key = _digest.key_bytes(hmac_key)
        self._map(source, FMT)
        try:
            self._parse()
        except BaseException:
            self.close()
            raise

    # -- header and index -------------------------------------------------------------------
    def _parse(self) -> None:
        mf = self._mf
        if mf.size < HEADER_LEN:
            raise TruncatedError(
                fmt=FMT,
                obj="header",
                offset=0,
                detail="file too short",
                expected=f">= {HEADER_LEN} bytes",
                got=mf.size,
            )
        hdr = mf.records(HEADER.dtype, 1, 0, "header")[0]
        magic = bytes(hdr["magic"].tobytes()).ljust(8, b"\0")
        if magic != MAGIC:
            raise FormatError(
                fmt=FMT,
                obj="header",
                offset=0,
                field="magic",
                expected=repr(MAGIC),
                got=repr(magic),
            )
        header_len = int(hdr["header_len"])
        index_off = int(hdr["index_off"])
        index_len = int(hdr["index_len"])
        if header_len != HEADER_LEN:
            raise FormatError(
                fmt=FMT,
                obj="header",
                offset=HEADER.offset("header_len"),
                field="header_len",
                expected=HEADER_LEN,
                got=header_len,
            )
        if index_off < HEADER_LEN:
            raise FormatError(
                fmt=FMT,
                obj="header",
                offset=HEADER.offset("index_off"),
                field="index_off",
                detail="before the end of the header (unfinalized file?)",
                expected=f">= {HEADER_LEN}",
                got=index_off,
            )
        if index_len > MAX_INDEX_SIZE:
            raise LimitError(
                fmt=FMT,
                obj="header",
                offset=HEADER.offset("index_len"),
                field="index_len",
                detail="above MAX_INDEX_SIZE",
                expected=f"<= {MAX_INDEX_SIZE}",
                got=index_len,
            )
        if index_off + index_len > mf.size:
            raise TruncatedError(
                fmt=FMT,
                obj="index",
                offset=index_off,
                detail="ends past end of file",
                expected=f"end <= {mf.size}",
                got=index_off + index_len,
            )
        self.header = {"header_len": header_len, "index_off": index_off, "index_len": index_len}
        raw = mf.u8(index_off, index_len, "index").tobytes()
        index = jsonio.loads(raw, fmt=FMT, what="index", offset=index_off, limit=MAX_INDEX_SIZE)
        if not isinstance(index, dict):
            raise FormatError(fmt=FMT, obj="index", offset=index_off, detail="not a JSON object")
        if index.get("format") != FORMAT_NAME:
            raise FormatError(
                fmt=FMT,
                obj="index",
                offset=index_off,
                field="format",
                expected=repr(FORMAT_NAME),
                got=repr(index.get("format")),
            )
        version = index.get("version", "1.0.0")
        if not isinstance(version, str) or version.split(".")[0] != "1":
            raise UnsupportedError(
                fmt=FMT,
                obj="index",
                offset=index_off,
                field="version",
                detail="unsupported",
                expected="1.x",
                got=version,
            )
        if version not in KNOWN_VERSIONS:
            msg = describe(
                FMT,
                "index",
                offset=index_off,
                field="version",
                detail="newer than this reader knows",
                expected=" | ".join(KNOWN_VERSIONS),
                got=version,
            )
            strict_or_warn(self.strict, msg, UnsupportedError)
        self.index: dict[str, Any] = index
        self.version: str = version
        self.created_at_unix = index.get("created_at_unix")
        metadata = index.get("metadata", {})
        if not isinstance(metadata, dict):
            raise FormatError(
                fmt=FMT, obj="index", offset=index_off, field="metadata", detail="not a JSON object"
            )
        self.metadata: dict[str, Any] = metadata
        hashes = metadata.get("chunk_hashes", {})
        if not isinstance(hashes, dict):
            raise FormatError(
                fmt=FMT,
                obj="index",
                offset=index_off,
                field="metadata.chunk_hashes",
                detail="not a JSON object",
            )
        self._chunk_hashes = hashes
        self._parse_chunks(index.get("chunks", []), index_off)
        self.manifest_ok = self._check_manifest()

    def _parse_chunks(self, entries: object, index_off: int) -> None:
        if not isinstance(entries, list):
            raise FormatError(
                fmt=FMT, obj="index", offset=index_off, field="chunks", detail="not a JSON array"
            )
        chunks: list[ChunkInfo] = []
        by_name: dict[str, ChunkInfo] = {}
        for i, e in enumerate(entries):
            where = f"index chunk #{i}"
            if not isinstance(e, dict):
                raise FormatError(fmt=FMT, obj=where, offset=index_off, detail="not an object")
            e = dict(e)
            e.setdefault("ecc_algo", "none")
            e.setdefault("ecc_len", 0)
            e.setdefault("header_len", CHUNK_HEADER_LEN)
            missing = [k for k in ENTRY_KEYS if k not in e]
            if missing:
                raise FormatError(
                    fmt=FMT, obj=where, offset=index_off, detail=f"missing keys {missing}"
                )
            for k in ("name", "ctype", "sha256", "ecc_algo"):
                if not isinstance(e[k], str):
                    raise FormatError(
                        fmt=FMT,
                        obj=where,
                        offset=index_off,
                        field=k,
                        detail="not a string",
                        got=e[k],
                    )
            for k in (
                "flags",
                "offset",
                "header_len",
                "comp_len",
                "uncomp_len",
                "crc32c",
                "ecc_len",
            ):
                if not _is_int(e[k]):
                    raise FormatError(
                        fmt=FMT,
                        obj=where,
                        offset=index_off,
                        field=k,
                        detail="not a non-negative integer",
                        got=e[k],
                    )
            name = e["name"]
            if name in by_name:
                raise FormatError(
                    fmt=FMT,
                    obj=f"chunk {name!r}",
                    offset=index_off,
                    detail="name appears twice in the index",
                )
            if len(e["ctype"]) != 4 or not e["ctype"].isascii():
                raise FormatError(
                    fmt=FMT,
                    obj=f"chunk {name!r}",
                    offset=index_off,
                    field="ctype",
                    detail="not 4 ASCII characters",
                    got=e["ctype"],
                )
            if e["header_len"] != CHUNK_HEADER_LEN:
                raise FormatError(
                    fmt=FMT,
                    obj=f"chunk {name!r}",
                    offset=index_off,
                    field="header_len",
                    expected=CHUNK_HEADER_LEN,
                    got=e["header_len"],
                )
            if _digest.split(e["sha256"]) is None:
                raise FormatError(
                    fmt=FMT,
                    obj=f"chunk {name!r}",
                    offset=index_off,
                    field="sha256",
                    detail="not a SHA-256 digest",
                    got=e["sha256"],
                )
            info = ChunkInfo(**{k: e[k] for k in ENTRY_KEYS})
            chunks.append(info)
            by_name[name] = info
        self.chunks: list[ChunkInfo] = chunks
        self._by_name = by_name
        # where each chunk must end: the start of the next chunk in the file, or the index
        starts = sorted({c.offset for c in chunks})
        self._bound: dict[str, tuple[int, str]] = {}
        for c in chunks:
            i = bisect.bisect_right(starts, c.offset)
            if i < len(starts) and starts[i] < index_off:  # starts is sorted: O(log n) per chunk
                self._bound[c.name] = (starts[i], "the next chunk")
            else:
                self._bound[c.name] = (index_off, "the index")

    def _check_manifest(self) -> bool | None:
        stored = self.metadata.get("manifest_hash")
        if stored is None:
            return None
        where = "index metadata"
        off = self.header["index_off"]
        actual = sha256_hex(_digest.manifest_source(self.metadata))
        ok = _digest.matches(stored, actual, self._key) if isinstance(stored, str) else False
        if ok is None:
            if self.strict:
                raise IntegrityError(
                    fmt=FMT,
                    obj=where,
                    offset=off,
                    field="manifest_hash",
                    detail="hmac-sha256 digest and no hmac_key given",
                )
            return None
        if not ok:
            parts = _digest.split(stored) if isinstance(stored, str) else None
            if parts is not None and (parts[0] != "hmac-sha256:" or self._key is not None):
                actual = _digest.make(actual, parts[0], self._key)
            msg = describe(
                FMT,
                where,
                offset=off,
                field="manifest_hash",
                detail="metadata does not match its hash",
                expected=stored,
                got=actual,
            )
            strict_or_warn(self.strict, msg, IntegrityError)
        return ok

    # -- chunk table ------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [c.name for c in self.chunks]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self.chunks)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __getitem__(self, name: str) -> Any:
        """The decoded chunk: JSON value, ``dict`` of arrays, or the payload (class doc)."""
        ctype = self.chunk(name).ctype
        if ctype in JSON_CTYPES:
            return self.read_json(name)
        if ctype in TENSOR_CTYPES:
            return self.read_state_dict(name)
        return self.read(name)

    def info(self, name: str) -> TensorInfo:
        """The chunk's index entry in the common record (``extras`` has the FOLD fields)."""
        c = self.chunk(name)
        return TensorInfo(
            name=c.name,
            dtype="uint8",
            shape=(c.uncomp_len,),
            byte_range=(c.payload_offset, c.payload_offset + c.comp_len),
            encoding=c.compression,
            checksum=f"crc32c:{c.crc32c:08x}",
            extras={
                "ctype": c.ctype,
                "sha256": c.sha256,
                "ecc_algo": c.ecc_algo,
                "ecc_len": c.ecc_len,
                "offset": c.offset,
                "stored": c.comp_len,
            },
        )

    def chunk(self, name: str) -> ChunkInfo:
        """The index entry of chunk ``name`` (KeyError when absent)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"{FMT}: no chunk named {name!r}; chunks are {self.names}") from None

    @property
    def is_mind(self) -> bool:
        """True when the file has a chunk named ``ai_graph`` or ``ai_vectors`` (a ``.mind``)."""
        return any(n in self._by_name for n in MIND_CHUNKS)

    # -- chunk reading ----------------------------------------------------------------------
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
            if src[field] > MAX_CHUNK_SIZE:
                raise LimitError(
                    fmt=FMT,
                    obj=c.what,
                    offset=c.offset + CHUNK_HEADER.offset(field),
                    field=field,
                    detail="above MAX_CHUNK_SIZE",
                    expected=f"<= {MAX_CHUNK_SIZE}",
                    got=src[field],
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
            return comp
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
        if c.uncomp_len > MAX_CHUNK_SIZE:
            raise LimitError(
                fmt=FMT,
                obj=c.what,
                offset=c.offset + CHUNK_HEADER.offset("uncomp_len"),
                field="uncomp_len",
                detail="above MAX_CHUNK_SIZE",
                expected=f"<= {MAX_CHUNK_SIZE}",
                got=c.uncomp_len,
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

    def read(
        self, name: str, verify: bool | str = True, *, budget: Budget | None = None
    ) -> np.ndarray:
        """The payload of chunk ``name`` as a read-only ``uint8`` array.

        Uncompressed chunks whose CRC-32C holds are zero-copy views of the file's mapping.
        With ``verify`` (default) the CRC-32C, SHA-256 (or HMAC) and ``chunk_hashes`` entry
        are checked (``verify="crc"``: CRC-32C only, the fastest check that still triggers
        repair), and a CRC failure is repaired with the chunk's Reed-Solomon parity when
        it has some. Raises a :mod:`tenfold.errors` exception naming the chunk and offset.
        """
        c = self.chunk(name)
        st = self.load_comp(name, verify)
        return self.decode(c, st.comp, budget)

    def read_bytes(self, name: str, verify: bool = True) -> bytes:
        """The payload of chunk ``name`` as ``bytes`` (a copy)."""
        return self.read(name, verify).tobytes()

    def read_json(self, name: str, verify: bool = True) -> Any:
        """The decoded JSON value of chunk ``name``."""
        return _payloads.json_load(self.read(name, verify), self.chunk(name).what)

    def read_arrays(
        self, name: str, verify: bool = True, *, budget: Budget | None = None
    ) -> dict[str, np.ndarray]:
        """The arrays of an ``NPZ0`` chunk (no pickle); the decoded chunk and every array
        count against one budget (default: a fresh one from ``limits``)."""
        budget = self.limits.budget() if budget is None else budget
        return _payloads.npz_load(
            self.read(name, verify, budget=budget),
            self.chunk(name).what,
            limits=self.limits,
            budget=budget,
        )

    def read_state_dict(
        self,
        name: str = "torch_state",
        verify: bool = True,
        *,
        framework: str = "numpy",
        budget: Budget | None = None,
    ) -> dict[str, Any]:
        """The tensors of a ``STEN`` (safetensors) or ``TSAV`` (torch.save) chunk.

        ``STEN`` needs no torch and gives read-only NumPy views. ``TSAV`` needs torch and is
        loaded with ``weights_only=True``; a pyfolds payload ``{"state_dict": ...}`` gives its
        state dict. ``framework="torch"`` returns torch tensors instead of NumPy arrays.
        """
        c = self.chunk(name)
        budget = self.limits.budget() if budget is None else budget
        buf = self.read(name, verify, budget=budget)
        if c.ctype == "TSAV":
            obj = _payloads.torch_load(buf, c.what)
            if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
                obj = obj["state_dict"]
            if not isinstance(obj, dict):
                raise FormatError(fmt=FMT, obj=c.what, detail="torch payload is not a dict")
            if framework == "torch":
                return dict(obj)
            return {k: _payloads.torch_to_numpy(v) for k, v in obj.items()}
        if c.ctype == "NPZ0":
            tensors: dict[str, Any] = _payloads.npz_load(
                buf, c.what, limits=self.limits, budget=budget
            )
        else:
            tensors = _payloads.safetensors_load(buf, c.what)
        if framework == "torch":
            return {k: _payloads.numpy_to_torch(v) for k, v in tensors.items()}
        return tensors

    def verify(self) -> Any:
        """Per-chunk report (ok, repaired, damaged); see :func:`tenfold.fold.verify`."""
        from .verify import verify_reader

        return verify_reader(self)


_PARALLEL_MIN = 4 << 20


def _sha_async(buf: np.ndarray) -> concurrent.futures.Future:
    """SHA-256 hex of ``buf`` computed in a worker thread (hashlib releases the GIL).

    The pool is :func:`tenfold.core.parallel.shared`, which a forked child recreates.
    """
    return parallel.submit(sha256_hex, buf)


def strict_or_warn(strict: bool, msg: str, cls: type[Exception]) -> bool:
    """Raise ``cls(msg)`` in strict mode, else emit a :class:`FoldWarning`."""
    if strict:
        raise cls(msg)
    warnings.warn(msg, FoldWarning, stacklevel=4)
    return True

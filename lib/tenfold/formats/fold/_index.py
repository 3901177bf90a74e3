"""FOLD header and JSON index: parse and validate them into :class:`Index` (no chunk is read).

Every check names the field and its offset; the index's chunk entries become :class:`ChunkInfo`
records, each with the bound its payload must end before (the next chunk or the index).
"""

from __future__ import annotations

import bisect
import dataclasses
import warnings
from typing import Any

from ...core import jsonio
from ...core.bounds import check_limit, truncated
from ...core.checksums import sha256_hex
from ...core.mapped import MappedFile
from ...errors import (
    FormatError,
    IntegrityError,
    TruncatedError,
    UnsupportedError,
    describe,
)
from . import _digest
from ._spec import (
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
    MAX_INDEX_SIZE,
    TEXT_KEYS,
    parse_ecc_algo,
)

__all__ = ["FoldWarning", "ChunkInfo", "Index", "parse", "strict_or_warn"]


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
class Index:
    """What the header and the index say."""

    header: dict[str, int]
    index: dict[str, Any]
    version: str
    metadata: dict[str, Any]
    chunk_hashes: dict[str, Any]
    chunks: list[ChunkInfo]
    by_name: dict[str, ChunkInfo]
    #: chunk name -> (offset its payload must end before, what is there)
    bound: dict[str, tuple[int, str]]
    #: True / False when ``manifest_hash`` matches / does not; None when it cannot be checked
    manifest_ok: bool | None


def parse(mf: MappedFile, *, strict: bool, key: bytes | None) -> Index:
    """Parse and validate the header and the index of ``mf``."""
    header = parse_header(mf)
    index_off = header["index_off"]
    index, version, metadata, hashes = parse_json(mf, header, strict)
    chunks, by_name, bound = parse_chunks(index.get("chunks", []), index_off)
    manifest_ok = check_manifest(metadata, index_off, key, strict)
    return Index(header, index, version, metadata, hashes, chunks, by_name, bound, manifest_ok)


def parse_header(mf: MappedFile) -> dict[str, int]:
    """The file header's fields, checked against the file."""
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
    check_limit(
        FMT,
        "header",
        index_len,
        MAX_INDEX_SIZE,
        field="index_len",
        offset=HEADER.offset("index_len"),
        detail="above MAX_INDEX_SIZE",
    )
    if index_off + index_len > mf.size:  # the header places the index past the end
        need = index_off + index_len
        raise truncated(FMT, mf.size, need, "header", obj="index", offset=index_off)
    return {"header_len": header_len, "index_off": index_off, "index_len": index_len}


def parse_json(
    mf: MappedFile, header: dict[str, int], strict: bool
) -> tuple[dict[str, Any], str, dict[str, Any], dict[str, Any]]:
    """The index JSON: (index, version, metadata, metadata.chunk_hashes)."""
    index_off, index_len = header["index_off"], header["index_len"]
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
        strict_or_warn(strict, msg, UnsupportedError, stacklevel=6)
    metadata = index.get("metadata", {})
    if not isinstance(metadata, dict):
        raise FormatError(
            fmt=FMT, obj="index", offset=index_off, field="metadata", detail="not a JSON object"
        )
    hashes = metadata.get("chunk_hashes", {})
    if not isinstance(hashes, dict):
        raise FormatError(
            fmt=FMT,
            obj="index",
            offset=index_off,
            field="metadata.chunk_hashes",
            detail="not a JSON object",
        )
    return index, version, metadata, hashes


def _is_int(v: object) -> bool:
    return type(v) is int and v >= 0


def parse_chunks(
    entries: object, index_off: int
) -> tuple[list[ChunkInfo], dict[str, ChunkInfo], dict[str, tuple[int, str]]]:
    """The chunk entries of the index: (chunks in index order, by name, payload bounds)."""
    if not isinstance(entries, list):
        raise FormatError(
            fmt=FMT, obj="index", offset=index_off, field="chunks", detail="not a JSON array"
        )
    chunks: list[ChunkInfo] = []
    by_name: dict[str, ChunkInfo] = {}
    for i, e in enumerate(entries):
        info = _entry(e, f"index chunk #{i}", index_off, by_name)
        chunks.append(info)
        by_name[info.name] = info
    return chunks, by_name, _bounds(chunks, index_off)


def _entry(e: object, where: str, index_off: int, seen: dict[str, ChunkInfo]) -> ChunkInfo:
    """One index entry, its keys and value types checked (defaults as pyfolds reads them)."""
    if not isinstance(e, dict):
        raise FormatError(fmt=FMT, obj=where, offset=index_off, detail="not an object")
    e = {"ecc_algo": "none", "ecc_len": 0, "header_len": CHUNK_HEADER_LEN, **e}
    missing = [k for k in ENTRY_KEYS if k not in e]
    if missing:
        raise FormatError(fmt=FMT, obj=where, offset=index_off, detail=f"missing keys {missing}")
    for k in (*TEXT_KEYS, *(k for k in ENTRY_KEYS if k not in TEXT_KEYS)):
        text = k in TEXT_KEYS
        if not (isinstance(e[k], str) if text else _is_int(e[k])):
            raise FormatError(
                fmt=FMT,
                obj=where,
                offset=index_off,
                field=k,
                detail="not a string" if text else "not a non-negative integer",
                got=e[k],
            )
    what = f"chunk {e['name']!r}"
    if e["name"] in seen:
        raise FormatError(
            fmt=FMT, obj=what, offset=index_off, detail="name appears twice in the index"
        )
    if len(e["ctype"]) != 4 or not e["ctype"].isascii():
        raise FormatError(
            fmt=FMT,
            obj=what,
            offset=index_off,
            field="ctype",
            detail="not 4 ASCII characters",
            got=e["ctype"],
        )
    if e["header_len"] != CHUNK_HEADER_LEN:
        raise FormatError(
            fmt=FMT,
            obj=what,
            offset=index_off,
            field="header_len",
            expected=CHUNK_HEADER_LEN,
            got=e["header_len"],
        )
    if _digest.split(e["sha256"]) is None:
        raise FormatError(
            fmt=FMT,
            obj=what,
            offset=index_off,
            field="sha256",
            detail="not a SHA-256 digest",
            got=e["sha256"],
        )
    return ChunkInfo(**{k: e[k] for k in ENTRY_KEYS})


def _bounds(chunks: list[ChunkInfo], index_off: int) -> dict[str, tuple[int, str]]:
    """Where each chunk must end: the start of the next chunk in the file, or the index."""
    starts = sorted({c.offset for c in chunks})
    bound: dict[str, tuple[int, str]] = {}
    for c in chunks:
        i = bisect.bisect_right(starts, c.offset)
        if i < len(starts) and starts[i] < index_off:  # starts is sorted: O(log n) per chunk
            bound[c.name] = (starts[i], "the next chunk")
        else:
            bound[c.name] = (index_off, "the index")
    return bound


def check_manifest(
    metadata: dict[str, Any], off: int, key: bytes | None, strict: bool
) -> bool | None:
    """Whether ``manifest_hash`` matches the metadata (None: absent, or HMAC without a key)."""
    stored = metadata.get("manifest_hash")
    if stored is None:
        return None
    where = "index metadata"
    actual = sha256_hex(_digest.manifest_source(metadata))
    ok = _digest.matches(stored, actual, key) if isinstance(stored, str) else False
    if ok is None:
        if strict:
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
        if parts is not None and (parts[0] != "hmac-sha256:" or key is not None):
            actual = _digest.make(actual, parts[0], key)
        msg = describe(
            FMT,
            where,
            offset=off,
            field="manifest_hash",
            detail="metadata does not match its hash",
            expected=stored,
            got=actual,
        )
        strict_or_warn(strict, msg, IntegrityError, stacklevel=6)
    return ok


def strict_or_warn(strict: bool, msg: str, cls: type[Exception], *, stacklevel: int = 4) -> bool:
    """Raise ``cls(msg)`` in strict mode, else emit a :class:`FoldWarning`."""
    if strict:
        raise cls(msg)
    warnings.warn(msg, FoldWarning, stacklevel=stacklevel)
    return True

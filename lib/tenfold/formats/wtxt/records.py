"""The records a parsed WTXT file is described by: one :class:`ChunkInfo` per ``ch`` block,
one :class:`ArrayInfo` per ``arr`` block (its chunks in a compact :class:`ChunkTable` when the
parser keeps no objects), and :class:`Parsed` for the whole file."""

from __future__ import annotations

import array
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from ...core.release import release
from . import _spec as S

__all__ = ["ChunkInfo", "ChunkTable", "ArrayInfo", "Parsed", "chunk_spans", "span"]


def chunk_spans(chunks: Sequence[ChunkInfo]) -> Iterator[tuple[int, int, int, bytes]]:
    """``(off, len, text offset, SHA-256 digest)`` of each chunk (:meth:`ChunkTable.spans`)."""
    if isinstance(chunks, ChunkTable):
        return chunks.spans()
    return ((c.off, c.length, c.text, bytes.fromhex(c.sha256)) for c in chunks)


def span(first: int, last: int) -> str:
    """``line 7`` or ``lines 7-9``."""
    return f"line {first}" if last <= first else f"lines {first}-{last}"


@dataclasses.dataclass
class ChunkInfo:
    """One ``ch`` block: its fields, where it sits in the text, and any damage found."""

    ix: int
    off: int
    length: int
    sha256: str
    crc32c: str
    lines: int
    lineno: int
    offset: int
    damage: str | None = None
    damage_line: int | None = None
    #: offset of the chunk's first base64 line (just after the ``ch`` line)
    text: int = 0


class ChunkTable(Sequence[ChunkInfo]):
    """The chunk rows of one array, stored compactly (about 60 bytes a chunk instead of
    about 550 for :class:`ChunkInfo` objects: a 20 GB file has 600 000 chunks) and rebuilt as
    :class:`ChunkInfo` on access. Used by ``parse(keep=False)`` without ``collect`` (no
    chunk can be damaged then: damage raises)."""

    def __init__(self, clen: int, nbytes: int) -> None:
        self.clen, self.nbytes = clen, nbytes
        self.sha = bytearray()
        self.crc = array.array("I")
        self.pos = array.array("q")  # per chunk: lineno, offset, text

    def append(self, ch: ChunkInfo) -> None:
        self.sha += bytes.fromhex(ch.sha256)
        self.crc.append(int(ch.crc32c, 16))
        self.pos.extend((ch.lineno, ch.offset, ch.text))

    def __len__(self) -> int:
        return len(self.crc)

    def spans(self) -> Iterator[tuple[int, int, int, bytes]]:
        """``(off, len, text offset, SHA-256 digest)`` of every chunk, without building
        :class:`ChunkInfo` rows (the re-read's loop)."""
        sha, pos, clen, nbytes = self.sha, self.pos, self.clen, self.nbytes
        for i in range(len(self.crc)):
            off = i * clen
            length = min(clen, nbytes - off) if nbytes else 0
            yield off, length, pos[3 * i + 2], bytes(sha[32 * i : 32 * i + 32])

    @overload
    def __getitem__(self, i: int) -> ChunkInfo: ...
    @overload
    def __getitem__(self, i: slice) -> list[ChunkInfo]: ...
    def __getitem__(self, i: int | slice) -> ChunkInfo | list[ChunkInfo]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        off = i * self.clen
        length = min(self.clen, self.nbytes - off) if self.nbytes else 0
        lineno, offset, text = self.pos[3 * i : 3 * i + 3]
        return ChunkInfo(
            i,
            off,
            length,
            self.sha[32 * i : 32 * i + 32].hex(),
            f"{self.crc[i]:08x}",
            S.b64_lines(length),
            lineno,
            offset,
            text=text,
        )


@dataclasses.dataclass
class ArrayInfo:
    """One ``arr`` block: header fields, exact header line, chunks and the decoded bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    sha256: str
    hmac: str
    salt: str
    line: str
    lineno: int
    idx: dict[str, str] | None
    chunks: list[ChunkInfo] | ChunkTable
    raw: np.ndarray | None = None
    computed_sha256: str = ""
    hmac_state: str = "unauthenticated"  # "authenticated", "unauthenticated", "unchecked", "bad"
    offset: int = 0
    end_lineno: int = 0  # the ``endarr`` line
    #: decodes the array again from the text (set by :class:`WtxtFile`, which keeps no
    #: decoded bytes: every access decodes and re-checks one array)
    loader: Any = dataclasses.field(default=None, repr=False, compare=False)

    def where(self) -> str:
        """``array 'name' (lines <arr>-<endarr>)``: the object and the lines it spans."""
        return f"array {self.name!r} ({span(self.lineno, self.end_lineno)})"

    @property
    def damaged(self) -> bool:
        return any(c.damage for c in self.chunks)

    def raw_bytes(self) -> np.ndarray:
        """The decoded little-endian bytes (uint8): kept by ``parse(keep=True)``, else
        decoded afresh (and checked again) on every call."""
        if self.raw is not None:
            return self.raw
        assert self.loader is not None, "parse(keep=False) without a loader"
        out: np.ndarray = self.loader(self)
        return out

    def array(self) -> np.ndarray:
        return self.raw_bytes().view(S.DTYPES[self.dtype]).reshape(self.shape)


@dataclasses.dataclass
class Parsed:
    """Everything a WTXT file says, plus what the parser computed from it."""

    meta: dict[str, str]
    cap: list[str]
    root: dict[str, str] | None
    pending: bool
    sign: dict[str, str] | None
    root_end: int
    sign_span: tuple[int, int] | None
    arrays: list[ArrayInfo]
    audit: dict[str, str] | None
    audit_lineno: int | None
    computed_all: str
    computed_fastxor: int
    size: int
    data: np.ndarray
    root_lineno: int = 4
    root_offset: int = 0
    sign_lineno: int | None = None

    def message(self, sign_all: bool) -> bytes | bytearray:
        """The bytes a signature covers."""
        if sign_all:
            assert self.sign_span is not None
            a, b = self.sign_span
            # one copy of the file's bytes (Ed25519 takes its message in one piece), not three
            out = bytearray(a + self.data.size - b)
            out[:a] = S.mview(self.data[:a])
            out[a:] = S.mview(self.data[b:])
            release(self.data[b:])  # the map's pages: the copy holds them now
            return out
        return self.data[: self.root_end].tobytes()

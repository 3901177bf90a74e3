"""NumPy ``.npz`` archives read without pickle and without trusting any size: :class:`Archive`.

One parser serves ``.npz`` files and FOLD ``NPZ0`` chunks. Nothing in the archive is trusted
before it is checked: encrypted members and compression methods ``np.savez`` never writes are
refused; a member's declared size must be consistent with its stored size (equal when stored,
within deflate's maximum ratio when deflated) and with its ``.npy`` header (shape checked as
every reader checks shapes); and each array's bytes are charged to the call's decode budget
before they are allocated, so a small archive cannot make one call allocate without bound.
"""

from __future__ import annotations

import contextlib
import io
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ...core.alloc import empty
from ...core.bounds import DEFAULT_LIMITS, Budget, Limits, checked_numel
from ...core.buffers import BufferFile
from ...core.checksums import crc32
from ...core.release import release
from ...errors import (
    FormatError,
    IntegrityError,
    LimitError,
    TenfoldError,
    TruncatedError,
    UnsupportedError,
    describe,
)
from ._endrecord import read_end_record
from ._npy import npy_header

__all__ = ["Archive", "Member", "FMT"]

FMT = "npz"
#: deflate cannot expand by more than about 1032:1 (258-byte matches coded in 2 bits)
_DEFLATE_MAX_RATIO = 1032
_PIECE = 16 << 20
#: map pages already consumed are given back every this many bytes
_RELEASE = 4 << 20
# what zipfile, zlib and numpy's header parser raise on a damaged archive
_ARCHIVE_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,
    NotImplementedError,
    RuntimeError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    OverflowError,
    SyntaxError,
    UnicodeError,
)


def _zip_error(exc: Exception, fmt: str, where: str, zi: zipfile.ZipInfo) -> TenfoldError:
    cls = IntegrityError if "CRC" in str(exc) else FormatError
    return cls(
        describe(fmt, where, offset=zi.header_offset, detail=f"{type(exc).__name__}: {exc}"[:300])
    )


class Member:
    """One checked member: its zip entry and, once read, its ``.npy`` header."""

    __slots__ = ("name", "info", "where", "dtype", "shape", "fortran", "header_len")

    def __init__(self, name: str, info: zipfile.ZipInfo, where: str) -> None:
        self.name = name
        self.info = info
        self.where = where
        self.dtype: np.dtype | None = None
        self.shape: tuple[int, ...] = ()
        self.fortran = False
        self.header_len = 0

    @property
    def stored(self) -> bool:
        return self.info.compress_type == zipfile.ZIP_STORED


class Archive:
    """The one hardened ``.npz`` parser (``.npz`` files, FOLD ``NPZ0`` chunks, the ``npz``
    reader and ``convert``): the zip directory is read and every member checked when the
    archive is opened, a member's ``.npy`` header when it is first asked for, and its bytes
    only when it is read, one member at a time.

    Checked before anything is allocated: the member count (``limits.max_objects``),
    encryption, the compression method (stored or deflate only), the compressed size against
    the archive, a stored member's two sizes, a deflated member's size against deflate's
    largest expansion, the size against ``limit``, duplicate names (and, with
    ``require_npy``, names not ending in ``.npy``). Then per member: the ``.npy`` version and
    header (any parse failure is a :class:`FormatError`), object dtypes (need pickle: refused,
    nothing is ever unpickled), sub-array dtypes, the shape (as every reader checks shapes)
    and that the header describes exactly the member's bytes. Every array read is charged to
    a decode budget before it is allocated; the zip CRC-32 is checked on every read.

    ``source``: a seekable binary file, or a uint8 array (e.g. a file map: stored members can
    then be returned as zero-copy views, :meth:`read` with ``copy=False``).
    """

    def __init__(
        self,
        source: Any,
        *,
        fmt: str = FMT,
        what: str = "file",
        limits: Limits = DEFAULT_LIMITS,
        limit: int | None = None,
        require_npy: bool = False,
        label: Callable[[str, zipfile.ZipInfo], str] | None = None,
    ) -> None:
        self.fmt, self.what, self.limits = fmt, what, limits
        self._explicit_limit = limit is not None
        self.limit = limits.max_decoded_bytes if limit is None else limit
        self._u8: np.ndarray | None = None
        if isinstance(source, np.ndarray):
            self._u8 = source
            f: Any = BufferFile(source)
        elif hasattr(source, "seek"):
            f = source
        else:
            f = io.BytesIO(memoryview(source).tobytes())
        self._f = f
        self._label = label or (lambda name, zi: f"{what} array {name!r}")
        self.require_npy = require_npy
        try:
            self.size = f.seek(0, io.SEEK_END)
            f.seek(0)
            self._zip = zipfile.ZipFile(f)
            self.members = self._check_directory()
        except TenfoldError:
            raise
        except _ARCHIVE_ERRORS as exc:
            raise FormatError(
                describe(fmt, what, detail=f"bad npz payload: {type(exc).__name__}: {exc}"[:300])
            ) from None

    @property
    def comment(self) -> bytes:
        """The zip archive's comment (``b""`` when it has none)."""
        return self._zip.comment

    def close(self) -> None:
        z = getattr(self, "_zip", None)
        if z is not None:
            z.close()
        if isinstance(self._f, BufferFile):
            self._f.detach_buffer()
        self._u8 = None

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_directory(self) -> dict[str, Member]:
        infos = self._zip.infolist()
        # zipfile reads as many central-directory entries as fit before the end record and
        # ignores the record's own count: a damaged entry would silently drop a member
        end = read_end_record(self._f)
        if end is not None and end[0] != len(infos):
            raise FormatError(
                describe(
                    self.fmt,
                    f"{self.what} zip end record",
                    offset=end[1],
                    field="entries",
                    detail="the end record's entry count disagrees with the entries found",
                    expected=end[0],
                    got=len(infos),
                )
            )
        if len(infos) > self.limits.max_objects:
            raise LimitError(
                describe(
                    self.fmt,
                    f"{self.what} zip directory",
                    field="members",
                    detail="above max_objects",
                    expected=f"<= {self.limits.max_objects}",
                    got=len(infos),
                )
            )
        out: dict[str, Member] = {}
        for zi in infos:
            is_npy = zi.filename.endswith(".npy")
            name = zi.filename[:-4] if is_npy else zi.filename
            where = self._label(name, zi)
            self._check_member(zi, where)
            if not is_npy and self.require_npy:
                raise FormatError(
                    describe(self.fmt, where, offset=zi.header_offset, detail="not a .npy member")
                )
            if name in out:
                raise FormatError(
                    describe(self.fmt, where, offset=zi.header_offset, detail="appears twice")
                )
            out[name] = Member(name, zi, where)
        return out

    def _check_member(self, info: zipfile.ZipInfo, where: str) -> None:
        """Refuse what the central directory says before opening the member."""
        fmt, off = self.fmt, info.header_offset
        if info.flag_bits & 0x1:
            raise UnsupportedError(
                describe(
                    fmt,
                    where,
                    offset=off,
                    field="zip flags",
                    detail="encrypted member",
                    expected="not encrypted",
                    got=f"flag bits 0x{info.flag_bits:04x}",
                )
            )
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise UnsupportedError(
                describe(
                    fmt,
                    where,
                    offset=off,
                    field="compression method",
                    detail="not what np.savez writes",
                    expected="0 (stored) | 8 (deflated)",
                    got=info.compress_type,
                )
            )
        if info.compress_size > self.size:
            raise TruncatedError(
                describe(
                    fmt,
                    where,
                    offset=off,
                    field="compressed size",
                    detail="larger than the archive",
                    expected=f"<= {self.size}",
                    got=info.compress_size,
                )
            )
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=off,
                    field="size",
                    detail="stored member whose size differs from its stored size",
                    expected=info.compress_size,
                    got=info.file_size,
                )
            )
        most = info.compress_size * _DEFLATE_MAX_RATIO + 1024
        if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > most:
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=off,
                    field="size",
                    detail="more than deflate can expand its stored size to",
                    expected=f"<= {most}",
                    got=info.file_size,
                )
            )
        if info.file_size > self.limit:
            raise LimitError(
                describe(
                    fmt,
                    where,
                    offset=off,
                    field="size",
                    detail="above limit" if self._explicit_limit else "above max_decoded_bytes",
                    expected=f"<= {self.limit}",
                    got=info.file_size,
                )
            )

    # -- one member ----------------------------------------------------------------------------
    def _guard(self, m: Member, exc: Exception) -> TenfoldError:
        if isinstance(exc, zipfile.BadZipFile):
            return _zip_error(exc, self.fmt, m.where, m.info)
        return FormatError(
            describe(
                self.fmt,
                m.where,
                offset=m.info.header_offset,
                detail=f"bad npz member: {type(exc).__name__}: {exc}"[:300],
            )
        )

    def member(self, name: str) -> Member:
        """Member ``name`` with its ``.npy`` header read and checked (KeyError if absent)."""
        m = self.members[name]
        if m.dtype is None:
            try:
                with self._zip.open(m.info) as f:
                    self._header(m, f)
            except TenfoldError:
                raise
            except _ARCHIVE_ERRORS as exc:
                raise self._guard(m, exc) from None
        return m

    def _header(self, m: Member, f: Any) -> None:
        fmt, where, off = self.fmt, m.where, m.info.header_offset
        try:
            shape, fortran, dtype = npy_header(f, fmt, where)
        except TenfoldError:
            raise
        except zipfile.BadZipFile as exc:
            raise _zip_error(exc, fmt, where, m.info) from None
        except Exception as exc:  # noqa: BLE001 - numpy parses the header text with ast and
            # tokenize, which raise many kinds (TokenError, SyntaxError, RecursionError...)
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=off,
                    field="npy header",
                    detail=f"unreadable: {type(exc).__name__}: {exc}"[:300],
                )
            ) from None
        if dtype.hasobject:
            raise UnsupportedError(
                describe(
                    fmt,
                    where,
                    offset=off,
                    field="dtype",
                    detail="object arrays need pickle (refused)",
                    expected="a dtype without objects",
                    got=str(dtype),
                )
            )
        if dtype.subdtype is not None:
            raise UnsupportedError(
                describe(fmt, where, field="dtype", detail="sub-array dtype", got=str(dtype))
            )
        # NumPy makes ``U0``/``S0`` arrays ``U1``/``S1``: check the shape at that size
        made = np.empty(0, dtype).itemsize
        count = checked_numel(fmt, where, shape, self.limits, itemsize=max(dtype.itemsize, made))
        header_len = f.tell()
        nbytes = count * dtype.itemsize
        if nbytes != m.info.file_size - header_len:
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=off,
                    field="size",
                    detail=".npy header does not describe the member's bytes",
                    expected=m.info.file_size - header_len,
                    got=nbytes,
                )
            )
        m.dtype, m.shape, m.fortran, m.header_len = dtype, tuple(shape), bool(fortran), header_len

    def data_offset(self, name: str) -> int | None:
        """Archive offset of a stored member's array bytes (None when deflated)."""
        m = self.member(name)
        if not m.stored:
            return None
        return self._payload_offset(m) + m.header_len

    def _payload_offset(self, m: Member) -> int:
        """Where the member's (stored or deflated) bytes start, from its local header."""
        zi = m.info
        local = self._local_header(m)
        n, extra = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
        if self._u8 is not None:  # zipfile makes this check on its own read path
            raw = bytes(self._u8[zi.header_offset + 30 : zi.header_offset + 30 + n])
            name = raw.decode("utf-8" if zi.flag_bits & 0x800 else "cp437", "replace")
            if name != zi.orig_filename:
                raise FormatError(
                    describe(
                        self.fmt,
                        m.where,
                        offset=zi.header_offset,
                        field="local header name",
                        detail="differs from the zip directory's",
                        expected=repr(zi.orig_filename),
                        got=repr(name),
                    )  # fmt: skip
                )
        return zi.header_offset + 30 + n + extra

    def _from_map(self, m: Member, out: memoryview) -> None:
        """Member ``m``'s array bytes into ``out``, straight from the archive's map: stored
        bytes copied, deflated ones inflated with zlib in 1 MiB steps (no copy of the member,
        no zipfile buffers), the CRC-32 of the whole member (``.npy`` header included)
        checked, and the map pages read given back as they are consumed."""
        assert self._u8 is not None
        zi, u8 = m.info, self._u8
        start = self._payload_offset(m)
        end = start + zi.compress_size
        if end > u8.size:
            raise TruncatedError(
                describe(
                    self.fmt,
                    m.where,
                    offset=zi.header_offset,
                    detail="member ends past the archive",
                    expected=f"<= {u8.size}",
                    got=end,
                )  # fmt: skip
            )
        total, hlen = zi.file_size, m.header_len
        crc, done = 0, 0  # done: decompressed bytes so far (header included)
        for data in self._pieces(m, u8, start, end):
            k = len(data)
            if done + k > total:
                raise FormatError(
                    describe(
                        self.fmt,
                        m.where,
                        offset=zi.header_offset,
                        field="size",
                        detail="member inflates past its declared size",
                        expected=total,
                        got=f"> {total}",
                    )  # fmt: skip
                )
            crc = crc32(data, crc, threads=1)
            lo = max(done, hlen)
            if done + k > lo:
                out[lo - hlen : done + k - hlen] = memoryview(data)[lo - done :]
            done += k
        if done != total:
            raise self._ends_early(m, total, done)
        if crc != zi.CRC:
            raise self._bad_crc(m, crc)

    def _pieces(self, m: Member, u8: np.ndarray, start: int, end: int) -> Iterator[Any]:
        """Member ``m``'s bytes (archive range ``[start, end)``), stored or inflated, in
        pieces of at most 1 MiB; the map pages read are given back as they are consumed."""
        step = 1 << 20
        released = start
        if m.stored:
            for pos in range(start, end, step):
                yield u8[pos : min(pos + step, end)].data
                if pos - released >= _RELEASE:
                    release(u8[released:pos])
                    released = pos
        else:
            d = zlib.decompressobj(-15)
            pos = start
            pending: Any = b""
            while not d.eof:
                if not pending:
                    if pos >= end:
                        break
                    pending = u8[pos : min(pos + step, end)].data
                    pos += len(pending)
                yield d.decompress(pending, step)
                pending = d.unconsumed_tail
                if pos - released >= _RELEASE:
                    release(u8[released:pos])
                    released = pos
            if not d.eof:
                raise FormatError(
                    describe(
                        self.fmt,
                        m.where,
                        offset=m.info.header_offset,
                        detail="deflate stream ends early",
                    )  # fmt: skip
                )
        release(u8[released:end])

    def _bad_crc(self, m: Member, crc: int) -> IntegrityError:
        zi = m.info
        return IntegrityError(
            describe(
                self.fmt,
                m.where,
                offset=zi.header_offset,
                detail=f"Bad CRC-32 for file {zi.filename!r}",
                expected=f"{zi.CRC:08x}",
                got=f"{crc:08x}",
            )
        )

    def _ends_early(self, m: Member, expected: int, got: int) -> FormatError:
        return FormatError(
            describe(
                self.fmt,
                m.where,
                offset=m.info.header_offset,
                field="data size",
                detail="member ends early",
                expected=expected,
                got=got,
            )
        )

    def _local_header(self, m: Member) -> bytes:
        off = m.info.header_offset
        if self._u8 is not None:
            local = bytes(self._u8[off : off + 30])
        else:
            # the file is shared with zipfile's member readers, which seek under this lock
            with getattr(self._zip, "_lock", contextlib.nullcontext()):
                self._f.seek(off)
                local = bytes(self._f.read(30))
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise FormatError(
                describe(
                    self.fmt,
                    m.where,
                    offset=m.info.header_offset,
                    field="local header",
                    detail="missing or truncated",
                )
            )
        return local

    def read(self, name: str, budget: Budget | None = None, *, copy: bool = True) -> np.ndarray:
        """Array ``name``: an owned array charged to ``budget`` (default: a fresh one), or
        with ``copy=False`` a read-only view of the archive's map for a stored member of an
        archive opened on an array (CRC-32 checked over the mapped bytes; deflated members
        are still decoded)."""
        m = self.member(name)
        assert m.dtype is not None
        zi = m.info
        nbytes = zi.file_size - m.header_len
        if not copy and m.stored and self._u8 is not None and nbytes and m.dtype.itemsize:
            start = self.data_offset(name)
            assert start is not None
            hstart = start - m.header_len
            if start + nbytes > self._u8.size:
                raise TruncatedError(
                    describe(
                        self.fmt,
                        m.where,
                        offset=zi.header_offset,
                        detail="member ends past the archive",
                        expected=f"<= {self._u8.size}",
                        got=start + nbytes,
                    )
                )
            crc = crc32(self._u8[hstart : start + nbytes])
            if crc != zi.CRC:
                raise self._bad_crc(m, crc)
            view = self._u8[start : start + nbytes].view(m.dtype)
            return view.reshape(m.shape, order="F" if m.fortran else "C")  # type: ignore[call-overload,no-any-return]
        if budget is None:
            budget = self.limits.budget()
        if self._u8 is not None:
            count = int(np.prod(m.shape, dtype=np.int64)) if m.shape else 1
            arr = empty(count, m.dtype, fmt=self.fmt, what=m.where, offset=zi.header_offset,
                        budget=budget)  # fmt: skip
            mv = memoryview(arr.view(np.uint8)) if nbytes else memoryview(bytearray())  # type: ignore[arg-type]
            try:
                self._from_map(m, mv)
            except TenfoldError:
                raise
            except _ARCHIVE_ERRORS as exc:
                raise self._guard(m, exc) from None
            return arr.reshape(m.shape, order="F" if m.fortran else "C")  # type: ignore[call-overload,no-any-return]
        try:
            with self._zip.open(zi) as f:
                f.read(m.header_len)  # checked by member(); numpy caps a header's size
                count = int(np.prod(m.shape, dtype=np.int64)) if m.shape else 1
                arr = empty(
                    count, m.dtype, fmt=self.fmt, what=m.where, offset=zi.header_offset,
                    budget=budget,
                )  # fmt: skip
                mv = memoryview(arr.view(np.uint8)) if nbytes else memoryview(bytearray())  # type: ignore[arg-type]
                got = 0
                while got < nbytes:
                    k = f.readinto(mv[got : got + min(nbytes - got, _PIECE)])  # type: ignore[attr-defined]
                    if not k:
                        break
                    got += k
                if got != nbytes:
                    raise self._ends_early(m, nbytes, got)
                f.read(1)  # reach the end: zipfile checks the CRC-32 there
        except TenfoldError:
            raise
        except _ARCHIVE_ERRORS as exc:
            raise self._guard(m, exc) from None
        return arr.reshape(m.shape, order="F" if m.fortran else "C")  # type: ignore[call-overload,no-any-return]

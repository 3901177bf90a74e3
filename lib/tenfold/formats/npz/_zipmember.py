"""A stored (uncompressed) zip member written with tenfold's CRC-32 kernel: :func:`open_member`.

``zipfile.ZipFile.open(info, "w")`` checks every byte it writes with ``zlib.crc32`` (about
4 GB/s with zlib 1.2.x, a quarter of the time of a conversion to ``.npz``). For a stored
member of a seekable archive, :class:`StoredMember` writes the same bytes itself, with the
CRC-32 from :func:`tenfold.core.checksums.crc32` (carry-less-multiply folding):

- the local header from ``ZipInfo.FileHeader(zip64=True)`` (``force_zip64``: its ZIP64 extra
  field is always there, so the header has the same length before and after the sizes are
  known), written once with CRC and sizes zero, and again over it when the member is closed;
- the data as it comes (the caller's slices; nothing is buffered);
- the member then joins the archive's directory (``filelist``, ``NameToInfo``, ``start_dir``),
  which ``ZipFile.close`` writes as it writes every other member's (ZIP64 records included).

So the archive is byte-identical to zipfile's own (tests compare the two, ZIP64 paths
included). Deflated members, and archives on files that cannot seek (zipfile then writes
data descriptors), still go through ``ZipFile.open``.

``start_dir``, ``filelist`` and ``NameToInfo`` are zipfile's private bookkeeping, so the fast
path is taken only where this Python's zipfile still works as it assumes: the three are there
with the expected types and ``start_dir`` is where the file stands (:func:`_bookkeeping_fits`),
and a small archive written both ways, once per process, comes out byte for byte the same
(:func:`_same_as_zipfile`). Anything else, and every member goes through ``ZipFile.open``:
slower (zlib's CRC-32), never a wrong archive.
"""

from __future__ import annotations

import functools
import io
import weakref
import zipfile
from typing import Any

from ...core.buffers import byte_view
from ...core.checksums import crc32

__all__ = ["open_member", "StoredMember"]


def open_member(zf: zipfile.ZipFile, f: Any, info: zipfile.ZipInfo) -> Any:
    """A writable member ``info`` of ``zf`` (opened on the file ``f``), as a context manager:
    a :class:`StoredMember` for a stored member of a seekable file, else
    ``zf.open(info, "w", force_zip64=True)`` (an archive opened to append, on a file that
    cannot seek, or where zipfile is not as the fast path assumes: see the module doc).
    While a :class:`StoredMember` of ``zf`` is open, another member is refused as zipfile
    refuses one (zipfile does not know of it: its own path would write over it)."""
    if zf in _WRITING:
        raise ValueError("Can't write to the ZIP file while there is another write handle open")
    if (
        info.compress_type == zipfile.ZIP_STORED
        and zf.mode in ("w", "x")  # an archive being written anew (not appended to)
        and f.seekable()
        and _bookkeeping_fits(zf, info)
        and _same_as_zipfile()
    ):
        return StoredMember(zf, info)
    return zf.open(info, "w", force_zip64=True)


def _bookkeeping_fits(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bool:
    """zipfile's private state that :class:`StoredMember` writes to is there as it expects:
    ``start_dir`` (an int: where the next member goes, which is where the file stands),
    ``filelist`` (a list) and ``NameToInfo`` (a dict, not holding ``info``'s name: zipfile
    warns of a duplicate name). A member of ``zf`` still being written through ``ZipFile.open``
    has moved the file past ``start_dir``: zipfile's path then refuses the new one."""
    start = getattr(zf, "start_dir", None)
    return (
        type(start) is int
        and isinstance(getattr(zf, "filelist", None), list)
        and isinstance(getattr(zf, "NameToInfo", None), dict)
        and info.filename not in zf.NameToInfo
        and zf.fp is not None
        and zf.fp.tell() == start
    )


#: the archives with a StoredMember open (zipfile's own flag for this is private)
_WRITING: weakref.WeakSet[zipfile.ZipFile] = weakref.WeakSet()


@functools.cache
def _same_as_zipfile() -> bool:
    """A small archive (two stored members, one of them empty, and a UTF-8 name) written with
    :class:`StoredMember` is byte for byte the one ``ZipFile.open(info, "w", force_zip64=True)``
    writes on this Python; checked once per process."""
    names = ("probe.npy", "\u00e9/empty.npy")
    datas = (b"tenfold" * 3, b"")

    def archive(fast: bool) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", allowZip64=True) as zf:
            for name, data in zip(names, datas, strict=True):
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                if fast and not _bookkeeping_fits(zf, info):
                    raise LookupError("zipfile's bookkeeping is not what StoredMember expects")
                with StoredMember(zf, info) if fast else zf.open(info, "w", force_zip64=True) as m:
                    m.write(data)
        return buf.getvalue()

    try:
        return archive(True) == archive(False)
    except Exception:  # noqa: BLE001 - any surprise in zipfile's internals: its own path
        return False


class StoredMember:
    """A stored member being written to ``zf`` (what ``zf.open(info, "w", force_zip64=True)``
    writes); ``write`` takes any buffer, ``close`` (or the end of a ``with`` block) finishes
    the member."""

    def __init__(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
        self._zf, self._zinfo, self._fp = zf, info, zf.fp
        assert self._fp is not None  # an archive open for writing
        info.flag_bits = 0x00  # as zipfile's: sizes known, no data descriptor
        info.compress_size = 0
        info.CRC = 0
        if not info.external_attr:
            info.external_attr = 0o600 << 16
        self._fp.seek(zf.start_dir)
        info.header_offset = self._fp.tell()
        self._fp.write(info.FileHeader(True))
        self._crc = 0
        self._size = 0
        self.closed = False
        _WRITING.add(zf)

    def write(self, data: Any) -> int:
        """Append ``data`` (any buffer) to the member; returns its size in bytes."""
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        mv = byte_view(data)
        self._crc = crc32(mv, self._crc)
        self._fp.write(mv)  # type: ignore[union-attr]
        self._size += len(mv)
        return len(mv)

    def close(self) -> None:
        """Write the header again with the CRC and sizes, and add the member to the archive's
        directory."""
        if self.closed:
            return
        self.closed = True
        info, fp, zf = self._zinfo, self._fp, self._zf
        _WRITING.discard(zf)
        assert fp is not None
        info.compress_size = info.file_size = self._size
        info.CRC = self._crc
        zf.start_dir = end = fp.tell()
        fp.seek(info.header_offset)
        fp.write(info.FileHeader(True))
        fp.seek(end)
        zf.filelist.append(info)
        zf.NameToInfo[info.filename] = info

    def __enter__(self) -> StoredMember:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# checked on import, with zipfile as this Python ships it (not later, under whatever a caller
# may have wrapped zipfile's CRC-32 or writer with)
_same_as_zipfile()

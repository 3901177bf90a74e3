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
"""

from __future__ import annotations

import zipfile
from typing import Any

from ...core.buffers import byte_view
from ...core.checksums import crc32

__all__ = ["open_member", "StoredMember"]


def open_member(zf: zipfile.ZipFile, f: Any, info: zipfile.ZipInfo) -> Any:
    """A writable member ``info`` of ``zf`` (opened on the file ``f``), as a context manager:
    a :class:`StoredMember` for a stored member of a seekable file, else
    ``zf.open(info, "w", force_zip64=True)`` (an archive opened to append, or on a file
    that cannot seek)."""
    if info.compress_type == zipfile.ZIP_STORED and zf.mode in ("w", "x") and f.seekable():
        return StoredMember(zf, info)  # an archive being written anew (not appended to)
    return zf.open(info, "w", force_zip64=True)


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

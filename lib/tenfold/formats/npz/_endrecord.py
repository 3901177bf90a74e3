"""The entry count a zip archive's end record declares, read here: :func:`read_end_record`.

:mod:`zipfile` reads as many central-directory entries as fit before the end record and does
not compare them with the record's own count, so :class:`~.archive.Archive` compares the two.
zipfile's private reader of the end record (``zipfile._EndRecData``) gives the count; where a
Python's zipfile no longer has it, or it answers in another shape, :func:`read_end_record`
reads the record itself:

- the end of central directory record (22 bytes, ``PK\\x05\\x06``) is the last 22 bytes when the
  archive has no comment, else the last ``PK\\x05\\x06`` in the final 64 KiB + 22 bytes (a comment
  is at most 65,535 bytes; zipfile looks one byte further), as zipfile looks for it;
- its entry count is the total at offset 10 (``<H``), unless the 20 bytes before it are a ZIP64
  locator (``PK\\x06\\x07``) and the 56 before that a ZIP64 end record (``PK\\x06\\x06``), whose
  total at offset 32 (``<Q``) counts instead.
"""

from __future__ import annotations

import io
import struct
from typing import Any

__all__ = ["read_end_record"]

_END = b"PK\x05\x06"
_LOCATOR64 = b"PK\x06\x07"
_END64 = b"PK\x06\x06"
_END_SIZE, _LOCATOR64_SIZE, _END64_SIZE = 22, 20, 56
_SEARCH = 1 << 16  # zipfile looks this far before the last 22 bytes (a comment: < 64 KiB)


def read_end_record(f: Any) -> tuple[int, int] | None:
    """``(entries, offset of the end record)`` read from ``f`` itself (see the module doc)."""
    size = f.seek(0, io.SEEK_END)
    if size < _END_SIZE:
        return None
    back = min(size, _END_SIZE + _SEARCH)
    f.seek(size - back)
    tail = f.read(back)
    if tail[-_END_SIZE:][:4] == _END and tail[-2:] == b"\0\0":
        at = len(tail) - _END_SIZE  # no comment
    else:
        at = tail.rfind(_END)
        if at < 0 or at + _END_SIZE > len(tail):
            return None
    entries = struct.unpack_from("<H", tail, at + 10)[0]
    location = size - back + at
    if location >= _LOCATOR64_SIZE + _END64_SIZE:
        f.seek(location - _LOCATOR64_SIZE - _END64_SIZE)
        before = f.read(_LOCATOR64_SIZE + _END64_SIZE)
        if before[:4] == _END64 and before[_END64_SIZE:][:4] == _LOCATOR64:
            entries = struct.unpack_from("<Q", before, 32)[0]
    return entries, location

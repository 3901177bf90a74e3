"""The entry count a zip archive's end record declares, read here: :func:`read_end_record`.

:mod:`zipfile` reads as many central-directory entries as fit before the end record and does
not compare them with the record's own count, so :class:`~.archive.Archive` compares the two.
:func:`read_end_record` reads the record as zipfile's own private reader of it
(``zipfile._EndRecData``) does, giving the same answers (tests compare the two), without
depending on a name a later Python may drop or change:

- the end of central directory record (:data:`END`, 22 bytes) is the last 22 bytes when the
  archive has no comment, else the last ``PK\\x05\\x06`` in the 64 KiB before them, where zipfile
  looks for it (a comment is at most 65,535 bytes);
- its ``entries`` counts, unless a ZIP64 locator (:data:`LOCATOR64`) stands just before it and
  a ZIP64 end record (:data:`END64`) just before that: then the latter's ``entries`` counts.

The three records are declared here once; the npz reader's account of a cut-short archive
uses them too.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from ...core.records import Record

__all__ = ["END", "END64", "LOCATOR64", "read_end_record"]

#: the end of central directory record (its comment follows it)
END = Record(
    "zip end record",
    [
        ("signature", "S4"),
        ("disk", "<u2"),
        ("directory_disk", "<u2"),
        ("disk_entries", "<u2"),
        ("entries", "<u2"),
        ("directory_size", "<u4"),
        ("directory_offset", "<u4"),
        ("comment_length", "<u2"),
    ],
    22,
)
#: the ZIP64 end record's locator, just before the end record
LOCATOR64 = Record(
    "zip64 end record locator",
    [("signature", "S4"), ("disk", "<u4"), ("end64_offset", "<u8"), ("disks", "<u4")],
    20,
)
#: the ZIP64 end record (fixed part), just before its locator
END64 = Record(
    "zip64 end record",
    [
        ("signature", "S4"),
        ("record_size", "<u8"),
        ("made_by", "<u2"),
        ("needed", "<u2"),
        ("disk", "<u4"),
        ("directory_disk", "<u4"),
        ("disk_entries", "<u8"),
        ("entries", "<u8"),
        ("directory_size", "<u8"),
        ("directory_offset", "<u8"),
    ],
    56,
)
END_SIG, LOCATOR64_SIG, END64_SIG = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"
_SEARCH = 1 << 16  # zipfile looks this far before the last 22 bytes (a comment: < 64 KiB)


def read_end_record(f: Any) -> tuple[int, int] | None:
    """``(entries, offset of the end record)`` read from ``f`` itself (see the module doc)."""
    size = f.seek(0, io.SEEK_END)
    if size < END.size:
        return None
    back = END.size  # an archive without a comment: its last 22 bytes, one small read
    f.seek(size - back)
    tail = f.read(back)
    if tail[:4] == END_SIG and tail[-2:] == b"\0\0":
        at = 0
    else:  # a comment (or bytes) after the record: the 64 KiB before the last 22 bytes
        back = min(size, END.size + _SEARCH)
        f.seek(size - back)
        tail = f.read(back)
        at = tail.rfind(END_SIG)
        if at < 0 or at + END.size > len(tail):
            return None
    entries = int(np.frombuffer(tail, END.dtype, 1, at)["entries"][0])
    location = size - back + at
    if location >= LOCATOR64.size + END64.size:
        f.seek(location - LOCATOR64.size - END64.size)
        before = f.read(LOCATOR64.size + END64.size)
        if before[:4] == END64_SIG and before[END64.size :][:4] == LOCATOR64_SIG:
            entries = int(np.frombuffer(before, END64.dtype, 1)["entries"][0])
    return entries, location

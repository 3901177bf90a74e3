"""TARIDX byte layout (version 1.0), little-endian throughout, no padding anywhere::

    offset        size          content
    0             64            header (HEADER)
    64            ext_bytes     extension block: names in id order joined by b"\\n" (UTF-8)
    off_crash     crash_bytes   crash-stem block: stems of crash ids 1..n_crash joined by b"\\n"
    off_arr       32 * n_rows   rows (ROW), to end of file; off_arr is usually unaligned

Header (64 bytes, HEADER; struct ``<8sHHHHQQIIQQB7x``)::

    0   magic     8s   b"TARIDX\\0\\0"
    8   major     u2   1 (anything else is refused)
    10  minor     u2   0 (a newer minor is accepted)
    12  rec_size  u2   32
    14  hdr_size  u2   64
    16  n_stems   u8   number of distinct samples (keyhash, crashid)
    24  n_rows    u8   number of rows
    32  n_ext     u4   number of extension names (tells an empty block from one empty name)
    36  n_crash   u4   number of crash stems
    40  off_crash u8   64 + len(ext block)
    48  off_arr   u8   off_crash + len(crash block)
    56  flags     u1   bit 0: rows contiguous by (keyhash, crashid)
    57  reserved  7x   ignored

Row (32 bytes, ROW)::

    0   fid      u2  shard id = position of the shard in string-sorted order
    2   offset   u8  byte offset of the member's own ustar header block; payload at offset+512
    10  size     u8  payload size
    18  extid    u2  index into the extension block
    20  crashid  u4  0 = canonical stem of its hash; k >= 1 = crash stem k
    24  keyhash  u8  xxh64(stem as UTF-8, seed 0)
"""

from __future__ import annotations

from ...core.records import Record
from ...errors import factory
from ._format import MAGIC as MAGIC  # the one definition, beside the descriptor

FMT = "taridx"
#: This format's errors: ``raise E.format(obj, field=..., ...)`` (:func:`~tenfold.errors.factory`)
E = factory(FMT)
MAJOR = 1
MINOR = 0
HDR_SIZE = 64
REC_SIZE = 32
FLAG_CONTIGUOUS = 0x01
#: Tar blocks.
BLOCK = 512

HEADER = Record(
    "taridx header",
    [
        ("magic", "S8"),
        ("major", "<u2"),
        ("minor", "<u2"),
        ("rec_size", "<u2"),
        ("hdr_size", "<u2"),
        ("n_stems", "<u8"),
        ("n_rows", "<u8"),
        ("n_ext", "<u4"),
        ("n_crash", "<u4"),
        ("off_crash", "<u8"),
        ("off_arr", "<u8"),
        ("flags", "u1"),
        ("reserved", "V7"),
    ],
    HDR_SIZE,
)

ROW = Record(
    "taridx row",
    [
        ("fid", "<u2"),
        ("offset", "<u8"),
        ("size", "<u8"),
        ("extid", "<u2"),
        ("crashid", "<u4"),
        ("keyhash", "<u8"),
    ],
    REC_SIZE,
)

#: The records as structured dtypes (zero-copy views of the header and the rows).
HEADER_DT = HEADER.dtype
ROW_DT = ROW.dtype

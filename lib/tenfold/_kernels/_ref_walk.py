"""Reference twin of ``walk.pyx`` (plain Python)."""

from __future__ import annotations

import struct

import numpy as np

from ._cargs import ssize

_U32 = struct.Struct("<I")


def walk_lp_records(
    buf: object,
    start: int,
    end: int,
    count: int,
    align: int,
    head: int,
    count_at: int,
    item: int,
    tail: int,
    max_items: int,
    starts: object,
    lengths: object,
    counts: object,
) -> tuple[int, int, int]:
    """Walk ``count`` length-prefixed records from ``start``; see ``walk.pyx``."""
    start, end, count, align, head, count_at, item, tail, max_items = (
        ssize(v) for v in (start, end, count, align, head, count_at, item, tail, max_items)
    )
    b = memoryview(buf).cast("B")  # type: ignore[arg-type]
    if end > b.nbytes or start < 0 or start > end:
        raise ValueError(f"bad range [{start}, {end}) for a buffer of {b.nbytes} bytes")
    if align <= 0 or head < 0 or item < 0 or tail < 0 or count_at < 0 or count_at + 4 > head:
        raise ValueError("bad record geometry")
    st, ln_out, ct = (
        np.frombuffer(x, np.int64)  # type: ignore[call-overload]
        for x in (starts, lengths, counts)
    )
    if count < 0 or min(st.size, ln_out.size, ct.size) < count:
        raise ValueError("outputs shorter than count")
    pos = start
    for i in range(count):
        if pos + 4 > end:
            return i, pos, 1
        (ln,) = _U32.unpack_from(b, pos)
        q = pos + -(-(4 + ln) // align) * align
        if pos + 4 + ln > end:
            return i, pos, 1
        if q + head > end:
            return i, pos, 2
        (c,) = _U32.unpack_from(b, q + count_at)
        if c > max_items:
            return i, pos, 3
        q = q + head + c * item + tail
        if q > end:
            return i, pos, 4
        st[i], ln_out[i], ct[i] = pos, ln, c
        pos = q
    return count, pos, 0

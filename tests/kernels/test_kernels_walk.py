"""walk kernel family: known answers, every status, hostile geometry, compiled vs reference."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _kernels_isolated import differential, outcome
from hypothesis import given
from hypothesis import strategies as st

M = 2**63 - 1


def record(
    name: bytes,
    count: int,
    *,
    align: int = 8,
    head: int = 12,
    count_at: int = 4,
    item: int = 8,
    tail: int = 16,
    fill: int = 0,
) -> bytes:
    """One length-prefixed record: u32 L, L bytes, padding to ``align``, head, items, tail."""
    r = struct.pack("<I", len(name)) + name
    r += b"\0" * (-len(r) % align)
    h = bytearray([fill]) * head
    h[count_at : count_at + 4] = struct.pack("<I", count)
    return r + bytes(h) + bytes([fill]) * (count * item + tail)


def walk(
    k,
    data: bytes,
    count: int,
    *,
    start: int = 0,
    end: int | None = None,
    align: int = 8,
    head: int = 12,
    count_at: int = 4,
    item: int = 8,
    tail: int = 16,
    max_items: int = 8,
    nout: int | None = None,
):
    buf = np.frombuffer(data, np.uint8)
    n = count if nout is None else nout
    outs = [np.full(max(n, 0), -7, np.int64) for _ in range(3)]
    res = k.walk_lp_records(
        buf,
        start,
        buf.size if end is None else end,
        count,
        align,
        head,
        count_at,
        item,
        tail,
        max_items,
        *outs,
    )
    done = res[0]
    return tuple(res), [o[:done].tolist() for o in outs]


def test_walk_known(kernels):
    data = record(b"w1", 2) + record(b"layer.bias", 0) + record(b"", 3, fill=0xAB)
    got = walk(kernels("walk"), data, 3)
    # 4+2 -> 8, +12 head +16 items +16 tail = 52; 4+10 -> 16, +28 = 44; 4 -> 8, +12+24+16 = 60
    assert got == ((3, 156, 0), [[0, 52, 96], [2, 10, 0], [2, 0, 3]])


def test_walk_start_end_and_zero_count(kernels):
    k = kernels("walk")
    pre = b"\xee" * 24
    data = pre + record(b"abc", 1, align=4) + b"\xee" * 5
    end = len(data) - 5
    assert walk(k, data, 1, start=24, end=end, align=4) == ((1, end, 0), [[24], [3], [1]])
    assert walk(k, data, 0, start=24, end=end) == ((0, 24, 0), [[], [], []])
    # the padding counts from the record's start: 4 + 3 -> 8, + 12 head + 16 tail
    assert walk(k, b"\0" * 4 + record(b"abc", 0, align=4), 1, start=4, align=4)[0] == (1, 40, 0)


@pytest.mark.parametrize(
    "cut, status",
    [
        (3, 1),  # the length field itself runs past end
        (5, 1),  # the name runs past end
        (19, 2),  # the head runs past end
        (20, 4),  # the items run past end
        (51, 4),  # the tail runs past end
        (40, 4),  # the items run past end
    ],
)
def test_walk_statuses(kernels, cut, status):
    data = record(b"w1", 2) * 2
    got = walk(kernels("walk"), data, 2, end=52 + cut)
    assert got[0] == (1, 52, status)
    assert got[1] == [[0], [2], [2]]


def test_walk_count_above_max_items(kernels):
    data = record(b"w1", 2) + record(b"w2", 9)
    assert walk(kernels("walk"), data, 2)[0] == (1, 52, 3)
    assert walk(kernels("walk"), data, 2, max_items=-1)[0] == (0, 0, 3)


@pytest.mark.parametrize(
    "args",
    [
        dict(start=-1),
        dict(start=10, end=5),
        dict(end=10**6),
        dict(align=0),
        dict(head=-1),
        dict(head=3),
        dict(count_at=9),
        dict(count_at=-1),
        dict(item=-1),
        dict(tail=-1),
        dict(count=-1),
        dict(nout=1),
        dict(count_at=M - 2),
        dict(count_at=M),
        dict(start=M),
    ],
)
def test_walk_bad_arguments(kernels, args):
    data = record(b"w1", 2) * 2
    args = dict(args)
    count = args.pop("count", 2)
    assert outcome(lambda: walk(kernels("walk"), data, count, **args)) == "ValueError"
    with pytest.raises(ValueError, match="bad range|bad record geometry|outputs shorter"):
        walk(kernels("walk"), data, count, **args)


# A record whose count is 0xffffffff (the largest u32), then a record of 12 zero bytes.
_HUGE_COUNT = b"\x01\0\0\0a\0\0\0" + b"\0\0\0\0\xff\xff\xff\xff\0\0\0\0"
_TWO = b"\x01\0\0\0a\0\0\0" + b"\0" * 12


@pytest.mark.parametrize(
    "data, geometry, expected",
    [
        # issue 15: item 2**62 made C * item wrap to a small position (SIGSEGV)
        (_HUGE_COUNT, dict(item=2**62, max_items=2**40), (0, 0, 4)),
        (_HUGE_COUNT, dict(item=2**31, max_items=2**40), (0, 0, 4)),
        (_HUGE_COUNT, dict(item=M, max_items=M), (0, 0, 4)),
        # issue 15: tail 2**63-1 wrapped the end of the record negative (SIGSEGV)
        (_TWO, dict(item=8, tail=M), (0, 0, 4)),
        (_TWO, dict(item=8, tail=M - 20), (0, 0, 4)),
        # an alignment or a head that large wrapped the start of the head
        (_TWO, dict(align=M), (0, 0, 2)),
        (_TWO, dict(align=M - 3), (0, 0, 2)),
        (_TWO, dict(head=M), (0, 0, 2)),
        (_TWO, dict(head=M - 4, count_at=0), (0, 0, 2)),
    ],
    ids=[
        "item-2**62",
        "item-2**31",
        "item-max",
        "tail-max",
        "tail-max-20",
        "align-max",
        "align-max-3",
        "head-max",
        "head-max-4",
    ],
)
def test_walk_huge_geometry_is_exact(kernels, impl, data, geometry, expected):
    """Huge sizes give the status of exact arithmetic, never a wrapped position."""
    k = kernels("walk")
    buf = np.frombuffer(data, np.uint8)
    g = dict(align=4, head=12, count_at=4, item=8, tail=0, max_items=8) | geometry
    outs = [np.zeros(2, np.int64) for _ in range(3)]
    args = (
        buf,
        0,
        buf.size,
        2,
        g["align"],
        g["head"],
        g["count_at"],
        g["item"],
        g["tail"],
        g["max_items"],
        *outs,
    )
    assert outcome(k.walk_lp_records, *args) == "ok"
    assert tuple(k.walk_lp_records(*args)) == expected


@pytest.mark.parametrize("value", [-1, 2**63, -(2**63) - 1])
def test_walk_ints_outside_ssize_refused_alike(value):
    data = np.frombuffer(record(b"w1", 2), np.uint8)
    outs = [np.zeros(1, np.int64) for _ in range(3)]
    for pos in range(1, 10):
        args = [data, 0, data.size, 1, 8, 12, 4, 8, 16, 8, *outs]
        args[pos] = value
        want = "ValueError" if -(2**63) <= value < 2**63 else "OverflowError"
        got = differential("walk", lambda k, a=args: tuple(k.walk_lp_records(*a)))
        if pos == 9 and want == "ValueError":  # a negative max_items only refuses every count
            assert got == (0, 0, 3)
        else:
            assert got == want


geometry = st.fixed_dictionaries(
    {
        "align": st.sampled_from([1, 2, 4, 8, 16, 64]),
        "head": st.integers(4, 24),
        "item": st.integers(0, 16),
        "tail": st.integers(0, 24),
    }
)


@given(
    geometry, st.lists(st.tuples(st.binary(max_size=20), st.integers(0, 5)), max_size=8), st.data()
)
def test_walk_differential(g, recs, data):
    """Valid tables, cut short or edited at random: both implementations agree exactly."""
    count_at = data.draw(st.integers(0, g["head"] - 4))
    blob = bytearray(b"".join(record(n, c, count_at=count_at, **g) for n, c in recs))
    for _ in range(data.draw(st.integers(0, 3))):
        if blob:
            blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    end = data.draw(st.integers(0, len(blob)))
    count = data.draw(st.integers(0, len(recs) + 1))
    max_items = data.draw(st.integers(-1, 6))
    got = differential(
        "walk",
        lambda k: walk(k, bytes(blob), count, end=end, count_at=count_at, max_items=max_items, **g),
    )
    if end == len(blob) and count == len(recs) and max_items >= 5 and got[0][0] == count:
        assert got[0] == (count, len(blob), 0)


HOSTILE = st.one_of(
    st.integers(-3, 40),
    st.sampled_from([M, M - 1, M - 3, 2**62, 2**62 + 1, 2**32, 2**31, -(2**63), 2**63, 2**64]),
)


@given(st.binary(max_size=60), st.lists(HOSTILE, min_size=9, max_size=9), st.integers(0, 4))
def test_walk_hostile_differential(data, ints, nout):
    """Random (mostly invalid) arguments: the same result or the same refusal, never a crash."""
    buf = np.frombuffer(data, np.uint8)

    def call(k):
        outs = [np.zeros(nout, np.int64) for _ in range(3)]
        res = k.walk_lp_records(buf, *ints, *outs)
        return tuple(res), [o[: res[0]].tolist() for o in outs]

    differential("walk", call)

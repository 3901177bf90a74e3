"""hashtable kernel family: known answers, a full table, differential compiled vs reference."""

from __future__ import annotations

import numpy as np
import pytest
from _kernels_isolated import differential, outcome
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels


def test_hashtable_known(kernels):
    ht = kernels("hashtable")
    keys = np.array([5, 13, 5, 7, 21], np.uint64)  # 5, 13, 21 share the low bits of an 8-slot table
    table = np.full(8, -1, np.int32)
    assert ht.insert(keys, np.arange(5, dtype=np.int64), table) == 4  # duplicate 5 keeps row 0
    out = np.zeros(5, np.int64)
    ht.probe(keys, table, np.array([5, 13, 21, 7, 99], np.uint64), out)
    assert out.tolist() == [0, 1, 4, 3, -1]
    with pytest.raises(ValueError):
        ht.insert(keys, np.array([0], np.int64), np.full(6, -1, np.int32))
    with pytest.raises(ValueError):
        ht.insert(keys, np.array([9], np.int64), table)
    with pytest.raises(ValueError):
        ht.insert(
            np.arange(10, dtype=np.uint64), np.arange(10, dtype=np.int64), np.full(8, -1, np.int32)
        )


@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=40),
    st.lists(st.integers(0, 2**64 - 1), max_size=20),
)
def test_hashtable_differential(keys, queries):
    keys_a = np.array(keys + keys[:5], np.uint64)
    q = np.array(queries + keys[:10], np.uint64)
    impls = [_kernels.load("hashtable", "reference")]
    if not _kernels.pure_python():
        impls.append(_kernels.load("hashtable", "compiled"))
    results = []
    for mod in impls:
        table = np.full(128, -1, np.int32)
        mod.insert(keys_a, np.arange(keys_a.size, dtype=np.int64), table)
        out = np.zeros(q.size, np.int64)
        mod.probe(keys_a, table, q, out)
        results.append((table.tolist(), out.tolist()))
        first = {}
        for i, k in enumerate(keys_a.tolist()):
            first.setdefault(k, i)
        assert out.tolist() == [first.get(k, -1) for k in q.tolist()]
    assert all(r == results[0] for r in results)


def test_insert_may_leave_exactly_one_empty_slot(kernels):
    """Issue 15: the compiled insert raised "table full" when one empty slot was left, where
    the reference accepts."""
    ht = kernels("hashtable")
    table = np.full(2, -1, np.int32)
    assert ht.insert(np.array([0], np.uint64), np.array([0], np.int64), table) == 1
    assert table.tolist() == [0, -1]
    keys = np.arange(8, dtype=np.uint64)
    table = np.full(8, -1, np.int32)
    assert ht.insert(keys, np.arange(7, dtype=np.int64), table) == 7
    assert table.tolist() == [0, 1, 2, 3, 4, 5, 6, -1]
    out = np.zeros(8, np.int64)
    ht.probe(keys, table, keys, out)
    assert out.tolist() == [0, 1, 2, 3, 4, 5, 6, -1]


def test_insert_into_a_table_without_empty_slot_refused(kernels):
    """Issue 15: with no empty slot the compiled insert probed forever with the GIL released
    (so did the reference); now a ValueError, before the loop."""
    ht = kernels("hashtable")
    keys = np.arange(9, dtype=np.uint64)
    full = np.arange(8, dtype=np.int32)  # rows 0..7 fill every slot; key 8 is new
    assert (
        outcome(ht.insert, keys, np.array([8], np.int64), full.copy(), timeout=10) == "ValueError"
    )
    with pytest.raises(ValueError, match="table full"):
        ht.insert(keys, np.array([8], np.int64), full.copy())
    # nothing to insert: no refusal
    assert ht.insert(keys, np.zeros(0, np.int64), full.copy()) == 0


def test_insert_fills_a_prefilled_table_then_refuses(kernels):
    """Empty slots are counted in the table given, not assumed from its length: a second
    insert into a half-full table stops at the last empty slot instead of spinning."""
    ht = kernels("hashtable")
    keys = np.arange(16, dtype=np.uint64)
    table = np.full(8, -1, np.int32)
    assert ht.insert(keys, np.arange(4, dtype=np.int64), table) == 4
    assert (
        outcome(ht.insert, keys, np.arange(4, 16, dtype=np.int64), table.copy(), timeout=10)
        == "ValueError"
    )
    with pytest.raises(ValueError, match="table full"):
        ht.insert(keys, np.arange(4, 16, dtype=np.int64), table)
    # the rows before the refused one stay inserted, one slot stays empty
    assert sorted(table.tolist()) == [-1, 0, 1, 2, 3, 4, 5, 6]
    # a key already present is found, not inserted: no refusal even now
    assert ht.insert(keys, np.array([2, 5], np.int64), table) == 0


@given(st.integers(1, 5), st.lists(st.integers(0, 40), max_size=40), st.data())
def test_hashtable_full_and_prefilled_differential(logm, rows, data):
    """Random tables (prefilled, nearly full or full) and rows: the same table, count and
    refusal from both implementations, and never a hang."""
    m = 1 << logm
    nk = 41
    keys = np.array(
        data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=nk, max_size=nk)), np.uint64
    )
    pre = data.draw(st.lists(st.integers(-1, nk - 1), min_size=m, max_size=m))
    rows_a = np.array(rows, np.int64)

    def call(k):
        table = np.array(pre, np.int32)
        try:
            n = k.insert(keys, rows_a, table)
        except ValueError as exc:
            n = str(exc).split(":")[0]
        return n, table.tolist()

    differential("hashtable", call)


HOSTILE = st.one_of(st.integers(-3, 20), st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, -(2**63)]))


@given(
    st.lists(HOSTILE, max_size=6),
    st.lists(st.one_of(st.integers(-3, 9), st.sampled_from([-(2**31), 2**31 - 1])), max_size=9),
    st.integers(0, 9),
)
def test_hashtable_hostile_differential(rows, table, nout):
    """Rows outside the keys, tables of any length and content, wrong output sizes."""
    keys = np.arange(5, dtype=np.uint64) * 7

    def call(k):
        t = np.array(table, np.int32)
        out = np.zeros(nout, np.int64)
        n = k.insert(keys, np.array(rows, np.int64), t)
        k.probe(keys, t, keys[:nout], out)
        return n, t.tolist(), out.tolist()

    differential("hashtable", call)


def test_table_sharing_memory_with_rows_refused(kernels):
    """The rows are read while the table is written: a table over the rows' memory could turn
    a row into any number (a read anywhere in ``keys``), so it is refused at entry."""
    ht = kernels("hashtable")
    keys = np.arange(4, dtype=np.uint64)
    mem = np.full(8, -1, np.int64)
    mem[:4] = (0, 1, 2, 3)
    rows = mem[:4]
    table = mem.view(np.int32)[6:14]  # [3, 0, -1 x 6]: valid entries, over rows[3]
    assert outcome(ht.insert, keys, rows, table) == "ValueError"
    with pytest.raises(ValueError, match="table and rows overlap"):
        ht.insert(keys, rows, table)
    beside = mem.view(np.int32)[8:16]  # right after the rows: fine
    assert ht.insert(keys, rows, beside) == 4
    assert sorted(beside.tolist()) == [-1, -1, -1, -1, 0, 1, 2, 3]


def _first_by_dict(keys: list[int]) -> list[int]:
    first: dict[int, int] = {}
    return [first.setdefault(k, i) for i, k in enumerate(keys)]


def _partitioned(ht, keys: np.ndarray, bits: int, cut: int) -> tuple[int, list[int], int]:
    """``(distinct keys, first row of each row's key, run heads)`` the way the TARIDX build
    uses the partitioned kernels, its rows in two blocks cut at ``cut``."""
    n, parts = keys.size, 1 << bits
    blocks = [(0, cut), (cut, n)]
    counts = np.zeros((2, parts), np.int64)
    for k, (a, b) in enumerate(blocks):
        ht.head_counts(keys, a, b, bits, counts[k])
    part_at = np.concatenate([[0], np.cumsum(counts.sum(axis=0))])
    cursors = part_at[:-1] + np.cumsum(counts, axis=0) - counts
    order = np.full(int(part_at[-1]), -5, np.int64)
    for k, (a, b) in enumerate(blocks):
        ht.scatter_heads(keys, a, b, bits, cursors[k].copy(), order)
    heads_first = np.full(order.size, -5, np.int64)
    added = 0
    for p in range(parts):
        a, b = int(part_at[p]), int(part_at[p + 1])
        table = np.full(1 << max(1, (2 * (b - a) + 1).bit_length()), -1, np.int32)
        added += ht.insert(keys, order[a:b], table, heads_first[a:b])
    first = np.full(n, -2, np.int64)
    for k, (a, b) in enumerate(blocks):
        ht.spread_first(keys, a, bits, cursors[k].copy(), heads_first, first[a:b])
    return added, first.tolist(), int(part_at[-1])


def test_partitioned_known(kernels):
    """Issue 28: the build's table is cut by the keys' top bits, one partition per thread."""
    ht = kernels("hashtable")
    top = [0, 1 << 62, 1 << 63, 3 << 62]  # partitions 0..3 of a 2-bit table
    keys = np.array(
        [top[0] | 5, top[0] | 5, top[1] | 5, top[0] | 13, top[3] | 1, top[1] | 5, top[0] | 5,
         top[2] | 9, top[2] | 9, top[3] | 1, top[0] | 21],
        np.uint64,
    )  # fmt: skip
    want = _first_by_dict(keys.tolist())
    for bits in (0, 1, 2, 3):
        for cut in (0, 1, 2, 5, 9, 11):  # a block may start inside a run
            added, first, heads = _partitioned(ht, keys, bits, cut)
            assert (added, first, heads) == (6, want, 9), (bits, cut)


def test_partitioned_refusals(kernels):
    ht = kernels("hashtable")
    keys = np.arange(6, dtype=np.uint64)
    with pytest.raises(ValueError, match="bits"):
        ht.head_counts(keys, 0, 6, 17, np.zeros(1 << 17, np.int64))
    with pytest.raises(ValueError, match="counts"):
        ht.head_counts(keys, 0, 6, 1, np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="out of range"):
        ht.head_counts(keys, 2, 7, 0, np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="out of range"):
        ht.spread_first(keys, 4, 0, np.zeros(1, np.int64), np.zeros(6, np.int64),
                        np.zeros(3, np.int64))  # fmt: skip
    # cursors are checked, never followed out of their arrays
    order = np.full(6, -1, np.int64)
    with pytest.raises(ValueError, match="outside order"):
        ht.scatter_heads(keys, 0, 6, 0, np.array([2], np.int64), order)
    assert order.tolist() == [-1, -1, 0, 1, 2, 3]  # the heads before it are written
    with pytest.raises(ValueError, match="outside order"):
        ht.scatter_heads(keys, 0, 1, 0, np.array([-1], np.int64), order)
    out = np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="outside heads_first"):
        ht.spread_first(keys, 1, 0, np.array([0], np.int64), np.zeros(1, np.int64), out)
    with pytest.raises(ValueError, match="outside heads_first"):  # a non-head before any head
        ht.spread_first(np.zeros(3, np.uint64), 1, 0, np.array([0], np.int64),
                        np.zeros(1, np.int64), out)  # fmt: skip
    # insert's first output: one entry per row, and never shared with what it reads
    table = np.full(8, -1, np.int32)
    rows = np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError, match="first"):
        ht.insert(keys, rows, table, np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="overlap"):
        ht.insert(keys, rows, table, rows)
    with pytest.raises(ValueError, match="overlap"):
        ht.insert(keys, rows, table, table.view(np.int64)[:3])


@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=40),
    st.integers(0, 4),
    st.integers(0, 3),
)
def test_partitioned_differential(keys, bits, repeat):
    """Compiled and reference agree with a dict, whatever the partition bits and runs."""
    ks = [k for k in keys for _ in range(1 + (k % (repeat + 1)))] + keys[:5]
    keys_a = np.array(ks, np.uint64)
    want = _first_by_dict(ks)
    impls = [_kernels.load("hashtable", "reference")]
    if not _kernels.pure_python():
        impls.append(_kernels.load("hashtable", "compiled"))
    for mod in impls:
        for cut in {0, len(ks) // 3, min(len(ks), len(ks) // 2 + 1), len(ks)}:
            added, first, heads = _partitioned(mod, keys_a, bits, cut)
            assert first == want
            assert added == len(set(ks))
            assert heads == sum(1 for i, k in enumerate(ks) if i == 0 or ks[i - 1] != k)

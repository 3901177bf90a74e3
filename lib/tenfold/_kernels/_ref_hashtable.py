"""Reference twin of ``hashtable.pyx`` (same table layout, plain Python loops)."""

from __future__ import annotations

import numpy as np


def _check(m: int) -> None:
    if m == 0 or m & (m - 1):
        raise ValueError(f"table length must be a power of two, got {m}")


def insert(keys, rows, table):
    """Insert ``rows`` (numbers into ``keys``); returns how many were new keys.

    The table always keeps at least one empty slot: a new key that would take the last one
    raises ``ValueError("table full")`` (the rows before it stay inserted), as does a table
    without an empty slot.
    """
    m, nk = len(table), len(keys)
    _check(m)
    rows_in, rows = rows, np.asarray(rows).tolist()
    if any(r < 0 or r >= nk or r > 0x7FFFFFFF for r in rows):
        raise ValueError(f"row out of range for {nk} keys")
    if len(table) and (np.asarray(table).min() < -1 or np.asarray(table).max() >= nk):
        raise ValueError("table holds an entry outside the keys")
    if not rows:
        return 0
    if np.may_share_memory(np.asarray(table), np.asarray(rows_in)):
        raise ValueError("table and rows overlap")
    free = int(np.count_nonzero(np.asarray(table) == -1))
    if free == 0:
        raise ValueError("table full: no empty slot")
    mask, added = m - 1, 0
    for r in rows:
        k = int(keys[r])
        slot = k & mask
        while True:  # ends: an empty slot remains (free - added >= 1 holds throughout)
            cur = int(table[slot])
            if cur == -1:
                if added + 1 >= free:
                    raise ValueError("table full")
                table[slot] = r
                added += 1
                break
            if int(keys[cur]) == k:
                break
            slot = (slot + 1) & mask
    return added


def probe(keys, table, queries, out):
    """``out[i]`` = the row of ``queries[i]`` in ``table`` (-1 when absent)."""
    m, nk = len(table), len(keys)
    _check(m)
    if len(out) != len(queries):
        raise ValueError("out must have one entry per query")
    mask = m - 1
    for i, q in enumerate(np.asarray(queries).tolist()):
        slot = q & mask
        out[i] = -1
        for _ in range(m):
            cur = int(table[slot])
            if cur < 0 or cur >= nk:
                break
            if int(keys[cur]) == q:
                out[i] = cur
                break
            slot = (slot + 1) & mask

"""Reference twin of ``hashtable.pyx`` (same table layouts, plain Python loops)."""

from __future__ import annotations

import numpy as np


def _check(m: int) -> None:
    if m == 0 or m & (m - 1):
        raise ValueError(f"table length must be a power of two, got {m}")


def insert(keys, rows, table, first=None):
    """Insert ``rows`` (numbers into ``keys``); returns how many were new keys. With ``first``
    (one entry per row), ``first[j]`` = the row the table holds for the key of ``rows[j]``
    afterwards (itself when new, the earlier row when not; unset when the table fills).

    The table always keeps at least one empty slot: a new key that would take the last one
    raises ``ValueError("table full")`` (the rows before it stay inserted), as does a table
    without an empty slot.
    """
    m, nk = len(table), len(keys)
    _check(m)
    rows_in, rows = rows, np.asarray(rows).tolist()
    if first is not None and len(first) != len(rows):
        raise ValueError(f"first must have one entry per row ({len(rows)}), got {len(first)}")
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
    if first is not None:
        if np.may_share_memory(np.asarray(first), np.asarray(rows_in)):
            raise ValueError("first and rows overlap")
        if np.may_share_memory(np.asarray(first), np.asarray(table)):
            raise ValueError("first and table overlap")
    mask, added = m - 1, 0
    for j, r in enumerate(rows):
        k = int(keys[r])
        slot = k & mask
        while True:  # ends: an empty slot remains (free - added >= 1 holds throughout)
            cur = int(table[slot])
            if cur == -1:
                if added + 1 >= free:
                    raise ValueError("table full")
                table[slot] = cur = r
                added += 1
                break
            if int(keys[cur]) == k:
                break
            slot = (slot + 1) & mask
        if first is not None:
            first[j] = cur
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


# Partitioned tables: see hashtable.pyx (partition = top ``bits`` bits; only run heads).
_MAX_BITS = 16


def _check_bits(bits: int, got: int, what: str) -> None:
    if bits < 0 or bits > _MAX_BITS:
        raise ValueError(f"bits must be in [0, {_MAX_BITS}], got {bits}")
    if got != 1 << bits:
        raise ValueError(f"{what} must have {1 << bits} entries, got {got}")


def _check_rows(start: int, stop: int, n: int) -> None:
    if start < 0 or stop < start or stop > n:
        raise ValueError(f"rows [{start}, {stop}) out of range for {n} keys")


def _part(k: int, bits: int) -> int:
    return k >> (64 - bits) if bits else 0


def head_counts(keys, start, stop, bits, counts):
    """Add to ``counts[p]`` the heads among rows ``[start, stop)`` in partition ``p``."""
    _check_bits(bits, len(counts), "counts")
    _check_rows(start, stop, len(keys))
    ks = np.asarray(keys).tolist()
    for i in range(start, stop):
        if i == 0 or ks[i - 1] != ks[i]:
            counts[_part(ks[i], bits)] += 1


def scatter_heads(keys, start, stop, bits, cursor, order):
    """Write each head ``i`` of rows ``[start, stop)`` to ``order[cursor[p]]``, advancing
    ``cursor[p]``; a cursor leaving ``order`` raises ``ValueError``."""
    _check_bits(bits, len(cursor), "cursor")
    _check_rows(start, stop, len(keys))
    ks = np.asarray(keys).tolist()
    for i in range(start, stop):
        if i == 0 or ks[i - 1] != ks[i]:
            p = _part(ks[i], bits)
            c = int(cursor[p])
            if c < 0 or c >= len(order):
                raise ValueError("a cursor points outside order")
            order[c] = i
            cursor[p] = c + 1


def spread_first(keys, start, bits, cursor, heads_first, out):
    """``out[j]`` = ``heads_first[cursor[p] - 1]`` for row ``start + j`` in partition ``p``,
    ``cursor[p]`` advanced first at a head; a cursor outside ``heads_first`` raises."""
    _check_bits(bits, len(cursor), "cursor")
    _check_rows(start, start + len(out), len(keys))
    ks = np.asarray(keys).tolist()
    for j in range(len(out)):
        i = start + j
        p = _part(ks[i], bits)
        c = int(cursor[p])
        if i == 0 or ks[i - 1] != ks[i]:
            c += 1
            cursor[p] = c
        if c < 1 or c > len(heads_first):
            raise ValueError("a cursor points outside heads_first")
        out[j] = heads_first[c - 1]

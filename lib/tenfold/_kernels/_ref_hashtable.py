"""Reference twin of ``hashtable.pyx`` (same table layouts, plain Python loops)."""

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


# Partitioned tables: see hashtable.pyx (partition = top ``bits`` bits, slot = low bits, the
# partitions' tables back to back at ``base``; only run heads are inserted).
_MAX_BITS = 16


def _check_bits(bits: int) -> None:
    if bits < 0 or bits > _MAX_BITS:
        raise ValueError(f"bits must be in [0, {_MAX_BITS}], got {bits}")


def _check_base(base, m: int, bits: int) -> list[int]:
    parts = 1 << bits
    b = np.asarray(base).tolist()
    if len(b) != parts + 1:
        raise ValueError(f"base must have {parts + 1} entries, got {len(b)}")
    if b[0] != 0 or b[parts] != m:
        raise ValueError(f"base must run from 0 to the table length {m}")
    for p in range(parts):
        w = b[p + 1] - b[p]
        if w <= 0 or w & (w - 1):
            raise ValueError(f"partition {p}: table length must be a power of two, got {w}")
    return b


def _part(k: int, bits: int) -> int:
    return k >> (64 - bits) if bits else 0


def head_counts(keys, start, stop, bits, counts):
    """Add to ``counts[p]`` the run heads among rows ``[start, stop)`` in partition ``p``."""
    _check_bits(bits)
    n = len(keys)
    if len(counts) != 1 << bits:
        raise ValueError(f"counts must have {1 << bits} entries, got {len(counts)}")
    if start < 0 or stop < start or stop > n:
        raise ValueError(f"rows [{start}, {stop}) out of range for {n} keys")
    ks = np.asarray(keys).tolist()
    for i in range(start, stop):
        if i == 0 or ks[i - 1] != ks[i]:
            counts[_part(ks[i], bits)] += 1


def insert_part(keys, bits, part, table, base, first=None):
    """Fill partition ``part``'s table (emptied first) with the first row of each of its keys;
    returns the keys it holds (``ValueError("table full")`` at the last empty slot). With
    ``first``, also ``first[i]`` = the first row with the key of each row ``i`` of ``part``."""
    _check_bits(bits)
    b = _check_base(base, len(table), bits)
    if part < 0 or part >= 1 << bits:
        raise ValueError(f"part {part} out of range for {bits} bits")
    ks = np.asarray(keys).tolist()
    if len(ks) > 0x7FFFFFFF:
        raise ValueError(f"{len(ks)} keys do not fit int32 rows")
    if first is not None and len(first) != len(ks):
        raise ValueError(f"first must have one entry per key ({len(ks)}), got {len(first)}")
    lo, width = b[part], b[part + 1] - b[part]
    mask, added = width - 1, 0
    table[lo : lo + width] = -1
    for i, k in enumerate(ks):
        if _part(k, bits) != part:
            continue
        if i > 0 and ks[i - 1] == k:
            if first is not None:
                first[i] = first[i - 1]
            continue
        slot = k & mask
        while True:  # ends: an empty slot remains (added <= width - 1)
            cur = int(table[lo + slot])
            if cur == -1:
                if added + 1 >= width:
                    raise ValueError("table full")
                table[lo + slot] = cur = i
                added += 1
                break
            if ks[cur] == k:
                break
            slot = (slot + 1) & mask
        if first is not None:
            first[i] = cur
    return added


def first_rows(keys, bits, table, base, start, out):
    """``out[j]`` = the row in the partitioned ``table`` with the key of row ``start + j``
    (-1 when absent); returns how many were absent."""
    _check_bits(bits)
    b = _check_base(base, len(table), bits)
    ks = np.asarray(keys).tolist()
    n, cnt = len(ks), len(out)
    if start < 0 or start + cnt > n:
        raise ValueError(f"rows [{start}, {start + cnt}) out of range for {n} keys")
    missing = 0
    for j in range(cnt):
        k = ks[start + j]
        if j > 0 and ks[start + j - 1] == k:
            out[j] = out[j - 1]
        else:
            p = _part(k, bits)
            lo, mask = b[p], b[p + 1] - b[p] - 1
            slot, got = k & mask, -1
            for _ in range(mask + 1):
                cur = int(table[lo + slot])
                if cur < 0 or cur >= n:
                    break
                if ks[cur] == k:
                    got = cur
                    break
                slot = (slot + 1) & mask
            out[j] = got
        missing += int(out[j]) < 0
    return missing

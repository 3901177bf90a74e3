# cython: language_level=3
"""Open-addressing hash table over uniformly distributed uint64 keys (e.g. xxh64 digests).

``table`` (caller-allocated, power-of-two length, at least one empty slot) holds row numbers
into ``keys`` (-1 = empty); the slot of a key is its low bits, collisions probe linearly.
``insert`` adds rows (a key already present keeps its first row); ``probe`` finds queries.
Both are bound by memory latency on large tables, so they prefetch the slots (and, in ``probe``,
the keys those slots point at) of the items a few steps ahead.
"""

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uintptr_t
cimport cython

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define TF_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 3)
    #define TF_PREFETCH_W(p) __builtin_prefetch((const void*)(p), 1, 3)
    #else
    #define TF_PREFETCH(p) ((void)0)
    #define TF_PREFETCH_W(p) ((void)0)
    #endif
    """
    void TF_PREFETCH(const void* p) noexcept nogil
    void TF_PREFETCH_W(const void* p) noexcept nogil

#: Prefetch distances (items ahead): slot of item i + AHEAD, key of the slot of i + AHEAD2.
DEF AHEAD = 32
DEF AHEAD2 = 16


cdef int check_table(Py_ssize_t m) except -1:
    if m == 0 or (m & (m - 1)) != 0:
        raise ValueError(f"table length must be a power of two, got {m}")
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
def insert(const uint64_t[::1] keys, const int64_t[::1] rows, int32_t[::1] table):
    """Insert ``rows`` (numbers into ``keys``); returns how many were new keys.

    The table always keeps at least one empty slot, so that every probe ends: a new key that
    would take the last one raises ``ValueError("table full")`` (the rows before it stay
    inserted), as does a table without an empty slot.
    """
    cdef Py_ssize_t m = table.shape[0], n = rows.shape[0], i, nk = keys.shape[0]
    cdef uint64_t mask, k
    cdef int64_t r, slot, added = 0, cur, free = 0
    cdef bint full = False, bad = False
    cdef uintptr_t a, b
    cdef uint32_t u, lim
    check_table(m)
    for i in range(n):
        if rows[i] < 0 or rows[i] >= nk or rows[i] > 0x7FFFFFFF:
            raise ValueError(f"row {rows[i]} out of range for {nk} keys")
    # one branch-free pass over the table: entries in [-1, nk), and the empty slots counted
    # (as unsigned, entry + 1 lies in [0, nk]; the empty slot -1 is 0)
    lim = <uint32_t>nk if nk < 0x80000000 else 0x80000000
    for i in range(m):
        u = <uint32_t>table[i] + 1
        bad |= u > lim
        free += u == 0
    if bad:
        raise ValueError("table holds an entry outside the keys")
    if n == 0:
        return 0
    # the rows are read while the table is written: they must not share memory
    a = <uintptr_t>&table[0]
    b = <uintptr_t>&rows[0]
    if a < b + <uintptr_t>(8 * n) and b < a + <uintptr_t>(4 * m):
        raise ValueError("table and rows overlap")
    if free == 0:
        raise ValueError("table full: no empty slot")
    mask = <uint64_t>(m - 1)
    with nogil:
        for i in range(n):
            if i + AHEAD < n:
                TF_PREFETCH_W(&table[<int64_t>(keys[rows[i + AHEAD]] & mask)])
            if i + AHEAD2 < n:
                cur = table[<int64_t>(keys[rows[i + AHEAD2]] & mask)]
                if cur >= 0:
                    TF_PREFETCH(&keys[cur])
            r = rows[i]
            k = keys[r]
            slot = <int64_t>(k & mask)
            # ends: an empty slot remains (free - added >= 1 holds throughout)
            while True:
                cur = table[slot]
                if cur == -1:
                    if added + 1 >= free:
                        full = True
                        break
                    table[slot] = <int32_t>r
                    added += 1
                    break
                if keys[cur] == k:
                    break
                slot = (slot + 1) & <int64_t>mask
            if full:
                break
    if full:
        raise ValueError("table full")
    return added


@cython.boundscheck(False)
@cython.wraparound(False)
def probe(const uint64_t[::1] keys, const int32_t[::1] table, const uint64_t[::1] queries,
          int64_t[::1] out):
    """``out[i]`` = the row of ``queries[i]`` in ``table`` (-1 when absent)."""
    cdef Py_ssize_t m = table.shape[0], n = queries.shape[0], i, nk = keys.shape[0]
    cdef uint64_t mask, k
    cdef int64_t slot, cur, steps
    check_table(m)
    if out.shape[0] != n:
        raise ValueError("out must have one entry per query")
    mask = <uint64_t>(m - 1)
    with nogil:
        for i in range(n):
            if i + AHEAD < n:
                TF_PREFETCH(&table[<int64_t>(queries[i + AHEAD] & mask)])
            if i + AHEAD2 < n:
                cur = table[<int64_t>(queries[i + AHEAD2] & mask)]
                if 0 <= cur < nk:
                    TF_PREFETCH(&keys[cur])
            k = queries[i]
            slot = <int64_t>(k & mask)
            out[i] = -1
            steps = 0
            while steps < m:
                cur = table[slot]
                if cur < 0 or cur >= nk:  # empty (or foreign) slot
                    break
                if keys[cur] == k:
                    out[i] = cur
                    break
                slot = (slot + 1) & <int64_t>mask
                steps += 1

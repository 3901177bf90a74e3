# cython: language_level=3
"""Open-addressing hash table over uniformly distributed uint64 keys (e.g. xxh64 digests).

``table`` (caller-allocated, power-of-two length, at least one empty slot) holds row numbers
into ``keys`` (-1 = empty); the slot of a key is its low bits, collisions probe linearly.
``insert`` adds rows (a key already present keeps its first row); ``probe`` finds queries.
Both are bound by memory latency on large tables, so they prefetch the slots (and, in ``probe``,
the keys those slots point at) of the items a few steps ahead.

``head_counts``, ``scatter_heads`` and ``spread_first`` cut the job into partitions by the
keys' top bits, so that several threads do it at once (one partition's table each, rows in
order: the first row of a key wins whatever the thread count); see the comment above them.
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
def insert(const uint64_t[::1] keys, const int64_t[::1] rows, int32_t[::1] table,
           int64_t[::1] first=None):
    """Insert ``rows`` (numbers into ``keys``); returns how many were new keys. With ``first``
    (one entry per row), ``first[j]`` = the row the table holds for the key of ``rows[j]``
    afterwards (itself when new, the earlier row when not; unset when the table fills).

    The table always keeps at least one empty slot, so that every probe ends: a new key that
    would take the last one raises ``ValueError("table full")`` (the rows before it stay
    inserted), as does a table without an empty slot.
    """
    cdef Py_ssize_t m = table.shape[0], n = rows.shape[0], i, nk = keys.shape[0]
    cdef uint64_t mask, k
    cdef int64_t r, slot, added = 0, cur, free = 0
    cdef bint full = False, bad = False
    cdef uintptr_t a, b, c
    cdef uint32_t u, lim
    cdef bint want = first is not None
    cdef int64_t* fp = NULL
    check_table(m)
    if want and first.shape[0] != n:
        raise ValueError(f"first must have one entry per row ({n}), got {first.shape[0]}")
    # the checks run without the GIL too (threads fill the tables of a partitioned job)
    r = -1
    with nogil:
        for i in range(n):
            if rows[i] < 0 or rows[i] >= nk or rows[i] > 0x7FFFFFFF:
                r = i
                break
    if r >= 0:
        raise ValueError(f"row {rows[r]} out of range for {nk} keys")
    # one branch-free pass over the table: entries in [-1, nk), and the empty slots counted
    # (as unsigned, entry + 1 lies in [0, nk]; the empty slot -1 is 0)
    lim = <uint32_t>nk if nk < 0x80000000 else 0x80000000
    with nogil:
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
    if want:  # written while rows and table are read
        fp = &first[0]
        c = <uintptr_t>fp
        if c < b + <uintptr_t>(8 * n) and b < c + <uintptr_t>(8 * n):
            raise ValueError("first and rows overlap")
        if c < a + <uintptr_t>(4 * m) and a < c + <uintptr_t>(8 * n):
            raise ValueError("first and table overlap")
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
                    cur = r
                    break
                if keys[cur] == k:
                    break
                slot = (slot + 1) & <int64_t>mask
            if full:
                break
            if want:
                fp[i] = cur
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


# Partitioned tables, so that several threads fill them at once: a key's partition is its top
# ``bits`` bits (its slot in the partition's own table, filled with ``insert``, its low bits).
# Only the first row of each run of equal keys (a "head": row 0, or a key unlike the row
# before) goes in. ``head_counts`` counts a block of rows' heads per partition;
# ``scatter_heads`` lists them per partition (``order``, partition after partition, rows in
# order within each); ``insert`` of a partition's list gives each head's first row; and
# ``spread_first`` gives every row of a block the first row of its run's head.

DEF MAX_BITS = 16


cdef int check_bits(int bits, Py_ssize_t got, str what) except -1:
    if bits < 0 or bits > MAX_BITS:
        raise ValueError(f"bits must be in [0, {MAX_BITS}], got {bits}")
    if got != (<Py_ssize_t>1) << bits:
        raise ValueError(f"{what} must have {1 << bits} entries, got {got}")
    return 0


cdef int check_rows(Py_ssize_t start, Py_ssize_t stop, Py_ssize_t n) except -1:
    if start < 0 or stop < start or stop > n:
        raise ValueError(f"rows [{start}, {stop}) out of range for {n} keys")
    return 0


cdef inline int64_t part_of(uint64_t k, int bits) noexcept nogil:
    return 0 if bits == 0 else <int64_t>(k >> (64 - bits))


@cython.boundscheck(False)
@cython.wraparound(False)
def head_counts(const uint64_t[::1] keys, Py_ssize_t start, Py_ssize_t stop, int bits,
                int64_t[::1] counts):
    """Add to ``counts[p]`` the heads among rows ``[start, stop)`` in partition ``p``."""
    cdef Py_ssize_t n = keys.shape[0], i
    cdef uint64_t k
    check_bits(bits, counts.shape[0], "counts")
    check_rows(start, stop, n)
    with nogil:
        for i in range(start, stop):
            k = keys[i]
            if i == 0 or keys[i - 1] != k:
                counts[part_of(k, bits)] += 1
    return None


@cython.boundscheck(False)
@cython.wraparound(False)
def scatter_heads(const uint64_t[::1] keys, Py_ssize_t start, Py_ssize_t stop, int bits,
                  int64_t[::1] cursor, int64_t[::1] order):
    """Write each head ``i`` of rows ``[start, stop)`` to ``order[cursor[p]]`` and advance
    ``cursor[p]`` (``p`` its partition). A cursor that would leave ``order`` raises
    ``ValueError`` (the heads before it are written)."""
    cdef Py_ssize_t n = keys.shape[0], m = order.shape[0], i
    cdef uint64_t k
    cdef int64_t p, c
    cdef bint bad = False
    check_bits(bits, cursor.shape[0], "cursor")
    check_rows(start, stop, n)
    with nogil:
        for i in range(start, stop):
            k = keys[i]
            if i == 0 or keys[i - 1] != k:
                p = part_of(k, bits)
                c = cursor[p]
                if c < 0 or c >= m:
                    bad = True
                    break
                order[c] = i
                cursor[p] = c + 1
    if bad:
        raise ValueError("a cursor points outside order")
    return None


@cython.boundscheck(False)
@cython.wraparound(False)
def spread_first(const uint64_t[::1] keys, Py_ssize_t start, int bits, int64_t[::1] cursor,
                 const int64_t[::1] heads_first, int64_t[::1] out):
    """``out[j]`` = the first row of the key of row ``i = start + j``: at a head, advance
    ``cursor[p]`` (``p`` its partition); every row takes ``heads_first[cursor[p] - 1]`` (the
    entry of the last head of its partition so far: its run's head). ``cursor`` must hold, per
    partition, where the block's heads start in ``heads_first`` (``scatter_heads``'s cursors
    at the block's start). A cursor outside ``heads_first`` raises ``ValueError``."""
    cdef Py_ssize_t n = keys.shape[0], m = heads_first.shape[0], cnt = out.shape[0], j
    cdef uint64_t k
    cdef int64_t p, c, i
    cdef bint bad = False
    check_bits(bits, cursor.shape[0], "cursor")
    check_rows(start, start + cnt, n)
    with nogil:
        for j in range(cnt):
            i = start + j
            k = keys[i]
            p = part_of(k, bits)
            c = cursor[p]
            if i == 0 or keys[i - 1] != k:
                c += 1
                cursor[p] = c
            if c < 1 or c > m:
                bad = True
                break
            out[j] = heads_first[c - 1]
    if bad:
        raise ValueError("a cursor points outside heads_first")
    return None

# cython: language_level=3
"""Open-addressing hash table over uniformly distributed uint64 keys (e.g. xxh64 digests).

``table`` (caller-allocated, power-of-two length, at least one empty slot) holds row numbers
into ``keys`` (-1 = empty); the slot of a key is its low bits, collisions probe linearly.
``insert`` adds rows (a key already present keeps its first row); ``probe`` finds queries.
Both are bound by memory latency on large tables, so they prefetch the slots (and, in ``probe``,
the keys those slots point at) of the items a few steps ahead.

``head_counts``, ``insert_part`` and ``first_rows`` do the same job on a table cut into
partitions by the keys' top bits, so that several threads fill it at once (one partition each,
rows in order: the first row of a key wins whatever the thread count) and then look it up in
blocks of rows; they insert only the first row of each run of equal keys.
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


# Partitioned tables (one thread fills each partition): a key's partition is its top ``bits``
# bits, its slot within the partition's table its low bits. The partitions' tables lie back to
# back in one array: partition ``p`` owns ``table[base[p]:base[p + 1]]`` (a power-of-two length).
# Only the first row of each run of equal keys ("run head") is inserted: rows ``i`` and ``i - 1``
# with the same key share their first row.

DEF MAX_BITS = 16


cdef int check_bits(int bits) except -1:
    if bits < 0 or bits > MAX_BITS:
        raise ValueError(f"bits must be in [0, {MAX_BITS}], got {bits}")
    return 0


cdef int check_base(const int64_t[::1] base, Py_ssize_t m, int bits) except -1:
    cdef Py_ssize_t p, parts = (<Py_ssize_t>1) << bits
    cdef int64_t w
    if base.shape[0] != parts + 1:
        raise ValueError(f"base must have {parts + 1} entries, got {base.shape[0]}")
    if base[0] != 0 or base[parts] != m:
        raise ValueError(f"base must run from 0 to the table length {m}")
    for p in range(parts):
        w = base[p + 1] - base[p]
        if w <= 0 or (w & (w - 1)) != 0:
            raise ValueError(f"partition {p}: table length must be a power of two, got {w}")
    return 0


cdef inline int64_t part_of(uint64_t k, int bits) noexcept nogil:
    return 0 if bits == 0 else <int64_t>(k >> (64 - bits))


@cython.boundscheck(False)
@cython.wraparound(False)
def head_counts(const uint64_t[::1] keys, Py_ssize_t start, Py_ssize_t stop, int bits,
                int64_t[::1] counts):
    """Add to ``counts[p]`` the run heads among rows ``[start, stop)`` whose key lies in
    partition ``p`` (row ``i`` is a head when ``i == 0`` or ``keys[i] != keys[i - 1]``)."""
    cdef Py_ssize_t n = keys.shape[0], i
    cdef uint64_t k
    check_bits(bits)
    if counts.shape[0] != (<Py_ssize_t>1) << bits:
        raise ValueError(f"counts must have {1 << bits} entries, got {counts.shape[0]}")
    if start < 0 or stop < start or stop > n:
        raise ValueError(f"rows [{start}, {stop}) out of range for {n} keys")
    with nogil:
        for i in range(start, stop):
            k = keys[i]
            if i == 0 or keys[i - 1] != k:
                counts[part_of(k, bits)] += 1
    return None


@cython.boundscheck(False)
@cython.wraparound(False)
def insert_part(const uint64_t[::1] keys, int bits, Py_ssize_t part, int32_t[::1] table,
                const int64_t[::1] base, int64_t[::1] first=None):
    """Fill partition ``part``'s table (emptied first) with the first row of each key of that
    partition, rows in order (only run heads are looked up); returns the keys it holds. With
    ``first`` (one entry per key), also set ``first[i]`` for each row ``i`` of the partition
    (the first row with its key): one pass instead of a ``first_rows`` pass after it.

    Raises ``ValueError("table full")`` when the keys would take its last empty slot (a table
    at least one slot longer than the partition's run heads never fills).
    """
    cdef Py_ssize_t n = keys.shape[0], m = table.shape[0], i
    cdef uint64_t k
    cdef int64_t lo, width, slot, cur, added = 0, mask
    cdef bint full = False, want = first is not None
    cdef int64_t* fp = NULL
    check_bits(bits)
    check_base(base, m, bits)
    if part < 0 or part >= (<Py_ssize_t>1) << bits:
        raise ValueError(f"part {part} out of range for {bits} bits")
    if n > 0x7FFFFFFF:
        raise ValueError(f"{n} keys do not fit int32 rows")
    if want:
        if first.shape[0] != n:
            raise ValueError(f"first must have one entry per key ({n}), got {first.shape[0]}")
        if n:
            fp = &first[0]
    lo = base[part]
    width = base[part + 1] - lo
    mask = width - 1
    with nogil:
        for i in range(width):
            table[lo + i] = -1
        for i in range(n):
            if i + AHEAD < n:  # prefetch the slot of a head of this partition ahead
                k = keys[i + AHEAD]
                if part_of(k, bits) == part and keys[i + AHEAD - 1] != k:
                    TF_PREFETCH_W(&table[lo + <int64_t>(k & <uint64_t>mask)])
            if i + AHEAD2 < n:  # and the key its slot holds
                k = keys[i + AHEAD2]
                if part_of(k, bits) == part and keys[i + AHEAD2 - 1] != k:
                    cur = table[lo + <int64_t>(k & <uint64_t>mask)]
                    if cur >= 0:
                        TF_PREFETCH(&keys[cur])
            k = keys[i]
            if part_of(k, bits) != part:
                continue
            if i > 0 and keys[i - 1] == k:
                if want:
                    fp[i] = fp[i - 1]
                continue
            slot = <int64_t>(k & <uint64_t>mask)
            while True:  # ends: an empty slot remains (added <= width - 1)
                cur = table[lo + slot]
                if cur == -1:
                    if added + 1 >= width:
                        full = True
                        break
                    table[lo + slot] = <int32_t>i
                    added += 1
                    cur = i
                    break
                if keys[cur] == k:
                    break
                slot = (slot + 1) & mask
            if full:
                break
            if want:
                fp[i] = cur
    if full:
        raise ValueError("table full")
    return added


@cython.boundscheck(False)
@cython.wraparound(False)
def first_rows(const uint64_t[::1] keys, int bits, const int32_t[::1] table,
               const int64_t[::1] base, Py_ssize_t start, int64_t[::1] out):
    """``out[j]`` = the row in the partitioned ``table`` with the key of row ``start + j``
    (-1 when absent); a row with its predecessor's key in ``out`` shares its answer. Returns
    how many were absent."""
    cdef Py_ssize_t n = keys.shape[0], m = table.shape[0], j, cnt = out.shape[0]
    cdef uint64_t k
    cdef int64_t lo, mask, slot, cur, steps, missing = 0, p
    check_bits(bits)
    check_base(base, m, bits)
    if start < 0 or start + cnt > n:
        raise ValueError(f"rows [{start}, {start + cnt}) out of range for {n} keys")
    with nogil:
        for j in range(cnt):
            k = keys[start + j + AHEAD] if j + AHEAD < cnt else 0
            if j + AHEAD < cnt and keys[start + j + AHEAD - 1] != k:
                p = part_of(k, bits)
                TF_PREFETCH(&table[base[p] + <int64_t>(k & <uint64_t>(base[p + 1] - base[p] - 1))])
            k = keys[start + j + AHEAD2] if j + AHEAD2 < cnt else 0
            if j + AHEAD2 < cnt and keys[start + j + AHEAD2 - 1] != k:
                p = part_of(k, bits)
                cur = table[base[p] + <int64_t>(k & <uint64_t>(base[p + 1] - base[p] - 1))]
                if 0 <= cur < n:
                    TF_PREFETCH(&keys[cur])
            k = keys[start + j]
            if j > 0 and keys[start + j - 1] == k:
                out[j] = out[j - 1]
                if out[j] < 0:
                    missing += 1
                continue
            p = part_of(k, bits)
            lo = base[p]
            mask = base[p + 1] - lo - 1
            slot = <int64_t>(k & <uint64_t>mask)
            out[j] = -1
            steps = 0
            while steps <= mask:
                cur = table[lo + slot]
                if cur < 0 or cur >= n:  # empty (or foreign) slot
                    break
                if keys[cur] == k:
                    out[j] = cur
                    break
                slot = (slot + 1) & mask
                steps += 1
            if out[j] < 0:
                missing += 1
    return missing

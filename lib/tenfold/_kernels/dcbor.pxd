# cython: language_level=3
"""C-level exports of ``dcbor`` for other kernel families (``cimport``)."""

from libc.stdint cimport uint8_t, uint64_t

cdef enum:
    CACHE_SLOTS = 64

cdef struct Ctx:
    # one decode: the input, the depth limit, and the short-text cache (its str objects live
    # in a list of CACHE_SLOTS entries that the caller owns and passes along)
    const uint8_t* d
    Py_ssize_t n
    int max_depth
    uint64_t key[CACHE_SLOTS]
    Py_ssize_t length[CACHE_SLOTS]

cdef struct Head:
    int major
    int info
    uint64_t arg
    Py_ssize_t next

cdef list start(Ctx* c, const uint8_t* d, Py_ssize_t n, int max_depth)
cdef int read_head(Ctx* c, Py_ssize_t pos, Head* h) except -1
cdef bint peek_head(Ctx* c, Py_ssize_t pos, Head* h) noexcept
cdef int check_container(Ctx* c, Head* h, Py_ssize_t pos, int depth) except -1
cdef int check_key_order(Ctx* c, Py_ssize_t kpos, Py_ssize_t klen, Py_ssize_t prev_pos,
                         Py_ssize_t prev_len, object k) except -1
cdef object map_key(Ctx* c, object k, Py_ssize_t kpos, Py_ssize_t klen)
cdef object short_text(Ctx* c, list strings, Py_ssize_t start, Py_ssize_t length,
                       Py_ssize_t pos)
cdef object decode_item(Ctx* c, list strings, Py_ssize_t pos, int depth, Py_ssize_t* end)

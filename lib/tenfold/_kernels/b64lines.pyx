# cython: language_level=3
"""Line framing of base64 text: fixed-width lines, each followed by a space, one lowercase hex
parity nibble (XOR of the line's characters, low 4 bits) and LF.

``frame_lines`` turns base64 text into framed lines (``frame_block`` does the same between a
prefix and a suffix, at an offset of a larger output buffer); ``unframe_lines`` validates a given number
of framed lines (widths, alphabet, padding, separator, nibble, parity, line ends, canonical
padding bits) in one pass and copies the base64 characters out. Status codes are module
constants; on failure the index of the first bad line and the offset of the offending byte
are returned, never raised.
"""

from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcpy
from cpython.pyport cimport PY_SSIZE_T_MAX
cimport cython

cdef enum:
    C_OK = 0
    C_TRUNCATED = 1
    C_WIDTH = 2
    C_CHAR = 3
    C_SEP = 4
    C_NIBBLE = 5
    C_PARITY = 6
    C_EOL = 7
    C_PADBITS = 8

OK = C_OK
ERR_TRUNCATED = C_TRUNCATED
ERR_WIDTH = C_WIDTH
ERR_CHAR = C_CHAR
ERR_SEP = C_SEP
ERR_NIBBLE = C_NIBBLE
ERR_PARITY = C_PARITY
ERR_EOL = C_EOL
ERR_PADBITS = C_PADBITS

cdef uint8_t[256] _VAL      # base64 value + 1, 0 = not in the alphabet
cdef uint8_t[256] _NIB      # hex nibble value + 1, 0 = not a lowercase hex digit
cdef uint8_t[256] _BAD      # 1 = not in the alphabet
cdef const char* _HEX = b"0123456789abcdef"


cdef void _init_tables() noexcept:
    cdef int i
    cdef const char* alpha = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    for i in range(256):
        _VAL[i] = 0
        _NIB[i] = 0
    for i in range(64):
        _VAL[<uint8_t>alpha[i]] = i + 1
    for i in range(256):
        _BAD[i] = 1 if _VAL[i] == 0 else 0
    for i in range(16):
        _NIB[<uint8_t>_HEX[i]] = i + 1


_init_tables()


cdef Py_ssize_t _framed(Py_ssize_t n, Py_ssize_t width) except -1:
    """``n + 3 * ceil(n / width)``, or ValueError when that does not fit a Py_ssize_t."""
    cdef Py_ssize_t nlines
    if n < 0 or width <= 0:
        raise ValueError("n must be >= 0 and width > 0")
    nlines = n // width + (1 if n % width else 0)
    if nlines > (PY_SSIZE_T_MAX - n) // 3:
        raise ValueError(f"{n} characters in lines of {width}: framed size overflows")
    return n + 3 * nlines


def framed_size(Py_ssize_t n, Py_ssize_t width=76):
    """Bytes that ``n`` base64 characters take once framed in lines of ``width``."""
    return _framed(n, width)


cdef inline uint8_t _copy_xor(uint8_t* dst, const uint8_t* q, Py_ssize_t w) noexcept nogil:
    """Copy ``w`` bytes and return their XOR, eight bytes at a time (one pass)."""
    cdef uint64_t acc = 0, word
    cdef Py_ssize_t j = 0
    cdef uint8_t x = 0
    while j + 8 <= w:
        memcpy(&word, q + j, 8)
        memcpy(dst + j, &word, 8)
        acc ^= word
        j += 8
    while j < w:
        x ^= q[j]
        dst[j] = q[j]
        j += 1
    acc ^= acc >> 32
    acc ^= acc >> 16
    acc ^= acc >> 8
    return x ^ <uint8_t>acc


cdef Py_ssize_t _frame(const uint8_t* src, Py_ssize_t n, uint8_t* dst,
                       Py_ssize_t width) noexcept nogil:
    cdef Py_ssize_t i = 0, o = 0, w
    cdef uint8_t x
    while i < n:
        w = width if n - i > width else n - i
        # the format's width as a constant: the copy unrolls completely
        x = _copy_xor(dst + o, src + i, 76) if w == 76 else _copy_xor(dst + o, src + i, w)
        o += w
        i += w
        dst[o] = 32
        dst[o + 1] = _HEX[x & 15]
        dst[o + 2] = 10
        o += 3
    return o


@cython.boundscheck(False)
@cython.wraparound(False)
def frame_lines(const uint8_t[::1] b64, uint8_t[::1] out, Py_ssize_t width=76):
    """Write ``b64`` into ``out`` as lines of ``width`` characters + ``" " nibble "\\n"``.

    Returns the number of bytes written (``framed_size(len(b64), width)``).
    """
    cdef Py_ssize_t n = b64.shape[0]
    cdef Py_ssize_t need, o = 0
    if width <= 0:
        raise ValueError("width must be > 0")
    need = _framed(n, width)
    if out.shape[0] < need:
        raise ValueError(f"output too small: need {need} bytes, got {out.shape[0]}")
    if n == 0:
        return 0
    with nogil:
        o = _frame(&b64[0], n, &out[0], width)
    return o


@cython.boundscheck(False)
@cython.wraparound(False)
def frame_block(const uint8_t[::1] prefix, const uint8_t[::1] b64, const uint8_t[::1] suffix,
                uint8_t[::1] out, Py_ssize_t pos, Py_ssize_t width=76):
    """Write ``prefix``, ``b64`` framed as by :func:`frame_lines`, then ``suffix`` into ``out``
    starting at ``pos``. Returns the offset just past what was written.
    """
    cdef Py_ssize_t n = b64.shape[0], np_ = prefix.shape[0], ns = suffix.shape[0]
    cdef Py_ssize_t need, o = pos
    if width <= 0 or pos < 0:
        raise ValueError("width must be > 0 and pos >= 0")
    need = _framed(n, width)
    if need > PY_SSIZE_T_MAX - np_ - ns:
        raise ValueError(f"{np_} + {need} + {ns} bytes: framed size overflows")
    need += np_ + ns
    if out.shape[0] - pos < need:
        raise ValueError(f"output too small: need {need} bytes after {pos}, "
                         f"got {out.shape[0] - pos}")
    if need == 0:
        return pos
    with nogil:
        if np_:
            memcpy(&out[o], &prefix[0], np_)
            o += np_
        if n:
            o += _frame(&b64[0], n, &out[o], width)
        if ns:
            memcpy(&out[o], &suffix[0], ns)
            o += ns
    return o


cdef int _unframe(const uint8_t* tp, Py_ssize_t n, Py_ssize_t nlines, uint8_t* op,
                  Py_ssize_t width, bint strict, Py_ssize_t* res) noexcept nogil:
    """The line loop of ``unframe_lines``; ``res`` receives (line, pos, output length).

    With ``strict`` false, full lines taken by the fast path are copied without checking the
    alphabet: the caller checks the copied text afterwards in one vectorisable pass and reruns
    strictly if anything is outside the alphabet, so results are the same either way.
    """
    cdef Py_ssize_t p = 0, o = 0, line = 0, j, pads, total, start
    cdef uint8_t x, c, v, bad
    cdef const uint8_t* q
    cdef int status = 0
    while line < nlines:
        start = p
        # fast path: a full-width line that is entirely valid (checked branch-free)
        if line < nlines - 1 and p + width + 3 <= n:
            q = tp + p
            # copy while computing the parity; a rejected line is rewritten by the slow path
            # the format's width as a constant: the copy unrolls completely
            x = _copy_xor(op + o, q, 76) if width == 76 else _copy_xor(op + o, q, width)
            bad = 0
            if strict:
                for j in range(width):
                    bad |= _BAD[q[j]]
            if (bad == 0 and q[width] == 32 and q[width + 2] == 10
                    and _NIB[q[width + 1]] == (x & 15) + 1):
                p += width + 3
                o += width
                line += 1
                continue
        x = 0
        j = 0
        while j < width and p < n and _VAL[tp[p]] != 0:
            c = tp[p]
            x ^= c
            op[o + j] = c
            j += 1
            p += 1
        pads = 0
        while pads < 2 and j + pads < width and p < n and tp[p] == 61 and line == nlines - 1:
            x ^= 61
            op[o + j + pads] = 61
            pads += 1
            p += 1
        if p >= n:
            status = C_TRUNCATED
            break
        c = tp[p]
        if c != 32:
            if j + pads == width and (_VAL[c] != 0 or c == 61):
                status = C_WIDTH
            elif c == 10:
                status = C_SEP
            else:
                status = C_CHAR
            break
        total = j + pads
        if line < nlines - 1:
            if total != width:
                status = C_WIDTH
                break
        elif total == 0 or total % 4 != 0:
            status = C_WIDTH
            break
        p += 1
        if p >= n:
            status = C_TRUNCATED
            break
        v = _NIB[tp[p]]
        if v == 0:
            status = C_NIBBLE
            break
        if v - 1 != (x & 15):
            status = C_PARITY
            break
        p += 1
        if p >= n:
            status = C_TRUNCATED
            break
        if tp[p] != 10:
            status = C_EOL
            break
        if pads == 1 and ((_VAL[op[o + total - 2]] - 1) & 3) != 0:
            status = C_PADBITS
            p = start + total - 2
            break
        if pads == 2 and ((_VAL[op[o + total - 3]] - 1) & 15) != 0:
            status = C_PADBITS
            p = start + total - 3
            break
        p += 1
        o += total
        line += 1
    res[0] = line
    res[1] = p
    res[2] = o
    return status


cdef inline bint _any_bad(const uint8_t* q, Py_ssize_t n) noexcept nogil:
    """True if any of ``n`` bytes is outside the base64 alphabet (``=`` included)."""
    cdef uint8_t bad = 0, c
    cdef Py_ssize_t j
    for j in range(n):
        c = q[j]
        # three tests instead of five: (c | 32) folds 'A'-'Z' onto 'a'-'z' (no other byte
        # lands there) and (c | 4) == 47 holds for '+' (43) and '/' (47) only
        bad |= ((<uint8_t>((c | 32) - 97) >= 26) & (<uint8_t>(c - 48) >= 10)
                & ((c | 4) != 47))
    return bad != 0


@cython.boundscheck(False)
@cython.wraparound(False)
def unframe_lines(const uint8_t[::1] text, Py_ssize_t nlines, uint8_t[::1] out,
                  Py_ssize_t width=76):
    """Validate ``nlines`` framed lines at the start of ``text``; copy their base64 into ``out``.

    Every line but the last holds exactly ``width`` alphabet characters; the last holds 4 to
    ``width`` characters, a multiple of 4, ending in at most two ``=`` whose padding bits are
    zero. Returns ``(status, line, pos)``: on success ``(OK, nlines, consumed)``, the base64
    length being ``consumed - 3 * nlines``; on failure the status code, the index of the first
    bad line and the offset in ``text`` of the offending byte.
    """
    cdef Py_ssize_t n = text.shape[0]
    cdef Py_ssize_t res[3]
    cdef Py_ssize_t full
    cdef const uint8_t* tp = NULL
    cdef uint8_t* op = NULL
    cdef int status = 0
    if nlines < 0 or width <= 0:
        raise ValueError("nlines must be >= 0 and width > 0")
    # out.shape[0] >= nlines * width, without a product that could wrap
    if nlines > 0 and width > out.shape[0] // nlines:
        raise ValueError(f"output too small: need {(<object>nlines) * width} bytes, "
                         f"got {out.shape[0]}")
    if n > 0:
        tp = &text[0]
    if out.shape[0] > 0:
        op = &out[0]
    with nogil:
        status = _unframe(tp, n, nlines, op, width, False, res)
        # completed lines before the last hold exactly ``width`` alphabet characters each
        full = res[0] if res[0] < nlines - 1 else nlines - 1
        if full > 0 and _any_bad(op, full * width):
            status = _unframe(tp, n, nlines, op, width, True, res)
    return (status, res[0], res[1])

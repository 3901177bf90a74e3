# cython: language_level=3
"""Line framing of base64 text: fixed-width lines, each followed by a space, one lowercase hex
parity nibble (XOR of the line's characters, low 4 bits) and LF.

``frame_lines`` turns base64 text into framed lines; ``unframe_lines`` validates a given number
of framed lines (widths, alphabet, padding, separator, nibble, parity, line ends, canonical
padding bits) in one pass and copies the base64 characters out. Status codes are module
constants; on failure the index of the first bad line and the offset of the offending byte
are returned, never raised.
"""

from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcpy
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


def framed_size(Py_ssize_t n, Py_ssize_t width=76):
    """Bytes that ``n`` base64 characters take once framed in lines of ``width``."""
    if n < 0 or width <= 0:
        raise ValueError("n must be >= 0 and width > 0")
    return n + 3 * ((n + width - 1) // width)


@cython.boundscheck(False)
@cython.wraparound(False)
def frame_lines(const uint8_t[::1] b64, uint8_t[::1] out, Py_ssize_t width=76):
    """Write ``b64`` into ``out`` as lines of ``width`` characters + ``" " nibble "\\n"``.

    Returns the number of bytes written (``framed_size(len(b64), width)``).
    """
    cdef Py_ssize_t n = b64.shape[0]
    cdef Py_ssize_t need, i = 0, o = 0, j, w
    cdef uint8_t x
    if width <= 0:
        raise ValueError("width must be > 0")
    need = n + 3 * ((n + width - 1) // width)
    if out.shape[0] < need:
        raise ValueError(f"output too small: need {need} bytes, got {out.shape[0]}")
    if n == 0:
        return 0
    with nogil:
        while i < n:
            w = width if n - i > width else n - i
            x = 0
            for j in range(w):
                x ^= b64[i + j]
                out[o + j] = b64[i + j]
            o += w
            i += w
            out[o] = 32
            out[o + 1] = _HEX[x & 15]
            out[o + 2] = 10
            o += 3
    return o


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
    cdef Py_ssize_t p = 0, o = 0, line = 0, j, pads, total, start
    cdef uint8_t x, c, v, bad
    cdef uint64_t word, w64
    cdef const uint8_t* tp = NULL
    cdef const uint8_t* q
    cdef uint8_t* op = NULL
    cdef int status = 0
    if nlines < 0 or width <= 0:
        raise ValueError("nlines must be >= 0 and width > 0")
    if out.shape[0] < nlines * width:
        raise ValueError(f"output too small: need {nlines * width} bytes, got {out.shape[0]}")
    if n > 0:
        tp = &text[0]
    if out.shape[0] > 0:
        op = &out[0]
    with nogil:
        while line < nlines:
            start = p
            # fast path: a full-width line that is entirely valid (checked branch-free)
            if line < nlines - 1 and p + width + 3 <= n:
                q = tp + p
                bad = 0
                w64 = 0
                j = 0
                while j + 8 <= width:
                    memcpy(&word, q + j, 8)
                    w64 ^= word
                    j += 8
                x = 0
                while j < width:
                    x ^= q[j]
                    j += 1
                w64 ^= w64 >> 32
                w64 ^= w64 >> 16
                w64 ^= w64 >> 8
                x ^= <uint8_t>w64
                for j in range(width):
                    bad |= _BAD[q[j]]
                if (bad == 0 and q[width] == 32 and q[width + 2] == 10
                        and _NIB[q[width + 1]] == (x & 15) + 1):
                    memcpy(op + o, q, width)
                    p += width + 3
                    o += width
                    line += 1
                    continue
            x = 0
            j = 0
            while j < width and p < n and _VAL[text[p]] != 0:
                c = text[p]
                x ^= c
                out[o + j] = c
                j += 1
                p += 1
            pads = 0
            while pads < 2 and j + pads < width and p < n and text[p] == 61 and line == nlines - 1:
                x ^= 61
                out[o + j + pads] = 61
                pads += 1
                p += 1
            if p >= n:
                status = C_TRUNCATED
                break
            c = text[p]
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
            v = _NIB[text[p]]
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
            if text[p] != 10:
                status = C_EOL
                break
            if pads == 1 and ((_VAL[out[o + total - 2]] - 1) & 3) != 0:
                status = C_PADBITS
                p = start + total - 2
                break
            if pads == 2 and ((_VAL[out[o + total - 3]] - 1) & 15) != 0:
                status = C_PADBITS
                p = start + total - 3
                break
            p += 1
            o += total
            line += 1
    if status != 0:
        return (status, line, p)
    return (0, nlines, p)

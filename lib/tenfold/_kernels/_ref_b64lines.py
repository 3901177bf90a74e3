"""Reference twins of ``b64lines.pyx`` (NumPy fast path, per-line Python for errors)."""

from __future__ import annotations

import numpy as np

from ._cargs import SSIZE_MAX, ssize

OK = 0
ERR_TRUNCATED = 1
ERR_WIDTH = 2
ERR_CHAR = 3
ERR_SEP = 4
ERR_NIBBLE = 5
ERR_PARITY = 6
ERR_EOL = 7
ERR_PADBITS = 8

_ALPHA = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_HEX = b"0123456789abcdef"
_VAL = np.zeros(256, np.int16) - 1
_VAL[np.frombuffer(_ALPHA, np.uint8)] = np.arange(64)
_NIB = np.zeros(256, np.int16) - 1
_NIB[np.frombuffer(_HEX, np.uint8)] = np.arange(16)
_HEXARR = np.frombuffer(_HEX, np.uint8)


def framed_size(n: int, width: int = 76) -> int:
    """Bytes that ``n`` base64 characters take once framed in lines of ``width``."""
    n, width = ssize(n), ssize(width)
    if n < 0 or width <= 0:
        raise ValueError("n must be >= 0 and width > 0")
    size = n + 3 * -(-n // width)
    if size > SSIZE_MAX:
        raise ValueError(f"{n} characters in lines of {width}: framed size overflows")
    return size


def frame_lines(b64: object, out: object, width: int = 76) -> int:
    """Write ``b64`` into ``out`` as lines of ``width`` characters + ``" " nibble "\\n"``."""
    width = ssize(width)
    if width <= 0:
        raise ValueError("width must be > 0")
    src = np.frombuffer(b64, np.uint8)  # type: ignore[call-overload]
    dst = np.frombuffer(out, np.uint8)  # type: ignore[call-overload]
    n = src.size
    need = framed_size(n, width)
    if dst.size < need:
        raise ValueError(f"output too small: need {need} bytes, got {dst.size}")
    if n == 0:
        return 0
    nfull, last = divmod(n, width)  # full lines, characters of a last short line
    head = nfull * (width + 3)
    if nfull:
        mat = src[: nfull * width].reshape(nfull, width)
        framed = dst[:head].reshape(nfull, width + 3)
        framed[:, :width] = mat
        framed[:, width] = 32
        framed[:, width + 1] = _HEXARR[np.bitwise_xor.reduce(mat, axis=1) & 15]
        framed[:, width + 2] = 10
    if last:
        tail = src[nfull * width :]
        dst[head : head + last] = tail
        dst[head + last : head + last + 3] = (32, _HEXARR[np.bitwise_xor.reduce(tail) & 15], 10)
    return need


def frame_block(
    prefix: object, b64: object, suffix: object, out: object, pos: int, width: int = 76
) -> int:
    """``prefix``, framed ``b64`` and ``suffix`` written into ``out`` from ``pos``; the end."""
    pos, width = ssize(pos), ssize(width)
    if width <= 0 or pos < 0:
        raise ValueError("width must be > 0 and pos >= 0")
    pre = np.frombuffer(prefix, np.uint8)  # type: ignore[call-overload]
    suf = np.frombuffer(suffix, np.uint8)  # type: ignore[call-overload]
    src = np.frombuffer(b64, np.uint8)  # type: ignore[call-overload]
    dst = np.frombuffer(out, np.uint8)  # type: ignore[call-overload]
    need = pre.size + framed_size(src.size, width) + suf.size
    if dst.size - pos < need:
        raise ValueError(f"output too small: need {need} bytes after {pos}, got {dst.size - pos}")
    o = pos
    dst[o : o + pre.size] = pre
    o += pre.size
    o += frame_lines(src, dst[o:], width)
    dst[o : o + suf.size] = suf
    return o + suf.size


def unframe_lines(text: object, nlines: int, out: object, width: int = 76) -> tuple[int, int, int]:
    """Validate ``nlines`` framed lines at the start of ``text``; copy their base64 into ``out``.

    Same contract as the compiled kernel: ``(status, line, pos)``.
    """
    nlines, width = ssize(nlines), ssize(width)
    if nlines < 0 or width <= 0:
        raise ValueError("nlines must be >= 0 and width > 0")
    src = np.frombuffer(text, np.uint8)  # type: ignore[call-overload]
    dst = np.frombuffer(out, np.uint8)  # type: ignore[call-overload]
    if dst.flags.writeable is False:
        raise ValueError("output buffer is read-only")
    if dst.size < nlines * width:
        raise ValueError(f"output too small: need {nlines * width} bytes, got {dst.size}")
    if nlines == 0:
        return (OK, 0, 0)
    # Fast path: every line but the last is a full line; check them all at once.
    stride = width + 3
    nfull = nlines - 1
    if src.size >= nfull * stride:
        mat = src[: nfull * stride].reshape(nfull, stride)
        body = mat[:, :width]
        good = (
            bool((_VAL[body] >= 0).all())
            and bool((mat[:, width] == 32).all())
            and bool((mat[:, width + 2] == 10).all())
        )
        if good:
            nib = _NIB[mat[:, width + 1]]
            good = bool(((np.bitwise_xor.reduce(body, axis=1) & 15) == nib).all())
        if good:
            dst[: nfull * width] = body.reshape(-1)
            st, _line, p = _slow(src, nlines, dst, width, nfull, nfull * stride, nfull * width)
            return (st, _line, p)
    return _slow(src, nlines, dst, width, 0, 0, 0)


def _slow(
    src: np.ndarray, nlines: int, dst: np.ndarray, width: int, line: int, p: int, o: int
) -> tuple[int, int, int]:
    n = src.size
    while line < nlines:
        start = p
        last = line == nlines - 1
        x = 0
        j = 0
        while j < width and p < n and _VAL[src[p]] >= 0:
            c = int(src[p])
            x ^= c
            dst[o + j] = c
            j += 1
            p += 1
        pads = 0
        while pads < 2 and j + pads < width and p < n and src[p] == 61 and last:
            x ^= 61
            dst[o + j + pads] = 61
            pads += 1
            p += 1
        if p >= n:
            return (ERR_TRUNCATED, line, p)
        c = int(src[p])
        if c != 32:
            if j + pads == width and (_VAL[c] >= 0 or c == 61):
                return (ERR_WIDTH, line, p)
            if c == 10:
                return (ERR_SEP, line, p)
            return (ERR_CHAR, line, p)
        total = j + pads
        if not last:
            if total != width:
                return (ERR_WIDTH, line, p)
        elif total == 0 or total % 4:
            return (ERR_WIDTH, line, p)
        p += 1
        if p >= n:
            return (ERR_TRUNCATED, line, p)
        v = int(_NIB[src[p]])
        if v < 0:
            return (ERR_NIBBLE, line, p)
        if v != (x & 15):
            return (ERR_PARITY, line, p)
        p += 1
        if p >= n:
            return (ERR_TRUNCATED, line, p)
        if src[p] != 10:
            return (ERR_EOL, line, p)
        if pads == 1 and (int(_VAL[dst[o + total - 2]]) & 3):
            return (ERR_PADBITS, line, start + total - 2)
        if pads == 2 and (int(_VAL[dst[o + total - 3]]) & 15):
            return (ERR_PADBITS, line, start + total - 3)
        p += 1
        o += total
        line += 1
    return (OK, nlines, p)

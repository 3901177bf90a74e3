"""Reference twin of ``strhash.pyx``: the same functions with :mod:`xxhash` and Python loops."""

from __future__ import annotations

import numpy as np
import xxhash

from ._cargs import ssize, u64


def _check(size: int, off, length) -> None:
    if len(off) != len(length):
        raise ValueError("offsets and lengths differ in length")
    for i, (o, n) in enumerate(
        zip(np.asarray(off).tolist(), np.asarray(length).tolist(), strict=True)
    ):
        if o < 0 or n < 0 or o + n > size:
            raise ValueError(f"range {i} ({o}, {n}) outside the buffer of {size}")


def _bytes(buf) -> bytes:
    return memoryview(buf).cast("B").tobytes()


def _mem(x) -> np.ndarray:
    """The bytes of a buffer as an array over the same memory."""
    return np.frombuffer(memoryview(x).cast("B"), np.uint8)


def _apart(outs, srcs, what: str) -> None:
    """ValueError when an output shares memory with an input that says where to read (or, for
    a copy, with the source): the compiled kernel writes one while reading the other."""
    for o in outs:
        for s in srcs:
            if np.may_share_memory(_mem(o), _mem(s)):
                raise ValueError(f"{what} overlap")


def hash_ranges(buf, off, length, seed, out, ascii_lower=False):
    """``out[i] = xxh64(buf[off[i]:off[i]+length[i]], seed)`` (of the ASCII-lower-cased bytes
    when ``ascii_lower``)."""
    seed = u64(seed)
    b = _bytes(buf)
    if len(out) != len(off):
        raise ValueError("out must have one entry per range")
    _check(len(b), off, length)
    _apart([out], [off], "out and offsets")
    _apart([out], [length], "out and lengths")
    for i, (o, n) in enumerate(
        zip(np.asarray(off).tolist(), np.asarray(length).tolist(), strict=True)
    ):
        s = b[o : o + n]
        if ascii_lower:
            s = bytes(c + 32 if 65 <= c <= 90 else c for c in s)
        out[i] = xxhash.xxh64_intdigest(s, seed)


def hash_strs(strs, seed, out):
    """``out[i] = xxh64(strs[i].encode("utf-8", "surrogatepass"), seed)`` for a list (or
    tuple) of ``str``."""
    seed = u64(seed)
    seq = strs if isinstance(strs, (list, tuple)) else list(strs)
    if len(out) != len(seq):
        raise ValueError("out must have one entry per string")
    for i, s in enumerate(seq):
        if not isinstance(s, str):
            raise TypeError(f"expected str, got {type(s).__name__}")
        out[i] = xxhash.xxh64_intdigest(str.encode(s, "utf-8", "surrogatepass"), seed)


def split_basenames(buf, off, length, stem_off, stem_len, ext_off, ext_len, ascii):
    """Split each range's basename (after the last ``/``) at its first ``.``.

    ``stem`` is the part before the dot, ``ext`` the part after it (empty, at the end of the
    basename, when there is no dot). ``ascii[i]`` is 1 when the basename is 7-bit ASCII.
    """
    b = _bytes(buf)
    n = len(off)
    if any(len(x) != n for x in (stem_off, stem_len, ext_off, ext_len, ascii)):
        raise ValueError("outputs must have one entry per range")
    _check(len(b), off, length)
    _apart([stem_off, stem_len, ext_off, ext_len, ascii], [off, length], "outputs and ranges")
    for i, (o, m) in enumerate(
        zip(np.asarray(off).tolist(), np.asarray(length).tolist(), strict=True)
    ):
        e = o + m
        s = b.rfind(b"/", o, e) + 1 if b.rfind(b"/", o, e) >= 0 else o
        dot = b.find(b".", s, e)
        ascii[i] = 1 if all(c < 128 for c in b[s:e]) else 0
        stem_off[i] = s
        if dot < 0:
            stem_len[i], ext_off[i], ext_len[i] = e - s, e, 0
        else:
            stem_len[i], ext_off[i], ext_len[i] = dot - s, dot + 1, e - dot - 1


def gather(buf, off, length, out):
    """Concatenate the ranges into ``out`` (whose length must be their total length)."""
    b = _bytes(buf)
    _check(len(b), off, length)
    total = sum(np.asarray(length).tolist())
    if total != len(out):
        raise ValueError(f"out holds {len(out)} bytes; the ranges total {total}")
    _apart([out], [off], "out and offsets")
    _apart([out], [length], "out and lengths")
    _apart([out], [buf], "out and buf")
    joined = b"".join(
        b[o : o + n]
        for o, n in zip(np.asarray(off).tolist(), np.asarray(length).tolist(), strict=True)
    )
    if total:
        out[:] = np.frombuffer(joined, np.uint8)


def gather_strided(buf, start, stride, width, out):
    """``out[i*width:(i+1)*width] = buf[start + i*stride:][:width]`` for every ``i`` of
    ``len(out) // width`` (``len(out)`` must be a multiple of ``width``)."""
    start, stride, width = ssize(start), ssize(stride), ssize(width)
    if width <= 0 or stride < width or start < 0:
        raise ValueError(f"bad layout: start {start}, stride {stride}, width {width}")
    if len(out) % width:
        raise ValueError(f"out holds {len(out)} bytes, not a multiple of {width}")
    n = len(out) // width
    if n == 0:
        return
    b = np.frombuffer(buf, np.uint8)
    if start + (n - 1) * stride + width > b.size:
        raise ValueError(
            f"{n} items of {width} bytes every {stride} from {start} overrun the buffer of {b.size}"
        )
    _apart([out], [buf], "out and buf")
    src = np.lib.stride_tricks.as_strided(b[start:], (n, width), (stride, 1))
    np.asarray(out).reshape(n, width)[:] = src


def ranges_equal(buf, a_off, a_len, b_off, b_len, out):
    """``out[i] = 1`` when range ``a[i]`` and range ``b[i]`` hold the same bytes, else 0."""
    b = _bytes(buf)
    n = len(a_off)
    if len(b_off) != n or len(out) != n:
        raise ValueError("a, b and out must have the same length")
    _check(len(b), a_off, a_len)
    _check(len(b), b_off, b_len)
    _apart([out], [a_off, a_len, b_off, b_len], "out and ranges")
    for i in range(n):
        ao, al, bo, bl = int(a_off[i]), int(a_len[i]), int(b_off[i]), int(b_len[i])
        out[i] = 1 if b[ao : ao + al] == b[bo : bo + bl] else 0

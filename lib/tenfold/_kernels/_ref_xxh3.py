"""Reference twin of ``xxh3.pyx``: XXH3-64 in plain Python integers, from the algorithm's
description (xxHash's ``doc/xxhash_spec.md``), with the same streaming state.

The executable specification and the test oracle (tens of kB/s): the library never hashes
payloads with it (``tenfold.core.checksums`` uses the ``xxhash`` package when the compiled
kernel is not in use).
"""

from __future__ import annotations

import threading

from ._cargs import u64

__all__ = ["xxh3_64", "Xxh3State", "copy_xxh3", "implementation", "NOGIL_BYTES"]

#: Same name as the compiled kernel's (there is no GIL to release here).
NOGIL_BYTES = 1 << 14

M64 = (1 << 64) - 1
P32_1, P32_2, P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
P64_1, P64_2, P64_3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P64_4, P64_5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
MX1, MX2 = 0x165667919E3779F9, 0x9FB21C651E98DF25

#: The default 192-byte secret (the algorithm's constant).
SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)
STRIPE, PER_BLOCK, MID, BUF, LAST = 64, 16, 240, 256, 121
ACC0 = (P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1)


def _bytes(data: object, what: str, writable: bool = False) -> memoryview:
    """Any C-contiguous buffer as its bytes (what the compiled kernel's buffer request takes)."""
    mv = memoryview(data)  # type: ignore[arg-type]
    if not mv.c_contiguous:
        raise BufferError(f"{what}: not a C-contiguous buffer")
    if writable and mv.readonly:
        raise BufferError(f"{what}: object is not writable")
    return mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv


def _r64(b: bytes, at: int) -> int:
    return int.from_bytes(b[at : at + 8], "little")


def _r32(b: bytes, at: int) -> int:
    return int.from_bytes(b[at : at + 4], "little")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def _swap64(x: int) -> int:
    return int.from_bytes(x.to_bytes(8, "little"), "big")


def _mulfold(a: int, b: int) -> int:
    m = a * b
    return (m & M64) ^ (m >> 64)


def _avalanche(x: int) -> int:
    x ^= x >> 37
    x = (x * MX1) & M64
    return x ^ (x >> 32)


def _avalanche64(x: int) -> int:
    x ^= x >> 33
    x = (x * P64_2) & M64
    x ^= x >> 29
    x = (x * P64_3) & M64
    return x ^ (x >> 32)


def _upto16(p: bytes, seed: int) -> int:
    n, k = len(p), SECRET
    if n > 8:
        lo = (((_r64(k, 24) ^ _r64(k, 32)) + seed) & M64) ^ _r64(p, 0)
        hi = (((_r64(k, 40) ^ _r64(k, 48)) - seed) & M64) ^ _r64(p, n - 8)
        return _avalanche((n + _swap64(lo) + hi + _mulfold(lo, hi)) & M64)
    if n >= 4:
        s = seed ^ (int.from_bytes((seed & 0xFFFFFFFF).to_bytes(4, "little"), "big") << 32)
        c = _r32(p, n - 4) | (_r32(p, 0) << 32)
        v = (((_r64(k, 8) ^ _r64(k, 16)) - s) & M64) ^ c
        v ^= _rotl(v, 49) ^ _rotl(v, 24)
        v = (v * MX2) & M64
        v ^= (v >> 35) + n
        v = (v * MX2) & M64
        return v ^ (v >> 28)
    if n:
        c = p[n - 1] | (n << 8) | (p[0] << 16) | (p[n >> 1] << 24)
        return _avalanche64((((_r32(k, 0) ^ _r32(k, 4)) + seed) & M64) ^ c)
    return _avalanche64(seed ^ _r64(k, 56) ^ _r64(k, 64))


def _mix16(p: bytes, at: int, ks: int, seed: int) -> int:
    k = SECRET
    return _mulfold(
        _r64(p, at) ^ ((_r64(k, ks) + seed) & M64),
        _r64(p, at + 8) ^ ((_r64(k, ks + 8) - seed) & M64),
    )


def _upto240(p: bytes, seed: int) -> int:
    n = len(p)
    if n <= 16:
        return _upto16(p, seed)
    acc = n * P64_1
    if n <= 128:
        for i in range((n - 1) // 32, -1, -1):
            acc += _mix16(p, 16 * i, 32 * i, seed) + _mix16(p, n - 16 * i - 16, 32 * i + 16, seed)
        return _avalanche(acc & M64)
    for i in range(8):
        acc += _mix16(p, 16 * i, 16 * i, seed)
    acc = _avalanche(acc & M64)
    for i in range(8, n // 16):
        acc += _mix16(p, 16 * i, 16 * (i - 8) + 3, seed)
    acc += _mix16(p, n - 16, 119, seed)
    return _avalanche(acc & M64)


def _derive(seed: int) -> bytes:
    """The secret of a nonzero seed: added to the even 64-bit words, taken from the odd."""
    out = bytearray()
    for i in range(0, len(SECRET), 8):
        w = _r64(SECRET, i)
        w = (w + seed) & M64 if (i // 8) % 2 == 0 else (w - seed) & M64
        out += w.to_bytes(8, "little")
    return bytes(out)


def _accumulate(acc: list[int], stripe: bytes, k: bytes, at: int) -> None:
    for i in range(8):
        d = _r64(stripe, 8 * i)
        v = d ^ _r64(k, at + 8 * i)
        acc[i ^ 1] = (acc[i ^ 1] + d) & M64
        acc[i] = (acc[i] + (v & 0xFFFFFFFF) * (v >> 32)) & M64


def _scramble(acc: list[int], k: bytes) -> None:
    for i in range(8):
        a = acc[i] ^ (acc[i] >> 47) ^ _r64(k, len(k) - STRIPE + 8 * i)
        acc[i] = (a * P32_1) & M64


def _consume(acc: list[int], done: int, k: bytes, p: bytes) -> int:
    """Accumulate the whole stripes of ``p``, ``done`` stripes of the block already in;
    returns the new ``done``."""
    for at in range(0, len(p) - STRIPE + 1, STRIPE):
        _accumulate(acc, p[at : at + STRIPE], k, 8 * done)
        done += 1
        if done == PER_BLOCK:
            _scramble(acc, k)
            done = 0
    return done


def _finish(acc: list[int], last: bytes, k: bytes, total: int) -> int:
    _accumulate(acc, last, k, LAST)
    r = total * P64_1
    for i in range(4):
        r += _mulfold(acc[2 * i] ^ _r64(k, 11 + 16 * i), acc[2 * i + 1] ^ _r64(k, 19 + 16 * i))
    return _avalanche(r & M64)


def implementation() -> str:
    """``"python"``: this module, integer by integer."""
    return "python"


def xxh3_64(data: object, seed: int = 0) -> int:
    """XXH3-64 of ``data`` with ``seed`` (``xxhash.xxh3_64_intdigest(data, seed)``)."""
    p = _bytes(data, "data").tobytes()
    seed = u64(seed)
    if len(p) <= MID:
        return _upto240(p, seed)
    k = _derive(seed) if seed else SECRET
    acc = list(ACC0)
    ns = (len(p) - 1) // STRIPE
    _consume(acc, 0, k, p[: ns * STRIPE])
    return _finish(acc, p[-STRIPE:], k, len(p))


class Xxh3State:
    """A running XXH3-64, as ``xxhash.xxh3_64(seed=...)`` (see the compiled kernel's).

    It keeps what the compiled state keeps: the accumulators, the stripes of the current block
    done, the unconsumed tail (1..256 bytes) and the 64 bytes before it."""

    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._reset(u64(seed))

    def _reset(self, seed: int) -> None:
        self._seed = seed
        self._k = _derive(seed) if seed else SECRET
        self._acc = list(ACC0)
        self._done = 0
        self._total = 0
        self._buf = b""
        self._prev = bytes(STRIPE)

    @property
    def seed(self) -> int:
        """The seed the state was made (or last reset) with."""
        return self._seed

    @property
    def total(self) -> int:
        """Bytes given so far."""
        return self._total

    def update(self, data: object) -> None:
        """Add ``data`` (any contiguous buffer of bytes) to the hash."""
        p = _bytes(data, "data").tobytes()
        with self._lock:
            self._update(p)

    def _update(self, p: bytes) -> None:
        if not p:
            return
        self._total += len(p)
        if len(self._buf) + len(p) <= BUF:
            self._buf += p
            return
        if self._buf:  # fill the buffer and accumulate it: more follows
            fill = BUF - len(self._buf)
            whole, p = self._buf + p[:fill], p[fill:]
            self._done = _consume(self._acc, self._done, self._k, whole)
            self._prev = whole[-STRIPE:]
        ns = (len(p) - 1) // STRIPE  # leave 1..64 bytes
        if ns:
            self._done = _consume(self._acc, self._done, self._k, p[: ns * STRIPE])
            self._prev = p[(ns - 1) * STRIPE : ns * STRIPE]
        self._buf = p[ns * STRIPE :]

    def intdigest(self) -> int:
        """The XXH3-64 of the bytes given so far, as an int."""
        with self._lock:
            if self._total <= MID:
                return _upto240(self._buf, self._seed)
            acc = list(self._acc)
            n = len(self._buf)
            _consume(acc, self._done, self._k, self._buf[: (n - 1) // STRIPE * STRIPE])
            last = (self._prev + self._buf)[-STRIPE:]
            return _finish(acc, last, self._k, self._total)

    def hexdigest(self) -> str:
        """:meth:`intdigest` as 16 lowercase hex digits."""
        return f"{self.intdigest():016x}"

    def digest(self) -> bytes:
        """:meth:`intdigest` as 8 bytes, most significant first (``xxhash``'s canonical form)."""
        return self.intdigest().to_bytes(8, "big")

    def copy(self) -> Xxh3State:
        """An independent state with the same bytes given."""
        out = Xxh3State(self._seed)
        with self._lock:
            out._acc, out._done, out._total = list(self._acc), self._done, self._total
            out._buf, out._prev = self._buf, self._prev
        return out

    def reset(self) -> None:
        """Forget the bytes given (keep the seed)."""
        with self._lock:
            self._reset(self._seed)


def copy_xxh3(src: object, dst: object, state: Xxh3State) -> None:
    """Copy ``src`` into ``dst`` (the same length, not overlapping) and add the bytes to
    ``state``: ``state.update(src)`` and a copy."""
    if not isinstance(state, Xxh3State):
        raise TypeError(f"copy_xxh3: state must be an Xxh3State, not {type(state).__name__}")
    s = _bytes(src, "src")
    d = _bytes(dst, "dst", writable=True)
    if len(d) != len(s):
        raise ValueError(f"copy_xxh3: dst of {len(d)} bytes; expected {len(s)} (as src)")
    if not len(s):
        return
    import numpy as np

    if np.shares_memory(np.frombuffer(s, np.uint8), np.frombuffer(d, np.uint8)):
        raise ValueError("copy_xxh3: src and dst overlap")
    d[:] = s
    state.update(s)

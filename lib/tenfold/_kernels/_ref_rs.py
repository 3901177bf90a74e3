"""Reference twins of ``rs.pyx``: Reed-Solomon over GF(2^8) in NumPy and plain Python.

Same field and code as the compiled kernel (primitive polynomial 0x11d, alpha = 2, generator
roots alpha^0 .. alpha^(nsym-1), systematic, data first), same block layout (blocks of
``255 - nsym`` data bytes, parities concatenated). Encoding runs the LFSR for all blocks at
once with NumPy; decoding corrects each block whose remainder is non-zero with textbook
Berlekamp-Massey, Chien search and Forney, written for clarity rather than speed.
"""

from __future__ import annotations

import numpy as np

from ._cargs import cint

_EXP = np.zeros(512, dtype=np.uint8)
_LOG = np.zeros(256, dtype=np.int64)
_x = 1
for _i in range(255):
    _EXP[_i] = _x
    _LOG[_x] = _i
    _x <<= 1
    if _x & 0x100:
        _x ^= 0x11D
_EXP[255:510] = _EXP[:255]
_EXP_L = [int(v) for v in _EXP]
_LOG_L = [int(v) for v in _LOG]

#: Full multiplication table: _MUL[a, b] = a * b in GF(2^8).
_MUL = np.zeros((256, 256), dtype=np.uint8)
_nz = np.arange(1, 256)
_MUL[1:, 1:] = _EXP[(_LOG[_nz][:, None] + _LOG[_nz][None, :])]


def _gmul(a: int, b: int) -> int:
    if a == 0 or b == 0:
        return 0
    return _EXP_L[_LOG_L[a] + _LOG_L[b]]


def _gdiv(a: int, b: int) -> int:
    if a == 0:
        return 0
    return _EXP_L[_LOG_L[a] + 255 - _LOG_L[b]]


def _check_nsym(nsym: int) -> None:
    if not 2 <= cint(nsym) <= 254:
        raise ValueError(f"nsym must be in [2, 254], got {nsym}")


def _generator(nsym: int) -> list[int]:
    """Coefficients of prod_{i<nsym} (x - alpha^i), highest degree first (monic)."""
    g = [1]
    for i in range(nsym):
        root = _EXP_L[i]
        nxt = g + [0]
        for j in range(1, len(nxt)):
            nxt[j] ^= _gmul(g[j - 1], root)
        g = nxt
    return g


def _u8(buf: object, writable: bool = False) -> np.ndarray:
    a = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    if writable and not a.flags.writeable:
        raise ValueError("buffer is read-only")
    return a


def _blocks_remainder(data: np.ndarray, nsym: int) -> np.ndarray:
    """Remainders (nblocks, nsym) of every block's data times x^nsym modulo g(x)."""
    k = 255 - nsym
    n = data.size
    nblocks = -(-n // k)
    # Right-align the last (short) block: leading zeros do not change a remainder.
    padded = np.zeros(nblocks * k, dtype=np.uint8)
    tail = n - (nblocks - 1) * k
    padded[: (nblocks - 1) * k] = data[: (nblocks - 1) * k]
    padded[nblocks * k - tail :] = data[(nblocks - 1) * k :]
    blocks = padded.reshape(nblocks, k)
    g = np.array(_generator(nsym)[1:], dtype=np.uint8)
    rows = _MUL[:, g]  # rows[f] = f * g (without the leading 1)
    reg = np.zeros((nblocks, nsym), dtype=np.uint8)
    for i in range(k):
        f = blocks[:, i] ^ reg[:, 0]
        reg[:, :-1] = reg[:, 1:]
        reg[:, -1] = 0
        reg ^= rows[f]
    return reg


def encode_blocks(data: object, nsym: int, parity_out: object) -> None:
    """Write the parity of every block of ``data`` into ``parity_out`` (see ``rs.pyx``)."""
    _check_nsym(nsym)
    d = _u8(data)
    out = _u8(parity_out, writable=True)
    k = 255 - nsym
    nblocks = -(-d.size // k)
    if out.size != nblocks * nsym:
        raise ValueError(f"parity_out must hold {nblocks * nsym} bytes, got {out.size}")
    if d.size == 0:
        return
    out[:] = _blocks_remainder(d, nsym).reshape(-1)


def _remainder_one(cw: list[int], k: int, nsym: int, gen: list[int]) -> list[int]:
    reg = [0] * nsym
    for i in range(k):
        f = cw[i] ^ reg[0]
        reg = reg[1:] + [0]
        if f:
            for j in range(nsym):
                reg[j] ^= _gmul(gen[j + 1], f)
    return [reg[j] ^ cw[k + j] for j in range(nsym)]


def _correct_one(cw: list[int], k: int, nsym: int, gen: list[int]) -> int:
    """Correct one codeword (list, in place); number of corrections or -1."""
    n_cw = k + nsym
    rem = _remainder_one(cw, k, nsym, gen)
    if not any(rem):
        return 0
    synd = []
    for i in range(nsym):
        s = 0
        for r in rem:
            s = _gmul(s, _EXP_L[i]) ^ r
        synd.append(s)
    # Berlekamp-Massey
    lam = [1] + [0] * nsym
    prev = [1] + [0] * nsym
    big_l, m, b = 0, 1, 1
    for i in range(nsym):
        d = synd[i]
        for j in range(1, big_l + 1):
            d ^= _gmul(lam[j], synd[i - j])
        if d == 0:
            m += 1
            continue
        coef = _gdiv(d, b)
        old = lam[:]
        for j in range(0, nsym + 1 - m):
            lam[j + m] ^= _gmul(coef, prev[j])
        if 2 * big_l <= i:
            big_l = i + 1 - big_l
            prev = old
            b = d
            m = 1
        else:
            m += 1
    if big_l == 0 or 2 * big_l > nsym or any(lam[big_l + 1 :]) or lam[big_l] == 0:
        return -1
    # Chien search: power p (codeword index n_cw-1-p) is in error when lam(alpha^-p) == 0
    roots = []
    for p in range(n_cw):
        xinv = _EXP_L[(255 - p) % 255]
        s = 0
        for c in reversed(lam[: big_l + 1]):
            s = _gmul(s, xinv) ^ c
        if s == 0:
            roots.append(p)
    if len(roots) != big_l:
        return -1
    omega = [0] * nsym
    for i in range(nsym):
        for j in range(0, min(i, big_l) + 1):
            omega[i] ^= _gmul(lam[j], synd[i - j])
    for p in roots:
        x = _EXP_L[p]
        xinv = _EXP_L[(255 - p) % 255]
        num = 0
        for c in reversed(omega):
            num = _gmul(num, xinv) ^ c
        den = 0
        for j in range(1, big_l + 1, 2):  # formal derivative keeps the odd powers
            den ^= _gmul(lam[j], _EXP_L[(_LOG_L[xinv] * (j - 1)) % 255])
        if den == 0:
            return -1
        e = _gmul(x, _gdiv(num, den))
        if e == 0:
            return -1
        cw[n_cw - 1 - p] ^= e
    if any(_remainder_one(cw, k, nsym, gen)):
        return -1
    return len(roots)


def decode_blocks(data: object, parity: object, nsym: int, nerr_out: object) -> int:
    """Correct every block of ``data`` and ``parity`` in place (see ``rs.pyx``).

    ``nerr_out[b]`` gets the number of bytes corrected in block ``b`` or -1 when the block is
    beyond capacity (left unchanged). Returns the number of uncorrectable blocks.
    """
    _check_nsym(nsym)
    d = _u8(data, writable=True)
    p = _u8(parity, writable=True)
    out = np.frombuffer(nerr_out, dtype=np.int32)  # type: ignore[call-overload]
    k = 255 - nsym
    nblocks = -(-d.size // k)
    if p.size != nblocks * nsym:
        raise ValueError(f"parity must hold {nblocks * nsym} bytes, got {p.size}")
    if out.size != nblocks:
        raise ValueError(f"nerr_out must hold {nblocks} entries, got {out.size}")
    if d.size == 0:
        return 0
    out[:] = 0
    rem = _blocks_remainder(d, nsym) ^ p.reshape(nblocks, nsym)
    gen = _generator(nsym)
    bad = 0
    for blk in np.flatnonzero(rem.any(axis=1)):
        start = int(blk) * k
        blen = min(k, d.size - start)
        cw = d[start : start + blen].tolist() + p[blk * nsym : (blk + 1) * nsym].tolist()
        r = _correct_one(cw, blen, nsym, gen)
        out[blk] = r
        if r < 0:
            bad += 1
        else:
            d[start : start + blen] = cw[:blen]
            p[blk * nsym : (blk + 1) * nsym] = cw[blen:]
    return bad


def check_blocks(data: object, parity: object, nsym: int, bad_out: object) -> int:
    """Mark (1) the blocks whose parity does not match their data; return their count."""
    _check_nsym(nsym)
    d = _u8(data)
    p = _u8(parity)
    out = np.frombuffer(bad_out, dtype=np.int32)  # type: ignore[call-overload]
    k = 255 - nsym
    nblocks = -(-d.size // k)
    if p.size != nblocks * nsym:
        raise ValueError(f"parity must hold {nblocks * nsym} bytes, got {p.size}")
    if out.size != nblocks:
        raise ValueError(f"bad_out must hold {nblocks} entries, got {out.size}")
    if d.size == 0:
        return 0
    bad = (_blocks_remainder(d, nsym) != p.reshape(nblocks, nsym)).any(axis=1)
    out[:] = bad
    return int(bad.sum())

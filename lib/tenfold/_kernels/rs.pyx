# cython: language_level=3
"""Reed-Solomon over GF(2^8), block-wise over a whole buffer.

Field: primitive polynomial 0x11d, generator alpha = 2. Code: systematic, ``nsym`` parity
symbols, generator polynomial ``g(x) = prod_{i=0}^{nsym-1} (x - alpha^i)`` (first consecutive
root 0): the parameters of ``reedsolo.RSCodec(nsym)``. A codeword is the data bytes followed by
the ``nsym`` parity bytes, the first byte being the coefficient of the highest power.

The buffer is cut into blocks of ``255 - nsym`` data bytes (the last one shorter, a shortened
code); the parity of block ``b`` is ``parity[b*nsym:(b+1)*nsym]``.

Encoding is an LFSR whose ``nsym``-byte register is held in 64-bit words: each data byte
costs one table row (the generator multiplied by the feedback byte, precomputed for all 256
feedback values) XORed into the register shifted by one byte. Decoding computes the
remainder of each block with the same LFSR; a zero remainder means a clean block. Otherwise
the syndromes are the remainder evaluated at alpha^i, then Berlekamp-Massey, Chien search and
Forney give the error positions and values; the corrected block is re-checked before it is
written back, so a block beyond capacity is reported and never silently miscorrected.
"""

from libc.stdint cimport uint8_t, uint64_t, int32_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset
cimport cython

cdef uint8_t GF_EXP[512]
cdef int GF_LOG[256]


cdef void _init_tables() noexcept nogil:
    cdef int i, x = 1
    for i in range(255):
        GF_EXP[i] = <uint8_t>x
        GF_LOG[x] = i
        x <<= 1
        if x & 0x100:
            x ^= 0x11d
    for i in range(255, 512):
        GF_EXP[i] = GF_EXP[i - 255]
    GF_LOG[0] = 0


_init_tables()


cdef inline uint8_t gmul(uint8_t a, uint8_t b) noexcept nogil:
    if a == 0 or b == 0:
        return 0
    return GF_EXP[GF_LOG[a] + GF_LOG[b]]


cdef inline uint8_t gdiv(uint8_t a, uint8_t b) noexcept nogil:
    # b != 0 is the caller's duty
    if a == 0:
        return 0
    return GF_EXP[GF_LOG[a] + 255 - GF_LOG[b]]


cdef int _check_nsym(int nsym) except -1:
    if nsym < 2 or nsym > 254:
        raise ValueError(f"nsym must be in [2, 254], got {nsym}")
    return 0


cdef uint64_t* _make_table(int nsym, int nwords) noexcept nogil:
    """Rows T[f] = f * g(x) (without the leading 1), packed little-endian in ``nwords`` words."""
    cdef uint8_t gen[256]
    cdef int i, j, f
    cdef uint64_t* table = <uint64_t*>malloc(256 * nwords * sizeof(uint64_t))
    if table == NULL:
        return NULL
    memset(gen, 0, sizeof(gen))
    gen[0] = 1
    # gen[0..i] holds the coefficients (highest degree first) of prod_{m<i} (x - alpha^m)
    for i in range(nsym):
        gen[i + 1] = 0
        for j in range(i + 1, 0, -1):
            gen[j] ^= gmul(gen[j - 1], GF_EXP[i])
    memset(table, 0, 256 * nwords * sizeof(uint64_t))
    for f in range(256):
        for j in range(nsym):
            table[f * nwords + (j >> 3)] |= (<uint64_t>gmul(gen[j + 1], <uint8_t>f)) << (8 * (j & 7))
    return table


cdef inline void _remainder(const uint8_t* d, Py_ssize_t n, const uint64_t* table, int nwords,
                            uint64_t* reg) noexcept nogil:
    cdef Py_ssize_t i
    cdef int w
    cdef const uint64_t* row
    cdef uint64_t f
    for w in range(nwords):
        reg[w] = 0
    if nwords == 4:
        for i in range(n):
            f = (d[i] ^ reg[0]) & 0xff
            row = table + f * 4
            reg[0] = ((reg[0] >> 8) | (reg[1] << 56)) ^ row[0]
            reg[1] = ((reg[1] >> 8) | (reg[2] << 56)) ^ row[1]
            reg[2] = ((reg[2] >> 8) | (reg[3] << 56)) ^ row[2]
            reg[3] = (reg[3] >> 8) ^ row[3]
    elif nwords == 2:
        for i in range(n):
            f = (d[i] ^ reg[0]) & 0xff
            row = table + f * 2
            reg[0] = ((reg[0] >> 8) | (reg[1] << 56)) ^ row[0]
            reg[1] = (reg[1] >> 8) ^ row[1]
    elif nwords == 8:
        for i in range(n):
            f = (d[i] ^ reg[0]) & 0xff
            row = table + f * 8
            reg[0] = ((reg[0] >> 8) | (reg[1] << 56)) ^ row[0]
            reg[1] = ((reg[1] >> 8) | (reg[2] << 56)) ^ row[1]
            reg[2] = ((reg[2] >> 8) | (reg[3] << 56)) ^ row[2]
            reg[3] = ((reg[3] >> 8) | (reg[4] << 56)) ^ row[3]
            reg[4] = ((reg[4] >> 8) | (reg[5] << 56)) ^ row[4]
            reg[5] = ((reg[5] >> 8) | (reg[6] << 56)) ^ row[5]
            reg[6] = ((reg[6] >> 8) | (reg[7] << 56)) ^ row[6]
            reg[7] = (reg[7] >> 8) ^ row[7]
    elif nwords == 1:
        for i in range(n):
            f = (d[i] ^ reg[0]) & 0xff
            reg[0] = (reg[0] >> 8) ^ table[f]
    else:
        for i in range(n):
            f = (d[i] ^ reg[0]) & 0xff
            row = table + f * nwords
            for w in range(nwords - 1):
                reg[w] = ((reg[w] >> 8) | (reg[w + 1] << 56)) ^ row[w]
            reg[nwords - 1] = (reg[nwords - 1] >> 8) ^ row[nwords - 1]


cdef inline uint8_t _regbyte(const uint64_t* reg, int j) noexcept nogil:
    return <uint8_t>((reg[j >> 3] >> (8 * (j & 7))) & 0xff)


cdef Py_ssize_t _block_count(Py_ssize_t n, int nsym, Py_ssize_t nparity, str parity_name,
                             Py_ssize_t nout=-1, str out_name="") except -1:
    """Blocks in ``n`` data bytes; checks the parity (and per-block output) lengths."""
    _check_nsym(nsym)
    cdef Py_ssize_t k = 255 - nsym
    cdef Py_ssize_t nblocks = (n + k - 1) // k
    if nparity != nblocks * nsym:
        raise ValueError(f"{parity_name} must hold {nblocks * nsym} bytes, got {nparity}")
    if nout >= 0 and nout != nblocks:
        raise ValueError(f"{out_name} must hold {nblocks} entries, got {nout}")
    return nblocks


@cython.boundscheck(False)
@cython.wraparound(False)
def encode_blocks(const uint8_t[::1] data, int nsym, uint8_t[::1] parity_out):
    """Write the parity of every block of ``data`` into ``parity_out``.

    Parameters
    ----------
    data
        The message, cut into blocks of ``255 - nsym`` bytes (the last one shorter).
    nsym
        Parity symbols per block, 2 to 254.
    parity_out
        ``ceil(len(data) / (255 - nsym)) * nsym`` bytes, filled by the call.
    """
    cdef Py_ssize_t n = data.shape[0]
    cdef Py_ssize_t k = 255 - nsym
    cdef Py_ssize_t nblocks = _block_count(n, nsym, parity_out.shape[0], "parity_out")
    if n == 0:
        return
    cdef int nwords = (nsym + 7) // 8
    cdef uint64_t reg[32]
    cdef uint64_t* table
    cdef const uint8_t* d = &data[0]
    cdef uint8_t* p = &parity_out[0]
    cdef Py_ssize_t b, start, blen
    cdef int j
    with nogil:
        table = _make_table(nsym, nwords)
        if table != NULL:
            for b in range(nblocks):
                start = b * k
                blen = k if start + k <= n else n - start
                _remainder(d + start, blen, table, nwords, reg)
                for j in range(nsym):
                    p[b * nsym + j] = _regbyte(reg, j)
            free(table)
    if table == NULL:
        raise MemoryError()


cdef int _correct_block(uint8_t* cw, int k, int nsym, const uint64_t* table, int nwords) noexcept nogil:
    """Correct the codeword ``cw`` (k data + nsym parity bytes) in place.

    Returns the number of symbols corrected, or -1 when the block cannot be corrected (then
    ``cw`` may be partly modified; the caller works on a copy).
    """
    cdef uint64_t reg[32]
    cdef uint8_t rem[256]
    cdef uint8_t synd[256]
    cdef uint8_t lam[256]
    cdef uint8_t prev[256]
    cdef uint8_t tmp[256]
    cdef uint8_t omega[256]
    cdef int roots[128]
    cdef uint8_t acc[256]
    cdef int idx, pw, logc, dlam, dprev, dtmp
    cdef int i, j, L, m, nroots, n_cw
    cdef uint8_t s, d, b, coef, x, xinv, num, den, e
    cdef int any_nonzero = 0
    n_cw = k + nsym

    _remainder(cw, k, table, nwords, reg)
    for j in range(nsym):
        rem[j] = _regbyte(reg, j) ^ cw[k + j]
        any_nonzero |= rem[j]
    if not any_nonzero:
        return 0

    # syndromes S_i = R(alpha^i), R(x) = sum rem[j] x^(nsym-1-j)
    memset(synd, 0, sizeof(synd))
    for j in range(nsym):
        if rem[j] != 0:
            idx = GF_LOG[rem[j]]
            pw = nsym - 1 - j
            for i in range(nsym):
                synd[i] ^= GF_EXP[idx]
                idx += pw
                if idx >= 255:
                    idx -= 255

    # Berlekamp-Massey: lam(x) = 1 + lam_1 x + ... (index = power); prev = B(x) of degree dprev
    memset(lam, 0, sizeof(lam))
    memset(prev, 0, sizeof(prev))
    lam[0] = 1
    prev[0] = 1
    L = 0
    dlam = 0
    dprev = 0
    m = 1
    b = 1
    for i in range(nsym):
        d = synd[i]
        for j in range(1, L + 1):
            if lam[j] != 0 and synd[i - j] != 0:
                d ^= GF_EXP[GF_LOG[lam[j]] + GF_LOG[synd[i - j]]]
        if d == 0:
            m += 1
            continue
        logc = GF_LOG[d] + 255 - GF_LOG[b]
        if logc >= 255:
            logc -= 255
        if dprev + m > nsym:
            return -1
        if 2 * L <= i:
            memcpy(tmp, lam, dlam + 1)
            dtmp = dlam
            for j in range(0, dprev + 1):
                if prev[j] != 0:
                    lam[j + m] ^= GF_EXP[logc + GF_LOG[prev[j]]]
            if dprev + m > dlam:
                dlam = dprev + m
            L = i + 1 - L
            memset(prev, 0, dprev + 1)
            memcpy(prev, tmp, dtmp + 1)
            dprev = dtmp
            b = d
            m = 1
        else:
            for j in range(0, dprev + 1):
                if prev[j] != 0:
                    lam[j + m] ^= GF_EXP[logc + GF_LOG[prev[j]]]
            if dprev + m > dlam:
                dlam = dprev + m
            m += 1
    if L == 0 or 2 * L > nsym:
        return -1
    for j in range(L + 1, dlam + 1):
        if lam[j] != 0:
            return -1
    if lam[L] == 0:
        return -1

    # Chien search over the powers p = 0..n_cw-1 (codeword index n_cw-1-p): lam(alpha^-p) == 0.
    # acc[p] accumulates lam_j * alpha^(-p*j) term by term.
    memset(acc, 1, n_cw)
    for j in range(1, L + 1):
        if lam[j] != 0:
            idx = GF_LOG[lam[j]]
            pw = 255 - j
            for i in range(n_cw):
                acc[i] ^= GF_EXP[idx]
                idx += pw
                if idx >= 255:
                    idx -= 255
    nroots = 0
    for i in range(n_cw):
        if acc[i] == 0:
            if nroots == L:
                return -1
            roots[nroots] = i
            nroots += 1
    if nroots != L:
        return -1

    # omega(x) = S(x) lam(x) mod x^nsym
    for i in range(nsym):
        e = 0
        for j in range(0, min(i, L) + 1):
            e ^= gmul(lam[j], synd[i - j])
        omega[i] = e

    # Forney (first root 0): e = X * omega(X^-1) / lam'(X^-1)
    for m in range(nroots):
        i = roots[m]
        x = GF_EXP[i]
        xinv = GF_EXP[(255 - i) % 255]
        num = 0
        for j in range(nsym - 1, -1, -1):
            num = gmul(num, xinv) ^ omega[j]
        den = 0
        # lam'(x) = sum over odd j of lam_j x^(j-1)
        for j in range(L, 0, -1):
            if j & 1:
                den ^= gmul(lam[j], GF_EXP[(GF_LOG[xinv] * (j - 1)) % 255])
        if den == 0:
            return -1
        e = gmul(x, gdiv(num, den))
        if e == 0:
            return -1
        cw[n_cw - 1 - i] ^= e

    # the corrected word must be a codeword
    _remainder(cw, k, table, nwords, reg)
    for j in range(nsym):
        if _regbyte(reg, j) != cw[k + j]:
            return -1
    return nroots


@cython.boundscheck(False)
@cython.wraparound(False)
def decode_blocks(uint8_t[::1] data, uint8_t[::1] parity, int nsym, int32_t[::1] nerr_out):
    """Correct every block of ``data`` (and its ``parity``) in place.

    Parameters
    ----------
    data, parity
        As written by :func:`encode_blocks`; both are corrected in place.
    nsym
        Parity symbols per block, 2 to 254.
    nerr_out
        One ``int32`` per block: the number of bytes corrected in the block (0 when clean), or
        -1 when the block has more errors than the code can correct (the block is then left
        unchanged).

    Returns
    -------
    int
        The number of uncorrectable blocks.
    """
    cdef Py_ssize_t n = data.shape[0]
    cdef Py_ssize_t k = 255 - nsym
    cdef Py_ssize_t nblocks = _block_count(n, nsym, parity.shape[0], "parity",
                                           nerr_out.shape[0], "nerr_out")
    if n == 0:
        return 0
    cdef int nwords = (nsym + 7) // 8
    cdef uint64_t* table
    cdef uint8_t* d = &data[0]
    cdef uint8_t* p = &parity[0]
    cdef int32_t* out = &nerr_out[0]
    cdef uint8_t cw[255]
    cdef Py_ssize_t b, start, blen
    cdef int r
    cdef Py_ssize_t bad = 0
    with nogil:
        table = _make_table(nsym, nwords)
        if table != NULL:
            for b in range(nblocks):
                start = b * k
                blen = k if start + k <= n else n - start
                memcpy(cw, d + start, blen)
                memcpy(cw + blen, p + b * nsym, nsym)
                r = _correct_block(cw, <int>blen, nsym, table, nwords)
                out[b] = r
                if r > 0:
                    memcpy(d + start, cw, blen)
                    memcpy(p + b * nsym, cw + blen, nsym)
                elif r < 0:
                    bad += 1
            free(table)
    if table == NULL:
        raise MemoryError()
    return bad


@cython.boundscheck(False)
@cython.wraparound(False)
def check_blocks(const uint8_t[::1] data, const uint8_t[::1] parity, int nsym, int32_t[::1] bad_out):
    """Mark the blocks whose parity does not match their data (without correcting).

    ``bad_out`` gets one entry per block: 1 when the block's remainder is non-zero, else 0.
    Returns the number of such blocks.
    """
    cdef Py_ssize_t n = data.shape[0]
    cdef Py_ssize_t k = 255 - nsym
    cdef Py_ssize_t nblocks = _block_count(n, nsym, parity.shape[0], "parity",
                                           bad_out.shape[0], "bad_out")
    if n == 0:
        return 0
    cdef int nwords = (nsym + 7) // 8
    cdef uint64_t reg[32]
    cdef uint64_t* table
    cdef const uint8_t* d = &data[0]
    cdef const uint8_t* p = &parity[0]
    cdef int32_t* out = &bad_out[0]
    cdef Py_ssize_t b, start, blen, bad = 0
    cdef int j, diff
    with nogil:
        table = _make_table(nsym, nwords)
        if table != NULL:
            for b in range(nblocks):
                start = b * k
                blen = k if start + k <= n else n - start
                _remainder(d + start, blen, table, nwords, reg)
                diff = 0
                for j in range(nsym):
                    diff |= _regbyte(reg, j) ^ p[b * nsym + j]
                out[b] = 1 if diff else 0
                bad += 1 if diff else 0
            free(table)
    if table == NULL:
        raise MemoryError()
    return bad

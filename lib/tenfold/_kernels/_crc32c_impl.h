/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and CRC-32 (IEEE 802.3, zlib's and
 * zip's, reflected polynomial 0xEDB88320) for tenfold's crc32c kernel family.
 *
 * Every function takes the polynomial's parameters (tf_crc_par: tables, x^(2^k), fold
 * constants), so both CRCs run the same loops. Five levels, chosen once at import by what the
 * CPU supports (tf_crc_init); CRC-32 has no instruction of its own, so its level 1 is the
 * tables, and the folding levels finish with the tables instead of the crc32 instruction:
 *
 *   4 "avx512-vpclmul": four 512-bit accumulators folded over 256 bytes per step with
 *     VPCLMULQDQ, reduced to 128 bits, then to 32 bits with the crc32 instruction (CRC-32C)
 *     or the tables (CRC-32);
 *   3 "avx2-vpclmul": the same with four 256-bit accumulators (128 bytes per step), for CPUs
 *     with VPCLMULQDQ but no AVX-512 (AMD Zen 3, Intel Alder Lake);
 *   2 "pclmul": the same with four 128-bit accumulators (64 bytes per step);
 *   1 "sse4.2": the crc32 instruction on three interleaved streams, joined by multiplying
 *     the first two by x^(8 * bytes after them) modulo the polynomial (four table lookups);
 *     CRC-32C only (CRC-32 runs the tables);
 *   0 "table": slice-by-8 tables (any CPU, any byte order; the only one off x86-64, or when
 *     built with -DTF_CRC_PORTABLE).
 *
 * Folding: an accumulator X of 128 bits stands for a polynomial of degree < 128 (reflected:
 * bit 0 of the first byte is the highest degree). Moving it D bits further down the message is
 * X * x^D, congruent modulo P to  H * (x^(D+64) mod P) + L * (x^D mod P)  for its two 64-bit
 * halves H (first 8 bytes) and L: two carry-less products of a half by a 33-bit constant, then
 * XORed with the data D bits later. The register value of a CRC is folded in by XORing it into
 * the first four bytes. What remains is a 16-byte message with the same CRC as everything
 * before it: the crc32 instruction (from 0) gives it, or the tables.
 *
 * The constants are computed at import from x^n mod P (tf_crc_xpow), not written out.
 * Copy variants (dst != NULL) store every byte they load to dst: one pass over the source.
 * No zero-extension casts (_mm256_zextsi128_si256...): older compilers lack them.
 */
#ifndef TF_CRC32C_IMPL_H
#define TF_CRC32C_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* one polynomial's parameters */
typedef struct {
    uint32_t poly;           /* reflected */
    int hw;                  /* the SSE4.2 crc32 instruction computes this CRC (CRC-32C) */
    uint32_t table[8][256];  /* slice-by-8 */
    uint32_t x2n[67];        /* x^(2^k) mod P, reflected (bit 31 is x^0) */
    uint64_t k[6][2];        /* fold constants (x86-64): see tf_crc_par_init */
} tf_crc_par;

static tf_crc_par tf_crc_c; /* CRC-32C */
static tf_crc_par tf_crc_z; /* CRC-32 */
static int tf_crc_best = 0;     /* the best level this CPU runs */
static int tf_crc_level = 0;    /* the level in use (tests may lower it) */
static __thread int tf_crc_nt = 0; /* non-temporal stores in the AVX-512 copy (this thread) */

/* a * b modulo P, reflected representation (bit 31 is the coefficient of x^0) */
static uint32_t tf_crc_mulmod(uint32_t poly, uint32_t a, uint32_t b)
{
    uint32_t p = 0;
    int i;
    for (i = 0; i < 32; i++) {
        p ^= (0u - (a >> 31)) & b;
        a <<= 1;
        b = (b >> 1) ^ (poly & (0u - (b & 1u)));
    }
    return p;
}

/* x^n modulo P */
static uint32_t tf_crc_xpow(const tf_crc_par *P, uint64_t n)
{
    uint32_t p = 0x80000000u; /* x^0 */
    int k = 0;
    while (n) {
        if (n & 1)
            p = tf_crc_mulmod(P->poly, P->x2n[k], p);
        n >>= 1;
        k++;
    }
    return p;
}

/* the CRC of A + B from crc1 = CRC(A), crc2 = CRC(B) and len2 = len(B) */
static uint32_t tf_crc_combine(const tf_crc_par *P, uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    uint32_t p = 0x80000000u; /* x^(8 * len2), from x^(2^k) with k >= 3 */
    int k = 3;
    while (len2) { /* k <= 66 */
        if (len2 & 1)
            p = tf_crc_mulmod(P->poly, P->x2n[k], p);
        len2 >>= 1;
        k++;
    }
    return tf_crc_mulmod(P->poly, p, crc1) ^ crc2;
}

/* -- 0: slice-by-8 tables ---------------------------------------------------------------- */
static uint32_t tf_crc_sw(const tf_crc_par *P, uint32_t c, const uint8_t *p, size_t n)
{
    const uint32_t(*t)[256] = P->table;
    while (n && ((uintptr_t)p & 7)) {
        c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
            t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(TF_CRC_PORTABLE)
#define TF_CRC_X86 1
#include <immintrin.h>

/* -- 1: the crc32 instruction, three streams ------------------------------------------------ */
/* bytes of each of the three streams per round: 16 KiB measured best on a 2-core AMD EPYC
 * (Zen 4) VM, 28 GB/s in cache (4 KiB: 11.7 GB/s from memory, 16 KiB: 14) */
#define TF_CRC_BLOCK 16384
/* multiplication by x^(8 * BLOCK) and x^(16 * BLOCK), one table per byte of the factor */
static uint32_t tf_crc_shift[2][4][256];

static void tf_crc_shift_init(int which, uint32_t k)
{
    int i, v;
    for (i = 0; i < 4; i++)
        for (v = 0; v < 256; v++) /* byte i of the register holds x^(8i)..x^(8i+7) */
            tf_crc_shift[which][i][v] = tf_crc_mulmod(tf_crc_c.poly, (uint32_t)v << (8 * i), k);
}

static inline uint32_t tf_crc_shifted(int which, uint32_t c)
{
    const uint32_t(*t)[256] = tf_crc_shift[which];
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

static inline uint64_t tf_crc_ld64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

__attribute__((target("sse4.2"))) static uint32_t tf_crc_hw1(uint32_t c, const uint8_t *p,
                                                             size_t n)
{
    uint64_t c64;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    c64 = c;
    while (n >= 8) {
        c64 = _mm_crc32_u64(c64, tf_crc_ld64(p));
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c;
}

__attribute__((target("sse4.2"))) static uint32_t tf_crc_hw3(uint32_t c, const uint8_t *p,
                                                             size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    while (n >= 3 * TF_CRC_BLOCK) {
        uint64_t a = c, b = 0, d = 0;
        size_t i;
        for (i = 0; i < TF_CRC_BLOCK; i += 64) {
            size_t j;
            for (j = i; j < i + 64; j += 8) {
                a = _mm_crc32_u64(a, tf_crc_ld64(p + j));
                b = _mm_crc32_u64(b, tf_crc_ld64(p + TF_CRC_BLOCK + j));
                d = _mm_crc32_u64(d, tf_crc_ld64(p + 2 * TF_CRC_BLOCK + j));
            }
        }
        c = tf_crc_shifted(1, (uint32_t)a) ^ tf_crc_shifted(0, (uint32_t)b) ^ (uint32_t)d;
        p += 3 * TF_CRC_BLOCK;
        n -= 3 * TF_CRC_BLOCK;
    }
    return tf_crc_hw1(c, p, n);
}

/* -- 2: PCLMULQDQ, four 128-bit accumulators ---------------------------------------------- */
/* tf_crc_par.k: fold constants (H half in the low qword, L half in the high one) for
 * distances D in bits, at these indices: */
#define TF_K128 0
#define TF_K256 1
#define TF_K384 2
#define TF_K512 3
#define TF_K2048 4
#define TF_K1024 5

__attribute__((target("sse4.2,pclmul"))) static inline __m128i tf_crc_fold(__m128i x, __m128i k,
                                                                           __m128i d)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                       _mm_clmulepi64_si128(x, k, 0x11)),
                         d);
}

__attribute__((target("sse4.2,pclmul"))) static inline __m128i tf_crc_kv(const tf_crc_par *P,
                                                                         int i)
{
    return _mm_set_epi64x((long long)P->k[i][1], (long long)P->k[i][0]);
}

/* the register c over a short p[0:n]: the instruction where it computes this CRC */
static uint32_t tf_crc_short(const tf_crc_par *P, uint32_t c, const uint8_t *p, size_t n)
{
    return P->hw ? tf_crc_hw1(c, p, n) : tf_crc_sw(P, c, p, n);
}

/* the 128-bit residue x, then the n < 16 bytes at p (copied to dst when dst) */
__attribute__((target("sse4.2,pclmul"))) static uint32_t
tf_crc_finish(const tf_crc_par *P, __m128i x, const uint8_t *p, size_t n, uint8_t *dst)
{
    uint32_t r;
    if (dst)
        memcpy(dst, p, n);
    if (P->hw) {
        uint64_t r64 = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
        r = (uint32_t)_mm_crc32_u64(r64, (uint64_t)_mm_extract_epi64(x, 1));
    } else {
        uint8_t b[16];
        _mm_storeu_si128((__m128i *)b, x);
        r = tf_crc_sw(P, 0, b, 16);
    }
    return tf_crc_short(P, r, p, n);
}

__attribute__((target("sse4.2,pclmul"))) static inline __m128i tf_crc_ld(const uint8_t *p,
                                                                         uint8_t *dst, size_t at)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(p + at));
    if (dst)
        _mm_storeu_si128((__m128i *)(dst + at), v);
    return v;
}

__attribute__((target("sse4.2,pclmul"))) static uint32_t
tf_crc_clmul(const tf_crc_par *P, uint32_t c, const uint8_t *p, size_t n, uint8_t *dst)
{
    __m128i x0, x1, x2, x3, k;
    if (n < 128) {
        if (dst)
            memcpy(dst, p, n);
        return tf_crc_short(P, c, p, n);
    }
    x0 = _mm_xor_si128(tf_crc_ld(p, dst, 0), _mm_cvtsi32_si128((int)c));
    x1 = tf_crc_ld(p, dst, 16);
    x2 = tf_crc_ld(p, dst, 32);
    x3 = tf_crc_ld(p, dst, 48);
    p += 64;
    n -= 64;
    if (dst)
        dst += 64;
    k = tf_crc_kv(P, TF_K512);
    while (n >= 64) {
        x0 = tf_crc_fold(x0, k, tf_crc_ld(p, dst, 0));
        x1 = tf_crc_fold(x1, k, tf_crc_ld(p, dst, 16));
        x2 = tf_crc_fold(x2, k, tf_crc_ld(p, dst, 32));
        x3 = tf_crc_fold(x3, k, tf_crc_ld(p, dst, 48));
        p += 64;
        n -= 64;
        if (dst)
            dst += 64;
    }
    k = tf_crc_kv(P, TF_K128);
    x0 = tf_crc_fold(x0, k, x1);
    x0 = tf_crc_fold(x0, k, x2);
    x0 = tf_crc_fold(x0, k, x3);
    while (n >= 16) {
        x0 = tf_crc_fold(x0, k, tf_crc_ld(p, dst, 0));
        p += 16;
        n -= 16;
        if (dst)
            dst += 16;
    }
    return tf_crc_finish(P, x0, p, n, dst);
}

/* -- 3: VPCLMULQDQ, four 256-bit accumulators ------------------------------------------- */
#define TF_CRC_AVX2 "avx2,vpclmulqdq,pclmul,sse4.2"

__attribute__((target(TF_CRC_AVX2))) static inline __m256i tf_crc_fold256(__m256i x, __m256i k,
                                                                          __m256i d)
{
    return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00),
                                             _mm256_clmulepi64_epi128(x, k, 0x11)),
                            d);
}

__attribute__((target(TF_CRC_AVX2))) static inline __m256i tf_crc_ld256(const uint8_t *p,
                                                                        uint8_t *dst, size_t at)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)(p + at));
    if (dst)
        _mm256_storeu_si256((__m256i *)(dst + at), v);
    return v;
}

__attribute__((target(TF_CRC_AVX2))) static uint32_t
tf_crc_avx2(const tf_crc_par *P, uint32_t c, const uint8_t *p, size_t n, uint8_t *dst)
{
    __m256i y0, y1, y2, y3, k;
    __m128i x, k1;
    if (n < 256)
        return tf_crc_clmul(P, c, p, n, dst);
    y0 = _mm256_xor_si256(tf_crc_ld256(p, dst, 0), _mm256_set_m128i(_mm_setzero_si128(), _mm_cvtsi32_si128((int)c)));
    y1 = tf_crc_ld256(p, dst, 32);
    y2 = tf_crc_ld256(p, dst, 64);
    y3 = tf_crc_ld256(p, dst, 96);
    p += 128;
    n -= 128;
    if (dst)
        dst += 128;
    k = _mm256_broadcastsi128_si256(tf_crc_kv(P, TF_K1024));
    while (n >= 128) {
        y0 = tf_crc_fold256(y0, k, tf_crc_ld256(p, dst, 0));
        y1 = tf_crc_fold256(y1, k, tf_crc_ld256(p, dst, 32));
        y2 = tf_crc_fold256(y2, k, tf_crc_ld256(p, dst, 64));
        y3 = tf_crc_fold256(y3, k, tf_crc_ld256(p, dst, 96));
        p += 128;
        n -= 128;
        if (dst)
            dst += 128;
    }
    k = _mm256_broadcastsi128_si256(tf_crc_kv(P, TF_K256));
    y0 = tf_crc_fold256(y0, k, y1);
    y0 = tf_crc_fold256(y0, k, y2);
    y0 = tf_crc_fold256(y0, k, y3);
    while (n >= 32) {
        y0 = tf_crc_fold256(y0, k, tf_crc_ld256(p, dst, 0));
        p += 32;
        n -= 32;
        if (dst)
            dst += 32;
    }
    /* the two 128-bit lanes of y0 (at bytes 0 and 16) into one */
    k1 = tf_crc_kv(P, TF_K128);
    x = tf_crc_fold(_mm256_castsi256_si128(y0), k1, _mm256_extracti128_si256(y0, 1));
    while (n >= 16) {
        x = tf_crc_fold(x, k1, tf_crc_ld(p, dst, 0));
        p += 16;
        n -= 16;
        if (dst)
            dst += 16;
    }
    return tf_crc_finish(P, x, p, n, dst);
}

/* -- 4: VPCLMULQDQ, four 512-bit accumulators ------------------------------------------- */
#define TF_CRC_AVX512 "avx512f,avx512vl,avx512bw,avx512dq,vpclmulqdq,pclmul,sse4.2"

__attribute__((target(TF_CRC_AVX512))) static inline __m512i tf_crc_fold512(__m512i x, __m512i k,
                                                                            __m512i d)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), d, 0x96);
}

__attribute__((target(TF_CRC_AVX512))) static inline __m512i tf_crc_ld512(const uint8_t *p,
                                                                          uint8_t *dst, size_t at)
{
    __m512i v = _mm512_loadu_si512((const void *)(p + at));
    if (dst) {
        if (tf_crc_nt && !((uintptr_t)(dst + at) & 63))
            _mm512_stream_si512((void *)(dst + at), v);
        else
            _mm512_storeu_si512((void *)(dst + at), v);
    }
    return v;
}

__attribute__((target(TF_CRC_AVX512))) static uint32_t
tf_crc_avx512(const tf_crc_par *P, uint32_t c, const uint8_t *p, size_t n, uint8_t *dst)
{
    __m512i z0, z1, z2, z3, k;
    __m128i x, k1;
    if (n < 512)
        return tf_crc_clmul(P, c, p, n, dst);
    z0 = _mm512_xor_si512(tf_crc_ld512(p, dst, 0), _mm512_inserti32x4(_mm512_setzero_si512(), _mm_cvtsi32_si128((int)c), 0));
    z1 = tf_crc_ld512(p, dst, 64);
    z2 = tf_crc_ld512(p, dst, 128);
    z3 = tf_crc_ld512(p, dst, 192);
    p += 256;
    n -= 256;
    if (dst)
        dst += 256;
    k = _mm512_broadcast_i32x4(tf_crc_kv(P, TF_K2048));
    while (n >= 256) {
        z0 = tf_crc_fold512(z0, k, tf_crc_ld512(p, dst, 0));
        z1 = tf_crc_fold512(z1, k, tf_crc_ld512(p, dst, 64));
        z2 = tf_crc_fold512(z2, k, tf_crc_ld512(p, dst, 128));
        z3 = tf_crc_fold512(z3, k, tf_crc_ld512(p, dst, 192));
        p += 256;
        n -= 256;
        if (dst)
            dst += 256;
    }
    k = _mm512_broadcast_i32x4(tf_crc_kv(P, TF_K512));
    z0 = tf_crc_fold512(z0, k, z1);
    z0 = tf_crc_fold512(z0, k, z2);
    z0 = tf_crc_fold512(z0, k, z3);
    while (n >= 64) {
        z0 = tf_crc_fold512(z0, k, tf_crc_ld512(p, dst, 0));
        p += 64;
        n -= 64;
        if (dst)
            dst += 64;
    }
    /* the four 128-bit lanes of z0 (at bytes 0, 16, 32, 48) into one */
    x = _mm512_extracti32x4_epi32(z0, 3);
    x = tf_crc_fold(_mm512_extracti32x4_epi32(z0, 2), tf_crc_kv(P, TF_K128), x);
    x = tf_crc_fold(_mm512_extracti32x4_epi32(z0, 1), tf_crc_kv(P, TF_K256), x);
    x = tf_crc_fold(_mm512_castsi512_si128(z0), tf_crc_kv(P, TF_K384), x);
    k1 = tf_crc_kv(P, TF_K128);
    while (n >= 16) {
        x = tf_crc_fold(x, k1, tf_crc_ld(p, dst, 0));
        p += 16;
        n -= 16;
        if (dst)
            dst += 16;
    }
    if (dst && tf_crc_nt)
        _mm_sfence();
    return tf_crc_finish(P, x, p, n, dst);
}
#endif /* x86-64 */

/* -- dispatch -------------------------------------------------------------------------------- */
static const char *const tf_crc_names[5] = {"table", "sse4.2", "pclmul", "avx2-vpclmul",
                                            "avx512-vpclmul"};

/* the raw CRC register c (not inverted) over p[0:n]; copies the bytes to dst when dst */
static uint32_t tf_crc_raw(const tf_crc_par *P, int level, uint32_t c, const uint8_t *p, size_t n,
                           uint8_t *dst)
{
#ifdef TF_CRC_X86
    if (level == 4)
        return tf_crc_avx512(P, c, p, n, dst);
    if (level == 3)
        return tf_crc_avx2(P, c, p, n, dst);
    /* 128-bit folding runs at about half the speed of the crc32 instruction on three streams
       (14.6 vs 27.7 GB/s in cache on Zen 4): a polynomial the instruction computes (CRC-32C)
       uses the instruction at this level, but for a copy (folding while storing: 13.4 GB/s
       against 3-8 for a copy then the instruction); CRC-32 folds */
    if (level == 2 && (!P->hw || dst))
        return tf_crc_clmul(P, c, p, n, dst);
#endif
    if (dst)
        memcpy(dst, p, n);
#ifdef TF_CRC_X86
    if ((level == 1 || level == 2) && P->hw)
        return tf_crc_hw3(c, p, n);
#else
    (void)level;
#endif
    return tf_crc_sw(P, c, p, n);
}

/* CRC-32C of p[0:n] continuing from value (a finished CRC) */
static uint32_t tf_crc32c(uint32_t value, const uint8_t *p, size_t n)
{
    return ~tf_crc_raw(&tf_crc_c, tf_crc_level, ~value, p, n, NULL);
}

/* CRC-32 (zlib's crc32) of p[0:n] continuing from value */
static uint32_t tf_crc32(uint32_t value, const uint8_t *p, size_t n)
{
    return ~tf_crc_raw(&tf_crc_z, tf_crc_level, ~value, p, n, NULL);
}

static uint32_t tf_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    return tf_crc_combine(&tf_crc_c, crc1, crc2, len2);
}

static uint32_t tf_crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    return tf_crc_combine(&tf_crc_z, crc1, crc2, len2);
}

/* bytes copied and checked per round by tf_copy_crc32c in the "block" strategy */
#define TF_CRC_COPY_BLOCK (32 << 10)
static int tf_crc_copy_fused = 1; /* 1: store while folding; 0: memcpy a block, then CRC it */

/* copy src[0:n] to dst (not overlapping) and return their CRC-32C, continuing from value */
static uint32_t tf_copy_crc32c(uint32_t value, const uint8_t *src, uint8_t *dst, size_t n)
{
    uint32_t c = ~value;
    int level = tf_crc_level;
    if (tf_crc_copy_fused && level >= 2)
        return ~tf_crc_raw(&tf_crc_c, level, c, src, n, dst);
    while (n) {
        size_t take = n < TF_CRC_COPY_BLOCK ? n : TF_CRC_COPY_BLOCK;
        memcpy(dst, src, take);
        c = tf_crc_raw(&tf_crc_c, level, c, dst, take, NULL); /* from the copy, in the cache */
        src += take;
        dst += take;
        n -= take;
    }
    return ~c;
}

/* tf_copy_crc32c with this thread's non-temporal stores on for the call when stream is set */
static uint32_t tf_copy_crc32c_nt(uint32_t value, const uint8_t *src, uint8_t *dst, size_t n,
                                  int stream)
{
    int was = tf_crc_nt;
    uint32_t v;
    if (stream)
        tf_crc_nt = 1;
    v = tf_copy_crc32c(value, src, dst, n);
    tf_crc_nt = was;
    return v;
}

/* the tables and constants of the reflected polynomial poly */
static void tf_crc_par_init(tf_crc_par *P, uint32_t poly, int hw)
{
    uint32_t i, j, c;
    int k;
    P->poly = poly;
    P->hw = hw;
    for (i = 0; i < 256; i++) {
        c = i;
        for (j = 0; j < 8; j++)
            c = (c >> 1) ^ (poly & (0u - (c & 1u)));
        P->table[0][i] = c;
    }
    for (i = 0; i < 256; i++)
        for (k = 1; k < 8; k++)
            P->table[k][i] = (P->table[k - 1][i] >> 8) ^ P->table[0][P->table[k - 1][i] & 0xff];
    P->x2n[0] = 0x40000000u; /* x^1 */
    for (k = 1; k < 67; k++)
        P->x2n[k] = tf_crc_mulmod(poly, P->x2n[k - 1], P->x2n[k - 1]);
    {
        static const unsigned dist[6] = {128, 256, 384, 512, 2048, 1024};
        for (k = 0; k < 6; k++) {
            P->k[k][0] = (uint64_t)tf_crc_xpow(P, dist[k] + 32) << 1; /* H: x^(D+64) / x^32 */
            P->k[k][1] = (uint64_t)tf_crc_xpow(P, dist[k] - 32) << 1; /* L: x^D / x^32 */
        }
    }
}

/* tables, constants and the CPU's best level; called once at import */
static void tf_crc_init(void)
{
    tf_crc_par_init(&tf_crc_c, 0x82F63B78u, 1);
    tf_crc_par_init(&tf_crc_z, 0xEDB88320u, 0);
    tf_crc_best = 0;
    tf_crc_nt = 0;
#ifdef TF_CRC_X86
    {
        tf_crc_shift_init(0, tf_crc_xpow(&tf_crc_c, 8ull * TF_CRC_BLOCK));
        tf_crc_shift_init(1, tf_crc_xpow(&tf_crc_c, 16ull * TF_CRC_BLOCK));
        __builtin_cpu_init();
        if (__builtin_cpu_supports("sse4.2")) {
            tf_crc_best = 1;
            if (__builtin_cpu_supports("pclmul")) {
                tf_crc_best = 2;
                if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq"))
                    tf_crc_best = 3;
                if (tf_crc_best == 3 && __builtin_cpu_supports("avx512f") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512dq"))
                    tf_crc_best = 4;
            }
        }
    }
#endif
    tf_crc_level = tf_crc_best;
}

#endif /* TF_CRC32C_IMPL_H */

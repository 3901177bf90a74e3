/* XXH3-64 for tenfold's xxh3 kernel family, written from the algorithm's description
 * (xxHash's doc/xxhash_spec.md): the same values as the reference library's XXH3_64bits and
 * XXH3_64bits_withSeed, with the default 192-byte secret.
 *
 * Inputs of 0-16, 17-128 and 129-240 bytes have their own short formulas. Longer inputs run
 * eight 64-bit accumulators over 64-byte stripes: stripe k of the input is accumulated with
 * the secret at byte 8 * (k mod 16), and after every 16 stripes (a 1,024-byte block) the
 * accumulators are scrambled. The stripes accumulated this way are the (len - 1) / 64 that lie
 * wholly before the last byte; then the last 64 bytes of the input (which may overlap them)
 * are accumulated with the secret at byte 121, and the accumulators are merged. So a stream
 * can accumulate a stripe as soon as it is complete and one more byte has arrived: the state
 * (tf_x3_state) keeps the unconsumed tail (1..256 bytes) and the 64 bytes before it.
 *
 * The stripe loop is chosen once at import by what the CPU supports (tf_x3_init):
 *   3 "avx512": one 512-bit register of accumulators;
 *   2 "avx2": two 256-bit registers;
 *   1 "sse2": four 128-bit registers (every x86-64 CPU);
 *   0 "scalar": plain 64-bit arithmetic (any CPU, any byte order; the only one off x86-64,
 *     or when built with -DTF_XXH3_PORTABLE).
 * Copy variants (dst != NULL) store every stripe they load to dst: one pass over the source.
 */
#ifndef TF_XXH3_IMPL_H
#define TF_XXH3_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TF_X3_P32_1 0x9E3779B1u
#define TF_X3_P32_2 0x85EBCA77u
#define TF_X3_P32_3 0xC2B2AE3Du
#define TF_X3_P64_1 0x9E3779B185EBCA87ull
#define TF_X3_P64_2 0xC2B2AE3D27D4EB4Full
#define TF_X3_P64_3 0x165667B19E3779F9ull
#define TF_X3_P64_4 0x85EBCA77C2B2AE63ull
#define TF_X3_P64_5 0x27D4EB2F165667C5ull
#define TF_X3_MX1 0x165667919E3779F9ull
#define TF_X3_MX2 0x9FB21C651E98DF25ull

#define TF_X3_SECRET 192   /* bytes of secret */
#define TF_X3_STRIPE 64    /* bytes per stripe */
#define TF_X3_PER_BLOCK 16 /* stripes per block: (192 - 64) / 8 */
#define TF_X3_MID 240      /* longest input of the short formulas */
#define TF_X3_BUF 256      /* bytes a stream buffers (4 stripes, >= TF_X3_MID) */
#define TF_X3_LAST 121     /* secret offset of the last stripe: 192 - 64 - 7 */

/* the default secret (the algorithm's constant) */
static const uint8_t tf_x3_default[TF_X3_SECRET] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad,
    0x1c, 0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3,
    0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc,
    0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6,
    0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65,
    0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19,
    0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9,
    0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31,
    0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb,
    0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0,
    0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d,
    0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f,
    0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

static int tf_x3_best = 0;  /* the best level this CPU runs */
static int tf_x3_level = 0; /* the level in use (tests may lower it) */

/* -- little-endian loads, whatever the byte order ------------------------------------------ */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define TF_X3_BIG 1
#endif

static inline uint64_t tf_x3_rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#ifdef TF_X3_BIG
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t tf_x3_rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#ifdef TF_X3_BIG
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline void tf_x3_wr64(uint8_t *p, uint64_t v)
{
#ifdef TF_X3_BIG
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

static inline uint64_t tf_x3_swap64(uint64_t x)
{
    return ((x & 0xffull) << 56) | ((x & 0xff00ull) << 40) | ((x & 0xff0000ull) << 24) |
           ((x & 0xff000000ull) << 8) | ((x >> 8) & 0xff000000ull) |
           ((x >> 24) & 0xff0000ull) | ((x >> 40) & 0xff00ull) | (x >> 56);
}

static inline uint32_t tf_x3_swap32(uint32_t x)
{
    return (x << 24) | ((x & 0xff00u) << 8) | ((x >> 8) & 0xff00u) | (x >> 24);
}

static inline uint64_t tf_x3_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* the 128-bit product of a and b, its two halves XORed */
static inline uint64_t tf_x3_mulfold(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    unsigned __int128 m = (unsigned __int128)a * b;
    return (uint64_t)m ^ (uint64_t)(m >> 64);
#else
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t ll = al * bl, hl = ah * bl, lh = al * bh, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (hl & 0xffffffffu) + lh;
    uint64_t lo = (mid << 32) | (ll & 0xffffffffu);
    uint64_t hi = hh + (hl >> 32) + (mid >> 32);
    return lo ^ hi;
#endif
}

static inline uint64_t tf_x3_avalanche(uint64_t x)
{
    x ^= x >> 37;
    x *= TF_X3_MX1;
    return x ^ (x >> 32);
}

static inline uint64_t tf_x3_avalanche64(uint64_t x)
{
    x ^= x >> 33;
    x *= TF_X3_P64_2;
    x ^= x >> 29;
    x *= TF_X3_P64_3;
    return x ^ (x >> 32);
}

/* -- 0 to 240 bytes (the default secret, the seed as given) -------------------------------- */
static uint64_t tf_x3_upto16(const uint8_t *p, size_t n, uint64_t seed)
{
    const uint8_t *k = tf_x3_default;
    if (n > 8) {
        uint64_t lo = ((tf_x3_rd64(k + 24) ^ tf_x3_rd64(k + 32)) + seed) ^ tf_x3_rd64(p);
        uint64_t hi = ((tf_x3_rd64(k + 40) ^ tf_x3_rd64(k + 48)) - seed) ^ tf_x3_rd64(p + n - 8);
        return tf_x3_avalanche((uint64_t)n + tf_x3_swap64(lo) + hi + tf_x3_mulfold(lo, hi));
    }
    if (n >= 4) {
        uint64_t s = seed ^ ((uint64_t)tf_x3_swap32((uint32_t)seed) << 32);
        uint64_t c = (uint64_t)tf_x3_rd32(p + n - 4) | ((uint64_t)tf_x3_rd32(p) << 32);
        uint64_t v = ((tf_x3_rd64(k + 8) ^ tf_x3_rd64(k + 16)) - s) ^ c;
        v ^= tf_x3_rotl(v, 49) ^ tf_x3_rotl(v, 24);
        v *= TF_X3_MX2;
        v ^= (v >> 35) + (uint64_t)n;
        v *= TF_X3_MX2;
        return v ^ (v >> 28);
    }
    if (n) {
        uint32_t c = (uint32_t)p[n - 1] | ((uint32_t)n << 8) | ((uint32_t)p[0] << 16) |
                     ((uint32_t)p[n >> 1] << 24);
        uint64_t v = ((uint64_t)(tf_x3_rd32(k) ^ tf_x3_rd32(k + 4)) + seed) ^ (uint64_t)c;
        return tf_x3_avalanche64(v);
    }
    return tf_x3_avalanche64(seed ^ tf_x3_rd64(k + 56) ^ tf_x3_rd64(k + 64));
}

static inline uint64_t tf_x3_mix16(const uint8_t *p, size_t at, uint64_t seed)
{
    const uint8_t *k = tf_x3_default + at;
    return tf_x3_mulfold(tf_x3_rd64(p) ^ (tf_x3_rd64(k) + seed),
                         tf_x3_rd64(p + 8) ^ (tf_x3_rd64(k + 8) - seed));
}

static uint64_t tf_x3_upto240(const uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t acc = (uint64_t)n * TF_X3_P64_1;
    size_t i;
    if (n <= 16)
        return tf_x3_upto16(p, n, seed);
    if (n <= 128) {
        size_t rounds = ((n - 1) >> 5) + 1;
        for (i = rounds; i-- > 0;) {
            acc += tf_x3_mix16(p + 16 * i, 32 * i, seed);
            acc += tf_x3_mix16(p + n - 16 * i - 16, 32 * i + 16, seed);
        }
        return tf_x3_avalanche(acc);
    }
    for (i = 0; i < 8; i++)
        acc += tf_x3_mix16(p + 16 * i, 16 * i, seed);
    acc = tf_x3_avalanche(acc);
    for (i = 8; i < (n >> 4); i++)
        acc += tf_x3_mix16(p + 16 * i, 16 * (i - 8) + 3, seed);
    acc += tf_x3_mix16(p + n - 16, 119, seed);
    return tf_x3_avalanche(acc);
}

/* -- the stripe loop ------------------------------------------------------------------------ */
/* Accumulate ns consecutive stripes at p into acc, stripe j with the secret at k + 8 * j;
 * store each stripe to dst + 64 * j when dst is not NULL. */

/* 0: scalar */
static void tf_x3_acc_scalar(uint64_t *acc, const uint8_t *p, uint8_t *dst, size_t ns,
                             const uint8_t *k)
{
    size_t s;
    int i;
    for (s = 0; s < ns; s++, p += TF_X3_STRIPE, k += 8) {
        for (i = 0; i < 8; i++) {
            uint64_t d = tf_x3_rd64(p + 8 * i);
            uint64_t v = d ^ tf_x3_rd64(k + 8 * i);
            acc[i ^ 1] += d;
            acc[i] += (v & 0xffffffffu) * (v >> 32);
        }
        if (dst) {
            memcpy(dst, p, TF_X3_STRIPE);
            dst += TF_X3_STRIPE;
        }
    }
}

static void tf_x3_scramble_scalar(uint64_t *acc, const uint8_t *k)
{
    int i;
    for (i = 0; i < 8; i++) {
        uint64_t a = acc[i];
        a ^= a >> 47;
        a ^= tf_x3_rd64(k + 8 * i);
        acc[i] = a * TF_X3_P32_1;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(TF_XXH3_PORTABLE)
#define TF_X3_X86 1
#include <immintrin.h>

#define TF_X3_INLINE static inline __attribute__((always_inline))
/* Keep a loaded stripe in a register: without this the compiler folds the load into both
 * instructions that use it, loading each stripe twice (a quarter slower in cache, more when
 * the input is not 64-byte aligned). */
#define TF_X3_IN_REGISTER(x) __asm__("" : "+v"(x))

/* Each level has a stripe step and a scramble on registers, and a consume loop built from
 * them that keeps the accumulators in registers across blocks (a full block runs with a fixed
 * trip count). */
#define TF_X3_CONSUME_BODY(STRIPE, SCRAMBLE)                                                   \
    while (ns) {                                                                               \
        if (d == 0 && ns >= TF_X3_PER_BLOCK) {                                                 \
            size_t s_;                                                                         \
            for (s_ = 0; s_ < TF_X3_PER_BLOCK; s_++)                                           \
                STRIPE(p + TF_X3_STRIPE * s_, dst ? dst + TF_X3_STRIPE * s_ : NULL, k + 8 * s_); \
            p += TF_X3_STRIPE * TF_X3_PER_BLOCK;                                               \
            if (dst)                                                                           \
                dst += TF_X3_STRIPE * TF_X3_PER_BLOCK;                                         \
            ns -= TF_X3_PER_BLOCK;                                                             \
            SCRAMBLE(k + TF_X3_SECRET - TF_X3_STRIPE);                                         \
            continue;                                                                          \
        }                                                                                      \
        STRIPE(p, dst, k + 8 * d);                                                             \
        p += TF_X3_STRIPE;                                                                     \
        if (dst)                                                                               \
            dst += TF_X3_STRIPE;                                                               \
        ns--;                                                                                  \
        if (++d == TF_X3_PER_BLOCK) {                                                          \
            SCRAMBLE(k + TF_X3_SECRET - TF_X3_STRIPE);                                         \
            d = 0;                                                                             \
        }                                                                                      \
    }

/* 1: SSE2 (the x86-64 baseline: no target attribute) */
TF_X3_INLINE __m128i tf_x3_lane_sse2(__m128i a, const uint8_t *p, uint8_t *dst,
                                     const uint8_t *k)
{
    __m128i d = _mm_loadu_si128((const __m128i *)p);
    TF_X3_IN_REGISTER(d);
    __m128i v = _mm_xor_si128(d, _mm_loadu_si128((const __m128i *)k));
    __m128i prod = _mm_mul_epu32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(0, 3, 0, 1)));
    if (dst)
        _mm_storeu_si128((__m128i *)dst, d);
    return _mm_add_epi64(a, _mm_add_epi64(_mm_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2)), prod));
}

TF_X3_INLINE __m128i tf_x3_scr_sse2(__m128i a, const uint8_t *k)
{
    const __m128i prime = _mm_set1_epi32((int)TF_X3_P32_1);
    a = _mm_xor_si128(a, _mm_srli_epi64(a, 47));
    a = _mm_xor_si128(a, _mm_loadu_si128((const __m128i *)k));
    return _mm_add_epi64(_mm_mul_epu32(a, prime),
                         _mm_slli_epi64(_mm_mul_epu32(_mm_srli_epi64(a, 32), prime), 32));
}

#define TF_X3_STRIPE_SSE2(P, D, K)                                                             \
    do {                                                                                       \
        const uint8_t *p_ = (P), *k_ = (K);                                                    \
        uint8_t *d_ = (D);                                                                     \
        a0 = tf_x3_lane_sse2(a0, p_, d_, k_);                                                  \
        a1 = tf_x3_lane_sse2(a1, p_ + 16, d_ ? d_ + 16 : NULL, k_ + 16);                       \
        a2 = tf_x3_lane_sse2(a2, p_ + 32, d_ ? d_ + 32 : NULL, k_ + 32);                       \
        a3 = tf_x3_lane_sse2(a3, p_ + 48, d_ ? d_ + 48 : NULL, k_ + 48);                       \
    } while (0)
#define TF_X3_SCRAMBLE_SSE2(K)                                                                 \
    do {                                                                                       \
        a0 = tf_x3_scr_sse2(a0, (K));                                                          \
        a1 = tf_x3_scr_sse2(a1, (K) + 16);                                                     \
        a2 = tf_x3_scr_sse2(a2, (K) + 32);                                                     \
        a3 = tf_x3_scr_sse2(a3, (K) + 48);                                                     \
    } while (0)

TF_X3_INLINE void tf_x3_consume_sse2_body(uint64_t *acc, size_t *done, const uint8_t *k,
                                          const uint8_t *p, uint8_t *dst, size_t ns)
{
    __m128i a0 = _mm_loadu_si128((const __m128i *)acc);
    __m128i a1 = _mm_loadu_si128((const __m128i *)(acc + 2));
    __m128i a2 = _mm_loadu_si128((const __m128i *)(acc + 4));
    __m128i a3 = _mm_loadu_si128((const __m128i *)(acc + 6));
    size_t d = *done;
    TF_X3_CONSUME_BODY(TF_X3_STRIPE_SSE2, TF_X3_SCRAMBLE_SSE2)
    _mm_storeu_si128((__m128i *)acc, a0);
    _mm_storeu_si128((__m128i *)(acc + 2), a1);
    _mm_storeu_si128((__m128i *)(acc + 4), a2);
    _mm_storeu_si128((__m128i *)(acc + 6), a3);
    *done = d;
}

static void tf_x3_consume_sse2(uint64_t *acc, size_t *done, const uint8_t *k, const uint8_t *p,
                               size_t ns)
{
    tf_x3_consume_sse2_body(acc, done, k, p, NULL, ns);
}

static void tf_x3_consume_sse2_copy(uint64_t *acc, size_t *done, const uint8_t *k,
                                    const uint8_t *p, uint8_t *dst, size_t ns)
{
    tf_x3_consume_sse2_body(acc, done, k, p, dst, ns);
}

/* 2: AVX2 */
#define TF_X3_AVX2 __attribute__((target("avx2")))

TF_X3_AVX2 TF_X3_INLINE __m256i tf_x3_lane_avx2(__m256i a, const uint8_t *p, uint8_t *dst,
                                                const uint8_t *k)
{
    __m256i d = _mm256_loadu_si256((const __m256i *)p);
    TF_X3_IN_REGISTER(d);
    __m256i v = _mm256_xor_si256(d, _mm256_loadu_si256((const __m256i *)k));
    __m256i prod = _mm256_mul_epu32(v, _mm256_shuffle_epi32(v, _MM_SHUFFLE(0, 3, 0, 1)));
    if (dst)
        _mm256_storeu_si256((__m256i *)dst, d);
    return _mm256_add_epi64(
        a, _mm256_add_epi64(_mm256_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2)), prod));
}

TF_X3_AVX2 TF_X3_INLINE __m256i tf_x3_scr_avx2(__m256i a, const uint8_t *k)
{
    const __m256i prime = _mm256_set1_epi32((int)TF_X3_P32_1);
    a = _mm256_xor_si256(a, _mm256_srli_epi64(a, 47));
    a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)k));
    return _mm256_add_epi64(
        _mm256_mul_epu32(a, prime),
        _mm256_slli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), prime), 32));
}

#define TF_X3_STRIPE_AVX2(P, D, K)                                                             \
    do {                                                                                       \
        const uint8_t *p_ = (P), *k_ = (K);                                                    \
        uint8_t *d_ = (D);                                                                     \
        a0 = tf_x3_lane_avx2(a0, p_, d_, k_);                                                  \
        a1 = tf_x3_lane_avx2(a1, p_ + 32, d_ ? d_ + 32 : NULL, k_ + 32);                       \
    } while (0)
#define TF_X3_SCRAMBLE_AVX2(K)                                                                 \
    do {                                                                                       \
        a0 = tf_x3_scr_avx2(a0, (K));                                                          \
        a1 = tf_x3_scr_avx2(a1, (K) + 32);                                                     \
    } while (0)

TF_X3_AVX2 TF_X3_INLINE void tf_x3_consume_avx2_body(uint64_t *acc, size_t *done,
                                                     const uint8_t *k, const uint8_t *p,
                                                     uint8_t *dst, size_t ns)
{
    __m256i a0 = _mm256_loadu_si256((const __m256i *)acc);
    __m256i a1 = _mm256_loadu_si256((const __m256i *)(acc + 4));
    size_t d = *done;
    TF_X3_CONSUME_BODY(TF_X3_STRIPE_AVX2, TF_X3_SCRAMBLE_AVX2)
    _mm256_storeu_si256((__m256i *)acc, a0);
    _mm256_storeu_si256((__m256i *)(acc + 4), a1);
    *done = d;
}

TF_X3_AVX2 static void tf_x3_consume_avx2(uint64_t *acc, size_t *done, const uint8_t *k,
                                          const uint8_t *p, size_t ns)
{
    tf_x3_consume_avx2_body(acc, done, k, p, NULL, ns);
}

TF_X3_AVX2 static void tf_x3_consume_avx2_copy(uint64_t *acc, size_t *done, const uint8_t *k,
                                               const uint8_t *p, uint8_t *dst, size_t ns)
{
    tf_x3_consume_avx2_body(acc, done, k, p, dst, ns);
}

/* 3: AVX-512 (F is enough: 64-bit lanes, 32-bit shuffles, unsigned 32x32 products) */
#define TF_X3_AVX512 __attribute__((target("avx512f")))

TF_X3_AVX512 TF_X3_INLINE __m512i tf_x3_lane_avx512(__m512i a, const uint8_t *p, uint8_t *dst,
                                                    const uint8_t *k)
{
    __m512i d = _mm512_loadu_si512((const void *)p);
    TF_X3_IN_REGISTER(d);
    __m512i v = _mm512_xor_si512(d, _mm512_loadu_si512((const void *)k));
    __m512i prod = _mm512_mul_epu32(v, _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0x31));
    if (dst)
        _mm512_storeu_si512((void *)dst, d);
    return _mm512_add_epi64(
        a, _mm512_add_epi64(_mm512_shuffle_epi32(d, (_MM_PERM_ENUM)0x4E), prod));
}

TF_X3_AVX512 TF_X3_INLINE __m512i tf_x3_scr_avx512(__m512i a, const uint8_t *k)
{
    const __m512i prime = _mm512_set1_epi32((int)TF_X3_P32_1);
    a = _mm512_xor_si512(a, _mm512_srli_epi64(a, 47));
    a = _mm512_xor_si512(a, _mm512_loadu_si512((const void *)k));
    return _mm512_add_epi64(
        _mm512_mul_epu32(a, prime),
        _mm512_slli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a, 32), prime), 32));
}

#define TF_X3_STRIPE_AVX512(P, D, K) a0 = tf_x3_lane_avx512(a0, (P), (D), (K))
#define TF_X3_SCRAMBLE_AVX512(K) a0 = tf_x3_scr_avx512(a0, (K))

TF_X3_AVX512 TF_X3_INLINE void tf_x3_consume_avx512_body(uint64_t *acc, size_t *done,
                                                         const uint8_t *k, const uint8_t *p,
                                                         uint8_t *dst, size_t ns)
{
    __m512i a0 = _mm512_loadu_si512((const void *)acc);
    size_t d = *done;
    if (d == 0 && ns >= 2 * TF_X3_PER_BLOCK) { /* whole blocks with the keys in registers */
        __m512i key[TF_X3_PER_BLOCK], sk = _mm512_loadu_si512((const void *)(k + 128));
        const __m512i prime = _mm512_set1_epi32((int)TF_X3_P32_1);
        size_t s;
        for (s = 0; s < TF_X3_PER_BLOCK; s++)
            key[s] = _mm512_loadu_si512((const void *)(k + 8 * s));
        while (ns >= TF_X3_PER_BLOCK) {
            /* the stripes' words go into b unswapped, and into a0 swapped once per block
             * (a sum of lane swaps is the swap of the sum): one shuffle per stripe less */
            __m512i b = _mm512_setzero_si512();
            for (s = 0; s < TF_X3_PER_BLOCK; s++) {
                __m512i x = _mm512_loadu_si512((const void *)(p + TF_X3_STRIPE * s));
                __m512i v;
                TF_X3_IN_REGISTER(x);
                v = _mm512_xor_si512(x, key[s]);
                if (dst)
                    _mm512_storeu_si512((void *)(dst + TF_X3_STRIPE * s), x);
                b = _mm512_add_epi64(b, x);
                a0 = _mm512_add_epi64(a0, _mm512_mul_epu32(v, _mm512_srli_epi64(v, 32)));
            }
            a0 = _mm512_add_epi64(a0, _mm512_shuffle_epi32(b, (_MM_PERM_ENUM)0x4E));
            a0 = _mm512_xor_si512(a0, _mm512_srli_epi64(a0, 47));
            a0 = _mm512_xor_si512(a0, sk);
            a0 = _mm512_add_epi64(
                _mm512_mul_epu32(a0, prime),
                _mm512_slli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a0, 32), prime), 32));
            p += TF_X3_STRIPE * TF_X3_PER_BLOCK;
            if (dst)
                dst += TF_X3_STRIPE * TF_X3_PER_BLOCK;
            ns -= TF_X3_PER_BLOCK;
        }
    }
    TF_X3_CONSUME_BODY(TF_X3_STRIPE_AVX512, TF_X3_SCRAMBLE_AVX512)
    _mm512_storeu_si512((void *)acc, a0);
    *done = d;
}

TF_X3_AVX512 static void tf_x3_consume_avx512(uint64_t *acc, size_t *done, const uint8_t *k,
                                              const uint8_t *p, size_t ns)
{
    tf_x3_consume_avx512_body(acc, done, k, p, NULL, ns);
}

TF_X3_AVX512 static void tf_x3_consume_avx512_copy(uint64_t *acc, size_t *done,
                                                   const uint8_t *k, const uint8_t *p,
                                                   uint8_t *dst, size_t ns)
{
    tf_x3_consume_avx512_body(acc, done, k, p, dst, ns);
}
#endif /* x86-64 */

static const char *const tf_x3_names[4] = {"scalar", "sse2", "avx2", "avx512"};

/* scalar consume: the reference loop, any CPU */
static void tf_x3_consume_scalar(uint64_t *acc, size_t *done, const uint8_t *k,
                                 const uint8_t *p, uint8_t *dst, size_t ns)
{
    while (ns) {
        size_t take = TF_X3_PER_BLOCK - *done;
        if (take > ns)
            take = ns;
        tf_x3_acc_scalar(acc, p, dst, take, k + 8 * *done);
        p += take * TF_X3_STRIPE;
        if (dst)
            dst += take * TF_X3_STRIPE;
        ns -= take;
        *done += take;
        if (*done == TF_X3_PER_BLOCK) {
            tf_x3_scramble_scalar(acc, k + TF_X3_SECRET - TF_X3_STRIPE);
            *done = 0;
        }
    }
}

/* ns stripes at p (copied to dst when dst) into acc, *done stripes of the current block
 * already accumulated; scrambles after each completed block; on the level in use */
static void tf_x3_consume(uint64_t *acc, size_t *done, const uint8_t *k, const uint8_t *p,
                          uint8_t *dst, size_t ns)
{
    if (!ns)
        return;
#ifdef TF_X3_X86
    switch (tf_x3_level) {
    case 3:
        if (dst)
            tf_x3_consume_avx512_copy(acc, done, k, p, dst, ns);
        else
            tf_x3_consume_avx512(acc, done, k, p, ns);
        return;
    case 2:
        if (dst)
            tf_x3_consume_avx2_copy(acc, done, k, p, dst, ns);
        else
            tf_x3_consume_avx2(acc, done, k, p, ns);
        return;
    case 1:
        if (dst)
            tf_x3_consume_sse2_copy(acc, done, k, p, dst, ns);
        else
            tf_x3_consume_sse2(acc, done, k, p, ns);
        return;
    default:
        break;
    }
#endif
    tf_x3_consume_scalar(acc, done, k, p, dst, ns);
}

static const uint64_t tf_x3_acc0[8] = {TF_X3_P32_3, TF_X3_P64_1, TF_X3_P64_2, TF_X3_P64_3,
                                       TF_X3_P64_4, TF_X3_P32_2, TF_X3_P64_5, TF_X3_P32_1};

/* the digest from the accumulators, the last 64 bytes of the input and its length */
static uint64_t tf_x3_finish(uint64_t *acc, const uint8_t *last, const uint8_t *k, uint64_t len)
{
    uint64_t r = len * TF_X3_P64_1;
    int i;
    tf_x3_acc_scalar(acc, last, NULL, 1, k + TF_X3_LAST);
    for (i = 0; i < 4; i++)
        r += tf_x3_mulfold(acc[2 * i] ^ tf_x3_rd64(k + 11 + 16 * i),
                           acc[2 * i + 1] ^ tf_x3_rd64(k + 19 + 16 * i));
    return tf_x3_avalanche(r);
}

/* the secret of a seed: the default one with the seed added to its even 64-bit words and
 * taken from its odd ones */
static void tf_x3_derive(uint8_t *out, uint64_t seed)
{
    int i;
    for (i = 0; i < TF_X3_SECRET / 16; i++) {
        tf_x3_wr64(out + 16 * i, tf_x3_rd64(tf_x3_default + 16 * i) + seed);
        tf_x3_wr64(out + 16 * i + 8, tf_x3_rd64(tf_x3_default + 16 * i + 8) - seed);
    }
}

/* XXH3-64 of p[0:n] with seed; copies the bytes to dst first when dst (not overlapping) */
static uint64_t tf_xxh3_64(const uint8_t *p, uint8_t *dst, size_t n, uint64_t seed)
{
    uint64_t acc[8];
    uint8_t derived[TF_X3_SECRET];
    const uint8_t *k = tf_x3_default;
    size_t done = 0, ns;
    if (n <= TF_X3_MID) {
        if (dst && n)
            memcpy(dst, p, n);
        return tf_x3_upto240(p, n, seed);
    }
    if (seed) {
        tf_x3_derive(derived, seed);
        k = derived;
    }
    memcpy(acc, tf_x3_acc0, sizeof acc);
    ns = (n - 1) / TF_X3_STRIPE;
    tf_x3_consume(acc, &done, k, p, dst, ns);
    if (dst) /* the tail after the last whole stripe: 1 to 64 bytes */
        memcpy(dst + ns * TF_X3_STRIPE, p + ns * TF_X3_STRIPE, n - ns * TF_X3_STRIPE);
    return tf_x3_finish(acc, p + n - TF_X3_STRIPE, k, (uint64_t)n);
}

/* -- streaming ------------------------------------------------------------------------------ */
/* Invariants: every byte before the last buflen is accumulated (a stripe is accumulated only
 * when a byte after it has arrived); buf holds the rest, 1..TF_X3_BUF bytes once any arrived;
 * while total <= TF_X3_BUF nothing is accumulated (buf holds the whole input); prev holds the
 * 64 input bytes just before buf once anything is accumulated. */
typedef struct {
    uint64_t acc[8];
    uint64_t total;
    uint64_t seed;
    size_t done;   /* stripes of the current block accumulated */
    size_t buflen; /* bytes in buf */
    uint8_t secret[TF_X3_SECRET];
    uint8_t buf[TF_X3_BUF];
    uint8_t prev[TF_X3_STRIPE];
} tf_x3_state;

static void tf_x3_reset(tf_x3_state *st, uint64_t seed)
{
    memcpy(st->acc, tf_x3_acc0, sizeof st->acc);
    st->total = 0;
    st->seed = seed;
    st->done = 0;
    st->buflen = 0;
    if (seed)
        tf_x3_derive(st->secret, seed);
    else
        memcpy(st->secret, tf_x3_default, TF_X3_SECRET);
    memset(st->buf, 0, TF_X3_BUF);
    memset(st->prev, 0, TF_X3_STRIPE);
}

/* add p[0:n] to the stream; copies every byte to dst too when dst (not overlapping) */
static void tf_x3_update(tf_x3_state *st, const uint8_t *p, uint8_t *dst, size_t n)
{
    size_t ns;
    if (!n)
        return;
    st->total += n;
    if (st->buflen + n <= TF_X3_BUF) { /* not past a full buffer: keep it all */
        memcpy(st->buf + st->buflen, p, n);
        if (dst)
            memcpy(dst, p, n);
        st->buflen += n;
        return;
    }
    if (st->buflen) { /* fill the buffer and accumulate it: more follows */
        size_t fill = TF_X3_BUF - st->buflen;
        memcpy(st->buf + st->buflen, p, fill);
        if (dst) {
            memcpy(dst, p, fill);
            dst += fill;
        }
        p += fill;
        n -= fill; /* > 0 */
        tf_x3_consume(st->acc, &st->done, st->secret, st->buf, NULL,
                      TF_X3_BUF / TF_X3_STRIPE);
        memcpy(st->prev, st->buf + TF_X3_BUF - TF_X3_STRIPE, TF_X3_STRIPE);
        st->buflen = 0;
    }
    ns = (n - 1) / TF_X3_STRIPE; /* leave 1..64 bytes */
    if (ns) {
        tf_x3_consume(st->acc, &st->done, st->secret, p, dst, ns);
        memcpy(st->prev, p + (ns - 1) * TF_X3_STRIPE, TF_X3_STRIPE);
        p += ns * TF_X3_STRIPE;
        if (dst)
            dst += ns * TF_X3_STRIPE;
        n -= ns * TF_X3_STRIPE;
    }
    memcpy(st->buf, p, n);
    if (dst)
        memcpy(dst, p, n);
    st->buflen = n;
}

/* the digest of everything given so far (the state is unchanged) */
static uint64_t tf_x3_digest(const tf_x3_state *st)
{
    uint64_t acc[8];
    uint8_t last[TF_X3_STRIPE];
    size_t done = st->done, n = st->buflen;
    const uint8_t *tail;
    if (st->total <= TF_X3_MID)
        return tf_x3_upto240(st->buf, n, st->seed);
    memcpy(acc, st->acc, sizeof acc);
    tf_x3_consume(acc, &done, st->secret, st->buf, NULL, (n - 1) / TF_X3_STRIPE);
    if (n >= TF_X3_STRIPE) {
        tail = st->buf + n - TF_X3_STRIPE;
    } else {
        memcpy(last, st->prev + n, TF_X3_STRIPE - n);
        memcpy(last + TF_X3_STRIPE - n, st->buf, n);
        tail = last;
    }
    return tf_x3_finish(acc, tail, st->secret, st->total);
}

/* the CPU's best level; called once at import */
static void tf_x3_init(void)
{
    tf_x3_best = 0;
#ifdef TF_X3_X86
    __builtin_cpu_init();
    tf_x3_best = 1;
    if (__builtin_cpu_supports("avx2")) {
        tf_x3_best = 2;
        if (__builtin_cpu_supports("avx512f"))
            tf_x3_best = 3;
    }
#endif
    tf_x3_level = tf_x3_best;
}

#endif /* TF_XXH3_IMPL_H */

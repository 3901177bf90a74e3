/* SSE2 unpacking of 1-, 2- and 4-bit fields (tenfold bitpack kernel).
 *
 * tf_unpack_sse2(src, nbytes, mode, lb, out) unpacks the fields of the first whole 16-byte
 * blocks of src[0:nbytes] into out (8 >> lb bytes per source byte) and returns how many source
 * bytes it did (a multiple of 16; 0 where SSE2 is missing): the caller's table loop does the
 * rest. Fields are LSB-first; mode 0 gives them unsigned, mode 1 as two's complement of the
 * field width, mode 2 (one-bit only) as -1/+1 for bit 0/1 -- the same as the lookup tables.
 *
 * Each field k of a byte is (byte >> k*bits) & mask, computed 16 bytes at a time (a 16-bit
 * shift does not mix bytes once masked); the byte-wise interleaves (unpacklo/hi epi8, epi16,
 * epi32) then put field k of byte j at out[j * per + k].
 */
#ifndef TF_BITPACK_IMPL_H
#define TF_BITPACK_IMPL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>

static inline __m128i tf_decode(__m128i v, int mode, int bits) {
    if (mode == 1) { /* two's complement: (f ^ half) - half */
        const __m128i half = _mm_set1_epi8((char)(1 << (bits - 1)));
        return _mm_sub_epi8(_mm_xor_si128(v, half), half);
    }
    if (mode == 2) { /* pm1: 2f - 1 */
        return _mm_sub_epi8(_mm_add_epi8(v, v), _mm_set1_epi8(1));
    }
    return v;
}

static inline __m128i tf_field(__m128i s, int shift, __m128i mask) {
    return _mm_and_si128(_mm_srli_epi16(s, shift), mask);
}

#define TF_STORE(p, v) _mm_storeu_si128((__m128i *)(p), (v))

static ptrdiff_t tf_unpack_sse2(const uint8_t *src, ptrdiff_t nbytes, int mode, int lb,
                                uint8_t *out) {
    ptrdiff_t i = 0;
    if (lb == 2) { /* 4-bit: two fields a byte */
        const __m128i m = _mm_set1_epi8(0x0F);
        for (; i + 16 <= nbytes; i += 16) {
            __m128i s = _mm_loadu_si128((const __m128i *)(src + i));
            __m128i a = tf_decode(_mm_and_si128(s, m), mode, 4);
            __m128i b = tf_decode(tf_field(s, 4, m), mode, 4);
            uint8_t *o = out + 2 * i;
            TF_STORE(o, _mm_unpacklo_epi8(a, b));
            TF_STORE(o + 16, _mm_unpackhi_epi8(a, b));
        }
    } else if (lb == 1) { /* 2-bit: four fields a byte */
        const __m128i m = _mm_set1_epi8(0x03);
        for (; i + 16 <= nbytes; i += 16) {
            __m128i s = _mm_loadu_si128((const __m128i *)(src + i));
            __m128i a = tf_decode(_mm_and_si128(s, m), mode, 2);
            __m128i b = tf_decode(tf_field(s, 2, m), mode, 2);
            __m128i c = tf_decode(tf_field(s, 4, m), mode, 2);
            __m128i d = tf_decode(tf_field(s, 6, m), mode, 2);
            __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
            __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
            uint8_t *o = out + 4 * i;
            TF_STORE(o, _mm_unpacklo_epi16(ab0, cd0));
            TF_STORE(o + 16, _mm_unpackhi_epi16(ab0, cd0));
            TF_STORE(o + 32, _mm_unpacklo_epi16(ab1, cd1));
            TF_STORE(o + 48, _mm_unpackhi_epi16(ab1, cd1));
        }
    } else if (lb == 0) { /* 1-bit: eight fields a byte */
        const __m128i m = _mm_set1_epi8(0x01);
        for (; i + 16 <= nbytes; i += 16) {
            __m128i s = _mm_loadu_si128((const __m128i *)(src + i));
            __m128i f[8];
            for (int k = 0; k < 8; k++)
                f[k] = tf_decode(tf_field(s, k, m), mode, 1);
            __m128i p[8], q[8];
            for (int k = 0; k < 4; k++) { /* bytes: f0 f1 | f2 f3 | ... */
                p[2 * k] = _mm_unpacklo_epi8(f[2 * k], f[2 * k + 1]);
                p[2 * k + 1] = _mm_unpackhi_epi8(f[2 * k], f[2 * k + 1]);
            }
            for (int h = 0; h < 2; h++) { /* 16-bit pairs: f0f1 f2f3 | f4f5 f6f7 */
                q[4 * h] = _mm_unpacklo_epi16(p[4 * h], p[4 * h + 2]);
                q[4 * h + 1] = _mm_unpackhi_epi16(p[4 * h], p[4 * h + 2]);
                q[4 * h + 2] = _mm_unpacklo_epi16(p[4 * h + 1], p[4 * h + 3]);
                q[4 * h + 3] = _mm_unpackhi_epi16(p[4 * h + 1], p[4 * h + 3]);
            }
            uint8_t *o = out + 8 * i;
            for (int k = 0; k < 4; k++) { /* 32-bit halves: f0..f3 then f4..f7 of each byte */
                TF_STORE(o + 32 * k, _mm_unpacklo_epi32(q[k], q[4 + k]));
                TF_STORE(o + 32 * k + 16, _mm_unpackhi_epi32(q[k], q[4 + k]));
            }
        }
    }
    return i;
}

#else /* no SSE2: the table loop does everything */

static ptrdiff_t tf_unpack_sse2(const uint8_t *src, ptrdiff_t nbytes, int mode, int lb,
                                uint8_t *out) {
    (void)src; (void)nbytes; (void)mode; (void)lb; (void)out;
    return 0;
}

#endif
#endif

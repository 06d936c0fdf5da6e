/* AVX-512 pieces shared by the exact table (x86_avx512.c) and the fast
 * one (x86_avx512bf16.c). Include only from files compiled with the
 * AVX-512 flags; everything is static inline so each gets its own copy. */
#ifndef MS_KERNELS_X86_AVX512_COMMON_H
#define MS_KERNELS_X86_AVX512_COMMON_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* The row result: lanes summed in a fixed tree. */
AI float hsum(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* MXFP4 in lane order (x86_avx512.c): lane i of a 128-column block holds
 * columns of group i / 4. */
/* The scales of one block's ng (1..4) groups at sb, lane i taking group
 * i / 4, as floats 2^(s-127) (s == 0: the subnormal 2^-127, s == 255:
 * NaN, as ms_e8m0_to_f32). Lanes of absent groups are zero. */
AI __m512 mx_scales(const uint8_t *sb, int ng)
{
    uint32_t s4 = 0;
    if (ng == 4)
        memcpy(&s4, sb, 4);
    else
        for (int g = 0; g < ng; g++)
            s4 |= (uint32_t)sb[g] << (8 * g);
    const __m512i spread = _mm512_setr_epi32(
        (int)0x80808000, (int)0x80808000, (int)0x80808000, (int)0x80808000, (int)0x80808001,
        (int)0x80808001, (int)0x80808001, (int)0x80808001, (int)0x80808002, (int)0x80808002,
        (int)0x80808002, (int)0x80808002, (int)0x80808003, (int)0x80808003, (int)0x80808003,
        (int)0x80808003);
    __m512i b = _mm512_shuffle_epi8(_mm512_set1_epi32((int)s4), spread);
    __m512i bits = _mm512_slli_epi32(b, 23);
    /* the byte 0 (absent groups read as 0 too) or 255 in s4: rare, fixed
     * in vector registers; the common block costs three instructions */
    uint32_t lo = s4 - 0x01010101u, hi = ~s4 - 0x01010101u;
    if (__builtin_expect(((lo & ~s4) | (hi & s4)) & 0x80808080u, 0)) {
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                                     _mm512_set1_epi32(0x00400000));
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(255)),
                                     _mm512_set1_epi32(0x7FC00000));
        bits = _mm512_maskz_mov_epi32((__mmask16)((1u << (4 * ng)) - 1), bits);
    }
    return _mm512_castsi512_ps(bits);
}

#endif

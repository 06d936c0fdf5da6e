/* The int8 op table for CPUs without AVX512-VNNI (--precision int8 there):
 * AVX2, whose vpmaddubsw + vpmaddwd make the same exact integer sums as
 * vpdpbusd in two instructions (llama.cpp's AVX2 path for Q8_0).
 *
 * The arithmetic is x86_avx512vnni.c's: x quantised per block of 32
 * columns to q = round(x / d), d = max|x| / 127; the MXFP4 weights as
 * 2w + 12 (0..24, one vpshufb per 32 of them) against q; the offset taken
 * back per lane; the integer sums exact (a pair of products at most
 * 2 * 24 * 127, so vpmaddubsw never saturates, nor does the sum of two such
 * vectors); per block the 8 lane sums converted, times the activations'
 * scale, and added with the weights' scale (a power of two, halved) by one
 * FMA. Only MXFP4 products run here; every other format runs the exact
 * AVX2 kernels of this same table. Columns go in panels reduced by a fixed
 * tree (x86_lanes.h), so a (token, row) gets the same bits alone, batched
 * or in any row range.
 *
 * Layout, per block of 64 columns: the 32-byte load of the weights holds
 * column 2j in the low nibble of byte j and 2j+1 in the high one, so lane i
 * of vpmaddwd (bytes 4i..4i+3) sees columns 8i..8i+7, all of group i / 4.
 * x of a block is stored as 64 uint16 (128 bytes): xe[32] the even
 * columns' q, xo[32] the odd ones', the 8 lanes' corrections (int32) and
 * the 8 lanes' activation scales (float, times 1/2). The quantisation is
 * plain C: it runs once per call and token, the rows loop many times. */
#include <immintrin.h>
#include <math.h>

#include "kernels/internal.h"

#define AI static inline __attribute__((always_inline))

enum {
    BLOCK = 64,       /* columns per step */
    PANEL = 1024,     /* columns per panel */
    MAX_NT = 4,       /* tokens sharing decoded weights */
    XBUF = 80 << 10,  /* uint16 of x held per pass: a driver tile */
    ROW_BLOCK = 32,   /* rows sharing a pass over the token groups */
};

/* k (32 or 64) columns of one token's x quantised into one block of the
 * layout above; zero past k. */
static void x_int8(const float *x, int k, uint16_t *out)
{
    int8_t *xe = (int8_t *)out, *xo = xe + 32;
    int32_t *corr = (int32_t *)(xe + 64);
    float *sx = (float *)(xe + 96);
    for (int g = 0; g < 2; g++) {
        const float *v = x + 32 * g;
        float amax = 0.0f;
        int nan = 0;
        for (int c = 0; c < 32 && 32 * g + c < k; c++) {
            nan |= isnan(v[c]);
            amax = fabsf(v[c]) > amax ? fabsf(v[c]) : amax;
        }
        float d = nan ? NAN : amax / 127.0f;
        float inv = amax > 0.0f && !nan ? 127.0f / amax : 0.0f;
        for (int c = 0; c < 32; c++) {
            long q = 32 * g + c < k ? lrintf(v[c] * inv) : 0;
            q = q > 127 ? 127 : q < -128 ? -128 : q;
            int j = 16 * g + c / 2;
            (c % 2 ? xo : xe)[j] = (int8_t)q;
        }
        for (int l = 4 * g; l < 4 * g + 4; l++) {
            sx[l] = 0.5f * d;
            int32_t s = 0;
            for (int b = 0; b < 4; b++)
                s += xe[4 * l + b] + xo[4 * l + b];
            corr[l] = 12 * s;
        }
    }
}

/* Columns [c0, c1) of MXFP4 row r for nt tokens with int8 x (panel
 * relative) at xq[t]; the panel's sums to out[t]. */
AI void row_panel(int nt, const ms_mat *w, int64_t r, const uint16_t *const *xq, int64_t c0,
                  int64_t c1, float *out)
{
    /* 2 * E2M1 + 12, in each 128-bit lane for vpshufb */
    const __m256i tab = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const uint8_t *row = (const uint8_t *)w->w + (w->cols / 2) * r;
    const uint8_t *sb = (const uint8_t *)w->scale + r * (w->cols / 32);
    const int64_t pf = ms_prefetch_bytes.lanes;
    __m256 a[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        a[t] = _mm256_setzero_ps();
    for (int64_t c = c0; c < c1; c += BLOCK) {
        int full = c1 - c >= BLOCK;
        _mm_prefetch((const char *)row + c / 2 + pf, _MM_HINT_T0);
        __m256i q = full ? _mm256_loadu_si256((const __m256i *)(row + c / 2))
                         : _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(row + c / 2)));
        if (!full) /* one group: the high half of the vector is no weight */
            q = _mm256_inserti128_si256(q, _mm_setzero_si128(), 1);
        __m256i wl = _mm256_shuffle_epi8(tab, _mm256_and_si256(q, low4));
        __m256i wh = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
        uint32_t s0 = ms_e8m0_bits(sb[c / 32]), s1 = full ? ms_e8m0_bits(sb[c / 32 + 1]) : 0;
        __m256 sw = _mm256_castsi256_ps(_mm256_setr_epi32((int)s0, (int)s0, (int)s0, (int)s0,
                                                          (int)s1, (int)s1, (int)s1, (int)s1));
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = (const uint8_t *)(xq[t] + (c - c0));
            __m256i p = _mm256_add_epi16(
                _mm256_maddubs_epi16(wl, _mm256_load_si256((const __m256i *)xb)),
                _mm256_maddubs_epi16(wh, _mm256_load_si256((const __m256i *)(xb + 32))));
            __m256i s = _mm256_sub_epi32(_mm256_madd_epi16(p, ones),
                                         _mm256_load_si256((const __m256i *)(xb + 64)));
            __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_load_ps((const float *)(xb + 96)));
            a[t] = _mm256_fmadd_ps(f, sw, a[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) { /* the 8 lanes summed in a fixed tree */
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(a[t]), _mm256_extractf128_ps(a[t], 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        out[t] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    }
}

/* The lane-order loop (x86_lanes.h) over the quantisation and row_panel. */
#define LN_XT uint16_t
#define LN_BLOCK BLOCK
#define LN_PANEL PANEL
#define LN_XBUF XBUF
#define LN_ROW_BLOCK ROW_BLOCK
#define LN_NT 4 /* MAX_NT, as a literal for x86_lanes.h's #if */

AI void ln_transpose(ms_wfmt f, const float *x, int k, uint16_t *out)
{
    (void)f;
    x_int8(x, k, out);
}

AI void ln_row_panel(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const uint16_t *const *xp,
                     int64_t c0, int64_t c1, float *out)
{
    (void)f;
    row_panel(nt, w, r, xp, c0, c1, out);
}

#include "kernels/x86_lanes.h"

LN_ROWS(q8, MS_WFMT_MXFP4)

const ms_kernel_ops *ms_kernels_avx2_int8(void)
{
    /* the avx2 table with the int8 MXFP4 kernel */
    static ms_derived_ops d = {.base = ms_kernels_avx2,
                               .name = "avx2-int8",
                               .rows = {[MS_WFMT_MXFP4] = rows_q8}};
    return ms_kernels_derive(&d);
}

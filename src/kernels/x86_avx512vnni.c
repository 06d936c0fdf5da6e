/* The int8 op table (--precision int8): AVX-512 with AVX512-VNNI, whose
 * vpdpbusd does 64 multiply-adds of bytes per instruction where an FMA
 * does 16 of floats.
 *
 * Not exact, and so opt-in, as llama.cpp computes MXFP4 weights against
 * its Q8_0 activations: per block of 32 columns (an MXFP4 group), x is
 * quantised to int8 with the scale d = max|x| / 127, q = round(x / d). The
 * weights stay exact: every E2M1 value doubled is an integer in [-12, 12].
 * Only MXFP4 products run here; every other format runs the exact AVX-512
 * kernels of this same table. The test suite bounds the kernel against
 * float64 and measures the deviation on the fixtures.
 *
 * vpdpbusd multiplies unsigned bytes by signed ones, so the weights go in
 * as 2w + 12 (0..24, one vpshufb per 64 of them) and the sum of 12 * q over
 * each lane's columns is taken off again (computed once per call, with the
 * same instruction against a vector of 12s). Everything in integers is
 * exact (a lane's sum is at most 8 * 24 * 127); per block the 16 lane sums
 * are converted to float, times the activations' scale, and added with the
 * weights' scale (a power of two, halved for the doubling) by one FMA per
 * lane into the token's accumulator. Columns go in panels, each reduced by
 * the fixed tree of hsum and added in order (x86_lanes.h), so a (token,
 * row) gets the same bits alone, batched or in any row range.
 *
 * Layout, per block of 128 columns: the 64-byte load of the weights holds
 * column 2j in the low nibble of byte j and 2j+1 in the high one, so lane i
 * of vpdpbusd (bytes 4i..4i+3) sees columns 8i..8i+7, all of group i / 4.
 * x of a block is stored as 128 uint16 (256 bytes): xe[64] the even
 * columns' q, xo[64] the odd ones', the 16 lanes' corrections (int32) and
 * the 16 lanes' activation scales (float, times 1/2). */
#include <immintrin.h>

#include "kernels/internal.h"
#include "kernels/x86_avx512_common.h"

enum {
    BLOCK = 128,      /* columns per step */
    PANEL = 1024,     /* columns per panel: x of 4 tokens = 8 KiB */
    MAX_NT = 4,       /* tokens sharing decoded weights */
    XBUF = 80 << 10,  /* uint16 of x held per pass (160 KiB): a driver tile */
    ROW_BLOCK = 32,   /* rows sharing a pass over the token groups */
};

/* k (32, 64, 96 or 128) columns of one token's x quantised into one block
 * of the layout above; zero past k. */
static void x_int8(const float *x, int k, uint16_t *out)
{
    uint8_t *xe = (uint8_t *)out, *xo = xe + 64;
    float d4[4] = {0, 0, 0, 0};
    __m512i q[2];
    for (int h = 0; h < 2; h++) { /* columns 64h .. 64h + 63: groups 2h, 2h + 1 */
        __m512i b[4];
        for (int g = 0; g < 2; g++) {
            int c = 64 * h + 32 * g, left = k - c;
            __mmask16 m0 = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
            __mmask16 m1 = left >= 32   ? 0xFFFF
                           : left <= 16 ? 0
                                        : (__mmask16)((1u << (left - 16)) - 1);
            __m512 v0 = _mm512_maskz_loadu_ps(m0, x + c), v1 = _mm512_maskz_loadu_ps(m1, x + c + 16);
            /* NaN anywhere makes the group's scale NaN, and so its sums */
            __mmask16 nan = _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q);
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            float d = nan ? __builtin_nanf("") : amax / 127.0f;
            float inv = amax > 0.0f && !nan ? 127.0f / amax : 0.0f;
            d4[2 * h + g] = 0.5f * d;
            __m512 s = _mm512_set1_ps(inv);
            b[2 * g] = _mm512_cvtps_epi32(_mm512_mul_ps(v0, s));
            b[2 * g + 1] = _mm512_cvtps_epi32(_mm512_mul_ps(v1, s));
        }
        /* 64 int8 in column order, saturated to [-128, 127] (never reached) */
        q[h] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm512_cvtsepi32_epi8(b[0])), _mm512_cvtsepi32_epi8(b[1]), 1)),
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtsepi32_epi8(b[2])),
                                    _mm512_cvtsepi32_epi8(b[3]), 1),
            1);
    }
    /* the words (q[2j], q[2j+1]) split into their low and high bytes */
    __m256i e0 = _mm512_cvtepi16_epi8(q[0]), e1 = _mm512_cvtepi16_epi8(q[1]);
    __m256i o0 = _mm512_cvtepi16_epi8(_mm512_srai_epi16(q[0], 8));
    __m256i o1 = _mm512_cvtepi16_epi8(_mm512_srai_epi16(q[1], 8));
    __m512i ve = _mm512_inserti64x4(_mm512_castsi256_si512(e0), e1, 1);
    __m512i vo = _mm512_inserti64x4(_mm512_castsi256_si512(o0), o1, 1);
    _mm512_store_si512(xe, ve);
    _mm512_store_si512(xo, vo);
    const __m512i twelve = _mm512_set1_epi8(12);
    __m512i corr = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), twelve, ve),
                                       twelve, vo);
    _mm512_store_si512(xe + 128, corr);
    __m512 sx = _mm512_setr_ps(d4[0], d4[0], d4[0], d4[0], d4[1], d4[1], d4[1], d4[1], d4[2],
                               d4[2], d4[2], d4[2], d4[3], d4[3], d4[3], d4[3]);
    _mm512_store_ps(xe + 192, sx);
}

_Static_assert((int)MAX_NT <= (int)MX_MAX_NT, "mx_panel holds MX_MAX_NT tokens");

/* One block of 128 columns (q: its codes, sw: its lanes' scales) for nt
 * tokens with int8 x at xb[t], summed into a[t] (an mx_block_fn). */
AI void q8_block(int nt, __m512i q, __m512 sw, const uint8_t *const *xb, __m512 *a)
{
    /* 2 * E2M1 + 12, in each 128-bit lane for vpshufb */
    const __m512i tab = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i wl = _mm512_shuffle_epi8(tab, _mm512_and_si512(q, low4));
    __m512i wh = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(q, 4), low4));
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wl, _mm512_load_si512(xb[t]));
        s = _mm512_dpbusd_epi32(s, wh, _mm512_load_si512(xb[t] + 64));
        s = _mm512_sub_epi32(s, _mm512_load_si512(xb[t] + 128));
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_load_ps(xb[t] + 192));
        a[t] = _mm512_fmadd_ps(f, sw, a[t]);
    }
}

/* Columns [c0, c1) of MXFP4 row r for nt tokens with int8 x (panel
 * relative) at xq[t]; the panel's sums to out[t]. */
AI void row_panel(int nt, const ms_mat *w, int64_t r, const uint16_t *const *xq, int64_t c0,
                  int64_t c1, float *out)
{
    const uint8_t *x[MAX_NT];
    __m512 a[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        x[t] = (const uint8_t *)xq[t];
        a[t] = _mm512_setzero_ps();
    }
    mx_panel(q8_block, nt, w, r, x, BLOCK * sizeof(uint16_t), c0, c1, ms_prefetch_bytes.lanes,
             MX_PF_L1, a);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        out[t] = hsum(a[t]);
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

const ms_kernel_ops *ms_kernels_avx512_vnni(void)
{
    /* the avx512 table with the int8 MXFP4 kernel */
    static ms_derived_ops d = {.base = ms_kernels_avx512,
                               .name = "avx512-vnni-int8",
                               .rows = {[MS_WFMT_MXFP4] = rows_q8}};
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") ? ms_kernels_derive(&d) : NULL;
}

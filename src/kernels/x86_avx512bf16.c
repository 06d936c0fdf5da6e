/* The fast op table (--precision fast): AVX-512 with AVX512-BF16, whose
 * vdpbf16ps does 32 multiply-adds per instruction where an FMA does 16.
 *
 * Not exact, and so opt-in: activations are rounded to bf16 (round to
 * nearest even, 8 significant bits) once per product, as llama.cpp does for
 * bf16 weights. Weights stay exact: every BF16 and every MXFP4 value is a
 * bf16 number, and so is every FP8 (e4m3) value before its block scale.
 * vdpbf16ps adds the two exact products of a pair into a lane with float32
 * rounding and flushes subnormal inputs and outputs to zero; for FP8 that
 * drops the e4m3 subnormals (|value| < 2^-6 of the block's scale), which
 * the decode leaves as bf16 subnormals. Formats without a fast kernel here
 * (F32, F16) run the exact AVX-512 kernels of this same table; the engine
 * reports which ran and the test suite measures the deviation on the
 * fixtures.
 *
 * Layouts, per block of 128 columns:
 *  - BF16: four vectors of 32 weights in column order; x in column order.
 *  - MXFP4: the block's 64 bytes read as 32 words, word l holding columns
 *    4l..4l+3 (column 4l+j in bits 4j..4j+3). Shifting the words right by
 *    4j and looking them up with vpermw (which reads the low 5 bits of each
 *    index: the 16 E2M1 values are stored twice) gives the 32 weights of
 *    columns 4l+j, l = 0..31, as bf16; x is laid out to match,
 *    xb[j][l] = bf16(x[4l + j]). Float lane i pairs words 2i and 2i+1,
 *    i.e. columns 8i+j and 8i+4+j, both of group i/4: the group scales
 *    multiply the block's partial sums per lane (a power of two: exact).
 *  - FP8, per 64 columns: the bytes decoded in place as bf16 words equal
 *    to value * 2^-120 (f8_odd and f8_even of x86_avx512_common.h): the odd
 *    columns' words, then the even ones', so word l of each is column 2l+1
 *    or 2l; x laid out the same, as bf16(x * 2^112), and the block scale
 *    times 2^8 folded into each block's partial sums. A token with |x| >=
 *    2^15 (whose scaled x could round to infinity) and scale blocks that
 *    do not tile 64 columns run the exact kernel instead.
 * As in the exact tables, every (token, row) sees the same operations
 * alone, batched or in any row range: panels of MX_PANEL columns, each
 * reduced by a fixed tree and added in order. */
#include <immintrin.h>
#include <math.h>

#include "kernels/internal.h"
#include "kernels/x86_avx512_common.h"

enum {
    BLOCK = 128,       /* columns per step */
    PANEL = 2048,      /* columns per panel: x of 4 tokens = 16 KiB of bf16 */
    MAX_NT = 4,        /* tokens sharing decoded weights */
    XBUF = 128 << 10,  /* bf16 activations held per pass (256 KiB) */
    ROW_BLOCK = 32,    /* rows sharing a pass over the token groups */
    PREFETCH = 4096,   /* bytes ahead in a row's weights */
};

#define F8_X_SCALE 0x1p112f
#define F8_X_LIMIT 0x1p15f

static float f16c_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* k (1..128) floats at x times scale (a power of two) as 128 bf16 in
 * column order, zero past k. */
AI void to_bf16(const float *x, int k, float scale, __m512i out[4])
{
    __m512 v[8];
    for (int i = 0; i < 8; i++) {
        int left = k - 16 * i;
        __mmask16 m = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        v[i] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + 16 * i), _mm512_set1_ps(scale));
    }
    for (int i = 0; i < 4; i++) /* the second source fills the low half */
        out[i] = (__m512i)_mm512_cvtne2ps_pbh(v[2 * i + 1], v[2 * i]);
}

/* BF16 weights: x block as is. */
static void x_bf16(const float *x, int k, uint16_t *xb)
{
    __m512i n[4];
    to_bf16(x, k, 1.0f, n);
    for (int i = 0; i < 4; i++)
        _mm512_store_si512(xb + 32 * i, n[i]);
}

/* MXFP4 x order: word l of row j takes natural word 4l + j, i.e. word
 * 4(l % 8) + j of vector l / 8 (vpermt2w: 0-31 first source, 32-63 second;
 * rows 0-15 from vectors 0-1, 16-31 from vectors 2-3). */
static const uint16_t mx_pick[4][32] __attribute__((aligned(64))) = {
    {0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60},
    {1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61, 1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61},
    {2, 6, 10, 14, 18, 22, 26, 30, 34, 38, 42, 46, 50, 54, 58, 62, 2, 6, 10, 14, 18, 22, 26, 30, 34, 38, 42, 46, 50, 54, 58, 62},
    {3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 51, 55, 59, 63, 3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 51, 55, 59, 63},
};

/* MXFP4 weights: xb[j*32 + l] = bf16(x[4l + j]); two two-source permutes
 * give the low and high 16 words of each row j. */
static void x_mxfp4(const float *x, int k, uint16_t *xb)
{
    __m512i n[4];
    to_bf16(x, k, 1.0f, n);
    for (int j = 0; j < 4; j++) {
        __m512i ix = _mm512_load_si512(mx_pick[j]);
        __m512i lo = _mm512_permutex2var_epi16(n[0], ix, n[1]);
        __m512i hi = _mm512_permutex2var_epi16(n[2], ix, n[3]);
        _mm512_store_si512(xb + 32 * j, _mm512_mask_blend_epi16(0xFFFF0000u, lo, hi));
    }
}

/* FP8 weights: per 64 columns, bf16(2^112 x) of the odd columns, then of
 * the even ones. */
static void x_fp8(const float *x, int k, uint16_t *xb)
{
    __m512i n[4];
    to_bf16(x, k, F8_X_SCALE, n);
    const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36,
                                          34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8,
                                          6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi16(even, _mm512_set1_epi16(1));
    for (int u = 0; u < 2; u++) {
        _mm512_store_si512(xb + 64 * u, _mm512_permutex2var_epi16(n[2 * u], odd, n[2 * u + 1]));
        _mm512_store_si512(xb + 64 * u + 32,
                           _mm512_permutex2var_epi16(n[2 * u], even, n[2 * u + 1]));
    }
}

/* Columns [c0, c1) of FP8 row r (c0 on a block boundary, blocks a multiple
 * of 64 columns) for nt tokens with bf16 x (panel relative) at xb[t]; the
 * panel's sums to out[t]; ahead: see x86_lanes.h (LN_PANEL_AHEAD). */
AI void fp8_row_panel(int nt, const ms_mat *w, int64_t r, const uint16_t *const *xb,
                      int64_t c0, int64_t c1, int64_t ahead, float *out)
{
    const uint8_t *row = (const uint8_t *)w->w + w->cols * r;
    const __m512i keep = _mm512_set1_epi16((short)F8_KEEP);
    const int64_t bc = w->block_cols;
    int64_t si = ms_fp8_scale_row(w, r) + c0 / bc;
    f8_nan seen = f8_nan_none();
    __m512 a0[MAX_NT], a1[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm512_setzero_ps();
    for (int64_t b = c0; b < c1; b += bc, si++) {
        int64_t be = b + bc < c1 ? b + bc : c1;
        __m512 p0[MAX_NT], p1[MAX_NT];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            p0[t] = p1[t] = _mm512_setzero_ps();
        for (int64_t c = b; c < be; c += 64) {
            if (ahead < 0)
                _mm_prefetch((const char *)row + c + PREFETCH, _MM_HINT_T0);
            else if (ahead > 0)
                _mm_prefetch((const char *)row + c + ahead, _MM_HINT_T1);
            __m512i v = be - c >= 64
                            ? _mm512_loadu_si512(row + c)
                            : _mm512_maskz_loadu_epi8((__mmask64)((1ull << (be - c)) - 1), row + c);
            f8_nan_see(&seen, v);
            __m512i odd = _mm512_and_si512(f8_odd(v), keep);
            __m512i even = _mm512_and_si512(f8_even(v), keep);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const uint16_t *xo = xb[t] + (c - c0);
                p0[t] = _mm512_dpbf16_ps(p0[t], (__m512bh)odd, (__m512bh)_mm512_load_si512(xo));
                p1[t] = _mm512_dpbf16_ps(p1[t], (__m512bh)even,
                                         (__m512bh)_mm512_load_si512(xo + 32));
            }
        }
        __m512 s = _mm512_set1_ps(ms_fp8_scale_at(w, si, f16c_to_f32) * 256.0f);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            a0[t] = _mm512_fmadd_ps(p0[t], s, a0[t]);
            a1[t] = _mm512_fmadd_ps(p1[t], s, a1[t]);
        }
    }
    int nan = f8_nan_found(&seen);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        out[t] = nan ? NAN : hsum(_mm512_add_ps(a0[t], a1[t]));
}

_Static_assert((int)MAX_NT <= (int)MX_MAX_NT, "mx_panel holds MX_MAX_NT tokens");

/* One MXFP4 block of 128 columns (q: its codes, s: its lanes' scales) for
 * nt tokens with bf16 x at x[t]: two chains, added, then one scaled FMA
 * into a[t] (an mx_block_fn), as the exact table's block does
 * (x86_avx512.c). */
AI void mx_block(int nt, __m512i q, __m512 s, const uint8_t *const *x, __m512 *a)
{
    __m512i wv[4];
    mx_words(q, wv);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        const uint16_t *xo = (const uint16_t *)x[t];
        __m512 p0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)wv[0],
                                     (__m512bh)_mm512_load_si512(xo));
        __m512 p1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)wv[1],
                                     (__m512bh)_mm512_load_si512(xo + 32));
        p0 = _mm512_dpbf16_ps(p0, (__m512bh)wv[2], (__m512bh)_mm512_load_si512(xo + 64));
        p1 = _mm512_dpbf16_ps(p1, (__m512bh)wv[3], (__m512bh)_mm512_load_si512(xo + 96));
        a[t] = _mm512_fmadd_ps(_mm512_add_ps(p0, p1), s, a[t]);
    }
}

/* Columns [c0, c1) of BF16 row r for nt tokens with bf16 x (panel
 * relative) at xb[t], summed into a0[t], a1[t]; ahead: as fp8_row_panel. */
AI void bf_row_panel(int nt, const ms_mat *w, int64_t r, const uint16_t *const *xb, int64_t c0,
                     int64_t c1, int64_t ahead, __m512 *a0, __m512 *a1)
{
    const uint8_t *row = (const uint8_t *)w->w + 2 * w->cols * r;
    for (int64_t c = c0; c < c1; c += BLOCK) {
        int k = c1 - c < BLOCK ? (int)(c1 - c) : BLOCK;
        __m512i wv[4];
        const uint8_t *p = row + 2 * c;
        if (ahead < 0) {
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                _mm_prefetch((const char *)p + PREFETCH + 64 * i, _MM_HINT_T0);
        } else if (ahead > 0) {
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                _mm_prefetch((const char *)p + ahead + 64 * i, _MM_HINT_T1);
        }
        if (k == BLOCK) {
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                wv[i] = _mm512_loadu_si512(p + 64 * i);
        } else {
            for (int i = 0; i < 4; i++) {
                int left = k - 32 * i;
                __mmask32 m = left >= 32  ? 0xFFFFFFFFu
                              : left <= 0 ? 0
                                          : (__mmask32)((1u << left) - 1);
                wv[i] = _mm512_maskz_loadu_epi16(m, p + 64 * i);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const uint16_t *xo = xb[t] + (c - c0);
            a0[t] = _mm512_dpbf16_ps(a0[t], (__m512bh)wv[0], (__m512bh)_mm512_load_si512(xo));
            a1[t] = _mm512_dpbf16_ps(a1[t], (__m512bh)wv[1], (__m512bh)_mm512_load_si512(xo + 32));
            a0[t] = _mm512_dpbf16_ps(a0[t], (__m512bh)wv[2], (__m512bh)_mm512_load_si512(xo + 64));
            a1[t] = _mm512_dpbf16_ps(a1[t], (__m512bh)wv[3], (__m512bh)_mm512_load_si512(xo + 96));
        }
    }
}

/* bf_row_panel for rows r and r + 1 at once, into a0, a1 and b0, b1: each
 * load of x serves both rows' products, where alone a batch of 4 tokens
 * took 5 loads for 4 vdpbf16ps, bound by Zen 4's one 512-bit load a cycle.
 * Each row's chains take the same operations in the same order as there. */
AI void bf_row_pair(int nt, const ms_mat *w, int64_t r, const uint16_t *const *xb, int64_t c0,
                    int64_t c1, int64_t ahead, __m512 *a0, __m512 *a1, __m512 *b0, __m512 *b1)
{
    const uint8_t *row = (const uint8_t *)w->w + 2 * w->cols * r, *row2 = row + 2 * w->cols;
    for (int64_t c = c0; c < c1; c += BLOCK) {
        int k = c1 - c < BLOCK ? (int)(c1 - c) : BLOCK;
        __m512i wv[4], uv[4];
        const uint8_t *p = row + 2 * c, *p2 = row2 + 2 * c;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            if (ahead < 0) {
                _mm_prefetch((const char *)p + PREFETCH + 64 * i, _MM_HINT_T0);
                _mm_prefetch((const char *)p2 + PREFETCH + 64 * i, _MM_HINT_T0);
            } else if (ahead > 0) {
                _mm_prefetch((const char *)p + ahead + 64 * i, _MM_HINT_T1);
                _mm_prefetch((const char *)p2 + ahead + 64 * i, _MM_HINT_T1);
            }
            int left = k - 32 * i;
            __mmask32 m = left >= 32  ? 0xFFFFFFFFu
                          : left <= 0 ? 0
                                      : (__mmask32)((1u << left) - 1);
            wv[i] = k == BLOCK ? _mm512_loadu_si512(p + 64 * i)
                               : _mm512_maskz_loadu_epi16(m, p + 64 * i);
            uv[i] = k == BLOCK ? _mm512_loadu_si512(p2 + 64 * i)
                               : _mm512_maskz_loadu_epi16(m, p2 + 64 * i);
        }
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const uint16_t *xo = xb[t] + (c - c0);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                __m512i x = _mm512_load_si512(xo + 32 * i);
                __asm__("" : "+v"(x)); /* one load for both rows: GCC would fold it into each */
                __m512 *a = i % 2 ? a1 : a0, *b = i % 2 ? b1 : b0;
                a[t] = _mm512_dpbf16_ps(a[t], (__m512bh)wv[i], (__m512bh)x);
                b[t] = _mm512_dpbf16_ps(b[t], (__m512bh)uv[i], (__m512bh)x);
            }
        }
    }
}

/* Columns [c0, c1) of row r for nt tokens with bf16 x (panel relative) at
 * xb[t]; the panel's sums to out[t]; ahead: as fp8_row_panel. */
AI void row_panel(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const uint16_t *const *xb,
                  int64_t c0, int64_t c1, int64_t ahead, float *out)
{
    __m512 a0[MAX_NT], a1[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm512_setzero_ps();
    if (f == MS_WFMT_MXFP4) {
        const uint8_t *x[MAX_NT];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            x[t] = (const uint8_t *)xb[t];
        mx_panel(mx_block, nt, w, r, x, BLOCK * sizeof(uint16_t), c0, c1,
                 ahead < 0 ? PREFETCH : ahead, mx_pf_how(ahead), a0);
    } else
        bf_row_panel(nt, w, r, xb, c0, c1, ahead, a0, a1);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        out[t] = hsum(_mm512_add_ps(a0[t], a1[t]));
}

/* The lane-order loop (x86_lanes.h) over the bf16 conversions and
 * row_panel. */
#define LN_XT uint16_t
#define LN_BLOCK BLOCK
#define LN_PANEL PANEL
#define LN_XBUF XBUF
#define LN_ROW_BLOCK ROW_BLOCK
#define LN_NT 4 /* MAX_NT, as a literal for x86_lanes.h's #if */

AI void ln_transpose(ms_wfmt f, const float *x, int k, uint16_t *out)
{
    if (f == MS_WFMT_MXFP4)
        x_mxfp4(x, k, out);
    else if (f == MS_WFMT_FP8_BLOCK)
        x_fp8(x, k, out);
    else
        x_bf16(x, k, out);
}

#define LN_PANEL_AHEAD 1 /* the row panels take the prefetch distance (x86_lanes.h) */
AI int ln_ahead_in_panel(ms_wfmt f)
{
    (void)f;
    return 1;
}
AI void ln_row_panel(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const uint16_t *const *xp,
                     int64_t c0, int64_t c1, int64_t ahead, float *out)
{
    if (f == MS_WFMT_FP8_BLOCK)
        fp8_row_panel(nt, w, r, xp, c0, c1, ahead, out);
    else
        row_panel(f, nt, w, r, xp, c0, c1, ahead, out);
}

/* BF16 rows go in pairs (bf_row_pair): the other formats' blocks are not
 * bound by x's loads. */
#define LN_ROW_PAIR 1
AI int ln_pairs(ms_wfmt f)
{
    return f == MS_WFMT_BF16;
}
AI void ln_row_pair(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const uint16_t *const *xp,
                    int64_t c0, int64_t c1, int64_t ahead, float *out, float *out2)
{
    (void)f; /* BF16: the one format ln_pairs names */
    __m512 a0[MAX_NT], a1[MAX_NT], b0[MAX_NT], b1[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        a0[t] = a1[t] = b0[t] = b1[t] = _mm512_setzero_ps();
    bf_row_pair(nt, w, r, xp, c0, c1, ahead, a0, a1, b0, b1);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        out[t] = hsum(_mm512_add_ps(a0[t], a1[t]));
        out2[t] = hsum(_mm512_add_ps(b0[t], b1[t]));
    }
}

#include "kernels/x86_lanes.h"

LN_ROWS(bf, MS_WFMT_BF16)
LN_ROWS(mx, MS_WFMT_MXFP4)
LN_ROWS(f8, MS_WFMT_FP8_BLOCK)

#include "kernels/x86_attn_bf16.h"

/* FP8: the fast kernel for tokens whose x fits its scaling, the exact one
 * for the others and for scale blocks that do not tile 64 columns; chosen
 * per token (runs of tokens alike together), so a token's bits never
 * depend on the batch. */
static void rows_fp8_fast(const ms_mat *w, const float *X, int n, int64_t ldx, float *Y,
                          int64_t ldy, int64_t r0, int64_t r1)
{
    ms_rows_fn exact = ms_kernels_avx512()->rows[MS_WFMT_FP8_BLOCK];
    if (ms_fp8_blocks_tile(w, 64, PANEL))
        ms_rows_by_token(rows_f8, exact, x_below, F8_X_LIMIT, w, X, n, ldx, Y, ldy, r0, r1);
    else
        exact(w, X, n, ldx, Y, ldy, r0, r1);
}

const ms_kernel_ops *ms_kernels_avx512_bf16(void)
{
    /* the avx512 table with the three fast kernels and the attention step
     * over bf16 caches */
    static ms_derived_ops d = {.base = ms_kernels_avx512,
                               .name = "avx512-bf16-fast",
                               .rows = {[MS_WFMT_BF16] = rows_bf,
                                        [MS_WFMT_MXFP4] = rows_mx,
                                        [MS_WFMT_FP8_BLOCK] = rows_fp8_fast},
                               .attn = attn_fast};
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") ? ms_kernels_derive(&d) : NULL;
}

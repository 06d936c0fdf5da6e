/* The AVX-512 op table (F, BW, VL, DQ). Compiled with its own -m flags; the
 * dispatcher only calls into it once ms_kernels_avx512() said the CPU can.
 *
 * F32 and F16 run the shared skeleton of x86_rows.h (chunks of 32
 * columns, up to 4 tokens sharing each decoded chunk) over this file's
 * 512-bit primitives and decoders; BF16, MXFP4 and FP8 run the lane-order
 * loop of x86_lanes.h (below), whose decodes need no cross-lane shuffles:
 * on Zen 4 a variable shuffle (vpmovzxwd, vpermps) takes the FMA pipes for
 * about half a cycle, a shift or an AND does not. FP8 keeps the column
 * order for tokens whose activations the byte-lane order cannot scale and
 * for scale blocks that do not tile its units.
 *
 * Decodes are exact. FP8 in column order: e4m3 bits moved into a half
 * float equal value * 2^-8 (subnormals included), widened by vcvtph2ps,
 * NaN codes patched to a half NaN, and the 2^8 folded into the block scale
 * (exact for scales below 2^120; products w * 2^-8 * x below 2^-126 lose
 * bits); in byte-lane order, see there. MXFP4: the 16 E2M1 values
 * looked up as bf16 words (vpermw) and widened to floats in lane order,
 * per-lane partial sums scaled by the groups' powers of two (exact;
 * 6 * 2^127 overflows to inf as in ms_mat_get). */
#include <immintrin.h>

#include "kernels/internal.h"
#include "kernels/x86_avx512_common.h"


enum {
    MAX_NT = 4,               /* tokens sharing a decoded chunk */
    PANEL_X_BYTES = 16 << 10, /* x of one token group per column panel */
    ROW_BLOCK = 32,           /* rows sharing a pass over the token groups */
};

/* 32 decoded weights: columns c..c+15 and c+16..c+31. */
typedef struct w32 {
    __m512 lo, hi;
} w32;

static float f16c_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}

AI __m512 bf16x16(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 32 e4m3 bytes -> 32 halves equal to value * 2^-8: the sign-extended
 * byte masked to sign (bit 8) and eeeemmm (bits 6..0), shifted left by 7,
 * is s.0eeee.mmm0000000. The shift is merge-masked so that the NaN codes
 * (eeeemmm all ones) take a half NaN instead, at no extra instruction. */
AI w32 fp8x32(__m256i raw)
{
    const __m256i low7 = _mm256_set1_epi8(0x7F);
    __mmask32 num = _mm256_cmpneq_epi8_mask(_mm256_and_si256(raw, low7), low7);
    __m512i a = _mm512_and_si512(_mm512_cvtepi8_epi16(raw), _mm512_set1_epi16(0x017F));
    __m512i h = _mm512_mask_slli_epi16(_mm512_set1_epi16(0x7E00), num, a, 7);
    w32 w = {_mm512_cvtph_ps(_mm512_castsi512_si256(h)),
             _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1))};
    return w;
}

/* Decodes the full chunk at p (MXFP4 never comes here; BF16 only from
 * the attention's widening: its products run in pair order). */
AI w32 decode(ms_wfmt f, const uint8_t *p)
{
    w32 w;
    switch (f) {
    case MS_WFMT_F32:
        w.lo = _mm512_loadu_ps(p);
        w.hi = _mm512_loadu_ps(p + 64);
        return w;
    case MS_WFMT_BF16:
        w.lo = bf16x16(_mm256_loadu_si256((const __m256i *)p));
        w.hi = bf16x16(_mm256_loadu_si256((const __m256i *)(p + 32)));
        return w;
    case MS_WFMT_F16:
        w.lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        w.hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
        return w;
    default: /* FP8_BLOCK */
        return fp8x32(_mm256_loadu_si256((const __m256i *)p));
    }
}

/* Decodes the first k (1..31) columns of the chunk at p with masked loads:
 * the other lanes read as zero and never touch memory. */
AI w32 decode_part(ms_wfmt f, const uint8_t *p, int k)
{
    __mmask32 m = (__mmask32)((1ull << k) - 1);
    __mmask16 m0 = (__mmask16)m, m1 = (__mmask16)(m >> 16);
    w32 w;
    switch (f) {
    case MS_WFMT_F32:
        w.lo = _mm512_maskz_loadu_ps(m0, p);
        w.hi = _mm512_maskz_loadu_ps(m1, p + 64);
        return w;
    case MS_WFMT_BF16:
        w.lo = bf16x16(_mm256_maskz_loadu_epi16(m0, p));
        w.hi = bf16x16(_mm256_maskz_loadu_epi16(m1, p + 32));
        return w;
    case MS_WFMT_F16:
        w.lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, p));
        w.hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, p + 32));
        return w;
    default: /* FP8_BLOCK */
        return fp8x32(_mm256_maskz_loadu_epi8(m, p));
    }
}

#define XV __m512
#define XW 16
#define X_MAX_NT MAX_NT
#define X_PREFETCH(f, n)                                                                   \
    ((n) == 1 && (f) != MS_WFMT_FP8_BLOCK ? ms_prefetch_bytes.near : ms_prefetch_bytes.far)
#define X_PANEL_X_BYTES PANEL_X_BYTES
#define X_ROW_BLOCK ROW_BLOCK
#define X_GROUP(f) MAX_NT
typedef w32 xw2;

AI __m512 xv_zero(void) { return _mm512_setzero_ps(); }
AI __m512 xv_fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
AI __m512 xv_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
AI __m512 xv_set1(float f) { return _mm512_set1_ps(f); }
AI __m512 xv_loadu(const float *p) { return _mm512_loadu_ps(p); }
AI __m512 xv_load_below(const float *p, int k)
{
    __mmask16 m = k >= 16 ? 0xFFFF : k <= 0 ? 0 : (__mmask16)((1u << k) - 1);
    return _mm512_maskz_loadu_ps(m, p);
}
AI float xv_hsum(__m512 v) { return hsum(v); }
AI w32 x_decode(ms_wfmt f, const uint8_t *p) { return decode(f, p); }
AI w32 x_decode_part(ms_wfmt f, const uint8_t *p, int k) { return decode_part(f, p, k); }

/* The block scale with the decode's 2^8 (exact). */
AI float x_scale(const ms_mat *w, int64_t i)
{
    return ms_fp8_scale_at(w, i, f16c_to_f32) * 256.0f;
}

#include "kernels/x86_rows.h"

X_ROWS(f32, MS_WFMT_F32)
X_ROWS(f16, MS_WFMT_F16)
X_ROWS(fp8, MS_WFMT_FP8_BLOCK)

/* ---- attention (x86_attn.h) ---------------------------------------------- */
AI __m512 xv_load_bf16_below(const uint16_t *p, int k)
{
    return bf16x16(_mm256_maskz_loadu_epi16(lanes_in(0, k), p));
}
/* 16 dwords of two bf16 each (the low word the even element) as floats */
AI void xv_load_pairs(const uint32_t *p, __m512 *even, __m512 *odd)
{
    __m512i v = _mm512_loadu_si512(p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
}
AI __m512 xv_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
AI __m512 xv_sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
AI __m512 xv_max(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
AI void xv_storeu(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
AI void xv_store_below(float *p, int k, __m512 v) { _mm512_mask_storeu_ps(p, lanes_in(0, k), v); }
AI __m512 xv_keep(__m512 v, int lo, int hi, float fill)
{
    return _mm512_mask_mov_ps(_mm512_set1_ps(fill), lanes_in(lo, hi), v);
}
AI float xv_hmax(__m512 v) { return _mm512_reduce_max_ps(v); }
AI __m512 xv_exp(__m512 v) { return _ZGVeN16v_expf(v); }

AI void xv_transpose(__m512 *r) { tr16(r); }
#define X_FP8_UNIT 256.0f

#include "kernels/x86_attn.h"

/* ---- MXFP4 in lane order ------------------------------------------------
 * A 64-byte load holds 128 columns (four groups of 32): dword lane i holds
 * columns 8i..8i+7, column 8i+j in bits 4j..4j+3. mx_words looks the
 * codes up as 32 bf16 words at a time (word l: columns 4l+m), and a shift
 * or an AND widens each word half of lane i to a float: column 8i+j for
 * j = 0..7, no byte shuffles. The price is that x must be in the same
 * order: x is transposed once per call, per 128 columns, into
 * xp[j][i] = x[8i + j] (zero past the last column).
 *
 * Lane i belongs to group i / 4, so the group scales multiply partial sums:
 * for each block, p = sum_j w_j * xp_j (unscaled codes) in two chains,
 * added, then acc = fma(p, S, acc) with S the lanes' scales: one scaled FMA
 * a block, where one per chain had been a fifth of a batch's FMA-pipe work
 * on Zen 4 (docs/perf.md, "Batches on Zen 4"). S is a power of two, so
 * p * S is exact and this equals scaling each weight (as ms_mat_get does)
 * except where p * S under- or overflows. Columns go in panels of
 * MX_PANEL; each panel's sum is reduced by the fixed tree of hsum and
 * added to the row's result in panel order. Neither the panels nor the
 * token groups depend on the batch, so a (token, row) gets the same bits
 * alone or batched, in any row range. */
enum { MX_BLOCK = 128, MX_PANEL = 1024 };

/* xp[j*16 + i] = x[8i + j] for one block of k (32, 64, 96 or 128) columns;
 * lanes past k are zero. A 16x8 -> 8x16 transpose: pairs of source vectors
 * gathered by vpermt2ps, then 128-bit blocks regrouped by vshuff32x4. */
AI void mx_transpose(const float *x, int k, float *xp)
{
    __m512 X[8];
    for (int v = 0; v < 8; v++) {
        int left = k - 16 * v;
        __mmask16 m = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        X[v] = _mm512_maskz_loadu_ps(m, x + 16 * v);
    }
    /* R[a][h] lane 4q+t: t = 0: A[j], 1: A[8+j], 2: B[j], 3: B[8+j] with
     * A, B = X[2a], X[2a+1] and j = 4h + q */
    const __m512i ih0 = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11,
                                          19, 27);
    const __m512i ih1 = _mm512_add_epi32(ih0, _mm512_set1_epi32(4));
    __m512 R[4][2];
    for (int a = 0; a < 4; a++) {
        R[a][0] = _mm512_permutex2var_ps(X[2 * a], ih0, X[2 * a + 1]);
        R[a][1] = _mm512_permutex2var_ps(X[2 * a], ih1, X[2 * a + 1]);
    }
    /* xp row j = block q of R[0][h], R[1][h], R[2][h], R[3][h] */
    for (int h = 0; h < 2; h++) {
        __m512 s01 = _mm512_shuffle_f32x4(R[0][h], R[1][h], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 u01 = _mm512_shuffle_f32x4(R[2][h], R[3][h], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 s23 = _mm512_shuffle_f32x4(R[0][h], R[1][h], _MM_SHUFFLE(3, 2, 3, 2));
        __m512 u23 = _mm512_shuffle_f32x4(R[2][h], R[3][h], _MM_SHUFFLE(3, 2, 3, 2));
        float *o = xp + 16 * 4 * h;
        _mm512_store_ps(o, _mm512_shuffle_f32x4(s01, u01, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_store_ps(o + 16, _mm512_shuffle_f32x4(s01, u01, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_store_ps(o + 32, _mm512_shuffle_f32x4(s23, u23, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_store_ps(o + 48, _mm512_shuffle_f32x4(s23, u23, _MM_SHUFFLE(3, 1, 3, 1)));
    }
}

_Static_assert((int)MAX_NT <= (int)MX_MAX_NT, "mx_panel holds MX_MAX_NT tokens");

/* Weight j (0..7) of each dword lane of a block as floats: columns 8i+j
 * of lane i (the order x is transposed to), widened from the words of
 * mx_words, column 8i+j in the low word of wv[j] (j < 4) or the high word
 * of wv[j - 4]. The widening is a shift or an AND, which leave the FMA
 * pipes alone. */
AI __m512 mx_lane_floats(const __m512i *wv, int j)
{
    return _mm512_castsi512_ps(j < 4 ? _mm512_slli_epi32(wv[j], 16)
                                     : _mm512_and_si512(wv[j - 4],
                                                        _mm512_set1_epi32((int)0xFFFF0000)));
}

/* One block of 128 columns (q: its codes, s: its lanes' scales) for nt
 * tokens, x at x[t] (floats): two chains of products, added and scaled
 * into a[t] (an mx_block_fn). The E2M1 values come as bf16 words, four
 * vpermw per block (mx_words), where a vpermps per 16 weights had needed
 * eight: the shuffles share a pipe with the FMAs. */
AI void mx_block(int nt, __m512i q, __m512 s, const uint8_t *const *x, __m512 *a)
{
    const float *xo[MAX_NT];
    __m512 p0[MAX_NT], p1[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        xo[t] = (const float *)x[t];
    __m512i wv[4];
    mx_words(q, wv);
    __m512 w0 = mx_lane_floats(wv, 0), w1 = mx_lane_floats(wv, 1);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        p0[t] = _mm512_mul_ps(w0, _mm512_load_ps(xo[t]));
        p1[t] = _mm512_mul_ps(w1, _mm512_load_ps(xo[t] + 16));
    }
#pragma GCC unroll 3
    for (int j = 2; j < 8; j += 2) {
        w0 = mx_lane_floats(wv, j);
        w1 = mx_lane_floats(wv, j + 1);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            p0[t] = _mm512_fmadd_ps(w0, _mm512_load_ps(xo[t] + 16 * j), p0[t]);
            p1[t] = _mm512_fmadd_ps(w1, _mm512_load_ps(xo[t] + 16 * j + 16), p1[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        a[t] = _mm512_fmadd_ps(_mm512_add_ps(p0[t], p1[t]), s, a[t]);
}

/* Columns [c0, c1) of row r for nt tokens whose transposed x (panel
 * relative, MX_BLOCK floats per block) is at xp[t]; returns the panel's
 * sums through out[t]. ahead: see ln_row_panel. */
AI void mx_row_panel(int nt, const ms_mat *w, int64_t r, const float *const *xp, int64_t c0,
                     int64_t c1, int64_t ahead, float *out)
{
    const uint8_t *x[MAX_NT];
    __m512 a[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        x[t] = (const uint8_t *)xp[t];
        a[t] = _mm512_setzero_ps();
    }
    mx_panel(mx_block, nt, w, r, x, MX_BLOCK * sizeof(float), c0, c1,
             ahead < 0 ? ms_prefetch_bytes.lanes : ahead, mx_pf_how(ahead), a);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        out[t] = hsum(a[t]);
}

/* ---- BF16 in pair order ---------------------------------------------------
 * A 64-byte load holds 32 columns, dword lane i columns 2i (low half) and
 * 2i+1 (high half): a shift left by 16 makes the even columns' floats, an
 * AND of the high halves the odd ones, two instructions that leave the FMA
 * pipes alone (vpmovzxwd + shift, the column-order decode, cost a Zen 4
 * core a third of its BF16 matvec). x is laid out to match once per call:
 * per 32 columns, the 16 even ones, then the 16 odd ones (zero past the
 * last column). Each (token, row) sums even columns into one accumulator
 * and odd ones into another, in column order, then hsum(a0 + a1) per
 * panel. */

/* k (1..128) columns of x in pair order: xp[32u + i] = x[32u + 2i],
 * xp[32u + 16 + i] = x[32u + 2i + 1]; zero past k. */
AI void bf_transpose(const float *x, int k, float *xp)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int u = 0; u < 4; u++) {
        int l0 = k - 32 * u, l1 = l0 - 16;
        __mmask16 m0 = l0 >= 16 ? 0xFFFF : l0 <= 0 ? 0 : (__mmask16)((1u << l0) - 1);
        __mmask16 m1 = l1 >= 16 ? 0xFFFF : l1 <= 0 ? 0 : (__mmask16)((1u << l1) - 1);
        __m512 a = _mm512_maskz_loadu_ps(m0, x + 32 * u);
        __m512 b = _mm512_maskz_loadu_ps(m1, x + 32 * u + 16);
        _mm512_store_ps(xp + 32 * u, _mm512_permutex2var_ps(a, even, b));
        _mm512_store_ps(xp + 32 * u + 16, _mm512_permutex2var_ps(a, odd, b));
    }
}

/* One 64-byte load of BF16 pairs into the nt tokens' even and odd chains. */
AI void bf_chunk(int nt, __m512i v, const float *const *xp, int64_t off, __m512 *a0,
                 __m512 *a1)
{
    const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
    /* v in a register: GCC would fold the load into both the shift and the
     * AND, a second load that a batch, bound by Zen 4's one 512-bit load a
     * cycle, paid 10% of its prefill for */
    __asm__("" : "+v"(v));
    __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(v, high));
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        a0[t] = _mm512_fmadd_ps(lo, _mm512_load_ps(xp[t] + off), a0[t]);
        a1[t] = _mm512_fmadd_ps(hi, _mm512_load_ps(xp[t] + off + 16), a1[t]);
    }
}

/* Columns [c0, c1) of BF16 row r for nt tokens with pair-order x (panel
 * relative) at xp[t]; the panel's sums to out[t]; ahead: see ln_row_panel.
 * The loop over whole chunks carries neither the tail's test nor, where
 * the distance is 0 (Zen 4's matvec), a prefetch: 8 instructions a chunk
 * instead of 13, worth 2-7% of a one-thread matvec from memory on Zen 4
 * (docs/perf.md, "Zen 4"). */
AI void bf_row_panel(int nt, const ms_mat *w, int64_t r, const float *const *xp, int64_t c0,
                     int64_t c1, int64_t ahead, float *out)
{
    const uint16_t *row = (const uint16_t *)w->w + w->cols * r;
    const int64_t pf = ahead >= 0 ? 0 : nt == 1 ? ms_prefetch_bytes.near : ms_prefetch_bytes.far;
    const int64_t whole = c0 + (c1 - c0) / 32 * 32;
    __m512 a0[MAX_NT], a1[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm512_setzero_ps();
    if (ahead > 0) {
        for (int64_t c = c0; c < whole; c += 32) {
            _mm_prefetch((const char *)(row + c) + ahead, _MM_HINT_T1);
            bf_chunk(nt, _mm512_loadu_si512(row + c), xp, c - c0, a0, a1);
        }
    } else if (pf) {
        for (int64_t c = c0; c < whole; c += 32) {
            _mm_prefetch((const char *)(row + c) + pf, _MM_HINT_T0);
            bf_chunk(nt, _mm512_loadu_si512(row + c), xp, c - c0, a0, a1);
        }
    } else {
        for (int64_t c = c0; c < whole; c += 32)
            bf_chunk(nt, _mm512_loadu_si512(row + c), xp, c - c0, a0, a1);
    }
    if (whole < c1)
        bf_chunk(nt, _mm512_maskz_loadu_epi16((__mmask32)((1u << (c1 - whole)) - 1), row + whole),
                 xp, whole - c0, a0, a1);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        out[t] = hsum(_mm512_add_ps(a0[t], a1[t]));
}

/* One 64-byte load of BF16 pairs from each of two rows into the nt tokens'
 * chains of both: each x load serves two rows' FMAs, where bf_chunk's
 * serves one, and a batch of 4 tokens, bound by Zen 4's one 512-bit load a
 * cycle at 9 loads for 8 FMAs, becomes 10 loads for 16. Each row's chains
 * take the same operations in the same order as in bf_chunk. */
AI void bf_chunk2(int nt, __m512i v, __m512i u, const float *const *xp, int64_t off,
                  __m512 *a0, __m512 *a1, __m512 *b0, __m512 *b1)
{
    const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
    __asm__("" : "+v"(v), "+v"(u)); /* one load each: see bf_chunk */
    __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    __m512 lo2 = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    __m512 hi2 = _mm512_castsi512_ps(_mm512_and_si512(u, high));
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        __m512 xe = _mm512_load_ps(xp[t] + off), xo = _mm512_load_ps(xp[t] + off + 16);
        __asm__("" : "+v"(xe), "+v"(xo)); /* else GCC folds each load into both FMAs */
        a0[t] = _mm512_fmadd_ps(lo, xe, a0[t]);
        a1[t] = _mm512_fmadd_ps(hi, xo, a1[t]);
        b0[t] = _mm512_fmadd_ps(lo2, xe, b0[t]);
        b1[t] = _mm512_fmadd_ps(hi2, xo, b1[t]);
    }
}

/* bf_row_panel for rows r and r + 1 at once (out[t], out2[t]): the same
 * bits as two calls, and the ahead/prefetch of each row as there. */
AI void bf_row_pair(int nt, const ms_mat *w, int64_t r, const float *const *xp, int64_t c0,
                    int64_t c1, int64_t ahead, float *out, float *out2)
{
    const uint16_t *row = (const uint16_t *)w->w + w->cols * r, *row2 = row + w->cols;
    const int64_t pf = ahead >= 0 ? 0 : nt == 1 ? ms_prefetch_bytes.near : ms_prefetch_bytes.far;
    const int64_t whole = c0 + (c1 - c0) / 32 * 32;
    __m512 a0[MAX_NT], a1[MAX_NT], b0[MAX_NT], b1[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        a0[t] = a1[t] = b0[t] = b1[t] = _mm512_setzero_ps();
#define BF_PAIR(c) bf_chunk2(nt, _mm512_loadu_si512(row + (c)), _mm512_loadu_si512(row2 + (c)), \
                             xp, (c) - c0, a0, a1, b0, b1)
    if (ahead > 0) {
        for (int64_t c = c0; c < whole; c += 32) {
            _mm_prefetch((const char *)(row + c) + ahead, _MM_HINT_T1);
            _mm_prefetch((const char *)(row2 + c) + ahead, _MM_HINT_T1);
            BF_PAIR(c);
        }
    } else if (pf) {
        for (int64_t c = c0; c < whole; c += 32) {
            _mm_prefetch((const char *)(row + c) + pf, _MM_HINT_T0);
            _mm_prefetch((const char *)(row2 + c) + pf, _MM_HINT_T0);
            BF_PAIR(c);
        }
    } else {
        for (int64_t c = c0; c < whole; c += 32)
            BF_PAIR(c);
    }
#undef BF_PAIR
    if (whole < c1) {
        __mmask32 m = (__mmask32)((1u << (c1 - whole)) - 1);
        bf_chunk2(nt, _mm512_maskz_loadu_epi16(m, row + whole),
                  _mm512_maskz_loadu_epi16(m, row2 + whole), xp, whole - c0, a0, a1, b0, b1);
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        out[t] = hsum(_mm512_add_ps(a0[t], a1[t]));
        out2[t] = hsum(_mm512_add_ps(b0[t], b1[t]));
    }
}

/* ---- FP8 in byte-lane order ----------------------------------------------
 * A 64-byte load holds 64 columns, dword lane i columns 4i..4i+3 (byte j
 * = column 4i+j). f8_odd and f8_even (x86_avx512_common.h) put each byte
 * where, masked, it is a float equal to value * 2^-120, subnormals
 * included: five shifts and four ANDs per 64 weights, none of them a
 * shuffle or a conversion (the column order's vpmovsxbw and two vcvtph2ps
 * per 32 weights ran Zen 4 at a third of its bandwidth). Intel cores take
 * a microcode assist for each product with a subnormal factor, so there
 * the column order runs instead (ms_fp8_lanes, dispatch.c).
 *
 * Products of two such factors would underflow, so x is scaled by 2^112
 * when it is transposed, which leaves each product w * x * 2^-8 as the
 * column order's decode does, and the block scale takes the 2^8 back (the
 * same X_FP8_UNIT). The scaling is exact while |x| < 2^16; a token with a
 * larger activation takes the column-order kernel instead, alone (each
 * token's result depends only on its own x, batched or not). A NaN code
 * makes the panel's sum NaN, as a NaN product would.
 *
 * The order of x per 64 columns: x[4i+3], x[4i+1], x[4i+2], x[4i] (i =
 * 0..15), the lanes of the four decoded vectors. Each (token, row) sums
 * them into four chains per scale block, adds the four ((p0 + p2) + (p1 +
 * p3)), and takes acc = fma(sum, scale, acc): one FMA a block where a
 * scaled FMA per chain had taken a third of a batch's FMA-pipe work on Zen
 * 4 (the additions run on the other pipes). */
enum { F8_UNIT = 64 };
#define F8_X_SCALE 0x1p112f
#define F8_X_LIMIT 0x1p16f

/* k (1..128) columns of x in byte-lane order, scaled by 2^112; zero past
 * k. */
AI void f8_transpose(const float *x, int k, float *xp)
{
    const __m512i i3 = _mm512_setr_epi32(3, 7, 11, 15, 19, 23, 27, 31, 3, 7, 11, 15, 19, 23,
                                         27, 31);
    const __m512 big = _mm512_set1_ps(F8_X_SCALE);
    static const int byte_of[4] = {3, 1, 2, 0};
    for (int u = 0; u < 2; u++) {
        __m512 X[4];
        for (int v = 0; v < 4; v++) {
            int left = k - 64 * u - 16 * v;
            __mmask16 m = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
            X[v] = _mm512_maskz_loadu_ps(m, x + 64 * u + 16 * v);
        }
        for (int q = 0; q < 4; q++) {
            __m512i idx = _mm512_sub_epi32(i3, _mm512_set1_epi32(3 - byte_of[q]));
            __m512 lo = _mm512_permutex2var_ps(X[0], idx, X[1]);
            __m512 hi = _mm512_permutex2var_ps(X[2], idx, X[3]);
            __m512 o = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
            _mm512_store_ps(xp + 64 * u + 16 * q, _mm512_mul_ps(o, big));
        }
    }
}

/* Columns [c0, c1) of FP8 row r (c0 on a block boundary, blocks a multiple
 * of F8_UNIT columns) for nt tokens with byte-lane x (panel relative) at
 * xp[t]; the panel's sums to out[t]. */
AI void f8_row_panel(int nt, const ms_mat *w, int64_t r, const float *const *xp, int64_t c0,
                     int64_t c1, float *out)
{
    const uint8_t *row = (const uint8_t *)w->w + w->cols * r;
    const __m512i keep = _mm512_set1_epi32((int)(F8_KEEP << 16));
    const int64_t bc = w->block_cols, pf = ms_prefetch_bytes.far;
    int64_t si = ms_fp8_scale_row(w, r) + c0 / bc;
    f8_nan seen = f8_nan_none();
    __m512 a[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        a[t] = _mm512_setzero_ps();
    for (int64_t b = c0; b < c1; b += bc, si++) {
        int64_t be = b + bc < c1 ? b + bc : c1;
        __m512 p0[MAX_NT], p1[MAX_NT], p2[MAX_NT], p3[MAX_NT];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            p0[t] = p1[t] = p2[t] = p3[t] = _mm512_setzero_ps();
        for (int64_t c = b; c < be; c += F8_UNIT) {
            _mm_prefetch((const char *)row + c + pf, _MM_HINT_T0);
            __m512i v = be - c >= F8_UNIT
                            ? _mm512_loadu_si512(row + c)
                            : _mm512_maskz_loadu_epi8((__mmask64)((1ull << (be - c)) - 1), row + c);
            f8_nan_see(&seen, v);
            __m512i h31 = f8_odd(v), h20 = f8_even(v);
            __m512 d3 = _mm512_castsi512_ps(_mm512_and_si512(h31, keep));
            __m512 d1 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(h31, 16), keep));
            __m512 d2 = _mm512_castsi512_ps(_mm512_and_si512(h20, keep));
            __m512 d0 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(h20, 16), keep));
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const float *xo = xp[t] + (c - c0);
                p0[t] = _mm512_fmadd_ps(d3, _mm512_load_ps(xo), p0[t]);
                p1[t] = _mm512_fmadd_ps(d1, _mm512_load_ps(xo + 16), p1[t]);
                p2[t] = _mm512_fmadd_ps(d2, _mm512_load_ps(xo + 32), p2[t]);
                p3[t] = _mm512_fmadd_ps(d0, _mm512_load_ps(xo + 48), p3[t]);
            }
        }
        __m512 s = _mm512_set1_ps(ms_fp8_scale_at(w, si, f16c_to_f32) * X_FP8_UNIT);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            __m512 sum = _mm512_add_ps(_mm512_add_ps(p0[t], p2[t]), _mm512_add_ps(p1[t], p3[t]));
            a[t] = _mm512_fmadd_ps(sum, s, a[t]);
        }
    }
    int nan = f8_nan_found(&seen);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        out[t] = nan ? NAN : hsum(a[t]);
}

/* The lane-order loop (x86_lanes.h) over the three formats' transposes and
 * row panels. */
#define LN_XT float
#define LN_BLOCK MX_BLOCK
#define LN_PANEL MX_PANEL
#define LN_XBUF (80 << 10) /* a token tile of the driver (256 KiB of x) and its padding */
#define LN_ROW_BLOCK 32
#define LN_NT 4 /* MAX_NT, as a literal for x86_lanes.h's #if */

AI void ln_transpose(ms_wfmt f, const float *x, int k, float *out)
{
    if (f == MS_WFMT_MXFP4)
        mx_transpose(x, k, out);
    else if (f == MS_WFMT_FP8_BLOCK)
        f8_transpose(x, k, out);
    else
        bf_transpose(x, k, out);
}

/* The row panels take the prefetch distance (x86_lanes.h), but FP8's:
 * asked beside its loads, its 4-token products at 2880 columns measured
 * -10% to +2% in six runs of kernels_ab, whose FP8 lines lean against this
 * tree (the unchanged form measured -12% there too); not judged, so FP8
 * keeps the driver's separate request and its own stream prefetch. */
#define LN_PANEL_AHEAD 1
AI int ln_ahead_in_panel(ms_wfmt f)
{
    return f != MS_WFMT_FP8_BLOCK;
}
AI void ln_row_panel(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const float *const *xp,
                     int64_t c0, int64_t c1, int64_t ahead, float *out)
{
    if (f == MS_WFMT_MXFP4)
        mx_row_panel(nt, w, r, xp, c0, c1, ahead, out);
    else if (f == MS_WFMT_FP8_BLOCK)
        f8_row_panel(nt, w, r, xp, c0, c1, out); /* ahead is -1 here */
    else
        bf_row_panel(nt, w, r, xp, c0, c1, ahead, out);
}

/* BF16 rows go in pairs (bf_row_pair); the other formats' blocks are not
 * bound by x's loads. */
#define LN_ROW_PAIR 1
AI int ln_pairs(ms_wfmt f)
{
    return f == MS_WFMT_BF16;
}
AI void ln_row_pair(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const float *const *xp,
                    int64_t c0, int64_t c1, int64_t ahead, float *out, float *out2)
{
    (void)f; /* BF16: the one format ln_pairs names */
    bf_row_pair(nt, w, r, xp, c0, c1, ahead, out, out2);
}

#include "kernels/x86_lanes.h"

LN_ROWS(mx, MS_WFMT_MXFP4)
LN_ROWS(bf, MS_WFMT_BF16)
LN_ROWS(f8, MS_WFMT_FP8_BLOCK)

/* FP8 rows: byte-lane order where the blocks tile its units and panels and
 * the token's x fits the scaling, else the column order; decided per token
 * (runs of tokens alike go together), so a token's bits never depend on
 * the others. */
static void rows_fp8_any(const ms_mat *w, const float *X, int n, int64_t ldx, float *Y,
                         int64_t ldy, int64_t r0, int64_t r1)
{
    if (ms_fp8_lanes && ms_fp8_blocks_tile(w, F8_UNIT, MX_PANEL))
        ms_rows_by_token(rows_f8, rows_fp8, x_below, F8_X_LIMIT, w, X, n, ldx, Y, ldy, r0, r1);
    else
        rows_fp8(w, X, n, ldx, Y, ldy, r0, r1);
}

/* Same scheme as a row: two accumulators over chunks of 32, masked tail. */
static float dot_avx512(const float *a, const float *b, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
    }
    if (i < n) {
        __mmask32 m = (__mmask32)((1ull << (n - i)) - 1);
        __mmask16 m0 = (__mmask16)m, m1 = (__mmask16)(m >> 16);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, a + i), _mm512_maskz_loadu_ps(m0, b + i),
                             a0);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, a + i + 16),
                             _mm512_maskz_loadu_ps(m1, b + i + 16), a1);
    }
    return hsum(_mm512_add_ps(a0, a1));
}

/* y += a*x with one FMA per element, so every element rounds once. */
static void axpy_avx512(float a, const float *x, float *y, int64_t n)
{
    __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i),
                                                _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i),
                                   _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

/* Four independent 512-bit load streams per 256 bytes. */
static uint64_t stream_avx512(const void *p, int64_t bytes)
{
    const uint8_t *b = p;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < bytes; i += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512(b + i));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512(b + i + 64));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512(b + i + 128));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512(b + i + 192));
    }
    __m512i x = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    return (uint64_t)_mm512_reduce_or_epi64(x);
}

static const ms_kernel_ops avx512_ops = {
    .name = "avx512",
    .rows = {
        [MS_WFMT_F32] = rows_f32,
        [MS_WFMT_BF16] = rows_bf,
        [MS_WFMT_F16] = rows_f16,
        [MS_WFMT_FP8_BLOCK] = rows_fp8_any,
        [MS_WFMT_MXFP4] = rows_mx,
    },
    .dot = dot_avx512,
    .axpy = axpy_avx512,
    .stream = stream_avx512,
    .fma = fma_x,
    .attn = attn_x,
    .widen = widen_x,
};

const ms_kernel_ops *ms_kernels_avx512(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq") ||
        !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !ms_cpu_f16c())
        return NULL;
    return &avx512_ops;
}

/* The AVX2 op table (AVX2, FMA, F16C). Compiled with its own -m flags; the
 * dispatcher only calls into it once ms_kernels_avx2() said the CPU can.
 * This file supplies 256-bit primitives and decoders for the shared
 * column-order skeleton of x86_rows.h (chunks of 16 columns; tokens share
 * each decoded chunk in groups of 4, 2 for FP8, which needs twice the
 * registers) and the lane-order kernels of MXFP4 and FP8 (below, over
 * x86_lanes.h); FP8 keeps the column order for tokens whose activations
 * the byte-lane order cannot scale and for scale blocks that do not tile
 * its units.
 *
 * Decodes are exact. FP8 in column order: e4m3 bits moved into a half
 * float equal value * 2^-8, widened by vcvtph2ps, NaN codes patched to a
 * half NaN; the 2^8 is folded into the block scale (exact for scales below
 * 2^120; products w * 2^-8 * x below 2^-126 lose bits). MXFP4 and FP8 in
 * lane order: see their sections. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/internal.h"

#define AI static inline __attribute__((always_inline))

enum {
    MAX_NT = 4,               /* tokens sharing a decoded chunk (plain formats) */
    MAX_NT_FP8 = 2,           /* the same for FP8_BLOCK */
    PREFETCH = 2048,          /* bytes ahead in a row's weights */
    PANEL_X_BYTES = 16 << 10, /* x of one token group per column panel */
    ROW_BLOCK = 32,           /* rows sharing a pass over the token groups */
};

/* 16 decoded weights: columns c..c+7 and c+8..c+15. */
typedef struct w16 {
    __m256 lo, hi;
} w16;

static float f16c_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}

AI __m128i load128(const uint8_t *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}

AI __m256 bf16x8(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 16 e4m3 bytes -> 16 halves equal to value * 2^-8: sign-extending the byte
 * and shifting left by 7 puts the sign at bit 15 (and 14) and eeeemmm at
 * bits 13..7; masking bit 14 leaves s.0eeee.mmm0000000. The NaN codes are
 * the only ones with eeeemmm all ones; setting bit 14 then makes a half NaN. */
AI w16 fp8x16(__m128i raw)
{
    const __m256i mag = _mm256_set1_epi16(0x3F80);
    __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(raw), 7);
    h = _mm256_and_si256(h, _mm256_set1_epi16((short)0xBF80));
    __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, mag), mag);
    h = _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x4000)));
    w16 w = {_mm256_cvtph_ps(_mm256_castsi256_si128(h)),
             _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
    return w;
}

/* Decodes the full chunk at p. */
AI w16 decode(ms_wfmt f, const uint8_t *p)
{
    w16 w;
    switch (f) {
    case MS_WFMT_F32:
        w.lo = _mm256_loadu_ps((const float *)p);
        w.hi = _mm256_loadu_ps((const float *)(p + 32));
        return w;
    case MS_WFMT_BF16:
        w.lo = bf16x8(load128(p));
        w.hi = bf16x8(load128(p + 16));
        return w;
    case MS_WFMT_F16:
        w.lo = _mm256_cvtph_ps(load128(p));
        w.hi = _mm256_cvtph_ps(load128(p + 16));
        return w;
    default: /* FP8_BLOCK (MXFP4 never comes here: lane order) */
        return fp8x16(load128(p));
    }
}

/* Decodes the first k (1..15) columns of the chunk at p from a zero-filled
 * copy, so nothing past the row is read. */
AI w16 decode_part(ms_wfmt f, const uint8_t *p, int k)
{
    uint8_t buf[64] = {0};
    memcpy(buf, p, (size_t)ms_col_bytes(f, k));
    return decode(f, buf);
}

/* Lanes i of a float load that are < k, as a maskload mask. */
AI __m256i lanes_below(int k, int first)
{
    __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k - first), i);
}

#define XV __m256
#define XW 8
#define X_MAX_NT MAX_NT
#define X_PREFETCH(f, n) PREFETCH
#define X_PANEL_X_BYTES PANEL_X_BYTES
#define X_ROW_BLOCK ROW_BLOCK
#define X_GROUP(f) ((f) == MS_WFMT_FP8_BLOCK ? MAX_NT_FP8 : MAX_NT)
typedef w16 xw2;

AI float hsum(__m256 v)
{
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

AI __m256 xv_zero(void) { return _mm256_setzero_ps(); }
AI __m256 xv_fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
AI __m256 xv_add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
AI __m256 xv_set1(float f) { return _mm256_set1_ps(f); }
AI __m256 xv_loadu(const float *p) { return _mm256_loadu_ps(p); }
AI __m256 xv_load_below(const float *p, int k) { return _mm256_maskload_ps(p, lanes_below(k, 0)); }
AI float xv_hsum(__m256 v) { return hsum(v); }
AI w16 x_decode(ms_wfmt f, const uint8_t *p) { return decode(f, p); }
AI w16 x_decode_part(ms_wfmt f, const uint8_t *p, int k) { return decode_part(f, p, k); }

/* The block scale with the decode's 2^8 (exact). */
AI float x_scale(const ms_mat *w, int64_t i)
{
    return ms_fp8_scale_at(w, i, f16c_to_f32) * 256.0f;
}

#include "kernels/x86_rows.h"

X_ROWS(f32, MS_WFMT_F32)
X_ROWS(bf16, MS_WFMT_BF16)
X_ROWS(f16, MS_WFMT_F16)
X_ROWS(fp8, MS_WFMT_FP8_BLOCK)

/* ---- attention (x86_attn.h) ---------------------------------------------- */
__m256 _ZGVdN8v_expf(__m256 x); /* glibc libmvec */

AI __m256 lanes_in(int lo, int hi)
{
    __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i ge = _mm256_cmpgt_epi32(i, _mm256_set1_epi32(lo - 1));
    __m256i lt = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i);
    return _mm256_castsi256_ps(_mm256_and_si256(ge, lt));
}
AI __m256 xv_load_bf16_below(const uint16_t *p, int k)
{
    uint16_t buf[8] = {0};
    memcpy(buf, p, (size_t)(k < 0 ? 0 : k > 8 ? 8 : k) * 2);
    return bf16x8(_mm_loadu_si128((const __m128i *)buf));
}
/* 8 dwords of two bf16 each (the low word the even element) as floats */
AI void xv_load_pairs(const uint32_t *p, __m256 *even, __m256 *odd)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
}
AI __m256 xv_mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
AI __m256 xv_sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
AI __m256 xv_max(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
AI void xv_storeu(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
AI void xv_store_below(float *p, int k, __m256 v)
{
    _mm256_maskstore_ps(p, _mm256_castps_si256(lanes_in(0, k)), v);
}
AI __m256 xv_keep(__m256 v, int lo, int hi, float fill)
{
    return _mm256_blendv_ps(_mm256_set1_ps(fill), v, lanes_in(lo, hi));
}
AI float xv_hmax(__m256 v)
{
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    b = _mm_max_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}
AI __m256 xv_exp(__m256 v) { return _ZGVdN8v_expf(v); }

/* r[j] lane i <-> r[i] lane j: pairs, quads, then 128-bit halves */
AI void xv_transpose(__m256 *r)
{
    __m256 t[8], u[8];
#pragma GCC unroll 16
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
#pragma GCC unroll 16
    for (int k = 0; k < 2; k++) {
        u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}
#define X_FP8_UNIT 256.0f

#include "kernels/x86_attn.h"


/* ---- MXFP4 in lane order ---------------------------------------------------
 * As in x86_avx512.c, at half the width: a 32-byte load is 64 columns,
 * column 8i+j in nibble j of dword i. Shifting right by 4j and vpermps
 * (which reads 3 index bits) look up the magnitude; the nibble's sign bit,
 * shifted to bit 31, is or-ed in. One shuffle per 8 weights instead of
 * five per 16 (vpshufb, unpack, two widenings). x is transposed once per
 * call to match (an 8x8 transpose per 64 columns); lane i belongs to group
 * i / 4, so the two groups' scales multiply the block's per-lane partial
 * sums (powers of two: exact). Panels of LO_PANEL columns, each reduced by
 * the fixed tree and added in order, and token groups of 2 (the 16 ymm
 * registers) do not depend on the batch. */
enum { LO_BLOCK = 64, LO_PANEL = 1024, LO_XBUF = 32 << 10, LO_ROW_BLOCK = 32, LO_NT = 2 };

/* xp[8j + i] = x[8i + j] for one block of k (32 or 64) columns, zero past k. */
AI void lo_transpose(const float *x, int k, float *xp)
{
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_maskload_ps(x + 8 * i, lanes_below(k - 8 * i, 0));
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        _mm256_store_ps(xp + 8 * j, _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
        _mm256_store_ps(xp + 8 * (j + 4), _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
    }
}

/* Columns [c0, c1) of row r for nt tokens with transposed x (panel relative)
 * at xp[t]; the panel's sums to out[t]. */
AI void lo_row_panel(int nt, const ms_mat *w, int64_t r, const float *const *xp, int64_t c0,
                     int64_t c1, float *out)
{
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    const uint8_t *row = (const uint8_t *)w->w + (w->cols / 2) * r;
    const uint8_t *sb = (const uint8_t *)w->scale + r * (w->cols / 32);
    __m256 a0[LO_NT], a1[LO_NT];
    for (int t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm256_setzero_ps();
    for (int64_t c = c0; c < c1; c += LO_BLOCK) {
        int two = c1 - c >= LO_BLOCK; /* groups in this block: 2, or 1 at a ragged end */
        _mm_prefetch((const char *)row + c / 2 + PREFETCH, _MM_HINT_T0);
        __m256i q = two ? _mm256_loadu_si256((const __m256i *)(row + c / 2))
                        : _mm256_maskload_epi32((const int *)(row + c / 2), lanes_below(4, 0));
        __m256 s = _mm256_setr_m128(_mm_set1_ps(ms_e8m0_fast(sb[c / 32])),
                                    _mm_set1_ps(two ? ms_e8m0_fast(sb[c / 32 + 1]) : 0.0f));
        __m256 p0[LO_NT], p1[LO_NT];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i qj = _mm256_srli_epi32(q, 4 * j);
            __m256 v = _mm256_permutevar8x32_ps(mag, qj);
            __m256i sg = _mm256_and_si256(_mm256_slli_epi32(qj, 28), sign);
            v = _mm256_or_ps(v, _mm256_castsi256_ps(sg));
            for (int t = 0; t < nt; t++) {
                __m256 xv = _mm256_load_ps(xp[t] + (c - c0) + 8 * j);
                if (j < 2)
                    (j ? p1 : p0)[t] = _mm256_mul_ps(v, xv);
                else if (j % 2)
                    p1[t] = _mm256_fmadd_ps(v, xv, p1[t]);
                else
                    p0[t] = _mm256_fmadd_ps(v, xv, p0[t]);
            }
        }
        for (int t = 0; t < nt; t++) {
            a0[t] = _mm256_fmadd_ps(p0[t], s, a0[t]);
            a1[t] = _mm256_fmadd_ps(p1[t], s, a1[t]);
        }
    }
    for (int t = 0; t < nt; t++)
        out[t] = hsum(_mm256_add_ps(a0[t], a1[t]));
}

/* ---- FP8 in byte-lane order ------------------------------------------------
 * As in x86_avx512.c, at half the width: a 32-byte load is 32 columns,
 * dword i holding columns 4i..4i+3. An e4m3 byte whose sign sits at bit 31
 * of a lane and eeeemmm at bits 26..20 is a float equal to value * 2^-120
 * (subnormals included): an arithmetic shift of the words right by 4 puts
 * bytes 3 and 1 there (byte 1 in the low word, moved up by a dword shift),
 * after a word shift left by 8 bytes 2 and 0. x is transposed to match and
 * scaled by 2^112, so each product is w * x * 2^-8 as in the column order,
 * whose 2^8 the block scale takes back; a token with |x| >= 2^16 takes the
 * column order alone. A NaN code makes the panel's sum NaN. Per token two
 * chains per scale block (bytes 3 and 2, bytes 1 and 0) and two
 * accumulators: with 2 tokens that and the decode fill the 16 registers. */
enum { F8_UNIT = 32 };
#define F8_X_SCALE 0x1p112f
#define F8_X_LIMIT 0x1p16f

/* k (1..64) columns of x in byte-lane order, scaled by 2^112, zero past k:
 * per 32 columns x[4i+3], x[4i+1], x[4i+2], x[4i] (i = 0..7). Each 128-bit
 * half of a load is one dword's 4 columns; a 4x4 transpose per half leaves
 * the even dwords in the low halves and the odd ones in the high halves,
 * which one permute puts in order. */
AI void f8_transpose(const float *x, int k, float *xp)
{
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256 big = _mm256_set1_ps(F8_X_SCALE);
    for (int u = 0; u < 2; u++) {
        __m256 X[4], r[4];
        for (int v = 0; v < 4; v++)
            X[v] = _mm256_maskload_ps(x + 32 * u + 8 * v, lanes_below(k - 32 * u - 8 * v, 0));
        __m256 t0 = _mm256_unpacklo_ps(X[0], X[1]), t1 = _mm256_unpackhi_ps(X[0], X[1]);
        __m256 t2 = _mm256_unpacklo_ps(X[2], X[3]), t3 = _mm256_unpackhi_ps(X[2], X[3]);
        r[0] = _mm256_shuffle_ps(t0, t2, 0x44);
        r[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
        r[2] = _mm256_shuffle_ps(t1, t3, 0x44);
        r[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
        static const int byte_of[4] = {3, 1, 2, 0};
        for (int q = 0; q < 4; q++)
            _mm256_store_ps(xp + 32 * u + 8 * q,
                            _mm256_mul_ps(_mm256_permutevar8x32_ps(r[byte_of[q]], order), big));
    }
}

/* Columns [c0, c1) of FP8 row r (c0 on a block boundary, blocks a multiple
 * of F8_UNIT columns) for nt tokens with byte-lane x (panel relative) at
 * xp[t]; the panel's sums to out[t]. */
AI void f8_row_panel(int nt, const ms_mat *w, int64_t r, const float *const *xp, int64_t c0,
                     int64_t c1, float *out)
{
    const uint8_t *row = (const uint8_t *)w->w + w->cols * r;
    const __m256i keep = _mm256_set1_epi32((int)0x87F00000u);
    const int64_t bc = w->block_cols;
    int64_t si = ms_fp8_scale_row(w, r) + c0 / bc;
    __m256i top_s = _mm256_setzero_si256(), top_u = _mm256_setzero_si256();
    __m256 a0[LO_NT], a1[LO_NT];
    for (int t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm256_setzero_ps();
    for (int64_t b = c0; b < c1; b += bc, si++) {
        int64_t be = b + bc < c1 ? b + bc : c1;
        __m256 p0[LO_NT], p1[LO_NT];
        for (int t = 0; t < nt; t++)
            p0[t] = p1[t] = _mm256_setzero_ps();
        for (int64_t c = b; c < be; c += F8_UNIT) {
            _mm_prefetch((const char *)row + c + PREFETCH, _MM_HINT_T0);
            __m256i v;
            if (be - c >= F8_UNIT) {
                v = _mm256_loadu_si256((const __m256i *)(row + c));
            } else { /* the row's ragged end: nothing past it is read */
                uint8_t tail[F8_UNIT] = {0};
                memcpy(tail, row + c, (size_t)(be - c));
                v = _mm256_loadu_si256((const __m256i *)tail);
            }
            top_s = _mm256_max_epi8(top_s, v);
            top_u = _mm256_max_epu8(top_u, v);
            __m256i h31 = _mm256_srai_epi16(v, 4);
            __m256i h20 = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 4);
            __m256 d3 = _mm256_castsi256_ps(_mm256_and_si256(h31, keep));
            __m256 d1 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(h31, 16), keep));
            __m256 d2 = _mm256_castsi256_ps(_mm256_and_si256(h20, keep));
            __m256 d0 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(h20, 16), keep));
            for (int t = 0; t < nt; t++) {
                const float *xo = xp[t] + (c - c0);
                p0[t] = _mm256_fmadd_ps(d3, _mm256_load_ps(xo), p0[t]);
                p1[t] = _mm256_fmadd_ps(d1, _mm256_load_ps(xo + 8), p1[t]);
                p0[t] = _mm256_fmadd_ps(d2, _mm256_load_ps(xo + 16), p0[t]);
                p1[t] = _mm256_fmadd_ps(d0, _mm256_load_ps(xo + 24), p1[t]);
            }
        }
        __m256 s = _mm256_set1_ps(ms_fp8_scale_at(w, si, f16c_to_f32) * X_FP8_UNIT);
        for (int t = 0; t < nt; t++) {
            a0[t] = _mm256_fmadd_ps(p0[t], s, a0[t]);
            a1[t] = _mm256_fmadd_ps(p1[t], s, a1[t]);
        }
    }
    int nan = _mm256_movemask_epi8(_mm256_cmpeq_epi8(top_s, _mm256_set1_epi8(0x7F))) != 0 ||
              _mm256_movemask_epi8(_mm256_cmpeq_epi8(top_u, _mm256_set1_epi8((char)0xFF))) != 0;
    for (int t = 0; t < nt; t++)
        out[t] = nan ? NAN : hsum(_mm256_add_ps(a0[t], a1[t]));
}

/* The lane-order loop (x86_lanes.h) over the two formats' transposes and
 * row panels. */
#define LN_XT float
#define LN_BLOCK LO_BLOCK
#define LN_PANEL LO_PANEL
#define LN_XBUF LO_XBUF
#define LN_ROW_BLOCK LO_ROW_BLOCK
#define LN_NT 2 /* LO_NT, as a literal for x86_lanes.h's #if */

AI void ln_transpose(ms_wfmt f, const float *x, int k, float *out)
{
    if (f == MS_WFMT_FP8_BLOCK)
        f8_transpose(x, k, out);
    else
        lo_transpose(x, k, out);
}

AI void ln_row_panel(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const float *const *xp,
                     int64_t c0, int64_t c1, float *out)
{
    if (f == MS_WFMT_FP8_BLOCK)
        f8_row_panel(nt, w, r, xp, c0, c1, out);
    else
        lo_row_panel(nt, w, r, xp, c0, c1, out);
}

#include "kernels/x86_lanes.h"

LN_ROWS(mx, MS_WFMT_MXFP4)
LN_ROWS(f8, MS_WFMT_FP8_BLOCK)

/* Whether every |x[c]| of a token is below limit (NaN lanes pass). */
static int x_below(const float *x, int64_t cols, float limit)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 top = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; c += 8)
        top = _mm256_max_ps(top, _mm256_and_ps(abs, _mm256_maskload_ps(x + c, lanes_below(
                                                                    (int)(cols - c), 0))));
    return _mm256_movemask_ps(_mm256_cmp_ps(top, _mm256_set1_ps(limit), _CMP_GE_OQ)) == 0;
}

/* FP8 rows: byte-lane order where the blocks tile its units and panels and
 * the token's x fits the scaling, else the column order; decided per token
 * (runs of tokens alike go together), so a token's bits never depend on
 * the others. */
static void rows_fp8_any(const ms_mat *w, const float *X, int n, int64_t ldx, float *Y,
                         int64_t ldy, int64_t r0, int64_t r1)
{
    if (ms_fp8_lanes && ms_fp8_blocks_tile(w, F8_UNIT, LO_PANEL))
        ms_rows_by_token(rows_f8, rows_fp8, x_below, F8_X_LIMIT, w, X, n, ldx, Y, ldy, r0, r1);
    else
        rows_fp8(w, X, n, ldx, Y, ldy, r0, r1);
}

/* Same scheme as a row: two accumulators over chunks of 16, masked tail. */
static float dot_avx2(const float *a, const float *b, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
    }
    if (i < n) {
        int k = (int)(n - i);
        __m256i m0 = lanes_below(k, 0), m1 = lanes_below(k, 8);
        a0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m0), _mm256_maskload_ps(b + i, m0), a0);
        a1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 8, m1),
                             _mm256_maskload_ps(b + i + 8, m1), a1);
    }
    return hsum(_mm256_add_ps(a0, a1));
}

/* y += a*x with one FMA per element (fmaf is the same instruction here), so
 * every element rounds once wherever it sits. */
static void axpy_avx2(float a, const float *x, float *y, int64_t n)
{
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] = __builtin_fmaf(a, x[i], y[i]);
}

/* Four independent 256-bit load streams per 128 bytes. */
static uint64_t stream_avx2(const void *p, int64_t bytes)
{
    const uint8_t *b = p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < bytes; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(b + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(b + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(b + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(b + i + 96)));
    }
    __m256i x = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(x, 0) ^ (uint64_t)_mm256_extract_epi64(x, 3);
}

static const ms_kernel_ops avx2_ops = {
    .name = "avx2",
    .rows = {
        [MS_WFMT_F32] = rows_f32,
        [MS_WFMT_BF16] = rows_bf16,
        [MS_WFMT_F16] = rows_f16,
        [MS_WFMT_FP8_BLOCK] = rows_fp8_any,
        [MS_WFMT_MXFP4] = rows_mx,
    },
    .dot = dot_avx2,
    .axpy = axpy_avx2,
    .stream = stream_avx2,
    .fma = fma_x,
    .attn = attn_x,
    .widen = widen_x,
};

const ms_kernel_ops *ms_kernels_avx2(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !ms_cpu_f16c())
        return NULL;
    return &avx2_ops;
}

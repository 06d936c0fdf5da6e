/* The fast table's attention step (--precision fast) over a bf16 KV cache
 * read as stored: vdpbf16ps for the scores and for the weighted values, so
 * the queries and the softmax weights are rounded to bf16 (to nearest
 * even) as they enter a product; the keys and values are bf16 already.
 * Steps over float rows (an f32 cache, or one widened into a tile) and keys
 * of odd dimension run the base table's exact step. Included by
 * x86_avx512bf16.c only.
 *
 * Per step:
 *   keys: rows [0, n) transposed once as dimension pairs: dword j of
 *     kt[b][dp] holds key 16b + j's elements 2dp (low word) and 2dp + 1
 *     (rows >= n zero), so one vdpbf16ps adds a pair's products for 16 keys;
 *     keys stored in tiles (ms_attn_step.ktiled) are that layout already;
 *   per group of up to FA_Q queries with the same range [lo, hi):
 *     scores: the query as bf16 pairs, one vdpbf16ps chain over the pairs
 *       per query, lane j key j, then scaled and masked as the exact step;
 *     weights: exp(s - m') in float32 (fa_exp, within ~1.5 ulp of it; l
 *       sums them as they are), then rounded to bf16;
 *     values: keys in pairs (p, p + 1), p even in the chunk, interleaved
 *       into dwords (rows outside [lo, hi) read as zero, their weights are
 *       zero), one vdpbf16ps per 16 dimensions adding both keys' weighted
 *       values.
 * On Zen 4 that is half the instructions of the exact step's FMAs and no
 * widening (docs/perf.md, "Long context").
 *
 * A query's operations depend only on its own q, range and state and on the
 * keys, never on the other queries of the step: batches, thread counts and
 * splits still change no bit. */
#ifndef MS_KERNELS_X86_ATTN_BF16_H
#define MS_KERNELS_X86_ATTN_BF16_H

#include <math.h>

#include "kernels/x86_attn_pf.h"

#define FA_Q 8 /* queries sharing a pass over the transposed keys */

/* e^x for x <= 0 (scores minus their running maximum; -inf gives 0, NaN
 * stays NaN): x = n ln2 + r with ln2 in two parts (Cody and Waite: n ln2_hi
 * is exact), e^r by its Taylor polynomial of degree 7 (|r| <= ln2 / 2),
 * then 2^n by vscalefps, which flushes below the float range to 0. Within
 * 2^-23.5 of e^x over [-104, 0] (measured against double exp); inline where
 * libmvec's expf is a call of ~30 instructions per 16 lanes (14% of this
 * step's time on Zen 4). */
AI __m512 fa_exp(__m512 x)
{
    /* vmaxps returns its second operand when either is NaN */
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* The step's keys as pairs: kt[((b * dh) + dp) * 16 + j], dh = dk / 2. */
static void fa_keys_t(const ms_attn_step *a, int dh, uint32_t *kt)
{
    const uint16_t *k = (const uint16_t *)a->k;
    for (int p0 = 0, b = 0; p0 < a->n; p0 += 16, b++)
        for (int c = 0; c < dh; c += 16) {
            __m512 r[16];
            __mmask16 m = lanes_in(0, dh - c);
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                r[j] = p0 + j < a->n ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(
                                           m, k + (int64_t)(p0 + j) * a->ldk + 2 * c))
                                     : _mm512_setzero_ps();
            tr16(r);
            int nd = dh - c < 16 ? dh - c : 16;
            uint32_t *o = kt + ((int64_t)b * dh + c) * 16;
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                if (j < nd)
                    _mm512_storeu_si512(o + j * 16, _mm512_castps_si512(r[j]));
        }
}

/* q (dk floats, dk even) as dk / 2 bf16 pairs, low word the even element. */
AI void fa_query(const float *q, int dk, uint32_t *qb)
{
    for (int c = 0; c < dk; c += 32) {
        __m512 lo = _mm512_maskz_loadu_ps(lanes_in(0, dk - c), q + c);
        __m512 hi = _mm512_maskz_loadu_ps(lanes_in(0, dk - c - 16), q + c + 16);
        __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        _mm512_mask_storeu_epi32(qb + c / 2, lanes_in(0, (dk - c) / 2), v);
    }
}

/* The scores of keys [base, hi) for m (a constant where inlined) queries
 * (pairs at qb + w * dh) into s[w], masked to [lo, hi) with -inf; their
 * maxima into vmax[w]. */
AI void fa_scores(const ms_attn_step *a, int m, const uint32_t *qb, int dh, const uint32_t *kt,
                  int base, int lo, int hi, float *const *s, __m512 *vmax, xa_pf *pfp)
{
    __m512 sc = _mm512_set1_ps(a->scale);
    xa_pf cur = *pfp, *pf = &cur; /* in registers */
    for (int p0 = base; p0 < hi; p0 += 16) {
        const uint32_t *kb = kt + (int64_t)(p0 / 16) * dh * 16;
        __m512 acc[FA_Q];
#pragma GCC unroll 8
        for (int w = 0; w < m; w++)
            acc[w] = _mm512_setzero_ps();
        for (int dp = 0; dp < dh; dp++) {
            xa_prefetch(pf);
            __m512bh kv = (__m512bh)_mm512_loadu_si512(kb + dp * 16);
#pragma GCC unroll 8
            for (int w = 0; w < m; w++)
                acc[w] = _mm512_dpbf16_ps(
                    acc[w], (__m512bh)_mm512_set1_epi32((int)qb[(int64_t)w * dh + dp]), kv);
        }
#pragma GCC unroll 8
        for (int w = 0; w < m; w++) {
            __m512 v = _mm512_mul_ps(acc[w], sc);
            if (p0 < lo || p0 + 16 > hi)
                v = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), lanes_in(lo - p0, hi - p0), v);
            _mm512_storeu_ps(s[w] + (p0 - base), v);
            vmax[w] = _mm512_max_ps(vmax[w], v);
        }
    }
    *pfp = cur;
}

/* acc[w][d0, d0 + 32) (of which `left` are real) = acc * al[w] + the
 * weighted values of keys [lo, hi), weights eb[w][p - base] (bf16), for m
 * (a constant where inlined) queries. */
AI void fa_values(const ms_attn_step *a, int m, float *const *acc, int d0, int left,
                  const float *al, const uint16_t *const *eb, int base, int lo, int hi,
                  xa_pf *pfp)
{
    xa_pf cur = *pfp, *pf = &cur;
    /* word 2t from the first row, 2t + 1 from the second: element t, and
     * element 16 + t */
    const __m512i i0 = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                        40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1,
                                        32, 0);
    const __m512i i1 = _mm512_add_epi16(i0, _mm512_set1_epi16(16));
    __mmask16 m0 = lanes_in(0, left), m1 = lanes_in(0, left - 16);
    __mmask32 mw = left >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << left) - 1);
    const uint16_t *v = (const uint16_t *)a->v + d0;
    __m512 r[FA_Q][2];
#pragma GCC unroll 8
    for (int w = 0; w < m; w++) {
        __m512 aw = _mm512_set1_ps(al[w]);
        r[w][0] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, acc[w] + d0), aw);
        r[w][1] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, acc[w] + d0 + 16), aw);
    }
    for (int p = lo & ~1; p < hi; p += 2) {
        xa_prefetch(pf);
        xa_prefetch(pf);
        __m512i x0 = p >= lo ? _mm512_maskz_loadu_epi16(mw, v + (int64_t)p * a->ldv)
                             : _mm512_setzero_si512();
        __m512i x1 = p + 1 < hi ? _mm512_maskz_loadu_epi16(mw, v + (int64_t)(p + 1) * a->ldv)
                                : _mm512_setzero_si512();
        __m512bh y0 = (__m512bh)_mm512_permutex2var_epi16(x0, i0, x1);
        __m512bh y1 = (__m512bh)_mm512_permutex2var_epi16(x0, i1, x1);
#pragma GCC unroll 8
        for (int w = 0; w < m; w++) {
            int32_t e;
            memcpy(&e, eb[w] + (p - base), 4);
            __m512bh e2 = (__m512bh)_mm512_set1_epi32(e);
            r[w][0] = _mm512_dpbf16_ps(r[w][0], e2, y0);
            r[w][1] = _mm512_dpbf16_ps(r[w][1], e2, y1);
        }
    }
#pragma GCC unroll 8
    for (int w = 0; w < m; w++) {
        _mm512_mask_storeu_ps(acc[w] + d0, m0, r[w][0]);
        _mm512_mask_storeu_ps(acc[w] + d0 + 16, m1, r[w][1]);
    }
    *pfp = cur;
}

/* Queries i0 .. i0 + m - 1 (m <= FA_Q) of the step, which all see keys
 * [lo, hi). */
static void fa_group(const ms_attn_step *a, int i0, int m, int dh, const uint32_t *kt,
                     uint32_t *qb, xa_pf *pf)
{
    int lo = a->lo[i0], hi = a->hi[i0], base = lo - lo % 16;
    float *s[FA_Q], *acc[FA_Q], al[FA_Q];
    const uint16_t *eb[FA_Q];
    __m512 vmax[FA_Q];
    for (int w = 0; w < m; w++) {
        fa_query(a->q[i0 + w], a->dk, qb + (int64_t)w * dh);
        s[w] = a->s + w * MS_ATTN_SROW;
        eb[w] = (const uint16_t *)(s[w] + MS_ATTN_CHUNK); /* the bf16 weights */
        acc[w] = a->st[i0 + w] + 2;
        vmax[w] = _mm512_set1_ps(-INFINITY);
    }
    switch (m) {
#define FA_S(M)                                                                          \
    case M: fa_scores(a, M, qb, dh, kt, base, lo, hi, s, vmax, pf); break;
        FA_S(1) FA_S(2) FA_S(3) FA_S(4) FA_S(5) FA_S(6) FA_S(7) FA_S(8)
#undef FA_S
    }
    for (int w = 0; w < m; w++) {
        float *st = a->st[i0 + w];
        float mc = _mm512_reduce_max_ps(vmax[w]), mold = st[0];
        float mx = mold > mc ? mold : mc;
        float alpha = expf(mold - mx);
        __m512 mv = _mm512_set1_ps(mx), lsum = _mm512_setzero_ps();
        for (int p0 = base; p0 < hi; p0 += 16) {
            __m512 e = fa_exp(_mm512_sub_ps(_mm512_loadu_ps(s[w] + (p0 - base)), mv));
            if (p0 < lo || p0 + 16 > hi)
                e = _mm512_maskz_mov_ps(lanes_in(lo - p0, hi - p0), e);
            _mm512_storeu_ps(s[w] + (p0 - base), e);
            lsum = _mm512_add_ps(lsum, e);
        }
        st[1] = alpha * st[1] + hsum(lsum);
        st[0] = mx;
        al[w] = alpha;
        /* the weights of keys [base, hi) as bf16 (those past hi rounded up
         * to 16 are zero; beyond, never read) */
        for (int i = 0, ne = hi - base; i < ne; i += 32) {
            __m512 e0 = _mm512_maskz_loadu_ps(lanes_in(0, ne - i), s[w] + i);
            __m512 e1 = _mm512_maskz_loadu_ps(lanes_in(0, ne - i - 16), s[w] + i + 16);
            _mm512_storeu_si512((uint16_t *)eb[w] + i, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
        }
    }
    for (int d0 = 0; d0 < a->dv; d0 += 32)
        switch (m) {
#define FA_V(M)                                                                          \
    case M: fa_values(a, M, acc, d0, a->dv - d0, al, eb, base, lo, hi, pf); break;
            FA_V(1) FA_V(2) FA_V(3) FA_V(4) FA_V(5) FA_V(6) FA_V(7) FA_V(8)
#undef FA_V
        }
}

static void attn_fast(const ms_attn_step *a)
{
    if (!a->bf16 || a->dk % 2) {
        ms_kernels_avx512()->attn(a);
        return;
    }
    int dh = a->dk / 2;
    /* scratch: FA_Q score rows (bf16 weights in their upper halves), the
     * keys as pairs, the group's queries as pairs */
    uint32_t *kt = (uint32_t *)(a->s + FA_Q * MS_ATTN_SROW);
    uint32_t *qb = kt + (int64_t)MS_ATTN_CHUNK * dh;
    xa_pf pf = xa_pf_of(a);
    if (a->ktiled)
        kt = (uint32_t *)a->k; /* read only */
    else
        fa_keys_t(a, dh, kt);
    for (int i = 0; i < a->nq;) {
        int m = 1;
        while (i + m < a->nq && m < FA_Q && a->lo[i + m] == a->lo[i] && a->hi[i + m] == a->hi[i])
            m++;
        fa_group(a, i, m, dh, kt, qb, &pf);
        i += m;
    }
}

#endif

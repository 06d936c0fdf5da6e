/* The attention step (ms_attn_step) and the KV-cache widening of the SIMD
 * op tables, over the same primitives as x86_rows.h plus these (static
 * inline, defined by the ISA file before including this):
 *
 *   xv_mul, xv_sub, xv_max        lane-wise
 *   xv_storeu(p, v), xv_store_below(p, k, v)   all lanes / the first k
 *   xv_keep(v, lo, hi, fill)      lanes [lo, hi) of v, the others fill
 *   xv_hmax(v)                    the largest lane
 *   xv_transpose(r[XW])           r[j] lane i <-> r[i] lane j
 *   xv_exp(v)                     glibc's libmvec expf of every lane
 *   xv_load_bf16_below(p, k)      the first k bf16 elements at p, widened
 *   xv_load_pairs(p, &even, &odd) XW dwords of two bf16 at p, widened
 *   X_FP8_UNIT                    what x_decode's FP8 values lack (2^8)
 *
 * Queries that see the same keys (the heads of a KV head, at one position)
 * go together, up to XA_GROUP: the keys of the chunk are transposed once
 * (XW keys per vector), then
 *   scores: for each query, one FMA chain over the dk dimensions, lane j
 *     holding key j (q[d] broadcast times key column d): no reduction;
 *   weights: exp(s - m') by xv_exp, summed lane-wise in key order and
 *     then by xv_hsum;
 *   values: acc = acc * a, then one FMA per key in key order,
 * up to XA_VQ queries sharing each value load. Every one of these is the
 * same sequence of operations for a query whatever the group it is in.
 * Keys stored in tiles (ms_attn_step.ktiled: MS_KV_TILE keys per
 * dimension, a multiple of XW) are that layout already: the scores read
 * them in place (bf16: a dimension pair of XW keys per load, widened by a
 * shift and an AND), the same vectors as the transpose makes, so the same
 * bits.
 *
 * A whole vector of queries with the same keys (XW of them: MLA's heads,
 * which all share one latent) instead transposes the queries, once per
 * step, and computes each block of XW keys' scores for all of them as XW
 * FMA chains over dk with one key element broadcast per chain, then
 * transposes that XW x XW tile into the layout above (xa_scores_wide).
 * Per (query, key) it is the same chain of fused multiply-adds as
 * xa_scores, in the same order (a fused multiply-add rounds once whatever
 * the order of its factors), so the same bits; the keys are transposed no
 * more, which for MLA (dk 576, 16 queries per step) was a third of the
 * step's time. */
#ifndef MS_KERNELS_X86_ATTN_H
#define MS_KERNELS_X86_ATTN_H

#include <math.h>

#include "kernels/x86_attn_pf.h"

#define XA_GROUP 8 /* queries sharing the transposed keys */
#define XA_WIDE XW /* queries sharing the transposed queries' path */
#define XA_MAX (XA_WIDE > XA_GROUP ? XA_WIDE : XA_GROUP)
#define XA_VQ 4    /* queries sharing a value load (XA_VQ * XA_VD accumulators) */
#define XA_VD 4    /* value vectors per pass */

/* Up to XW elements j .. of row p of the step's keys or values, f32 or bf16
 * (bf16, a constant where inlined), the lanes past k zero. */
AI XV xa_row(const float *base, int64_t ld, int bf16, int64_t p, int j, int k)
{
    return bf16 ? xv_load_bf16_below((const uint16_t *)base + p * ld + j, k)
                : xv_load_below(base + p * ld + j, k);
}

/* Keys [base, hi) of the step transposed, XW keys per block: block b holds
 * kt[(b * dk + d) * XW + j] = k[base + b * XW + j][d]; keys past hi read as
 * zero. */
AI void xa_keys_t(const ms_attn_step *a, int bf16, int base, int hi, float *kt)
{
    int dk = a->dk;
    for (int p0 = base, b = 0; p0 < hi; p0 += XW, b++)
        for (int c = 0; c < dk; c += XW) {
            XV r[XW];
#pragma GCC unroll 16
            for (int j = 0; j < XW; j++)
                r[j] = p0 + j < hi ? xa_row(a->k, a->ldk, bf16, p0 + j, c, dk - c) : xv_zero();
            xv_transpose(r);
            float *o = kt + ((int64_t)b * dk + c) * XW;
            int nd = dk - c < XW ? dk - c : XW;
#pragma GCC unroll 16
            for (int j = 0; j < XW; j++)
                if (j < nd)
                    xv_storeu(o + j * XW, r[j]);
        }
}

/* One query's scores of keys p0 .. p0 + XW - 1 (acc, unscaled) into out,
 * those outside [lo, hi) as -inf, and their maximum into *vmax. */
AI void xa_put_scores(XV acc, XV sc, int p0, int lo, int hi, float *out, XV *vmax)
{
    XV v = xv_mul(acc, sc);
    if (p0 < lo || p0 + XW > hi)
        v = xv_keep(v, lo - p0, hi - p0, -INFINITY);
    xv_storeu(out, v);
    *vmax = xv_max(*vmax, v);
}

/* How xa_scores finds its keys: transposed by xa_keys_t, or the step's
 * tiles of f32 or of bf16 pairs. */
enum { XA_KT = 0, XA_TILES_F32, XA_TILES_BF16 };

/* The scores of keys [base, hi) for m (a constant where inlined) queries
 * q[0..m) into s[w] (relative to base), masked to [lo, hi) with -inf;
 * their maxima into vmax[w]. The keys (kind, a constant where inlined):
 * transposed from base by xa_keys_t into kt, or the step's tiles at kt. */
AI void xa_scores(const ms_attn_step *a, int m, int kind, const float *const *q,
                  const float *kt, int base, int lo, int hi, float *const *s, XV *vmax,
                  xa_pf *pfp)
{
    int dk = a->dk;
    const int T = kind == XA_KT ? XW : MS_KV_TILE; /* keys per dimension */
    XV sc = xv_set1(a->scale);
    xa_pf cur = *pfp, *pf = &cur; /* in registers: through memory, the cursor's
                                   * updates were a chain of store-to-load waits */
    for (int p0 = base, b = 0; p0 < hi; p0 += XW, b++) {
        const float *kb = kind == XA_TILES_F32 ? kt + (int64_t)(p0 - p0 % T) * dk + p0 % T
                                               : kt + (int64_t)b * dk * XW;
        XV acc[XA_GROUP];
#pragma GCC unroll 8
        for (int w = 0; w < m; w++)
            acc[w] = xv_zero();
        if (kind == XA_TILES_BF16) { /* dimensions 2i and 2i + 1 per load */
            const uint32_t *kp = (const uint32_t *)kt + (int64_t)(p0 - p0 % T) * (dk / 2) + p0 % T;
            for (int d = 0; d < dk; d += 2) {
                XV ke, ko;
                xa_prefetch(pf);
                xa_prefetch(pf);
                xv_load_pairs(kp + (d / 2) * T, &ke, &ko);
#pragma GCC unroll 8
                for (int w = 0; w < m; w++) {
                    acc[w] = xv_fma(xv_set1(q[w][d]), ke, acc[w]);
                    acc[w] = xv_fma(xv_set1(q[w][d + 1]), ko, acc[w]);
                }
            }
        } else {
            for (int d = 0; d < dk; d++) {
                xa_prefetch(pf);
                XV kv = xv_loadu(kb + d * T);
#pragma GCC unroll 8
                for (int w = 0; w < m; w++)
                    acc[w] = xv_fma(xv_set1(q[w][d]), kv, acc[w]);
            }
        }
#pragma GCC unroll 8
        for (int w = 0; w < m; w++)
            xa_put_scores(acc[w], sc, p0, lo, hi, s[w] + (p0 - base), &vmax[w]);
    }
    *pfp = cur;
}

/* xa_scores with m (1..XA_GROUP) made a constant for each count, kind a
 * constant where inlined. */
AI void xa_scores_m(const ms_attn_step *a, int m, int kind, const float *const *q,
                    const float *kt, int base, int lo, int hi, float *const *s, XV *vmax,
                    xa_pf *pf)
{
    switch (m) {
#define XA_S(M)                                                                      \
    case M: xa_scores(a, M, kind, q, kt, base, lo, hi, s, vmax, pf); break;
        XA_S(1) XA_S(2) XA_S(3) XA_S(4) XA_S(5) XA_S(6) XA_S(7) XA_S(8)
#undef XA_S
    }
}

/* qt[d * XW + w] = q[w][d] for the XW queries, d < dk. */
AI void xa_queries_t(int dk, const float *const *q, float *qt)
{
    for (int c = 0; c < dk; c += XW) {
        XV r[XW];
#pragma GCC unroll 16
        for (int j = 0; j < XW; j++)
            r[j] = xv_load_below(q[j] + c, dk - c);
        xv_transpose(r);
        int nd = dk - c < XW ? dk - c : XW;
#pragma GCC unroll 16
        for (int j = 0; j < XW; j++)
            if (j < nd)
                xv_storeu(qt + (int64_t)(c + j) * XW, r[j]);
    }
}

/* xa_scores for XW queries, from their transpose qt and the f32 keys kf
 * (row p at kf + p * ldk; tiled, a constant where inlined: the step's
 * tiles): the tile acc[j] (key p0 + j, lane w = query w) is transposed
 * into acc[w] (lane j = key p0 + j). Rows past hi repeat row p0; their
 * lanes are masked as in xa_scores. */
AI void xa_scores_wide(const ms_attn_step *a, int tiled, const float *kf, int64_t ldk,
                       const float *qt, int base, int lo, int hi, float *const *s, XV *vmax,
                       xa_pf *pfp)
{
    const int T = MS_KV_TILE, ds = tiled ? T : 1; /* elements between a key's dimensions */
    int dk = a->dk;
    XV sc = xv_set1(a->scale);
    xa_pf cur = *pfp, *pf = &cur; /* in registers, as in xa_scores */
    for (int p0 = base; p0 < hi; p0 += XW) {
        const float *kr[XW];
        XV acc[XW];
#pragma GCC unroll 16
        for (int j = 0; j < XW; j++) {
            int p = p0 + j < hi ? p0 + j : p0;
            kr[j] = tiled ? kf + (int64_t)(p - p % T) * ldk + p % T : kf + (int64_t)p * ldk;
            acc[j] = xv_zero();
        }
        for (int d = 0; d < dk; d++) {
            xa_prefetch(pf);
            XV qv = xv_loadu(qt + (int64_t)d * XW);
#pragma GCC unroll 16
            for (int j = 0; j < XW; j++)
                acc[j] = xv_fma(xv_set1(kr[j][d * ds]), qv, acc[j]);
        }
        xv_transpose(acc);
#pragma GCC unroll 16
        for (int w = 0; w < XW; w++)
            xa_put_scores(acc[w], sc, p0, lo, hi, s[w] + (p0 - base), &vmax[w]);
    }
    *pfp = cur;
}

/* acc[w][d0, d0 + XA_VD * XW) (of which `left` lanes are real, all when
 * !tail) = acc * al[w] + sum over keys [lo, hi) of e[w][p - base] * v_p,
 * for m (<= XA_VQ) queries sharing the value loads; m and tail are
 * constants where inlined. */
AI XV xa_vload(const float *p, int c, int tail, int left)
{
    return tail ? xv_load_below(p + c * XW, left - c * XW) : xv_loadu(p + c * XW);
}

AI void xa_values(const ms_attn_step *a, int m, int tail, int bf16, float *const *acc, int d0,
                  int left, const float *al, float *const *e, int base, int lo, int hi,
                  xa_pf *pfp)
{
    xa_pf cur = *pfp, *pf = &cur;
    XV r[XA_VQ][XA_VD];
#pragma GCC unroll 4
    for (int w = 0; w < m; w++)
#pragma GCC unroll 4
        for (int c = 0; c < XA_VD; c++)
            r[w][c] = xv_mul(xa_vload(acc[w] + d0, c, tail, left), xv_set1(al[w]));
    for (int p = lo; p < hi; p++) {
        const float *v = a->v + (int64_t)p * a->ldv + d0;
        XV x[XA_VD];
        xa_prefetch(pf);
        xa_prefetch(pf);
#pragma GCC unroll 4
        for (int c = 0; c < XA_VD; c++)
            x[c] = bf16 ? xa_row(a->v, a->ldv, 1, p, d0 + c * XW, left - c * XW)
                        : xa_vload(v, c, tail, left);
#pragma GCC unroll 4
        for (int w = 0; w < m; w++) {
            XV ew = xv_set1(e[w][p - base]);
#pragma GCC unroll 4
            for (int c = 0; c < XA_VD; c++)
                r[w][c] = xv_fma(ew, x[c], r[w][c]);
        }
    }
#pragma GCC unroll 4
    for (int w = 0; w < m; w++)
#pragma GCC unroll 4
        for (int c = 0; c < XA_VD; c++) {
            if (tail)
                xv_store_below(acc[w] + d0 + c * XW, left - c * XW, r[w][c]);
            else
                xv_storeu(acc[w] + d0 + c * XW, r[w][c]);
        }
    *pfp = cur;
}

/* Queries i0 .. i0 + m - 1 of the step (m <= XA_GROUP, or m == XA_WIDE),
 * which all see keys [lo, hi); *widened: bf16 keys already widened into
 * the scratch by an earlier wide group of the step. */
static void xa_group(const ms_attn_step *a, int i0, int m, xa_pf *pf, int *widened)
{
    int lo = a->lo[i0], hi = a->hi[i0], base = lo - lo % XW, dk = a->dk;
    const float *q[XA_MAX];
    float *s[XA_MAX], *acc[XA_MAX], al[XA_MAX];
    XV vmax[XA_MAX];
    for (int w = 0; w < m; w++) {
        q[w] = a->q[i0 + w];
        s[w] = a->s + w * MS_ATTN_SROW;
        acc[w] = a->st[i0 + w] + 2;
        vmax[w] = xv_set1(-INFINITY);
    }
    if (m == XA_WIDE) {
        /* scratch: the scores, the queries transposed, bf16 keys widened */
        float *qt = a->s + XA_WIDE * MS_ATTN_SROW, *kf = qt + (int64_t)XA_WIDE * dk;
        xa_queries_t(dk, q, qt);
        const float *k = a->k;
        int64_t ldk = a->ldk;
        if (a->bf16 && a->ktiled) { /* widened into f32 tiles, the same way */
            const int T = MS_KV_TILE;
            if (!*widened)
                for (int p0 = 0; p0 < a->n; p0 += XW)
                    for (int d = 0; d < dk; d += 2) {
                        XV ke, ko;
                        const uint32_t *kp = (const uint32_t *)a->k +
                                             (int64_t)(p0 - p0 % T) * (dk / 2) + (d / 2) * T + p0 % T;
                        float *o = kf + (int64_t)(p0 - p0 % T) * dk + d * T + p0 % T;
                        xv_load_pairs(kp, &ke, &ko);
                        xv_storeu(o, ke);
                        xv_storeu(o + T, ko);
                    }
            *widened = 1;
            k = kf;
            ldk = dk;
        } else if (a->bf16) { /* the step's keys, widened by its first wide group */
            if (!*widened)
                for (int p = 0; p < a->n; p++)
                    for (int c = 0; c < dk; c += XW)
                        xv_store_below(kf + (int64_t)p * dk + c, dk - c,
                                       xa_row(a->k, a->ldk, 1, p, c, dk - c));
            *widened = 1;
            k = kf;
            ldk = dk;
        }
        if (a->ktiled)
            xa_scores_wide(a, 1, k, ldk, qt, base, lo, hi, s, vmax, pf);
        else
            xa_scores_wide(a, 0, k, ldk, qt, base, lo, hi, s, vmax, pf);
    } else if (a->ktiled && a->bf16) {
        xa_scores_m(a, m, XA_TILES_BF16, q, a->k, base, lo, hi, s, vmax, pf);
    } else if (a->ktiled) {
        xa_scores_m(a, m, XA_TILES_F32, q, a->k, base, lo, hi, s, vmax, pf);
    } else {
        /* the transpose goes where a wide group keeps its widened keys */
        float *kt = a->s + XA_GROUP * MS_ATTN_SROW;
        *widened = 0;
        if (a->bf16)
            xa_keys_t(a, 1, base, hi, kt);
        else
            xa_keys_t(a, 0, base, hi, kt);
        xa_scores_m(a, m, XA_KT, q, kt, base, lo, hi, s, vmax, pf);
    }
    for (int w = 0; w < m; w++) {
        float *st = a->st[i0 + w];
        float mc = xv_hmax(vmax[w]), mold = st[0];
        float mx = mold > mc ? mold : mc;
        float alpha = expf(mold - mx);
        XV mv = xv_set1(mx), lsum = xv_zero();
        for (int p0 = base; p0 < hi; p0 += XW) {
            XV e = xv_exp(xv_sub(xv_loadu(s[w] + (p0 - base)), mv));
            if (p0 < lo || p0 + XW > hi)
                e = xv_keep(e, lo - p0, hi - p0, 0.0f);
            xv_storeu(s[w] + (p0 - base), e);
            lsum = xv_add(lsum, e);
        }
        st[1] = alpha * st[1] + xv_hsum(lsum);
        st[0] = mx;
        al[w] = alpha;
    }
    for (int d0 = 0; d0 < a->dv; d0 += XA_VD * XW) {
        int left = a->dv - d0, tail = left < XA_VD * XW;
        for (int w = 0; w < m; w += XA_VQ) {
            int mw = m - w < XA_VQ ? m - w : XA_VQ;
#define XA_V(M)                                                                      \
    case M:                                                                          \
        if (a->bf16)                                                                 \
            xa_values(a, M, 1, 1, acc + w, d0, left, al + w, s + w, base, lo, hi, pf); \
        else if (tail)                                                               \
            xa_values(a, M, 1, 0, acc + w, d0, left, al + w, s + w, base, lo, hi, pf); \
        else                                                                         \
            xa_values(a, M, 0, 0, acc + w, d0, left, al + w, s + w, base, lo, hi, pf); \
        break;
            switch (mw) { XA_V(1) XA_V(2) XA_V(3) XA_V(4) }
#undef XA_V
        }
    }
}

/* Consecutive queries with the same keys go as one group: XA_WIDE of
 * them by the transposed queries, else up to XA_GROUP. */
static void attn_x(const ms_attn_step *a)
{
    xa_pf pf = xa_pf_of(a);
    int widened = 0;
    for (int i = 0; i < a->nq;) {
        int m = 1;
        while (i + m < a->nq && m < XA_MAX && a->lo[i + m] == a->lo[i] && a->hi[i + m] == a->hi[i])
            m++;
        if (m != XA_WIDE && m > XA_GROUP)
            m = XA_GROUP;
        xa_group(a, i, m, &pf, &widened);
        i += m;
    }
}

/* Columns [0, n) of a row of format f (BF16 or FP8) at p, decoded into
 * dst times sc. */
AI void xa_widen_span(ms_wfmt f, const uint8_t *p, int64_t n, XV sc, float *dst)
{
    int64_t c = 0;
    for (; c + 2 * XW <= n; c += 2 * XW) {
        xw2 w = x_decode(f, p + ms_col_bytes(f, c));
        xv_storeu(dst + c, xv_mul(w.lo, sc));
        xv_storeu(dst + c + XW, xv_mul(w.hi, sc));
    }
    if (c < n) {
        int k = (int)(n - c);
        xw2 w = x_decode_part(f, p + ms_col_bytes(f, c), k);
        xv_store_below(dst + c, k, xv_mul(w.lo, sc));
        xv_store_below(dst + c + XW, k - XW, xv_mul(w.hi, sc));
    }
}

static void widen_x(ms_kvfmt fmt, const void *src, const float *scale, int group, int64_t n,
                    float *dst)
{
    const uint8_t *p = src;
    if (fmt == MS_KV_F32) {
        memcpy(dst, src, (size_t)n * 4);
    } else if (fmt == MS_KV_BF16) {
        xa_widen_span(MS_WFMT_BF16, p, n, xv_set1(1.0f), dst);
    } else {
        /* scale * 2^8 is exact, so each element rounds once, as e4m3 * scale */
        for (int64_t g = 0; g * group < n; g++) {
            int64_t c = g * group, k = n - c < group ? n - c : group;
            xa_widen_span(MS_WFMT_FP8_BLOCK, p + c, k, xv_set1(scale[g] * X_FP8_UNIT), dst + c);
        }
    }
}

#endif

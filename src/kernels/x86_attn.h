/* The attention step (ms_attn_step) and the KV-cache widening of the SIMD
 * op tables, over the same primitives as x86_rows.h plus these (static
 * inline, defined by the ISA file before including this):
 *
 *   xv_mul, xv_sub, xv_max        lane-wise
 *   xv_storeu(p, v), xv_store_below(p, k, v)   all lanes / the first k
 *   xv_keep(v, lo, hi, fill)      lanes [lo, hi) of v, the others fill
 *   xv_hmax(v)                    the largest lane
 *   xv_sum_lanes(v[XW])           lane j = the lanes of v[j] summed in a
 *                                 fixed tree (a transposing reduction)
 *   xv_exp(v)                     glibc's libmvec expf of every lane
 *   X_FP8_UNIT                    what x_decode's FP8 values lack (2^8)
 *
 * One query at a time, so that a query's bits never depend on the others:
 *   scores: each key's products q[c] * k[c] in one FMA chain over dk, XW
 *     keys reduced together by xv_sum_lanes, times scale;
 *   weights: exp(s - m') by xv_exp, summed lane-wise in key order and
 *     then by xv_hsum;
 *   values: acc = acc * a, then one FMA per key in key order.
 * A query's q stays in registers when dk <= XA_QREG * XW. */
#ifndef MS_KERNELS_X86_ATTN_H
#define MS_KERNELS_X86_ATTN_H

#include <math.h>

#define XA_QREG 8 /* query vectors held in registers */
#define XA_VREG 8 /* accumulator vectors per pass over the values */

/* Lanes of q . k (dk columns) to be summed; q in qv[0..nc) when nc > 0,
 * else read from qm. The last vector of either is masked to dk. */
AI XV xa_dot(const XV *qv, int nc, const float *qm, int dk, const float *k)
{
    XV acc = xv_zero();
    int last = (dk - 1) / XW;
    if (nc > 0) {
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            acc = xv_fma(qv[c], c < last ? xv_loadu(k + c * XW) : xv_load_below(k + c * XW,
                                                                                dk - c * XW),
                         acc);
        return acc;
    }
    for (int c = 0; c < last; c++)
        acc = xv_fma(xv_loadu(qm + c * XW), xv_loadu(k + c * XW), acc);
    return xv_fma(xv_load_below(qm + last * XW, dk - last * XW),
                  xv_load_below(k + last * XW, dk - last * XW), acc);
}

/* Query i of the step; nc as in xa_dot (a constant where inlined). */
AI void xa_query(const ms_attn_step *a, int i, int nc)
{
    const float *q = a->q[i];
    int lo = a->lo[i], hi = a->hi[i], dk = a->dk, base = lo - lo % XW;
    int last = (dk - 1) / XW;
    XV qv[XA_QREG];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        qv[c] = c < last ? xv_loadu(q + c * XW) : xv_load_below(q + c * XW, dk - c * XW);
    float *s = a->s;
    XV vmax = xv_set1(-INFINITY), sc = xv_set1(a->scale);
    for (int p0 = base; p0 < hi; p0 += XW) {
        XV part[XW];
        if (p0 >= lo && p0 + XW <= hi) {
#pragma GCC unroll 16
            for (int j = 0; j < XW; j++)
                part[j] = xa_dot(qv, nc, q, dk, a->k + (int64_t)(p0 + j) * a->ldk);
        } else {
            for (int j = 0; j < XW; j++) {
                int p = p0 + j;
                part[j] = p >= lo && p < hi ? xa_dot(qv, nc, q, dk, a->k + (int64_t)p * a->ldk)
                                            : xv_zero();
            }
        }
        XV sv = xv_keep(xv_mul(xv_sum_lanes(part), sc), lo - p0, hi - p0, -INFINITY);
        xv_storeu(s + (p0 - base), sv);
        vmax = xv_max(vmax, sv);
    }
    float *st = a->st[i], *acc = st + 2;
    float mc = xv_hmax(vmax), mold = st[0];
    float m = mold > mc ? mold : mc;
    float alpha = expf(mold - m);
    XV mv = xv_set1(m), lsum = xv_zero();
    for (int p0 = base; p0 < hi; p0 += XW) {
        XV e = xv_keep(xv_exp(xv_sub(xv_loadu(s + (p0 - base)), mv)), lo - p0, hi - p0, 0.0f);
        xv_storeu(s + (p0 - base), e);
        lsum = xv_add(lsum, e);
    }
    st[1] = alpha * st[1] + xv_hsum(lsum);
    st[0] = m;
    XV al = xv_set1(alpha);
    for (int d0 = 0; d0 < a->dv; d0 += XA_VREG * XW) {
        int left = a->dv - d0, nd = (left + XW - 1) / XW;
        nd = nd < XA_VREG ? nd : XA_VREG;
        XV r[XA_VREG];
        for (int c = 0; c < nd; c++)
            r[c] = xv_mul(xv_load_below(acc + d0 + c * XW, left - c * XW), al);
        for (int p = lo; p < hi; p++) {
            XV e = xv_set1(s[p - base]);
            const float *v = a->v + (int64_t)p * a->ldv + d0;
            for (int c = 0; c < nd; c++)
                r[c] = xv_fma(e, xv_load_below(v + c * XW, left - c * XW), r[c]);
        }
        for (int c = 0; c < nd; c++)
            xv_store_below(acc + d0 + c * XW, left - c * XW, r[c]);
    }
}

static void attn_x(const ms_attn_step *a)
{
    int nc = (a->dk + XW - 1) / XW;
    for (int i = 0; i < a->nq; i++) {
        switch (nc) {
        case 1: xa_query(a, i, 1); break;
        case 2: xa_query(a, i, 2); break;
        case 3: xa_query(a, i, 3); break;
        case 4: xa_query(a, i, 4); break;
        case 5: xa_query(a, i, 5); break;
        case 6: xa_query(a, i, 6); break;
        case 7: xa_query(a, i, 7); break;
        case 8: xa_query(a, i, 8); break;
        default: xa_query(a, i, 0); break;
        }
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

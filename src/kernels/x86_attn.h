/* The attention step (ms_attn_step) and the KV-cache widening of the SIMD
 * op tables, over the same primitives as x86_rows.h plus these (static
 * inline, defined by the ISA file before including this):
 *
 *   xv_mul, xv_sub, xv_max        lane-wise
 *   xv_storeu(p, v), xv_store_below(p, k, v)   all lanes / the first k
 *   xv_keep(v, lo, hi, fill)      lanes [lo, hi) of v, the others fill
 *   xv_hmax(v)                    the largest lane
 *   xv_sum_pairs(a, b), xv_sum_quads(a, b), xv_sum_blocks(u[XW / 4])
 *                                 the steps of a transposing reduction: XW
 *                                 vectors in, lane j = vector j's lanes
 *                                 summed in a fixed tree
 *   xv_exp(v)                     glibc's libmvec expf of every lane
 *   X_FP8_UNIT                    what x_decode's FP8 values lack (2^8)
 *
 * One query at a time, so that a query's bits never depend on the others:
 *   scores: each key's products q[c] * k[c] in one FMA chain over dk, XW
 *     keys reduced together by xv_sum_lanes, times scale;
 *   weights: exp(s - m') by xv_exp, summed lane-wise in key order and
 *     then by xv_hsum;
 *   values: acc = acc * a plus two chains of one FMA per key (even and
 *     odd keys), added at the end.
 * A query's q stays in registers when dk <= XA_QREG * XW. */
#ifndef MS_KERNELS_X86_ATTN_H
#define MS_KERNELS_X86_ATTN_H

#include <math.h>

#define XA_QREG 8 /* query vectors held in registers */
#define XA_VREG 8 /* accumulator vectors per pass over the values */

/* Lanes of q . k (dk columns) to be summed; q in qv[0..nc) when nc > 0
 * (its last vector partial, of kl lanes, when tail), else read from qm.
 * nc and tail are constants where inlined. */
AI XV xa_dot(const XV *qv, int nc, int tail, int kl, const float *qm, int dk, const float *k)
{
    XV acc = xv_zero();
    if (nc > 0) {
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            acc = xv_fma(qv[c], tail && c == nc - 1 ? xv_load_below(k + c * XW, kl)
                                                    : xv_loadu(k + c * XW), acc);
        return acc;
    }
    int last = (dk - 1) / XW;
    for (int c = 0; c < last; c++)
        acc = xv_fma(xv_loadu(qm + c * XW), xv_loadu(k + c * XW), acc);
    return xv_fma(xv_load_below(qm + last * XW, dk - last * XW),
                  xv_load_below(k + last * XW, dk - last * XW), acc);
}

/* The XW scores of keys p0 .. p0 + XW - 1, lane j = q . k_(p0+j) summed
 * by the transposing reduction, folded as the keys come so that few
 * vectors are live; keys outside [lo, hi) are skipped (zero lanes). */
AI XV xa_scores(const ms_attn_step *a, const XV *qv, int nc, int tail, int kl, const float *q,
                int p0, int lo, int hi)
{
    XV u[XW / 4];
    const float *k = a->k + (int64_t)p0 * a->ldk;
    int full = p0 >= lo && p0 + XW <= hi;
#pragma GCC unroll 8
    for (int j = 0; j < XW / 2; j++) {
        int p = p0 + 2 * j;
        const float *k0 = k + 2 * j * a->ldk, *k1 = k0 + a->ldk;
        XV d0 = full || (p >= lo && p < hi) ? xa_dot(qv, nc, tail, kl, q, a->dk, k0) : xv_zero();
        XV d1 = full || (p + 1 >= lo && p + 1 < hi) ? xa_dot(qv, nc, tail, kl, q, a->dk, k1)
                                                    : xv_zero();
        XV t = xv_sum_pairs(d0, d1);
        /* pairs (2j, 2j + 1) and (2j + 2, 2j + 3) make quad j / 2 */
        u[j / 2] = j % 2 == 0 ? t : xv_sum_quads(u[j / 2], t);
    }
    return xv_sum_blocks(u);
}

/* acc[0, nd * XW) (of which `left` lanes are real) = acc * al + the sum
 * over keys [lo, hi) of e[p - base] * v_p, in registers: even and odd keys
 * in two chains (the FMA latency, not the loads, bounds one chain), added
 * at the end. nd and tail (the last vector partial) are constants where
 * inlined, so that nothing but the values touches memory in the loop. */
AI XV xa_vload(const float *p, int c, int nd, int tail, int kl)
{
    return tail && c == nd - 1 ? xv_load_below(p + c * XW, kl) : xv_loadu(p + c * XW);
}

AI void xa_values(const ms_attn_step *a, float *acc, int d0, int nd, int tail, int left, XV al,
                  const float *e, int base, int lo, int hi)
{
    XV r0[XA_VREG], r1[XA_VREG];
    int kl = left - (nd - 1) * XW; /* lanes of the last vector */
#pragma GCC unroll 8
    for (int c = 0; c < nd; c++) {
        r0[c] = xv_mul(xa_vload(acc + d0, c, nd, tail, kl), al);
        r1[c] = xv_zero();
    }
    int p = lo;
    for (; p + 1 < hi; p += 2) {
        XV w0 = xv_set1(e[p - base]), w1 = xv_set1(e[p + 1 - base]);
        const float *v0 = a->v + (int64_t)p * a->ldv + d0, *v1 = v0 + a->ldv;
#pragma GCC unroll 8
        for (int c = 0; c < nd; c++) {
            r0[c] = xv_fma(w0, xa_vload(v0, c, nd, tail, kl), r0[c]);
            r1[c] = xv_fma(w1, xa_vload(v1, c, nd, tail, kl), r1[c]);
        }
    }
    if (p < hi) {
        XV w0 = xv_set1(e[p - base]);
        const float *v0 = a->v + (int64_t)p * a->ldv + d0;
#pragma GCC unroll 8
        for (int c = 0; c < nd; c++)
            r0[c] = xv_fma(w0, xa_vload(v0, c, nd, tail, kl), r0[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < nd; c++) {
        XV r = xv_add(r0[c], r1[c]);
        if (tail && c == nd - 1)
            xv_store_below(acc + d0 + c * XW, kl, r);
        else
            xv_storeu(acc + d0 + c * XW, r);
    }
}

/* Query i of the step; nc and tail as in xa_dot (constants where
 * inlined). */
AI void xa_query(const ms_attn_step *a, int i, int nc, int tail)
{
    const float *q = a->q[i];
    int lo = a->lo[i], hi = a->hi[i], dk = a->dk, base = lo - lo % XW;
    int kl = dk - (nc - 1) * XW;
    XV qv[XA_QREG];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        qv[c] = tail && c == nc - 1 ? xv_load_below(q + c * XW, kl) : xv_loadu(q + c * XW);
    float *s = a->s;
    XV vmax = xv_set1(-INFINITY), sc = xv_set1(a->scale);
    for (int p0 = base; p0 < hi; p0 += XW) {
        XV v = xv_mul(xa_scores(a, qv, nc, tail, kl, q, p0, lo, hi), sc);
        if (p0 < lo || p0 + XW > hi)
            v = xv_keep(v, lo - p0, hi - p0, -INFINITY);
        xv_storeu(s + (p0 - base), v);
        vmax = xv_max(vmax, v);
    }
    float *st = a->st[i], *acc = st + 2;
    float mc = xv_hmax(vmax), mold = st[0];
    float m = mold > mc ? mold : mc;
    float alpha = expf(mold - m);
    XV mv = xv_set1(m), lsum = xv_zero();
    for (int p0 = base; p0 < hi; p0 += XW) {
        XV e = xv_exp(xv_sub(xv_loadu(s + (p0 - base)), mv));
        if (p0 < lo || p0 + XW > hi)
            e = xv_keep(e, lo - p0, hi - p0, 0.0f);
        xv_storeu(s + (p0 - base), e);
        lsum = xv_add(lsum, e);
    }
    st[1] = alpha * st[1] + xv_hsum(lsum);
    st[0] = m;
    XV al = xv_set1(alpha);
    for (int d0 = 0; d0 < a->dv; d0 += XA_VREG * XW) {
        int left = a->dv - d0, nd = (left + XW - 1) / XW;
        left = nd < XA_VREG ? left : XA_VREG * XW;
#define XA_V(N)                                                                      \
    case N:                                                                          \
        if (left % XW)                                                               \
            xa_values(a, acc, d0, N, 1, left, al, s, base, lo, hi);                  \
        else                                                                         \
            xa_values(a, acc, d0, N, 0, left, al, s, base, lo, hi);                  \
        break;
        switch (nd < XA_VREG ? nd : XA_VREG) {
        XA_V(1) XA_V(2) XA_V(3) XA_V(4) XA_V(5) XA_V(6) XA_V(7) XA_V(8)
        }
#undef XA_V
    }
}

static void attn_x(const ms_attn_step *a)
{
    int nc = (a->dk + XW - 1) / XW, tail = a->dk % XW != 0;
    for (int i = 0; i < a->nq; i++) {
#define XA_Q(N)                                                                      \
        case N:                                                                      \
            if (tail)                                                                \
                xa_query(a, i, N, 1);                                                \
            else                                                                     \
                xa_query(a, i, N, 0);                                                \
            break;
        switch (nc > XA_QREG ? 0 : nc) {
        XA_Q(1) XA_Q(2) XA_Q(3) XA_Q(4) XA_Q(5) XA_Q(6) XA_Q(7) XA_Q(8)
#undef XA_Q
        default: xa_query(a, i, 0, 0); break;
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

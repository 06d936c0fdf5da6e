/* The column-order skeleton of the SIMD op tables (F32, BF16, F16, FP8;
 * MXFP4 runs the lane-order loop of x86_lanes.h): one accumulation scheme
 * for every ISA, which supplies only its vector primitives and decoders.
 * Included by each x86_*.c after it defines (static inline):
 *
 *   XV                  its float vector type; XW its lanes; a chunk is
 *                       2 * XW columns (lanes of the low half FMA into acc0,
 *                       of the high half into acc1)
 *   xw2                 struct { XV lo, hi; }: one decoded chunk
 *   xv_zero(), xv_fma(a, b, c), xv_add(a, b), xv_set1(f), xv_loadu(p),
 *   xv_load_below(p, k) the first k lanes of p (k <= 0: none, >= XW: all),
 *                       the others zero and never read
 *   xv_hsum(v)          the lanes summed in a fixed tree
 *   x_decode(f, p)      the full chunk at p
 *   x_decode_part(f, p, k)  its first k (1 .. 2*XW-1) columns, nothing past
 *                       them read
 *   x_scale(w, i)       FP8 block scale entry i times whatever factor the
 *                       ISA's decode left out (a power of two: exact)
 *   X_GROUP(f)          tokens sharing a decoded chunk (<= X_MAX_NT)
 *   X_MAX_NT, X_PANEL_X_BYTES, X_ROW_BLOCK
 *   X_PREFETCH(f, n)    bytes to prefetch ahead for format f and n tokens
 *
 * The scheme, the same for every (token, row) so that batching, row ranges
 * and thread counts never change a bit: columns in chunks, a ragged last
 * chunk zero-filled; FP8 sums each scale block (block_cols columns) into
 * partials zeroed per block, then acc = fma(p, scale, acc);
 * the row result is hsum(acc0 + acc1). Tokens share each decoded chunk in
 * groups, each in its own registers; for a batch, columns go in panels
 * whose accumulators wait in memory between panels, rows in blocks that
 * stay in L2 across token groups. None of it changes the operations a
 * (token, row) sees. */
#ifndef MS_KERNELS_X86_ROWS_H
#define MS_KERNELS_X86_ROWS_H

/* The fma op: 12 independent chains, enough for two FMA pipes of 4
 * cycles' latency (with 8 a Zen 5 core reached the same 196-211 GFLOP/s,
 * with 4 half of it: docs/perf.md, "Batched products against the core's
 * FMA peak"). */
enum { X_FMA_CHAINS = 12 };
static double fma_x(int64_t iters, float *sink)
{
    XV a[X_FMA_CHAINS], m = xv_set1(0.999999f), c = xv_set1(1e-7f);
#pragma GCC unroll 12
    for (int i = 0; i < X_FMA_CHAINS; i++)
        a[i] = xv_set1(1.0f + (float)i);
    for (int64_t k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < X_FMA_CHAINS; i++)
            a[i] = xv_fma(a[i], m, c);
        __asm__ volatile("" : "+v"(m)); /* keep the loop: m may have changed */
    }
    XV s = xv_zero();
#pragma GCC unroll 12
    for (int i = 0; i < X_FMA_CHAINS; i++)
        s = xv_add(s, a[i]);
    *sink = xv_hsum(s);
    return 2.0 * XW * X_FMA_CHAINS * (double)iters;
}

/* Adds columns [c0, c1) of a row to a0/a1 for nt tokens, prefetching pf
 * bytes ahead. */
AI void span(ms_wfmt f, int nt, const uint8_t *row, const float *const *x, int64_t c0,
             int64_t c1, int64_t pf, XV *a0, XV *a1)
{
    int64_t c = c0;
    for (; c + 2 * XW <= c1; c += 2 * XW) {
        /* the hardware prefetcher alone leaves single-thread bandwidth on
         * the table */
        _mm_prefetch((const char *)row + ms_col_bytes(f, c) + pf, _MM_HINT_T0);
        xw2 w = x_decode(f, row + ms_col_bytes(f, c));
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            a0[t] = xv_fma(w.lo, xv_loadu(x[t] + c), a0[t]);
            a1[t] = xv_fma(w.hi, xv_loadu(x[t] + c + XW), a1[t]);
        }
    }
    if (c < c1) {
        int k = (int)(c1 - c);
        xw2 w = x_decode_part(f, row + ms_col_bytes(f, c), k);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            a0[t] = xv_fma(w.lo, xv_load_below(x[t] + c, k), a0[t]);
            a1[t] = xv_fma(w.hi, xv_load_below(x[t] + c + XW, k - XW), a1[t]);
        }
    }
}

/* FP8, columns [c0, c1) (c0 on a block boundary): each block summed into
 * partials, then folded in with its scale. */
AI void fp8_blocks(int nt, const ms_mat *w, int64_t r, const uint8_t *row,
                   const float *const *x, int64_t c0, int64_t c1, int64_t pf, XV *a0, XV *a1)
{
    const ms_wfmt f = MS_WFMT_FP8_BLOCK;
    int64_t bc = w->block_cols, s0 = ms_fp8_scale_row(w, r);
    for (int64_t c = c0; c < c1; c += bc) {
        XV p0[X_MAX_NT], p1[X_MAX_NT];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            p0[t] = p1[t] = xv_zero();
        span(f, nt, row, x, c, c + bc < c1 ? c + bc : c1, pf, p0, p1);
        XV s = xv_set1(x_scale(w, s0 + c / bc));
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            a0[t] = xv_fma(p0[t], s, a0[t]);
            a1[t] = xv_fma(p1[t], s, a1[t]);
        }
    }
}

/* The accumulators of one (token, row), kept in memory between panels;
 * storing and reloading them changes no bit. */
typedef struct acc2 {
    XV a0, a1;
} acc2;

/* Adds columns [c0, c1) of row r to st[0..nt) (c0 on a chunk or block
 * boundary), in the order a whole-row pass would. */
AI void row_panel(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const float *const *x,
                  int64_t c0, int64_t c1, int64_t pf, acc2 *st)
{
    const uint8_t *row = (const uint8_t *)w->w + ms_col_bytes(f, w->cols) * r;
    XV a0[X_MAX_NT], a1[X_MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        a0[t] = st[t].a0;
        a1[t] = st[t].a1;
    }
    if (f == MS_WFMT_FP8_BLOCK)
        fp8_blocks(nt, w, r, row, x, c0, c1, pf, a0, a1);
    else
        span(f, nt, row, x, c0, c1, pf, a0, a1);
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        st[t].a0 = a0[t];
        st[t].a1 = a1[t];
    }
}

AI void row_panel_n(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const float *const *x,
                    int64_t c0, int64_t c1, int64_t pf, acc2 *st)
{
    switch (nt) {
    case 1: row_panel(f, 1, w, r, x, c0, c1, pf, st); break;
    case 2: row_panel(f, 2, w, r, x, c0, c1, pf, st); break;
    case 3: row_panel(f, 3, w, r, x, c0, c1, pf, st); break;
    default: row_panel(f, 4, w, r, x, c0, c1, pf, st); break;
    }
}

/* Columns per panel: whole rows for one token (x stays in L1 anyway and
 * the weight stream stays sequential); for a batch, panels whose x for a
 * token group fits L1, since streaming x from L2 for every row was the
 * bottleneck. A multiple of the format's block so no block straddles. */
AI int64_t panel_cols(ms_wfmt f, const ms_mat *w, int n, int group)
{
    int64_t unit = f == MS_WFMT_FP8_BLOCK ? w->block_cols : 2 * XW;
    int64_t p = n == 1 ? w->cols : ms_ceil_div(X_PANEL_X_BYTES / (4 * group), unit) * unit;
    return p < w->cols ? p : w->cols;
}

/* Rows [r0, r1) of Y = X W^T for n tokens (the ms_rows_fn contract). */
AI void rows_generic(ms_wfmt f, const ms_mat *w, const float *X, int n, int64_t ldx,
                     float *Y, int64_t ldy, int64_t r0, int64_t r1)
{
    const int group = X_GROUP(f);
    int64_t panel = panel_cols(f, w, n, group);
    const int64_t pf = X_PREFETCH(f, n);
    for (int64_t rb = r0; rb < r1; rb += X_ROW_BLOCK) {
        int64_t re = rb + X_ROW_BLOCK < r1 ? rb + X_ROW_BLOCK : r1;
        for (int t0 = 0; t0 < n; t0 += group) {
            int nt = n - t0 < group ? n - t0 : group;
            const float *x[X_MAX_NT];
            acc2 st[X_ROW_BLOCK][X_MAX_NT];
            for (int t = 0; t < nt; t++)
                x[t] = X + (t0 + t) * ldx;
            for (int64_t r = rb; r < re; r++)
                for (int t = 0; t < nt; t++)
                    st[r - rb][t].a0 = st[r - rb][t].a1 = xv_zero();
            for (int64_t c0 = 0; c0 < w->cols; c0 += panel)
                for (int64_t r = rb; r < re; r++)
                    row_panel_n(f, nt, w, r, x, c0, c0 + panel < w->cols ? c0 + panel : w->cols,
                                pf, st[r - rb]);
            for (int64_t r = rb; r < re; r++)
                for (int t = 0; t < nt; t++)
                    Y[(t0 + t) * ldy + r] = xv_hsum(xv_add(st[r - rb][t].a0, st[r - rb][t].a1));
        }
    }
}

/* rows_<name>: the ms_rows_fn of one format over the skeleton. */
#define X_ROWS(name, fmt)                                                                \
    static void rows_##name(const ms_mat *w, const float *X, int n, int64_t ldx,         \
                            float *Y, int64_t ldy, int64_t r0, int64_t r1)               \
    {                                                                                    \
        rows_generic(fmt, w, X, n, ldx, Y, ldy, r0, r1);                                 \
    }

#endif

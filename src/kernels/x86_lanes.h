/* The loop of the lane-order kernels (MXFP4 in the AVX2 table; BF16,
 * MXFP4 and FP8 in the AVX-512 and fast tables; the int8 tables): x
 * transposed (or converted)
 * once per call into the order the decoded lanes need, then rows over
 * panels. Included after the ISA file defines (static inline):
 *
 *   LN_XT          the element type of the transposed x (float, uint16_t)
 *   LN_BLOCK       columns per transposed unit (ln_transpose's k <= it)
 *   LN_PANEL       columns per panel (a multiple of LN_BLOCK)
 *   LN_XBUF        elements of x held per pass (per thread)
 *   LN_ROW_BLOCK   rows sharing a pass over the token groups
 *   LN_NT          tokens sharing decoded weights: 2 or 4, a literal (#if)
 *   ln_transpose(f, x, k, out)   one unit of k columns, zero past k
 *   ln_row_panel(f, nt, w, r, xp, c0, c1, out)  the sums of columns
 *                  [c0, c1) of row r for nt tokens (xp relative to c0)
 *   LN_PANEL_AHEAD (optional) ln_row_panel takes `ahead` before out: -1 in
 *                  a whole row (its own prefetch into L1), else the bytes
 *                  to the same panel one row block on, asked for into L2
 *                  beside each 64 bytes it reads (0: asked for already);
 *                  ln_ahead_in_panel(f) says for which formats
 *   LN_ROW_PAIR    (optional, with LN_PANEL_AHEAD) ln_row_pair(f, nt, w, r,
 *                  xp, c0, c1, ahead, out, out2): ln_row_panel of rows r
 *                  and r + 1 at once, the same bits as two calls, called
 *                  only for the formats ln_pairs(f) names
 *
 * Each panel of a row is summed alone and added to the row's result in
 * panel order (Y = s0, then Y += s1, ...): the same operations whether a
 * row's panels come in one call (a token group over whole rows) or one
 * call each (a batch: see ln_rows). So a (token, row) gets the same bits
 * alone, batched or in any row range. */
#ifndef MS_KERNELS_X86_LANES_H
#define MS_KERNELS_X86_LANES_H

typedef void (*ln_rows_fn)(const ms_mat *, int64_t, int64_t, const LN_XT *const *, int64_t,
                           int64_t, int64_t, float *, int64_t);

/* A token group takes whole rows (x transposed once, the weights streamed
 * in order) while its x fits beside them in L1; else rows go panel-major,
 * LN_ROW_BLOCK rows per panel, so that x's panel stays in L1: with whole
 * rows of 7168 columns (28 KiB of x) the x loads missed L1 and an FP8
 * matvec ran at 9 GB/s on a Zen 4 core (32 KiB of L1), against 15-16 at
 * 4096. MXFP4's weights pass through L1 at half a byte a column, a quarter
 * of BF16's, so its x may take more: 2 tokens of 2880 columns (23 KiB of
 * float x) then take whole rows, and on Zen 4 their products ran 10-14%
 * faster (bench/kernels --batch 2, exact AVX-512; AVX2 +5%; 4 tokens of
 * bf16 x in the fast table +4%). A CPU with a larger L1 sets its own bound
 * for every format (ms_prefetch_bytes.x_l1, dispatch.c). */
enum { LN_X_L1 = 16 << 10, LN_X_L1_MXFP4 = 24 << 10 };

AI int64_t ln_x_l1(ms_wfmt f)
{
    if (ms_prefetch_bytes.x_l1)
        return ms_prefetch_bytes.x_l1;
    return f == MS_WFMT_MXFP4 ? LN_X_L1_MXFP4 : LN_X_L1;
}

/* Whole rows are one stream, but the weights come from the page cache in
 * 4 KiB pages, at whose boundaries the hardware prefetcher stops: on AMD
 * each row panel also asks for its bytes ms_prefetch_bytes.rows (24 KiB,
 * whole rows) ahead, into L2 (dispatch.c). Not for MXFP4, whose matvec is
 * compute-bound on Zen 4: the extra instructions cost it 5-8% on one
 * thread (bench/kernels, every table). */

/* Panel-major rows are not one stream, so the hardware prefetcher does not
 * follow them: each row panel asks for its bytes one row block ahead, into
 * L2 (L1 holds x's panel). A batch does so in its first token group, which
 * brings each row block from memory (the other groups find it in L2): BF16
 * at 2880 columns, 2 and 4 tokens, one Zen 4 thread, went from 8-9 GB/s to
 * 16-23. */
AI void ln_prefetch_ahead(ms_wfmt f, const ms_mat *w, int64_t r, int64_t c0, int64_t c1,
                          int64_t ahead)
{
    const char *p = (const char *)w->w + ms_col_bytes(f, w->cols) * r + ms_col_bytes(f, c0);
    for (int64_t b = 0, e = ms_col_bytes(f, c1 - c0); b < e; b += 64)
        _mm_prefetch(p + ahead + b, _MM_HINT_T1);
}

/* A panel-major row panel is a short run of its row (2 KiB of BF16 at 1024
 * columns). Its own stream prefetch (into L1, some KiB further along the
 * row) asks for another panel of the next rows, which this pass does not
 * read, and the next row block, asked for into L2 by a loop of its own
 * before each row panel, did not keep the memory busy while the panel
 * computed. Where the table can (LN_PANEL_AHEAD), the row panel asks
 * instead, beside each 64 bytes it reads, for the same bytes one row block
 * on, into L2 (where ln_ahead_in_panel(f) says so): one Zen
 * 5 thread's products at 2880 columns from memory, exact BF16 2 tokens
 * 38.8 -> 43.7 GFLOP/s, 4 tokens 52.5-55.0 -> 62.5-66.3, fast BF16 4
 * tokens 59.8-71.2 -> 71.6-89.5, MXFP4 -5% to +9%, 8-32 tokens within
 * +-3%; the same bits (docs/perf.md, "A panel's prefetch beside its
 * loads"). Rows of one panel are one stream, and stay whole rows. */
#ifdef LN_PANEL_AHEAD
#define LN_PANEL_CALL(f, nt, w, r, xp, c0, c1, ahead, out)                              \
    ln_row_panel(f, nt, w, r, xp, c0, c1, ahead, out)
#else
#define LN_PANEL_CALL(f, nt, w, r, xp, c0, c1, ahead, out)                              \
    ln_row_panel(f, nt, w, r, xp, c0, c1, out)
AI int ln_ahead_in_panel(ms_wfmt f)
{
    (void)f;
    return 0;
}
#endif

/* A table without row pairs (LN_ROW_PAIR): ln_pairs says none, and
 * ln_row_pair (never called then) is two row panels. */
#ifndef LN_ROW_PAIR
AI int ln_pairs(ms_wfmt f)
{
    (void)f;
    return 0;
}
AI void ln_row_pair(ms_wfmt f, int nt, const ms_mat *w, int64_t r, const LN_XT *const *xp,
                    int64_t c0, int64_t c1, int64_t ahead, float *out, float *out2)
{
    (void)ahead;
    LN_PANEL_CALL(f, nt, w, r, xp, c0, c1, ahead, out);
    LN_PANEL_CALL(f, nt, w, r + 1, xp, c0, c1, ahead, out2);
}
#endif

/* Rows [r0, r1) of one panel [cb, ce) into Y (added to what Y holds when
 * cb > 0): in pairs where the format has them (LN_ROW_PAIR: each x load
 * then serves two rows) and there are several tokens, the last odd row
 * alone (a matvec is bound by memory, and read 10-30% less in pairs);
 * pf_ahead > 0: each row's bytes that far on asked for first (a whole-row
 * stream), and the row panel told -1; else ahead goes to the row panel. */
AI void ln_panel_rows(ms_wfmt f, int nt, const ms_mat *w, int64_t r0, int64_t r1,
                      const LN_XT *const *xp, int64_t cb, int64_t ce, int64_t ahead,
                      int64_t pf_ahead, float *Y, int64_t ldy)
{
    int64_t r = r0;
    if (nt > 1 && ln_pairs(f))
        for (; r + 1 < r1; r += 2) {
            float out[LN_NT], out2[LN_NT];
            if (pf_ahead) {
                ln_prefetch_ahead(f, w, r, cb, ce, pf_ahead);
                ln_prefetch_ahead(f, w, r + 1, cb, ce, pf_ahead);
            }
            ln_row_pair(f, nt, w, r, xp, cb, ce, ahead, out, out2);
            for (int t = 0; t < nt; t++) {
                Y[t * ldy + r] = cb > 0 ? Y[t * ldy + r] + out[t] : out[t];
                Y[t * ldy + r + 1] = cb > 0 ? Y[t * ldy + r + 1] + out2[t] : out2[t];
            }
        }
    for (; r < r1; r++) {
        float out[LN_NT];
        if (pf_ahead)
            ln_prefetch_ahead(f, w, r, cb, ce, pf_ahead);
        LN_PANEL_CALL(f, nt, w, r, xp, cb, ce, ahead, out);
        for (int t = 0; t < nt; t++)
            Y[t * ldy + r] = cb > 0 ? Y[t * ldy + r] + out[t] : out[t];
    }
}

/* ln_<name>_<nt>: rows [r0, r1) over columns [cb, ce) (cb on a panel
 * boundary) for nt tokens with transposed x from column cb at xp[t]. One
 * function per (format, token count), each with its own register
 * allocation (one for all spilled the constants). */
#define LN_ROWS_NT(name, f, nt)                                                          \
    __attribute__((noinline)) static void ln_##name##_##nt(                             \
        const ms_mat *w, int64_t r0, int64_t r1, const LN_XT *const *xp, int64_t cb,     \
        int64_t ce, int64_t ahead, float *Y, int64_t ldy)                               \
    {                                                                                    \
        /* one panel a row (a batch's panel-major call): each panel's sums added to     \
         * Y directly, a row at a time; through the local y below, a Zen 5 thread's     \
         * 8-token exact MXFP4 products ran 6% slower (docs/perf.md, "The exact MXFP4   \
         * block on Zen 5's pipes") */                                                   \
        if (ce - cb <= LN_PANEL && (cb > 0 || ce < w->cols) && ln_ahead_in_panel(f)) {   \
            ln_panel_rows(f, nt, w, r0, r1, xp, cb, ce, ahead, 0, Y, ldy);               \
            return;                                                                      \
        }                                                                                \
        /* whole rows, or rows of one panel (one stream, as whole rows are) */          \
        if (ce - cb <= LN_PANEL) {                                                       \
            ln_panel_rows(f, nt, w, r0, r1, xp, cb, ce, -1, ahead, Y, ldy);              \
            return;                                                                      \
        }                                                                                \
        for (int64_t r = r0; r < r1; r++) {                                              \
            float y[LN_NT] = {0}, out[LN_NT];                                            \
            for (int64_t c0 = cb; c0 < ce; c0 += LN_PANEL) {                             \
                const LN_XT *xq[LN_NT];                                                  \
                for (int t = 0; t < nt; t++)                                             \
                    xq[t] = xp[t] + (c0 - cb);                                           \
                if (ahead)                                                               \
                    ln_prefetch_ahead(f, w, r, c0, c0 + LN_PANEL < ce ? c0 + LN_PANEL : ce, \
                                      ahead);                                            \
                LN_PANEL_CALL(f, nt, w, r, xq, c0, c0 + LN_PANEL < ce ? c0 + LN_PANEL : ce, \
                              -1, out);                                                  \
                for (int t = 0; t < nt; t++)                                             \
                    y[t] = c0 > cb ? y[t] + out[t]                                       \
                           : c0 > 0 ? Y[t * ldy + r] + out[t] : out[t];                  \
            }                                                                            \
            for (int t = 0; t < nt; t++)                                                 \
                Y[t * ldy + r] = y[t];                                                   \
        }                                                                                \
    }

/* Rows per block in the panel-major order: LN_ROW_BLOCK, fewer where the
 * block's bytes would pass the bound. One token group streams each block
 * once and prefetches the next one into L2: 32 rows of 16384 BF16 columns
 * (1 MiB) asked for a whole L2 ahead and one Zen 4 thread ran at 9.8 GB/s;
 * bounded to 128 KiB ahead, 20.5 (bench/kernels --cols 16384, 3 rounds
 * interleaved; 18432 columns 10 -> 20, FP8 15 -> 16). Several token groups
 * keep the block in L2 across them, beside the next one, so their bound is
 * about a third of L2. The rows' bits do not depend on the blocks. */
enum { LN_BLOCK_BYTES_ONE = 128 << 10, LN_BLOCK_BYTES_GROUPS = 384 << 10 };

AI int64_t ln_row_block(ms_wfmt f, const ms_mat *w, int groups)
{
    int64_t rows = (groups > 1 ? LN_BLOCK_BYTES_GROUPS : LN_BLOCK_BYTES_ONE) /
                   ms_col_bytes(f, w->cols);
    return rows < 2 ? 2 : rows > LN_ROW_BLOCK ? LN_ROW_BLOCK : rows;
}

/* x columns [c0, c1) of token rows X[0..nt) transposed into out, one stride
 * per token. */
AI void ln_transpose_rows(ms_wfmt f, const float *X, int nt, int64_t ldx, int64_t c0,
                          int64_t c1, LN_XT *out, int64_t stride)
{
    for (int t = 0; t < nt; t++)
        for (int64_t c = c0; c < c1; c += LN_BLOCK)
            ln_transpose(f, X + t * ldx + c, c1 - c < LN_BLOCK ? (int)(c1 - c) : LN_BLOCK,
                         out + t * stride + (c - c0));
}

/* What the thread's x buffer holds from whole rows: the transpose of n
 * tokens of X (row stride ldx, cols columns) for format f, made in
 * dispatch `dispatch` (0: none, or not to be reused). A decode's product
 * is cut into ~8 chunks a thread, each a rows call that transposed x
 * anew, after the chunk before had streamed up to ~0.5 MB past it: on the
 * synthetic gpt-oss-20b the transposes' loads of x stalled in `rows_mx`
 * (0.9% of a decode's samples, half of them on one load). */
typedef struct ln_xkey {
    uint64_t dispatch;
    const float *X;
    int64_t ldx, cols;
    int n;
    ms_wfmt f;
} ln_xkey;

static __thread ln_xkey ln_xheld;

AI int ln_xkey_same(const ln_xkey *a, const ln_xkey *b)
{
    return a->dispatch && a->dispatch == b->dispatch && a->X == b->X && a->ldx == b->ldx &&
           a->cols == b->cols && a->n == b->n && a->f == b->f;
}

/* The ms_rows_fn body: fns[nt - 1] are the format's LN_ROWS_NT functions.
 * One token, or a few, whose x fits L1 take whole rows (x transposed once,
 * the weights streamed once in order). Else tokens go in passes of as many
 * as xbuf holds, each transposed whole; then row blocks, token groups,
 * panels: a token group's x panel stays in L1 across the block's rows, the
 * block's weights in L2 across the groups, and the first group prefetches
 * the next block (ln_row_block). Rows wider than xbuf go panel-major, a
 * panel of x for a pass of tokens at a time. */
AI void ln_rows(ms_wfmt f, const ln_rows_fn *fns, LN_XT *xbuf, const ms_mat *w, const float *X,
                int n, int64_t ldx, float *Y, int64_t ldy, int64_t r0, int64_t r1)
{
    const LN_XT *xp[LN_NT];
    int64_t whole = ms_ceil_div(w->cols, LN_BLOCK) * LN_BLOCK;
    if (n <= LN_NT && n * whole * (int64_t)sizeof(LN_XT) <= ln_x_l1(f)) {
        ln_xkey key = {ms_rows_dispatch, X, ldx, w->cols, n, f};
        if (!ln_xkey_same(&key, &ln_xheld)) {
            ln_transpose_rows(f, X, n, ldx, 0, w->cols, xbuf, whole);
            ln_xheld = key;
        }
        for (int t = 0; t < n; t++)
            xp[t] = xbuf + t * whole;
        int64_t row = ms_col_bytes(f, w->cols);
        int64_t ahead = f == MS_WFMT_MXFP4 ? 0 : ms_ceil_div(ms_prefetch_bytes.rows, row) * row;
        fns[n - 1](w, r0, r1, xp, 0, w->cols, ahead, Y, ldy);
        return;
    }
    /* x is transposed a span at a time: the whole row, or a panel when the
     * row is wider than xbuf */
    ln_xheld.dispatch = 0; /* the passes below overwrite xbuf */
    int64_t panel = whole < LN_PANEL ? whole : LN_PANEL, span = whole > LN_XBUF ? panel : whole;
    int per_pass = (int)(LN_XBUF / span);
    for (int p0 = 0; p0 < n; p0 += per_pass) {
        int np = n - p0 < per_pass ? n - p0 : per_pass;
        for (int64_t s0 = 0; s0 < w->cols; s0 += span) {
            int64_t s1 = s0 + span < w->cols ? s0 + span : w->cols;
            ln_transpose_rows(f, X + p0 * ldx, np, ldx, s0, s1, xbuf, span);
            int64_t block = ln_row_block(f, w, np > LN_NT ? 2 : 1);
            for (int64_t rb = r0; rb < r1; rb += block)
                for (int t0 = 0; t0 < np; t0 += LN_NT) {
                    int nt = np - t0 < LN_NT ? np - t0 : LN_NT;
                    for (int64_t c0 = s0; c0 < s1; c0 += panel) {
                        for (int t = 0; t < nt; t++)
                            xp[t] = xbuf + (t0 + t) * span + (c0 - s0);
                        fns[nt - 1](w, rb, rb + block < r1 ? rb + block : r1, xp, c0,
                                    c0 + panel < s1 ? c0 + panel : s1,
                                    t0 == 0 ? block * ms_col_bytes(f, w->cols) : 0,
                                    Y + (p0 + t0) * ldy, ldy);
                    }
                }
        }
    }
}

/* The thread's x buffer, shared by the file's formats (one product runs at a
 * time on a thread). */
static _Alignas(64) __thread LN_XT ln_xbuf[LN_XBUF];

/* LN_ROWS(name, f): format f's LN_NT kernels ln_<name>_1 .. and its
 * ms_rows_fn, rows_<name>. */
#if LN_NT == 4
#define LN_KERNELS(name, f)                                                              \
    LN_ROWS_NT(name, f, 1) LN_ROWS_NT(name, f, 2) LN_ROWS_NT(name, f, 3) LN_ROWS_NT(name, f, 4)
#define LN_FNS(name) {ln_##name##_1, ln_##name##_2, ln_##name##_3, ln_##name##_4}
#elif LN_NT == 2
#define LN_KERNELS(name, f) LN_ROWS_NT(name, f, 1) LN_ROWS_NT(name, f, 2)
#define LN_FNS(name) {ln_##name##_1, ln_##name##_2}
#else
#error "x86_lanes.h: LN_NT must be 2 or 4"
#endif
#define LN_ROWS(name, f)                                                                 \
    LN_KERNELS(name, f)                                                                  \
    static void rows_##name(const ms_mat *w, const float *X, int n, int64_t ldx, float *Y, \
                            int64_t ldy, int64_t r0, int64_t r1)                         \
    {                                                                                    \
        static const ln_rows_fn fns[LN_NT] = LN_FNS(name);                               \
        ln_rows(f, fns, ln_xbuf, w, X, n, ldx, Y, ldy, r0, r1);                          \
    }

#endif

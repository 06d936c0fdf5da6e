/* Compute kernels: every weight format x every op table this CPU runs
 * (scalar, avx2, avx512) against a float64 reference built from
 * ms_mat_get, then the determinism contract bit for bit (batching, row
 * ranges, thread count), dot and axpy, and a check that the checker fails.
 *
 * Tolerance. Every decode is exact (ms_mat_get, the scalar decoders and
 * the SIMD tricks give the same float), so the only error is float32
 * rounding in the sums, bounded for a K-term sum in any order by
 * K * u * sum_c |W[r][c] x[c]| (u = 2^-24). Per format, on top of K = cols:
 *   F32, BF16, F16   one rounding per product                 K + 1
 *   FP8_BLOCK        + partial * scale, + the reference's own
 *                    rounding of e4m3 * F32 scale to float     K + 4
 *   MXFP4            + partial * scale                         K + 3
 * and we assert |y - ref| <= 2 * (that) * u * sum|W x| + TINY_ABS, the
 * factor 2 for slack. TINY_ABS (1e-42, ~700 float subnormal steps) covers
 * subnormal results such as e8m0 scale 0 (2^-127) times a partial.
 *
 * The fast table (--precision fast, AVX512-BF16) is not exact for BF16 and
 * MXFP4: each x is rounded to bf16 (relative error <= 2^-9, so the sum moves
 * by at most 2^-9 * sum|W x|) and vdpbf16ps flushes subnormal weights,
 * activations and partial sums to zero (at most 2^-126 * |x| per column,
 * FAST_ABS per column). Its bound for those formats is 2 * 2^-9 * sum|W x|
 * on top of the exact one. For FP8 it also drops the e4m3 subnormals
 * (exponent field 0), which its decode leaves as bf16 subnormals: their
 * 2 * sum|W x| is added. Its other formats are the exact kernels. Every
 * determinism check holds for it bit for bit, as for the others.
 *
 * The int8 tables (--precision int8: AVX512-VNNI, or AVX2) quantise x for MXFP4 per
 * block of 32 columns to q = round(x / d), d = max|x| / 127, so each x
 * moves by at most d / 2 (plus a float rounding of x / d and of d: 4u
 * relative); the integer sums are exact. Its bound for MXFP4 adds
 * 2 * sum_c |W[r][c]| * d(block of c) / 2 (factor 2 for slack) to the
 * exact one; subnormal scale products as the fast table's. */
#include <stdint.h>

#include "base/pool.h"
#include "kernels/internal.h"
#include "kernels/kernels.h"
#include "moestream.h"
#include "test.h"

#define U (1.0 / 16777216.0)
#define TINY_ABS 1e-42
#define FAST_ABS 1e-37
/* tokens of the accuracy and batching checks: three of the AMX table's
 * five-token groups, so that a pair and a lone group both run */
#define MAX_N 13

static const ms_kernel_ops *cur_ops; /* parameters of the running case */
static ms_wfmt cur_fmt;
static double cur_abs = TINY_ABS;    /* the absolute term of the running format */

/* Whether (table, format) runs a fast kernel (activations rounded to bf16). */
static int is_fast(ms_wfmt fmt)
{
    return cur_ops && cur_ops == ms_kernels_avx512_bf16() &&
           (fmt == MS_WFMT_BF16 || fmt == MS_WFMT_MXFP4 || fmt == MS_WFMT_FP8_BLOCK);
}

/* Whether (table, format) runs the int8 kernel (activations quantised). */
static int is_int8(ms_wfmt fmt)
{
    return cur_ops && (cur_ops == ms_kernels_avx512_vnni() || cur_ops == ms_kernels_avx2_int8()) &&
           fmt == MS_WFMT_MXFP4;
}

/* Whether (table, format) runs on the AMX tile unit, which flushes
 * subnormal inputs and results to zero. */
static int is_tiles(ms_wfmt fmt)
{
    return cur_ops && cur_ops == ms_kernels_avx512_amx() && fmt == MS_WFMT_BF16;
}

static double tol_for(ms_wfmt fmt, int64_t cols)
{
    int extra = fmt == MS_WFMT_FP8_BLOCK ? 4 : fmt == MS_WFMT_MXFP4 ? 3 : 1;
    if (is_tiles(fmt))
        extra += 3; /* the three parts of x added at the end */
    cur_abs = is_fast(fmt) || is_tiles(fmt) || is_int8(fmt) ? FAST_ABS * (double)cols : TINY_ABS;
    return 2.0 * (double)(cols + extra) * U + (is_fast(fmt) ? 2.0 / 512.0 : 0.0);
}

/* ---- deterministic random data ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rng_int(int lo, int hi) /* inclusive */
{
    return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
}

static double rng_unit(void)
{
    return (double)(rng_next() >> 11) / 9007199254740992.0;
}

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- matrices ---- */

typedef struct spec {
    ms_wfmt fmt;
    int64_t rows, cols;
    ms_dtype scale_dtype; /* FP8_BLOCK */
    int32_t br, bc;       /* FP8_BLOCK */
    int nan_rows;         /* rows r % 5 == 4 hold a NaN (FP8 code, MXFP4 scale 255) */
    int big_x;            /* tokens t % 3 == 1 hold one activation of 2^17 (FP8 byte-lane
                             order scales x by 2^112: those take the column order) */
} spec;

typedef struct fixture {
    ms_mat m;
    uint8_t *w, *scale; /* owned */
} fixture;

static float gen_f32(void)
{
    int k = rng_int(0, 63);
    if (k == 0)
        return 0.0f;
    if (k == 1)
        return -0.0f;
    if (k == 2)
        return f32_of_bits((uint32_t)rng_int(1, 0x7FFFFF)); /* subnormal */
    float v = (float)((0.5 + rng_unit()) * ldexp(1.0, rng_int(-20, 20)));
    return rng_next() & 1 ? -v : v;
}

/* Finite bf16 with exponents kept where products cannot overflow;
 * 1 in 16 is subnormal. */
static uint16_t gen_bf16(void)
{
    int e = rng_int(0, 15) == 0 ? 0 : 127 + rng_int(-40, 40);
    return (uint16_t)((rng_next() & 1) << 15 | (unsigned)e << 7 | (rng_next() & 0x7F));
}

/* Any finite half, subnormals and +-65504 included. */
static uint16_t gen_f16(void)
{
    uint16_t h = (uint16_t)rng_next();
    if (((h >> 10) & 0x1F) == 0x1F)
        h ^= 0x4000;
    return h;
}

/* Any e4m3 code but the NaNs (0x7F, 0xFF become +-448). */
static uint8_t gen_e4m3(void)
{
    uint8_t b = (uint8_t)rng_next();
    return (b & 0x7F) == 0x7F ? (uint8_t)(b ^ 1) : b;
}

static void gen_scale(uint8_t *p, ms_dtype dt, int64_t i)
{
    uint16_t h;
    switch (dt) {
    case MS_DTYPE_BF16:
        h = (uint16_t)((unsigned)(127 + rng_int(-20, 10)) << 7 | (rng_next() & 0x7F));
        memcpy(p + 2 * i, &h, 2);
        break;
    case MS_DTYPE_F16:
        /* the extremes first: max 65504 and the smallest subnormal 2^-24 */
        h = i == 0 ? 0x7BFF : i == 1 ? 0x0001 : (uint16_t)(gen_f16() & 0x7FFF);
        memcpy(p + 2 * i, &h, 2);
        break;
    default: {
        float f = (float)((1.0 + rng_unit()) * ldexp(1.0, rng_int(-12, 4)));
        memcpy(p + 4 * i, &f, 4);
        break;
    }
    }
}

static int64_t fp8_scale_count(const spec *s)
{
    return ((s->rows + s->br - 1) / s->br) * ((s->cols + s->bc - 1) / s->bc);
}

static void fill_weights(fixture *f, const spec *s)
{
    int64_t n = s->rows * s->cols;
    for (int64_t i = 0; i < n; i++) {
        switch (s->fmt) {
        case MS_WFMT_F32: {
            float v = gen_f32();
            memcpy(f->w + 4 * i, &v, 4);
            break;
        }
        case MS_WFMT_BF16:
        case MS_WFMT_F16: {
            uint16_t h = s->fmt == MS_WFMT_BF16 ? gen_bf16() : gen_f16();
            memcpy(f->w + 2 * i, &h, 2);
            break;
        }
        case MS_WFMT_FP8_BLOCK:
            f->w[i] = gen_e4m3();
            break;
        default:
            if (i % 2 == 0)
                f->w[i / 2] = (uint8_t)rng_next();
            break;
        }
    }
}

static void fill_scales(fixture *f, const spec *s)
{
    if (s->fmt == MS_WFMT_FP8_BLOCK) {
        for (int64_t i = 0; i < fp8_scale_count(s); i++)
            gen_scale(f->scale, s->scale_dtype, i);
    } else if (s->fmt == MS_WFMT_MXFP4) {
        for (int64_t i = 0; i < s->rows * (s->cols / 32); i++)
            f->scale[i] = (uint8_t)rng_int(117, 137);
    }
}

static void plant_nans(fixture *f, const spec *s)
{
    for (int64_t r = 4; s->nan_rows && r < s->rows; r += 5) {
        if (s->fmt == MS_WFMT_FP8_BLOCK)
            f->w[r * s->cols + rng_int(0, (int)s->cols - 1)] = rng_next() & 1 ? 0x7F : 0xFF;
        else if (s->fmt == MS_WFMT_MXFP4)
            f->scale[r * (s->cols / 32) + rng_int(0, (int)(s->cols / 32) - 1)] = 255;
    }
}

/* Allocates exactly the bytes a view covers, so ASan sees any overread. */
static fixture make_fixture(const spec *s)
{
    static const int elem[MS_WFMT_COUNT] = {4, 2, 2, 1, 1};
    fixture f = {0};
    int64_t wbytes = s->rows * s->cols * elem[s->fmt];
    if (s->fmt == MS_WFMT_MXFP4)
        wbytes /= 2;
    f.w = malloc((size_t)wbytes);
    int64_t sbytes = s->fmt == MS_WFMT_FP8_BLOCK ? fp8_scale_count(s) *
                                                        (s->scale_dtype == MS_DTYPE_F32 ? 4 : 2)
                     : s->fmt == MS_WFMT_MXFP4 ? s->rows * (s->cols / 32)
                                               : 0;
    f.scale = sbytes ? malloc((size_t)sbytes) : NULL;
    fill_weights(&f, s);
    fill_scales(&f, s);
    plant_nans(&f, s);
    f.m = (ms_mat){.fmt = s->fmt, .rows = s->rows, .cols = s->cols, .w = f.w,
                   .scale = f.scale, .scale_dtype = s->scale_dtype, .block_rows = s->br,
                   .block_cols = s->bc};
    if (s->fmt == MS_WFMT_MXFP4)
        f.m.scale_dtype = MS_DTYPE_U8;
    return f;
}

static void free_fixture(fixture *f)
{
    free(f->w);
    free(f->scale);
}

/* n tokens of activations, [n][cols], magnitudes 2^-3..2^3 and some zeros. */
static float *make_x(int n, int64_t cols, double scale)
{
    float *x = malloc((size_t)(n * cols) * sizeof *x);
    for (int64_t i = 0; i < n * cols; i++)
        x[i] = rng_int(0, 31) == 0 ? 0.0f
                                   : (float)((rng_unit() * 2 - 1) * ldexp(scale, rng_int(-3, 3)));
    return x;
}

/* ---- the reference and the checker ---- */

/* Worst |y - ref| / (tol * sum|W x| + quantisation + TINY_ABS) over
 * Y[n][rows]; INFINITY when y is NaN and the reference is not, or the other
 * way round. The quantisation term is the int8 table's (see the top). */
static double worst_ratio(const ms_mat *m, const float *X, int n, const float *Y, double tol)
{
    double worst = 0.0;
    int q8 = is_int8(m->fmt);
    int flush8 = m->fmt == MS_WFMT_FP8_BLOCK && is_fast(m->fmt);
    for (int t = 0; t < n; t++) {
        for (int64_t r = 0; r < m->rows; r++) {
            double ref = 0.0, mag = 0.0, quant = 0.0, d = 0.0, flushed = 0.0;
            for (int64_t c = 0; c < m->cols; c++) {
                double p = (double)ms_mat_get(m, r, c) * X[t * m->cols + c];
                ref += p;
                mag += fabs(p);
                if (flush8 && (((const uint8_t *)m->w)[r * m->cols + c] & 0x78) == 0)
                    flushed += fabs(p);
                if (q8 && c % 32 == 0) {
                    double amax = 0.0;
                    for (int64_t k = c; k < c + 32 && k < m->cols; k++)
                        amax = fmax(amax, fabs((double)X[t * m->cols + k]));
                    d = amax / 127.0 * (1.0 + 8.0 * U);
                }
                if (q8)
                    quant += fabs((double)ms_mat_get(m, r, c)) * (d / 2.0 + 4.0 * U * d * 127.0);
            }
            mag += q8 ? quant / tol : 0.0;
            mag += 2.0 * flushed / tol;
            double y = Y[t * m->rows + r];
            if (isnan(ref) != isnan(y) || (!isnan(ref) && !isfinite(y)))
                return INFINITY;
            if (isnan(ref))
                continue;
            double ratio = fabs(y - ref) / (tol * mag + cur_abs);
            if (ratio > worst)
                worst = ratio;
        }
    }
    return worst;
}

/* ---- the op tables under test ---- */

static const ms_kernel_ops *tables[7];
static int n_tables;

static const char *fmt_name(ms_wfmt f)
{
    return ms_wfmt_info[f].name;
}

/* Shapes per format: odd rows (and more than a 32-row block), cols off
 * multiples of 16/32/128 where allowed, and cols spanning several column
 * panels (1024 or 2048 columns when batched). */
static int shapes_for(ms_wfmt fmt, ms_dtype sdt, spec *out)
{
    int n = 0;
    if (fmt == MS_WFMT_MXFP4) {
        static const int64_t rc[][2] = {{1, 32}, {3, 64}, {7, 96}, {129, 160}, {5, 1024},
                                        {2, 2880}, {3, 5120}};
        for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++)
            out[n++] = (spec){fmt, rc[i][0], rc[i][1], MS_DTYPE_U8, 0, 0, 1, 0};
    } else if (fmt == MS_WFMT_FP8_BLOCK) {
        static const int64_t s[][4] = {{1, 96, 128, 128},  {3, 200, 128, 128},
                                       {7, 1000, 128, 128}, {129, 256, 128, 128},
                                       {5, 200, 1, 32},    {9, 100, 3, 64},
                                       {4, 7, 2, 32},      {6, 131, 4, 48},
                                       {3, 70, 2, 20},     {3, 2500, 128, 128},
                                       {5, 1100, 2, 48},   {5, 7168, 128, 128},
                                       {3, 5000, 64, 64}};
        for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
            out[n++] = (spec){fmt, s[i][0], s[i][1], sdt, (int32_t)s[i][2], (int32_t)s[i][3], 1, 0};
    } else {
        static const int64_t rc[][2] = {{1, 1},    {3, 5},    {7, 16},    {1, 31},
                                        {3, 33},   {7, 96},   {129, 200}, {5, 1000},
                                        {2, 4096}, {3, 2100}, {3, 5000}};
        for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++)
            out[n++] = (spec){fmt, rc[i][0], rc[i][1], MS_DTYPE_F32, 0, 0, 0, 0};
    }
    return n;
}

static float *run_rows(const ms_kernel_ops *ops, const ms_mat *m, const float *X, int n,
                       int64_t r0, int64_t r1, float *Y)
{
    ops->rows[m->fmt](m, X, n, m->cols, Y, m->rows, r0, r1);
    return Y;
}

/* One spec: accuracy for MAX_N tokens, then the determinism contract. */
static void check_spec(const spec *s)
{
    fixture f = make_fixture(s);
    float *X = make_x(MAX_N, s->cols, 1.0);
    for (int t = 1; s->big_x && t < MAX_N; t += 3)
        X[t * s->cols + (t * 7) % s->cols] = t % 2 ? 131072.0f : -131072.0f;
    size_t ysz = (size_t)(MAX_N * s->rows) * sizeof(float);
    float *Y = malloc(ysz), *Y1 = malloc(ysz), *Yp = malloc(ysz);
    run_rows(cur_ops, &f.m, X, MAX_N, 0, s->rows, Y);
    double w = worst_ratio(&f.m, X, MAX_N, Y, tol_for(s->fmt, s->cols));
    CHECK(w <= 1.0, "%lldx%lld (blocks %dx%d): error %.3g x tolerance", (long long)s->rows,
          (long long)s->cols, s->br, s->bc, w);
    /* matvec of each token alone */
    for (int t = 0; t < MAX_N; t++)
        run_rows(cur_ops, &f.m, X + t * s->cols, 1, 0, s->rows, Y1 + t * s->rows);
    CHECK(memcmp(Y, Y1, ysz) == 0, "%lldx%lld: %d-token batch differs from matvecs",
          (long long)s->rows, (long long)s->cols, MAX_N);
    /* every smaller batch (token groups of 1-4, or 1-5, in every mix) */
    for (int n = 1; n < MAX_N; n++) {
        run_rows(cur_ops, &f.m, X, n, 0, s->rows, Yp);
        CHECK(memcmp(Yp, Y1, (size_t)n * (size_t)s->rows * sizeof(float)) == 0,
              "%lldx%lld: batch of %d differs from matvecs", (long long)s->rows,
              (long long)s->cols, n);
    }
    /* row range split into uneven pieces */
    memset(Yp, 0, ysz);
    for (int64_t r0 = 0, step = 1; r0 < s->rows; r0 += step, step = step * 2 + 1)
        run_rows(cur_ops, &f.m, X, MAX_N, r0, r0 + step < s->rows ? r0 + step : s->rows, Yp);
    CHECK(memcmp(Y, Yp, ysz) == 0, "%lldx%lld: split row ranges differ", (long long)s->rows,
          (long long)s->cols);
    free(Y);
    free(Y1);
    free(Yp);
    free(X);
    free_fixture(&f);
}

static void case_format(void)
{
    spec specs[24];
    ms_dtype sdts[3] = {MS_DTYPE_F32, MS_DTYPE_BF16, MS_DTYPE_F16};
    int n_sdt = cur_fmt == MS_WFMT_FP8_BLOCK ? 3 : 1;
    for (int d = 0; d < n_sdt; d++) {
        int n = shapes_for(cur_fmt, sdts[d], specs);
        for (int i = 0; i < n; i++)
            check_spec(&specs[i]);
    }
}

/* ms_matmul_ops with 1, 2 and 3 threads, and ms_matmul_many over two
 * products (all n tokens, and tokens 1..n-1) with 3 threads, must equal one
 * single-threaded rows call over the whole matrix, bit for bit. */
static void check_driver(const spec *s, int n)
{
    fixture f = make_fixture(s);
    float *X = make_x(n, s->cols, 1.0);
    size_t ysz = (size_t)(n * s->rows) * sizeof(float);
    float *Ya = malloc(ysz), *Yb = malloc(ysz), *Yc = malloc(ysz), *Yd = malloc(ysz);
    float *Ye = malloc(ysz), *Y3 = malloc(ysz);
    int saved = ms_pool_threads();
    ms_pool_set_threads(1);
    ms_matmul_ops(cur_ops, &f.m, X, n, Ya);
    ms_pool_set_threads(2);
    ms_matmul_ops(cur_ops, &f.m, X, n, Yb);
    ms_pool_set_threads(3);
    ms_matmul_ops(cur_ops, &f.m, X, n, Y3);
    ms_matmul_job jobs[2] = {{.ops = cur_ops, .w = &f.m, .X = X, .n = n, .Y = Yd},
                             {.ops = cur_ops, .w = &f.m, .X = X + s->cols, .n = n - 1, .Y = Ye}};
    ms_matmul_many(jobs, 2);
    ms_pool_set_threads(saved);
    run_rows(cur_ops, &f.m, X, n, 0, s->rows, Yc);
    CHECK(memcmp(Ya, Yb, ysz) == 0, "%lldx%lld n=%d: 1 and 2 threads differ",
          (long long)s->rows, (long long)s->cols, n);
    CHECK(memcmp(Ya, Y3, ysz) == 0, "%lldx%lld n=%d: 1 and 3 threads differ",
          (long long)s->rows, (long long)s->cols, n);
    CHECK(memcmp(Ya, Yc, ysz) == 0, "%lldx%lld n=%d: driver differs from one rows call",
          (long long)s->rows, (long long)s->cols, n);
    CHECK(memcmp(Yd, Yc, ysz) == 0 &&
          memcmp(Ye, Yc + s->rows, ysz - (size_t)s->rows * sizeof(float)) == 0,
          "%lldx%lld n=%d: ms_matmul_many differs from one rows call", (long long)s->rows,
          (long long)s->cols, n);
    if (n <= MAX_N) {
        double w = worst_ratio(&f.m, X, n, Yb, tol_for(s->fmt, s->cols));
        CHECK(w <= 1.0, "error %.3g x tolerance", w);
    }
    free(Ya);
    free(Yb);
    free(Yc);
    free(Yd);
    free(Ye);
    free(Y3);
    free(X);
    free_fixture(&f);
}

/* Thread count and the driver's splits: a product large enough to be
 * split across threads, and one with more tokens than a token tile (16 at
 * 4096 columns), whose row chunks are re-read per tile. */
static void case_threads(void)
{
    spec s = {cur_fmt, 515, cur_fmt == MS_WFMT_MXFP4 ? 1024 : 1000, MS_DTYPE_BF16, 128, 128, 1, 0};
    check_driver(&s, 5);
    spec big = {cur_fmt, 200, 4096, MS_DTYPE_F16, 128, 128, 0, 0};
    check_driver(&big, 21);
}

/* FP8 tokens whose activations do not fit the byte-lane order's scaling
 * (|x| >= 2^16) among tokens that do: accuracy, batch == matvecs and row
 * splits, in wide rows (panel-major) and narrow ones (whole rows). */
/* The tables with two FP8 orders (ms_kernels_set_fp8_lanes). */
static int fp8_two_orders(const ms_kernel_ops *ops)
{
    return ops == ms_kernels_avx512() || ops == ms_kernels_avx2();
}

static void case_fp8_big_x(void)
{
    spec s[2] = {{MS_WFMT_FP8_BLOCK, 7, 1000, MS_DTYPE_BF16, 128, 128, 1, 1},
                 {MS_WFMT_FP8_BLOCK, 5, 7168, MS_DTYPE_F32, 128, 128, 0, 1}};
    for (int i = 0; i < 2; i++)
        check_spec(&s[i]);
}

/* Rows wider than any lane-order table's x buffer (x86_lanes.h), which
 * then transposes x a panel at a time: accuracy, batch == matvecs and row
 * splits, as for the other shapes. */
static void case_wide_rows(void)
{
    spec s = {cur_fmt, 3, 131104, MS_DTYPE_U8, 0, 0, cur_fmt == MS_WFMT_MXFP4, 0};
    check_spec(&s);
}

/* The bound on x kept beside whole rows (ms_prefetch.x_l1, chosen per
 * CPU) decides whether a token group of the lane-order loop takes whole
 * rows or goes panel-major; no result may depend on it. Batches of 1 to
 * MAX_N tokens under the smallest bound (every group panel-major, the
 * matvec too) and the largest (whole rows while a group fits the x
 * buffer) must equal the matvecs under the CPU's own. */
static void case_x_bound(void)
{
    spec s = {cur_fmt, 37, 2880, MS_DTYPE_BF16, 128, 128, 0, 0};
    if (cur_fmt == MS_WFMT_MXFP4)
        s.scale_dtype = MS_DTYPE_U8;
    fixture f = make_fixture(&s);
    float *X = make_x(MAX_N, s.cols, 1.0);
    size_t ysz = (size_t)(MAX_N * s.rows) * sizeof(float);
    float *Y1 = malloc(ysz), *Yp = malloc(ysz);
    for (int t = 0; t < MAX_N; t++)
        run_rows(cur_ops, &f.m, X + t * s.cols, 1, 0, s.rows, Y1 + t * s.rows);
    ms_prefetch saved = ms_kernels_prefetch();
    static const int bounds[2] = {1, 1 << 30};
    for (int b = 0; b < 2; b++) {
        ms_prefetch p = saved;
        p.x_l1 = bounds[b];
        ms_kernels_set_prefetch(p);
        for (int n = 1; n <= MAX_N; n++) {
            run_rows(cur_ops, &f.m, X, n, 0, s.rows, Yp);
            CHECK(memcmp(Yp, Y1, (size_t)n * (size_t)s.rows * sizeof(float)) == 0,
                  "x bound %d bytes: batch of %d differs from the matvecs", bounds[b], n);
        }
    }
    ms_kernels_set_prefetch(saved);
    free(Y1);
    free(Yp);
    free(X);
    free_fixture(&f);
}

/* A rows kernel keeps x transposed for the next task of the same job in a
 * dispatch (x86_lanes.h): a new x in the same buffer for the next
 * dispatch, jobs of one dispatch sharing X with other token counts, and
 * another X between them must each give what one rows call over them
 * gives. */
static void case_x_reuse(void)
{
    spec s = {cur_fmt, 2048, 2880, MS_DTYPE_BF16, 128, 128, 0, 0};
    if (cur_fmt == MS_WFMT_MXFP4)
        s.scale_dtype = MS_DTYPE_U8;
    fixture f = make_fixture(&s);
    float *X = make_x(2, s.cols, 1.0), *X2 = make_x(2, s.cols, 1.0);
    size_t ysz = (size_t)(2 * s.rows) * sizeof(float);
    float *Y[4], *R[4];
    for (int i = 0; i < 4; i++) {
        Y[i] = malloc(ysz);
        R[i] = malloc(ysz);
    }
    int saved = ms_pool_threads();
    ms_pool_set_threads(2);
    ms_matmul_ops(cur_ops, &f.m, X, 1, Y[0]);
    memcpy(X, X2 + s.cols, (size_t)s.cols * sizeof(float)); /* a new x, the same buffer */
    ms_matmul_ops(cur_ops, &f.m, X, 1, Y[1]);
    run_rows(cur_ops, &f.m, X, 1, 0, s.rows, R[1]);
    CHECK(memcmp(Y[1], R[1], (size_t)s.rows * sizeof(float)) == 0,
          "a new x in the same buffer: the next product differs from a rows call over it");
    ms_matmul_job jobs[4] = {{.ops = cur_ops, .w = &f.m, .X = X, .n = 1, .Y = Y[0]},
                             {.ops = cur_ops, .w = &f.m, .X = X, .n = 2, .Y = Y[1]},
                             {.ops = cur_ops, .w = &f.m, .X = X2, .n = 1, .Y = Y[2]},
                             {.ops = cur_ops, .w = &f.m, .X = X, .n = 1, .Y = Y[3]}};
    ms_matmul_many(jobs, 4);
    for (int i = 0; i < 4; i++) {
        run_rows(cur_ops, &f.m, jobs[i].X, jobs[i].n, 0, s.rows, R[i]);
        CHECK(memcmp(Y[i], R[i], (size_t)(jobs[i].n * s.rows) * sizeof(float)) == 0,
              "job %d of a dispatch sharing X (n = %d): differs from a rows call", i,
              jobs[i].n);
    }
    ms_pool_set_threads(saved);
    for (int i = 0; i < 4; i++) {
        free(Y[i]);
        free(R[i]);
    }
    free(X);
    free(X2);
    free_fixture(&f);
}

/* E8M0 extremes: scales 0 (2^-127, subnormal products), 1, 127, 254
 * (2^127: only codes up to 1.5 keep W finite in float, and small x keeps
 * every partial * scale finite). */
static void case_mxfp4_extremes(void)
{
    static const uint8_t ext[] = {0, 1, 127, 254, 126, 128};
    spec s = {MS_WFMT_MXFP4, 12, 128, MS_DTYPE_U8, 0, 0, 0, 0};
    fixture f = make_fixture(&s);
    for (int64_t i = 0; i < s.rows * 4; i++) {
        f.scale[i] = ext[i % 6];
        if (f.scale[i] == 254)
            for (int k = 0; k < 16; k++) /* codes 0..3 and 8..11: |v| <= 1.5 */
                f.w[i * 16 + k] &= 0xBB;
    }
    float *X = make_x(3, s.cols, 1.0 / 4096);
    float *Y = malloc((size_t)(3 * s.rows) * sizeof(float));
    run_rows(cur_ops, &f.m, X, 3, 0, s.rows, Y);
    double w = worst_ratio(&f.m, X, 3, Y, tol_for(s.fmt, s.cols));
    CHECK(w <= 1.0, "error %.3g x tolerance", w);
    free(Y);
    free(X);
    free_fixture(&f);
}

/* Hand-computed values pin down the layouts themselves, which the scalar
 * oracle and the SIMD tables could otherwise share a misreading of. */
static void case_layout(void)
{
    /* MXFP4 byte 0x21: element 0 = code 1 (0.5), element 1 = code 2 (1.0);
     * byte 0xF8: element 2 = -0, element 3 = -6. Scale 128 = 2. x up to 127
     * in integers: the int8 table's quantisation (d = 1) is exact too. */
    uint8_t q[16] = {0x21, 0xF8}, sc[1] = {128};
    ms_mat m = {.fmt = MS_WFMT_MXFP4, .rows = 1, .cols = 32, .w = q, .scale = sc};
    float x[32] = {1, 10, 100, 127}, y = 0;
    CHECK(ms_mat_get(&m, 0, 0) == 1.0f && ms_mat_get(&m, 0, 3) == -12.0f, "mxfp4 get");
    cur_ops->rows[MS_WFMT_MXFP4](&m, x, 1, 32, &y, 1, 0, 1);
    CHECK(y == 1.0f + 20.0f - 1524.0f, "mxfp4 row: %g", y);
    /* e4m3: 0x7E = 448, 0x01 = 2^-9, 0x08 = 2^-6, 0xC0 = -2; bf16 scale 0.5
     * for the first 32-column block, 4 for the second. */
    uint8_t e[64] = {0x7E, 0x01, 0x08, 0xC0};
    e[32] = 0x38; /* 1.0 */
    uint16_t s2[2] = {0x3F00, 0x4080};
    ms_mat f8 = {.fmt = MS_WFMT_FP8_BLOCK, .rows = 1, .cols = 64, .w = e, .scale = s2,
                 .scale_dtype = MS_DTYPE_BF16, .block_rows = 1, .block_cols = 32};
    float x8[64] = {1, 512, 64, 3};
    x8[32] = 5;
    cur_ops->rows[MS_WFMT_FP8_BLOCK](&f8, x8, 1, 64, &y, 1, 0, 1);
    CHECK(y == (448.0f + 1.0f + 1.0f - 6.0f) * 0.5f + 20.0f, "fp8 row: %g", y);
    CHECK(ms_mat_get(&f8, 0, 0) == 224.0f && ms_mat_get(&f8, 0, 32) == 4.0f, "fp8 get");
}

/* The fma op that compute floors are measured with: the operations it
 * reports are 2 per lane of the table's vectors per FMA (scalar 1 lane,
 * AVX2 8, AVX-512 16), its result is kept, and the loop is not optimised
 * away (a peak above 10 TFLOP/s a thread would say it was). */
static void case_fma(void)
{
    int lanes = strncmp(cur_ops->name, "avx512", 6) == 0 ? 16
                : strncmp(cur_ops->name, "avx2", 4) == 0 ? 8 : 1;
    float sink = 0;
    CHECK(cur_ops->fma != NULL, "%s: no fma op", cur_ops->name);
    if (!cur_ops->fma)
        return;
    double flops = cur_ops->fma(1000, &sink);
    CHECK(flops == 2.0 * lanes * 12 * 1000, "%s: %.0f operations for 1000 rounds, expected "
          "%d", cur_ops->name, flops, 2 * lanes * 12 * 1000);
    CHECK(isfinite(sink) && sink > 0, "%s: sink %g", cur_ops->name, (double)sink);
}

static void case_compute_peak(void)
{
    ms_error err = {0};
    double g = 0;
    CHECK(ms_compute_peak(1, 1, &g, &err) == 0 && g > 0 && g < 10000,
          "one thread's peak %.1f GFLOP/s (%s)", g, err.msg);
    printf("  compute peak, one thread, %s: %.1f GFLOP/s\n", ms_kernels()->name, g);
    CHECK(ms_compute_peak(0, 1, &g, &err) != 0 && strstr(err.msg, "threads"),
          "0 threads accepted");
}

static void case_dot_axpy(void)
{
    static const int64_t lens[] = {0, 1, 7, 8, 15, 16, 31, 33, 100, 1000};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        int64_t n = lens[i];
        float *a = make_x(1, n + 3, 1.0), *b = make_x(1, n + 3, 1.0);
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < n; k++) {
            ref += (double)a[k] * b[k];
            mag += fabs((double)a[k] * b[k]);
        }
        double d = cur_ops->dot(a, b, n);
        CHECK(fabs(d - ref) <= 2.0 * (double)(n + 1) * U * mag, "dot n=%lld: %g vs %g",
              (long long)n, d, ref);
        /* axpy: at most two roundings per element; an element's result does
         * not depend on where it sits (offset 3 vs 0). */
        float *y = make_x(1, n + 3, 1.0), *y0 = malloc((size_t)(n + 3) * sizeof(float));
        float *y2 = malloc((size_t)(n + 3) * sizeof(float)), alpha = 0.37f;
        memcpy(y0, y, (size_t)(n + 3) * sizeof(float));
        memcpy(y2, y, (size_t)(n + 3) * sizeof(float));
        cur_ops->axpy(alpha, a, y, n + 3);
        cur_ops->axpy(alpha, a + 3, y2 + 3, n);
        int bad = 0, moved = 0;
        for (int64_t k = 0; k < n + 3; k++) {
            double ax = (double)alpha * a[k];
            bad += fabs(y[k] - (y0[k] + ax)) > 2.0 * U * (fabs(y0[k]) + fabs(ax));
            moved += k >= 3 && memcmp(&y[k], &y2[k], 4) != 0;
        }
        CHECK(!bad, "axpy n=%lld: %d elements off", (long long)n, bad);
        CHECK(!moved, "axpy n=%lld: %d elements depend on their offset", (long long)n, moved);
        free(a);
        free(b);
        free(y);
        free(y0);
        free(y2);
    }
}

/* The checker must be able to fail: one corrupted weight or one NaN code
 * puts the result outside tolerance. */
static void case_checker_fails(void)
{
    spec s = {MS_WFMT_BF16, 3, 1000, MS_DTYPE_F32, 0, 0, 0, 0};
    fixture f = make_fixture(&s);
    float *X = make_x(1, s.cols, 1.0), Y[3];
    run_rows(cur_ops, &f.m, X, 1, 0, s.rows, Y);
    double tol = tol_for(s.fmt, s.cols);
    CHECK(worst_ratio(&f.m, X, 1, Y, tol) <= 1.0, "clean matrix fails");
    /* flip the sign of row 1's largest product */
    int64_t best = 0;
    for (int64_t c = 0; c < s.cols; c++)
        if (fabsf(ms_mat_get(&f.m, 1, c) * X[c]) > fabsf(ms_mat_get(&f.m, 1, best) * X[best]))
            best = c;
    f.w[2 * (s.cols + best) + 1] ^= 0x80;
    CHECK(worst_ratio(&f.m, X, 1, Y, tol) > 1.0, "a flipped weight went unnoticed");
    free(X);
    free_fixture(&f);

    spec s8 = {MS_WFMT_FP8_BLOCK, 2, 64, MS_DTYPE_F32, 128, 32, 0, 0};
    f = make_fixture(&s8);
    X = make_x(1, s8.cols, 1.0);
    run_rows(cur_ops, &f.m, X, 1, 0, s8.rows, Y);
    f.w[70] = 0x7F;
    CHECK(worst_ratio(&f.m, X, 1, Y, tol) == INFINITY, "a NaN code went unnoticed");
    free(X);
    free_fixture(&f);
}

static void case_dispatch(void)
{
    const ms_kernel_ops *best = ms_kernels_avx512();
    if (!best)
        best = ms_kernels_avx2();
    if (!best)
        best = ms_kernels_scalar();
    CHECK(ms_kernels() == best, "ms_kernels() is %s, expected %s", ms_kernels()->name,
          best->name);
    CHECK(strcmp(ms_kernel_path(), best->name) == 0, "path %s", ms_kernel_path());
    ms_mat m = {.fmt = MS_WFMT_FP8_BLOCK, .rows = 129, .cols = 200,
                .scale_dtype = MS_DTYPE_F16, .block_rows = 128, .block_cols = 128};
    CHECK(ms_mat_bytes(&m) == 129 * 200 + 2 * 2 * 2, "fp8 bytes %lld",
          (long long)ms_mat_bytes(&m));
    m.fmt = MS_WFMT_MXFP4;
    m.cols = 64;
    CHECK(ms_mat_bytes(&m) == 129 * 32 + 129 * 2, "mxfp4 bytes");
    m.fmt = MS_WFMT_BF16;
    CHECK(ms_mat_bytes(&m) == 129 * 64 * 2, "bf16 bytes");
}

/* A job's bias is added after its product, row chunk by row chunk: the
 * same bits as the product followed by a pass of Y[t][r] += bias[r], on
 * one thread and two, one token and three, in a dispatch after a job
 * without one. */
static void case_bias(void)
{
    spec s = {MS_WFMT_BF16, 2048, 256, MS_DTYPE_BF16, 0, 0, 0, 0};
    fixture f = make_fixture(&s);
    float *X = make_x(3, s.cols, 1.0), *b = malloc((size_t)s.rows * sizeof(float));
    size_t ysz = (size_t)(3 * s.rows) * sizeof(float);
    float *Y = malloc(ysz), *Z = malloc(ysz), *R = malloc(ysz);
    run_rows(ms_kernels(), &f.m, X, 1, 0, s.rows, R);
    for (int64_t r = 0; r < s.rows; r++) /* the products' own size, or it rounds away */
        b[r] = 0.3f * R[r] + (float)(r % 3);
    int saved = ms_pool_threads();
    for (int threads = 1; threads <= 2; threads++)
        for (int n = 1; n <= 3; n += 2) {
            ms_pool_set_threads(threads);
            ms_matmul_job jobs[2] = {{.w = &f.m, .X = X, .n = n, .Y = Z},
                                     {.w = &f.m, .X = X, .n = n, .Y = Y, .bias = b}};
            ms_matmul_many(jobs, 2);
            run_rows(ms_kernels(), &f.m, X, n, 0, s.rows, R);
            CHECK(memcmp(Z, R, (size_t)(n * s.rows) * sizeof(float)) == 0,
                  "%d threads, %d tokens: the job without a bias differs", threads, n);
            for (int t = 0; t < n; t++)
                for (int64_t r = 0; r < s.rows; r++)
                    R[t * s.rows + r] += b[r];
            CHECK(memcmp(Y, R, (size_t)(n * s.rows) * sizeof(float)) == 0,
                  "%d threads, %d tokens: product + bias differs from the product, then the "
                  "bias", threads, n);
        }
    ms_pool_set_threads(saved);
    free(Y);
    free(Z);
    free(R);
    free(b);
    free(X);
    free_fixture(&f);
}

static void run_named(const char *what, void (*fn)(void))
{
    char name[96];
    snprintf(name, sizeof name, "%s_%s", what, cur_ops->name);
    if (strcmp(what, "format") == 0 || strcmp(what, "threads") == 0 ||
        strcmp(what, "wide_rows") == 0 || strcmp(what, "x_bound") == 0 ||
        strcmp(what, "x_reuse") == 0 ||
        strcmp(what, "format_column_order") == 0)
        snprintf(name, sizeof name, "%s_%s_%s", what, cur_ops->name, fmt_name(cur_fmt));
    t_run_case(name, fn);
}

int main(void)
{
    const ms_kernel_ops *all[7] = {ms_kernels_scalar(),      ms_kernels_avx2(),
                                   ms_kernels_avx2_int8(),   ms_kernels_avx512(),
                                   ms_kernels_avx512_bf16(), ms_kernels_avx512_vnni(),
                                   ms_kernels_avx512_amx()};
    static const char *names[7] = {"scalar", "avx2", "avx2_int8", "avx512", "avx512_bf16 (fast)",
                                   "avx512_vnni (int8)",
                                   "avx512_amx (AMX-TILE and AMX-BF16, granted by the OS)"};
    for (int i = 0; i < 7; i++) {
        if (all[i])
            tables[n_tables++] = all[i];
        else
            printf("SKIP kernels_%s: this CPU lacks its instructions\n", names[i]);
    }
    int chosen_lanes = ms_kernels_fp8_lanes();
    printf("FP8 on this CPU: %s order (the other is tested as format_fp8_*)\n",
           chosen_lanes ? "byte-lane" : "column");
    for (int i = 0; i < n_tables; i++) {
        cur_ops = tables[i];
        for (int f = 0; f < MS_WFMT_COUNT; f++) {
            cur_fmt = (ms_wfmt)f;
            run_named("format", case_format);
            run_named("threads", case_threads);
            if (cur_fmt == MS_WFMT_BF16 || cur_fmt == MS_WFMT_MXFP4)
                run_named("wide_rows", case_wide_rows);
            if (cur_fmt == MS_WFMT_BF16 || cur_fmt == MS_WFMT_MXFP4 ||
                cur_fmt == MS_WFMT_FP8_BLOCK)
                run_named("x_bound", case_x_bound);
            if (cur_fmt == MS_WFMT_BF16 || cur_fmt == MS_WFMT_MXFP4 ||
                cur_fmt == MS_WFMT_FP8_BLOCK)
                run_named("x_reuse", case_x_reuse);
            /* the AVX2 and AVX-512 tables' FP8 in the order this CPU
             * does not choose (column order, which byte-lane order also
             * falls back to per token, or byte-lane order), on every shape */
            if (cur_fmt == MS_WFMT_FP8_BLOCK && fp8_two_orders(cur_ops)) {
                ms_kernels_set_fp8_lanes(!chosen_lanes);
                run_named(chosen_lanes ? "format_fp8_column_order" : "format_fp8_byte_lanes",
                          case_format);
                ms_kernels_set_fp8_lanes(chosen_lanes);
            }
        }
        /* byte-lane order's fallback for tokens with a large x */
        cur_fmt = MS_WFMT_FP8_BLOCK;
        ms_kernels_set_fp8_lanes(1);
        run_named("fp8_big_x", case_fp8_big_x);
        ms_kernels_set_fp8_lanes(chosen_lanes);
        run_named("mxfp4_extremes", case_mxfp4_extremes);
        run_named("layout", case_layout);
        run_named("dot_axpy", case_dot_axpy);
        run_named("fma", case_fma);
        run_named("checker_fails", case_checker_fails);
    }
    TEST_CASE(case_dispatch);
    TEST_CASE(case_bias);
    TEST_CASE(case_compute_peak);
    ms_pool_shutdown();
    return t_finish();
}

/* Compute kernels over weights in their stored format.
 *
 * A weight matrix is a view (ms_mat) over bytes as the checkpoint stores them
 * (mmap or expert cache); kernels decode in registers and never convert a
 * file. Activations are float32. Dimension order is [rows=out][cols=in]
 * everywhere: y[r] = sum_c W[r][c] * x[c].
 *
 * Each ISA provides an op table (ms_kernel_ops). The scalar table is always
 * compiled and is the oracle for the SIMD ones; the table used at run time is
 * chosen once from the CPU's features (ms_kernels()).
 *
 * Determinism contract, relied on by the model code and tested:
 *  - a row's result depends only on the row, x and the op table: not on the
 *    thread count, the row range a thread gets, or how many tokens are
 *    batched (matmul row t == matvec of X[t], bit for bit);
 *  - no -ffast-math: IEEE float32 with FMA contraction as written. */
#ifndef MS_KERNELS_H
#define MS_KERNELS_H

#include <stdint.h>

#include "format/dtype.h"

typedef enum ms_wfmt {
    MS_WFMT_F32 = 0,  /* w: float[rows][cols] */
    MS_WFMT_BF16,     /* w: uint16[rows][cols] */
    MS_WFMT_F16,      /* w: uint16[rows][cols] */
    MS_WFMT_FP8_BLOCK,/* w: e4m3[rows][cols]; scale: [ceil(rows/br)][ceil(cols/bc)] of
                       * scale_dtype (F32, BF16 or F16); W = e4m3 * scale */
    MS_WFMT_MXFP4,    /* w: uint8[rows][cols/32][16], low nibble = even element;
                       * scale: uint8 e8m0[rows][cols/32]; cols % 32 == 0 */
    MS_WFMT_COUNT
} ms_wfmt;

/* What every layer above the ISA files needs to know about a format. Each
 * ISA file supplies only the decoders (and x86_rows.h the loop). */
typedef enum ms_scale_kind {
    MS_SCALE_NONE = 0,
    MS_SCALE_BLOCK,   /* a 2-D block of block_rows x block_cols shares one scale */
    MS_SCALE_GROUP,   /* `group` consecutive columns of a row share one e8m0 */
} ms_scale_kind;

typedef struct ms_wfmt_traits {
    const char *name;
    int bits;            /* per weight, scales excluded */
    int group;           /* MS_SCALE_GROUP: columns per scale (cols % group == 0) */
    ms_scale_kind scale;
} ms_wfmt_traits;

/* static const: each file gets a copy the compiler folds where the format
 * is a constant (the kernels' inner loops). */
static const ms_wfmt_traits ms_wfmt_info[MS_WFMT_COUNT] = {
    [MS_WFMT_F32] = {"f32", 32, 0, MS_SCALE_NONE},
    [MS_WFMT_BF16] = {"bf16", 16, 0, MS_SCALE_NONE},
    [MS_WFMT_F16] = {"f16", 16, 0, MS_SCALE_NONE},
    [MS_WFMT_FP8_BLOCK] = {"fp8_block", 8, 0, MS_SCALE_BLOCK},
    [MS_WFMT_MXFP4] = {"mxfp4", 4, 32, MS_SCALE_GROUP},
};

typedef struct ms_mat {
    ms_wfmt fmt;
    int64_t rows, cols;
    const void *w;
    const void *scale;     /* FP8_BLOCK and MXFP4 only */
    ms_dtype scale_dtype;  /* FP8_BLOCK: F32, BF16 or F16 */
    int32_t block_rows;    /* FP8_BLOCK: weight_block_size[0] (128 in releases) */
    int32_t block_cols;    /* FP8_BLOCK: weight_block_size[1], a multiple of 32 */
} ms_mat;

/* Rows [r0, r1) of Y = X W^T for n tokens:
 *   Y[t*ldy + r] = sum_c W[r][c] * X[t*ldx + c],  0 <= t < n.
 * Single-threaded; the caller splits rows across threads. */
typedef void (*ms_rows_fn)(const ms_mat *w, const float *X, int n, int64_t ldx,
                           float *Y, int64_t ldy, int64_t r0, int64_t r1);

/* Formats of the KV cache (models/kvcache.h): float32, bf16 (round to
 * nearest even), and OCP e4m3fn with one float scale per `group` elements
 * (amax / 448). */
typedef enum ms_kvfmt { MS_KV_F32 = 0, MS_KV_BF16, MS_KV_FP8, MS_KV_COUNT } ms_kvfmt;

/* Keys per chunk of attention: the unit of one online-softmax step (256:
 * a step's fixed costs per query, its softmax bookkeeping and the caller's
 * setup, were 15% of a 64-key step; docs/perf.md, "Long context"). */
#define MS_ATTN_CHUNK 256

/* Floats per query of a step's score rows (ms_attn_step.s): the chunk's
 * scores from a multiple of the vector width below lo, then, in the fast
 * step, their bf16 weights. */
#define MS_ATTN_SROW (2 * MS_ATTN_CHUNK)

/* Positions per tile of keys stored dimension-major (kvcache.h); divides
 * MS_ATTN_CHUNK. */
#define MS_KV_TILE 16

/* One online-softmax step of attention (flash attention's inner loop): nq
 * queries against the n (<= MS_ATTN_CHUNK) float32 keys and values of a
 * chunk. Query i sees keys [lo[i], hi[i]) (0 <= lo < hi <= n) and updates
 * its state st[i] = (m, l, acc[dv]), empty when m = -inf, l = 0, acc = 0:
 *   s_p = scale * (q_i . k_p)           over dk
 *   m'  = max(m_i, max_p s_p),  a = exp(m_i - m')
 *   l_i = a * l_i + sum_p exp(s_p - m')
 *   acc = a * acc + sum_p exp(s_p - m') * v_p   over dv, p ascending
 * A query's new state depends only on its own q, range and state and on
 * the keys: never on nq, the other queries or the caller's split. */
typedef struct ms_attn_step {
    int nq, n, dk, dv;
    float scale;
    const float *k, *v;        /* key p at k + p * ldk, value p at v + p * ldv */
    int64_t ldk, ldv;          /* in elements */
    int bf16;                  /* k and v point at bf16 elements, widened as read */
    /* keys in tiles of T = MS_KV_TILE positions (kvcache.h), ldk = dk:
     * f32: element d of key p at k + (p - p % T) * ldk + d * T + p % T;
     * bf16 (dk even): dimension pairs, elements 2i, 2i + 1 of key p in the
     * dword at k + (p - p % T) * ldk + 2 * (i * T + p % T) (in elements),
     * the even one in the low word. The keys past n in the last tile are
     * read and their scores discarded */
    int ktiled;
    const float *const *q;     /* [nq] */
    const int *lo, *hi;        /* [nq] */
    float *const *st;          /* [nq]: m, l, then acc (dv floats) */
    float *s;                  /* scratch: ms_attn_scratch(dk) floats */
    /* memory the caller reads next (the next chunk's keys and values, or
     * NULL): asked for a few lines at a time through this step's arithmetic,
     * so that it arrives while the step computes (a hint; no result
     * depends on it) */
    const char *next[2];
    int64_t next_bytes[2];
} ms_attn_step;

/* Floats of ms_attn_step.s for keys of dk dimensions: score rows of a
 * group of up to 16 queries, then the chunk's keys transposed (or widened)
 * and the group's queries. */
static inline int64_t ms_attn_scratch(int dk)
{
    return 16 * MS_ATTN_SROW + (int64_t)(dk + 16) * (MS_ATTN_CHUNK + 16);
}

typedef struct ms_kernel_ops {
    const char *name;                 /* "scalar", "avx2", "avx512" */
    ms_rows_fn rows[MS_WFMT_COUNT];
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float a, const float *x, float *y, int64_t n); /* y += a*x */
    /* Reads bytes at p (64-byte aligned, bytes % 256 == 0) as fast as the
     * ISA loads and returns a checksum: the read stream that bandwidth
     * floors are measured with (ms_read_stream). */
    uint64_t (*stream)(const void *p, int64_t bytes);
    /* Runs `iters` rounds of independent fused multiply-adds on the ISA's
     * widest float vectors, as many chains as hide their latency, stores
     * their sum at *sink and returns the floating-point operations done
     * (2 per lane per FMA): the compute peak that floors are measured
     * with (ms_fma_peak). */
    double (*fma)(int64_t iters, float *sink);
    void (*attn)(const ms_attn_step *a);
    /* dst[0..n) = n KV-cache elements of format fmt at src, widened exactly;
     * FP8: times scale[i / group] (src on a group boundary). */
    void (*widen)(ms_kvfmt fmt, const void *src, const float *scale, int group, int64_t n,
                  float *dst);
} ms_kernel_ops;

/* Op tables compiled into this binary; NULL when the CPU cannot run it. */
const ms_kernel_ops *ms_kernels_scalar(void);
const ms_kernel_ops *ms_kernels_avx2(void);
const ms_kernel_ops *ms_kernels_avx512(void);
/* The opt-in fast table (--precision fast): avx512 with BF16, MXFP4 and
 * FP8 products by vdpbf16ps over activations rounded to bf16 (FP8's
 * subnormal codes dropped), and its attention step over bf16 KV rows by
 * vdpbf16ps over queries and softmax weights rounded to bf16; not exact. */
const ms_kernel_ops *ms_kernels_avx512_bf16(void);
/* The opt-in int8 table (--precision int8): avx512 with MXFP4 products by
 * vpdpbusd (AVX512-VNNI) over activations quantised to int8 per block of
 * 32 columns, as llama.cpp's Q8_0; not exact. */
const ms_kernel_ops *ms_kernels_avx512_vnni(void);
/* The same arithmetic on AVX2 (vpmaddubsw + vpmaddwd), for --precision int8
 * on CPUs without AVX512-VNNI. */
const ms_kernel_ops *ms_kernels_avx2_int8(void);
/* The exact AMX table: avx512 with BF16 products on the tile unit
 * (AMX-BF16), activations split exactly into three bf16 parts. Tested and
 * benchmarked, not chosen: prefill 2x faster, decode slower (perf.md). */
const ms_kernel_ops *ms_kernels_avx512_amx(void);

/* The exact table for this CPU, chosen once (thread-safe): the fastest
 * available. The environment is not consulted; tests reach the others
 * directly. */
const ms_kernel_ops *ms_kernels_exact(void);

/* The table products use: ms_kernels_exact(), or the table of an opt-in
 * precision (enum ms_precision of moestream.h: fast, int8) once
 * ms_kernels_set_precision succeeded (process-wide; -1 when this CPU has no
 * such table, nothing changes). */
const ms_kernel_ops *ms_kernels(void);
int ms_kernels_set_precision(int precision);
/* The table of a precision on this CPU, or NULL. */
const ms_kernel_ops *ms_kernels_for(int precision);

/* How far ahead of the weights being read the exact AVX-512 table
 * prefetches, in bytes: `near` for a matvec of F32, BF16 or F16 (little
 * work per byte), `far` for FP8 and for every batched product of those
 * (column order, x86_rows.h), `lanes` for MXFP4's lane-order loop, `rows`
 * for the whole rows of the lane-order loop (x86_lanes.h; into L2, 0 for
 * none). And `x_l1`: the bytes of transposed x a token group of the
 * lane-order loop may keep in L1 beside whole rows (more goes panel-major;
 * 0: each format's default, x86_lanes.h). The best values are the CPU's:
 * chosen once per CPU vendor and family (docs/perf.md, "Prefetch distance
 * per CPU"), settable for sweeps (bench/kernels --prefetch). No result
 * depends on them. */
typedef struct ms_prefetch {
    int near, far, lanes, rows, x_l1;
} ms_prefetch;
ms_prefetch ms_kernels_prefetch(void);
void ms_kernels_set_prefetch(ms_prefetch p); /* before any product runs */

/* Whether the exact AVX2 and AVX-512 tables run FP8 in byte-lane order
 * (1) or in column order (0): chosen per CPU vendor (dispatch.c), settable
 * for tests and A/B benchmarks before any product runs. The two orders sum
 * in different orders, so they differ in the last bits; a run uses one. */
int ms_kernels_fp8_lanes(void);
void ms_kernels_set_fp8_lanes(int on);

/* Multithreaded drivers over the active op table (row chunks spread over
 * the thread pool, base/pool.h; one dispatch per call).
 * y[rows] = W x ;  Y[n][rows] = X[n][cols] W^T (row strides = cols, rows). */
void ms_matvec(const ms_mat *w, const float *x, float *y);
void ms_matmul(const ms_mat *w, const float *X, int n, float *Y);
/* Same with an explicit op table (tests, bench). */
void ms_matmul_ops(const ms_kernel_ops *ops, const ms_mat *w, const float *X, int n,
                   float *Y);

/* One product of ms_matmul_many: Y[n][w->rows] = X[n][w->cols] w^T, then,
 * with a bias, Y[t][r] += bias[r] (the same addition as a pass of its own
 * after the product, done by the thread that made the row chunk). */
typedef struct ms_matmul_job {
    const ms_kernel_ops *ops; /* NULL: the active table */
    const ms_mat *w;
    const float *X;
    int n;
    float *Y;
    const float *bias;        /* NULL, or [w->rows] */
} ms_matmul_job;

/* Independent products in one dispatch: the row chunks of all of them are
 * spread over the pool together (no join between them). Each Y must not
 * overlap another job's X or Y. Results are those of ms_matmul_ops on each
 * job, bit for bit. */
void ms_matmul_many(const ms_matmul_job *jobs, int n_jobs);

/* Memory bandwidth in GB/s (1e9 bytes per second) of `threads` threads at
 * once, each over its own slice of buf (64-byte aligned, far larger than
 * the last-level cache): a plain read stream with the active table's
 * loads, or a memcpy of src to dst counting bytes read + written. Threads
 * are started (plain pthreads) before the clock, so the time is that of the
 * reads alone. Returns 0 when a thread cannot be started. */
double ms_read_stream(const void *buf, int64_t bytes, int threads);
double ms_copy_stream(void *dst, const void *src, int64_t bytes, int threads);
/* GFLOP/s of `threads` threads at once, each running the active table's
 * fma op for `iters` rounds (started as the read stream's are); 0 when a
 * thread cannot be started. */
double ms_fma_peak(int64_t iters, int threads);

/* Exact scalar decode of one weight element (test oracle helper). */
float ms_mat_get(const ms_mat *w, int64_t r, int64_t c);

/* Bytes of weight data (and scales) a full pass over w reads; over its
 * rows [r0, r1) (the scales of the block rows they touch). */
int64_t ms_mat_bytes(const ms_mat *w);
int64_t ms_rows_bytes(const ms_mat *w, int64_t r0, int64_t r1);

/* Products that run outside ms_matmul_many (MLA's per-head products, each
 * over a row range of its matrix) counted as one dispatch of `products`
 * products of `rows` x w->cols, `tokens` tokens each: `bytes` go to
 * ms_weight_bytes_read and, while the product profile is on (then
 * ms_products_timing() is 1, else 0), `seconds` to the row of their kind. */
int ms_products_timing(void);
void ms_products_note(const ms_mat *w, int64_t rows, int products, int tokens, int64_t bytes,
                      double seconds);

#endif

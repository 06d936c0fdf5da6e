/* Chooses the op table once for this CPU and drives it over the thread
 * pool; also the exact one-element decode and the byte count of a weight
 * view.
 *
 * Threads split rows and tiles split tokens; neither changes a result,
 * because the op tables compute each (token, row) independently, in one
 * rows call (see the determinism contract in kernels.h). Small products stay
 * in one task: splitting them costs more than they do. */
#include <cpuid.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/clock.h"
#include "base/pool.h"
#include "kernels/internal.h"
#include "moestream.h"

/* Below this many multiply-adds a product runs on one thread (~10 us). */
#define PAR_MIN_MACS (1 << 18)
/* A row chunk (one unit of thread work) reads at least this many bytes... */
#define CHUNK_MIN_BYTES (64 << 10)
/* ...and at most this many when its weights are re-read per token tile. */
#define CHUNK_L2_BYTES (512 << 10)
/* A token tile's activations stay under this many bytes (L2-resident while
 * a chunk's rows stream past). */
#define TILE_X_BYTES (256 << 10)

static pthread_once_t choose_once = PTHREAD_ONCE_INIT;
static const ms_kernel_ops *chosen; /* written once, under choose_once */
/* The table products use: the exact one unless the fast one was asked for
 * (process-wide, like the thread count; set at engine open). */
static _Atomic(const ms_kernel_ops *) active;

/* Zen 5 wants 8 KiB ahead in column order whatever the product (matvec
 * BF16 28-29 -> 33-35 GB/s a core, FP8 15 -> 25) and 2 KiB for MXFP4. On
 * an Intel Xeon with AMX (Sapphire/Granite Rapids class) 8 KiB slowed a
 * BF16 matvec of 4096 columns to 10.2 GB/s a core against 12.9 at 1 KiB
 * (F16 11.8 vs 13.4, F32 13.4 vs 13.7), while FP8 and the batched products
 * still gained from 8 KiB (BF16 n = 8: 58 vs 51 GFLOP/s a core; FP8 66 vs
 * 48); MXFP4 2 KiB. In whole decodes there, 2 KiB near: gpt-oss-20b as
 * fast as at 1 KiB (195.5 vs 193.4 ms/token; 8 KiB 233.9), Qwen3's short
 * expert rows better than at 1 KiB (90.4 vs 96.1 ms; 8 KiB 86.2). A Zen 4
 * core (AVX-512 on 256-bit units) reads a BF16 matvec fastest with no
 * software prefetch at all: gpt-oss-20b's lm_head from the page cache at
 * 13-18 GB/s on one thread against 9-11 with 8 KiB (docs/perf.md, "Zen
 * 4"); FP8 and the batched products keep 8 KiB, MXFP4 does not care.
 *
 * Whole rows of the lane-order loop (x86_lanes.h) also ask for their bytes
 * 24 KiB ahead into L2 on AMD: the page cache's 4 KiB pages stop the
 * hardware prefetcher, and Zen 4 (two threads, from a file mapping, 8
 * alternations) gained BF16 2880 columns 29.7 -> 31.1 GB/s (median), 4096
 * 27.4 -> 30.4, FP8 2048 31 -> 38, one thread BF16 2880 17.6 -> 23. The
 * Intel Xeon with AMX lost by it: Qwen3-30B-A3B (12 layers, BF16) decoded
 * on two threads at 105.3 ms/token with it, 87.0 without (interleaved;
 * 86.7 -> 75.4 in a faster hour), gpt-oss-20b 177.4 -> 159.2, so there it
 * is 0.
 *
 * Zen 5 (family 1Ah) with the weights in 2 MiB pages, as the engine maps
 * them since it rereads shards cached small (engine.c), reads BF16 fastest
 * with neither: whole decodes alternated in one build (twelfth session,
 * docs/perf.md "BF16 without software prefetch on Zen 5"): gpt-oss-20b's
 * lm_head 38 -> 33 ms a token on two threads and 82 -> 60 on one, Qwen3's
 * 12 layers 75-82 -> 67-77 ms/token, DeepSeek-V3 (FP8) unchanged; over
 * 4 KiB pages a matvec reads as fast either way.
 *
 * Zen 5's L1 holds 48 KiB (Zen 4's 32), so there a token group of the
 * lane-order loop keeps up to 36 KiB of x beside whole rows in every
 * format. One thread from memory, exact table, the bounds alternated in
 * one process (docs/perf.md, "Whole rows while x fits a Zen 5 L1"), GB/s
 * at 36 KiB against the 16 (24 for MXFP4) measured on Zen 4:
 *   3 tokens x 2880 columns (35 KiB of float x): BF16 22.4-23.0 / 16.8-17.4,
 *     FP8 15.6-15.9 / 11.6-12.0, MXFP4 9.3-9.5 / 8.4-8.8;
 *   1 token x 7168 (28 KiB): BF16 24.7-27.7 / 20.6-20.7, FP8 25.4-27.2 /
 *     17.5-18.5, MXFP4 unchanged;
 *   2 tokens x 4096 (32 KiB): BF16 +5%, FP8 +25%, MXFP4 +5-9%.
 * Past the bound whole rows lose: 4 tokens x 2880 (45 KiB) BF16 11.0
 * against 16.1 panel-major, 3 x 4096 (48 KiB) 13.1 against 15.7. Zero
 * keeps each format's own bound (x86_lanes.h). */
ms_prefetch ms_prefetch_bytes = {8192, 8192, 2048, 24 << 10, 0};

/* FP8 in byte-lane order in the AVX2 and AVX-512 tables on AMD, column
 * order elsewhere. The byte-lane decode leaves e4m3 subnormals as float
 * subnormals, and an Intel core multiplies a vector holding one through a
 * microcode assist: on a Xeon with AMX, a 7168-column matvec over codes one
 * in sixteen subnormal ran at 0.4 GB/s a core in byte-lane order against
 * 9.2 in column order. Over codes spread as trained ones are (~1e-4
 * subnormal, ms_synth_e4m3) column order is still the faster there: matvec
 * 9.3 against 8.3 GB/s, n = 8 3.1 against 2.5, and the 4-layer DeepSeek-V3
 * prefills 31% faster at the same decode speed (docs/perf.md, "FP8 on
 * Intel"). Zen 4 multiplies subnormals at full speed and runs byte-lane
 * order faster than column order (16.6 against 11.5 GB/s a core). */
int ms_fp8_lanes = 1;

int ms_cpu_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

/* AMD family 19h with AVX-512 is Zen 4 (Zen 3, the same family, has
 * none); 1Ah is Zen 5. */
static int amd_family(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    unsigned base = (a >> 8) & 0xF, ext = (a >> 20) & 0xFF;
    return (int)(base == 0xF ? base + ext : base);
}

static void choose(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_is("amd")) {
        ms_prefetch_bytes.near = 2048;
        ms_prefetch_bytes.rows = 0;
        ms_fp8_lanes = 0;
    } else if (amd_family() == 0x19) {
        ms_prefetch_bytes.near = 0;
    } else if (amd_family() == 0x1A) {
        ms_prefetch_bytes.near = 0;
        ms_prefetch_bytes.rows = 0;
        ms_prefetch_bytes.x_l1 = 36 << 10;
    }
    /* not the AMX table (x86_amx.c): it doubles prefill but slowed decode
     * of Qwen3's short BF16 expert rows (docs/perf.md, "AMX") */
    chosen = ms_kernels_avx512();
    if (!chosen)
        chosen = ms_kernels_avx2();
    if (!chosen)
        chosen = ms_kernels_scalar();
}

const ms_kernel_ops *ms_kernels_exact(void)
{
    pthread_once(&choose_once, choose);
    return chosen;
}

const ms_kernel_ops *ms_kernels(void)
{
    const ms_kernel_ops *a = atomic_load_explicit(&active, memory_order_acquire);
    return a ? a : ms_kernels_exact();
}

/* The opt-in tables share the exact table's FP8 rows and prefetch
 * distances, which choose() sets for this CPU: it runs first, so that no
 * product of theirs runs before the choice and none after it differs. */
const ms_kernel_ops *ms_kernels_for(int precision)
{
    pthread_once(&choose_once, choose);
    switch (precision) {
    case MS_PRECISION_EXACT: return ms_kernels_exact();
    case MS_PRECISION_FAST: return ms_kernels_avx512_bf16();
    case MS_PRECISION_INT8:
        return ms_kernels_avx512_vnni() ? ms_kernels_avx512_vnni() : ms_kernels_avx2_int8();
    default: return NULL;
    }
}

int ms_kernels_set_precision(int precision)
{
    const ms_kernel_ops *t = ms_kernels_for(precision);
    if (!t)
        return -1;
    atomic_store_explicit(&active, t, memory_order_release);
    return 0;
}

int ms_kernels_precision_available(int precision)
{
    return ms_kernels_for(precision) != NULL;
}

ms_prefetch ms_kernels_prefetch(void)
{
    pthread_once(&choose_once, choose);
    return ms_prefetch_bytes;
}

void ms_kernels_set_prefetch(ms_prefetch p)
{
    pthread_once(&choose_once, choose);
    ms_prefetch_bytes = p;
}

int ms_kernels_fp8_lanes(void)
{
    pthread_once(&choose_once, choose);
    return ms_fp8_lanes;
}

void ms_kernels_set_fp8_lanes(int on)
{
    pthread_once(&choose_once, choose);
    ms_fp8_lanes = on;
}

const char *ms_kernel_path(void)
{
    return ms_kernels()->name;
}

/* Bytes of one row of weights, scales excluded. */
static int64_t row_bytes(const ms_mat *w)
{
    return w->cols * ms_wfmt_info[w->fmt].bits / 8;
}

int64_t ms_rows_bytes(const ms_mat *w, int64_t r0, int64_t r1)
{
    if (r1 <= r0)
        return 0;
    int64_t bytes = (r1 - r0) * row_bytes(w);
    const ms_wfmt_traits *t = &ms_wfmt_info[w->fmt];
    if (t->scale == MS_SCALE_BLOCK)
        bytes += ((r1 - 1) / w->block_rows - r0 / w->block_rows + 1) *
                 ms_ceil_div(w->cols, w->block_cols) * ms_dtype_size(w->scale_dtype);
    else if (t->scale == MS_SCALE_GROUP)
        bytes += (r1 - r0) * (w->cols / t->group); /* one e8m0 byte per group */
    return bytes;
}

int64_t ms_mat_bytes(const ms_mat *w)
{
    return ms_rows_bytes(w, 0, w->rows);
}

/* For FP8 with an F32 scale the product is rounded to float once; with BF16
 * or F16 scales (at most 11 significant bits, times 4) it is exact. */
float ms_mat_get(const ms_mat *w, int64_t r, int64_t c)
{
    int64_t i = r * w->cols + c;
    switch (w->fmt) {
    case MS_WFMT_F32:
        return ms_load_f32(w->w, i);
    case MS_WFMT_BF16:
        return ms_bf16_to_f32(ms_load_u16(w->w, i));
    case MS_WFMT_F16:
        return ms_f16_to_f32(ms_load_u16(w->w, i));
    case MS_WFMT_FP8_BLOCK:
        return ms_e4m3_to_f32(((const uint8_t *)w->w)[i]) *
               ms_fp8_scale(w, r, c / w->block_cols, ms_f16_to_f32);
    default: {
        uint8_t b = ((const uint8_t *)w->w)[i / 2];
        float v = ms_e2m1_to_f32((uint8_t)(c & 1 ? b >> 4 : b & 0xF));
        return v * ms_e8m0_to_f32(ms_mx_scale_byte(w, r, c / 32));
    }
    }
}

/* Tokens per tile: whole groups of 4 whose activations fit TILE_X_BYTES. */
static int64_t token_tile(const ms_mat *w)
{
    int64_t tile = TILE_X_BYTES / (4 * (w->cols > 0 ? w->cols : 1));
    return tile < 4 ? 4 : tile - tile % 4;
}

/* Rows [r0, r1) for all n tokens, one token tile at a time. */
static void run_rows(const ms_kernel_ops *ops, const ms_mat *w, const float *X, int n,
                     float *Y, int64_t r0, int64_t r1)
{
    int64_t tile = token_tile(w);
    for (int64_t t0 = 0; t0 < n; t0 += tile) {
        int nt = (int)(n - t0 < tile ? n - t0 : tile);
        ops->rows[w->fmt](w, X + t0 * w->cols, nt, w->cols, Y + t0 * w->rows, w->rows, r0,
                          r1);
    }
}

/* Rows per unit of work. With more tokens than one tile, a chunk's weights
 * are read once per tile, so they must stay in L2 between tiles; otherwise
 * a dispatch is cut into ~8 chunks per thread in all, which balance the
 * load, each product taking its share of them by bytes (share), each
 * chunk big enough to amortise. Each chunk starts a stream of its own:
 * at ~8 chunks a thread for every product, Qwen3's 16 expert matrices of
 * 3 MB a dispatch went in 256 chunks, and its experts decoded 10-15%
 * slower than with the dispatch's 16 (docs/perf.md, "The serial work
 * between a decode's products"). */
static int64_t chunk_rows(const ms_mat *w, int n, int threads, double share)
{
    int64_t rb = row_bytes(w) > 0 ? row_bytes(w) : 1;
    if (n > token_tile(w))
        return ms_ceil_div(CHUNK_L2_BYTES, rb);
    int64_t want = (int64_t)ceil(8.0 * threads * share);
    int64_t chunk = ms_ceil_div(w->rows, want > 1 ? want : 1);
    int64_t min_rows = ms_ceil_div(CHUNK_MIN_BYTES, rb);
    return chunk < min_rows ? min_rows : chunk;
}

/* Products planned per dispatch of ms_matmul_many. */
#define MANY_MAX 16

/* One product cut into chunks of rows; a task runs `per_task` chunks (all
 * of them for a product too small to split, else one). */
typedef struct plan {
    const ms_kernel_ops *ops;
    const ms_mat *w;
    const float *X;
    float *Y;
    const float *bias;
    int n;
    int64_t chunk, n_chunks, per_task, n_tasks;
} plan;

typedef struct many {
    plan p[MANY_MAX];
    int n;
    uint64_t id; /* ms_rows_dispatch of its tasks */
} many;

__thread uint64_t ms_rows_dispatch;
static _Atomic uint64_t dispatches;

/* share: the job's part of its dispatch's weight bytes (chunk_rows). */
static void plan_job(plan *p, const ms_matmul_job *j, int threads, double share)
{
    const ms_mat *w = j->w;
    *p = (plan){.ops = j->ops ? j->ops : ms_kernels(), .w = w, .X = j->X, .Y = j->Y,
                .bias = j->bias, .n = j->n};
    if (w->rows <= 0 || j->n <= 0)
        return;
    if (w->rows * w->cols * j->n < PAR_MIN_MACS)
        threads = 1;
    p->chunk = chunk_rows(w, j->n, threads, share);
    p->n_chunks = ms_ceil_div(w->rows, p->chunk);
    p->per_task = threads <= 1 ? p->n_chunks : 1;
    p->n_tasks = ms_ceil_div(p->n_chunks, p->per_task);
}

/* Task t of a dispatch: the t-th task of the products in order. */
static void many_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    const many *m = ctx;
    const plan *p = m->p;
    while (t >= p->n_tasks)
        t -= p++->n_tasks;
    int64_t rows = p->w->rows, c1 = (t + 1) * p->per_task;
    ms_rows_dispatch = m->id;
    for (int64_t c = t * p->per_task; c < c1 && c < p->n_chunks; c++) {
        int64_t r0 = c * p->chunk, r1 = r0 + p->chunk < rows ? r0 + p->chunk : rows;
        run_rows(p->ops, p->w, p->X, p->n, p->Y, r0, r1);
        /* the chunk's bias while its rows are at hand: as a pass of its own
         * on one thread, a gpt-oss-20b decode's biases (cold, ~160 KB a
         * layer) took ~20 us a layer */
        for (int k = 0; p->bias && k < p->n; k++)
            for (int64_t r = r0; r < r1; r++)
                p->Y[k * rows + r] += p->bias[r];
    }
    ms_rows_dispatch = 0;
}

/* Weight bytes of every product since the process started (relaxed: a
 * statistic read between phases, not a synchronisation). */
static _Atomic int64_t weight_bytes;

int64_t ms_weight_bytes_read(void)
{
    return atomic_load_explicit(&weight_bytes, memory_order_relaxed);
}

/* The product profile (moestream.h): one row per kind of dispatch, found
 * by a linear search under a mutex, taken only while the profile is on (a
 * dispatch takes ~10 us at least; the search and lock well under 1 us).
 * When a kind comes with the table full, its last row becomes "other"
 * (shape 0 x 0, keeping its counts) and takes that kind and every later
 * new one. */
enum { PROFILE_ROWS = 96, PROFILE_TOKENS = 5 };
static _Atomic int profiling;
static pthread_mutex_t profile_lock = PTHREAD_MUTEX_INITIALIZER;
static ms_product_stat profile[PROFILE_ROWS];
static int profile_rows;

void ms_product_profile(int on)
{
    pthread_mutex_lock(&profile_lock);
    memset(profile, 0, sizeof profile);
    profile_rows = 0;
    atomic_store_explicit(&profiling, on != 0, memory_order_relaxed);
    pthread_mutex_unlock(&profile_lock);
}

int ms_product_stats(ms_product_stat *out, int max)
{
    pthread_mutex_lock(&profile_lock);
    int n = profile_rows;
    for (int i = 0; i < n && i < max; i++)
        out[i] = profile[i];
    pthread_mutex_unlock(&profile_lock);
    return n;
}

/* Adds one dispatch to the row of its kind: `products` products, the first
 * of format f and shape rows x cols, the most tokens of one `tokens`. */
static void profile_add(ms_wfmt f, int64_t rows, int64_t cols, int products, int tokens,
                        int64_t bytes, double flops, double seconds)
{
    ms_product_stat key = {.format = ms_wfmt_info[f].name, .rows = rows, .cols = cols,
                           .products = products,
                           .tokens = tokens < PROFILE_TOKENS ? tokens : PROFILE_TOKENS};
    pthread_mutex_lock(&profile_lock);
    int i = 0;
    while (i < profile_rows &&
           !(profile[i].format == key.format && profile[i].rows == key.rows &&
             profile[i].cols == key.cols && profile[i].products == key.products &&
             profile[i].tokens == key.tokens))
        i++;
    if (i == profile_rows) {
        if (profile_rows == PROFILE_ROWS) {
            i = PROFILE_ROWS - 1;
            profile[i] = (ms_product_stat){.format = "other", .dispatches = profile[i].dispatches,
                                           .seconds = profile[i].seconds,
                                           .weight_bytes = profile[i].weight_bytes,
                                           .flops = profile[i].flops};
        } else {
            profile[i] = key;
            profile_rows++;
        }
    }
    profile[i].dispatches++;
    profile[i].seconds += seconds;
    profile[i].weight_bytes += bytes;
    profile[i].flops += flops;
    pthread_mutex_unlock(&profile_lock);
}

int ms_products_timing(void)
{
    return atomic_load_explicit(&profiling, memory_order_relaxed);
}

void ms_products_note(const ms_mat *w, int64_t rows, int products, int tokens, int64_t bytes,
                      double seconds)
{
    atomic_fetch_add_explicit(&weight_bytes, bytes, memory_order_relaxed);
    if (ms_products_timing())
        profile_add(w->fmt, rows, w->cols, products, tokens, bytes,
                    2.0 * (double)rows * (double)w->cols * tokens * products, seconds);
}

void ms_matmul_many(const ms_matmul_job *jobs, int n_jobs)
{
    int threads = ms_pool_threads();
    for (int j0 = 0; j0 < n_jobs; j0 += MANY_MAX) {
        many m = {.n = n_jobs - j0 < MANY_MAX ? n_jobs - j0 : MANY_MAX,
                  .id = atomic_fetch_add_explicit(&dispatches, 1, memory_order_relaxed) + 1};
        int64_t n_tasks = 0, total = 0;
        for (int j = 0; j < m.n; j++)
            total += jobs[j0 + j].n > 0 ? ms_mat_bytes(jobs[j0 + j].w) : 0;
        atomic_fetch_add_explicit(&weight_bytes, total, memory_order_relaxed);
        for (int j = 0; j < m.n; j++) {
            plan_job(&m.p[j], &jobs[j0 + j], threads,
                     total > 0 ? (double)ms_mat_bytes(jobs[j0 + j].w) / (double)total : 1.0);
            n_tasks += m.p[j].n_tasks;
        }
        int prof = ms_products_timing();
        double t0 = prof ? ms_now() : 0;
        ms_pool_run(n_tasks, many_task, &m);
        if (prof && m.n > 0 && n_tasks > 0) {
            int tokens = 0;
            double flops = 0;
            for (int j = 0; j < m.n; j++) {
                const ms_matmul_job *b = &jobs[j0 + j];
                tokens = b->n > tokens ? b->n : tokens;
                flops += 2.0 * (double)b->w->rows * (double)b->w->cols * b->n;
            }
            profile_add(jobs[j0].w->fmt, jobs[j0].w->rows, jobs[j0].w->cols, m.n, tokens,
                        total, flops, ms_now() - t0);
        }
    }
}

void ms_matmul_ops(const ms_kernel_ops *ops, const ms_mat *w, const float *X, int n,
                   float *Y)
{
    ms_matmul_job job = {.ops = ops, .w = w, .X = X, .n = n, .Y = Y};
    ms_matmul_many(&job, 1);
}

void ms_matmul(const ms_mat *w, const float *X, int n, float *Y)
{
    ms_matmul_ops(ms_kernels(), w, X, n, Y);
}

void ms_matvec(const ms_mat *w, const float *x, float *y)
{
    ms_matmul_ops(ms_kernels(), w, x, 1, y);
}

const ms_kernel_ops *ms_kernels_derive(ms_derived_ops *d)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    const ms_kernel_ops *b = d->base();
    if (!b)
        return NULL;
    pthread_mutex_lock(&mu);
    if (!d->built) {
        d->ops = *b;
        d->ops.name = d->name;
        for (int f = 0; f < MS_WFMT_COUNT; f++)
            if (d->rows[f])
                d->ops.rows[f] = d->rows[f];
        if (d->attn)
            d->ops.attn = d->attn;
        d->built = 1;
    }
    pthread_mutex_unlock(&mu);
    return &d->ops;
}

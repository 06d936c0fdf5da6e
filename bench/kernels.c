/* Kernel throughput against the memory-bandwidth floor.
 *
 * For each op table this CPU runs and each weight format: matvec over a
 * matrix larger than the last-level cache, in GB/s of weight bytes
 * (ms_mat_bytes) and effective GFLOP/s (2 per weight), with 1 and 2
 * threads. The floor is the machine's read stream with the same thread
 * count (ms_read_stream: each thread a plain vectorised read over its slice
 * of a buffer far larger than the L3); memcpy (read + write) is printed
 * beside it for information. "floor x" is the matvec time over the floor
 * (weight bytes / read-stream bandwidth). Also a batched matmul (n = 8)
 * column, and FP8 in both of its orders (ms_kernels_fp8_lanes). The opt-in
 * tables (--precision fast, int8) show only the formats they compute their
 * own way. Activations are 64-byte aligned, as the engine's arena gives
 * them.
 *
 * Every number is the best of ROUNDS passes taken in interleaved rounds
 * (each round measures both streams and times every line once), so that a
 * burst of load from elsewhere on a shared machine (this VM's bandwidth
 * swings 40-75 GB/s) spoils one pass of a line, not all of them.
 * The scalar table (the test oracle) is compute-bound at a few GB/s at
 * best, so it is timed once over a sixteenth of the rows.
 *
 * Usage: build/bench/kernels [MiB of weights per matrix, default 512]
 *        [--prefetch NEAR,FAR,LANES[,ROWS[,X_L1]]] (bytes ahead, and of x kept in
 *        L1 beside whole rows, for sweeps: ms_prefetch)
 *        [--cols N] (row length, default 4096; a multiple of 64)
 *        [--batch N] (tokens of the batched column, default 8: prefill's
 *        token groups; batched serving's steps are 2-4)
 *        [--small-pages] (weights in 4 KiB pages; by default in 2 MiB pages,
 *        as the engine holds them: its cache's arena, or the page cache's
 *        huge folios. The two are not the same for the kernels: on a Zen 5
 *        VM, interleaved, a two-thread BF16 matvec read 33.4 GB/s (median)
 *        from 2 MiB pages and 38.4 from 4 KiB ones; docs/perf.md)
 *        [--ab] (only in the build of bench/kernels_ab.sh REV, which links
 *        in REV's op tables beside this tree's: each line of a table is
 *        followed by the same line of REV's ("old ..."), timed right after
 *        it in every round, and each format's results are compared bit for
 *        bit. On this VM a core's speed flips between two levels from one
 *        minute to the next (another tenant on its sibling?), so A and B
 *        measured in separate runs can differ by 30% with no change at
 *        all; docs/perf.md, "Batched products against the core's FMA
 *        peak") */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include "base/pool.h"
#include "base/sysmem.h"
#include "kernels/kernels.h"
#include "runtime/synth.h"

static int64_t COLS = 4096; /* --cols */
static int BATCH = 8;       /* --batch: tokens of the batched matmul */
static int SMALL_PAGES;     /* --small-pages: weights from malloc (4 KiB pages) */
#define ROUNDS 5
#define N_TABLES 14 /* this tree's 7 tables, each followed by REV's under --ab */

/* REV's op tables, defined only in the build of bench/kernels_ab.sh */
#define AB_OLD(t) extern const ms_kernel_ops *ab_old_kernels_##t(void) __attribute__((weak));
AB_OLD(avx2)
AB_OLD(avx512)
AB_OLD(avx512_bf16)
AB_OLD(avx512_amx)
AB_OLD(avx2_int8)
AB_OLD(avx512_vnni)
#undef AB_OLD
static const char *label[N_TABLES]; /* a table's name on its lines */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double min_d(double a, double b)
{
    return a < b ? a : b;
}

/* Typical-valued weights (no NaN, few subnormals: FP8 codes as
 * ms_synth_e4m3 spreads them) and scales. */
static void fill(ms_wfmt fmt, uint8_t *w, size_t wbytes, uint8_t *scale, size_t sbytes)
{
    for (size_t i = 0; i + 8 <= wbytes; i += 8) {
        uint64_t r = next();
        switch (fmt) {
        case MS_WFMT_F32:
            r = (r & 0x807FFFFF807FFFFFull) | 0x3C0000003C000000ull;
            break;
        case MS_WFMT_BF16:
            r = (r & 0x807F807F807F807Full) | 0x3C003C003C003C00ull;
            break;
        case MS_WFMT_F16:
            r = (r & 0x83FF83FF83FF83FFull) | 0x3000300030003000ull;
            break;
        case MS_WFMT_FP8_BLOCK: { /* spread as trained codes are */
            uint64_t u[2] = {r, next()};
            r = 0;
            for (int k = 0; k < 8; k++)
                r |= (uint64_t)ms_synth_e4m3((uint16_t)(u[k / 4] >> (16 * (k % 4)))) << (8 * k);
            break;
        }
        default:
            break;
        }
        memcpy(w + i, &r, 8);
    }
    for (size_t i = 0; i < sbytes; i++) /* MXFP4: 2^-7 .. 2^0 */
        scale[i] = (uint8_t)(120 + next() % 8);
    if (fmt == MS_WFMT_FP8_BLOCK) /* F32 scales of 2^-8 */
        for (size_t i = 0; i + 4 <= sbytes; i += 4)
            memcpy(scale + i, &(float){0.00390625f}, 4);
}

static const char *fmt_name(ms_wfmt f)
{
    return ms_wfmt_info[f].name;
}

/* One matrix per format over its own buffer, each of `bytes` weight bytes. */
typedef struct bench_mat {
    ms_mat m;
    uint8_t *w, *scale;
} bench_mat;

static int make_mats(bench_mat *mats, size_t bytes)
{
    static const int64_t half_bytes[MS_WFMT_COUNT] = {8, 4, 4, 2, 1}; /* 2 x bytes/weight */
    for (int f = 0; f < MS_WFMT_COUNT; f++) {
        ms_mat *m = &mats[f].m;
        *m = (ms_mat){.fmt = (ms_wfmt)f, .cols = COLS, .block_rows = 128, .block_cols = 128,
                      .scale_dtype = f == MS_WFMT_FP8_BLOCK ? MS_DTYPE_F32 : MS_DTYPE_U8};
        m->rows = (int64_t)(2 * bytes / ((size_t)COLS * (size_t)half_bytes[f]));
        size_t sbytes = f == MS_WFMT_FP8_BLOCK ? (size_t)(m->rows / 128 * COLS / 128 * 4)
                        : f == MS_WFMT_MXFP4  ? (size_t)(m->rows * COLS / 32)
                                              : 0;
        mats[f].w = SMALL_PAGES ? malloc(bytes) : ms_map_huge(bytes);
        mats[f].scale = malloc(sbytes + 64);
        if (!mats[f].w || !mats[f].scale)
            return -1;
        fill((ms_wfmt)f, mats[f].w, bytes, mats[f].scale, sbytes);
        m->w = mats[f].w;
        m->scale = mats[f].scale;
    }
    return 0;
}

static double time_matmul(const ms_kernel_ops *ops, const ms_mat *m, const float *X, int n,
                          float *Y)
{
    double t0 = now();
    ms_matmul_ops(ops, m, X, n, Y);
    return now() - t0;
}

/* Whether table k runs format f with the kernel of an earlier table (the
 * opt-in tables replace only some formats): timed and printed once. */
static int inherited(const ms_kernel_ops **tables, int k, int f)
{
    for (int j = 0; j < k; j++)
        if (tables[j] && tables[j]->rows[f] == tables[k]->rows[f])
            return 1;
    return 0;
}

/* Best seconds per [table][format][threads-1][matvec, matmul]. */
typedef double times[N_TABLES][MS_WFMT_COUNT][2][2];

/* The exact AVX2 and AVX-512 tables run FP8 in either of two orders, one
 * chosen per CPU (ms_kernels_fp8_lanes); the other is timed beside it, in
 * the same rounds, into fp8_other. */
static int fp8_chosen;
static double fp8_other[N_TABLES][2][2];

static int fp8_two_orders(const ms_kernel_ops *ops, int f)
{
    return f == MS_WFMT_FP8_BLOCK && (ops == ms_kernels_avx512() || ops == ms_kernels_avx2());
}

/* One round: every line once, formats outer, so that a table and the one
 * after it (under --ab, REV's) time the same line back to back. The pair
 * goes in the other order in odd rounds: timed always first, a table was
 * slower than the same code timed second, by 1-25% on the Zen 5 VM (this
 * tree against itself, `taskset -c 0 bench/kernels_ab.sh HEAD 256`; AVX2
 * FP8 13.0 against 17.1 GB/s), which had counted against every change. */
static void run_round(const ms_kernel_ops **tables, const bench_mat *mats, const float *X,
                      float *Y, int round, times best)
{
    for (int f = 0; f < MS_WFMT_COUNT; f++) {
        for (int j = 0; j < N_TABLES; j++) {
            int k = j >= 2 && (round & 1) ? j ^ 1 : j; /* pairs (2, 3), (4, 5), ... */
            if (!tables[k])
                continue;
            int scalar = tables[k] == ms_kernels_scalar();
            if ((scalar && round > 0) || inherited(tables, k, f))
                continue;
            ms_mat m = mats[f].m;
            if (scalar)
                m.rows /= 16;
            for (int thr = 1; thr <= 2; thr++) {
                ms_pool_set_threads(thr);
                best[k][f][thr - 1][0] = min_d(best[k][f][thr - 1][0],
                                               time_matmul(tables[k], &m, X, 1, Y));
                if (!scalar)
                    best[k][f][thr - 1][1] = min_d(best[k][f][thr - 1][1],
                                                   time_matmul(tables[k], &m, X, BATCH, Y));
                if (fp8_two_orders(tables[k], f)) {
                    double *o = fp8_other[k][thr - 1];
                    ms_kernels_set_fp8_lanes(!fp8_chosen);
                    o[0] = min_d(o[0], time_matmul(tables[k], &m, X, 1, Y));
                    o[1] = min_d(o[1], time_matmul(tables[k], &m, X, BATCH, Y));
                    ms_kernels_set_fp8_lanes(fp8_chosen);
                }
            }
        }
    }
}

static void print_table(const ms_kernel_ops **tables, const bench_mat *mats, times best,
                        const double *bw)
{
    char mm[32];
    snprintf(mm, sizeof mm, "mm n=%d GB/s", BATCH);
    printf("%-20s %-10s %3s | %9s %8s %7s | %-12s %8s\n", "table", "format", "thr",
           "mv GB/s", "GFLOP/s", "floor x", mm, "GFLOP/s");
    for (int f = 0; f < MS_WFMT_COUNT; f++) {
        for (int k = 0; k < N_TABLES; k++) {
            if (!tables[k] || inherited(tables, k, f))
                continue;
            int scalar = tables[k] == ms_kernels_scalar();
            ms_mat m = mats[f].m;
            if (scalar)
                m.rows /= 16;
            double bytes = (double)ms_mat_bytes(&m), flops = 2.0 * (double)m.rows * COLS;
            for (int o = 0; o <= fp8_two_orders(tables[k], f); o++)
                for (int thr = 1; thr <= 2; thr++) {
                    const double *tt = o ? fp8_other[k][thr - 1] : best[k][f][thr - 1];
                    double t = tt[0], tb = tt[1];
                    printf("%-20s %-10s %3d | %9.1f %8.1f %7.2f | ",
                           !o ? label[k] : fp8_chosen ? " column order" : " byte lanes",
                           fmt_name((ms_wfmt)f), thr, bytes / t / 1e9, flops / t / 1e9,
                           t / (bytes / (bw[thr - 1] * 1e9)));
                    if (scalar)
                        printf("%-12s %8s\n", "-", "-");
                    else
                        printf("%-12.1f %8.1f\n", bytes / tb / 1e9, BATCH * flops / tb / 1e9);
                }
        }
    }
}

/* --ab: each table's products against REV's, bit for bit, for one token
 * and the batch, over the first rows of each format's matrix. */
static void compare_bits(const ms_kernel_ops **tables, const bench_mat *mats, const float *X)
{
    float *Y = malloc(2 * (size_t)BATCH * 512 * sizeof(float));
    if (!Y) {
        printf("\nbits: not compared (no memory for the results)\n");
        return;
    }
    printf("\nbits, this tree against the revision (1 and %d tokens, the first 512 rows):\n",
           BATCH);
    ms_pool_set_threads(1);
    for (int k = 2; k + 1 < N_TABLES; k += 2) {
        if (!tables[k] || !tables[k + 1])
            continue;
        int own = 1;
        for (int f = 0; f < MS_WFMT_COUNT; f++)
            own &= tables[k]->rows[f] == tables[k + 1]->rows[f];
        if (own) { /* a build that renamed nothing would compare a table with itself */
            printf("  %-20s the revision's table is this tree's own: not linked in\n", label[k]);
            continue;
        }
        printf("  %-20s", label[k]);
        for (int f = 0; f < MS_WFMT_COUNT; f++) {
            ms_mat m = mats[f].m;
            m.rows = m.rows < 512 ? m.rows : 512;
            int same = 1;
            for (int n = 1; n <= BATCH; n += BATCH > 1 ? BATCH - 1 : 1) {
                size_t sz = (size_t)n * (size_t)m.rows;
                ms_matmul_ops(tables[k], &m, X, n, Y);
                ms_matmul_ops(tables[k + 1], &m, X, n, Y + sz);
                same &= memcmp(Y, Y + sz, sz * sizeof(float)) == 0;
            }
            printf(" %s %s%s", fmt_name((ms_wfmt)f), same ? "same" : "DIFFER",
                   f + 1 < MS_WFMT_COUNT ? "," : "\n");
        }
    }
    free(Y);
}

int main(int argc, char **argv)
{
    size_t mib = 512;
    int ab = 0;
    for (int i = 1; i < argc; i++) {
        ms_prefetch pf = ms_kernels_prefetch();
        int got = i + 1 < argc ? sscanf(argv[i + 1], "%d,%d,%d,%d,%d", &pf.near, &pf.far,
                                        &pf.lanes, &pf.rows, &pf.x_l1)
                               : 0;
        if (!strcmp(argv[i], "--prefetch") && got >= 3 && pf.near >= 0 && pf.far >= 0 &&
            pf.lanes >= 0 && pf.rows >= 0 && pf.x_l1 >= 0) {
            ms_kernels_set_prefetch(pf);
            i++;
        } else if (!strcmp(argv[i], "--cols") && i + 1 < argc && atol(argv[i + 1]) >= 128 &&
                   atol(argv[i + 1]) % 64 == 0) {
            COLS = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc && atoi(argv[i + 1]) >= 1 &&
                   atoi(argv[i + 1]) <= 64) {
            BATCH = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--small-pages")) {
            SMALL_PAGES = 1;
        } else if (!strcmp(argv[i], "--ab")) {
            ab = 1;
        } else if (atol(argv[i]) > 0) {
            mib = (size_t)atol(argv[i]);
        } else {
            fprintf(stderr, "usage: kernels [MiB] [--prefetch NEAR,FAR,LANES[,ROWS[,X_L1]]] "
                            "[--cols N] [--batch 1..64] [--small-pages] [--ab]\n");
            return 2;
        }
    }
    size_t bytes = mib << 20;
    bench_mat mats[MS_WFMT_COUNT];
    char *copy = aligned_alloc(4096, bytes);
    float *X = aligned_alloc(64, BATCH * COLS * sizeof(float));
    float *Y = malloc(2 * bytes / COLS * BATCH * sizeof(float)); /* rows <= 2 * bytes/COLS */
    if (!copy || !X || !Y || make_mats(mats, bytes) != 0) {
        fprintf(stderr, "cannot allocate %zu MiB x 6\n", mib);
        return 1;
    }
    memset(copy, 2, bytes);
    for (int i = 0; i < BATCH * COLS; i++)
        X[i] = (float)((int)(next() % 2001) - 1000) / 1000.0f;
    const ms_kernel_ops *tables[N_TABLES] = {ms_kernels_scalar(),     NULL, ms_kernels_avx2(),
                                             NULL,                    ms_kernels_avx512(),
                                             NULL,                    ms_kernels_avx512_bf16(),
                                             NULL,                    ms_kernels_avx512_amx(),
                                             NULL,                    ms_kernels_avx2_int8(),
                                             NULL,                    ms_kernels_avx512_vnni()};
    const char *names[N_TABLES] = {[0] = "scalar",      [2] = "avx2",
                                   [4] = "avx512",      [6] = "avx512-bf16-fast",
                                   [8] = "avx512-amx",  [10] = "avx2-int8",
                                   [12] = "avx512-vnni-int8"};
    static char old_label[N_TABLES][32];
    for (int k = 0; k < N_TABLES; k += 2) {
        label[k] = names[k];
        if (!tables[k])
            printf("skipped: the %s table (this CPU lacks its instructions)\n", names[k]);
    }
    if (ab && !ab_old_kernels_avx512) {
        fprintf(stderr, "kernels: --ab needs the build of bench/kernels_ab.sh REV, which links "
                        "in REV's tables\n");
        return 2;
    }
    if (ab) {
        const ms_kernel_ops *(*old[N_TABLES / 2])(void) = {
            NULL, ab_old_kernels_avx2, ab_old_kernels_avx512, ab_old_kernels_avx512_bf16,
            ab_old_kernels_avx512_amx, ab_old_kernels_avx2_int8, ab_old_kernels_avx512_vnni};
        for (int k = 2; k < N_TABLES; k += 2) {
            tables[k + 1] = tables[k] && old[k / 2] ? old[k / 2]() : NULL;
            snprintf(old_label[k + 1], sizeof old_label[k + 1], "old %s", names[k]);
            label[k + 1] = old_label[k + 1];
            if (tables[k] && !tables[k + 1])
                printf("--ab: the revision has no %s table\n", names[k]);
        }
    }
    times best;
    double rd[2] = {0, 0}, cp[2] = {0, 0}, pk[2] = {0, 0};
    for (int k = 0; k < N_TABLES; k++)
        for (int i = 0; i < 4; i++) {
            for (int f = 0; f < MS_WFMT_COUNT; f++)
                best[k][f][i / 2][i % 2] = 1e30;
            fp8_other[k][i / 2][i % 2] = 1e30;
        }
    fp8_chosen = ms_kernels_fp8_lanes();
    for (int round = 0; round < ROUNDS; round++) {
        for (int thr = 1; thr <= 2; thr++) {
            double r = ms_read_stream(mats[0].w, (int64_t)bytes, thr);
            double c = ms_copy_stream(copy, mats[0].w, (int64_t)bytes, thr);
            double g = ms_fma_peak(INT64_C(3) << 20, thr);
            rd[thr - 1] = r > rd[thr - 1] ? r : rd[thr - 1];
            cp[thr - 1] = c > cp[thr - 1] ? c : cp[thr - 1];
            pk[thr - 1] = g > pk[thr - 1] ? g : pk[thr - 1];
        }
        run_round(tables, mats, X, Y, round, best);
    }
    printf("read stream (%s loads): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n",
           ms_kernels()->name, rd[0], rd[1]);
    printf("memcpy (read + write, for information): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n",
           cp[0], cp[1]);
    printf("compute peak (%s FMAs, the GFLOP/s columns' bound): 1 thread %.1f GFLOP/s, "
           "2 threads %.1f GFLOP/s\n", ms_kernels()->name, pk[0], pk[1]);
    const void *maps[MS_WFMT_COUNT];
    size_t sizes[MS_WFMT_COUNT];
    for (int f = 0; f < MS_WFMT_COUNT; f++) {
        maps[f] = mats[f].w;
        sizes[f] = bytes;
    }
    int64_t huge = ms_huge_bytes_n(MS_WFMT_COUNT, maps, sizes, NULL);
    huge = huge > 0 ? huge : 0;
    printf("matrices: %zu MiB of weights, %lld columns, %.0f%% in 2 MiB pages%s; floor x = time / "
           "(bytes / read stream); best of %d interleaved rounds\n", mib, (long long)COLS,
           100.0 * (double)huge / (double)(bytes * MS_WFMT_COUNT),
           SMALL_PAGES ? " (--small-pages)" : "", ROUNDS);
    ms_prefetch pf = ms_kernels_prefetch();
    printf("prefetch (exact AVX-512 table): %d bytes ahead (matvec), %d (FP8, batched), %d "
           "(MXFP4), %d (whole rows, into L2); x beside whole rows: ",
           pf.near, pf.far, pf.lanes, pf.rows);
    if (pf.x_l1)
        printf("up to %d KiB\n", pf.x_l1 >> 10);
    else
        printf("each format's own bound\n");
    printf("FP8 (AVX2, AVX-512): %s order on this CPU; the other order on the line below\n\n",
           fp8_chosen ? "byte-lane" : "column");
    print_table(tables, mats, best, rd);
    if (ab)
        compare_bits(tables, mats, X);
    for (int f = 0; f < MS_WFMT_COUNT; f++) {
        if (SMALL_PAGES)
            free(mats[f].w);
        else
            munmap(mats[f].w, bytes);
        free(mats[f].scale);
    }
    free(copy);
    free(X);
    free(Y);
    return 0;
}

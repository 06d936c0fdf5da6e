/* Memory bandwidth as the floors of docs/perf.md use it: `threads` plain
 * pthreads, started and spinning on a flag before the clock runs, each
 * streaming its own slice once. Not the pool: a measurement must know that
 * every slice has its own thread, and a dynamic pool may run two slices on
 * one worker. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "kernels/kernels.h"
#include "moestream.h"

enum { MAX_THREADS = 64 };

typedef struct stream_job {
    atomic_int *go;
    const ms_kernel_ops *ops;
    void *dst;       /* NULL: read only */
    const void *src;
    int64_t bytes;
    int64_t rounds;  /* > 0: the fma op this many rounds instead of a slice */
    uint64_t sum;    /* keeps the reads alive */
    double flops;    /* the fma op's operations */
    float sink;
} stream_job;

static void run_slice(stream_job *j)
{
    if (j->rounds > 0)
        j->flops = j->ops->fma(j->rounds, &j->sink);
    else if (j->dst)
        memcpy(j->dst, j->src, (size_t)j->bytes);
    else
        j->sum = j->ops->stream(j->src, j->bytes);
}

static void *slice_thread(void *arg)
{
    stream_job *j = arg;
    while (!atomic_load_explicit(j->go, memory_order_acquire))
        ;
    run_slice(j);
    return NULL;
}

static int clamp_threads(int threads)
{
    return threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
}

/* Seconds for jobs[0..threads) at once, each on its own thread (the
 * caller's runs the first), or 0 when a thread cannot be started. */
static double run_jobs(stream_job *jobs, int threads)
{
    pthread_t tid[MAX_THREADS];
    atomic_int go = 0;
    for (int i = 0; i < threads; i++)
        jobs[i].go = &go;
    int started = 1;
    while (started < threads && pthread_create(&tid[started], NULL, slice_thread,
                                               &jobs[started]) == 0)
        started++;
    atomic_store_explicit(&go, 1, memory_order_release);
    double t0 = ms_now();
    run_slice(&jobs[0]);
    for (int i = 1; i < started; i++)
        pthread_join(tid[i], NULL);
    double t = ms_now() - t0;
    volatile uint64_t sink = 0;
    for (int i = 0; i < started; i++)
        sink ^= jobs[i].sum;
    (void)sink;
    return started < threads || t <= 0 ? 0 : t;
}

/* GB/s of all slices at once, counting `factor` bytes per byte streamed
 * (memcpy: read + write), or 0 when a thread cannot be started. */
static double stream_gbs(void *dst, const void *src, int64_t bytes, int threads, double factor)
{
    threads = clamp_threads(threads);
    /* slices of whole 256-byte lines, as the stream ops require */
    int64_t part = bytes / threads / 256 * 256;
    stream_job jobs[MAX_THREADS];
    if (part <= 0)
        return 0;
    for (int i = 0; i < threads; i++)
        jobs[i] = (stream_job){.ops = ms_kernels(), .dst = dst ? (char *)dst + i * part : NULL,
                               .src = (const char *)src + i * part, .bytes = part};
    double t = run_jobs(jobs, threads);
    return t > 0 ? factor * (double)(part * threads) / t / 1e9 : 0;
}

double ms_read_stream(const void *buf, int64_t bytes, int threads)
{
    return stream_gbs(NULL, buf, bytes, threads, 1.0);
}

double ms_copy_stream(void *dst, const void *src, int64_t bytes, int threads)
{
    return stream_gbs(dst, src, bytes, threads, 2.0);
}

double ms_fma_peak(int64_t iters, int threads)
{
    threads = clamp_threads(threads);
    stream_job jobs[MAX_THREADS];
    if (iters <= 0)
        return 0;
    for (int i = 0; i < threads; i++)
        jobs[i] = (stream_job){.ops = ms_kernels(), .rounds = iters};
    double t = run_jobs(jobs, threads), flops = 0;
    for (int i = 0; i < threads; i++)
        flops += jobs[i].flops;
    return t > 0 ? flops / t / 1e9 : 0;
}

int ms_compute_peak(int threads, int rounds, double *gflops, ms_error *err)
{
    if (threads < 1 || threads > MAX_THREADS || rounds < 1)
        return ms_err_set(err, MS_E_ARG, "compute peak: threads 1..%d and one round expected, "
                          "got %d threads, %d rounds", MAX_THREADS, threads, rounds);
    double best = 0;
    for (int i = 0; i < rounds; i++) {
        /* 3M rounds of 12 FMAs at two a cycle: ~6 ms on a 3 GHz core */
        double g = ms_fma_peak(INT64_C(3) << 20, threads);
        if (g <= 0)
            return ms_err_set(err, MS_E_NOMEM, "compute peak: cannot start %d threads", threads);
        best = g > best ? g : best;
    }
    *gflops = best;
    return 0;
}

int ms_mem_bandwidth(int threads, int64_t bytes, int rounds, double *read_gbs,
                     double *copy_gbs, ms_error *err)
{
    if (threads < 1 || threads > MAX_THREADS || bytes < (INT64_C(64) << 20) || rounds < 1)
        return ms_err_set(err, MS_E_ARG, "memory bandwidth: threads 1..%d, at least 64 MiB "
                          "and one round expected, got %d threads, %lld bytes, %d rounds",
                          MAX_THREADS, threads, (long long)bytes, rounds);
    uint8_t *a = aligned_alloc(4096, (size_t)bytes), *b = aligned_alloc(4096, (size_t)bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return ms_err_set(err, MS_E_NOMEM, "memory bandwidth: cannot allocate 2 x %lld MiB",
                          (long long)(bytes >> 20));
    }
    memset(a, 1, (size_t)bytes); /* fault every page in before timing */
    memset(b, 2, (size_t)bytes);
    double best_r = 0, best_c = 0;
    for (int i = 0; i < rounds; i++) {
        double r = ms_read_stream(a, bytes, threads);
        double c = copy_gbs ? ms_copy_stream(b, a, bytes, threads) : 1;
        if (r <= 0 || c <= 0) {
            free(a);
            free(b);
            return ms_err_set(err, MS_E_NOMEM, "memory bandwidth: cannot start %d threads",
                              threads);
        }
        best_r = r > best_r ? r : best_r;
        best_c = c > best_c ? c : best_c;
    }
    free(a);
    free(b);
    *read_gbs = best_r;
    if (copy_gbs)
        *copy_gbs = best_c;
    return 0;
}

/* The compute thread pool (see pool.h).
 *
 * One dispatch at a time (mu). A dispatch publishes its job, opens it
 * (state = OPEN) and bumps seq; a worker that sees seq move joins the job
 * only while it is open (a CAS that counts it in state), takes tasks from
 * `next` until none is left, and leaves (state - 1). The caller takes tasks
 * too, then closes the job and waits for state == 0: every task taken was
 * taken by someone inside, so all are done, and no worker still reads the
 * job when the next one is written. A worker that wakes late finds the job
 * closed (or joins a later one, whose fields are then the ones it reads);
 * the caller never waits for a worker that is asleep or slow to wake.
 *
 * An idle worker spins on seq for SPIN_NS, then sleeps on it with a futex
 * (counted in sleepers, so a dispatch makes the wake system call only when
 * someone sleeps). Workers block asynchronous signals, which stay with the
 * threads that expect them; faults (SIGBUS on a truncated shard) are still
 * delivered to the worker that touches the page. */
#include "base/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long an idle worker spins before it sleeps: longer than the gaps
 * between the products of one token, short enough that an idle server is
 * idle. */
#define SPIN_NS 100000
/* Pauses of a waiting caller before it yields its core between checks. */
#define WAIT_SPINS 2048

#define OPEN 0x80000000u /* state: the current job admits workers */

typedef struct pool {
    pthread_mutex_t mu;            /* one dispatch or reconfiguration at a time */
    _Atomic int threads;           /* configured count; 0 until first asked */
    int n_workers;                 /* workers 1..n_workers are running */
    pthread_t tid[MS_POOL_MAX_THREADS];
    /* the job, written under mu while no worker is inside one */
    ms_pool_fn fn;
    void *ctx;
    int64_t n_tasks;
    /* read by spinning workers; written once per dispatch */
    alignas(64) _Atomic uint32_t seq; /* futex word */
    _Atomic int live;              /* workers with an index >= live exit */
    _Atomic int sleepers;
    alignas(64) _Atomic uint32_t state; /* OPEN | workers inside the job */
    alignas(64) _Atomic int64_t next;   /* next task index */
} pool;

static pool P = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* -1 outside the pool; the worker index inside a task (and forever in a
 * worker thread), so that a nested call runs inline under that index. */
static _Thread_local int tl_worker = -1;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *word, uint32_t expect)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expect, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static int default_threads(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n < 1) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 && c < INT_MAX ? (int)c : 1;
    }
    return n > MS_POOL_MAX_THREADS ? MS_POOL_MAX_THREADS : n;
}

/* Tasks of the open job until none is left. */
static void take_tasks(int worker)
{
    ms_pool_fn fn = P.fn;
    void *ctx = P.ctx;
    int64_t n = P.n_tasks, i;
    while ((i = atomic_fetch_add_explicit(&P.next, 1, memory_order_relaxed)) < n)
        fn(ctx, i, worker);
}

/* Waits until seq differs from `seen` or this worker must exit; returns seq. */
static uint32_t wait_for_job(int id, uint32_t seen)
{
    int64_t t0 = now_ns();
    for (unsigned i = 1;; i++) {
        uint32_t s = atomic_load_explicit(&P.seq, memory_order_acquire);
        if (s != seen || id >= atomic_load_explicit(&P.live, memory_order_relaxed))
            return s;
        cpu_relax();
        if (i % 64 == 0 && now_ns() - t0 > SPIN_NS)
            break;
    }
    for (;;) {
        atomic_fetch_add(&P.sleepers, 1);
        uint32_t s = atomic_load(&P.seq);
        if (s == seen && id < atomic_load(&P.live))
            futex_wait(&P.seq, seen);
        atomic_fetch_sub(&P.sleepers, 1);
        s = atomic_load_explicit(&P.seq, memory_order_acquire);
        if (s != seen || id >= atomic_load_explicit(&P.live, memory_order_relaxed))
            return s;
    }
}

/* Joins the current job if it is still open, and works on it. */
static void join_job(int id)
{
    uint32_t s = atomic_load_explicit(&P.state, memory_order_relaxed);
    do {
        if (!(s & OPEN))
            return;
    } while (!atomic_compare_exchange_weak_explicit(&P.state, &s, s + 1, memory_order_acquire,
                                                    memory_order_relaxed));
    take_tasks(id);
    atomic_fetch_sub_explicit(&P.state, 1, memory_order_release);
}

static void *worker_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    tl_worker = id;
    /* a job opened before this read is joined below, one opened after it
     * moves seq away from `seen` */
    uint32_t seen = atomic_load_explicit(&P.seq, memory_order_acquire);
    for (;;) {
        join_job(id);
        seen = wait_for_job(id, seen);
        if (id >= atomic_load_explicit(&P.live, memory_order_relaxed))
            return NULL;
    }
}

/* Stops workers n.. (under mu). */
static void stop_workers_from(int n)
{
    if (P.n_workers < n)
        return;
    atomic_store(&P.live, n);
    atomic_fetch_add(&P.seq, 1);
    futex_wake_all(&P.seq);
    for (int i = n; i <= P.n_workers; i++)
        pthread_join(P.tid[i], NULL);
    P.n_workers = n - 1;
}

/* Starts workers up to n threads in all (under mu); on a failure keeps the
 * ones running and lowers the thread count to match. */
static int start_workers(int n)
{
    sigset_t all, old;
    sigfillset(&all);
    int sync_sigs[] = {SIGBUS, SIGSEGV, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < sizeof sync_sigs / sizeof *sync_sigs; i++)
        sigdelset(&all, sync_sigs[i]);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* inherited by the new threads */
    atomic_store(&P.live, n);
    int rc = 0;
    while (P.n_workers < n - 1) {
        int id = P.n_workers + 1;
        if (pthread_create(&P.tid[id], NULL, worker_main, (void *)(intptr_t)id)) {
            rc = -1;
            break;
        }
        P.n_workers = id;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    atomic_store(&P.live, P.n_workers + 1);
    atomic_store(&P.threads, P.n_workers + 1);
    return rc;
}

int ms_pool_set_threads(int n)
{
    if (n < 1 || n > MS_POOL_MAX_THREADS)
        return -1;
    pthread_mutex_lock(&P.mu);
    stop_workers_from(n);
    int rc = start_workers(n);
    pthread_mutex_unlock(&P.mu);
    return rc;
}

int ms_pool_threads(void)
{
    int n = atomic_load_explicit(&P.threads, memory_order_relaxed);
    if (n)
        return n;
    pthread_mutex_lock(&P.mu);
    if (!atomic_load(&P.threads))
        atomic_store(&P.threads, default_threads());
    n = atomic_load(&P.threads);
    pthread_mutex_unlock(&P.mu);
    return n;
}

void ms_pool_shutdown(void)
{
    pthread_mutex_lock(&P.mu);
    stop_workers_from(1);
    pthread_mutex_unlock(&P.mu);
}

static void run_inline(int64_t n_tasks, ms_pool_fn fn, void *ctx)
{
    int saved = tl_worker, w = saved >= 0 ? saved : 0;
    tl_worker = w;
    for (int64_t i = 0; i < n_tasks; i++)
        fn(ctx, i, w);
    tl_worker = saved;
}

/* The calling thread's pending ms_pool_beside job. */
static _Thread_local void (*tl_beside)(void *);
static _Thread_local void *tl_beside_ctx;

void ms_pool_beside_flush(void)
{
    void (*fn)(void *) = tl_beside;
    tl_beside = NULL;
    if (fn)
        fn(tl_beside_ctx);
}

void ms_pool_beside(void (*fn)(void *ctx), void *ctx)
{
    ms_pool_beside_flush();
    tl_beside = fn;
    tl_beside_ctx = ctx;
}

/* A run with a job beside it: task 0 is the job, task i + 1 the run's i. */
typedef struct beside_run {
    ms_pool_fn fn;
    void *ctx;
    void (*job)(void *);
    void *job_ctx;
} beside_run;

static void beside_task(void *ctx, int64_t i, int worker)
{
    const beside_run *b = ctx;
    if (i == 0)
        b->job(b->job_ctx);
    else
        b->fn(b->ctx, i - 1, worker);
}

static void run_dispatch(int64_t n_tasks, ms_pool_fn fn, void *ctx);

void ms_pool_run(int64_t n_tasks, ms_pool_fn fn, void *ctx)
{
    if (tl_beside && tl_worker < 0) {
        beside_run b = {fn, ctx, tl_beside, tl_beside_ctx};
        tl_beside = NULL;
        if (n_tasks < 1 || ms_pool_threads() == 1) {
            b.job(b.job_ctx);
            run_inline(n_tasks, fn, ctx);
        } else {
            run_dispatch(n_tasks + 1, beside_task, &b);
        }
        return;
    }
    run_dispatch(n_tasks, fn, ctx);
}

static void run_dispatch(int64_t n_tasks, ms_pool_fn fn, void *ctx)
{
    if (n_tasks < 2 || tl_worker >= 0 || ms_pool_threads() == 1) {
        run_inline(n_tasks, fn, ctx);
        return;
    }
    pthread_mutex_lock(&P.mu);
    int threads = atomic_load(&P.threads);
    if (P.n_workers < threads - 1)
        start_workers(threads); /* first use, or after ms_pool_shutdown */
    if (P.n_workers == 0) {
        pthread_mutex_unlock(&P.mu);
        run_inline(n_tasks, fn, ctx);
        return;
    }
    P.fn = fn;
    P.ctx = ctx;
    P.n_tasks = n_tasks;
    atomic_store_explicit(&P.next, 0, memory_order_relaxed);
    atomic_store_explicit(&P.state, OPEN, memory_order_release);
    atomic_fetch_add(&P.seq, 1);
    if (atomic_load(&P.sleepers) > 0)
        futex_wake_all(&P.seq);

    tl_worker = 0;
    take_tasks(0);
    tl_worker = -1;
    atomic_fetch_and_explicit(&P.state, ~OPEN, memory_order_relaxed);
    for (unsigned i = 0; atomic_load_explicit(&P.state, memory_order_acquire) != 0; i++) {
        if (i < WAIT_SPINS)
            cpu_relax();
        else
            sched_yield(); /* a worker inside was descheduled */
    }
    pthread_mutex_unlock(&P.mu);
}

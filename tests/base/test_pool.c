/* The compute thread pool: every task runs exactly once under a worker
 * index in range and unique among the tasks running at once; all threads
 * take part; nested calls run inline on the calling thread; two callers on
 * different threads both complete; thread-count changes, refusals and
 * shutdown. No timing is asserted. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "base/pool.h"
#include "test.h"

#define MAX_TASKS 5000

typedef struct counts {
    _Atomic int hits[MAX_TASKS];
    _Atomic int busy[MS_POOL_MAX_THREADS]; /* a task of that worker is running */
    _Atomic int bad_worker, overlap;
    int threads;
} counts;

static void count_task(void *ctx, int64_t i, int w)
{
    counts *c = ctx;
    if (w < 0 || w >= c->threads) {
        atomic_fetch_add(&c->bad_worker, 1);
        return;
    }
    if (atomic_exchange(&c->busy[w], 1))
        atomic_fetch_add(&c->overlap, 1);
    atomic_fetch_add(&c->hits[i], 1);
    for (volatile int k = 0; k < (int)(i % 7) * 50; k++) /* uneven task lengths */
        ;
    atomic_store(&c->busy[w], 0);
}

/* Runs n tasks and checks each ran once under a valid, unshared index. */
static void check_run(counts *c, int64_t n)
{
    memset(c, 0, sizeof *c);
    c->threads = ms_pool_threads();
    ms_pool_run(n, count_task, c);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++)
        wrong += atomic_load(&c->hits[i]) != 1;
    CHECK(wrong == 0, "%d threads, %lld tasks: %lld tasks did not run exactly once",
          c->threads, (long long)n, (long long)wrong);
    CHECK(atomic_load(&c->bad_worker) == 0, "%d threads, %lld tasks: worker index out of range",
          c->threads, (long long)n);
    CHECK(atomic_load(&c->overlap) == 0, "%d threads, %lld tasks: one worker index ran two "
          "tasks at once", c->threads, (long long)n);
}

static void test_default_threads(void)
{
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity");
    int want = CPU_COUNT(&set) < MS_POOL_MAX_THREADS ? CPU_COUNT(&set) : MS_POOL_MAX_THREADS;
    CHECK(ms_pool_threads() == want, "default %d threads, want %d", ms_pool_threads(), want);
}

static void test_every_task_once(void)
{
    static counts c;
    static const int64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 16, 63, 64, 65, 1000, MAX_TASKS};
    for (int t = 1; t <= 4; t++) {
        CHECK(ms_pool_set_threads(t) == 0, "set %d threads", t);
        CHECK(ms_pool_threads() == t, "threads %d after setting %d", ms_pool_threads(), t);
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
            for (int rep = 0; rep < 20; rep++)
                check_run(&c, sizes[k]);
    }
}

/* n tasks that each wait for all n to have started: only n distinct
 * threads can run them, so every thread of the pool takes part. */
typedef struct gather {
    _Atomic int arrived, seen_mask, timed_out;
    int n;
} gather;

static void gather_task(void *ctx, int64_t i, int w)
{
    (void)i;
    gather *g = ctx;
    atomic_fetch_or(&g->seen_mask, 1 << w);
    atomic_fetch_add(&g->arrived, 1);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&g->arrived) < g->n) {
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 20) { /* a hang, reported rather than waited for */
            atomic_store(&g->timed_out, 1);
            return;
        }
    }
}

static void check_gather(void)
{
    int t = ms_pool_threads();
    for (int rep = 0; rep < 5; rep++) {
        gather g = {.n = t};
        ms_pool_run(t, gather_task, &g);
        CHECK(!atomic_load(&g.timed_out), "%d threads: the tasks never all started", t);
        CHECK(atomic_load(&g.seen_mask) == (1 << t) - 1, "%d threads: workers 0x%x took part",
              t, (unsigned)atomic_load(&g.seen_mask));
    }
}

static void test_all_threads_take_part(void)
{
    for (int t = 1; t <= 4; t++) {
        ms_pool_set_threads(t);
        check_gather();
    }
}

/* An outer task runs an inner pool call: inline, in order, on its own
 * thread, under its own worker index. */
typedef struct nest {
    _Atomic int bad, inner_done;
    int threads;
} nest;

typedef struct inner {
    nest *nt;
    pthread_t self;
    int worker;
    int64_t next; /* the task expected next */
} inner;

static void inner_task(void *ctx, int64_t i, int w)
{
    inner *in = ctx;
    if (!pthread_equal(pthread_self(), in->self) || w != in->worker || i != in->next)
        atomic_fetch_add(&in->nt->bad, 1);
    in->next = i + 1;
    atomic_fetch_add(&in->nt->inner_done, 1);
}

static void outer_task(void *ctx, int64_t i, int w)
{
    (void)i;
    nest *nt = ctx;
    if (w < 0 || w >= nt->threads)
        atomic_fetch_add(&nt->bad, 1);
    inner in = {.nt = nt, .self = pthread_self(), .worker = w};
    ms_pool_run(9, inner_task, &in);
    if (in.next != 9)
        atomic_fetch_add(&nt->bad, 1);
}

static void test_nested_inline(void)
{
    for (int t = 1; t <= 4; t++) {
        ms_pool_set_threads(t);
        nest nt = {.threads = t};
        ms_pool_run(50, outer_task, &nt);
        CHECK(atomic_load(&nt.bad) == 0, "%d threads: %d nested tasks ran off their thread, "
              "index or order", t, atomic_load(&nt.bad));
        CHECK(atomic_load(&nt.inner_done) == 50 * 9, "%d threads: %d of %d inner tasks", t,
              atomic_load(&nt.inner_done), 50 * 9);
    }
}

/* Two threads dispatching at the same time, each with its own tasks. */
typedef struct caller {
    counts c;
    int64_t wrong;
} caller;

static void *caller_main(void *arg)
{
    caller *cl = arg;
    for (int rep = 0; rep < 300; rep++) {
        int64_t n = 1 + (rep * 37) % 200;
        memset(cl->c.hits, 0, sizeof cl->c.hits[0] * (size_t)n);
        cl->c.threads = ms_pool_threads();
        ms_pool_run(n, count_task, &cl->c);
        for (int64_t i = 0; i < n; i++)
            cl->wrong += atomic_load(&cl->c.hits[i]) != 1;
    }
    return NULL;
}

static void test_concurrent_callers(void)
{
    ms_pool_set_threads(3);
    static caller a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, caller_main, &a) == 0, "start caller a");
    CHECK(pthread_create(&tb, NULL, caller_main, &b) == 0, "start caller b");
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.wrong == 0 && b.wrong == 0, "tasks not run exactly once: %lld and %lld",
          (long long)a.wrong, (long long)b.wrong);
    CHECK(!atomic_load(&a.c.bad_worker) && !atomic_load(&b.c.bad_worker), "worker out of range");
    CHECK(!atomic_load(&a.c.overlap) && !atomic_load(&b.c.overlap), "worker index shared");
}

static void test_set_threads_changes(void)
{
    static counts c;
    static const int seq[] = {4, 1, 3, 2, 4, 4, 1, 1, 2, 3, 1, 4, 2};
    for (size_t k = 0; k < sizeof seq / sizeof *seq; k++) {
        CHECK(ms_pool_set_threads(seq[k]) == 0, "set %d threads", seq[k]);
        CHECK(ms_pool_threads() == seq[k], "threads %d after setting %d", ms_pool_threads(),
              seq[k]);
        check_run(&c, 257);
    }
    CHECK(ms_pool_set_threads(0) == -1, "0 threads accepted");
    CHECK(ms_pool_set_threads(MS_POOL_MAX_THREADS + 1) == -1, "65 threads accepted");
    CHECK(ms_pool_threads() == 2, "a refused count changed the pool to %d", ms_pool_threads());
    ms_pool_shutdown();
    CHECK(ms_pool_threads() == 2, "shutdown changed the count to %d", ms_pool_threads());
    check_run(&c, 100); /* restarts the workers */
    check_gather();
}

/* A job beside a dispatch runs exactly once: as one more task of the
 * caller's next run (while the run's own tasks run on the other threads),
 * before a run that goes inline, at a flush, or when a second job is
 * handed over; a run nested inside a task never takes it, and a run on
 * another thread never sees it. */
typedef struct side {
    _Atomic int runs;
    _Atomic int64_t own_done; /* the run's own tasks finished when the job started */
    counts *c;
    int64_t n;
} side;

static void side_job(void *ctx)
{
    side *sd = ctx;
    int64_t done = 0;
    for (int64_t i = 0; sd->c && i < sd->n; i++)
        done += atomic_load(&sd->c->hits[i]);
    atomic_store(&sd->own_done, done);
    atomic_fetch_add(&sd->runs, 1);
}

static void nested_run_task(void *ctx, int64_t i, int w)
{
    (void)i;
    (void)w;
    ms_pool_run(3, count_task, ctx); /* inline: must not take a job of the outer caller */
}

static void *other_caller(void *arg)
{
    static counts c2;
    c2.threads = ms_pool_threads();
    memset(c2.hits, 0, sizeof c2.hits[0] * 50);
    ms_pool_run(50, count_task, &c2);
    (void)arg;
    return NULL;
}

static void test_beside(void)
{
    static counts c;
    for (int t = 1; t <= 3; t++) {
        ms_pool_set_threads(t);
        c.threads = t;
        for (int64_t n = 0; n <= 200; n += 40) {
            side sd = {.c = &c, .n = n};
            memset(c.hits, 0, sizeof c.hits[0] * (size_t)(n + 1));
            ms_pool_beside(side_job, &sd);
            ms_pool_run(n, count_task, &c);
            int64_t wrong = 0;
            for (int64_t i = 0; i < n; i++)
                wrong += atomic_load(&c.hits[i]) != 1;
            CHECK(atomic_load(&sd.runs) == 1 && wrong == 0, "%d threads, %lld tasks: the job "
                  "ran %d times, %lld tasks not once", t, (long long)n, atomic_load(&sd.runs),
                  (long long)wrong);
            if (t == 1)
                CHECK(atomic_load(&sd.own_done) == 0, "one thread: the job ran after %lld of "
                      "the run's tasks, not before them", (long long)atomic_load(&sd.own_done));
            ms_pool_beside_flush(); /* nothing pending: a no-op */
            CHECK(atomic_load(&sd.runs) == 1, "flush ran a job already run");
        }
        side a = {0}, b = {0};
        ms_pool_beside(side_job, &a);
        ms_pool_beside(side_job, &b); /* runs a now */
        CHECK(atomic_load(&a.runs) == 1 && atomic_load(&b.runs) == 0, "a second job: first "
              "ran %d times, second %d", atomic_load(&a.runs), atomic_load(&b.runs));
        pthread_t o;
        CHECK(pthread_create(&o, NULL, other_caller, NULL) == 0, "another caller");
        pthread_join(o, NULL);
        CHECK(atomic_load(&b.runs) == 0, "another thread's run took the job");
        memset(c.hits, 0, sizeof c.hits[0] * 64);
        ms_pool_run(20, nested_run_task, &c);
        CHECK(atomic_load(&b.runs) == 1, "%d threads: a run with nested runs ran the job %d "
              "times", t, atomic_load(&b.runs));
        side d = {0};
        ms_pool_beside(side_job, &d);
        ms_pool_beside_flush();
        CHECK(atomic_load(&d.runs) == 1, "flush ran the job %d times", atomic_load(&d.runs));
    }
}

int main(void)
{
    TEST_CASE(test_default_threads); /* first: before any ms_pool_set_threads */
    TEST_CASE(test_every_task_once);
    TEST_CASE(test_all_threads_take_part);
    TEST_CASE(test_nested_inline);
    TEST_CASE(test_concurrent_callers);
    TEST_CASE(test_set_threads_changes);
    TEST_CASE(test_beside);
    ms_pool_shutdown();
    return t_finish();
}

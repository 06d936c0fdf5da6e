/* The compute thread pool: one process-wide set of persistent workers that
 * the kernels and attention hand their parallel loops to, so that a decoded
 * token costs no thread creation and no fork/join per matrix product.
 *
 * With n threads there are n-1 workers; the thread calling ms_pool_run is the
 * n-th and takes tasks too. Between dispatches a worker spins for about
 * 100 us (a dispatch then costs a few hundred ns), then sleeps on a futex, so
 * an idle process burns no CPU.
 *
 * The thread count is process-wide (read-mostly global state, like the
 * kernel table): an engine sets it once at open. Workers are started by
 * ms_pool_set_threads, or on the first parallel ms_pool_run when it was never
 * called. Nothing here prints. */
#ifndef MS_BASE_POOL_H
#define MS_BASE_POOL_H

#include <stdint.h>

#define MS_POOL_MAX_THREADS 64

/* A task: `worker` (0..ms_pool_threads()-1) is unique among the tasks
 * running at the same time in one ms_pool_run, for per-thread scratch. */
typedef void (*ms_pool_fn)(void *ctx, int64_t task, int worker);

/* Sets the thread count (calling thread included) to n in 1..64, stopping
 * and starting workers as needed; waits for a dispatch in progress. Returns
 * 0, or -1 when n is out of range (nothing changes) or a worker could not be
 * started (the pool keeps the workers it has; ms_pool_threads says how
 * many). */
int ms_pool_set_threads(int n);

/* The thread count: the last ms_pool_set_threads, else the CPUs this process
 * may run on (sched_getaffinity), at most 64. */
int ms_pool_threads(void);

/* Runs fn(ctx, i, worker) for every i in [0, n_tasks), each exactly once,
 * tasks taken in increasing order from a shared counter by whichever thread
 * is free; returns when all have finished, their writes visible to the
 * caller. Runs them in order on the calling thread (keeping its worker
 * index) when the pool has one thread, when n_tasks < 2, or when called from
 * inside a task. Callers on different threads are served one at a time. */
void ms_pool_run(int64_t n_tasks, ms_pool_fn fn, void *ctx);

/* Work beside the next dispatch: fn(ctx) becomes one more task of the
 * calling thread's next ms_pool_run (task 0, so the first thread there
 * takes it while the others start on the run's own tasks), or runs before
 * the tasks of a run that goes inline. For work that the next run neither
 * reads nor writes (a prefetch decided from results already there), which
 * would otherwise keep the other threads waiting. One job at a time: a
 * second ms_pool_beside runs the pending one first. ms_pool_beside_flush
 * runs a pending job now (before what it writes is read, and before ctx
 * goes out of scope). */
void ms_pool_beside(void (*fn)(void *ctx), void *ctx);
void ms_pool_beside_flush(void);

/* Stops and joins the workers (tests; a later ms_pool_run restarts them). */
void ms_pool_shutdown(void);

#endif

/* Asynchronous positional reads behind a small vtable, so the expert store
 * can run on io_uring, on a pread thread pool, or on a fault-injecting
 * wrapper in tests.
 *
 * Contract: ms_io_submit queues a request (the caller keeps it alive until it
 * completes); ms_io_wait returns completed requests, each exactly once, with
 * req->res = bytes read (a short count is possible) or -errno. Requests are
 * independent; completion order is unspecified. One thread drives an ms_io. */
#ifndef MS_BASE_IO_H
#define MS_BASE_IO_H

#include <stdint.h>

#include "base/error.h"

typedef struct ms_io_req {
    int fd;
    uint64_t off, len;
    void *buf;
    int64_t res;        /* set on completion */
    void *user;         /* caller's tag */
    int urgent;         /* someone waits for it: ahead of the reads queued (io_uring with
                         * pieces; the other backends read in submission order) */
} ms_io_req;

typedef struct ms_io ms_io;

typedef struct ms_io_vtbl {
    const char *name;
    int (*submit)(ms_io *io, ms_io_req *req, ms_err *err);
    /* Moves up to max completions into done[]; when block is set, waits
     * until at least one is available (or nothing is in flight). Returns the
     * number moved, or -1 on a backend failure. */
    int (*wait)(ms_io *io, ms_io_req **done, int max, int block, ms_err *err);
    void (*close)(ms_io *io);
    /* Optional (NULL: not supported): registers n buffers, ascending by
     * address, that later requests read into, so the kernel pins them once
     * instead of at every request (io_uring fixed buffers). */
    int (*register_bufs)(ms_io *io, void *const *bufs, const size_t *lens, int n, ms_err *err);
} ms_io_vtbl;

struct ms_io {
    const ms_io_vtbl *v;
    int inflight;       /* submitted, not yet returned by wait */
};

/* io_uring with at most `depth` reads in flight; fails (err says why) where
 * io_uring is unavailable, so the caller can choose the thread pool and say
 * so. piece > 0 (a multiple of 4096): a request longer than that is read
 * as pieces of piece bytes, queued in order behind the requests before it,
 * and completes when all have (res: the bytes read without a gap from its
 * start, or -errno when its first piece failed); a thread of the backend
 * reaps and refills the ring as each read completes, so the window keeps
 * moving while the caller computes. With a small depth the requests of a
 * queue then arrive one after the other at the disk's bandwidth, instead
 * of all together at the end (docs/perf.md, "Where the disk idles"). */
int ms_io_open_uring(int depth, uint64_t piece, ms_io **out, ms_err *err);

/* n_threads workers doing pread. */
int ms_io_open_threads(int n_threads, ms_io **out, ms_err *err);

/* Wraps inner: every request on fd whose range reaches past fail_from
 * completes with res when res < 0 (e.g. -EIO); when res == 0 the file looks
 * truncated at fail_from (the bytes before it are read, then a short count).
 * Owns inner. */
int ms_io_open_faulty(ms_io *inner, int fd, uint64_t fail_from, int64_t res, ms_io **out,
                      ms_err *err);

static inline int ms_io_submit(ms_io *io, ms_io_req *r, ms_err *err)
{
    return io->v->submit(io, r, err);
}

static inline int ms_io_wait(ms_io *io, ms_io_req **done, int max, int block, ms_err *err)
{
    return io->v->wait(io, done, max, block, err);
}

/* 0 when registered, 1 when the backend has no such thing, -1 with err. */
static inline int ms_io_register(ms_io *io, void *const *bufs, const size_t *lens, int n,
                                 ms_err *err)
{
    return io->v->register_bufs ? io->v->register_bufs(io, bufs, lens, n, err) : 1;
}

static inline void ms_io_close(ms_io *io)
{
    if (io)
        io->v->close(io);
}

#endif

/* Read backends: io_uring, pread thread pool, and a fault injector. */
#include "base/io.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a FIFO of requests (intrusive through a side array) ---------------- */

typedef struct fifo {
    ms_io_req **v;
    int head, n, cap;
} fifo;

static int fifo_push(fifo *q, ms_io_req *r)
{
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 64;
        ms_io_req **v = malloc(sizeof *v * (size_t)cap);
        if (!v)
            return -1;
        for (int i = 0; i < q->n; i++)
            v[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = v;
        q->head = 0;
        q->cap = cap;
    }
    q->v[(q->head + q->n) % q->cap] = r;
    q->n++;
    return 0;
}

/* Ahead of everything queued. */
static int fifo_push_front(fifo *q, ms_io_req *r)
{
    if (fifo_push(q, r)) /* makes the room, then r moves from the back to the front */
        return -1;
    q->n--;
    q->head = (q->head + q->cap - 1) % q->cap;
    q->v[q->head] = r;
    q->n++;
    return 0;
}

static ms_io_req *fifo_pop(fifo *q)
{
    if (!q->n)
        return NULL;
    ms_io_req *r = q->v[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    return r;
}

/* ---- io_uring ------------------------------------------------------------ */

/* A request read as pieces: theirs, in order, and the first that came back
 * short. The ring and the backlog carry a piece's address with bit 0 set
 * (requests are at least 8-byte aligned), a whole request's as it is. */
typedef struct split {
    ms_io_req *parent;
    int n, left;
    int first_short;       /* lowest piece that read less than asked, or n */
    int64_t short_res;
    ms_io_req piece[];
} split;

#define PIECE_TAG ((uintptr_t)1)

static ms_io_req *untag(ms_io_req *t)
{
    return (ms_io_req *)((uintptr_t)t & ~PIECE_TAG);
}

static ms_io_req *tag(ms_io_req *p)
{
    return (ms_io_req *)((uintptr_t)p | PIECE_TAG);
}

static int is_piece(const ms_io_req *t)
{
    return ((uintptr_t)t & PIECE_TAG) != 0;
}

#define STOP_TAG ((ms_io_req *)(uintptr_t)3) /* the NOP that ends the reaper */

/* With pieces (ordered), the reaper thread owns the completion side and
 * refills the ring; the submission side (ring, backlog, in_ring) and the
 * done queue are under mu. Without, the caller's thread does everything. */
typedef struct uring_io {
    ms_io base;
    struct io_uring ring;
    int depth, in_ring;
    uint64_t piece;        /* requests longer than this go as pieces; 0: never */
    fifo backlog;          /* submitted while the ring was full (pieces tagged) */
    int n_reg;             /* registered buffers, ascending */
    struct iovec *reg;
    int reaping;           /* the reaper runs (started at the first read) */
    pthread_t reaper;
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    fifo done;             /* completed requests, for uring_wait */
    int reap_err;          /* -errno of a failed submit or wait in the reaper */
} uring_io;

/* The registered buffer holding [buf, buf + len), or -1. */
static int uring_fixed(const uring_io *u, const void *buf, uint64_t len)
{
    int lo = 0, hi = u->n_reg - 1;
    const char *p = buf;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const char *b = u->reg[mid].iov_base;
        if (p < b)
            hi = mid - 1;
        else if (p >= b + u->reg[mid].iov_len)
            lo = mid + 1;
        else
            return p + len <= b + u->reg[mid].iov_len ? mid : -1;
    }
    return -1;
}

/* Puts t (a request, or a tagged piece) into the ring, or behind the
 * backlog when the ring is full. */
static int uring_push(uring_io *u, ms_io_req *t, ms_err *err)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe)
        return fifo_push(&u->backlog, t) ? ms_err_set(err, MS_E_NOMEM, "io backlog") : 0;
    ms_io_req *r = untag(t);
    int fixed = uring_fixed(u, r->buf, r->len);
    if (fixed >= 0) /* pinned once at registration: no page walk per request */
        io_uring_prep_read_fixed(sqe, r->fd, r->buf, (unsigned)r->len, r->off, fixed);
    else
        io_uring_prep_read(sqe, r->fd, r->buf, (unsigned)r->len, r->off);
    io_uring_sqe_set_data(sqe, t);
    int rc = io_uring_submit(&u->ring);
    if (rc < 0)
        return ms_err_set(err, MS_E_IO, "io_uring_submit: %s", strerror(-rc));
    u->in_ring++;
    return 0;
}

/* Into the ring while there is room, else behind the backlog (in order),
 * or at its front when urgent. */
static int uring_queue(uring_io *u, ms_io_req *t, int urgent, ms_err *err)
{
    if (u->in_ring >= u->depth || u->backlog.n) {
        int rc = urgent ? fifo_push_front(&u->backlog, t) : fifo_push(&u->backlog, t);
        return rc ? ms_err_set(err, MS_E_NOMEM, "io backlog") : 0;
    }
    return uring_push(u, t, err);
}

/* The ring filled from the backlog while there is room. */
static int refill(uring_io *u, ms_err *err)
{
    while (u->in_ring < u->depth && u->backlog.n)
        if (uring_push(u, fifo_pop(&u->backlog), err))
            return -1;
    return 0;
}

static void *reaper_main(void *arg);
static int queue_pieces(uring_io *u, ms_io_req *r, ms_err *err);

static int uring_submit(ms_io *io, ms_io_req *r, ms_err *err)
{
    uring_io *u = (uring_io *)io;
    if (r->len > (1u << 30))
        return ms_err_set(err, MS_E_ARG, "read of %llu bytes is too large for one request",
                          (unsigned long long)r->len);
    if (!u->piece) {
        io->inflight++;
        return uring_queue(u, r, 0, err);
    }
    pthread_mutex_lock(&u->mu);
    int rc = 0;
    if (!u->reaping) {
        if (pthread_create(&u->reaper, NULL, reaper_main, u))
            rc = ms_err_set(err, MS_E_IO, "io_uring: cannot start its reaping thread");
        else
            u->reaping = 1;
    }
    if (!rc && r->len <= u->piece) {
        io->inflight++;
        rc = uring_queue(u, r, r->urgent, err);
    } else if (!rc) {
        rc = queue_pieces(u, r, err);
    }
    pthread_mutex_unlock(&u->mu);
    return rc;
}

static int queue_pieces(uring_io *u, ms_io_req *r, ms_err *err)
{
    ms_io *io = &u->base;
    int n = (int)((r->len + u->piece - 1) / u->piece);
    split *s = malloc(sizeof *s + sizeof s->piece[0] * (size_t)n);
    if (!s)
        return ms_err_set(err, MS_E_NOMEM, "io pieces");
    *s = (split){r, n, n, n, 0};
    io->inflight++;
    for (int i = 0; i < n; i++) {
        uint64_t at = (uint64_t)i * u->piece, len = r->len - at < u->piece ? r->len - at : u->piece;
        s->piece[i] = (ms_io_req){r->fd, r->off + at, len, (char *)r->buf + at, 0, s, 0};
    }
    /* into the ring while there is room, the rest behind the backlog, or
     * (urgent) at its front in their order; a failed queue is the caller's
     * end (the pieces queued keep s) */
    int i = 0;
    for (; i < n && u->in_ring < u->depth && !u->backlog.n; i++)
        if (uring_push(u, tag(&s->piece[i]), err))
            return -1;
    for (int j = n - 1; r->urgent && j >= i; j--)
        if (fifo_push_front(&u->backlog, tag(&s->piece[j])))
            return ms_err_set(err, MS_E_NOMEM, "io backlog");
    for (; !r->urgent && i < n; i++)
        if (fifo_push(&u->backlog, tag(&s->piece[i])))
            return ms_err_set(err, MS_E_NOMEM, "io backlog");
    return 0;
}

/* A piece came back with res: its request when that was the last, else
 * NULL. */
static ms_io_req *piece_done(ms_io_req *p, int64_t res)
{
    split *s = p->user;
    int i = (int)(p - s->piece);
    if (res != (int64_t)p->len && i < s->first_short) {
        s->first_short = i;
        s->short_res = res;
    }
    if (--s->left)
        return NULL;
    ms_io_req *r = s->parent;
    if (s->first_short == s->n) {
        r->res = (int64_t)r->len;
    } else {
        int64_t before = (int64_t)(s->piece[s->first_short].off - r->off);
        r->res = before == 0 && s->short_res < 0 ? s->short_res
                                                 : before + (s->short_res > 0 ? s->short_res : 0);
    }
    free(s);
    return r;
}

/* The reaper: each completion into the done queue (a piece into its
 * request), then the ring refilled from the backlog, until the stop NOP
 * has come back and nothing is in the ring. */
static void *reaper_main(void *arg)
{
    uring_io *u = arg;
    for (int stop = 0;;) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&u->ring, &cqe);
        pthread_mutex_lock(&u->mu);
        if (rc == -EINTR || rc == -EAGAIN) {
            pthread_mutex_unlock(&u->mu);
            continue;
        }
        if (rc < 0) { /* nothing will complete any more: say so to the waiter */
            u->reap_err = rc;
            pthread_cond_broadcast(&u->done_cv);
            pthread_mutex_unlock(&u->mu);
            return NULL;
        }
        ms_io_req *t = io_uring_cqe_get_data(cqe), *r = t;
        int64_t res = cqe->res;
        io_uring_cqe_seen(&u->ring, cqe);
        u->in_ring--;
        if (t == STOP_TAG) {
            stop = 1;
            r = NULL;
        } else if (is_piece(t)) {
            r = piece_done(untag(t), res);
        } else {
            r->res = res;
        }
        if (r) {
            if (fifo_push(&u->done, r))
                u->reap_err = -ENOMEM;
            pthread_cond_broadcast(&u->done_cv);
        }
        ms_err e;
        if (!stop && refill(u, &e)) {
            u->reap_err = -EIO;
            pthread_cond_broadcast(&u->done_cv);
        }
        int done = stop && u->in_ring == 0;
        pthread_mutex_unlock(&u->mu);
        if (done)
            return NULL;
    }
}

static int uring_wait(ms_io *io, ms_io_req **done, int max, int block, ms_err *err)
{
    uring_io *u = (uring_io *)io;
    int n = 0;
    if (u->piece) {
        pthread_mutex_lock(&u->mu);
        while (block && !u->done.n && io->inflight > 0 && !u->reap_err)
            pthread_cond_wait(&u->done_cv, &u->mu);
        while (n < max && u->done.n) {
            done[n++] = fifo_pop(&u->done);
            io->inflight--;
        }
        int bad = u->reap_err;
        pthread_mutex_unlock(&u->mu);
        if (bad && !n)
            return ms_err_set(err, MS_E_IO, "io_uring: reading stopped: %s", strerror(-bad));
        return n;
    }
    while (n < max && u->in_ring > 0) {
        struct io_uring_cqe *cqe;
        int rc = (block && n == 0) ? io_uring_wait_cqe(&u->ring, &cqe)
                                   : io_uring_peek_cqe(&u->ring, &cqe);
        if (rc == -EAGAIN || rc == -EINTR) {
            if (rc == -EINTR && block && n == 0)
                continue;
            break;
        }
        if (rc < 0)
            return ms_err_set(err, MS_E_IO, "io_uring_wait_cqe: %s", strerror(-rc));
        ms_io_req *r = io_uring_cqe_get_data(cqe); /* whole: pieces go to the reaper */
        r->res = cqe->res;
        io_uring_cqe_seen(&u->ring, cqe);
        u->in_ring--;
        io->inflight--;
        done[n++] = r;
    }
    return refill(u, err) ? -1 : n;
}

static void uring_close(ms_io *io)
{
    uring_io *u = (uring_io *)io;
    if (u->reaping) { /* a NOP it knows ends it once the ring is empty */
        pthread_mutex_lock(&u->mu);
        struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
        int stopping = 0;
        if (sqe) {
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data(sqe, STOP_TAG);
            stopping = io_uring_submit(&u->ring) >= 0;
            u->in_ring += stopping;
        }
        pthread_mutex_unlock(&u->mu);
        if (!stopping)
            return; /* the reaper cannot be told: leave it the ring (never seen) */
        pthread_join(u->reaper, NULL);
    }
    if (u->piece) {
        pthread_mutex_destroy(&u->mu);
        pthread_cond_destroy(&u->done_cv);
        free(u->done.v);
    }
    while (u->in_ring > 0) { /* drain: the kernel may still write into buffers */
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(&u->ring, &cqe))
            break;
        io_uring_cqe_seen(&u->ring, cqe); /* (with pieces the reaper emptied the ring) */
        u->in_ring--;
    }
    for (ms_io_req *t; (t = fifo_pop(&u->backlog));) /* never read */
        if (is_piece(t))
            piece_done(untag(t), -ECANCELED);
    io_uring_queue_exit(&u->ring);
    free(u->backlog.v);
    free(u->reg);
    free(u);
}

static int uring_register(ms_io *io, void *const *bufs, const size_t *lens, int n, ms_err *err)
{
    uring_io *u = (uring_io *)io;
    if (u->n_reg || io->inflight || u->reaping)
        return ms_err_set(err, MS_E_ARG, "io_uring: buffers are registered once, before reads");
    struct iovec *v = ms_calloc((size_t)n, sizeof *v, "io_uring buffers", err);
    if (!v)
        return -1;
    for (int i = 0; i < n; i++)
        v[i] = (struct iovec){bufs[i], lens[i]};
    int rc = io_uring_register_buffers(&u->ring, v, (unsigned)n);
    if (rc < 0) {
        free(v);
        return ms_err_set(err, MS_E_IO, "io_uring cannot register %d read buffers: %s", n,
                          strerror(-rc));
    }
    u->reg = v;
    u->n_reg = n;
    return 0;
}

static const ms_io_vtbl uring_vtbl = {"io_uring", uring_submit, uring_wait, uring_close,
                                      uring_register};

int ms_io_open_uring(int depth, uint64_t piece, ms_io **out, ms_err *err)
{
    if (piece % 4096)
        return ms_err_set(err, MS_E_ARG, "io_uring: pieces of %llu bytes are not whole pages",
                          (unsigned long long)piece);
    *out = NULL;
    uring_io *u = ms_calloc(1, sizeof *u, "io_uring", err);
    if (!u)
        return -1;
    int rc = io_uring_queue_init((unsigned)depth, &u->ring, 0);
    if (rc < 0) {
        free(u);
        return ms_err_set(err, MS_E_UNSUPPORTED, "io_uring unavailable: %s", strerror(-rc));
    }
    u->base.v = &uring_vtbl;
    u->depth = depth;
    u->piece = piece;
    if (piece) {
        pthread_mutex_init(&u->mu, NULL);
        pthread_cond_init(&u->done_cv, NULL);
    }
    *out = &u->base;
    return 0;
}

/* ---- pread thread pool ---------------------------------------------------- */

typedef struct pool_io {
    ms_io base;
    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    fifo todo, done;
    int n_threads, stop;
    pthread_t *threads;
} pool_io;

static void do_pread(ms_io_req *r)
{
    uint64_t got = 0;
    while (got < r->len) {
        ssize_t k = pread(r->fd, (char *)r->buf + got, r->len - got, (off_t)(r->off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            r->res = -errno;
            return;
        }
        if (k == 0)
            break;
        got += (uint64_t)k;
    }
    r->res = (int64_t)got;
}

static void *pool_worker(void *arg)
{
    pool_io *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->todo.n && !p->stop)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop && !p->todo.n)
            break;
        ms_io_req *r = fifo_pop(&p->todo);
        pthread_mutex_unlock(&p->mu);
        do_pread(r);
        pthread_mutex_lock(&p->mu);
        if (fifo_push(&p->done, r))
            r->res = -ENOMEM; /* cannot happen without memory; reported below */
        pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int pool_submit(ms_io *io, ms_io_req *r, ms_err *err)
{
    pool_io *p = (pool_io *)io;
    pthread_mutex_lock(&p->mu);
    int rc = fifo_push(&p->todo, r);
    if (!rc)
        io->inflight++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return rc ? ms_err_set(err, MS_E_NOMEM, "io queue") : 0;
}

static int pool_wait(ms_io *io, ms_io_req **done, int max, int block, ms_err *err)
{
    (void)err;
    pool_io *p = (pool_io *)io;
    int n = 0;
    pthread_mutex_lock(&p->mu);
    while (block && !p->done.n && io->inflight > 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    while (n < max && p->done.n) {
        done[n++] = fifo_pop(&p->done);
        io->inflight--;
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}

static void pool_close(ms_io *io)
{
    pool_io *p = (pool_io *)io;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done_cv);
    free(p->todo.v);
    free(p->done.v);
    free(p->threads);
    free(p);
}

static const ms_io_vtbl pool_vtbl = {"threads", pool_submit, pool_wait, pool_close, NULL};

int ms_io_open_threads(int n_threads, ms_io **out, ms_err *err)
{
    *out = NULL;
    pool_io *p = ms_calloc(1, sizeof *p, "io pool", err);
    if (!p)
        return -1;
    p->base.v = &pool_vtbl;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->threads = ms_calloc((size_t)n_threads, sizeof *p->threads, "io threads", err);
    if (!p->threads) {
        free(p);
        return -1;
    }
    for (int i = 0; i < n_threads; i++) {
        if (pthread_create(&p->threads[i], NULL, pool_worker, p)) {
            p->n_threads = i;
            pool_close(&p->base);
            return ms_err_set(err, MS_E_NOMEM, "cannot start I/O thread %d", i);
        }
    }
    p->n_threads = n_threads;
    *out = &p->base;
    return 0;
}

/* ---- fault injection ------------------------------------------------------- */

typedef struct faulty_io {
    ms_io base;
    ms_io *inner;
    int fd;
    uint64_t fail_from;
    int64_t res;
    fifo failed;
} faulty_io;

static int faulty_submit(ms_io *io, ms_io_req *r, ms_err *err)
{
    faulty_io *f = (faulty_io *)io;
    io->inflight++;
    if (r->fd == f->fd && r->off + r->len > f->fail_from) {
        if (f->res < 0) {
            r->res = f->res;
        } else { /* truncated at fail_from: real bytes up to it, then nothing */
            uint64_t len = r->len;
            r->len = r->off < f->fail_from ? f->fail_from - r->off : 0;
            r->res = 0;
            if (r->len)
                do_pread(r);
            r->len = len;
        }
        return fifo_push(&f->failed, r) ? ms_err_set(err, MS_E_NOMEM, "io fault list") : 0;
    }
    return ms_io_submit(f->inner, r, err);
}

static int faulty_wait(ms_io *io, ms_io_req **done, int max, int block, ms_err *err)
{
    faulty_io *f = (faulty_io *)io;
    int n = 0;
    while (n < max && f->failed.n)
        done[n++] = fifo_pop(&f->failed);
    if (n < max) {
        int k = ms_io_wait(f->inner, done + n, max - n, block && n == 0, err);
        if (k < 0)
            return -1;
        n += k;
    }
    io->inflight -= n;
    return n;
}

static void faulty_close(ms_io *io)
{
    faulty_io *f = (faulty_io *)io;
    ms_io_close(f->inner);
    free(f->failed.v);
    free(f);
}

static int faulty_register(ms_io *io, void *const *bufs, const size_t *lens, int n,
                           ms_err *err)
{
    return ms_io_register(((faulty_io *)io)->inner, bufs, lens, n, err);
}

static const ms_io_vtbl faulty_vtbl = {"faulty", faulty_submit, faulty_wait, faulty_close,
                                       faulty_register};

int ms_io_open_faulty(ms_io *inner, int fd, uint64_t fail_from, int64_t res, ms_io **out,
                      ms_err *err)
{
    *out = NULL;
    faulty_io *f = ms_calloc(1, sizeof *f, "faulty io", err);
    if (!f)
        return -1;
    f->base.v = &faulty_vtbl;
    f->inner = inner;
    f->fd = fd;
    f->fail_from = fail_from;
    f->res = res;
    *out = &f->base;
    return 0;
}

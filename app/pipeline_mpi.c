/* The pipeline over MPI (Open MPI; `make mpi` builds moestream-mpi with
 * -DMS_MPI; the default binary has only the refusal at the end).
 *
 * Rank r holds layers [first[r], end[r]); rank 0 also the embedding and
 * head, the tokenizer, the sampler and the front end. Per forward call
 * rank 0 sends the residual of its micro-batch to rank 1, each rank runs
 * its layers (ms_stage_eval) and sends on, the last back to rank 0: one
 * message per micro-batch and hop, holding the rows (sessions, positions)
 * and the residual, nothing else. Rank 0 also tells the others when a
 * session closes, asks for their statistics and stops them.
 *
 * Nothing blocks in MPI: waits poll with a sleep (ranks of one machine
 * share its cores) and end at --stage-timeout, and an error on any rank
 * reaches rank 0 as a message naming the rank, which ends the job. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>

#include "cli.h"
#include "pipeline.h"

/* An error of this file: the sentence into err, -1. */
static int pl_err(ms_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int pl_err(ms_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

#ifdef MS_MPI
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#define MAX_RANKS PIPELINE_MAX_RANKS
#define MAX_STEP_SESSIONS 256 /* sessions of one batched step (MS_MAX_BATCH) */
enum { TAG_DATA = 1, TAG_CTRL, TAG_ERR, TAG_OPEN, TAG_STATS, TAG_FILE };
enum { OP_CLOSE = 1, OP_STATS, OP_STOP, OP_FILE };

typedef struct hdr {
    int32_t op, n_seq;
    int64_t n, d;
} hdr;

static struct {
    int rank, size;
    int first[MAX_RANKS], end[MAX_RANKS];
    double timeout;
    ms_stage_link link;
    pthread_mutex_t mu;
    uint64_t *closed;
    int n_closed, cap_closed;
    MPI_Request send_req[64];
    void *send_buf[64];
    int n_send;
    int joined; /* 1: MPI_Init done, -1: it failed */
} P = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void nap(int *spins)
{
    if ((*spins)++ < 200)
        return;
    struct timespec t = {0, 100000}; /* 0.1 ms: ranks on one machine share its cores */
    nanosleep(&t, NULL);
}

/* Waits for a message from `src` with `tag` (MPI_ANY_* allowed) and
 * receives it into a new buffer (*len bytes). An error message from any
 * rank ends the wait with that rank's sentence; so does the timeout
 * (timeout <= 0: none). */
static void *wait_msg(int src, int tag, double timeout, int *from, int *got_tag, int *len,
                      ms_error *err)
{
    double t0 = cli_now();
    int spins = 0;
    for (;;) {
        int flag = 0;
        MPI_Status s;
        /* an error from anyone first, then what is waited for (a probe of
         * any message could keep finding another one) */
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_ERR, MPI_COMM_WORLD, &flag, &s) != MPI_SUCCESS ||
            (!flag && MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, &s) != MPI_SUCCESS)) {
            pl_err(err, MS_E_IO, "pipeline: MPI_Iprobe failed on rank %d", P.rank);
            return NULL;
        }
        if (flag) {
            int n = 0;
            MPI_Get_count(&s, MPI_BYTE, &n);
            char *buf = malloc((size_t)n + 1);
            if (!buf) {
                pl_err(err, MS_E_NOMEM, "pipeline: no memory for a message of %d bytes", n);
                return NULL;
            }
            MPI_Recv(buf, n, MPI_BYTE, s.MPI_SOURCE, s.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            buf[n] = 0;
            if (s.MPI_TAG == TAG_ERR && tag != TAG_ERR) {
                pl_err(err, MS_E_IO, "rank %d: %s", s.MPI_SOURCE, buf);
                free(buf);
                return NULL;
            }
            *from = s.MPI_SOURCE;
            *got_tag = s.MPI_TAG;
            *len = n;
            return buf;
        }
        if (timeout > 0 && cli_now() - t0 > timeout) {
            pl_err(err, MS_E_IO, "pipeline: rank %d waited %.0f s for rank %d "
                       "(--stage-timeout): is it alive?", P.rank, timeout, src);
            return NULL;
        }
        nap(&spins);
    }
}

static int send_bytes(const void *buf, size_t n, int dst, int tag, ms_error *err)
{
    if (n > (size_t)INT32_MAX)
        return pl_err(err, MS_E_ARG, "pipeline: a message of %zu bytes (at most 2 GiB): "
                          "lower --prefill-span", n);
    if (MPI_Send(buf, (int)n, MPI_BYTE, dst, tag, MPI_COMM_WORLD) != MPI_SUCCESS)
        return pl_err(err, MS_E_IO, "pipeline: rank %d could not send to rank %d", P.rank,
                          dst);
    return 0;
}

/* A call's rows and residual as one message: hdr, sid, ctx, kv_format [n_seq],
 * seq, pos [n], x [n][d]. */
static size_t packed_size(int64_t n_seq, int64_t n, int64_t d)
{
    return sizeof(hdr) + (size_t)n_seq * 20 + (size_t)n * 12 + (size_t)(n * d) * 4;
}

static void *pack(const ms_stage_rows *r, const float *x, size_t *len)
{
    *len = packed_size(r->n_seq, r->n, r->d);
    char *b = malloc(*len), *p = b;
    if (!b)
        return NULL;
    hdr h = {0, r->n_seq, r->n, r->d};
    memcpy(p, &h, sizeof h), p += sizeof h;
    memcpy(p, r->sid, 8 * (size_t)r->n_seq), p += 8 * (size_t)r->n_seq;
    memcpy(p, r->ctx, 8 * (size_t)r->n_seq), p += 8 * (size_t)r->n_seq;
    memcpy(p, r->kv_format, 4 * (size_t)r->n_seq), p += 4 * (size_t)r->n_seq;
    memcpy(p, r->seq, 4 * (size_t)r->n), p += 4 * (size_t)r->n;
    memcpy(p, r->pos, 8 * (size_t)r->n), p += 8 * (size_t)r->n;
    memcpy(p, x, 4 * (size_t)(r->n * r->d));
    return b;
}

/* Points r and *x into a received message; -1 when its sizes disagree. */
static int unpack(char *b, int len, ms_stage_rows *r, float **x)
{
    hdr h;
    if ((size_t)len < sizeof h)
        return -1;
    memcpy(&h, b, sizeof h);
    if (h.n_seq < 1 || h.n < 1 || h.d < 1 || (size_t)len != packed_size(h.n_seq, h.n, h.d))
        return -1;
    char *p = b + sizeof h;
    *r = (ms_stage_rows){.n = h.n, .d = h.d, .n_seq = h.n_seq};
    r->sid = (const uint64_t *)p, p += 8 * (size_t)h.n_seq;
    r->ctx = (const int64_t *)p, p += 8 * (size_t)h.n_seq;
    r->kv_format = (const int32_t *)p, p += 4 * (size_t)h.n_seq;
    r->seq = (const int32_t *)p, p += 4 * (size_t)h.n;
    r->pos = (const int64_t *)p, p += 8 * (size_t)h.n;
    *x = (float *)p;
    return 0;
}

/* ---- rank 0: the link ---- */

static int flush_closed(ms_error *err)
{
    pthread_mutex_lock(&P.mu);
    int n = P.n_closed;
    uint64_t *ids = P.closed;
    P.closed = NULL;
    P.n_closed = P.cap_closed = 0;
    pthread_mutex_unlock(&P.mu);
    int rc = 0;
    if (n) {
        size_t len = sizeof(hdr) + 8 * (size_t)n;
        char *b = malloc(len);
        hdr h = {OP_CLOSE, n, 0, 0};
        if (!b)
            rc = pl_err(err, MS_E_NOMEM, "pipeline: no memory");
        for (int r = 1; b && rc == 0 && r < P.size; r++) {
            memcpy(b, &h, sizeof h);
            memcpy(b + sizeof h, ids, 8 * (size_t)n);
            rc = send_bytes(b, len, r, TAG_CTRL, err);
        }
        free(b);
    }
    free(ids);
    return rc;
}

static int link_send(void *user, const ms_stage_rows *r, const float *x, ms_error *err)
{
    (void)user;
    if (flush_closed(err))
        return -1;
    size_t len;
    void *b = pack(r, x, &len);
    if (!b)
        return pl_err(err, MS_E_NOMEM, "pipeline: no memory for a message of %zu bytes",
                          len);
    if (P.n_send == 64 || len > (size_t)INT32_MAX) {
        free(b);
        return pl_err(err, MS_E_ARG, "pipeline: %zu bytes in one message or 64 in flight",
                          len);
    }
    /* not blocking: rank 0 computes the next micro-batch while this one travels */
    if (MPI_Isend(b, (int)len, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &P.send_req[P.n_send]) !=
        MPI_SUCCESS) {
        free(b);
        return pl_err(err, MS_E_IO, "pipeline: could not send to rank 1");
    }
    P.send_buf[P.n_send++] = b;
    return 0;
}

static int link_recv(void *user, float *x, int64_t n, int64_t d, ms_error *err)
{
    (void)user;
    int from, tag, len;
    char *b = wait_msg(P.size - 1, TAG_DATA, P.timeout, &from, &tag, &len, err);
    if (!b)
        return -1;
    ms_stage_rows r;
    float *y;
    int rc = 0;
    if (unpack(b, len, &r, &y) || r.n != n || r.d != d)
        rc = pl_err(err, MS_E_IO, "pipeline: rank %d returned a message of %d bytes, "
                        "expected %lld rows of %lld floats", from, len, (long long)n,
                        (long long)d);
    else
        memcpy(x, y, sizeof *x * (size_t)(n * d));
    free(b);
    /* the oldest call sent has come through every stage: its send is done
     * (waiting for the later ones here would deadlock: rank 1 takes them
     * only once rank 0 has taken what it sends back) */
    if (P.n_send > 0) {
        MPI_Wait(&P.send_req[0], MPI_STATUS_IGNORE);
        free(P.send_buf[0]);
        memmove(P.send_req, P.send_req + 1, sizeof P.send_req[0] * (size_t)(P.n_send - 1));
        memmove(P.send_buf, P.send_buf + 1, sizeof P.send_buf[0] * (size_t)(P.n_send - 1));
        P.n_send--;
    }
    return rc;
}

static void link_closed(void *user, uint64_t sid)
{
    (void)user;
    pthread_mutex_lock(&P.mu);
    if (P.n_closed == P.cap_closed) {
        int cap = P.cap_closed ? 2 * P.cap_closed : 16;
        uint64_t *v = realloc(P.closed, sizeof *v * (size_t)cap);
        if (v) {
            P.closed = v;
            P.cap_closed = cap;
        }
    }
    if (P.n_closed < P.cap_closed)
        P.closed[P.n_closed++] = sid;
    pthread_mutex_unlock(&P.mu);
}

/* A session file's parts on the other stages: every rank is asked, then
 * every answer waited for (a rank that cannot do its part says why); the
 * first failure is the call's. */
static int link_file(void *user, int op, uint64_t sid, int64_t ctx, int32_t kvf,
                     const char *path, ms_error *err)
{
    (void)user;
    if (flush_closed(err))
        return -1;
    size_t n = strlen(path) + 1, len = sizeof(hdr) + 8 + n;
    char *b = malloc(len);
    if (!b)
        return pl_err(err, MS_E_NOMEM, "pipeline: no memory");
    hdr h = {OP_FILE, op, ctx, kvf};
    memcpy(b, &h, sizeof h);
    memcpy(b + sizeof h, &sid, 8);
    memcpy(b + sizeof h + 8, path, n);
    int rc = 0, sent = 1;
    for (; rc == 0 && sent < P.size; sent++)
        rc = send_bytes(b, len, sent, TAG_CTRL, err);
    free(b);
    for (int r = 1; r < sent - (rc != 0); r++) {
        int from, tag, got;
        ms_error e = {0};
        char *a = wait_msg(r, TAG_FILE, P.timeout, &from, &tag, &got, &e);
        if ((!a || *a) && rc == 0) {
            rc = -1;
            err->code = a ? MS_E_IO : e.code;
            snprintf(err->msg, sizeof err->msg, "%s", a ? a : e.msg);
        }
        free(a);
        if (!a) /* a rank's error or the timeout: the job is ending, ask no more */
            break;
    }
    return rc;
}

static void stop_all(void)
{
    static int done;
    if (done++)
        return;
    hdr h = {OP_STOP, 0, 0, 0};
    ms_error err;
    for (int r = 1; r < P.size; r++)
        send_bytes(&h, sizeof h, r, TAG_CTRL, &err);
    MPI_Finalize();
}

int pipeline_stages(void)
{
    return P.size > 1 && P.rank == 0 ? P.size : 0;
}

int pipeline_stage_stats(int r, pipeline_stage *out, ms_error *err)
{
    memset(out, 0, sizeof *out);
    if (r < 0 || r >= pipeline_stages())
        return pl_err(err, MS_E_ARG, "pipeline: no stage %d to ask", r);
    out->first = P.first[r];
    out->end = P.end[r];
    if (r == 0)
        return 0; /* its counters are the caller's engine's */
    hdr h = {OP_STATS, 0, 0, 0};
    int from, tag, len;
    if (send_bytes(&h, sizeof h, r, TAG_CTRL, err))
        return -1;
    pipeline_stage *s = wait_msg(r, TAG_STATS, P.timeout, &from, &tag, &len, err);
    if (!s || len != (int)sizeof *s) {
        if (s)
            pl_err(err, MS_E_IO, "stage %d: statistics of %d bytes, expected %zu", r, len,
                   sizeof *s);
        free(s);
        return -1;
    }
    *out = *s;
    free(s);
    return 0;
}

void pipeline_print_stats(void)
{
    for (int r = 1; r < pipeline_stages(); r++) {
        pipeline_stage s;
        ms_error err = {0};
        if (pipeline_stage_stats(r, &s, &err)) {
            fprintf(stderr, "stage %d: no statistics: %s\n", r, err.msg);
            continue;
        }
        int64_t q = s.st.expert_requests;
        fprintf(stderr, "stage %d (rank %d, layers %d-%d): computing %.3f s, waiting %.3f s, "
                "experts read %.1f MB, hit rate %.1f%% (%lld requests)\n", r, r, s.first,
                s.end - 1, s.t_compute, s.t_wait, (double)s.st.bytes_read / 1e6,
                q ? 100.0 * (double)s.st.expert_hits / (double)q : 0.0, (long long)q);
    }
}

/* ---- the other ranks: serve a stage ---- */

typedef struct slot {
    uint64_t sid;
    ms_session *s;
} slot;

static ms_session *session_for(ms_engine *eng, slot **tab, int *n, uint64_t sid, int64_t ctx,
                               int kvf, ms_error *err)
{
    for (int i = 0; i < *n; i++)
        if ((*tab)[i].sid == sid)
            return (*tab)[i].s;
    slot *v = realloc(*tab, sizeof *v * (size_t)(*n + 1));
    if (!v) {
        pl_err(err, MS_E_NOMEM, "pipeline: no memory for a session");
        return NULL;
    }
    *tab = v;
    ms_session_opts so = {.ctx = ctx, .kv_format = kvf};
    if (ms_session_open(eng, &so, &v[*n].s, err))
        return NULL;
    v[*n].sid = sid;
    return v[(*n)++].s;
}

/* Stage P.rank's part of a session file (ms_stage_link.file): "" into
 * reply when done, else the sentence, naming the rank. A save makes the
 * folder where this rank's file system lacks it. */
static void stage_file(ms_engine *eng, slot **tab, int *n_tab, int op, uint64_t sid, int64_t ctx,
                       int kvf, const char *path, char *reply, size_t size)
{
    char part[PATH_MAX];
    ms_error e = {0};
    int rc = -1;
    if (!eng)
        snprintf(e.msg, sizeof e.msg, "its stage is not open");
    else if (ms_stage_file_path(path, P.rank, part, sizeof part))
        snprintf(e.msg, sizeof e.msg, "%s: path too long", path);
    else if (op == MS_STAGE_REMOVE)
        rc = unlink(part) == 0 || errno == ENOENT
                 ? 0
                 : pl_err(&e, MS_E_IO, "%s: cannot remove (%s)", part, strerror(errno));
    else {
        ms_session *s = session_for(eng, tab, n_tab, sid, ctx, kvf, &e);
        if (s && op == MS_STAGE_SAVE) {
            for (char *q = strchr(part + 1, '/'); q; q = strchr(q + 1, '/')) {
                *q = 0;
                mkdir(part, 0700); /* exists already, mostly */
                *q = '/';
            }
            rc = ms_session_save(s, part, &e);
        } else if (s) {
            rc = ms_session_load(s, part, &e);
        }
    }
    reply[0] = 0;
    if (rc)
        snprintf(reply, size, "rank %d: stage %d (layers %d-%d): %s", P.rank, P.rank,
                 P.first[P.rank], P.end[P.rank] - 1, e.msg);
}

static void report(const char *what, const ms_error *e)
{
    char msg[1200];
    snprintf(msg, sizeof msg, "stage %d (layers %d-%d): %s%s%s", P.rank, P.first[P.rank],
             P.end[P.rank] - 1, what, *what ? ": " : "", e->msg);
    ms_error err;
    send_bytes(msg, strlen(msg), 0, TAG_ERR, &err);
}

static void serve_stage(const char *model, ms_engine_opts eo)
{
    ms_engine *eng = NULL;
    ms_error err = {0};
    eo.stage_first = P.first[P.rank];
    eo.stage_end = P.end[P.rank];
    eo.stage_no_ends = 1;
    eo.link = NULL;
    eo.log = NULL; /* rank 0 speaks for the job */
    eo.progress = NULL;
    /* Ctrl-C and SIGTERM are rank 0's to act on (chat cuts a reply short,
     * serve stops cleanly); this rank ends when rank 0 tells it, or when
     * mpirun ends the job */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    int ok = ms_engine_open(model, &eo, &eng, &err) == 0;
    if (!ok)
        report("cannot open its stage", &err); /* then waits for rank 0's stop */
    else
        send_bytes("ok", 2, 0, TAG_OPEN, &err);
    slot *tab = NULL;
    int n_tab = 0, next = (P.rank + 1) % P.size;
    pipeline_stage ss = {.first = P.first[P.rank], .end = P.end[P.rank]};
    for (;;) {
        int from, tag, len;
        double t0 = cli_now();
        char *b = wait_msg(MPI_ANY_SOURCE, MPI_ANY_TAG, 0, &from, &tag, &len, &err);
        ss.t_wait += cli_now() - t0;
        if (!b)
            break;
        hdr h;
        memcpy(&h, b, sizeof h < (size_t)len ? sizeof h : (size_t)len);
        if (tag == TAG_CTRL && h.op == OP_STOP) {
            free(b);
            break;
        }
        if (tag == TAG_CTRL && h.op == OP_CLOSE) {
            const uint64_t *ids = (const uint64_t *)(b + sizeof h);
            for (int k = 0; k < h.n_seq; k++)
                for (int i = 0; i < n_tab; i++)
                    if (tab[i].sid == ids[k]) {
                        ms_session_close(tab[i].s);
                        tab[i] = tab[--n_tab];
                        break;
                    }
        } else if (tag == TAG_CTRL && h.op == OP_FILE && len > (int)sizeof h + 8) {
            uint64_t sid;
            memcpy(&sid, b + sizeof h, 8);
            char reply[sizeof err.msg + 96];
            stage_file(eng, &tab, &n_tab, h.n_seq, sid, h.n, (int)h.d, b + sizeof h + 8, reply,
                       sizeof reply);
            if (send_bytes(reply, strlen(reply) + 1, 0, TAG_FILE, &err))
                report("", &err);
        } else if (tag == TAG_CTRL && h.op == OP_STATS) {
            if (eng) {
                ms_engine_stats(eng, &ss.st);
                snprintf(ss.placement, sizeof ss.placement, "%s", ms_engine_placement(eng));
            }
            send_bytes(&ss, sizeof ss, 0, TAG_STATS, &err);
        } else if (tag == TAG_DATA && ok) {
            ms_stage_rows r;
            float *x;
            ms_session *sess[MAX_STEP_SESSIONS];
            int bad = unpack(b, len, &r, &x) || r.n_seq > MAX_STEP_SESSIONS;
            for (int i = 0; !bad && i < r.n_seq; i++)
                bad = !(sess[i] = session_for(eng, &tab, &n_tab, r.sid[i], r.ctx[i],
                                              r.kv_format[i], &err));
            double t1 = cli_now();
            if (bad || ms_stage_eval(sess, &r, x, &err)) {
                if (!err.msg[0])
                    snprintf(err.msg, sizeof err.msg, "a malformed message of %d bytes", len);
                report("", &err);
                err.msg[0] = 0;
            } else {
                ss.t_compute += cli_now() - t1;
                if (send_bytes(b, (size_t)len, next, TAG_DATA, &err))
                    report("", &err);
            }
        }
        free(b);
    }
    for (int i = 0; i < n_tab; i++)
        ms_session_close(tab[i].s);
    free(tab);
    ms_engine_close(eng);
    MPI_Finalize();
    exit(0); /* the job's status is rank 0's, which said what failed */
}

/* Stages as "0-11,12-23" into first/end; every layer once, in order. */
static int parse_stages(const char *spec, int n_layers, ms_error *err)
{
    int k = 0, at = 0;
    const char *p = spec;
    while (*p) {
        char *e;
        long a = strtol(p, &e, 10), b;
        if (e == p || *e != '-')
            return pl_err(err, MS_E_ARG, "--stages %s: expected ranges like 0-11,12-23",
                              spec);
        p = e + 1;
        b = strtol(p, &e, 10);
        if (e == p || (*e && *e != ','))
            return pl_err(err, MS_E_ARG, "--stages %s: expected ranges like 0-11,12-23",
                              spec);
        if (a != at || b < a || b >= n_layers)
            return pl_err(err, MS_E_ARG, "--stages %s: range %ld-%ld: expected one starting "
                              "at layer %d and ending by layer %d", spec, a, b, at,
                              n_layers - 1);
        if (k == MAX_RANKS)
            return pl_err(err, MS_E_ARG, "--stages %s: more than %d stages", spec,
                              MAX_RANKS);
        P.first[k] = (int)a;
        P.end[k++] = (int)b + 1;
        at = (int)b + 1;
        p = *e ? e + 1 : e;
    }
    if (at != n_layers || k != P.size)
        return pl_err(err, MS_E_ARG, "--stages %s: %d stages covering layers 0-%d, for %d "
                          "ranks and %d layers", spec, k, at - 1, P.size, n_layers);
    return 0;
}

/* Contiguous stages with the largest one's bytes as small as can be (rank 0
 * also holds the embedding and head): a small dynamic programme. */
static int balance(const int64_t *lb, int L, int64_t ends, ms_error *err)
{
    int K = P.size;
    if (K > L)
        return pl_err(err, MS_E_ARG, "--pipeline over %d ranks: the model has %d layers, "
                          "at most one stage each", K, L);
    int64_t *pre = calloc((size_t)L + 1, sizeof *pre), *best = malloc(sizeof *best * (size_t)(K + 1) * (size_t)(L + 1));
    int *cut = malloc(sizeof *cut * (size_t)(K + 1) * (size_t)(L + 1));
    if (!pre || !best || !cut) {
        free(pre), free(best), free(cut);
        return pl_err(err, MS_E_NOMEM, "pipeline: no memory");
    }
    for (int l = 0; l < L; l++)
        pre[l + 1] = pre[l] + lb[l];
#define BEST(k, l) best[(size_t)(k) * (size_t)(L + 1) + (size_t)(l)]
#define CUT(k, l) cut[(size_t)(k) * (size_t)(L + 1) + (size_t)(l)]
    for (int l = 1; l <= L; l++)
        BEST(1, l) = pre[l] + ends, CUT(1, l) = 0;
    for (int k = 2; k <= K; k++)
        for (int l = k; l <= L; l++) {
            BEST(k, l) = INT64_MAX;
            for (int c = k - 1; c < l; c++) {
                int64_t v = BEST(k - 1, c), w = pre[l] - pre[c];
                v = v > w ? v : w;
                if (v < BEST(k, l))
                    BEST(k, l) = v, CUT(k, l) = c;
            }
        }
    for (int k = K, l = L; k >= 1; k--) {
        P.end[k - 1] = l;
        P.first[k - 1] = CUT(k, l);
        l = CUT(k, l);
    }
#undef BEST
#undef CUT
    free(pre), free(best), free(cut);
    return 0;
}

/* Joins the MPI job, once. */
static int join(ms_error *err)
{
    if (P.joined)
        return P.joined > 0 ? 0 : pl_err(err, MS_E_IO, "--pipeline: MPI_Init failed");
    int provided = 0;
    P.joined = -1;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return pl_err(err, MS_E_IO, "--pipeline: MPI_Init failed (run under mpirun)");
    P.joined = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &P.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P.size);
    if (provided < MPI_THREAD_SERIALIZED && P.rank == 0)
        fprintf(stderr, "moestream: MPI gives thread level %d, not SERIALIZED: serve may "
                "misbehave\n", provided);
    return 0;
}

int pipeline_rank(const cli_args *a)
{
    ms_error e;
    return a->pipeline && join(&e) == 0 ? P.rank : 0;
}

int pipeline_open(const cli_args *a, ms_engine_opts *eo, ms_error *err)
{
    if (!a->pipeline)
        return 0;
    if (join(err))
        return -1;
    P.timeout = (double)a->stage_timeout;
    if (P.size > MAX_RANKS)
        return pl_err(err, MS_E_ARG, "--pipeline: %d ranks, at most %d", P.size, MAX_RANKS);
    int64_t *lb = NULL, ends = 0;
    int L = 0;
    if (P.rank == 0 && ms_layer_bytes(a->model, &lb, &L, &ends, err)) {
        stop_all();
        return -1;
    }
    int rc = P.rank ? ms_layer_bytes(a->model, &lb, &L, &ends, err) : 0;
    rc = rc ? rc : a->stages ? parse_stages(a->stages, L, err) : balance(lb, L, ends, err);
    free(lb);
    if (rc && P.rank == 0) {
        stop_all();
        return -1;
    }
    if (rc) { /* rank 0 says it, naming this rank, and stops the job */
        report("", err);
        int from, tag, len;
        ms_error e2;
        free(wait_msg(0, TAG_CTRL, P.timeout, &from, &tag, &len, &e2));
        MPI_Finalize();
        exit(0); /* rank 0 exits with the job's status, after saying why */
    }
    if (P.size == 1) {
        MPI_Finalize();
        return 0; /* one rank: the whole model, as without --pipeline */
    }
    if (P.rank != 0)
        serve_stage(a->model, *eo); /* does not return */
    /* rank 0: every other stage opened, or the first error */
    for (int r = 1; r < P.size; r++) {
        int from, tag, len;
        char *b = wait_msg(r, TAG_OPEN, P.timeout, &from, &tag, &len, err);
        if (!b) {
            stop_all();
            return -1;
        }
        free(b);
    }
    atexit(stop_all);
    P.link = (ms_stage_link){link_send, link_recv, link_closed, link_file, NULL,
                             a->micro_batches > 0 ? (int)a->micro_batches : P.size};
    eo->stage_first = 0;
    eo->stage_end = P.end[0];
    eo->link = &P.link;
    if (eo->log) {
        char line[512];
        int k = snprintf(line, sizeof line, "pipeline of %d stages (layers", P.size);
        for (int r = 0; r < P.size && k < (int)sizeof line; r++)
            k += snprintf(line + k, sizeof line - (size_t)k, "%s %d-%d", r ? "," : "",
                          P.first[r], P.end[r] - 1);
        if (k < (int)sizeof line)
            snprintf(line + k, sizeof line - (size_t)k, "), %d micro-batches in flight",
                     P.link.in_flight);
        eo->log(eo->log_user, line);
    }
    return 0;
}

#else /* the default binary: no MPI */

int pipeline_rank(const cli_args *a)
{
    (void)a;
    return 0;
}

int pipeline_open(const cli_args *a, ms_engine_opts *eo, ms_error *err)
{
    (void)eo;
    if (!a->pipeline)
        return 0;
    return pl_err(err, MS_E_UNSUPPORTED, "--pipeline needs the MPI build: `make mpi` "
                      "builds moestream-mpi, run as `mpirun -np K moestream-mpi ... "
                      "--pipeline`");
}

int pipeline_stages(void)
{
    return 0;
}

int pipeline_stage_stats(int r, pipeline_stage *out, ms_error *err)
{
    memset(out, 0, sizeof *out);
    return pl_err(err, MS_E_UNSUPPORTED, "pipeline: no stage %d without MPI", r);
}

void pipeline_print_stats(void)
{
}

#endif

/* Pipeline stages: a model run as a chain of engines, each over a range of
 * its layers. The first engine (the one sessions use) runs its layers, hands
 * the residual stream to the link, and runs the head on what comes back;
 * the others run their layers on what they are sent (ms_stage_eval). The
 * transport is the caller's (app/pipeline_mpi.c); nothing here knows it.
 *
 * A call is split into micro-batches (link.in_flight of them, consecutive
 * rows) so that the first engine computes the next one while the others
 * work on those sent: a row's result never depends on the rows beside it,
 * so the split changes no bit. */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "runtime/engine.h"
#include "runtime/session.h"

/* Rows [off, off + n) of call f. */
static ms_fwd part_of(const ms_fwd *f, int64_t off, int64_t n)
{
    ms_fwd p = *f;
    p.ids = f->ids ? f->ids + off : NULL;
    p.n = n;
    if (f->n_seq > 1) {
        p.seq = f->seq + off;
        p.pos = f->pos + off;
    } else {
        p.pos0 = f->pos0 + off;
    }
    p.on_layer = NULL; /* progress by layer means nothing part by part */
    p.head_rows = NULL; /* call-wide indices: finish_part picks a part's own */
    p.n_head = 0;
    p.x_in = NULL;
    p.x_out = NULL;
    p.head_only = 0;
    return p;
}

typedef struct link_call {
    ms_engine *eng;
    const ms_fwd *f;
    float *x;                 /* [n][d] the call's residual */
    ms_stage_rows rows;       /* the whole call; parts point into it */
    int64_t step;             /* rows per part */
    int64_t *rows_at;         /* [step] a part's head rows, from its first */
} link_call;

/* Receives part j back from the last stage and runs the head on it. */
static int finish_part(link_call *c, int j, ms_err *err)
{
    const ms_fwd *f = c->f;
    ms_model *m = c->eng->model;
    int64_t off = j * c->step, n = f->n - off < c->step ? f->n - off : c->step;
    float *x = c->x + off * m->d_model;
    double t0 = ms_now();
    if (c->eng->link.recv(c->eng->link.user, x, n, m->d_model, err))
        return -1;
    f->timers->stages += ms_now() - t0;
    ms_fwd h = part_of(f, off, n);
    h.x_in = x;
    h.head_only = 1;
    if (f->head_rows) { /* those of the call's head rows that fall in the part */
        int64_t i0 = 0, k = 0;
        while (i0 < f->n_head && f->head_rows[i0] < off)
            i0++;
        while (i0 + k < f->n_head && f->head_rows[i0 + k] < off + n)
            c->rows_at[k] = f->head_rows[i0 + k] - off, k++;
        if (k == 0)
            return 0;
        h.head_rows = c->rows_at;
        h.n_head = k;
        h.logits = f->logits + i0 * m->vocab;
    } else if (f->logits_all) {
        h.logits = f->logits + off * m->vocab;
    } else if (off + n == f->n) {
        h.logits = f->logits;
    } else {
        return 0; /* only the call's last row has logits to make */
    }
    return m->family->forward(m, &h, err);
}

static int pipeline_forward(ms_engine *eng, const ms_fwd *f, ms_session *const *ss, ms_err *err)
{
    ms_model *m = eng->model;
    const ms_stage_link *k = &eng->link;
    int64_t n = f->n, d = m->d_model;
    int n_seq = f->n_seq > 1 ? f->n_seq : 1;
    int parts = k->in_flight < n ? k->in_flight : (int)n;
    link_call c = {.eng = eng, .f = f, .step = (n + parts - 1) / parts};
    parts = (int)((n + c.step - 1) / c.step);
    c.x = ms_malloc(sizeof *c.x * (size_t)(n * d), "stage residual", err);
    c.rows_at = ms_malloc(sizeof *c.rows_at * (size_t)c.step, "stage rows", err);
    uint64_t *sid = ms_malloc(sizeof *sid * (size_t)n_seq, "stage rows", err);
    int64_t *ctx = ms_malloc(sizeof *ctx * (size_t)n_seq, "stage rows", err);
    int32_t *kvf = ms_malloc(sizeof *kvf * (size_t)n_seq, "stage rows", err);
    int32_t *seq = ms_malloc(sizeof *seq * (size_t)n, "stage rows", err);
    int64_t *pos = ms_malloc(sizeof *pos * (size_t)n, "stage rows", err);
    int rc = c.x && c.rows_at && sid && ctx && kvf && seq && pos ? 0 : -1;
    for (int i = 0; rc == 0 && i < n_seq; i++) {
        sid[i] = ss[i]->sid;
        ctx[i] = ss[i]->ctx;
        kvf[i] = (int32_t)ss[i]->kv_fmt + 1; /* enum ms_kv_format */
    }
    for (int64_t t = 0; rc == 0 && t < n; t++) {
        seq[t] = f->n_seq > 1 ? f->seq[t] : 0;
        pos[t] = ms_fwd_pos(f, t);
    }
    c.rows = (ms_stage_rows){.n = n, .d = d, .n_seq = n_seq, .sid = sid, .ctx = ctx,
                             .kv_format = kvf, .seq = seq, .pos = pos};
    int sent = 0, done = 0;
    while (rc == 0 && done < parts) {
        if (sent < parts && sent - done < k->in_flight) {
            int64_t off = sent * c.step, np = n - off < c.step ? n - off : c.step;
            ms_fwd p = part_of(f, off, np);
            p.x_out = c.x + off * d;
            p.logits = NULL;
            ms_stage_rows r = c.rows;
            r.n = np;
            r.seq = seq + off;
            r.pos = pos + off;
            rc = m->family->forward(m, &p, err);
            double t0 = ms_now();
            rc = rc ? rc : k->send(k->user, &r, p.x_out, err);
            f->timers->stages += ms_now() - t0;
            sent++;
        } else {
            rc = finish_part(&c, done++, err);
        }
    }
    free(c.x);
    free(c.rows_at);
    free(sid);
    free(ctx);
    free(kvf);
    free(seq);
    free(pos);
    return rc;
}

int ms_stage_forward(ms_engine *eng, const ms_fwd *f, ms_session *const *ss, ms_err *err)
{
    if (!eng->link.send)
        return eng->family->forward(eng->model, f, err);
    return pipeline_forward(eng, f, ss, err);
}

/* Brings session s to position p, where its rows start: a session past it
 * was rewound by the first stage; one short of it missed positions. */
static int seek(ms_session *s, int64_t p, int64_t n, ms_err *err)
{
    if (s->pos > p && ms_session_truncate(s, p, err))
        return -1;
    if (s->pos < p)
        return ms_err_set(err, MS_E_ARG, "stage: session %llu holds %lld positions, the call "
                          "starts at %lld", (unsigned long long)s->sid, (long long)s->pos,
                          (long long)p);
    if (p + n > s->ctx)
        return ms_err_set(err, MS_E_CONTEXT_FULL, "CONTEXT_FULL: stage: session %llu: %lld "
                          "positions + %lld rows exceed its context of %lld tokens",
                          (unsigned long long)s->sid, (long long)p, (long long)n,
                          (long long)s->ctx);
    return 0;
}

int ms_stage_eval(ms_session *const *ss, const ms_stage_rows *r, float *x, ms_error *err)
{
    ms_engine *eng = ss[0]->eng;
    ms_model *m = eng->model;
    int64_t n = r->n, d = m->d_model;
    if (r->d != d || n < 1 || r->n_seq < 1)
        return ms_err_set(err, MS_E_ARG, "stage: a call of %lld rows of %lld floats for %d "
                          "sessions; this model's residual has %lld", (long long)n,
                          (long long)r->d, r->n_seq, (long long)d);
    int one = 1;
    for (int64_t t = 0; t < n; t++) {
        if (r->seq[t] < 0 || r->seq[t] >= r->n_seq || ss[r->seq[t]]->eng != eng)
            return ms_err_set(err, MS_E_ARG, "stage: row %lld names session %d of %d",
                              (long long)t, r->seq[t], r->n_seq);
        one &= r->seq[t] == r->seq[0] && r->pos[t] == r->pos[0] + t;
    }
    double t0 = ms_now();
    if (one) { /* consecutive positions of one session, a span at a time */
        ms_session *s = ss[r->seq[0]];
        if (seek(s, r->pos[0], n, err))
            return -1;
        for (int64_t off = 0; off < n; off += m->max_span) {
            int64_t nb = n - off < m->max_span ? n - off : m->max_span;
            ms_fwd f = {.n = nb, .pos0 = s->pos, .kv = s->kv, .scratch = &s->scratch,
                        .trace = s->trace, .timers = &s->timers, .x_in = x + off * d,
                        .x_out = x + off * d};
            if (m->family->forward(m, &f, err))
                return -1;
            memset(s->hist + s->pos, 0, sizeof *s->hist * (size_t)nb); /* ids: the first stage's */
            s->pos += nb;
        }
        if (n > 1) {
            s->stats.n_prefill_tokens += n;
            s->stats.t_prefill += ms_now() - t0;
        } else {
            s->stats.n_decode_tokens++;
            s->stats.t_decode += ms_now() - t0;
        }
        return 0;
    }
    /* rows of several sessions (a batched step, prompts read together):
     * a session's rows consecutive, at consecutive positions */
    if (n > m->max_batch)
        return ms_err_set(err, MS_E_ARG, "stage: %lld rows of several sessions in one call, "
                          "at most %d", (long long)n, m->max_batch);
    int seq[MS_MAX_BATCH], ns = 0;
    int64_t pos[MS_MAX_BATCH];
    ms_kv *kvs[MS_MAX_BATCH];
    ms_session *sl[MS_MAX_BATCH];
    for (int64_t t = 0; t < n; t++) {
        pos[t] = r->pos[t];
        if (t > 0 && r->seq[t] == r->seq[t - 1]) {
            if (r->pos[t] != r->pos[t - 1] + 1)
                return ms_err_set(err, MS_E_ARG, "stage: rows %lld and %lld of session %d are "
                                  "at positions %lld and %lld, not consecutive", (long long)t - 1,
                                  (long long)t, r->seq[t], (long long)r->pos[t - 1],
                                  (long long)r->pos[t]);
            seq[t] = ns - 1;
            continue;
        }
        for (int64_t u = 0; u < t; u++)
            if (r->seq[u] == r->seq[t])
                return ms_err_set(err, MS_E_ARG, "stage: session %d has rows %lld and %lld "
                                  "of one call with others between", r->seq[t], (long long)u,
                                  (long long)t);
        int64_t k = 1;
        while (t + k < n && r->seq[t + k] == r->seq[t])
            k++;
        ms_session *s = ss[r->seq[t]];
        if (seek(s, r->pos[t], k, err))
            return -1;
        sl[ns] = s;
        kvs[ns] = s->kv;
        seq[t] = ns++;
    }
    ms_session *s0 = sl[0];
    ms_fwd f = {.n = n, .n_seq = ns, .seq = seq, .pos = pos, .kvs = kvs,
                .pos0 = pos[0], .kv = kvs[0], .scratch = &s0->scratch, .trace = s0->trace,
                .timers = &s0->timers, .x_in = x, .x_out = x};
    if (m->family->forward(m, &f, err))
        return -1;
    ms_session_count_rows(sl, seq, n, ms_now() - t0);
    for (int64_t t = 0; t < n; t++) {
        ms_session *s = sl[seq[t]];
        s->hist[s->pos++] = 0; /* ids: the first stage's */
    }
    return 0;
}

typedef struct layer_sum {
    int n_layers;
    int64_t *bytes, ends;
} layer_sum;

static void add_tensor(const ms_tensor_info *t, void *ctx)
{
    layer_sum *s = ctx;
    const char *p = strstr(t->name, ".layers.");
    if (p) {
        int l = atoi(p + 8);
        if (l < s->n_layers)
            s->bytes[l] += (int64_t)t->nbytes;
        return; /* past the last: MTP layers, not run */
    }
    if (!strstr(t->name, "mtp"))
        s->ends += (int64_t)t->nbytes;
}

int ms_layer_bytes(const char *model_dir, int64_t **bytes, int *n_layers, int64_t *ends,
                   ms_error *err)
{
    ms_checked c;
    *bytes = NULL;
    if (ms_check_open(model_dir, &c, err))
        return -1;
    layer_sum s = {.n_layers = c.m->n_layers};
    if (!(s.bytes = ms_calloc((size_t)c.m->n_layers, sizeof *s.bytes, "layer sizes", err))) {
        ms_check_close(&c);
        return -1;
    }
    ms_ckpt_foreach(c.ck, add_tensor, &s);
    ms_check_close(&c);
    *bytes = s.bytes;
    *n_layers = s.n_layers;
    *ends = s.ends;
    return 0;
}

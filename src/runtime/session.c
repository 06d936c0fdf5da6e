/* Session: one timeline over an engine — KV cache, position, last logits.
 * Splits evaluations into calls of at most max_span positions; refuses
 * (before touching the cache) anything that would pass the context. */
#include <stdlib.h>
#include <string.h>

#include "models/ops.h"
#include "runtime/engine.h"
#include "runtime/session.h"


/* Ring capacities are multiples of the attention chunk, so that an aligned
 * chunk of positions is contiguous; a sliding layer's ring holds its window,
 * a whole prefill block and the rewind slack. */
static int alloc_kv(ms_session *s, ms_err *err)
{
    const ms_model *m = s->eng->model;
    s->kv = ms_calloc((size_t)m->n_layers, sizeof *s->kv, "kv table", err);
    if (!s->kv)
        return -1;
    for (int l = 0; l < m->n_layers; l++) {
        int64_t cap = s->ctx, w = m->kv_window[l];
        if (w && w + MS_REWIND_SLACK + m->max_batch < cap)
            cap = w + MS_REWIND_SLACK + m->max_batch;
        cap = (cap + MS_ATTN_CHUNK - 1) / MS_ATTN_CHUNK * MS_ATTN_CHUNK;
        if (!ms_model_has_layer(m, l)) { /* another stage's: its ring size only (rewinds) */
            s->kv[l] = (ms_kv){.fmt = s->kv_fmt, .cap = cap};
            continue;
        }
        if (ms_kv_alloc(&s->kv[l], s->kv_fmt, cap, m->kv_row[l], m->kv_plane[l],
                        m->kv_kplanes[l], m->kv_group[l], err))
            return -1;
    }
    return 0;
}

int ms_session_open(ms_engine *eng, const ms_session_opts *opts, ms_session **out,
                    ms_error *err)
{
    static const ms_session_opts defaults = {0};
    opts = opts ? opts : &defaults;
    *out = NULL;
    ms_session *s = ms_calloc(1, sizeof *s, "session", err);
    if (!s)
        return -1;
    s->eng = eng;
    s->sid = __atomic_add_fetch(&eng->next_sid, 1, __ATOMIC_RELAXED);
    s->ctx = opts->ctx > 0 ? opts->ctx : eng->default_ctx;
    if (s->ctx < 1) {
        int64_t ctx = s->ctx;
        free(s);
        return ms_err_set(err, MS_E_ARG, "context of %lld tokens is too small", (long long)ctx);
    }
    if (opts->kv_format < 0 || opts->kv_format > MS_KVCACHE_FP8) {
        free(s);
        return ms_err_set(err, MS_E_ARG, "KV cache format %d is not one of enum ms_kv_format",
                          opts->kv_format);
    }
    s->kv_fmt = opts->kv_format > 0 ? (ms_kvfmt)(opts->kv_format - 1) : eng->kv_fmt;
    s->logits = ms_calloc((size_t)eng->model->vocab, 4, "logits", err);
    s->hist = s->logits ? ms_malloc(sizeof *s->hist * (size_t)s->ctx, "token history", err) : NULL;
    if (!s->hist || alloc_kv(s, err) || ms_trace_open(opts->dump_dir, &s->trace, err)) {
        ms_session_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void ms_session_close(ms_session *s)
{
    if (!s)
        return;
    if (s->eng->link.closed)
        s->eng->link.closed(s->eng->link.user, s->sid);
    if (s->kv)
        for (int l = 0; l < s->eng->model->n_layers; l++)
            ms_kv_free(&s->kv[l]);
    ms_trace_close(s->trace, NULL);
    free(s->kv);
    free(s->scratch.p);
    free(s->logits);
    free(s->hist);
    free(s);
}

int64_t ms_session_bytes(const ms_session *s)
{
    int64_t b = s->scratch.n * 4 + s->eng->model->vocab * 4 + s->ctx * 4;
    for (int l = 0; l < s->eng->model->n_layers; l++)
        if (s->kv[l].data)
            b += s->kv[l].cap * ms_kv_bytes_per_pos(s->kv_fmt, s->kv[l].row, s->kv[l].group);
    return b;
}

uint64_t ms_session_id(const ms_session *s)
{
    return s->sid;
}

const ms_engine *ms_session_engine(const ms_session *s)
{
    return s->eng;
}

const int32_t *ms_session_ids(const ms_session *s, int64_t *n)
{
    *n = s->pos;
    return s->hist;
}

int64_t ms_session_pos(const ms_session *s)
{
    return s->pos;
}

int64_t ms_session_ctx(const ms_session *s)
{
    return s->ctx;
}

const char *ms_session_kv_format(const ms_session *s)
{
    return ms_kvfmt_name(s->kv_fmt);
}

int ms_session_truncate(ms_session *s, int64_t keep, ms_error *err)
{
    if (keep < 0 || keep > s->pos)
        return ms_err_set(err, MS_E_ARG, "cannot keep %lld positions of %lld", (long long)keep,
                          (long long)s->pos);
    const ms_model *m = s->eng->model;
    for (int l = 0; l < m->n_layers; l++) {
        int64_t w = m->kv_window[l];
        /* position keep will attend to keep-w+1..keep-1: still in the ring? */
        int64_t need = keep - w + 1, oldest = s->pos - s->kv[l].cap;
        if (w && need > 0 && need < oldest)
            return ms_err_set(err, MS_E_ARG,
                              "cannot rewind from %lld to %lld: sliding-window layers keep "
                              "only %d positions of history beyond their window",
                              (long long)s->pos, (long long)keep, MS_REWIND_SLACK);
    }
    s->pos = keep;
    s->have_logits = 0;
    return 0;
}

static int check_ids(const ms_session *s, const int32_t *ids, int64_t n, ms_err *err)
{
    int64_t vocab = s->eng->model->vocab;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return ms_err_set(err, MS_E_ARG, "token %lld of the input is id %d, outside the "
                              "vocabulary [0, %lld)", (long long)i, ids[i], (long long)vocab);
    if (s->pos + n > s->ctx)
        return ms_err_set(err, MS_E_CONTEXT_FULL,
                          "CONTEXT_FULL: %lld positions in use + %lld new tokens exceed the "
                          "context of %lld tokens (raise --ctx)", (long long)s->pos,
                          (long long)n, (long long)s->ctx);
    return 0;
}

/* The residual stream is checked at every layer; the last norm and the
 * lm_head can still make a logit NaN or Inf (a damaged weight), which must
 * stop the call rather than reach a sampler or a caller. */
static int check_logits(const float *logits, int64_t rows, int64_t vocab, int batched,
                        ms_err *err)
{
    for (int64_t r = 0; r < rows; r++)
        if (!ms_all_finite(logits + r * vocab, vocab)) {
            if (batched)
                return ms_err_set(err, MS_E_FORMAT, "the logits of row %lld of the batched "
                                  "step are not finite (NaN or Inf): the checkpoint's final "
                                  "norm or lm_head weights give them", (long long)r);
            return ms_err_set(err, MS_E_FORMAT, "the logits are not finite (NaN or Inf): "
                              "the checkpoint's final norm or lm_head weights give them");
        }
    return 0;
}

/* Prefill progress: positions through the layers, reported after every
 * layer of a call (a layer-major family runs the whole call layer by layer)
 * or after every call. */
typedef struct prefill_progress {
    const ms_engine *eng;
    int64_t off, nb, n;       /* this call's positions [off, off + nb) of n */
    double t0;
} prefill_progress;

static void report_layer(void *ctx, int done, int n_layers)
{
    prefill_progress *p = ctx;
    int64_t at = p->off + p->nb * done / n_layers;
    if (at < p->n) /* the last report comes once the call is done */
        p->eng->progress(p->eng->progress_user,
                         &(ms_progress){"prefill", at, p->n, ms_now() - p->t0});
}

void ms_session_set_cancel(ms_session *s, const volatile int *flag)
{
    s->cancel = flag;
}

/* A span of nb positions from s->pos stopped part way: some layers stored
 * its keys and values, the session's position did not move. A
 * sliding-window layer's ring of cap slots lost position q to q + cap
 * where q + cap < pos + nb; the oldest position the next row needs is
 * max(0, pos - window + 1). Where that was lost, the session starts over. */
static void span_stopped(ms_session *s, int64_t nb)
{
    const ms_model *m = s->eng->model;
    for (int l = 0; l < m->n_layers && s->pos > 0; l++) {
        int64_t w = m->kv_window[l], need = s->pos - w + 1 > 0 ? s->pos - w + 1 : 0;
        if (w && need + s->kv[l].cap < s->pos + nb) {
            s->pos = 0;
            break;
        }
    }
    s->have_logits = 0;
}

int ms_session_eval(ms_session *s, const int32_t *ids, int64_t n, float *logits,
                    ms_error *err)
{
    if (n <= 0)
        return ms_err_set(err, MS_E_ARG, "nothing to evaluate (0 tokens)");
    if (check_ids(s, ids, n, err))
        return -1;
    ms_model *m = s->eng->model;
    double t0 = ms_now();
    prefill_progress pp = {.eng = s->eng, .n = n, .t0 = t0};
    int report = s->eng->progress && n > 1;
    for (int64_t off = 0; off < n; off += m->max_span) {
        int64_t nb = n - off < m->max_span ? n - off : m->max_span;
        int last = off + nb == n;
        pp.off = off;
        pp.nb = nb;
        ms_fwd f = {
            .ids = ids + off, .n = nb, .pos0 = s->pos, .kv = s->kv, .scratch = &s->scratch,
            .trace = s->trace, .timers = &s->timers,
            .logits = logits ? logits + off * m->vocab : last ? s->logits : NULL,
            .logits_all = logits != NULL,
            .on_layer = report ? report_layer : NULL, .on_layer_ctx = &pp,
            .cancel = s->eng->link.send ? NULL : s->cancel,
        };
        if (ms_stage_forward(s->eng, &f, &s, err)) {
            if (err && err->code == MS_E_CANCELLED)
                span_stopped(s, nb);
            return -1;
        }
        if (check_logits(f.logits, f.logits_all ? nb : f.logits ? 1 : 0, m->vocab, 0, err))
            return -1;
        memcpy(s->hist + s->pos, ids + off, sizeof *ids * (size_t)nb);
        s->pos += nb;
        if (report)
            s->eng->progress(s->eng->progress_user,
                             &(ms_progress){"prefill", off + nb, n, ms_now() - t0});
    }
    if (logits)
        memcpy(s->logits, logits + (n - 1) * m->vocab, (size_t)m->vocab * 4);
    s->have_logits = 1;
    double dt = ms_now() - t0;
    if (n > 1) {
        s->stats.n_prefill_tokens += n;
        s->stats.t_prefill += dt;
    } else {
        s->stats.n_decode_tokens += n;
        s->stats.t_decode += dt;
    }
    return 0;
}

void ms_session_count_rows(ms_session *const *ss, const int *seq, int64_t n, double dt)
{
    for (int64_t t = 0; t < n; t++) {
        ms_stats *st = &ss[seq[t]]->stats;
        int alone = (t == 0 || seq[t - 1] != seq[t]) && (t == n - 1 || seq[t + 1] != seq[t]);
        *(alone ? &st->n_decode_tokens : &st->n_prefill_tokens) += 1;
        *(alone ? &st->t_decode : &st->t_prefill) += dt / (double)n;
    }
}

/* One forward call over rows [0, n) of sessions ss: row t is the next
 * position of session seq[t] (a session's rows consecutive and in order);
 * logits for the rows in last[0..n_last) (each the final row of its
 * session's tokens: all rows, or some), which go to that session. A
 * session's rows count as prefill, or as decode where it has one. */
static int eval_pass(ms_session *const *ss, int n_seq, const int32_t *ids, const int *seq,
                     int64_t n, const int64_t *last, int64_t n_last, ms_err *err)
{
    ms_model *m = ss[0]->eng->model;
    int64_t *pos = ms_malloc(sizeof *pos * (size_t)n, "pass rows", err);
    ms_kv **kvs = ms_malloc(sizeof *kvs * (size_t)n_seq, "pass rows", err);
    float *logits = n_last ? ms_malloc(sizeof *logits * (size_t)(n_last * m->vocab),
                                       "pass logits", err)
                           : NULL;
    int rc = -1;
    if (pos && kvs && (logits || !n_last)) {
        for (int i = 0; i < n_seq; i++)
            kvs[i] = ss[i]->kv;
        for (int64_t t = 0, k = 0; t < n; t++)
            k = t > 0 && seq[t] == seq[t - 1] ? k + 1 : 0, pos[t] = ss[seq[t]]->pos + k;
        double t0 = ms_now();
        /* every row's logits (a decode step; the pipeline's head makes them
         * too) or those of head_rows */
        int all = n_last == n;
        ms_fwd f = {.ids = ids, .n = n, .n_seq = n_seq, .seq = seq, .pos = pos, .kvs = kvs,
                    .pos0 = pos[0], .kv = kvs[seq[0]], .scratch = &ss[0]->scratch,
                    .trace = ss[0]->trace, .timers = &ss[0]->timers, .logits = logits,
                    .logits_all = all, .head_rows = all ? NULL : last,
                    .n_head = all ? 0 : n_last};
        rc = ms_stage_forward(ss[0]->eng, &f, ss, err) ||
                     check_logits(logits, n_last, m->vocab, n_seq > 1, err)
                 ? -1
                 : 0;
        if (rc == 0)
            ms_session_count_rows(ss, seq, n, ms_now() - t0);
        for (int i = 0; rc == 0 && i < n_seq; i++)
            ss[i]->have_logits = 0; /* until its last token: in this pass or a later one */
        for (int64_t t = 0, i = 0; rc == 0 && t < n; t++) {
            ms_session *s = ss[seq[t]];
            s->hist[s->pos++] = ids[t];
            if (i < n_last && last[i] == t) {
                memcpy(s->logits, logits + i * m->vocab, (size_t)m->vocab * 4);
                s->have_logits = 1;
                i++;
            }
        }
    }
    free(pos);
    free(kvs);
    free(logits);
    return rc;
}

int ms_session_eval_batch(ms_session *const *ss, const int32_t *ids, int n, ms_error *err)
{
    if (n <= 0)
        return ms_err_set(err, MS_E_ARG, "nothing to evaluate (0 sessions)");
    const ms_engine *eng = ss[0]->eng;
    ms_model *m = eng->model;
    if (n > m->max_batch)
        return ms_err_set(err, MS_E_ARG, "%d sessions in one step, at most %d", n,
                          m->max_batch);
    for (int i = 0; i < n; i++) {
        if (ss[i]->eng != eng)
            return ms_err_set(err, MS_E_ARG, "a batched step needs sessions of one engine");
        for (int k = 0; k < i; k++)
            if (ss[k] == ss[i])
                return ms_err_set(err, MS_E_ARG, "session %d appears twice in one step", i);
        if (check_ids(ss[i], ids + i, 1, err))
            return ms_err_wrap(err, "session %d", i);
    }
    int *seq = ms_malloc(sizeof *seq * (size_t)n, "batch rows", err);
    int64_t *rows = ms_malloc(sizeof *rows * (size_t)n, "batch rows", err);
    int rc = -1;
    if (seq && rows) {
        for (int i = 0; i < n; i++)
            seq[i] = i, rows[i] = i;
        rc = eval_pass(ss, n, ids, seq, n, rows, n, err);
    }
    free(seq);
    free(rows);
    return rc;
}

int ms_session_eval_many(ms_session *const *ss, const int32_t *const *ids,
                         const int64_t *counts, int n, ms_error *err)
{
    if (n <= 0)
        return ms_err_set(err, MS_E_ARG, "nothing to evaluate (0 sessions)");
    ms_engine *eng = ss[0]->eng;
    for (int i = 0; i < n; i++) {
        if (ss[i]->eng != eng)
            return ms_err_set(err, MS_E_ARG, "sessions evaluated together need one engine");
        if (counts[i] < 1)
            return ms_err_set(err, MS_E_ARG, "session %d: %lld tokens (at least 1)", i,
                              (long long)counts[i]);
        for (int k = 0; k < i; k++)
            if (ss[k] == ss[i])
                return ms_err_set(err, MS_E_ARG, "session %d appears twice", i);
        if (check_ids(ss[i], ids[i], counts[i], err))
            return ms_err_wrap(err, "session %d", i);
    }
    if (n == 1) /* one prompt goes in spans, not in passes of several */
        return ms_session_eval(ss[0], ids[0], counts[0], NULL, err);
    /* passes of at most cap rows, the sessions' tokens in order: a session
     * may end one pass and begin the next */
    int64_t cap = eng->info.pass_rows;
    int32_t *rid = ms_malloc(sizeof *rid * (size_t)cap, "pass rows", err);
    int *seq = ms_malloc(sizeof *seq * (size_t)cap, "pass rows", err);
    int64_t *last = ms_malloc(sizeof *last * (size_t)cap, "pass rows", err);
    ms_session **pss = ms_malloc(sizeof *pss * (size_t)n, "pass rows", err);
    int rc = rid && seq && last && pss ? 0 : -1;
    int64_t rows = 0, n_last = 0;
    int np = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        for (int64_t k = 0; rc == 0 && k < counts[i]; k++) {
            if (np == 0 || pss[np - 1] != ss[i])
                pss[np++] = ss[i];
            seq[rows] = np - 1;
            rid[rows] = ids[i][k];
            if (k == counts[i] - 1)
                last[n_last++] = rows;
            if (++rows == cap || (i == n - 1 && k == counts[i] - 1)) {
                rc = eval_pass(pss, np, rid, seq, rows, last, n_last, err);
                rows = n_last = 0;
                np = 0;
            }
        }
    free(rid);
    free(seq);
    free(last);
    free(pss);
    return rc;
}

int ms_session_fill_synthetic(ms_session *s, int64_t n, uint64_t seed, ms_error *err)
{
    if (n < 0 || s->pos + n > s->ctx)
        return ms_err_set(err, MS_E_CONTEXT_FULL, "CONTEXT_FULL: %lld positions in use + %lld "
                          "synthetic ones exceed the context of %lld tokens", (long long)s->pos,
                          (long long)n, (long long)s->ctx);
    if (n > 0 && s->eng->link.send)
        return ms_err_set(err, MS_E_UNSUPPORTED, "synthetic context is not available with "
                          "pipeline stages: the other stages' caches would stay empty");
    const ms_model *m = s->eng->model;
    int64_t most = 0;
    for (int l = 0; l < m->n_layers; l++)
        most = m->kv_row[l] > most ? m->kv_row[l] : most;
    float *row = ms_malloc((size_t)most * sizeof *row, "synthetic KV row", err);
    if (!row)
        return -1;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int l = m->layer0; l < m->layer1; l++) {
        ms_kv *kv = &s->kv[l];
        int64_t first = s->pos + n - kv->cap > s->pos ? s->pos + n - kv->cap : s->pos;
        for (int64_t p = first; p < s->pos + n; p++) {
            for (int64_t i = 0; i < kv->row; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
                row[i] = (float)((int64_t)(x >> 40) - (1 << 23)) / (float)(1 << 23);
            }
            ms_kv_write(kv, p, 0, row, kv->row);
        }
    }
    free(row);
    memset(s->hist + s->pos, 0, sizeof *s->hist * (size_t)n);
    s->pos += n;
    s->have_logits = 0;
    return 0;
}

const float *ms_session_logits(const ms_session *s)
{
    return s->have_logits ? s->logits : NULL;
}

void ms_session_stats(const ms_session *s, ms_stats *out)
{
    ms_engine_stats(s->eng, out); /* the expert store's counters are the engine's */
    out->n_prefill_tokens = s->stats.n_prefill_tokens;
    out->n_decode_tokens = s->stats.n_decode_tokens;
    out->t_prefill = s->stats.t_prefill;
    out->t_decode = s->stats.t_decode;
    out->t_attn = s->timers.attn;
    out->t_experts = s->timers.experts;
    out->t_head = s->timers.head;
    out->t_other = s->timers.other;
    out->t_attn_kv = s->timers.attn_kv;
    out->kv_bytes_read = s->timers.kv_bytes;
    out->attn_flops = s->timers.attn_flops;
    out->t_stages = s->timers.stages;
}

int64_t ms_session_shared(const ms_session *s, const int32_t *ids, int64_t n)
{
    int64_t keep = 0;
    while (keep < s->pos && keep < n - 1 && s->hist[keep] == ids[keep])
        keep++; /* at least one token is evaluated: its logits are the result */
    return keep;
}

int ms_session_reuse(ms_session *s, const int32_t *ids, int64_t n, int64_t *kept, ms_error *err)
{
    if (n <= 0)
        return ms_err_set(err, MS_E_ARG, "nothing to evaluate (0 tokens)");
    if (check_ids(s, ids, 0, err))
        return -1;
    if (n > s->ctx)
        return ms_err_set(err, MS_E_CONTEXT_FULL,
                          "CONTEXT_FULL: a prompt of %lld tokens exceeds the context of %lld "
                          "tokens (raise --ctx)", (long long)n, (long long)s->ctx);
    int64_t keep = ms_session_shared(s, ids, n);
    ms_error e2;
    if (ms_session_truncate(s, keep, &e2)) { /* sliding layers cannot rewind that far */
        keep = 0;
        ms_session_truncate(s, 0, &e2);
    }
    *kept = keep;
    return 0;
}

int ms_session_sync(ms_session *s, const int32_t *ids, int64_t n, int64_t *reused,
                    ms_error *err)
{
    int64_t keep = 0;
    if (ms_session_reuse(s, ids, n, &keep, err))
        return -1;
    if (reused)
        *reused = keep;
    return ms_session_eval(s, ids + keep, n - keep, NULL, err);
}

/* The generation loop shared by run, chat and serve: sample, report, stream
 * text, evaluate; stop on a checkpoint stop id, a length, a full context or
 * a cancel request. With a grammar, ids whose bytes it does not take are
 * masked before sampling, and stop ids are allowed only once the grammar
 * has read a whole document. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/engine.h"
#include "runtime/grammar.h"

static int is_stop(const ms_model_info *info, int32_t id)
{
    for (int i = 0; i < info->n_stop; i++)
        if (info->stop_ids[i] == id)
            return 1;
    return 0;
}

static void text_out(const ms_gen_opts *o, const char *t, size_t n)
{
    if (!n || !o->on_text)
        return;
    if (o->parser)
        ms_chat_parser_feed(o->parser, t, n, o->on_text, o->ctx);
    else
        o->on_text(o->ctx, MS_CHAT_ANSWER, t, n);
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The logits with every id the grammar does not allow at -inf (in out). */
static int masked(const ms_gen_opts *o, const ms_model_info *info, ms_gstate *g,
                  uint8_t *allow, float *out, const float *logits, ms_error *err)
{
    int64_t t0 = o->mask_ns ? now_ns() : 0;
    int32_t n = info->vocab_size;
    if (ms_gstate_more(g)) {
        if (ms_gstate_mask(g, o->vocab, allow, err))
            return -1;
    } else {
        memset(allow, 0, (size_t)n);
    }
    if (ms_gstate_complete(g))
        for (int i = 0; i < info->n_stop; i++)
            if (info->stop_ids[i] >= 0 && info->stop_ids[i] < n)
                allow[info->stop_ids[i]] = 1;
    int any = 0;
    for (int32_t i = 0; i < n; i++) {
        int ok = i < ms_vocab_index_n(o->vocab) ? allow[i] : 0;
        out[i] = ok ? logits[i] : -INFINITY;
        any |= ok;
    }
    if (o->mask_ns)
        *o->mask_ns += now_ns() - t0;
    if (!any)
        return ms_err_set(err, MS_E_ARG, "constrained decoding: no token can continue the "
                          "output under the grammar");
    return 0;
}

struct ms_gen {
    ms_session *s;
    ms_gen_opts o;
    const ms_model_info *info;
    ms_detok *dt;
    ms_gstate *gs;
    uint8_t *allow;
    float *lg;
    int64_t i;
    int done;
    ms_gen_result r;
};

void ms_gen_close(ms_gen *g, ms_gen_result *r)
{
    if (!g)
        return;
    if (g->dt) {
        const char *t;
        size_t n;
        ms_detok_flush(g->dt, &t, &n);
        text_out(&g->o, t, n);
        ms_detok_close(g->dt);
    }
    if (r)
        *r = g->r;
    ms_gstate_free(g->gs);
    free(g->allow);
    free(g->lg);
    free(g);
}

int ms_gen_open(ms_session *s, const ms_gen_opts *o, ms_gen **out, ms_error *err)
{
    *out = NULL;
    if (!ms_session_logits(s))
        return ms_err_set(err, MS_E_ARG, "generate: the session has no logits (evaluate a "
                          "prompt first)");
    if (o->grammar && !o->vocab)
        return ms_err_set(err, MS_E_ARG, "generate: a grammar needs the vocabulary index");
    ms_gen *g = calloc(1, sizeof *g);
    if (!g)
        return ms_err_set(err, MS_E_NOMEM, "out of memory for a generation");
    g->s = s;
    g->o = *o;
    g->info = ms_engine_info(ms_session_engine(s));
    g->r.stop = MS_STOP_LENGTH;
    if (o->grammar) {
        int32_t na = ms_vocab_index_n(o->vocab), nv = g->info->vocab_size;
        g->allow = calloc((size_t)(na > nv ? na : nv) + 1, 1);
        g->lg = malloc(sizeof *g->lg * (size_t)nv);
        if (!g->allow || !g->lg) {
            ms_gen_close(g, NULL);
            return ms_err_set(err, MS_E_NOMEM, "out of memory for token masks");
        }
        if (ms_gstate_new(o->grammar, &g->gs, err)) {
            ms_gen_close(g, NULL);
            return -1;
        }
    }
    if (o->tok && ms_detok_open(o->tok, &g->dt, err)) {
        ms_gen_close(g, NULL);
        return -1;
    }
    g->done = o->max_tokens <= 0;
    *out = g;
    return 0;
}

void ms_gen_end(ms_gen *g, int stop)
{
    g->done = 1;
    g->r.stop = stop;
}

int ms_gen_next(ms_gen *g, int32_t *next, ms_error *err)
{
    const ms_gen_opts *o = &g->o;
    if (g->done)
        return 1;
    if (o->cancel && *o->cancel) {
        ms_gen_end(g, MS_STOP_CANCEL);
        return 1;
    }
    const float *logits = ms_session_logits(g->s);
    if (g->gs) {
        if (masked(o, g->info, g->gs, g->allow, g->lg, logits, err))
            return -1;
        logits = g->lg;
    }
    int32_t id = ms_sampler_next(o->sampler, logits);
    if (g->gs && !is_stop(g->info, id) && !ms_vocab_index_feed(o->vocab, g->gs, id))
        return ms_err_set(err, MS_E_ARG, "constrained decoding: the sampler chose id %d, which "
                          "the grammar does not take", (int)id);
    ms_sampler_accept(o->sampler, &id, 1);
    g->r.n_tokens++;
    if (o->on_id)
        o->on_id(o->ctx, id);
    if (!o->ignore_eos && is_stop(g->info, id)) {
        ms_gen_end(g, MS_STOP_EOS);
        return 1;
    }
    if (g->dt) {
        const char *t;
        size_t n;
        if (ms_detok_push(g->dt, id, &t, &n, err))
            return -1;
        text_out(o, t, n);
    }
    if (++g->i == o->max_tokens) {
        ms_gen_end(g, MS_STOP_LENGTH);
        return 1;
    }
    *next = id;
    return 0;
}

int ms_generate(ms_session *s, const ms_gen_opts *o, ms_gen_result *r, ms_error *err)
{
    memset(r, 0, sizeof *r);
    r->stop = MS_STOP_LENGTH;
    ms_gen *g = NULL;
    if (ms_gen_open(s, o, &g, err))
        return -1;
    int rc;
    int32_t id;
    while ((rc = ms_gen_next(g, &id, err)) == 0) {
        if (ms_session_eval(s, &id, 1, NULL, err)) {
            if (err->code != MS_E_CONTEXT_FULL) {
                rc = -1;
                break;
            }
            ms_gen_end(g, MS_STOP_CONTEXT);
        }
    }
    ms_gen_close(g, r);
    return rc < 0 ? -1 : 0;
}

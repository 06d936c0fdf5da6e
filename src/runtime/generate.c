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

int ms_generate(ms_session *s, const ms_gen_opts *o, ms_gen_result *r, ms_error *err)
{
    const ms_model_info *info = ms_engine_info(ms_session_engine(s));
    ms_detok *dt = NULL;
    ms_gstate *gs = NULL;
    uint8_t *allow = NULL;
    float *lg = NULL;
    memset(r, 0, sizeof *r);
    r->stop = MS_STOP_LENGTH;
    if (!ms_session_logits(s))
        return ms_err_set(err, MS_E_ARG, "generate: the session has no logits (evaluate a "
                          "prompt first)");
    if (o->grammar) {
        if (!o->vocab)
            return ms_err_set(err, MS_E_ARG, "generate: a grammar needs the vocabulary index");
        int32_t na = ms_vocab_index_n(o->vocab);
        allow = calloc((size_t)(na > info->vocab_size ? na : info->vocab_size) + 1, 1);
        lg = malloc(sizeof *lg * (size_t)info->vocab_size);
        if (!allow || !lg) {
            free(allow);
            free(lg);
            return ms_err_set(err, MS_E_NOMEM, "out of memory for token masks");
        }
        if (ms_gstate_new(o->grammar, &gs, err)) {
            free(allow);
            free(lg);
            return -1;
        }
    }
    if (o->tok && ms_detok_open(o->tok, &dt, err)) {
        ms_gstate_free(gs);
        free(allow);
        free(lg);
        return -1;
    }
    int rc = 0;
    for (int64_t i = 0; i < o->max_tokens; i++) {
        if (o->cancel && *o->cancel) {
            r->stop = MS_STOP_CANCEL;
            break;
        }
        const float *logits = ms_session_logits(s);
        if (gs) {
            if ((rc = masked(o, info, gs, allow, lg, logits, err)))
                break;
            logits = lg;
        }
        int32_t id = ms_sampler_next(o->sampler, logits);
        if (gs && !is_stop(info, id) && !ms_vocab_index_feed(o->vocab, gs, id)) {
            rc = ms_err_set(err, MS_E_ARG, "constrained decoding: the sampler chose id %d, "
                            "which the grammar does not take", (int)id);
            break;
        }
        ms_sampler_accept(o->sampler, &id, 1);
        r->n_tokens++;
        if (o->on_id)
            o->on_id(o->ctx, id);
        if (!o->ignore_eos && is_stop(info, id)) {
            r->stop = MS_STOP_EOS;
            break;
        }
        if (dt) {
            const char *t;
            size_t n;
            if ((rc = ms_detok_push(dt, id, &t, &n, err)))
                break;
            text_out(o, t, n);
        }
        if (i + 1 == o->max_tokens)
            break;
        if (ms_session_eval(s, &id, 1, NULL, err)) {
            if (err->code != MS_E_CONTEXT_FULL) {
                rc = -1;
                break;
            }
            r->stop = MS_STOP_CONTEXT;
            break;
        }
    }
    if (dt) {
        const char *t;
        size_t n;
        ms_detok_flush(dt, &t, &n);
        text_out(o, t, n);
        ms_detok_close(dt);
    }
    ms_gstate_free(gs);
    free(allow);
    free(lg);
    return rc;
}

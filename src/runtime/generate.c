/* The generation loop shared by run, chat and serve: sample, report, stream
 * text, evaluate; stop on a checkpoint stop id, a length, a full context or
 * a cancel request. */
#include <string.h>

#include "runtime/engine.h"

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

int ms_generate(ms_session *s, const ms_gen_opts *o, ms_gen_result *r, ms_error *err)
{
    const ms_model_info *info = ms_engine_info(ms_session_engine(s));
    ms_detok *dt = NULL;
    memset(r, 0, sizeof *r);
    r->stop = MS_STOP_LENGTH;
    if (!ms_session_logits(s))
        return ms_err_set(err, MS_E_ARG, "generate: the session has no logits (evaluate a "
                          "prompt first)");
    if (o->tok && ms_detok_open(o->tok, &dt, err))
        return -1;
    int rc = 0;
    for (int64_t i = 0; i < o->max_tokens; i++) {
        if (o->cancel && *o->cancel) {
            r->stop = MS_STOP_CANCEL;
            break;
        }
        int32_t id = ms_sampler_next(o->sampler, ms_session_logits(s));
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
    return rc;
}

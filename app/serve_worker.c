/* moestream serve: the worker. It owns the slots (one session each), runs
 * every queued job through them (serve.h's jobs) and writes the OpenAI
 * responses: streamed chunks (content, reasoning, tool-call deltas,
 * logprobs) or whole completions, or, for an API of typed parts (OpenAI's
 * Responses, Anthropic's Messages, Ollama's), what its srv_out_api makes of
 * the same text and calls. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "serve.h"

/* ---- generation (the worker) ---------------------------------------------------------- */

typedef struct gen {
    srv *sv;
    srv_job *j;
    ms_session *s;             /* the slot's */
    int chat, stream;          /* chat: a chat template's answer (every API but completions) */
    srv_out out;               /* out.api set: an API of typed parts writes the answer */
    cli_buf content, reasoning, pending;
    int32_t *ids;
    int64_t n_ids, cap_ids;
    int stop_hit;
    const char *stop_seq;      /* the stop sequence that ended it */
    /* tools offered: the raw text is parsed (partially while streaming) */
    int tools, format;
    cli_buf raw;
    size_t sent_content, sent_reasoning;
    /* logprobs: entries of tokens not yet sent (stream) or all (not stream) */
    json_t *lp_pending;
    int64_t text_offset;
} gen;

static void emit_json(gen *g, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return;
    srv_job_emit(g->j, "data: ", 6);
    srv_job_emit(g->j, s, strlen(s));
    srv_job_emit(g->j, "\n\n", 2);
    free(s);
}

/* One streaming chunk: a delta (chat) or a text (completions). */
static json_t *chunk(gen *g, json_t *delta_or_text, const char *finish)
{
    srv_job *j = g->j;
    json_t *fin = finish ? json_string(finish) : json_null();
    json_t *choice = g->chat
        ? json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta_or_text, "logprobs",
                    "finish_reason", fin)
        : json_pack("{s:o, s:i, s:n, s:o}", "text", delta_or_text, "index", 0, "logprobs",
                    "finish_reason", fin);
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object",
                          g->chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)j->created, "model", g->sv->name, "choices", choice);
    if (o && j->req.include_usage)
        json_object_set_new(o, "usage", json_null());
    return o;
}

static void stream_parsed(gen *g, int final, json_t **message);

/* A chunk carrying the logprob entries of the tokens not yet reported. */
static json_t *with_logprobs(gen *g, json_t *c)
{
    if (!g->lp_pending || !c || !json_array_size(g->lp_pending))
        return c;
    json_t *choice = json_array_get(json_object_get(c, "choices"), 0);
    if (g->chat) {
        /* the entries move into the chunk; a fresh list takes the next ones */
        json_object_set_new(choice, "logprobs", json_pack("{s:o, s:n}", "content", g->lp_pending,
                                                          "refusal"));
        g->lp_pending = json_array();
        return c;
    } else {
        /* completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"} */
        json_t *toks = json_array(), *lps = json_array(), *tops = json_array(),
               *offs = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(g->lp_pending, i, e) {
            json_array_append(toks, json_object_get(e, "token"));
            json_array_append(lps, json_object_get(e, "logprob"));
            json_t *t = json_object(), *alt;
            size_t k;
            json_array_foreach(json_object_get(e, "top_logprobs"), k, alt)
                json_object_set(t, json_string_value(json_object_get(alt, "token")),
                                json_object_get(alt, "logprob"));
            json_array_append_new(tops, t);
            json_array_append_new(offs, json_integer(g->text_offset));
            g->text_offset += (json_int_t)json_string_length(json_object_get(e, "token"));
        }
        json_object_set_new(choice, "logprobs",
                            json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs",
                                      lps, "top_logprobs", tops, "text_offset", offs));
    }
    json_array_clear(g->lp_pending);
    return c;
}

/* {"token", "logprob", "bytes"} of one id under log-softmax(logits). */
static json_t *lp_entry(const ms_tokenizer *tok, int32_t id, double lp)
{
    char *text = NULL;
    size_t len = 0;
    ms_error err = {0};
    if (ms_tokenizer_decode(tok, &id, 1, &text, &len, &err))
        len = 0;
    json_t *bytes = json_array();
    for (size_t i = 0; i < len; i++)
        json_array_append_new(bytes, json_integer((unsigned char)text[i]));
    json_t *e = json_pack("{s:o, s:f, s:o}", "token", srv_json_text(text ? text : "", len),
                          "logprob", lp, "bytes", bytes);
    free(text);
    return e;
}

/* The logprob of the sampled id and the top alternatives, from the logits
 * it was sampled from (the model's, before temperature and penalties). */
static void add_logprobs(gen *g, int32_t id)
{
    const float *l = ms_session_logits(g->s);
    int32_t n = g->sv->info->vocab_size, lim = ms_tokenizer_n_ids(g->sv->tok);
    if (lim < n)
        n = lim;
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < n; i++)
        if (l[i] > mx)
            mx = l[i];
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)l[i] - mx);
    double lse = mx + log(sum);
    json_t *e = lp_entry(g->sv->tok, id, id < n ? (double)l[id] - lse : -INFINITY);
    json_t *top = json_array();
    int k = g->j->req.top_logprobs;
    int32_t best[20];
    for (int t = 0; t < k && t < n; t++) {
        int32_t b = -1;
        for (int32_t i = 0; i < n; i++) {
            int taken = 0;
            for (int u = 0; u < t && !taken; u++)
                taken = best[u] == i;
            if (!taken && (b < 0 || l[i] > l[b]))
                b = i;
        }
        best[t] = b;
        json_array_append_new(top, lp_entry(g->sv->tok, b, (double)l[b] - lse));
    }
    json_object_set_new(e, "top_logprobs", top);
    json_array_append_new(g->lp_pending, e);
}

static void out_text(gen *g, int chan, const char *s, size_t n)
{
    if (!n)
        return;
    if (g->tools) {
        cli_buf_add(&g->raw, s, n);
        if (g->stream)
            stream_parsed(g, 0, NULL);
        return;
    }
    if (g->out.api) {
        g->out.api->text(&g->out, chan, s, n);
        return;
    }
    if (!g->stream) {
        cli_buf_add(chan == MS_CHAT_REASONING ? &g->reasoning : &g->content, s, n);
        return;
    }
    json_t *t = srv_json_text(s, n);
    if (g->chat)
        t = json_pack("{s:o}", chan == MS_CHAT_REASONING ? "reasoning_content" : "content", t);
    emit_json(g, with_logprobs(g, chunk(g, t, NULL)));
}

/* The response parsed for its tool calls: while streaming (final 0), the
 * content and reasoning grown since the last call are sent; at the end
 * (final 1) the rest, then each call, and *message gets the whole message
 * (when not streaming). Calls get ids unique to this request. */
static void stream_parsed(gen *g, int final, json_t **message)
{
    char *js = NULL, *note = NULL;
    ms_error err = {0};
    int flags = (g->j->opens_reasoning ? MS_PARSE_OPENS_REASONING : 0) |
                (final ? 0 : MS_PARSE_PARTIAL);
    if (ms_chat_parse(g->format, g->raw.p ? g->raw.p : "", g->raw.n, g->j->req.tools_json,
                      flags, &js, &note, &err))
        return;
    json_t *m = json_loads(js, 0, NULL);
    free(js);
    if (note && final)
        fprintf(stderr, "serve: %s: %s\n", g->j->id, note);
    free(note);
    if (!m)
        return;
    json_t *calls = json_object_get(m, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        char id[96];
        const char *hex = strpbrk(g->j->id, "-_");
        snprintf(id, sizeof id, "call_%.48s%zu", hex ? hex + 1 : g->j->id, i);
        json_object_set_new(c, "id", json_string(id));
    }
    if (!g->stream && !g->out.api) {
        *message = m;
        return;
    }
    static const char *const keys[2] = {"reasoning_content", "content"};
    size_t *sent[2] = {&g->sent_reasoning, &g->sent_content};
    for (int k = 0; k < 2; k++) {
        const char *v = json_string_value(json_object_get(m, keys[k]));
        size_t n = v ? strlen(v) : 0;
        if (n <= *sent[k])
            continue;
        if (g->out.api)
            g->out.api->text(&g->out, k ? MS_CHAT_ANSWER : MS_CHAT_REASONING, v + *sent[k],
                             n - *sent[k]);
        else
            emit_json(g, with_logprobs(g, chunk(g, json_pack("{s:o}", keys[k],
                                                             srv_json_text(v + *sent[k],
                                                                           n - *sent[k])),
                                                NULL)));
        *sent[k] = n;
    }
    if (final && g->out.api)
        g->out.api->calls(&g->out, calls);
    else if (final)
        json_array_foreach(calls, i, c) {
            json_object_set_new(c, "index", json_integer((json_int_t)i));
            json_t *d = json_pack("{s:[O]}", "tool_calls", c);
            emit_json(g, chunk(g, d, NULL));
        }
    if (final && message)
        *message = m;
    else
        json_decref(m);
}

/* Answer text through the stop sequences: emits what can no longer be the
 * start of one, holds back a possible partial match, and ends the
 * generation at the first full match (which is not emitted). */
static void on_text(void *ctx, int chan, const char *s, size_t n)
{
    gen *g = ctx;
    const srv_request *r = &g->j->req;
    if (g->stop_hit)
        return;
    if (chan == MS_CHAT_REASONING || r->n_stop == 0) {
        out_text(g, chan, s, n);
        return;
    }
    cli_buf_add(&g->pending, s, n);
    const char *p = g->pending.p;
    size_t len = g->pending.n, cut = len, hold = 0;
    for (int i = 0; i < r->n_stop; i++) {
        const char *m = memmem(p, len, r->stop[i], strlen(r->stop[i]));
        if (m && (size_t)(m - p) < cut) {
            cut = (size_t)(m - p);
            g->stop_seq = r->stop[i];
        }
    }
    if (cut < len) {
        out_text(g, MS_CHAT_ANSWER, p, cut);
        g->pending.n = 0;
        g->stop_hit = 1;
        __atomic_store_n(&g->j->halt, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int i = 0; i < r->n_stop; i++) {
        size_t sl = strlen(r->stop[i]);
        for (size_t k = sl - 1 < len ? sl - 1 : len; k > hold; k--)
            if (!memcmp(p + len - k, r->stop[i], k)) {
                hold = k;
                break;
            }
    }
    out_text(g, MS_CHAT_ANSWER, p, len - hold);
    memmove(g->pending.p, p + len - hold, hold);
    g->pending.n = hold;
}

static void on_id(void *ctx, int32_t id)
{
    gen *g = ctx;
    if (g->out.api && !g->out.t_first)
        g->out.t_first = cli_now();
    if (g->lp_pending)
        add_logprobs(g, id);
    if (g->n_ids == g->cap_ids) {
        int64_t cap = g->cap_ids ? 2 * g->cap_ids : 64;
        int32_t *p = realloc(g->ids, sizeof *p * (size_t)cap);
        if (!p)
            return;
        g->ids = p;
        g->cap_ids = cap;
    }
    g->ids[g->n_ids++] = id;
}

static json_t *ids_json(const gen *g, int64_t reused)
{
    json_t *a = json_array();
    for (int64_t i = 0; i < g->n_ids; i++)
        json_array_append_new(a, json_integer(g->ids[i]));
    return json_pack("{s:o, s:I}", "ids", a, "reused", (json_int_t)reused);
}

static json_t *usage_json(const srv_job *j, int64_t n_gen, int64_t reused)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)j->n_ids,
                     "completion_tokens", (json_int_t)n_gen, "total_tokens",
                     (json_int_t)(j->n_ids + n_gen), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)reused);
}

static void fail_job(gen *g, int status, const char *type, const char *code, const char *msg)
{
    srv_err e;
    srv_fail(&e, status, type, NULL, code, "%s", msg);
    char *body = srv_error_json(&e);
    if (g->out.api && g->stream && body) {
        g->out.api->fail(&g->out, body);
        free(body);
        body = NULL;
    } else if (g->stream && body) {
        srv_job_emit(g->j, "data: ", 6);
        srv_job_emit(g->j, body, strlen(body));
        srv_job_emit(g->j, "\n\ndata: [DONE]\n\n", 16);
        free(body);
        body = NULL;
    }
    srv_job_finish(g->j, status, body);
}

/* ---- slots: the jobs being served, decoded together -------------------------------
 *
 * Each slot has its own session (KV cache), sampler and parsers. Between
 * steps the worker admits queued jobs into free slots (the slot whose cache
 * shares the longest prefix with the prompt), samples one token for every
 * decoding slot, and evaluates those tokens together with the next chunk
 * of the prompts still being read: one pass over the weights for all. A
 * row never depends on the others, so each answer is bit-identical to
 * serving it alone. */

#define PREFILL_MIN 16 /* beside decoding slots: the fewest prompt rows a pass takes */

typedef struct slot {
    ms_session *s;
    srv_job *j;                /* NULL: free */
    gen g;
    ms_sampler *smp;
    ms_chat_parser *parser;
    ms_grammar *gram;
    ms_gen_opts go;
    ms_gen *gen;               /* NULL while the prompt is being read */
    int64_t reused, fed;       /* prompt positions kept from the cache / in it now */
    int32_t next;              /* the id the coming step evaluates */
    volatile int halt;         /* the generation's cancel flag: the job's, or the timeout */
    int timed_out;
} slot;

static void slot_free(slot *sl)
{
    json_decref(sl->g.lp_pending);
    srv_out_free(&sl->g.out);
    free(sl->g.raw.p);
    free(sl->g.content.p);
    free(sl->g.reasoning.p);
    free(sl->g.pending.p);
    free(sl->g.ids);
    ms_chat_parser_close(sl->parser);
    ms_sampler_close(sl->smp);
    ms_grammar_free(sl->gram);
    ms_session *s = sl->s;
    memset(sl, 0, sizeof *sl);
    sl->s = s;
}

/* A Responses API answer kept (for previous_response_id, GET): the
 * conversation it ends and the response object. */
static void keep_response(srv_out *o, void *ctx)
{
    gen *g = ctx;
    json_t *conv = json_loads(g->j->conversation ? g->j->conversation : "[]", 0, NULL);
    if (!json_is_array(conv)) {
        json_decref(conv);
        return;
    }
    json_array_append_new(conv, srv_responses_answer(o));
    char *c = json_dumps(conv, JSON_COMPACT), *r = json_dumps(o->final, JSON_COMPACT);
    json_decref(conv);
    if (c && r) {
        srv_store_put(&g->sv->store, g->j->id, c, r);
    } else {
        free(c);
        free(r);
    }
}

/* Sets the job up in the slot; 0 when its prompt is to be read, -1 when it
 * ended here (refused: the response is sent, the slot left free). */
static int slot_start(srv *sv, slot *sl, srv_job *j)
{
    ms_error err = {0};
    sl->j = j;
    int chat = j->req.kind != SRV_COMPLETION;
    sl->g = (gen){.sv = sv, .j = j, .s = sl->s, .chat = chat, .stream = j->req.stream,
                  .tools = chat && j->req.tools_json != NULL,
                  .format = ms_engine_tool_format(sv->eng),
                  .lp_pending = j->req.logprobs ? json_array() : NULL};
    gen *g = &sl->g;
    const srv_out_api *api = j->req.kind == SRV_RESPONSES ? &srv_responses_api
                           : j->req.kind == SRV_MESSAGES ? &srv_messages_api
                           : j->req.kind == SRV_OLLAMA_CHAT || j->req.kind == SRV_OLLAMA_GENERATE
                               ? &srv_ollama_api : NULL;
    if (api) {
        srv_out_init(&g->out, api, sv, j, g->stream);
        if (j->req.kind == SRV_RESPONSES && j->req.store) {
            g->out.on_final = keep_response;
            g->out.ctx = g;
        }
    }
    if (sv->no_reuse)
        ms_session_truncate(sl->s, 0, &err);
    if (ms_session_reuse(sl->s, j->ids, j->n_ids, &sl->reused, &err)) {
        fail_job(g, err.code == MS_E_CONTEXT_FULL ? 400 : 500,
                 err.code == MS_E_CONTEXT_FULL ? "invalid_request_error" : "server_error",
                 err.code == MS_E_CONTEXT_FULL ? "context_length_exceeded" : NULL, err.msg);
        slot_free(sl);
        return -1;
    }
    sl->fed = sl->reused;
    ms_sampling sp = sv->sampling;
    const srv_request *r = &j->req;
    if (r->have_temperature) sp.temperature = (float)r->temperature;
    if (r->have_top_p) sp.top_p = r->top_p > 0 ? (float)r->top_p : 1e-9f;
    if (r->have_top_k) sp.top_k = (int32_t)r->top_k;
    if (r->have_presence) sp.presence_penalty = (float)r->presence_penalty;
    if (r->have_frequency) sp.frequency_penalty = (float)r->frequency_penalty;
    if (r->have_min_p) sp.min_p = (float)r->min_p;
    if (r->have_repeat) sp.repetition_penalty = (float)r->repeat_penalty;
    if (r->have_seed)
        sp.seed = r->seed;
    else if (!sv->have_seed) /* no seed anywhere: a different draw each time */
        sp.seed = (uint64_t)(cli_now() * 1e9) ^ ((uint64_t)j->created << 20) ^
                  (uint64_t)(uintptr_t)j;
    if (ms_sampler_open(&sp, sv->info->vocab_size, &sl->smp, &err) ||
        (g->chat && !g->tools &&
         ms_chat_parser_open(sv->info->family, srv_job_thinking(sv, j), &sl->parser, &err))) {
        fail_job(g, 500, "server_error", NULL, err.msg);
        slot_free(sl);
        return -1;
    }
    ms_sampler_limit(sl->smp, ms_tokenizer_n_ids(sv->tok)); /* only ids that have text */
    ms_sampler_accept(sl->smp, j->ids, j->n_ids);
    if (srv_constrain(sv, j, &sl->gram, &err)) {
        fail_job(g, err.code == MS_E_NOMEM ? 500 : 400,
                 err.code == MS_E_NOMEM ? "server_error" : "invalid_request_error",
                 NULL, err.msg);
        slot_free(sl);
        return -1;
    }
    if (g->stream && g->chat && !g->out.api)
        emit_json(g, chunk(g, json_pack("{s:s, s:s}", "role", "assistant", "content", ""),
                           NULL));
    /* max_tokens: the request's, else -n, else OpenAI's 16 for completions and
     * up to the context for chat; never past --max-tokens-cap */
    int64_t room = sv->ctx - j->n_ids;
    int64_t max = r->max_tokens > 0 ? r->max_tokens
                : sv->default_max_tokens > 0 ? sv->default_max_tokens
                : r->kind == SRV_COMPLETION ? 16 : room;
    if (sv->max_tokens_cap > 0 && max > sv->max_tokens_cap)
        max = sv->max_tokens_cap;
    __atomic_add_fetch(&sv->m_prompt_tokens, j->n_ids, __ATOMIC_RELAXED);
    __atomic_add_fetch(&sv->m_cached_tokens, sl->reused, __ATOMIC_RELAXED);
    sl->go = (ms_gen_opts){.max_tokens = max, .ignore_eos = r->ignore_eos || sv->ignore_eos,
                           .cancel = &sl->halt, .sampler = sl->smp, .tok = sv->tok,
                           .parser = sl->parser, .grammar = sl->gram, .vocab = sv->vocab,
                           .on_id = on_id, .on_text = on_text, .ctx = g};
    return 0;
}

/* The response once the generation has ended (err set: it failed). */
static void slot_finish(srv *sv, slot *sl, const ms_error *err)
{
    srv_job *j = sl->j;
    gen *g = &sl->g;
    const srv_request *r = &j->req;
    ms_gen_result gr = {0};
    json_t *message = NULL;
    ms_gen_close(sl->gen, &gr);
    sl->gen = NULL;
    if (err) {
        fail_job(g, 500, "server_error", NULL, err->msg);
        goto out;
    }
    int64_t reused = sl->reused;
    if (!g->stop_hit && g->pending.n) /* a partial stop sequence that never completed */
        out_text(g, MS_CHAT_ANSWER, g->pending.p, g->pending.n);
    if (g->tools)
        stream_parsed(g, 1, &message);
    int called = json_array_size(json_object_get(message, "tool_calls")) > 0;
    const char *finish = called && gr.stop != MS_STOP_LENGTH ? "tool_calls"
                       : g->stop_hit || gr.stop == MS_STOP_EOS ? "stop" : "length";
    int timed_out = gr.stop == MS_STOP_CANCEL && sl->timed_out;
    if (timed_out)
        finish = "length";
    int cancelled = gr.stop == MS_STOP_CANCEL && !g->stop_hit && !timed_out;
    fprintf(stderr, "serve: %s: %lld prompt tokens (%lld reused), %lld generated, %s, "
                "%.3f s\n", j->id, (long long)j->n_ids, (long long)reused,
                (long long)gr.n_tokens, cancelled ? "cancelled" : timed_out ? "timed out" : finish,
                cli_now() - j->t_start);
    __atomic_add_fetch(&sv->m_completion_tokens, gr.n_tokens, __ATOMIC_RELAXED);
    __atomic_add_fetch(cancelled ? &sv->m_cancelled : &sv->m_finished, 1, __ATOMIC_RELAXED);
    if (timed_out)
        __atomic_add_fetch(&sv->m_timeouts, 1, __ATOMIC_RELAXED);
    if (sv->stats)
        cli_print_stats(sl->s);
    if (cancelled) {
        srv_job_finish(j, 499, NULL);
        goto out;
    }
    if (g->out.api) {
        srv_out_end e = {.finish = finish, .stop = g->stop_hit ? g->stop_seq : NULL,
                         .n_prompt = j->n_ids, .cached = reused, .n_gen = gr.n_tokens};
        char *body = g->out.api->end(&g->out, &e);
        if (!g->stream && !body)
            fail_job(g, 500, "server_error", NULL, "out of memory building the response");
        else
            srv_job_finish(j, 200, body);
        goto out;
    }
    if (g->stream) {
        json_t *c = with_logprobs(g, chunk(g, g->chat ? json_object() : json_string(""), finish));
        json_object_set_new(c, "moestream", ids_json(g, reused));
        emit_json(g, c);
        if (r->include_usage) {
            json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object",
                                  g->chat ? "chat.completion.chunk" : "text_completion",
                                  "created", (json_int_t)j->created, "model", sv->name,
                                  "choices", "usage", usage_json(j, gr.n_tokens, reused));
            emit_json(g, u);
        }
        srv_job_emit(j, "data: [DONE]\n\n", 14);
        srv_job_finish(j, 200, NULL);
        goto out;
    }
    json_t *choice;
    if (g->chat) {
        json_t *msg = message ? json_incref(message)
                    : json_pack("{s:s, s:o}", "role", "assistant", "content",
                                srv_json_text(g->content.p ? g->content.p : "",
                                              g->content.n));
        if (!message && g->reasoning.n)
            json_object_set_new(msg, "reasoning_content",
                                srv_json_text(g->reasoning.p, g->reasoning.n));
        choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "message", msg, "logprobs",
                           "finish_reason", finish);
    } else {
        choice = json_pack("{s:o, s:i, s:n, s:s}", "text",
                           srv_json_text(g->content.p ? g->content.p : "", g->content.n),
                           "index", 0,
                           "logprobs", "finish_reason", finish);
    }
    if (g->lp_pending) { /* the whole list, in the choice */
        json_t *wrap = json_pack("{s:[o]}", "choices", choice);
        with_logprobs(g, wrap);
        json_incref(choice);
        json_decref(wrap);
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o, s:o}", "id", j->id, "object",
                          g->chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)j->created, "model", sv->name, "choices", choice, "usage",
                          usage_json(j, gr.n_tokens, reused), "moestream", ids_json(g, reused));
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (body)
        srv_job_finish(j, 200, body);
    else
        fail_job(g, 500, "server_error", NULL, "out of memory building the response");
out:
    json_decref(message);
    slot_free(sl);
}

/* Fails a slot's job on err (the prompt too long for the context: 400). */
static void prefill_failed(slot *sl, const ms_error *err)
{
    fail_job(&sl->g, err->code == MS_E_CONTEXT_FULL ? 400 : 500,
             err->code == MS_E_CONTEXT_FULL ? "invalid_request_error" : "server_error",
             err->code == MS_E_CONTEXT_FULL ? "context_length_exceeded" : NULL, err->msg);
    slot_free(sl);
}

/* The slot's client went away while its prompt was being read: the job
 * ends (499) and the slot is freed. */
static void prompt_cancelled(srv *sv, slot *sl)
{
    srv_job *j = sl->j;
    fprintf(stderr, "serve: %s: cancelled while its prompt was read (%lld of %lld positions), "
            "%.3f s\n", j->id, (long long)ms_session_pos(sl->s), (long long)j->n_ids,
            cli_now() - j->t_start);
    __atomic_add_fetch(&sv->m_cancelled, 1, __ATOMIC_RELAXED);
    srv_job_finish(j, 499, NULL);
    slot_free(sl);
}

/* One call over the weights (ms_session_eval_many: a row's results are
 * those it gets alone): the token each decoding slot in dec[0..n_dec) has
 * sampled, then more of each prompt still being read, reading[0..n_reading).
 * With no slot decoding, each prompt goes a prefill span at a time (the
 * engine reads each expert once per span: under a memory limit, a prompt
 * that fits a span reads its experts from disk once). Beside decoding
 * slots, the prompts take the rows the pass has left (at least
 * PREFILL_MIN), so that a newcomer delays the others' next token by one
 * pass. A slot whose prompt is then in opens its generation; one whose
 * prompt does not fit its context fails alone, before the call. Returns
 * the number of slots it ended, listed in ended[]; *n_read gets the number
 * of prompts read in the call. */
static int slots_pass(srv *sv, slot *slots, const int *dec, int n_dec, const int *reading,
                      int n_reading, int *ended, int *n_read)
{
    ms_session *ss[SRV_MAX_SLOTS];
    const int32_t *ids[SRV_MAX_SLOTS];
    int64_t counts[SRV_MAX_SLOTS];
    int go[SRV_MAX_SLOTS], n_go = 0, n_ended = 0;
    for (int k = 0; k < n_dec; k++) {
        slot *sl = &slots[dec[k]];
        ss[n_go] = sl->s;
        ids[n_go] = &sl->next;
        counts[n_go] = 1;
        go[n_go++] = dec[k];
    }
    int64_t room = ms_engine_info(sv->eng)->prefill_span;
    if (n_dec) {
        room = ms_engine_info(sv->eng)->pass_rows - n_dec;
        room = room > PREFILL_MIN ? room : PREFILL_MIN;
    }
    for (int k = 0; k < n_reading && room > 0; k++) {
        slot *sl = &slots[reading[k]];
        srv_job *j = sl->j;
        int64_t c = j->n_ids - sl->fed < room ? j->n_ids - sl->fed : room;
        if (ms_session_pos(sl->s) + c > ms_session_ctx(sl->s)) {
            ms_error err = {.code = MS_E_CONTEXT_FULL};
            snprintf(err.msg, sizeof err.msg,
                     "CONTEXT_FULL: %lld positions in use + %lld new tokens exceed the "
                     "context of %lld tokens", (long long)ms_session_pos(sl->s), (long long)c,
                     (long long)ms_session_ctx(sl->s));
            prefill_failed(sl, &err);
            ended[n_ended++] = reading[k];
            continue;
        }
        ss[n_go] = sl->s;
        ids[n_go] = j->ids + sl->fed;
        counts[n_go] = c;
        go[n_go++] = reading[k];
        if (n_dec)
            room -= c;
    }
    *n_read = n_go - n_dec;
    ms_error err = {0};
    /* a prompt read alone stops between two layers when its client goes
     * (several sessions' rows in a pass are not stopped for one) */
    int lone = n_go == 1 && n_dec == 0;
    if (lone)
        ms_session_set_cancel(ss[0], &slots[go[0]].j->halt);
    int rc = n_go ? ms_session_eval_many(ss, ids, counts, n_go, &err) : 0;
    if (lone)
        ms_session_set_cancel(ss[0], NULL);
    if (rc && lone && err.code == MS_E_CANCELLED) {
        prompt_cancelled(sv, &slots[go[0]]);
        ended[n_ended++] = go[0];
        return n_ended;
    }
    if (rc) {
        for (int k = 0; k < n_go; k++) { /* not expected: each was checked */
            if (k < n_dec)
                slot_finish(sv, &slots[go[k]], &err);
            else
                prefill_failed(&slots[go[k]], &err);
            ended[n_ended++] = go[k];
        }
        return n_ended;
    }
    for (int k = n_dec; k < n_go; k++) {
        slot *sl = &slots[go[k]];
        sl->fed += counts[k];
        if (sl->fed == sl->j->n_ids && ms_gen_open(sl->s, &sl->go, &sl->gen, &err)) {
            fail_job(&sl->g, 500, "server_error", NULL, err.msg);
            slot_free(sl);
            ended[n_ended++] = go[k];
        }
    }
    return n_ended;
}

/* The free slot whose cache shares the longest prefix with the prompt. */
/* When each session last took a job (for the least recently used). */
static double last_used(const srv *sv, const ms_session *s)
{
    for (int i = 0; i < sv->n_used; i++)
        if (sv->used_s[i] == s)
            return sv->used_t[i];
    return 0;
}

/* The prompt length of the last job a session took (0: none). */
static int64_t last_prompt(const srv *sv, const ms_session *s)
{
    for (int i = 0; i < sv->n_used; i++)
        if (sv->used_s[i] == s)
            return sv->used_p[i];
    return 0;
}

static void mark_used(srv *sv, ms_session *s, int64_t prompt)
{
    int i = 0;
    while (i < sv->n_used && sv->used_s[i] != s)
        i++;
    if (i == sv->n_used && sv->n_used < 2 * SRV_MAX_SLOTS)
        sv->n_used++;
    if (i < 2 * SRV_MAX_SLOTS) {
        sv->used_s[i] = s;
        sv->used_t[i] = cli_now();
        sv->used_p[i] = prompt;
    }
}

/* A free slot for the job and the session it runs on, among the free slots'
 * and the idle prompt caches': the conversation the prompt continues (it
 * holds the whole prompt the session last took; the longest such), else an empty
 * session, else the least recently used one, so that a new conversation
 * does not overwrite one that may come back. A cached session is swapped
 * into the slot, the slot's going to the cache in its place. */
static int pick_slot(srv *sv, slot *slots, const srv_job *j)
{
    ms_session *cand[2 * SRV_MAX_SLOTS];
    int where[2 * SRV_MAX_SLOTS], nc = 0, free_slot = -1;
    for (int i = 0; i < sv->n_slots; i++)
        if (!slots[i].j) {
            if (free_slot < 0)
                free_slot = i;
            cand[nc] = slots[i].s;
            where[nc++] = i;
        }
    for (int c = 0; c < sv->n_cache; c++) {
        cand[nc] = sv->cache_s[c];
        where[nc++] = -1 - c;
    }
    int best = -1;
    int64_t best_n = -1;
    for (int k = 0; k < nc; k++) { /* continues it: the whole prompt it last took is shared */
        int64_t last = last_prompt(sv, cand[k]), n = ms_session_shared(cand[k], j->ids, j->n_ids);
        if (last > 0 && n + 1 >= last && n > best_n) {
            best = k;
            best_n = n;
        }
    }
    int continues = best >= 0;
    for (int k = 0; best < 0 && k < nc; k++)
        if (ms_session_pos(cand[k]) == 0)
            best = k;
    if (best < 0) /* the least recently used */
        for (int k = 0; k < nc; k++)
            if (best < 0 || last_used(sv, cand[k]) < last_used(sv, cand[best]))
                best = k;
    if (best < 0)
        return free_slot;
    int at = where[best];
    if (at < 0) {
        int c = -1 - at;
        ms_session *t = slots[free_slot].s;
        slots[free_slot].s = sv->slot_s[free_slot] = sv->cache_s[c];
        sv->cache_s[c] = t;
        at = free_slot;
    }
    if (!continues && sv->spill.budget) {
        /* the conversation this session held goes to disk; one the prompt
         * continues comes back from it */
        ms_session *s = slots[at].s;
        int64_t n = 0, shared = 0;
        const int32_t *held = ms_session_ids(s, &n);
        srv_spill_save(sv, s, held, n);
        int k = srv_spill_find(sv, j->ids, j->n_ids, &shared);
        if (k >= 0 && shared > ms_session_shared(s, j->ids, j->n_ids))
            srv_spill_take(sv, k, s);
    }
    mark_used(sv, slots[at].s, j->n_ids);
    return at;
}

/* Slot i's job j ended: the slot is free for the next. */
static void slot_ended(srv *sv, int i, srv_job *j)
{
    pthread_mutex_lock(&sv->mu);
    sv->running[i] = NULL;
    sv->n_running--;
    pthread_mutex_unlock(&sv->mu);
    srv_job_unref(j);
}

void *srv_worker(void *arg)
{
    srv *sv = arg;
    int64_t steps = 0, rows = 0, mixed = 0; /* decode steps, their rows, those beside prompts */
    slot slots[SRV_MAX_SLOTS];
    memset(slots, 0, sizeof slots);
    for (int i = 0; i < sv->n_slots; i++)
        slots[i].s = sv->slot_s[i];
    for (;;) {
        /* admit queued jobs into free slots */
        pthread_mutex_lock(&sv->mu);
        int busy = 0;
        for (int i = 0; i < sv->n_slots; i++)
            busy += slots[i].j != NULL;
        while (!busy && !sv->head && !sv->stopping)
            pthread_cond_wait(&sv->cv, &sv->mu);
        if (!busy && !sv->head) { /* stopping and nothing left */
            pthread_mutex_unlock(&sv->mu);
            break;
        }
        srv_job *admit[SRV_MAX_SLOTS];
        int n_admit = 0;
        while (sv->head && busy + n_admit < sv->n_slots) {
            srv_job *j = sv->head;
            sv->head = j->next;
            if (!sv->head)
                sv->tail = NULL;
            sv->n_queued--;
            admit[n_admit++] = j;
        }
        int stopping = sv->stopping;
        pthread_mutex_unlock(&sv->mu);
        for (int a = 0; a < n_admit; a++) {
            srv_job *j = admit[a];
            if (stopping || __atomic_load_n(&j->halt, __ATOMIC_RELAXED)) {
                fprintf(stderr, "serve: %s: cancelled before it started\n", j->id);
                srv_job_finish(j, 499, NULL);
                srv_job_unref(j);
                continue;
            }
            int k = pick_slot(sv, slots, j);
            pthread_mutex_lock(&sv->mu);
            sv->running[k] = j;
            sv->n_running++;
            pthread_mutex_unlock(&sv->mu);
            if (slot_start(sv, &slots[k], j))
                slot_ended(sv, k, j);
        }
        /* a token for every decoding slot, sampled; the slots that end
         * here (a stop, the cap, a cancel) go */
        int dec[SRV_MAX_SLOTS], n_dec = 0, reading[SRV_MAX_SLOTS], n_reading = 0;
        for (int i = 0; i < sv->n_slots; i++) {
            slot *sl = &slots[i];
            if (!sl->j)
                continue;
            if (!sl->gen) {
                if (__atomic_load_n(&sl->j->halt, __ATOMIC_RELAXED)) {
                    srv_job *j = sl->j;
                    prompt_cancelled(sv, sl); /* the rest of its prompt is not read */
                    slot_ended(sv, i, j);
                } else {
                    reading[n_reading++] = i;
                }
                continue;
            }
            ms_error err = {0};
            if (__atomic_load_n(&sl->j->halt, __ATOMIC_RELAXED))
                sl->halt = 1;
            if (sv->request_timeout > 0 && !sl->halt &&
                cli_now() - sl->j->t_start > sv->request_timeout)
                sl->halt = sl->timed_out = 1;
            int rc = ms_gen_next(sl->gen, &sl->next, &err);
            if (rc == 0 && ms_session_pos(sl->s) >= ms_session_ctx(sl->s)) {
                ms_gen_end(sl->gen, MS_STOP_CONTEXT);
                rc = 1;
            }
            if (rc != 0) {
                srv_job *j = sl->j;
                slot_finish(sv, sl, rc < 0 ? &err : NULL);
                slot_ended(sv, i, j);
                continue;
            }
            dec[n_dec++] = i;
        }
        if (!n_dec && !n_reading)
            continue;
        /* those tokens and more of the prompts being read, in one call */
        if (n_dec) {
            steps++;
            rows += n_dec;
            __atomic_add_fetch(&sv->m_steps, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&sv->m_rows, n_dec, __ATOMIC_RELAXED);
        }
        srv_job *job_of[SRV_MAX_SLOTS]; /* by slot: an ended slot no longer holds it */
        for (int i = 0; i < sv->n_slots; i++)
            job_of[i] = slots[i].j;
        int ended[SRV_MAX_SLOTS], n_read = 0;
        int n_ended = slots_pass(sv, slots, dec, n_dec, reading, n_reading, ended, &n_read);
        mixed += n_dec && n_read;
        for (int e = 0; e < n_ended; e++)
            slot_ended(sv, ended[e], job_of[ended[e]]);
    }
    for (int i = 0; i < sv->n_slots; i++)
        slot_free(&slots[i]);
    if (steps)
        fprintf(stderr, "serve: %lld decode steps, %lld rows (mean batch %.2f), %lld of "
                "them beside a prompt being read\n", (long long)steps, (long long)rows,
                (double)rows / (double)steps, (long long)mixed);
    return NULL;
}

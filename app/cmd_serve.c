/* moestream serve: an OpenAI-compatible HTTP server over one loaded model.
 *
 *   moestream serve MODEL_DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY]
 *                   [--max-body SIZE] [--queue N] [--name ID] [--timeout S] [--keepalive S]
 *                   [--ctx N] [--threads N] [-n N] [--parallel N]
 *                   [sampling defaults, --think, --reasoning-effort, placement as run]
 *
 *   --api-key KEY    requests need "Authorization: Bearer KEY" (also $MOESTREAM_API_KEY);
 *                    /health never does
 *   --max-body SIZE  larger request bodies get 413 (default 8M)
 *   --queue N        at most N requests waiting; more get 503 (default 64)
 *   --name ID        the model id in /v1/models and responses (default: the folder name)
 *   --timeout S      idle keep-alive connections are closed after S seconds (default 120)
 *   --keepalive S    a stream with nothing to send (queued, long prefill) gets an SSE
 *                    comment line every S seconds (default 10)
 *   -n N             max_tokens when a request gives none (default: up to the context)
 *   --parallel N     N requests decoded together, each in its own slot (session); default
 *                    2 where a second KV cache fits, else 1
 *
 * Endpoints: GET /health, GET /v1/models[/ID], POST /v1/chat/completions,
 * POST /v1/completions (serve_http.c). Connections are served on
 * libmicrohttpd's threads (one per connection): they parse the body
 * (serve_request.c), render the chat template and tokenize (both
 * thread-safe), then queue a job. One worker thread owns the slots: it admits
 * jobs in arrival order into free slots (keeping the KV prefix a prompt
 * shares with the slot's previous conversation), and each step decodes one
 * token of every running job in one batched evaluation (see "slots" below).
 * A client that hangs up, a stop sequence and shutdown all set the job's
 * cancel flag, which the generation polls before each token.
 *
 * Beyond the OpenAI fields, every completion carries "moestream": {"ids":
 * [generated token ids, the stop id included], "reused": prompt positions
 * kept from the KV cache} (non-streaming: in the response; streaming: in the
 * chunk that has the finish_reason), and usage.prompt_tokens_details.
 * cached_tokens says the same as "reused". Requests may also set top_k and
 * ignore_eos (vLLM's), and chat_template_kwargs.enable_thinking.
 *
 * SIGINT / SIGTERM: pending and running generations are cancelled, the
 * server stops and the command exits with status 0. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <jansson.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "cli.h"
#include "serve.h"

/* ---- jobs ------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

srv_job *srv_job_new(void)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    j->fd = -1;
    j->created = (int64_t)time(NULL);
    j->t_start = now_s();
    return j;
}

void srv_job_unref(srv_job *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last)
        return;
    srv_request_free(&j->req);
    free(j->ids);
    free(j->out);
    free(j->body);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void srv_job_emit(srv_job *j, const char *s, size_t n)
{
    pthread_mutex_lock(&j->mu);
    if (j->out_len + n > j->out_cap) {
        size_t cap = j->out_cap ? j->out_cap : 4096;
        while (cap < j->out_len + n)
            cap *= 2;
        char *p = realloc(j->out, cap);
        if (!p) { /* the client misses a chunk; the stream stays well formed */
            pthread_mutex_unlock(&j->mu);
            return;
        }
        j->out = p;
        j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, s, n);
    j->out_len += n;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_finish(srv_job *j, int status, char *body)
{
    pthread_mutex_lock(&j->mu);
    j->status = status;
    free(j->body);
    j->body = body;
    j->finished = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

int srv_enqueue(srv *sv, srv_job *j)
{
    pthread_mutex_lock(&sv->mu);
    if (sv->stopping || sv->n_queued >= sv->max_queue) {
        pthread_mutex_unlock(&sv->mu);
        return -1;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    j->next = NULL;
    if (sv->tail)
        sv->tail->next = j;
    else
        sv->head = j;
    sv->tail = j;
    sv->n_queued++;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    return 0;
}

/* ---- preparing a request (connection threads) --------------------------------------- */

static int job_thinking(const srv *sv, const srv_job *j)
{
    return j->req.thinking >= 0 ? j->req.thinking : sv->thinking;
}

/* The grammar a request asks for: a forced tool call (tool_choice required
 * or named) in the model's syntax, or a JSON answer (response_format). */
static int constrain(srv *sv, srv_job *j, ms_grammar **g, ms_error *err)
{
    const srv_request *r = &j->req;
    int format = ms_engine_tool_format(sv->eng);
    *g = NULL;
    if (r->kind == SRV_CHAT && r->force_tool)
        return ms_grammar_for_tool_call(format, j->opens_reasoning, r->tools_json,
                                        r->force_tool == 2 ? r->force_name : NULL, g, err);
    if (r->json_mode && r->kind == SRV_CHAT)
        return ms_grammar_for_answer(format, j->opens_reasoning,
                                     r->json_mode == 2 ? r->json_schema : NULL, g, err);
    if (r->json_mode) {
        const char *sch[1] = {r->json_mode == 2 ? r->json_schema : NULL};
        return ms_grammar_json(1, NULL, sch, NULL, g, err);
    }
    return 0;
}

int srv_prepare(srv *sv, srv_job *j, srv_err *e)
{
    ms_error err = {0};
    char *text = NULL;
    const char *t = j->req.prompt;
    if (j->req.kind == SRV_CHAT) {
        int rc = cli_chat_prompt_json(sv->eng, j->req.chat_json, job_thinking(sv, j),
                                      j->req.reasoning_effort ? j->req.reasoning_effort
                                                              : sv->effort, &text, &err);
        if (rc)
            return srv_fail(e, err.code == MS_E_ARG ? 400 : 500,
                            err.code == MS_E_ARG ? "invalid_request_error" : "server_error",
                            "messages", NULL, "%s", err.msg);
        j->opens_reasoning = ms_chat_prompt_opens_reasoning(text);
        t = text;
    }
    int rc = ms_tokenizer_encode(sv->tok, t, strlen(t), 1, &j->ids, &j->n_ids, &err);
    free(text);
    if (rc)
        return srv_fail(e, 500, "server_error", NULL, NULL, "tokenizer: %s", err.msg);
    const char *what = j->req.kind == SRV_CHAT ? "messages" : "prompt";
    if (j->n_ids == 0)
        return srv_fail(e, 400, "invalid_request_error", what, "invalid_value",
                        "Invalid value for '%s': the prompt has no tokens.", what);
    if (j->n_ids >= sv->ctx)
        return srv_fail(e, 400, "invalid_request_error", what, "context_length_exceeded",
                        "This model's maximum context length is %lld tokens. However, your "
                        "%s resulted in %lld tokens (and the completion needs at least one "
                        "more).", (long long)sv->ctx, what, (long long)j->n_ids);
    ms_grammar *gram = NULL; /* refused here, before a response starts */
    if (constrain(sv, j, &gram, &err))
        return srv_fail(e, err.code == MS_E_NOMEM ? 500 : 400,
                        err.code == MS_E_NOMEM ? "server_error" : "invalid_request_error",
                        j->req.force_tool ? "tool_choice" : "response_format", NULL, "%s",
                        err.msg);
    ms_grammar_free(gram);
    uint64_t n = __atomic_add_fetch(&sv->counter, 1, __ATOMIC_RELAXED), h = 0;
    if (getrandom(&h, sizeof h, 0) != (ssize_t)sizeof h) /* ids nobody can guess */
        h = (n * UINT64_C(0x9E3779B97F4A7C15)) ^ (uint64_t)j->created ^
            (uint64_t)(now_s() * 1e9);
    snprintf(j->id, sizeof j->id, "%s%016" PRIx64, j->req.kind == SRV_CHAT ? "chatcmpl-" : "cmpl-",
             h);
    return 0;
}

char *srv_metrics_text(srv *sv)
{
    pthread_mutex_lock(&sv->mu);
    int queued = sv->n_queued, busy = sv->n_running;
    pthread_mutex_unlock(&sv->mu);
    ms_stats st = {0};
    if (sv->s)
        ms_session_stats(sv->s, &st); /* the expert store is the engine's: any session */
    char *t = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&t, &n);
    if (!f)
        return NULL;
#define LOAD(x) (long long)__atomic_load_n(&(x), __ATOMIC_RELAXED)
    fprintf(f, "# HELP moestream_requests_total Requests taken, by endpoint.\n"
               "# TYPE moestream_requests_total counter\n"
               "moestream_requests_total{endpoint=\"chat\"} %lld\n"
               "moestream_requests_total{endpoint=\"completions\"} %lld\n",
            LOAD(sv->m_requests[SRV_CHAT]), LOAD(sv->m_requests[SRV_COMPLETION]));
    fprintf(f, "# HELP moestream_requests_rejected_total Requests refused (4xx, 5xx).\n"
               "# TYPE moestream_requests_rejected_total counter\n"
               "moestream_requests_rejected_total %lld\n", LOAD(sv->m_rejected));
    fprintf(f, "# HELP moestream_requests_finished_total Generations that ended.\n"
               "# TYPE moestream_requests_finished_total counter\n"
               "moestream_requests_finished_total{how=\"completed\"} %lld\n"
               "moestream_requests_finished_total{how=\"cancelled\"} %lld\n"
               "moestream_requests_finished_total{how=\"timed_out\"} %lld\n",
            LOAD(sv->m_finished) - LOAD(sv->m_timeouts), LOAD(sv->m_cancelled),
            LOAD(sv->m_timeouts));
    fprintf(f, "# HELP moestream_prompt_tokens_total Prompt tokens of the requests.\n"
               "# TYPE moestream_prompt_tokens_total counter\n"
               "moestream_prompt_tokens_total %lld\n"
               "# HELP moestream_prompt_cache_tokens_total Prompt tokens reused from a cache.\n"
               "# TYPE moestream_prompt_cache_tokens_total counter\n"
               "moestream_prompt_cache_tokens_total %lld\n"
               "# HELP moestream_generated_tokens_total Tokens generated.\n"
               "# TYPE moestream_generated_tokens_total counter\n"
               "moestream_generated_tokens_total %lld\n",
            LOAD(sv->m_prompt_tokens), LOAD(sv->m_cached_tokens), LOAD(sv->m_completion_tokens));
    fprintf(f, "# HELP moestream_decode_steps_total Batched decode steps and their rows.\n"
               "# TYPE moestream_decode_steps_total counter\n"
               "moestream_decode_steps_total %lld\n"
               "# HELP moestream_decode_rows_total Tokens decoded in batched steps.\n"
               "# TYPE moestream_decode_rows_total counter\n"
               "moestream_decode_rows_total %lld\n",
            LOAD(sv->m_steps), LOAD(sv->m_rows));
    fprintf(f, "# HELP moestream_slots Parallel slots.\n# TYPE moestream_slots gauge\n"
               "moestream_slots %d\n"
               "# HELP moestream_slots_busy Slots serving a request.\n"
               "# TYPE moestream_slots_busy gauge\nmoestream_slots_busy %d\n"
               "# HELP moestream_queue_length Requests waiting for a slot.\n"
               "# TYPE moestream_queue_length gauge\nmoestream_queue_length %d\n",
            sv->n_slots, busy, queued);
    fprintf(f, "# HELP moestream_expert_requests_total Routed-expert uses and cache hits.\n"
               "# TYPE moestream_expert_requests_total counter\n"
               "moestream_expert_requests_total %lld\n"
               "# HELP moestream_expert_hits_total Routed-expert uses served from memory.\n"
               "# TYPE moestream_expert_hits_total counter\n"
               "moestream_expert_hits_total %lld\n"
               "# HELP moestream_disk_read_bytes_total Bytes of experts read from disk.\n"
               "# TYPE moestream_disk_read_bytes_total counter\n"
               "moestream_disk_read_bytes_total %lld\n"
               "# HELP moestream_uptime_seconds Seconds since the server started.\n"
               "# TYPE moestream_uptime_seconds gauge\nmoestream_uptime_seconds %.3f\n",
            (long long)st.expert_requests, (long long)st.expert_hits, (long long)st.bytes_read,
            now_s() - sv->t_start);
#undef LOAD
    fclose(f);
    return t;
}

int srv_model_json(const srv *sv, char **out)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:{s:s, s:I}}", "id", sv->name, "object", "model",
                          "created", (json_int_t)0, "owned_by", "moestream", "moestream",
                          "family", sv->info->family, "context", (json_int_t)sv->ctx);
    *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return *out ? 0 : -1;
}

/* ---- generation (the worker) ---------------------------------------------------------- */

typedef struct strbuf {
    char *p;
    size_t n, cap;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* Text as a JSON string; bytes that are not UTF-8 (never expected: the
 * streaming decoder emits whole characters) become U+FFFD. */
static json_t *jstr(const char *s, size_t n)
{
    json_t *v = json_stringn(s, n);
    if (v)
        return v;
    strbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80)
            sb_add(&b, s + i, 1);
        else {
            size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
            json_t *t = k && i + k <= n ? json_stringn(s + i, k) : NULL;
            if (t) {
                sb_add(&b, s + i, k);
                i += k - 1;
                json_decref(t);
            } else {
                sb_add(&b, "\xef\xbf\xbd", 3);
            }
        }
    }
    v = json_stringn(b.p ? b.p : "", b.n);
    free(b.p);
    return v;
}

typedef struct gen {
    srv *sv;
    srv_job *j;
    ms_session *s;             /* the slot's */
    int chat, stream;
    strbuf content, reasoning, pending;
    int32_t *ids;
    int64_t n_ids, cap_ids;
    int stop_hit;
    /* tools offered: the raw text is parsed (partially while streaming) */
    int tools, format;
    strbuf raw;
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
    json_t *e = json_pack("{s:o, s:f, s:o}", "token", jstr(text ? text : "", len), "logprob", lp,
                          "bytes", bytes);
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
        sb_add(&g->raw, s, n);
        if (g->stream)
            stream_parsed(g, 0, NULL);
        return;
    }
    if (!g->stream) {
        sb_add(chan == MS_CHAT_REASONING ? &g->reasoning : &g->content, s, n);
        return;
    }
    json_t *t = jstr(s, n);
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
        const char *hex = strchr(g->j->id, '-');
        snprintf(id, sizeof id, "call_%.48s%zu", hex ? hex + 1 : g->j->id, i);
        json_object_set_new(c, "id", json_string(id));
    }
    if (!g->stream) {
        *message = m;
        return;
    }
    static const char *const keys[2] = {"reasoning_content", "content"};
    size_t *sent[2] = {&g->sent_reasoning, &g->sent_content};
    for (int k = 0; k < 2; k++) {
        const char *v = json_string_value(json_object_get(m, keys[k]));
        size_t n = v ? strlen(v) : 0;
        if (n > *sent[k]) {
            json_t *d = json_pack("{s:o}", keys[k], jstr(v + *sent[k], n - *sent[k]));
            emit_json(g, with_logprobs(g, chunk(g, d, NULL)));
            *sent[k] = n;
        }
    }
    if (final)
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
    sb_add(&g->pending, s, n);
    const char *p = g->pending.p;
    size_t len = g->pending.n, cut = len, hold = 0;
    for (int i = 0; i < r->n_stop; i++) {
        const char *m = memmem(p, len, r->stop[i], strlen(r->stop[i]));
        if (m && (size_t)(m - p) < cut)
            cut = (size_t)(m - p);
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
    if (g->stream && body) {
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
 * shares the longest prefix with the prompt), evaluates one chunk of each
 * prompt still being read, then samples one token for every decoding slot
 * and evaluates all those tokens in one batched step: one pass over the
 * weights for all. A row never depends on the others, so each answer is
 * bit-identical to serving it alone. */

#define PREFILL_CHUNK 256

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

/* Sets the job up in the slot; 0 when its prompt is to be read, -1 when it
 * ended here (refused: the response is sent, the slot left free). */
static int slot_start(srv *sv, slot *sl, srv_job *j)
{
    ms_error err = {0};
    sl->j = j;
    sl->g = (gen){.sv = sv, .j = j, .s = sl->s, .chat = j->req.kind == SRV_CHAT,
                  .stream = j->req.stream,
                  .tools = j->req.kind == SRV_CHAT && j->req.tools_json != NULL,
                  .format = ms_engine_tool_format(sv->eng),
                  .lp_pending = j->req.logprobs ? json_array() : NULL};
    gen *g = &sl->g;
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
        sp.seed = (uint64_t)(now_s() * 1e9) ^ ((uint64_t)j->created << 20) ^
                  (uint64_t)(uintptr_t)j;
    if (ms_sampler_open(&sp, sv->info->vocab_size, &sl->smp, &err) ||
        (g->chat && !g->tools &&
         ms_chat_parser_open(sv->info->family, job_thinking(sv, j), &sl->parser, &err))) {
        fail_job(g, 500, "server_error", NULL, err.msg);
        slot_free(sl);
        return -1;
    }
    ms_sampler_limit(sl->smp, ms_tokenizer_n_ids(sv->tok)); /* only ids that have text */
    ms_sampler_accept(sl->smp, j->ids, j->n_ids);
    if (constrain(sv, j, &sl->gram, &err)) {
        fail_job(g, err.code == MS_E_NOMEM ? 500 : 400,
                 err.code == MS_E_NOMEM ? "server_error" : "invalid_request_error",
                 NULL, err.msg);
        slot_free(sl);
        return -1;
    }
    if (g->stream && g->chat)
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
                now_s() - j->t_start);
    __atomic_add_fetch(&sv->m_completion_tokens, gr.n_tokens, __ATOMIC_RELAXED);
    __atomic_add_fetch(cancelled ? &sv->m_cancelled : &sv->m_finished, 1, __ATOMIC_RELAXED);
    if (timed_out)
        __atomic_add_fetch(&sv->m_timeouts, 1, __ATOMIC_RELAXED);
    if (sv->stats)
        run_opts_print_stats(sl->s);
    if (cancelled) {
        srv_job_finish(j, 499, NULL);
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
                                jstr(g->content.p ? g->content.p : "", g->content.n));
        if (!message && g->reasoning.n)
            json_object_set_new(msg, "reasoning_content", jstr(g->reasoning.p, g->reasoning.n));
        choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "message", msg, "logprobs",
                           "finish_reason", finish);
    } else {
        choice = json_pack("{s:o, s:i, s:n, s:s}", "text",
                           jstr(g->content.p ? g->content.p : "", g->content.n), "index", 0,
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

/* Reads up to PREFILL_CHUNK more prompt positions; opens the generation once
 * the prompt is in. -1: the job ended (failed). */
static int slot_prefill(srv *sv, slot *sl)
{
    ms_error err = {0};
    srv_job *j = sl->j;
    int64_t n = j->n_ids - sl->fed;
    if (n > PREFILL_CHUNK)
        n = PREFILL_CHUNK;
    if (ms_session_eval(sl->s, j->ids + sl->fed, n, NULL, &err)) {
        fail_job(&sl->g, err.code == MS_E_CONTEXT_FULL ? 400 : 500,
                 err.code == MS_E_CONTEXT_FULL ? "invalid_request_error" : "server_error",
                 err.code == MS_E_CONTEXT_FULL ? "context_length_exceeded" : NULL, err.msg);
        slot_free(sl);
        return -1;
    }
    sl->fed += n;
    if (sl->fed == j->n_ids && ms_gen_open(sl->s, &sl->go, &sl->gen, &err)) {
        fail_job(&sl->g, 500, "server_error", NULL, err.msg);
        slot_free(sl);
        return -1;
    }
    (void)sv;
    return 0;
}

/* The free slot whose cache shares the longest prefix with the prompt. */
static int pick_slot(const srv *sv, const slot *slots, const srv_job *j)
{
    int best = -1;
    int64_t best_n = -1;
    for (int i = 0; i < sv->n_slots; i++) {
        if (slots[i].j)
            continue;
        int64_t n = ms_session_shared(slots[i].s, j->ids, j->n_ids);
        if (n > best_n) {
            best = i;
            best_n = n;
        }
    }
    return best;
}

void *srv_worker(void *arg)
{
    srv *sv = arg;
    int64_t steps = 0, rows = 0;
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
            if (slot_start(sv, &slots[k], j)) {
                pthread_mutex_lock(&sv->mu);
                sv->running[k] = NULL;
                sv->n_running--;
                pthread_mutex_unlock(&sv->mu);
                srv_job_unref(j);
            }
        }
        /* one chunk of each prompt still being read */
        for (int i = 0; i < sv->n_slots; i++)
            if (slots[i].j && !slots[i].gen) {
                srv_job *j = slots[i].j;
                if (slot_prefill(sv, &slots[i])) {
                    pthread_mutex_lock(&sv->mu);
                    sv->running[i] = NULL;
                    sv->n_running--;
                    pthread_mutex_unlock(&sv->mu);
                    srv_job_unref(j);
                }
            }
        /* one token for every decoding slot, evaluated together */
        ms_session *step_s[SRV_MAX_SLOTS];
        int32_t step_id[SRV_MAX_SLOTS];
        int step_slot[SRV_MAX_SLOTS], n = 0;
        for (int i = 0; i < sv->n_slots; i++) {
            slot *sl = &slots[i];
            if (!sl->j || !sl->gen)
                continue;
            ms_error err = {0};
            if (__atomic_load_n(&sl->j->halt, __ATOMIC_RELAXED))
                sl->halt = 1;
            if (sv->request_timeout > 0 && !sl->halt &&
                now_s() - sl->j->t_start > sv->request_timeout)
                sl->halt = sl->timed_out = 1;
            int rc = ms_gen_next(sl->gen, &sl->next, &err);
            if (rc == 0 && ms_session_pos(sl->s) >= ms_session_ctx(sl->s)) {
                ms_gen_end(sl->gen, MS_STOP_CONTEXT);
                rc = 1;
            }
            if (rc != 0) {
                srv_job *j = sl->j;
                slot_finish(sv, sl, rc < 0 ? &err : NULL);
                pthread_mutex_lock(&sv->mu);
                sv->running[i] = NULL;
                sv->n_running--;
                pthread_mutex_unlock(&sv->mu);
                srv_job_unref(j);
                continue;
            }
            step_s[n] = sl->s;
            step_id[n] = sl->next;
            step_slot[n++] = i;
        }
        if (!n)
            continue;
        steps++;
        rows += n;
        __atomic_add_fetch(&sv->m_steps, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&sv->m_rows, n, __ATOMIC_RELAXED);
        ms_error err = {0};
        if (ms_session_eval_batch(step_s, step_id, n, &err))
            for (int k = 0; k < n; k++) { /* not expected: each row was checked */
                slot *sl = &slots[step_slot[k]];
                srv_job *j = sl->j;
                slot_finish(sv, sl, &err);
                pthread_mutex_lock(&sv->mu);
                sv->running[step_slot[k]] = NULL;
                sv->n_running--;
                pthread_mutex_unlock(&sv->mu);
                srv_job_unref(j);
            }
    }
    for (int i = 0; i < sv->n_slots; i++)
        slot_free(&slots[i]);
    if (steps)
        fprintf(stderr, "serve: %lld decode steps, %lld rows (mean batch %.2f)\n",
                (long long)steps, (long long)rows, (double)rows / (double)steps);
    return NULL;
}

/* ---- the command ------------------------------------------------------------------------ */

static int bad_option(const run_opts *o)
{
    const char *bad = o->prompt_ids ? "--prompt-ids" : o->prompt_text ? "-p" : o->out ? "--out"
                    : o->dump ? "--dump" : o->ids ? "--ids" : o->raw ? "--raw"
                    : o->feed ? "--feed" : o->system ? "--system"
                    : o->hide_reasoning ? "--hide-reasoning" : NULL;
    return bad ? cli_usage_error("serve", "%s is not an option of serve", bad) : 0;
}

/* "4096", "64K", "8M", "1G": bytes; -1 when malformed. */
static int64_t parse_bytes(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10;
    else if (*end == 'M' || *end == 'm') shift = 20;
    else if (*end == 'G' || *end == 'g') shift = 30;
    if (shift)
        end++;
    if (errno || end == s || *end || v <= 0 || v > (1ll << 40) >> shift)
        return -1;
    return (int64_t)v << shift;
}

/* Slots when --parallel is not given: 2 when a second session's cache fits
 * three times over in the memory still available, else 1. */
static int default_slots(int64_t session_bytes)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024 > 3 * session_bytes ? 2 : 1;
}

int cmd_serve(int argc, char **argv)
{
    const char *host = "127.0.0.1", *name = NULL, *key = getenv("MOESTREAM_API_KEY");
    int64_t port = 8080, max_body = 8 << 20, max_queue = 64, timeout = 120, parallel = 0, cap = 0;
    double keepalive = 10, req_timeout = 0;
    /* our options out, the rest to the shared parser */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    const char **allow = calloc((size_t)argc + 1, sizeof *allow);
    const char **cors = calloc((size_t)argc + 1, sizeof *cors);
    int n_rest = 0, n_allow = 0, n_cors = 0;
    if (!rest || !allow || !cors) {
                free(rest);
        free(allow);
        free(cors);
        return 1;
    }
    for (int i = 0; i < argc; i++) {
        int miss = 0;
        const char *v;
        if ((v = cli_value(argc, argv, &i, "--host", &miss))) host = v;
        else if ((v = cli_value(argc, argv, &i, "--api-key", &miss))) key = v;
        else if ((v = cli_value(argc, argv, &i, "--name", &miss))) name = v;
        else if ((v = cli_value(argc, argv, &i, "--allow-host", &miss))) allow[n_allow++] = v;
        else if ((v = cli_value(argc, argv, &i, "--cors", &miss))) cors[n_cors++] = v;
        else if ((v = cli_value(argc, argv, &i, "--port", &miss))) {
            if (cli_parse_i64(v, 0, 65535, &port)) {
                free(rest), free(allow), free(cors);
                return cli_usage_error("serve", "--port expects 0..65535, got \"%s\"", v);
            }
        } else if ((v = cli_value(argc, argv, &i, "--max-body", &miss))) {
            if ((max_body = parse_bytes(v)) <= 0) {
                free(rest), free(allow), free(cors);
                return cli_usage_error("serve", "--max-body expects a size like 8M, got \"%s\"", v);
            }
        } else if ((v = cli_value(argc, argv, &i, "--queue", &miss))) {
            if (cli_parse_i64(v, 1, 1 << 20, &max_queue)) {
                free(rest), free(allow), free(cors);
                return cli_usage_error("serve", "--queue expects 1..1048576, got \"%s\"", v);
            }
        } else if ((v = cli_value(argc, argv, &i, "--max-tokens-cap", &miss))) {
            if (cli_parse_i64(v, 1, INT32_MAX, &cap)) {
                free(rest), free(allow), free(cors);
                return cli_usage_error("serve", "--max-tokens-cap expects a positive count, "
                                       "got \"%s\"", v);
            }
        } else if ((v = cli_value(argc, argv, &i, "--request-timeout", &miss))) {
            if (cli_parse_f64(v, 0.01, 1e7, &req_timeout)) {
                free(rest), free(allow), free(cors);
                return cli_usage_error("serve", "--request-timeout expects seconds, got \"%s\"",
                                       v);
            }
        } else if ((v = cli_value(argc, argv, &i, "--parallel", &miss))) {
            if (cli_parse_i64(v, 1, SRV_MAX_SLOTS, &parallel)) {
                free(rest), free(allow), free(cors);
                return cli_usage_error("serve", "--parallel expects 1..%d, got \"%s\"",
                                       SRV_MAX_SLOTS, v);
            }
        } else if ((v = cli_value(argc, argv, &i, "--timeout", &miss))) {
            if (cli_parse_i64(v, 1, 86400, &timeout)) {
                free(rest), free(allow), free(cors);
                return cli_usage_error("serve", "--timeout expects 1..86400 seconds, got \"%s\"", v);
            }
        } else if ((v = cli_value(argc, argv, &i, "--keepalive", &miss))) {
            if (cli_parse_f64(v, 0.1, 3600, &keepalive)) {
                free(rest), free(allow), free(cors);
                return cli_usage_error("serve", "--keepalive expects 0.1..3600 seconds, got \"%s\"", v);
            }
        } else if (miss) {
            free(rest), free(allow), free(cors);
            return cli_usage_error("serve", "%s needs a value", argv[i]);
        } else
            rest[n_rest++] = argv[i];
    }
    run_opts o;
    int rc = run_opts_parse("serve", n_rest, rest, &o);
    if (!rc)
        rc = bad_option(&o);
    if (rc) {
        free(rest), free(allow), free(cors);
        return rc;
    }
    if (key && !*key)
        key = NULL;
    if (!name) {
        const char *s = o.model + strlen(o.model);
        while (s > o.model && s[-1] == '/')
            s--;
        const char *b = s;
        while (b > o.model && b[-1] != '/')
            b--;
        static char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(s - b), b);
        name = *base ? base : o.model;
    }

    /* Signals are taken by sigwait() below: block them before any thread starts. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    ms_error err = {0};
    int wildcard = !strcmp(host, "0.0.0.0") || !strcmp(host, "::") || !*host;
    srv sv = {.access = {.bind = host, .port = (int)port, .wildcard = wildcard, .allow = allow,
                         .n_allow = n_allow, .cors = cors, .n_cors = n_cors},
              .api_key = key, .name = name, .max_body = (size_t)max_body,
              .max_tokens_cap = cap, .request_timeout = req_timeout, .t_start = now_s(),
              .max_queue = (int)max_queue, .keepalive = keepalive,
              .timeout = (unsigned)timeout, .thinking = o.thinking, .effort = o.effort,
              .ignore_eos = o.ignore_eos, .no_reuse = o.no_reuse, .stats = o.stats,
              .have_seed = o.have_seed, .default_max_tokens = o.n_predict};
    pthread_mutex_init(&sv.mu, NULL);
    pthread_cond_init(&sv.cv, NULL);
    struct MHD_Daemon *d = NULL;
    pthread_t worker;
    int have_worker = 0;
    rc = 1;
    /* listen first: /health answers {"status": "loading"} while the model loads */
    sv.loading = 1;
    char why[256] = "";
    int bound = 0;
    if (!(d = srv_http_start(&sv, host, (int)port, &bound, why, sizeof why))) {
        snprintf(err.msg, sizeof err.msg, "cannot listen on %s port %lld: %s", host,
                 (long long)port, why);
        goto out;
    }
    sv.access.port = bound;
    fprintf(stderr, "moestream serve: loading %s; /health answers on port %d meanwhile\n",
            o.model, bound);
    if (run_opts_open(&o, &sv.eng, &sv.s, &err) || ms_tokenizer_open(o.model, &sv.tok, &err) ||
        ms_vocab_index_open(sv.tok, &sv.vocab, &err))
        goto out;
    sv.info = ms_engine_info(sv.eng);
    sv.ctx = ms_session_ctx(sv.s);
    run_opts_sampling(&o, sv.eng, &sv.sampling);
    sv.slot_s[0] = sv.s;
    sv.n_slots = parallel > 0 ? (int)parallel : default_slots(ms_session_bytes(sv.s));
    for (int i = 1; i < sv.n_slots; i++) {
        ms_session_opts so = {.ctx = o.ctx};
        if (ms_session_open(sv.eng, &so, &sv.slot_s[i], &err)) {
            snprintf(err.msg + strlen(err.msg), sizeof err.msg - strlen(err.msg),
                     " (slot %d of --parallel %d)", i + 1, sv.n_slots);
            sv.n_slots = i;
            goto out;
        }
    }
    if (!ms_engine_chat_template(sv.eng)) {
        ms_chat_msg m = {"user", "", NULL}; /* the family must have a chat format */
        char *t = NULL;
        if (cli_chat_prompt(sv.eng, &m, 1, -1, NULL, &t, &err))
            goto out;
        free(t);
    }
    if (pthread_create(&worker, NULL, srv_worker, &sv)) {
        snprintf(err.msg, sizeof err.msg, "cannot start the worker thread");
        goto out;
    }
    have_worker = 1;
    __atomic_store_n(&sv.loading, 0, __ATOMIC_RELEASE);
    int loopback = !strncmp(host, "127.", 4) || !strcmp(host, "::1") ||
                   !strcmp(host, "localhost");
    if (!loopback && !key)
        fprintf(stderr, "moestream serve: warning: listening on %s, beyond this machine, "
                "without --api-key: anyone who can reach the port can use the model\n", host);
    fprintf(stderr, "moestream serve: listening on http://%s%s%s:%d (model %s, %s, context "
            "%lld tokens, %d parallel slot%s%s)\n", strchr(host, ':') ? "[" : "", host,
            strchr(host, ':') ? "]" : "", bound, sv.name, sv.info->family, (long long)sv.ctx,
            sv.n_slots, sv.n_slots > 1 ? "s" : "", key ? ", API key required" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "moestream serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
out:
    pthread_mutex_lock(&sv.mu);
    sv.stopping = 1;
    for (srv_job *j = sv.head; j; j = j->next)
        __atomic_store_n(&j->halt, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < SRV_MAX_SLOTS; i++)
        if (sv.running[i])
            __atomic_store_n(&sv.running[i]->halt, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&sv.cv);
    pthread_mutex_unlock(&sv.mu);
    if (d)
        srv_http_stop(d);
    if (have_worker)
        pthread_join(worker, NULL);
    if (rc)
        rc = cli_fail(&err);
    ms_vocab_index_close(sv.vocab);
    ms_tokenizer_close(sv.tok);
    for (int i = 1; i < sv.n_slots; i++)
        ms_session_close(sv.slot_s[i]);
    ms_session_close(sv.s);
    ms_engine_close(sv.eng);
    pthread_cond_destroy(&sv.cv);
    pthread_mutex_destroy(&sv.mu);
        free(rest);
    free(allow);
    free(cors);
    return rc;
}

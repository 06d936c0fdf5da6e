/* moestream serve: jobs and their queue, shared by the connection threads
 * (which prepare a request: template, tokens, constraints, then queue it)
 * and the worker (which serves it); also /v1/models and /metrics, which read
 * the server's state. */
#include <ctype.h>
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "serve.h"

/* ---- jobs ------------------------------------------------------------------------- */

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
    j->t_start = cli_now();
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
    free(j->conversation);
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

/* ---- answers in parts (serve.h's srv_out) ---------------------------------------------- */

void srv_out_init(srv_out *o, const srv_out_api *api, const srv *sv, srv_job *j, int stream)
{
    *o = (srv_out){.api = api, .sv = sv, .j = j, .stream = stream, .parts = json_array(),
                   .summary = j->req.reasoning_summary};
    if (stream)
        api->start(o);
}

void srv_out_free(srv_out *o)
{
    json_decref(o->parts);
    json_decref(o->final);
    o->parts = o->final = NULL;
}

void srv_out_event(srv_out *o, const char *type, json_t *data)
{
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!s)
        return;
    cli_buf b = {0};
    cli_buf_add(&b, "event: ", 7);
    cli_buf_add(&b, type, strlen(type));
    cli_buf_add(&b, "\ndata: ", 7);
    cli_buf_add(&b, s, strlen(s));
    cli_buf_add(&b, "\n\n", 2);
    if (b.p)
        srv_job_emit(o->j, b.p, b.n);
    free(b.p);
    free(s);
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

/* Text as a JSON string; bytes that are not UTF-8 (never expected: the
 * streaming decoder emits whole characters) become U+FFFD. */
json_t *srv_json_text(const char *s, size_t n)
{
    json_t *v = json_stringn(s, n);
    if (v)
        return v;
    cli_buf b = {0};
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80)
            cli_buf_add(&b, s + i, 1);
        else {
            size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
            json_t *t = k && i + k <= n ? json_stringn(s + i, k) : NULL;
            if (t) {
                cli_buf_add(&b, s + i, k);
                i += k - 1;
                json_decref(t);
            } else {
                cli_buf_add(&b, "\xef\xbf\xbd", 3);
            }
        }
    }
    v = json_stringn(b.p ? b.p : "", b.n);
    free(b.p);
    return v;
}

void srv_json_append(json_t *o, const char *key, const json_t *d)
{
    json_t *t = json_object_get(o, key);
    size_t a = json_string_length(t), b = json_string_length(d);
    char *cat = malloc(a + b + 1);
    if (!cat)
        return;
    if (a) /* (no such key yet: nothing to copy, and no pointer to copy from) */
        memcpy(cat, json_string_value(t), a);
    memcpy(cat + a, json_string_value(d), b);
    json_object_set_new(o, key, json_stringn(cat, a + b));
    free(cat);
}

void srv_iso_time(time_t t, char at[32])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(at, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int srv_job_thinking(const srv *sv, const srv_job *j)
{
    return j->req.thinking >= 0 ? j->req.thinking : sv->thinking;
}

/* The grammar a request asks for: a forced tool call (tool_choice required
 * or named) in the model's syntax, or a JSON answer (response_format). */
int srv_constrain(srv *sv, srv_job *j, ms_grammar **g, ms_error *err)
{
    const srv_request *r = &j->req;
    int format = ms_engine_tool_format(sv->eng);
    *g = NULL;
    int chat = r->kind != SRV_COMPLETION;
    if (chat && r->force_tool)
        return ms_grammar_for_tool_call(format, j->opens_reasoning, r->tools_json,
                                        r->force_tool == 2 ? r->force_name : NULL, g, err);
    if (r->json_mode && chat)
        return ms_grammar_for_answer(format, j->opens_reasoning,
                                     r->json_mode == 2 ? r->json_schema : NULL, g, err);
    if (r->json_mode) {
        const char *sch[1] = {r->json_mode == 2 ? r->json_schema : NULL};
        return ms_grammar_json(1, NULL, sch, NULL, g, err);
    }
    return 0;
}

/* A system or user message whose text is not in the prompt: the template
 * left it out (gpt-oss's takes only the first system message, and Claude
 * Code sends one later in the conversation). Said, not silently lost. */
static void note_left_out(srv_request *r, const char *prompt)
{
    json_t *chat = json_loads(r->chat_json, 0, NULL), *m;
    size_t i, plen = strlen(prompt);
    json_array_foreach(json_object_get(chat, "messages"), i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *c = json_string_value(json_object_get(m, "content"));
        if (!role || (strcmp(role, "system") && strcmp(role, "user")) || !c)
            continue;
        size_t n = strlen(c); /* as templates may strip it */
        while (n && isspace((unsigned char)c[n - 1]))
            n--;
        while (n && isspace((unsigned char)*c))
            c++, n--;
        if (!n || memmem(prompt, plen, c, n))
            continue;
        /* named by its opening words: the index is the chat request's, which
         * may not be the client's (a system parameter, instructions) */
        char head[44], line[200];
        size_t k = 0;
        for (size_t q = 0; q < n && k < 40; q++)
            head[k++] = c[q] == '\n' || c[q] == '"' ? ' ' : c[q];
        while (k && (head[k - 1] & 0xC0) == 0x80) /* not in the middle of a character */
            k--;
        if (k && (unsigned char)head[k - 1] >= 0xC0)
            k--;
        head[k] = 0;
        snprintf(line, sizeof line, "a %s message (\"%s%s\") is not in the prompt: the chat "
                 "template leaves it out", role, head, n > k ? "..." : "");
        srv_note(r, line);
    }
    json_decref(chat);
}

int srv_prepare(srv *sv, srv_job *j, srv_err *e)
{
    ms_error err = {0};
    char *text = NULL;
    const char *t = j->req.prompt;
    int chat = j->req.kind != SRV_COMPLETION;
    if (j->req.kind == SRV_RESPONSES) { /* instructions, the conversation it continues */
        char *prev = j->req.previous_id ? srv_store_get(&sv->store, j->req.previous_id, 1)
                                        : NULL;
        if (j->req.previous_id && !prev)
            return srv_fail(e, 404, "invalid_request_error", "previous_response_id",
                            "previous_response_not_found", "Previous response with id '%.100s' "
                            "not found (this server keeps the last %d responses, in memory, "
                            "while it runs).", j->req.previous_id, SRV_STORE_MAX);
        int rc = srv_responses_compose(&j->req, prev, &j->conversation, e);
        free(prev);
        if (rc)
            return -1;
    }
    if (chat) {
        int rc = cli_chat_prompt_json(sv->eng, j->req.chat_json, srv_job_thinking(sv, j),
                                      j->req.reasoning_effort ? j->req.reasoning_effort
                                                              : sv->effort, &text, &err);
        if (rc)
            return srv_fail(e, err.code == MS_E_ARG ? 400 : 500,
                            err.code == MS_E_ARG ? "invalid_request_error" : "server_error",
                            j->req.kind == SRV_RESPONSES ? "input" : "messages", NULL, "%s",
                            err.msg);
        j->opens_reasoning = ms_chat_prompt_opens_reasoning(text);
        note_left_out(&j->req, text);
        t = text;
    }
    int rc = ms_tokenizer_encode(sv->tok, t, strlen(t), 1, &j->ids, &j->n_ids, &err);
    free(text);
    if (rc)
        return srv_fail(e, 500, "server_error", NULL, NULL, "tokenizer: %s", err.msg);
    const char *what = j->req.kind == SRV_RESPONSES ? "input"
                     : chat && j->req.kind != SRV_OLLAMA_GENERATE ? "messages" : "prompt";
    if (j->req.kind == SRV_COUNT_TOKENS)
        return 0; /* only the count is asked */
    if (j->n_ids == 0)
        return srv_fail(e, 400, "invalid_request_error", what, "invalid_value",
                        "Invalid value for '%s': the prompt has no tokens.", what);
    if (j->n_ids >= sv->ctx)
        return srv_fail(e, 400, "invalid_request_error", what, "context_length_exceeded",
                        "This model's maximum context length is %lld tokens. However, your "
                        "%s resulted in %lld tokens (and the completion needs at least one "
                        "more).", (long long)sv->ctx, what, (long long)j->n_ids);
    ms_grammar *gram = NULL; /* refused here, before a response starts */
    if (srv_constrain(sv, j, &gram, &err))
        return srv_fail(e, err.code == MS_E_NOMEM ? 500 : 400,
                        err.code == MS_E_NOMEM ? "server_error" : "invalid_request_error",
                        j->req.force_tool ? "tool_choice" : "response_format", NULL, "%s",
                        err.msg);
    ms_grammar_free(gram);
    uint64_t n = __atomic_add_fetch(&sv->counter, 1, __ATOMIC_RELAXED), h = 0;
    if (getrandom(&h, sizeof h, 0) != (ssize_t)sizeof h) /* ids nobody can guess */
        h = (n * UINT64_C(0x9E3779B97F4A7C15)) ^ (uint64_t)j->created ^
            (uint64_t)(cli_now() * 1e9);
    static const char *const prefix[SRV_N_KINDS] = {"chatcmpl-", "cmpl-", "resp_", "msg_", "n_",
                                                    "ochat-", "ogen-"};
    snprintf(j->id, sizeof j->id, "%s%016" PRIx64, prefix[j->req.kind], h);
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
               "moestream_requests_total{endpoint=\"completions\"} %lld\n"
               "moestream_requests_total{endpoint=\"responses\"} %lld\n"
               "moestream_requests_total{endpoint=\"messages\"} %lld\n"
               "moestream_requests_total{endpoint=\"count_tokens\"} %lld\n"
               "moestream_requests_total{endpoint=\"ollama_chat\"} %lld\n"
               "moestream_requests_total{endpoint=\"ollama_generate\"} %lld\n",
            LOAD(sv->m_requests[SRV_CHAT]), LOAD(sv->m_requests[SRV_COMPLETION]),
            LOAD(sv->m_requests[SRV_RESPONSES]), LOAD(sv->m_requests[SRV_MESSAGES]),
            LOAD(sv->m_requests[SRV_COUNT_TOKENS]), LOAD(sv->m_requests[SRV_OLLAMA_CHAT]),
            LOAD(sv->m_requests[SRV_OLLAMA_GENERATE]));
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
    fprintf(f, "# HELP moestream_prompt_cache_disk_saved_total Conversations saved to disk.\n"
               "# TYPE moestream_prompt_cache_disk_saved_total counter\n"
               "moestream_prompt_cache_disk_saved_total %lld\n"
               "# HELP moestream_prompt_cache_disk_loaded_total Conversations loaded back.\n"
               "# TYPE moestream_prompt_cache_disk_loaded_total counter\n"
               "moestream_prompt_cache_disk_loaded_total %lld\n",
            LOAD(sv->m_spill_saved), LOAD(sv->m_spill_loaded));
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
               "# HELP moestream_expert_hits_total Routed-expert uses served from memory "
               "with no read issued for them.\n"
               "# TYPE moestream_expert_hits_total counter\n"
               "moestream_expert_hits_total %lld\n"
               "# HELP moestream_expert_prefetch_hits_total Routed-expert uses served by a "
               "read a prefetch started.\n"
               "# TYPE moestream_expert_prefetch_hits_total counter\n"
               "moestream_expert_prefetch_hits_total %lld\n"
               "# HELP moestream_expert_misses_total Routed-expert uses read on demand.\n"
               "# TYPE moestream_expert_misses_total counter\n"
               "moestream_expert_misses_total %lld\n"
               "# HELP moestream_disk_read_bytes_total Bytes of experts read from disk.\n"
               "# TYPE moestream_disk_read_bytes_total counter\n"
               "moestream_disk_read_bytes_total %lld\n"
               "# HELP moestream_prefetch_read_bytes_total Of those, bytes read by prefetch.\n"
               "# TYPE moestream_prefetch_read_bytes_total counter\n"
               "moestream_prefetch_read_bytes_total %lld\n"
               "# HELP moestream_prefetch_wasted_bytes_total Bytes prefetched and not used.\n"
               "# TYPE moestream_prefetch_wasted_bytes_total counter\n"
               "moestream_prefetch_wasted_bytes_total %lld\n"
               "# HELP moestream_io_wait_seconds_total Seconds spent waiting for expert reads.\n"
               "# TYPE moestream_io_wait_seconds_total counter\n"
               "moestream_io_wait_seconds_total %.6f\n"
               "# HELP moestream_weight_read_bytes_total Bytes of weights the products read.\n"
               "# TYPE moestream_weight_read_bytes_total counter\n"
               "moestream_weight_read_bytes_total %lld\n"
               "# HELP moestream_uptime_seconds Seconds since the server started.\n"
               "# TYPE moestream_uptime_seconds gauge\nmoestream_uptime_seconds %.3f\n",
            (long long)st.expert_requests, (long long)st.expert_hits,
            (long long)st.expert_prefetch_hits, (long long)st.expert_misses,
            (long long)st.bytes_read, (long long)st.prefetch_bytes,
            (long long)st.prefetch_wasted_bytes, st.t_io_wait, (long long)ms_weight_bytes_read(),
            cli_now() - sv->t_start);
#undef LOAD
    fclose(f);
    return t;
}

/* The checkpoint's weights on disk (its *.safetensors), in bytes. */
static int64_t weights_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    int64_t n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        struct stat st;
        char path[4096];
        if (len < 12 || strcmp(e->d_name + len - 12, ".safetensors"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!stat(path, &st))
            n += st.st_size;
    }
    if (d)
        closedir(d);
    return n;
}

/* The model as Ollama describes one (its /api/tags entry, /api/show's
 * details): what an Ollama client lists and checks before it chats. */
static json_t *ollama_details(const srv *sv)
{
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format",
                     "safetensors", "family", sv->info->family, "families", sv->info->family,
                     "parameter_size", "", "quantization_level", "");
}

char *srv_ollama_json(const srv *sv, int route_show)
{
    char at[32];
    srv_iso_time(sv->started, at);
    json_t *o;
    if (route_show) {
        char key[96];
        snprintf(key, sizeof key, "%s.context_length", sv->info->family);
        o = json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:I}, s:[s, s, s], s:s}", "modelfile", "",
                      "parameters", "", "template", "", "details", ollama_details(sv),
                      "model_info", "general.architecture", sv->info->family, key,
                      (json_int_t)sv->ctx, "capabilities", "completion", "tools", "thinking",
                      "modified_at", at);
    } else {
        o = json_pack("{s:[{s:s, s:s, s:s, s:I, s:s, s:o}]}", "models", "name", sv->name,
                      "model", sv->name, "modified_at", at, "size",
                      (json_int_t)weights_bytes(sv->model_dir), "digest", "", "details",
                      ollama_details(sv));
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
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

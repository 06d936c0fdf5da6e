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
 *   --read-timeout S a request (headers and body) must arrive within S seconds of its
 *                    connection or of the previous response, else the socket is shut
 *                    (slow clients cannot hold the connections; default 30)
 *   --keepalive S    a stream with nothing to send (queued, long prefill) gets an SSE
 *                    comment line every S seconds (default 10)
 *   -n N             max_tokens when a request gives none (default: up to the context)
 *   --parallel N     N requests decoded together, each in its own slot (session); default
 *                    2 where a second KV cache fits, else 1
 *   --prompt-cache M M more conversations' KV caches kept (idle sessions): a request
 *                    continues the one sharing the longest prefix (default 0)
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipeline.h"
#include "serve.h"

/* ---- the command ------------------------------------------------------------------------ */

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
    cli_args o;
    int rc = cli_parse(CMD_SERVE, argc, argv, &o);
    if (rc)
        return cli_exit(rc);
    const char *host = o.host, *name = o.name, *key = o.api_key;
    if (!key)
        key = getenv("MOESTREAM_API_KEY");
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

    if (pipeline_rank(&o) > 0) { /* another stage of the pipeline: no HTTP here */
        ms_engine *eng = NULL;
        ms_session *s = NULL;
        ms_error err = {0};
        cli_open(&o, &eng, &s, &err); /* serves the stage, then exits */
        return cli_fail(&err);
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
    srv sv = {.access = {.bind = host, .port = (int)o.port, .wildcard = wildcard,
                         .allow = o.allow_host.v, .n_allow = o.allow_host.n, .cors = o.cors.v,
                         .n_cors = o.cors.n},
              .api_key = key, .name = name, .model_dir = o.model,
              .max_body = (size_t)o.max_body,
              .max_tokens_cap = o.max_tokens_cap, .request_timeout = o.request_timeout,
              .t_start = cli_now(), .started = time(NULL), .read_timeout = o.read_timeout,
              .max_queue = (int)o.queue, .keepalive = o.keepalive,
              .timeout = (unsigned)o.timeout, .thinking = o.thinking, .effort = o.effort,
              .ignore_eos = o.ignore_eos, .no_reuse = o.no_reuse, .stats = o.stats,
              .have_seed = cli_given(&o, "--seed"), .default_max_tokens = o.n_predict};
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
    if (!(d = srv_http_start(&sv, host, (int)o.port, &bound, why, sizeof why))) {
        snprintf(err.msg, sizeof err.msg, "cannot listen on %s port %lld: %s", host,
                 (long long)o.port, why);
        goto out;
    }
    sv.access.port = bound;
    fprintf(stderr, "moestream serve: loading %s; /health answers on port %d meanwhile\n",
            o.model, bound);
    o.progress = -1; /* requests' prefills are not a terminal's business */
    if (cli_open(&o, &sv.eng, &sv.s, &err) || ms_tokenizer_open(o.model, &sv.tok, &err) ||
        ms_vocab_index_open(sv.tok, &sv.vocab, &err))
        goto out;
    sv.info = ms_engine_info(sv.eng);
    sv.ctx = ms_session_ctx(sv.s);
    cli_sampling(&o, sv.eng, &sv.sampling);
    sv.slot_s[0] = sv.s;
    sv.n_slots = o.parallel > 0 ? (int)o.parallel : default_slots(ms_session_bytes(sv.s));
    for (int i = 1; i < sv.n_slots; i++) {
        ms_session_opts so = {.ctx = o.ctx};
        if (ms_session_open(sv.eng, &so, &sv.slot_s[i], &err)) {
            snprintf(err.msg + strlen(err.msg), sizeof err.msg - strlen(err.msg),
                     " (slot %d of --parallel %d)", i + 1, sv.n_slots);
            sv.n_slots = i;
            goto out;
        }
    }
    for (int i = 0; i < (int)o.prompt_cache; i++) {
        ms_session_opts so = {.ctx = o.ctx};
        if (ms_session_open(sv.eng, &so, &sv.cache_s[i], &err)) {
            snprintf(err.msg + strlen(err.msg), sizeof err.msg - strlen(err.msg),
                     " (prompt cache %d of %lld)", i + 1, (long long)o.prompt_cache);
            goto out;
        }
        sv.n_cache = i + 1;
    }
    if (o.prompt_cache_disk > 0) {
        char dir[1024];
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (o.prompt_cache_dir)
            snprintf(dir, sizeof dir, "%s", o.prompt_cache_dir);
        else if (xdg && *xdg)
            snprintf(dir, sizeof dir, "%s/moestream/prompt-cache/%s", xdg, sv.name);
        else
            snprintf(dir, sizeof dir, "%s/.cache/moestream/prompt-cache/%s", home ? home : "/tmp",
                     sv.name);
        if (srv_spill_open(&sv, dir, o.prompt_cache_disk, &err))
            goto out;
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
    for (int i = 0; i < sv.n_slots + sv.n_cache; i++) { /* what the next run may continue */
        ms_session *s = i < sv.n_slots ? sv.slot_s[i] : sv.cache_s[i - sv.n_slots];
        int64_t n = 0;
        const int32_t *held = s ? ms_session_ids(s, &n) : NULL;
        if (held)
            srv_spill_save(&sv, s, held, n);
    }
    srv_spill_close(&sv);
    srv_store_free(&sv.store);
    if (rc)
        rc = cli_fail(&err);
    ms_vocab_index_close(sv.vocab);
    ms_tokenizer_close(sv.tok);
    /* the worker may have swapped sessions between slots and caches: close all */
    for (int i = 0; i < sv.n_slots; i++)
        ms_session_close(sv.slot_s[i]);
    for (int i = 0; i < sv.n_cache; i++)
        ms_session_close(sv.cache_s[i]);
    ms_engine_close(sv.eng);
    pthread_cond_destroy(&sv.cv);
    pthread_mutex_destroy(&sv.mu);
    return rc;
}

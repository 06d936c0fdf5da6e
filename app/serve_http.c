/* moestream serve: the HTTP side, on libmicrohttpd with one thread per
 * connection (so a connection may block waiting for its job without holding
 * up any other).
 *
 * Order of checks: Host and Origin (403), the API key (every path but /health
 * and the chat page at /), the path (404), the
 * method (405), the body size (413: announced by Content-Length, or found
 * while reading), then the body itself (400). A non-streaming request waits
 * for its job; a streaming one gets its headers at once and then the SSE
 * bytes the worker appends to the job (MHD_create_response_from_callback).
 * While waiting, the connection's socket is watched: a client that hangs up
 * sets the job's cancel flag, as do the request-completed and content-reader
 * free callbacks when the exchange ends early. */
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "cli.h"
#include "serve.h"

enum route { R_NONE, R_HEALTH, R_MODELS, R_MODEL, R_CHAT, R_COMPLETIONS, R_RESPONSES,
             R_RESPONSE_ID, R_MESSAGES, R_COUNT_TOKENS, R_OLLAMA_CHAT, R_OLLAMA_GENERATE,
             R_OLLAMA_TAGS, R_OLLAMA_SHOW, R_OLLAMA_VERSION, R_METRICS, R_INDEX };

typedef struct conn {
    int route;
    char origin[256];   /* the Origin CORS allows for this request, or "" */
    char *body;
    size_t len, cap;
    int too_large;
    int responded;      /* a response is queued: ignore the rest of the body */
    srv_job *job;
} conn;

/* ---- responses -------------------------------------------------------------------- */

/* The Origin the response of this connection's request allows (CORS), or
 * NULL. Connections have their own threads, so a thread-local suffices. */
static __thread const char *cors_origin;
/* errors in the shape of Anthropic's API or Ollama's (their routes) rather
 * than OpenAI's */
static __thread int anthropic_errors, ollama_errors;

static void add_cors(struct MHD_Response *r)
{
    if (!cors_origin)
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", cors_origin);
    MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_body(struct MHD_Connection *c, int status, char *body,
                                 const char *hdr, const char *val)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (hdr)
        MHD_add_response_header(r, hdr, val);
    add_cors(r);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_err(struct MHD_Connection *c, const srv_err *e, const char *hdr,
                               const char *val)
{
    return send_body(c, e->status,
                     anthropic_errors ? srv_error_json_anthropic(e)
                     : ollama_errors ? srv_error_json_ollama(e) : srv_error_json(e), hdr, val);
}

/* An error response with an optional extra header. */
static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *type,
                            const char *code, const char *hdr, const char *val,
                            const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *type,
                            const char *code, const char *hdr, const char *val,
                            const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_err e;
    srv_fail(&e, status, type, NULL, code, "%s", msg);
    return send_err(c, &e, hdr, val);
}

/* ---- waiting for the worker ------------------------------------------------------------ */

/* The client closed its end (or the socket failed). */
static int peer_gone(int fd)
{
    if (fd < 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits on j->cv (j->mu held) for at most 100 ms. */
static void wait_a_little(srv_job *j)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

static void cancel(srv_job *j)
{
    __atomic_store_n(&j->halt, 1, __ATOMIC_RELAXED);
}

/* Hands MHD the SSE bytes the worker has appended. While there are none (the
 * job is queued, or prefill is long) it blocks, sending an SSE comment every
 * sv->keepalive seconds: the connection then never looks idle to MHD's
 * timeout, and a vanished client shows up as a failed write. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    static const char ping[] = ": keep-alive\n\n";
    (void)pos;
    srv_job *j = cls;
    double since = cli_now();
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out_off < j->out_len) {
            size_t n = j->out_len - j->out_off < max ? j->out_len - j->out_off : max;
            memcpy(buf, j->out + j->out_off, n);
            j->out_off += n;
            if (j->out_off == j->out_len)
                j->out_off = j->out_len = 0;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->finished) {
            pthread_mutex_unlock(&j->mu);
            return j->status == 499 ? MHD_CONTENT_READER_END_WITH_ERROR
                                    : MHD_CONTENT_READER_END_OF_STREAM;
        }
        wait_a_little(j);
        if (j->out_off == j->out_len && !j->finished) {
            if (peer_gone(j->fd)) {
                cancel(j);
                pthread_mutex_unlock(&j->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            if (cli_now() - since >= j->keepalive && max >= sizeof ping - 1) {
                pthread_mutex_unlock(&j->mu);
                memcpy(buf, ping, sizeof ping - 1);
                return (ssize_t)(sizeof ping - 1);
            }
        }
    }
}

static void sse_free(void *cls)
{
    srv_job *j = cls;
    cancel(j); /* no effect once the job is finished */
    srv_job_unref(j);
}

static enum MHD_Result start_stream(struct MHD_Connection *c, srv_job *j)
{
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, j, sse_free);
    if (!r)
        return MHD_NO;
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the response's, dropped by sse_free */
    pthread_mutex_unlock(&j->mu);
    int ndjson = j->req.kind == SRV_OLLAMA_CHAT || j->req.kind == SRV_OLLAMA_GENERATE;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            ndjson ? "application/x-ndjson" : "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    add_cors(r);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result wait_result(struct MHD_Connection *c, srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    while (!j->finished) {
        wait_a_little(j);
        if (!j->finished && peer_gone(j->fd)) {
            cancel(j);
            pthread_mutex_unlock(&j->mu);
            return MHD_NO; /* nobody to answer */
        }
    }
    int status = j->status;
    char *body = j->body;
    j->body = NULL;
    pthread_mutex_unlock(&j->mu);
    if (!body) /* cancelled: shutdown */
        return MHD_NO;
    return send_body(c, status, body, NULL, NULL);
}

/* ---- slow clients: a request must be read within --read-timeout -------------------------
 *
 * A client that sends its headers a line at a time holds a connection (and,
 * with a thread per connection, a thread) for as long as it likes: enough of
 * them and nobody else gets in. Every connection's current request has a
 * deadline, from its connection (or the end of its previous response) to
 * the end of its body; a watchdog shuts the socket of one that passes it.
 * An idle keep-alive connection counts as a request not yet read. */

#define MAX_WATCHED 4096

typedef struct watched { int fd; double since; int reading; } watched;
static watched w_conns[MAX_WATCHED];
static pthread_mutex_t w_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t w_thread;
static volatile int w_stop;
static double w_timeout;

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* reading: 1 a request is being read (the deadline runs), 0 it is in */
static void watch_set(int fd, int reading, int add, int remove)
{
    pthread_mutex_lock(&w_mu);
    for (int i = 0; i < MAX_WATCHED; i++) {
        if (w_conns[i].fd == fd + 1 && fd >= 0) {
            if (remove)
                w_conns[i].fd = 0;
            else {
                w_conns[i].reading = reading;
                w_conns[i].since = cli_now();
            }
            pthread_mutex_unlock(&w_mu);
            return;
        }
    }
    if (add)
        for (int i = 0; i < MAX_WATCHED; i++)
            if (!w_conns[i].fd) {
                w_conns[i] = (watched){fd + 1, cli_now(), 1};
                break;
            }
    pthread_mutex_unlock(&w_mu);
}

static void *watchdog(void *arg)
{
    (void)arg;
    while (!w_stop) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double now = cli_now();
        pthread_mutex_lock(&w_mu);
        for (int i = 0; i < MAX_WATCHED; i++)
            if (w_conns[i].fd && w_conns[i].reading && now - w_conns[i].since > w_timeout) {
                shutdown(w_conns[i].fd - 1, SHUT_RDWR); /* MHD then closes it */
                w_conns[i].reading = 0;
            }
        pthread_mutex_unlock(&w_mu);
    }
    return NULL;
}

static void notify_conn(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    (void)socket_context;
    watch_set(conn_fd(c), 1, toe == MHD_CONNECTION_NOTIFY_STARTED,
              toe == MHD_CONNECTION_NOTIFY_CLOSED);
}

/* ---- requests ------------------------------------------------------------------------------ */

/* OPTIONS: what a page of an allowed origin may send (204), else 403. */
static enum MHD_Result preflight(struct MHD_Connection *c, int cors, const char *req_headers)
{
    if (!cors)
        return fail(c, 403, "invalid_request_error", "origin_not_allowed", NULL, NULL,
                    "Cross-origin requests need --cors ORIGIN.");
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    add_cors(r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            req_headers ? req_headers : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return ret;
}

static int route_of(const char *url, const srv *sv)
{
    if (!strcmp(url, "/health")) return R_HEALTH;
    if (!strcmp(url, "/metrics")) return R_METRICS;
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) return R_INDEX;
    if (!strcmp(url, "/v1/models")) return R_MODELS;
    if (!strncmp(url, "/v1/models/", 11) && !strcmp(url + 11, sv->name)) return R_MODEL;
    if (!strcmp(url, "/v1/chat/completions")) return R_CHAT;
    if (!strcmp(url, "/v1/completions")) return R_COMPLETIONS;
    if (!strcmp(url, "/v1/responses")) return R_RESPONSES;
    if (!strncmp(url, "/v1/responses/", 14) && url[14] && !strchr(url + 14, '/'))
        return R_RESPONSE_ID;
    if (!strcmp(url, "/v1/messages")) return R_MESSAGES;
    if (!strcmp(url, "/v1/messages/count_tokens")) return R_COUNT_TOKENS;
    if (!strcmp(url, "/api/chat")) return R_OLLAMA_CHAT;
    if (!strcmp(url, "/api/generate")) return R_OLLAMA_GENERATE;
    if (!strcmp(url, "/api/tags")) return R_OLLAMA_TAGS;
    if (!strcmp(url, "/api/show")) return R_OLLAMA_SHOW;
    if (!strcmp(url, "/api/version")) return R_OLLAMA_VERSION;
    return R_NONE;
}

static enum MHD_Result get(struct MHD_Connection *c, srv *sv, int route)
{
    char *m = NULL, *body = NULL;
    if (route == R_INDEX) { /* the chat page: static, the API calls it makes need the key */
        struct MHD_Response *r = MHD_create_response_from_buffer(
            strlen(srv_chat_html), (void *)srv_chat_html, MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
        MHD_add_response_header(r, "Content-Security-Policy",
                                "default-src 'self'; style-src 'unsafe-inline'; "
                                "script-src 'unsafe-inline'");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (route == R_METRICS) {
        body = srv_metrics_text(sv);
        if (!body)
            return MHD_NO;
        struct MHD_Response *r =
            MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!r) {
            free(body);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                "text/plain; version=0.0.4; charset=utf-8");
        add_cors(r);
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (route == R_HEALTH) {
        pthread_mutex_lock(&sv->mu);
        int q = sv->n_queued + sv->n_running;
        pthread_mutex_unlock(&sv->mu);
        json_t *o = json_pack("{s:s, s:s, s:i}", "status", "ok", "model", sv->name,
                              "requests_pending", q);
        body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
    } else if (route == R_OLLAMA_TAGS) {
        body = srv_ollama_json(sv, 0);
    } else if (route == R_OLLAMA_VERSION) {
        body = strdup("{\"version\":\"" MS_VERSION "\"}");
    } else if (srv_model_json(sv, &m) == 0) {
        if (route == R_MODEL) {
            body = m;
            m = NULL;
        } else if ((body = malloc(strlen(m) + 40))) {
            sprintf(body, "{\"object\":\"list\",\"data\":[%s]}", m);
        }
    }
    free(m);
    return send_body(c, MHD_HTTP_OK, body, NULL, NULL);
}

/* A note on what of a request is not served, said on stderr the first time
 * its text comes (clients such as Codex send the same hosted tools with
 * every request). */
static void note_once(const srv_job *j, const char *s, int n)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t said[64];
    static int n_said;
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (int i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211u;
    pthread_mutex_lock(&mu);
    int seen = 0;
    for (int i = 0; i < n_said && !seen; i++)
        seen = said[i] == h;
    if (!seen && n_said < 64)
        said[n_said++] = h;
    pthread_mutex_unlock(&mu);
    if (!seen)
        fprintf(stderr, "serve: %s: %.*s (said once)\n", j->id, n, s);
}

/* GET / DELETE /v1/responses/ID: a response kept by the Responses API. */
static enum MHD_Result kept_response(struct MHD_Connection *c, srv *sv, const char *id,
                                     const char *method)
{
    int del = !strcmp(method, "DELETE");
    if (!del && strcmp(method, "GET") && strcmp(method, "HEAD"))
        return fail(c, 405, "invalid_request_error", "method_not_allowed", MHD_HTTP_HEADER_ALLOW,
                    "GET, HEAD, DELETE", "Method %.16s is not allowed on /v1/responses/ID.",
                    method);
    char *body = NULL;
    if (del && srv_store_delete(&sv->store, id)) {
        json_t *o = json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1);
        body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
    } else if (!del) {
        body = srv_store_get(&sv->store, id, 0);
    }
    if (!body)
        return fail(c, 404, "invalid_request_error", "response_not_found", NULL, NULL,
                    "Response with id '%.100s' not found (this server keeps the last %d "
                    "responses, in memory, while it runs).", id, SRV_STORE_MAX);
    return send_body(c, MHD_HTTP_OK, body, NULL, NULL);
}

static enum MHD_Result post(struct MHD_Connection *c, srv *sv, conn *cx)
{
    srv_err e = {0};
    if (cx->too_large)
        return fail(c, 413, "invalid_request_error", "request_too_large", NULL, NULL,
                    "The request body is larger than the limit of %zu bytes.", sv->max_body);
    srv_job *j = cx->job = srv_job_new();
    if (!j)
        return MHD_NO;
    if (cx->route == R_OLLAMA_SHOW) /* one model: its description, whatever the body names */
        return send_body(c, MHD_HTTP_OK, srv_ollama_json(sv, 1), NULL, NULL);
    int kind = cx->route == R_CHAT ? SRV_CHAT : cx->route == R_RESPONSES ? SRV_RESPONSES
             : cx->route == R_MESSAGES ? SRV_MESSAGES
             : cx->route == R_COUNT_TOKENS ? SRV_COUNT_TOKENS
             : cx->route == R_OLLAMA_CHAT ? SRV_OLLAMA_CHAT
             : cx->route == R_OLLAMA_GENERATE ? SRV_OLLAMA_GENERATE : SRV_COMPLETION;
    if (srv_parse_request(kind, cx->body ? cx->body : "", cx->len, &j->req, &e) ||
        srv_prepare(sv, j, &e)) {
        __atomic_add_fetch(&sv->m_rejected, 1, __ATOMIC_RELAXED);
        return send_err(c, &e, NULL, NULL);
    }
    __atomic_add_fetch(&sv->m_requests[j->req.kind], 1, __ATOMIC_RELAXED);
    for (const char *p = j->req.notes, *nl; p && (nl = strchr(p, '\n')); p = nl + 1)
        note_once(j, p, (int)(nl - p));
    if (kind == SRV_COUNT_TOKENS) { /* the prompt's tokens: no generation */
        char *b = malloc(48);
        if (b)
            snprintf(b, 48, "{\"input_tokens\":%lld}", (long long)j->n_ids);
        return send_body(c, MHD_HTTP_OK, b, NULL, NULL);
    }
    free(cx->body); /* the job has what it needs */
    cx->body = NULL;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    j->keepalive = sv->keepalive;
    if (srv_enqueue(sv, j))
        return fail(c, 503, "server_error", "server_busy", NULL, NULL,
                    "The server is busy (%d requests queued, the limit) or stopping; retry "
                    "later.", sv->max_queue);
    return j->req.stream ? start_stream(c, j) : wait_result(c, j);
}

/* MHD's access handler: called once when the headers are in, once per piece
 * of the body, and once more at its end. */
static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version,
                               const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    srv *sv = cls;
    conn *cx = *con_cls;
    if (!cx) { /* headers are in: decide what can be decided now */
        if (!(cx = calloc(1, sizeof *cx)))
            return MHD_NO;
        *con_cls = cx;
        cx->route = route_of(url, sv);
        cx->responded = 1; /* unless the body is to be read */
        cors_origin = NULL;
        anthropic_errors = cx->route == R_MESSAGES || cx->route == R_COUNT_TOKENS;
        ollama_errors = cx->route >= R_OLLAMA_CHAT && cx->route <= R_OLLAMA_VERSION;
        const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (!srv_host_ok(&sv->access, host))
            return fail(c, 403, "invalid_request_error", "host_not_allowed", NULL, NULL,
                        "Host '%.100s' does not name this server (a DNS-rebinding guard); "
                        "start it with --allow-host NAME to accept that name.", host);
        const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
        int cors = 0;
        if (!srv_origin_ok(&sv->access, origin, &cors))
            return fail(c, 403, "invalid_request_error", "origin_not_allowed", NULL, NULL,
                        "Requests from pages of '%.100s' are not allowed; start the server "
                        "with --cors ORIGIN to allow them.", origin);
        if (cors) {
            snprintf(cx->origin, sizeof cx->origin, "%s", origin);
            cors_origin = cx->origin;
        }
        if (__atomic_load_n(&sv->loading, __ATOMIC_ACQUIRE)) {
            if (cx->route == R_HEALTH) {
                char *b = strdup("{\"status\":\"loading\"}");
                return send_body(c, 503, b, MHD_HTTP_HEADER_RETRY_AFTER, "1");
            }
            return fail(c, 503, "server_error", "model_loading", MHD_HTTP_HEADER_RETRY_AFTER,
                        "1", "The model is still loading; retry in a moment.");
        }
        if (!strcmp(method, "OPTIONS")) /* a CORS preflight */
            return preflight(c, cors, MHD_lookup_connection_value(
                                 c, MHD_HEADER_KIND, "Access-Control-Request-Headers"));
        if (cx->route != R_HEALTH && cx->route != R_INDEX && sv->api_key &&
            !srv_auth_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_AUTHORIZATION),
                         sv->api_key) &&
            !srv_key_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"),
                        sv->api_key))
            return fail(c, 401, "invalid_request_error", "invalid_api_key",
                        MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer",
                        "Incorrect or missing API key: send the header 'Authorization: "
                        "Bearer KEY' (or, as Anthropic's clients do, 'x-api-key: KEY').");
        if (cx->route == R_NONE)
            return fail(c, 404, "invalid_request_error", "unknown_url", NULL, NULL,
                        "Invalid URL (%.16s %.200s).", method, url);
        int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        if (cx->route == R_RESPONSE_ID) /* a kept response: GET, DELETE */
            return kept_response(c, sv, url + 14, method);
        int want_post = cx->route == R_CHAT || cx->route == R_COMPLETIONS ||
                        cx->route == R_RESPONSES || cx->route == R_MESSAGES ||
                        cx->route == R_COUNT_TOKENS || cx->route == R_OLLAMA_CHAT ||
                        cx->route == R_OLLAMA_GENERATE || cx->route == R_OLLAMA_SHOW;
        if (want_post ? strcmp(method, "POST") != 0 : !is_get)
            return fail(c, 405, "invalid_request_error", "method_not_allowed",
                        MHD_HTTP_HEADER_ALLOW, want_post ? "POST" : "GET, HEAD",
                        "Method %.16s is not allowed on %s (%s).", method, url,
                        want_post ? "POST" : "GET");
        if (!want_post) {
            watch_set(conn_fd(c), 0, 0, 0);
            return get(c, sv, cx->route);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > sv->max_body) {
            cx->too_large = 1;
            return post(c, sv, cx);
        }
        cx->responded = 0;
        return MHD_YES;
    }
    if (*upload_size) { /* a piece of the body */
        size_t n = *upload_size;
        *upload_size = 0;
        if (cx->too_large || cx->responded)
            return MHD_YES;
        if (cx->len + n > sv->max_body) {
            cx->too_large = 1;
            free(cx->body);
            cx->body = NULL;
            cx->len = cx->cap = 0;
            return MHD_YES;
        }
        if (cx->len + n + 1 > cx->cap) {
            size_t cap = cx->cap ? cx->cap : 4096;
            while (cap < cx->len + n + 1)
                cap *= 2;
            char *p = realloc(cx->body, cap);
            if (!p)
                return MHD_NO;
            cx->body = p;
            cx->cap = cap;
        }
        memcpy(cx->body + cx->len, upload, n);
        cx->len += n;
        return MHD_YES;
    }
    if (cx->responded)
        return MHD_YES;
    cx->responded = 1;
    watch_set(conn_fd(c), 0, 0, 0); /* the request is in */
    return post(c, sv, cx);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    watch_set(conn_fd(c), 1, 0, 0); /* the next request on this connection is awaited */
    conn *cx = *con_cls;
    if (!cx)
        return;
    if (cx->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
            cancel(cx->job);
        srv_job_unref(cx->job);
    }
    free(cx->body);
    free(cx);
    *con_cls = NULL;
}

struct MHD_Daemon *srv_http_start(srv *sv, const char *host, int port, int *bound,
                                  char *why, size_t why_len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *ai = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &ai);
    if (rc) {
        snprintf(why, why_len, "%s", gai_strerror(rc));
        return NULL;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) {
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    }
    freeaddrinfo(ai);
    /* the limit on the body this server reads (see also sv->max_body) */
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, handler, sv,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, completed, sv,
        MHD_OPTION_NOTIFY_CONNECTION, notify_conn, sv,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)sv->timeout,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
        MHD_OPTION_END);
    if (!d) {
        snprintf(why, why_len, "%s", errno ? strerror(errno) : "libmicrohttpd refused to start");
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound = di ? di->port : port;
    w_timeout = sv->read_timeout;
    w_stop = 0;
    if (pthread_create(&w_thread, NULL, watchdog, NULL)) {
        MHD_stop_daemon(d);
        snprintf(why, why_len, "cannot start the connection watchdog");
        return NULL;
    }
    return d;
}

void srv_http_stop(struct MHD_Daemon *d)
{
    w_stop = 1;
    pthread_join(w_thread, NULL);
    MHD_stop_daemon(d);
}

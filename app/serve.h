/* moestream serve: the pieces of the OpenAI-compatible HTTP server.
 *
 *   serve_request.c  request bodies -> srv_request, OpenAI-style error JSON
 *                    (libc + jansson only: the fuzzing harness in tools/fuzz
 *                    links it alone, with serve_responses_request.c)
 *   serve_responses_request.c, serve_messages_request.c, serve_ollama_request.c
 *                    a request of OpenAI's Responses API / Anthropic's Messages
 *                    API / Ollama's API -> the chat request it amounts to
 *   serve_http.c     libmicrohttpd: routing, Host / Origin / API key checks,
 *                    body limit, waiting for results, Server-Sent Events
 *   serve_jobs.c     jobs and their queue; preparing a request (template,
 *                    tokens, constraints); /v1/models and /metrics
 *   serve_worker.c   the worker: parallel slots decoded in batched steps, and
 *                    the OpenAI responses (chunks, tool calls, logprobs)
 *   serve_responses.c, serve_messages.c, serve_ollama.c
 *                    a generation as Responses API items / Messages API content
 *                    blocks / Ollama's lines, and their events (srv_out_api)
 *   serve_store.c    Responses API responses kept (previous_response_id)
 *   cmd_serve.c      the command: options, engine, sessions, start and stop
 * Dependencies point one way: cmd_serve -> serve_http, serve_worker ->
 * serve_responses, serve_messages, serve_ollama, serve_store -> serve_jobs ->
 * serve_request -> serve_responses_request, serve_messages_request,
 * serve_ollama_request.
 */
#ifndef MS_APP_SERVE_H
#define MS_APP_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "moestream.h"

/* ---- requests (serve_request.c) --------------------------------------------- */

/* The endpoint a request came to: OpenAI's chat completions, completions and
 * Responses API, Anthropic's Messages API and its token count, Ollama's chat
 * and generate. */
enum srv_kind {
    SRV_CHAT, SRV_COMPLETION, SRV_RESPONSES, SRV_MESSAGES, SRV_COUNT_TOKENS, SRV_OLLAMA_CHAT,
    SRV_OLLAMA_GENERATE, SRV_N_KINDS
};

/* An error as OpenAI reports it: HTTP status and the four fields of
 * {"error": {"message", "type", "param", "code"}}; param and code may be
 * empty (then null). */
typedef struct srv_err {
    int status;
    char message[512];
    const char *type;      /* "invalid_request_error", "server_error", ... */
    char param[160];
    const char *code;      /* NULL or e.g. "context_length_exceeded" */
} srv_err;

typedef struct srv_msg {
    char *role, *content, *reasoning;
} srv_msg;

#define SRV_MAX_STOP 16

typedef struct srv_request {
    int kind;                    /* enum srv_kind */
    srv_msg *msgs;               /* chat */
    int n_msgs;
    char *prompt;                /* completions */
    char *model;                 /* as sent (not checked), or NULL */
    int64_t max_tokens;          /* -1: not given */
    int have_temperature, have_top_p, have_top_k, have_seed, have_presence, have_frequency;
    double temperature, top_p, presence_penalty, frequency_penalty;
    int64_t top_k;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];    /* non-empty stop sequences */
    int n_stop;
    int stream, include_usage;
    int ignore_eos;              /* vLLM's extension */
    int thinking;                /* chat_template_kwargs.enable_thinking; -1 default */
    char *reasoning_effort;      /* "low", "medium", "high", or NULL */
    int have_min_p, have_repeat;
    double min_p, repeat_penalty; /* extensions (llama.cpp / vLLM names) */
    char *chat_json;             /* chat: {"messages", "tools"?, "chat_template_kwargs"?}
                                  * as the template renders it */
    char *tools_json;            /* the tools offered (rendered), or NULL */
    int logprobs, top_logprobs;  /* logprobs asked; alternatives per token (0..20) */
    int json_mode;               /* response_format: 0 text, 1 json_object, 2 json_schema */
    char *json_schema;           /* json_schema: the schema as JSON text */
    int force_tool;              /* tool_choice: 1 "required", 2 a named function */
    char *force_name;            /* the named function */
    char *echo_json;             /* responses: the request's fields a response object repeats */
    char *names_json;            /* responses: namespaced tools' flat names -> their parts */
    char *instructions;          /* responses: instructions, or NULL */
    char *previous_id;           /* responses: previous_response_id, or NULL */
    int store;                   /* responses: keep the response (OpenAI's default) */
    char *notes;                 /* what of the request is not served, a line each (or NULL) */
    int reasoning_summary;       /* responses: reasoning.summary asked (the reasoning is its
                                  * own summary: there is no summarizer) */
} srv_request;

/* Parses and validates a request body of /v1/chat/completions (SRV_CHAT),
 * /v1/completions (SRV_COMPLETION), or of another API read as the chat
 * request it amounts to: /v1/responses (SRV_RESPONSES,
 * srv_responses_to_chat), /v1/messages (SRV_MESSAGES, SRV_COUNT_TOKENS,
 * srv_messages_to_chat), /api/chat and /api/generate (SRV_OLLAMA_*,
 * srv_ollama_to_chat). Fields of the OpenAI API this server does not
 * implement are refused with a 400 naming them; fields clients send by
 * habit whose absence of effect changes nothing (user, metadata, store,
 * parallel_tool_calls, service_tier, ...) and fields unknown to the API are
 * ignored. Chat messages are normalized for the chat template: content
 * parts joined, a null content "", tool-call arguments sent as a JSON
 * string parsed into the object templates expect, reasoning_content also
 * given as "thinking" (gpt-oss's name), a tool without a description given
 * "". Malformed JSON, wrong types, values out of range and missing required fields fill *e
 * (status 400) and return -1. On success *r owns its strings; free it with
 * srv_request_free (also safe after a failure). */
int srv_parse_request(int kind, const char *body, size_t len, srv_request *r, srv_err *e);
void srv_request_free(srv_request *r);
/* Adds a line to r->notes (said on stderr, once per text); -1 out of memory. */
int srv_note(srv_request *r, const char *line);

/* serve_responses_request.c: a Responses API request as a chat-completions
 * request (*chat), or -1 with *e naming the field of the Responses request
 * that cannot be served. *meta: {"echo": the fields a response object
 * repeats, "namespaces": {flat tool name: {"namespace", "name"}}, "notes":
 * [what was not offered to the model, and why]}. *chat and *meta are the
 * caller's to free, also after a failure. */
typedef struct json_t json_t;
int srv_responses_to_chat(const json_t *root, json_t **chat, json_t **meta, srv_err *e);
/* The messages a Responses request renders: its instructions (a system
 * message), the kept conversation it continues (prev: a JSON array, or
 * NULL), its own messages, the leading system messages joined into one
 * (templates such as gpt-oss's take only the first as the system prompt).
 * r->chat_json is replaced; *conversation gets prev + its own messages,
 * instructions aside (malloc'd). -1 with *e on failure. */
int srv_responses_compose(srv_request *r, const char *prev, char **conversation, srv_err *e);
/* A namespaced tool's name as the model sees it, NAMESPACE__NAME (as Codex
 * flattens them); NAME without a namespace (ns NULL). NULL out of memory. */
json_t *srv_flat_name(const char *ns, const char *name);

/* serve_messages_request.c: an Anthropic Messages API request as a chat
 * request (count_only: for /v1/messages/count_tokens, max_tokens not
 * needed), or -1 with *e naming the field; *chat is the caller's to free. */
int srv_messages_to_chat(const json_t *root, int count_only, json_t **chat, srv_err *e);
/* serve_ollama_request.c: an Ollama /api/chat (generate 0) or /api/generate
 * request as a chat request, or -1 with *e; *chat is the caller's to free. */
int srv_ollama_to_chat(const json_t *root, int generate, json_t **chat, srv_err *e);

/* Content parts' text (objects whose "type" is one of types, their text
 * under "text", or "refusal" for a refusal part) joined with newlines, as
 * a JSON string (a string as it is); a 400 naming the part otherwise. */
int srv_parts_text(const json_t *v, const char *param, const char *const *types, json_t **out,
                   srv_err *e);

/* Helpers the request parsers share: a present, non-null member of an
 * object (NULL otherwise); a 400 "invalid_type" for param. */
json_t *srv_member(const json_t *o, const char *key);
int srv_bad_type(srv_err *e, const char *param, const char *want, const json_t *v);

/* Fills *e; returns -1 (for `return srv_fail(...)`). */
int srv_fail(srv_err *e, int status, const char *type, const char *param, const char *code,
             const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {...}} as a malloc'd string; srv_error_json_anthropic, _ollama:
 * in the shape of Anthropic's API, Ollama's (their routes answer so). */
char *srv_error_json(const srv_err *e);
char *srv_error_json_anthropic(const srv_err *e);
char *srv_error_json_ollama(const srv_err *e);

/* Constant-time check of an "Authorization" header value against
 * "Bearer KEY" (the scheme in any case); 1 when it matches. */
int srv_auth_ok(const char *header, const char *key);
/* The same check of a bare key (Anthropic's "x-api-key" header). */
int srv_key_ok(const char *value, const char *key);

/* Who may talk to the server from a browser. DNS rebinding makes a page of
 * any site reach a loopback server under the site's own name, so the Host a
 * request names must be this server's; a page of another origin may not use
 * the API unless --cors lets it. */
typedef struct srv_access {
    const char *bind;          /* the --host address */
    int port;                  /* the bound port */
    int wildcard;              /* bound to every address (0.0.0.0, ::) */
    const char *const *allow;  /* --allow-host names */
    int n_allow;
    const char *const *cors;   /* --cors origins ("*": any) */
    int n_cors;
} srv_access;

/* 1 when the Host header names this server: localhost, 127.0.0.1, [::1], the
 * bound address or an --allow-host name, any port; no header (not a
 * browser) is accepted, and so is any name when bound to every address
 * without --allow-host. */
int srv_host_ok(const srv_access *a, const char *host);
/* 1 when a page of that Origin may use the API: no Origin (not a browser
 * page), the server's own origin, or one --cors names (*cors set then: the
 * response carries the CORS headers). */
int srv_origin_ok(const srv_access *a, const char *origin, int *cors);

/* ---- the server (cmd_serve.c, serve_http.c) ---------------------------------------- */

typedef struct srv srv;
typedef struct srv_job srv_job;

/* A generation request on its way through the queue. Shared by the
 * connection that made it, its SSE response and the worker; freed by the
 * last of them (srv_job_unref). */
struct srv_job {
    srv_request req;
    int32_t *ids;              /* the prompt */
    int64_t n_ids;
    int opens_reasoning;       /* the rendered prompt ends inside reasoning ("<think>") */
    char id[48];               /* "chatcmpl-..." / "cmpl-..." / "resp_..." / "msg_..." */
    char *conversation;        /* responses: the messages before the answer, instructions
                                * aside (what is stored with it) */
    int64_t created;
    double t_start;
    int fd;                    /* the client's socket, to notice a hang-up */
    double keepalive;          /* seconds between SSE comments while nothing comes */
    volatile int halt;         /* ms_generate's cancel flag: hang-up, stop sequence, shutdown */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* guarded by mu */
    int refs;
    int finished;              /* the worker is done with it */
    char *out;                 /* stream: SSE bytes not yet sent */
    size_t out_len, out_off, out_cap;
    int status;                /* non-stream: HTTP status and body once finished */
    char *body;
    srv_job *next;             /* queue link (the server's lock) */
};

#define SRV_MAX_SLOTS 16 /* the ranges of --parallel and --prompt-cache in options.c */

/* Prompt caches on disk (serve_spill.c). */
#define SRV_SPILL_MAX 256
typedef struct srv_spilled {
    char path[1100];
    int32_t *ids;
    int64_t n, bytes;
    double t;                  /* saved (cli_now), for the least recently used */
    int64_t write;             /* its file's number in the writer's queue; -1: on disk */
} srv_spilled;
/* A conversation's image (ms_session_image) waiting for the writer thread. */
typedef struct srv_spill_job {
    char path[1100];
    void *data;
    size_t bytes;
    struct srv_spill_job *next;
} srv_spill_job;
typedef struct srv_spill {
    char dir[1024];
    int64_t budget, bytes;     /* budget 0: off */
    int64_t seq;
    srv_spilled e[SRV_SPILL_MAX];
    int n;
    /* the writer thread (not with a pipeline, whose stages write their own
     * parts: there the worker writes): files written in queue order */
    int async;
    pthread_t writer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_spill_job *head, *tail;
    int queued;                /* images in the queue */
    int64_t queued_n, done_n;  /* writes queued / finished so far */
    int closing;
} srv_spill;

/* serve_store.c: responses kept for previous_response_id and GET / DELETE
 * /v1/responses/ID; the oldest go first beyond either bound. */
#define SRV_STORE_MAX 256
#define SRV_STORE_BYTES ((size_t)64 << 20)
typedef struct srv_store {
    struct srv_stored *e;
    int n;
    size_t bytes;
} srv_store;
/* Keeps a response (takes both strings). */
void srv_store_put(srv_store *st, const char *id, char *conversation, char *response);
/* A copy of a kept response's conversation (conversation 1) or response
 * object (0); NULL when it is not kept. */
char *srv_store_get(srv_store *st, const char *id, int conversation);
/* 1 when it was kept (and is now dropped). */
int srv_store_delete(srv_store *st, const char *id);
void srv_store_free(srv_store *st);

struct srv {
    srv_access access;
    ms_engine *eng;
    ms_vocab_index *vocab;     /* for constrained decoding, built at start */
    ms_session *s;             /* slot 0's session */
    ms_session *slot_s[SRV_MAX_SLOTS]; /* one session (KV cache) per parallel slot */
    int n_slots;
    ms_session *cache_s[SRV_MAX_SLOTS]; /* idle sessions kept as prompt caches */
    int n_cache;
    ms_session *used_s[2 * SRV_MAX_SLOTS]; /* when each session last took a job */
    double used_t[2 * SRV_MAX_SLOTS];
    int64_t used_p[2 * SRV_MAX_SLOTS];   /* and the length of that job's prompt */
    int n_used;
    ms_tokenizer *tok;
    const ms_model_info *info;
    const char *name;          /* the model id in responses */
    const char *model_dir;     /* the checkpoint folder */
    time_t started;            /* wall clock at start */
    const char *api_key;       /* NULL: no authentication */
    size_t max_body;
    int max_queue;
    double keepalive;          /* SSE comment interval while a stream waits, seconds */
    unsigned timeout;          /* idle connections are closed after that many seconds */
    double read_timeout;       /* a request must be read within that many seconds */
    int64_t ctx;
    /* defaults from the command line */
    ms_sampling sampling;
    int64_t default_max_tokens; /* -1: up to the context */
    int thinking, ignore_eos, no_reuse, stats, have_seed;
    const char *effort;
    /* the queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *head, *tail;
    srv_job *running[SRV_MAX_SLOTS]; /* the jobs in the slots (NULL: free) */
    int n_queued, n_running;
    int stopping;              /* shutting down: refuse new work, end the worker */
    int loading;               /* the model is loading: only /health answers (503) */
    uint64_t counter;          /* request ids */
    int64_t max_tokens_cap;    /* 0: none */
    double request_timeout;    /* seconds a generation may run; 0: no limit */
    double t_start;
    srv_spill spill;           /* the worker's */
    srv_store store;           /* responses kept (Responses API) */
    /* counters for /metrics (atomic) */
    int64_t m_requests[SRV_N_KINDS], m_rejected, m_prompt_tokens, m_cached_tokens,
            m_completion_tokens, m_steps, m_rows, m_finished, m_cancelled, m_timeouts,
            m_spill_saved, m_spill_loaded;
};

/* serve_spill.c: prompt caches on disk within `budget` bytes under dir
 * (budget 0: off); the files already there are indexed. */
int srv_spill_open(srv *sv, const char *dir, int64_t budget, ms_error *err);
void srv_spill_close(srv *sv);
/* Saves a session holding ids[0, n) (short ones are not worth it): its
 * image is taken at once and written by the writer thread. */
void srv_spill_save(srv *sv, ms_session *s, const int32_t *ids, int64_t n);
/* The saved conversation sharing the longest prefix with the prompt (at
 * least a short conversation's worth); -1 when none (*shared: the ids it
 * shares; the session is cut back to them when the prompt goes on
 * differently). */
int srv_spill_find(const srv *sv, const int32_t *ids, int64_t n, int64_t *shared);
/* Loads entry k into s and forgets the file; 0, or -1 (said on stderr). */
int srv_spill_take(srv *sv, int k, ms_session *s);

/* The chat page served at / (app/web/chat.html, embedded at build time). */
extern const char srv_chat_html[];

/* Prometheus text for /metrics (malloc'd). */
char *srv_metrics_text(srv *sv);

/* Text as a JSON string; bytes that are not UTF-8 (never expected: the
 * streaming decoder emits whole characters) become U+FFFD. */
json_t *srv_json_text(const char *s, size_t n);
/* Appends d's text to the string o[key] ("" when there is none yet). */
void srv_json_append(json_t *o, const char *key, const json_t *d);
/* A UTC time as ISO 8601, 2026-12-07T21:46:27Z. */
void srv_iso_time(time_t t, char at[32]);

/* The request's thinking switch, else the server's default. */
int srv_job_thinking(const srv *sv, const srv_job *j);
/* The grammar a request asks for (forced tool call, response_format), or
 * *g NULL; -1 with err when it cannot be built (the request is refused). */
int srv_constrain(srv *sv, srv_job *j, ms_grammar **g, ms_error *err);

srv_job *srv_job_new(void);
void srv_job_unref(srv_job *j);
/* Appends SSE bytes for the connection (worker side). */
void srv_job_emit(srv_job *j, const char *s, size_t n);
/* Marks the job finished (non-stream: with its status and body, taken). */
void srv_job_finish(srv_job *j, int status, char *body);

/* Queues a job (takes a reference); -1 when the queue is full or the server
 * is stopping. */
int srv_enqueue(srv *sv, srv_job *j);
/* The worker thread: runs jobs in order until sv->stopping. */
void *srv_worker(void *arg);
/* Renders (chat) or takes (completions) the prompt and tokenizes it; checks
 * it against the context. Thread-safe: runs on the connection's thread. */
int srv_prepare(srv *sv, srv_job *j, srv_err *e);
int srv_model_json(const srv *sv, char **out);
/* Ollama's /api/tags (show 0) or /api/show (show 1) answer (malloc'd). */
char *srv_ollama_json(const srv *sv, int show);

/* An answer in an API of typed parts (OpenAI's Responses, Anthropic's
 * Messages): reasoning, text and tool calls become the API's items or
 * content blocks as they come, sent as its events when streaming, and the
 * whole answer at the end. The worker calls one table of functions per
 * API (serve_responses.c, serve_messages.c) with the same text and calls
 * the chat API gets. */
typedef struct srv_out srv_out;
typedef struct srv_out_end {
    const char *finish;        /* "stop", "length", "tool_calls" */
    const char *stop;          /* the stop sequence that ended it, or NULL */
    int64_t n_prompt, cached, n_gen;
} srv_out_end;
typedef struct srv_out_api {
    /* streamed: the opening events */
    void (*start)(srv_out *o);
    /* text of a channel (enum ms_chat_channel): a new part when it changes */
    void (*text)(srv_out *o, int chan, const char *s, size_t n);
    /* tool calls in the chat API's form ({"id", "function": {"name",
     * "arguments"}}), each a part of its own */
    void (*calls)(srv_out *o, const json_t *calls);
    /* the end: streamed, the closing events and NULL; else the body */
    char *(*end)(srv_out *o, const srv_out_end *e);
    /* streamed: an error event carrying srv_error_json's error */
    void (*fail)(srv_out *o, const char *error_json);
} srv_out_api;
extern const srv_out_api srv_responses_api, srv_messages_api, srv_ollama_api;

struct srv_out {
    const srv_out_api *api;
    const srv *sv;
    srv_job *j;
    int stream;
    json_t *parts;             /* the items / content blocks so far */
    int open;                  /* the kind of the part text goes to (0: none) */
    int summary;               /* responses: reasoning also as its summary */
    json_t *final;             /* responses: the response object, once ended */
    /* responses: called with the final object before the client can see the
     * end (to keep it before a next request can name it) */
    void (*on_final)(srv_out *o, void *ctx);
    void *ctx;
    int64_t seq;               /* responses: the next event's sequence_number */
    double t_first;            /* when the first token was sampled (cli_now; the worker's) */
};
void srv_out_init(srv_out *o, const srv_out_api *api, const srv *sv, srv_job *j, int stream);
void srv_out_free(srv_out *o);
/* Sends an event: `event: type` and its data (taken), as both APIs frame
 * them. */
void srv_out_event(srv_out *o, const char *type, json_t *data);
/* serve_responses.c: the answer as the chat assistant message the template
 * renders when the conversation goes on (text, reasoning, tool calls). */
json_t *srv_responses_answer(const srv_out *o);


/* serve_http.c: starts libmicrohttpd on host:port (port 0: any free port;
 * *bound gets the port). */
struct MHD_Daemon;
struct MHD_Daemon *srv_http_start(srv *sv, const char *host, int port, int *bound,
                                  char *why, size_t why_len);
void srv_http_stop(struct MHD_Daemon *d);

#endif

/* Front-end helpers: errors, option values, id files. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int cli_fail(const ms_error *err)
{
    fprintf(stderr, "moestream: %s\n", err->msg);
    return err->code == MS_E_ARG ? 2 : 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "moestream %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (moestream %s --help lists the options)\n", cmd);
    return 2;
}

/* The progress line on stderr: showing while a step runs, erased when it is
 * done or when a notice is printed. */
static int progress_shown;

void cli_log(void *user, const char *line)
{
    (void)user;
    if (progress_shown) {
        fputs("\r\033[K", stderr);
        progress_shown = 0;
    }
    fprintf(stderr, "moestream: %s\n", line);
}

static void print_progress(void *user, const ms_progress *p)
{
    static double last;
    (void)user;
    if (p->done >= p->total) {
        if (progress_shown)
            fputs("\r\033[K", stderr);
        progress_shown = 0;
        last = 0;
        fflush(stderr);
        return;
    }
    if (progress_shown && p->seconds - last < 0.1 && p->seconds >= last)
        return; /* ten updates a second at most */
    last = p->seconds;
    double rate = p->seconds > 0 ? (double)p->done / p->seconds : 0;
    if (!strcmp(p->what, "prefill"))
        fprintf(stderr, "\r\033[Kprefill: %lld / %lld tokens (%.1f tok/s)", (long long)p->done,
                (long long)p->total, rate);
    else
        fprintf(stderr, "\r\033[K%s: %.2f / %.2f GB (%.0f MB/s)", p->what, p->done / 1e9,
                p->total / 1e9, rate / 1e6);
    fflush(stderr);
    progress_shown = 1;
}

ms_progress_fn cli_progress(int force)
{
    return force || isatty(2) ? print_progress : NULL;
}

int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_f64(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

int cli_read_text(const char *path, char **text, ms_error *err)
{
    const size_t max = (size_t)64 << 20;
    if (strcmp(path, "-") != 0)
        return ms_read_input(path, max, text, NULL, err);
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 == cap) {
            char *p = cap < max ? realloc(buf, cap * 2) : NULL;
            if (!p) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, stdin);
        n += got;
        if (got == 0)
            break;
    }
    if (!buf || ferror(stdin)) {
        free(buf);
        snprintf(err->msg, sizeof err->msg, "standard input: %s", buf ? "read error" :
                 "more than 64 MB (or out of memory)");
        err->code = MS_E_IO;
        return -1;
    }
    buf[n] = 0;
    *text = buf;
    return 0;
}

int cli_read_ids(const char *path, int32_t **ids, int64_t *n, ms_error *err)
{
    char *text = NULL;
    *ids = NULL;
    *n = 0;
    if (ms_read_input(path, (size_t)256 << 20, &text, NULL, err))
        return -1;
    int64_t cap = 0;
    int rc = 0;
    for (char *save = NULL, *tok = strtok_r(text, " \t\r\n", &save); tok;
         tok = strtok_r(NULL, " \t\r\n", &save)) {
        int64_t v;
        if (cli_parse_i64(tok, 0, INT32_MAX, &v)) {
            snprintf(err->msg, sizeof err->msg, "%s: token %lld is \"%.40s\", expected a "
                     "non-negative decimal id", path, (long long)*n, tok);
            err->code = MS_E_ARG;
            rc = -1;
            break;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 256;
            int32_t *p = realloc(*ids, sizeof *p * (size_t)cap);
            if (!p) {
                snprintf(err->msg, sizeof err->msg, "out of memory reading %s", path);
                err->code = MS_E_NOMEM;
                rc = -1;
                break;
            }
            *ids = p;
        }
        (*ids)[(*n)++] = (int32_t)v;
    }
    free(text);
    if (rc == 0 && *n == 0) {
        snprintf(err->msg, sizeof err->msg, "%s: no token ids in the file", path);
        err->code = MS_E_ARG;
        rc = -1;
    }
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}

/* The messages as an OpenAI request body; an answer's reasoning goes under
 * both names templates read it by (reasoning_content: Qwen3, DeepSeek;
 * thinking: gpt-oss). */
static char *request_json(const ms_chat_msg *m, int n)
{
    json_t *msgs = json_array();
    for (int i = 0; i < n; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "role", json_string(m[i].role));
        json_object_set_new(e, "content", json_string(m[i].content ? m[i].content : ""));
        if (m[i].reasoning) {
            json_object_set_new(e, "reasoning_content", json_string(m[i].reasoning));
            json_object_set_new(e, "thinking", json_string(m[i].reasoning));
        }
        json_array_append_new(msgs, e);
    }
    json_t *req = json_object();
    json_object_set_new(req, "messages", msgs);
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    return s;
}

int cli_chat_prompt_json(const ms_engine *eng, const char *request_json, int thinking,
                         const char *effort, char **text, ms_error *err)
{
    static int said;
    if (!ms_engine_chat_template(eng) && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "moestream: the model folder has no chat template (no "
                "chat_template.jinja, no chat_template in tokenizer_config.json): using the "
                "built-in %s format\n", ms_engine_info(eng)->family);
    ms_template_opts to = {.add_generation_prompt = 1, .thinking = thinking,
                           .reasoning_effort = effort};
    return ms_chat_prompt(eng, request_json, &to, text, err);
}

int cli_chat_prompt(const ms_engine *eng, const ms_chat_msg *m, int n, int thinking,
                    const char *effort, char **text, ms_error *err)
{
    char *req = request_json(m, n);
    if (!req) {
        snprintf(err->msg, sizeof err->msg, "out of memory building the chat request");
        err->code = MS_E_NOMEM;
        return -1;
    }
    int rc = cli_chat_prompt_json(eng, req, thinking, effort, text, err);
    free(req);
    return rc;
}


double cli_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void cli_synthetic_prompt(int32_t *ids, int64_t n, int32_t vocab)
{
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)(vocab > 256 ? vocab - 256 : vocab));
    }
}

int cli_buf_add(cli_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

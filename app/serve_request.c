/* moestream serve: request bodies into srv_request, and OpenAI-style errors.
 *
 * Only libc and jansson: tools/fuzz/fuzz_request.c links this file alone.
 * Field rules follow the OpenAI API reference: unknown fields are ignored,
 * null is the same as absent, numbers are range-checked, and every refusal
 * names the offending parameter. */
#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

int srv_fail(srv_err *e, int status, const char *type, const char *param, const char *code,
             const char *fmt, ...)
{
    va_list ap;
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

char *srv_error_json(const srv_err *e)
{
    /* the message may quote what the client sent (a URL): bytes that are not
     * UTF-8 text become '?' */
    char msg[sizeof e->message];
    snprintf(msg, sizeof msg, "%s", e->message);
    json_t *m = json_string(msg);
    if (!m) {
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        m = json_string(msg);
    }
    json_t *o = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", m,
                          "type", e->type ? e->type : "invalid_request_error",
                          "param", e->param[0] ? json_string(e->param) : json_null(),
                          "code", e->code ? json_string(e->code) : json_null());
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        s = strdup("{\"error\":{\"message\":\"internal error\",\"type\":\"server_error\","
                   "\"param\":null,\"code\":null}}");
    return s;
}

int srv_auth_ok(const char *header, const char *key)
{
    static const char bearer[] = "Bearer ";
    if (!header || strncmp(header, bearer, sizeof bearer - 1) != 0)
        return 0;
    const char *got = header + sizeof bearer - 1;
    while (*got == ' ')
        got++;
    size_t n = strlen(got), k = strlen(key);
    while (n > 0 && isspace((unsigned char)got[n - 1]))
        n--;
    unsigned diff = (unsigned)(n != k);
    for (size_t i = 0; i < k; i++) /* as long as the key whatever was sent */
        diff |= (unsigned)(unsigned char)key[i] ^ (unsigned)(unsigned char)(i < n ? got[i] : 0);
    return diff == 0;
}

void srv_request_free(srv_request *r)
{
    for (int i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].role);
        free(r->msgs[i].content);
        free(r->msgs[i].reasoning);
    }
    free(r->msgs);
    free(r->prompt);
    free(r->model);
    free(r->reasoning_effort);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* ---- typed fields ------------------------------------------------------------- */

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int bad_type(srv_err *e, const char *param, const char *want, const json_t *v)
{
    return srv_fail(e, 400, "invalid_request_error", param, "invalid_type",
                    "Invalid type for '%s': expected %s, but got %s instead.", param, want,
                    type_name(v));
}

/* A present, non-null member (NULL otherwise). */
static json_t *member(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_number(const json_t *o, const char *key, double lo, double hi, int *have,
                      double *out, srv_err *e)
{
    json_t *v = member(o, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return bad_type(e, key, "a number", v);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return srv_fail(e, 400, "invalid_request_error", key, "invalid_value",
                        "Invalid value for '%s': expected a number between %g and %g, got %g.",
                        key, lo, hi, d);
    *out = d;
    *have = 1;
    return 0;
}

static int get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int *have,
                   int64_t *out, srv_err *e)
{
    json_t *v = member(o, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return bad_type(e, key, "an integer", v);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return srv_fail(e, 400, "invalid_request_error", key, "invalid_value",
                        "Invalid value for '%s': expected an integer between %lld and %lld, "
                        "got %lld.", key, (long long)lo, (long long)hi, (long long)i);
    *out = i;
    *have = 1;
    return 0;
}

static int get_bool(const json_t *o, const char *key, int *out, srv_err *e)
{
    json_t *v = member(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return bad_type(e, key, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

static int dup_string(const json_t *v, char **out, srv_err *e)
{
    if (!(*out = strdup(json_string_value(v))))
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* A message's content: a string, null (empty), or an array of parts of which
 * only {"type": "text", "text": ...} are understood (joined with newlines). */
static int get_content(const json_t *v, const char *param, char **out, srv_err *e)
{
    char sub[160];
    if (!v || json_is_null(v)) {
        *out = strdup("");
    } else if (json_is_string(v)) {
        return dup_string(v, out, e);
    } else if (json_is_array(v)) {
        size_t total = 1, n = json_array_size(v);
        for (size_t i = 0; i < n; i++) {
            json_t *part = json_array_get(v, i), *t, *txt;
            snprintf(sub, sizeof sub, "%s[%zu]", param, i);
            if (!json_is_object(part))
                return bad_type(e, sub, "an object", part);
            t = json_object_get(part, "type");
            if (!json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
                return srv_fail(e, 400, "invalid_request_error", sub, "invalid_value",
                                "Invalid content part '%s': only parts of type \"text\" are "
                                "supported.", sub);
            txt = json_object_get(part, "text");
            if (!json_is_string(txt)) {
                snprintf(sub, sizeof sub, "%s[%zu].text", param, i);
                return bad_type(e, sub, "a string", txt ? txt : json_null());
            }
            total += json_string_length(txt) + 1;
        }
        char *s = malloc(total), *p = s;
        if (!s)
            return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *txt = json_object_get(json_array_get(v, i), "text");
            size_t len = json_string_length(txt);
            if (i)
                *p++ = '\n';
            memcpy(p, json_string_value(txt), len);
            p += len;
        }
        *p = 0;
        *out = s;
    } else {
        return bad_type(e, param, "a string or an array of content parts", v);
    }
    if (!*out)
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

static int get_messages(const json_t *root, srv_request *r, srv_err *e)
{
    json_t *ms = member(root, "messages");
    if (!ms)
        return srv_fail(e, 400, "invalid_request_error", "messages", "missing_required_parameter",
                        "Missing required parameter: 'messages'.");
    if (!json_is_array(ms))
        return bad_type(e, "messages", "an array", ms);
    size_t n = json_array_size(ms);
    if (n == 0)
        return srv_fail(e, 400, "invalid_request_error", "messages", "invalid_value",
                        "Invalid value for 'messages': it must hold at least one message.");
    if (n > 100000)
        return srv_fail(e, 400, "invalid_request_error", "messages", "invalid_value",
                        "Invalid value for 'messages': %zu messages, at most 100000.", n);
    if (!(r->msgs = calloc(n, sizeof *r->msgs)))
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(ms, i), *role, *v;
        char param[96];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return bad_type(e, param, "an object", m);
        snprintf(param, sizeof param, "messages[%zu].role", i);
        role = json_object_get(m, "role");
        if (!role)
            return srv_fail(e, 400, "invalid_request_error", param, "missing_required_parameter",
                            "Missing required parameter: '%s'.", param);
        if (!json_is_string(role))
            return bad_type(e, param, "a string", role);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "developer") && strcmp(rs, "user") &&
            strcmp(rs, "assistant"))
            return srv_fail(e, 400, "invalid_request_error", param, "invalid_value",
                            "Invalid value for '%s': \"%.40s\" is not supported (system, "
                            "developer, user, assistant).", param, rs);
        srv_msg *dst = &r->msgs[r->n_msgs++];
        if (dup_string(role, &dst->role, e))
            return -1;
        snprintf(param, sizeof param, "messages[%zu].content", i);
        v = json_object_get(m, "content");
        if (!v && strcmp(rs, "assistant") != 0)
            return srv_fail(e, 400, "invalid_request_error", param, "missing_required_parameter",
                            "Missing required parameter: '%s'.", param);
        if (get_content(v, param, &dst->content, e))
            return -1;
        /* an assistant turn's reasoning, as this server returns it */
        v = member(m, "reasoning_content");
        if (!v)
            v = member(m, "reasoning");
        if (v && strcmp(rs, "assistant") == 0) {
            snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
            if (!json_is_string(v))
                return bad_type(e, param, "a string", v);
            if (dup_string(v, &dst->reasoning, e))
                return -1;
        }
    }
    return 0;
}

static int get_prompt(const json_t *root, srv_request *r, srv_err *e)
{
    json_t *p = member(root, "prompt");
    if (!p)
        return srv_fail(e, 400, "invalid_request_error", "prompt", "missing_required_parameter",
                        "Missing required parameter: 'prompt'.");
    if (json_is_array(p)) {
        if (json_array_size(p) != 1 || !json_is_string(json_array_get(p, 0)))
            return srv_fail(e, 400, "invalid_request_error", "prompt", "invalid_value",
                            "Invalid value for 'prompt': one string (or a list of exactly one "
                            "string) is supported.");
        p = json_array_get(p, 0);
    }
    if (!json_is_string(p))
        return bad_type(e, "prompt", "a string", p);
    return dup_string(p, &r->prompt, e);
}

static int get_stop(const json_t *root, srv_request *r, srv_err *e)
{
    json_t *v = member(root, "stop");
    if (!v)
        return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return 0;
        r->n_stop = 1;
        return dup_string(v, &r->stop[0], e);
    }
    if (!json_is_array(v))
        return bad_type(e, "stop", "a string or an array of strings", v);
    if (json_array_size(v) > SRV_MAX_STOP)
        return srv_fail(e, 400, "invalid_request_error", "stop", "invalid_value",
                        "Invalid value for 'stop': %zu sequences, at most %d.",
                        json_array_size(v), SRV_MAX_STOP);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s)) {
            char param[32];
            snprintf(param, sizeof param, "stop[%zu]", i);
            return bad_type(e, param, "a string", s);
        }
        if (json_string_length(s) == 0)
            continue;
        if (dup_string(s, &r->stop[r->n_stop], e))
            return -1;
        r->n_stop++;
    }
    return 0;
}

static int get_options(const json_t *root, srv_request *r, srv_err *e)
{
    json_t *v;
    int have = 0;
    int64_t iv = 0;
    if ((v = member(root, "model"))) {
        if (!json_is_string(v))
            return bad_type(e, "model", "a string", v);
        if (dup_string(v, &r->model, e))
            return -1;
    }
    /* max_completion_tokens supersedes max_tokens (both accepted) */
    if (get_int(root, "max_tokens", 1, INT32_MAX, &have, &r->max_tokens, e) ||
        get_int(root, "max_completion_tokens", 1, INT32_MAX, &have, &r->max_tokens, e))
        return -1;
    if (get_number(root, "temperature", 0, 2, &r->have_temperature, &r->temperature, e) ||
        get_number(root, "top_p", 0, 1, &r->have_top_p, &r->top_p, e) ||
        get_number(root, "presence_penalty", -2, 2, &r->have_presence, &r->presence_penalty, e) ||
        get_number(root, "frequency_penalty", -2, 2, &r->have_frequency, &r->frequency_penalty,
                   e) ||
        get_int(root, "top_k", 0, INT32_MAX, &r->have_top_k, &r->top_k, e))
        return -1;
    if (get_int(root, "seed", INT64_MIN, INT64_MAX, &r->have_seed, &iv, e))
        return -1;
    r->seed = (uint64_t)iv;
    have = 0;
    if (get_int(root, "n", 1, 1, &have, &iv, e)) {
        if (e->status == 400 && !strcmp(e->code ? e->code : "", "invalid_value"))
            srv_fail(e, 400, "invalid_request_error", "n", "invalid_value",
                     "Invalid value for 'n': only n = 1 is supported.");
        return -1;
    }
    if (get_stop(root, r, e) || get_bool(root, "stream", &r->stream, e) ||
        get_bool(root, "ignore_eos", &r->ignore_eos, e))
        return -1;
    if ((v = member(root, "stream_options"))) {
        if (!json_is_object(v))
            return bad_type(e, "stream_options", "an object", v);
        json_t *u = member(v, "include_usage");
        if (u && !json_is_boolean(u))
            return bad_type(e, "stream_options.include_usage", "a boolean", u);
        r->include_usage = u && json_is_true(u);
    }
    int lp = 0;
    if (get_bool(root, "logprobs", &lp, e))
        return -1;
    if (lp)
        return srv_fail(e, 400, "invalid_request_error", "logprobs", "unsupported_parameter",
                        "Unsupported parameter: 'logprobs' is not supported by this server.");
    if ((v = member(root, "reasoning_effort"))) {
        if (!json_is_string(v))
            return bad_type(e, "reasoning_effort", "a string", v);
        const char *s = json_string_value(v);
        if (strcmp(s, "low") && strcmp(s, "medium") && strcmp(s, "high"))
            return srv_fail(e, 400, "invalid_request_error", "reasoning_effort", "invalid_value",
                            "Invalid value for 'reasoning_effort': expected \"low\", "
                            "\"medium\" or \"high\".");
        if (dup_string(v, &r->reasoning_effort, e))
            return -1;
    }
    if ((v = member(root, "chat_template_kwargs"))) {
        if (!json_is_object(v))
            return bad_type(e, "chat_template_kwargs", "an object", v);
        json_t *t = member(v, "enable_thinking");
        if (t && !json_is_boolean(t))
            return bad_type(e, "chat_template_kwargs.enable_thinking", "a boolean", t);
        if (t)
            r->thinking = json_is_true(t);
    }
    return 0;
}

int srv_parse_request(int kind, const char *body, size_t len, srv_request *r, srv_err *e)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->thinking = -1;
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root)
        return srv_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                        "We could not parse the JSON body of your request: %s (line %d, "
                        "column %d).", je.text, je.line, je.column);
    int rc = -1;
    if (!json_is_object(root))
        srv_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                 "The request body must be a JSON object, got %s.", type_name(root));
    else if ((kind == SRV_CHAT ? get_messages(root, r, e) : get_prompt(root, r, e)) == 0 &&
             get_options(root, r, e) == 0)
        rc = 0;
    json_decref(root);
    return rc;
}

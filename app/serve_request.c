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
#include <strings.h>

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

/* An error's message (after prefix, if any and not already in it) as a JSON
 * string: it may quote what the client sent (a URL), so bytes that are not
 * UTF-8 text become '?'. */
static json_t *message_json(const srv_err *e, const char *prefix)
{
    if (prefix && strstr(e->message, prefix))
        prefix = NULL;
    char msg[sizeof e->message + 200];
    snprintf(msg, sizeof msg, "%s%s%s", prefix ? prefix : "", prefix ? ": " : "", e->message);
    json_t *m = json_string(msg);
    if (!m) {
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        m = json_string(msg);
    }
    return m;
}

/* Ollama's shape: {"error": "message"}, the parameter named in the message. */
char *srv_error_json_ollama(const srv_err *e)
{
    json_t *o = json_pack("{s:o}", "error", message_json(e, e->param[0] ? e->param : NULL));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s ? s : strdup("{\"error\":\"internal error\"}");
}

/* Anthropic's shape: {"type": "error", "error": {"type", "message"}}, the
 * type from the status, the parameter named in the message. */
char *srv_error_json_anthropic(const srv_err *e)
{
    const char *type = e->status == 401 ? "authentication_error"
                     : e->status == 403 ? "permission_error"
                     : e->status == 404 ? "not_found_error"
                     : e->status == 413 ? "request_too_large"
                     : e->status == 429 ? "rate_limit_error"
                     : e->status == 503 ? "overloaded_error"
                     : e->status >= 500 ? "api_error" : "invalid_request_error";
    json_t *o = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type,
                          "message", message_json(e, e->param[0] ? e->param : NULL));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s ? s : strdup("{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":"
                          "\"internal error\"}}");
}

char *srv_error_json(const srv_err *e)
{
    json_t *m = message_json(e, NULL);
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
    if (!header || strncasecmp(header, bearer, sizeof bearer - 1) != 0)
        return 0;
    return srv_key_ok(header + sizeof bearer - 1, key);
}

int srv_key_ok(const char *got, const char *key)
{
    if (!got)
        return 0;
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

/* The name of a Host value ("name", "name:port", "[v6]", "[v6]:port"). */
static size_t host_name(const char *h, const char **name)
{
    *name = h;
    if (h[0] == '[') {
        const char *e = strchr(h, ']');
        return e ? (size_t)(e - h) + 1 : strlen(h);
    }
    const char *c = strchr(h, ':');
    return c ? (size_t)(c - h) : strlen(h);
}

static int same_name(const char *a, size_t n, const char *b)
{
    return strlen(b) == n && strncasecmp(a, b, n) == 0;
}

int srv_host_ok(const srv_access *a, const char *host)
{
    if (!host)
        return 1;
    if (a->wildcard && !a->n_allow)
        return 1;
    const char *name;
    size_t n = host_name(host, &name);
    static const char *const local[] = {"localhost", "127.0.0.1", "[::1]", NULL};
    for (int i = 0; local[i]; i++)
        if (same_name(name, n, local[i]))
            return 1;
    if (a->bind && !a->wildcard) {
        if (same_name(name, n, a->bind))
            return 1;
        if (strchr(a->bind, ':') && n == strlen(a->bind) + 2 && name[0] == '[' &&
            !strncasecmp(name + 1, a->bind, n - 2)) /* "[::1]" for --host ::1 */
            return 1;
    }
    for (int i = 0; i < a->n_allow; i++)
        if (same_name(name, n, a->allow[i]))
            return 1;
    return 0;
}

int srv_origin_ok(const srv_access *a, const char *origin, int *cors)
{
    *cors = 0;
    if (!origin)
        return 1;
    for (int i = 0; i < a->n_cors; i++)
        if (!strcmp(a->cors[i], "*") || !strcasecmp(a->cors[i], origin)) {
            *cors = 1;
            return 1;
        }
    /* the server's own pages: http://HOST:PORT with a HOST of this server */
    const char *h = NULL;
    if (!strncasecmp(origin, "http://", 7))
        h = origin + 7;
    if (!h || !*h || strchr(h, '/'))
        return 0;
    const char *name;
    size_t n = host_name(h, &name);
    long port = h[n] == ':' ? strtol(h + n + 1, NULL, 10) : 80;
    if (port != a->port)
        return 0;
    char *hn = strndup(name, n);
    int ok = hn && srv_host_ok(&(srv_access){.bind = a->bind, .port = a->port,
                                             .allow = a->allow, .n_allow = a->n_allow}, hn);
    free(hn);
    return ok;
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
    free(r->chat_json);
    free(r->tools_json);
    free(r->json_schema);
    free(r->force_name);
    free(r->echo_json);
    free(r->names_json);
    free(r->instructions);
    free(r->previous_id);
    free(r->notes);
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

int srv_bad_type(srv_err *e, const char *param, const char *want, const json_t *v)
{
    return srv_fail(e, 400, "invalid_request_error", param, "invalid_type",
                    "Invalid type for '%s': expected %s, but got %s instead.", param, want,
                    type_name(v));
}

/* A present, non-null member (NULL otherwise). */
json_t *srv_member(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_number(const json_t *o, const char *key, double lo, double hi, int *have,
                      double *out, srv_err *e)
{
    json_t *v = srv_member(o, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return srv_bad_type(e, key, "a number", v);
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
    json_t *v = srv_member(o, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return srv_bad_type(e, key, "an integer", v);
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
    json_t *v = srv_member(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return srv_bad_type(e, key, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

static int dup_string(const json_t *v, char **out, srv_err *e)
{
    if (!(*out = strdup(json_string_value(v))))
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

int srv_parts_text(const json_t *v, const char *param, const char *const *types, json_t **out,
                   srv_err *e)
{
    char sub[160], list[160] = "";
    if (json_is_string(v)) {
        *out = json_incref((json_t *)v);
        return 0;
    }
    if (!json_is_array(v))
        return srv_bad_type(e, param, "a string or an array of content parts", v);
    for (int k = 0; types[k]; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", k ? ", " : "",
                 types[k]);
    size_t n = json_array_size(v), total = 1;
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(v, i), *t;
        snprintf(sub, sizeof sub, "%s[%zu]", param, i);
        if (!json_is_object(p))
            return srv_bad_type(e, sub, "an object", p);
        const char *ty = json_string_value(json_object_get(p, "type"));
        int ok = 0;
        for (int k = 0; ty && types[k]; k++)
            ok |= !strcmp(ty, types[k]);
        if (!ok)
            return srv_fail(e, 400, "invalid_request_error", sub, "invalid_value",
                            "Invalid content part '%s': type \"%.40s\" is not supported here "
                            "(%s).", sub, ty ? ty : "(none)", list);
        const char *key = !strcmp(ty, "refusal") ? "refusal" : "text";
        t = json_object_get(p, key);
        if (!json_is_string(t)) {
            snprintf(sub, sizeof sub, "%s[%zu].%s", param, i, key);
            return srv_bad_type(e, sub, "a string", t ? t : json_null());
        }
        total += json_string_length(t) + 1;
    }
    char *buf = malloc(total), *q = buf;
    if (!buf)
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(v, i);
        json_t *t = json_object_get(p, !strcmp(json_string_value(json_object_get(p, "type")),
                                               "refusal") ? "refusal" : "text");
        if (i)
            *q++ = '\n';
        memcpy(q, json_string_value(t), json_string_length(t));
        q += json_string_length(t);
    }
    *out = json_stringn(buf, (size_t)(q - buf));
    free(buf);
    return *out ? 0 : srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* A message's content: a string, null (empty), or an array of parts of which
 * only {"type": "text", "text": ...} are understood (joined with newlines). */
static int get_content(const json_t *v, const char *param, char **out, srv_err *e)
{
    static const char *const text[] = {"text", NULL};
    json_t *s = NULL;
    if (!v || json_is_null(v))
        *out = strdup("");
    else if (srv_parts_text(v, param, text, &s, e))
        return -1;
    else
        *out = strdup(json_string_value(s));
    json_decref(s);
    if (!*out)
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* An assistant message's tool_calls, normalized: arguments sent as a JSON
 * string become the object they encode (templates iterate them). */
static int get_tool_calls(const json_t *v, const char *at, json_t **out, srv_err *e)
{
    char param[160];
    if (!json_is_array(v))
        return srv_bad_type(e, at, "an array", v);
    *out = json_array();
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *c = json_array_get(v, i), *f, *name, *args;
        snprintf(param, sizeof param, "%s[%zu]", at, i);
        if (!json_is_object(c))
            return srv_bad_type(e, param, "an object", c);
        f = json_object_get(c, "function");
        snprintf(param, sizeof param, "%s[%zu].function", at, i);
        if (!json_is_object(f))
            return srv_bad_type(e, param, "an object", f ? f : json_null());
        name = json_object_get(f, "name");
        snprintf(param, sizeof param, "%s[%zu].function.name", at, i);
        if (!json_is_string(name))
            return srv_bad_type(e, param, "a string", name ? name : json_null());
        args = json_object_get(f, "arguments");
        snprintf(param, sizeof param, "%s[%zu].function.arguments", at, i);
        json_t *a = NULL;
        if (json_is_string(args)) {
            a = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
            if (!json_is_object(a)) {
                json_decref(a);
                a = json_incref(args);
            }
        } else if (json_is_object(args)) {
            a = json_incref(args);
        } else if (!args || json_is_null(args)) {
            a = json_object();
        } else {
            return srv_bad_type(e, param, "a JSON string or an object", args);
        }
        json_t *id = json_object_get(c, "id");
        json_t *n = json_pack("{s:s, s:{s:O, s:o}}", "type", "function", "function", "name",
                              name, "arguments", a);
        if (json_is_string(id))
            json_object_set(n, "id", id);
        json_array_append_new(*out, n);
    }
    return 0;
}

static int get_messages(const json_t *root, srv_request *r, json_t *norm, srv_err *e)
{
    json_t *ms = srv_member(root, "messages");
    if (!ms)
        return srv_fail(e, 400, "invalid_request_error", "messages", "missing_required_parameter",
                        "Missing required parameter: 'messages'.");
    if (!json_is_array(ms))
        return srv_bad_type(e, "messages", "an array", ms);
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
            return srv_bad_type(e, param, "an object", m);
        snprintf(param, sizeof param, "messages[%zu].role", i);
        role = json_object_get(m, "role");
        if (!role)
            return srv_fail(e, 400, "invalid_request_error", param, "missing_required_parameter",
                            "Missing required parameter: '%s'.", param);
        if (!json_is_string(role))
            return srv_bad_type(e, param, "a string", role);
        const char *rs = json_string_value(role);
        int assistant = !strcmp(rs, "assistant"), tool = !strcmp(rs, "tool");
        if (strcmp(rs, "system") && strcmp(rs, "developer") && strcmp(rs, "user") && !assistant &&
            !tool)
            return srv_fail(e, 400, "invalid_request_error", param, "invalid_value",
                            "Invalid value for '%s': \"%.40s\" is not supported (system, "
                            "developer, user, assistant, tool).", param, rs);
        srv_msg *dst = &r->msgs[r->n_msgs++];
        if (dup_string(role, &dst->role, e))
            return -1;
        json_t *nm = json_object();
        json_array_append_new(norm, nm);
        json_object_set(nm, "role", role);
        snprintf(param, sizeof param, "messages[%zu].content", i);
        v = json_object_get(m, "content");
        if (!v && !assistant)
            return srv_fail(e, 400, "invalid_request_error", param, "missing_required_parameter",
                            "Missing required parameter: '%s'.", param);
        if (get_content(v, param, &dst->content, e))
            return -1;
        json_object_set_new(nm, "content", json_string(dst->content));
        if ((v = srv_member(m, "name")) && json_is_string(v))
            json_object_set(nm, "name", v);
        if (tool && (v = srv_member(m, "tool_call_id"))) {
            snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
            if (!json_is_string(v))
                return srv_bad_type(e, param, "a string", v);
            json_object_set(nm, "tool_call_id", v);
        }
        if (!assistant)
            continue;
        /* an assistant turn's reasoning, as this server returns it */
        v = srv_member(m, "reasoning_content");
        if (!v)
            v = srv_member(m, "reasoning");
        if (v) {
            snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
            if (!json_is_string(v))
                return srv_bad_type(e, param, "a string", v);
            if (dup_string(v, &dst->reasoning, e))
                return -1;
            json_object_set(nm, "reasoning_content", v);
        }
        json_t *th = srv_member(m, "thinking");
        if (th && json_is_string(th))
            json_object_set(nm, "thinking", th);
        else if (v)
            json_object_set(nm, "thinking", v);
        if ((v = srv_member(m, "tool_calls"))) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            json_t *calls = NULL;
            int rc = get_tool_calls(v, param, &calls, e);
            if (calls)
                json_object_set_new(nm, "tool_calls", calls);
            if (rc)
                return -1;
        }
    }
    return 0;
}

/* tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}] */
static int get_tools(const json_t *root, srv_request *r, json_t *chat, srv_err *e)
{
    json_t *tools = srv_member(root, "tools"), *choice = srv_member(root, "tool_choice");
    char param[96];
    if (tools) {
        if (!json_is_array(tools))
            return srv_bad_type(e, "tools", "an array", tools);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i), *f, *ty;
            snprintf(param, sizeof param, "tools[%zu]", i);
            if (!json_is_object(t))
                return srv_bad_type(e, param, "an object", t);
            ty = json_object_get(t, "type");
            if (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))
                return srv_fail(e, 400, "invalid_request_error", param, "invalid_value",
                                "Invalid value for '%s.type': only \"function\" tools are "
                                "supported.", param);
            f = json_object_get(t, "function");
            snprintf(param, sizeof param, "tools[%zu].function", i);
            if (!json_is_object(f))
                return srv_bad_type(e, param, "an object", f ? f : json_null());
            snprintf(param, sizeof param, "tools[%zu].function.name", i);
            if (!json_is_string(json_object_get(f, "name")))
                return srv_bad_type(e, param, "a string", json_object_get(f, "name") ?
                                json_object_get(f, "name") : json_null());
            json_t *pa = json_object_get(f, "parameters");
            snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
            if (pa && !json_is_object(pa))
                return srv_bad_type(e, param, "an object", pa);
        }
    }
    const char *how = "auto";
    if (choice) {
        if (json_is_string(choice)) {
            how = json_string_value(choice);
            if (strcmp(how, "none") && strcmp(how, "auto") && strcmp(how, "required"))
                return srv_fail(e, 400, "invalid_request_error", "tool_choice", "invalid_value",
                                "Invalid value for 'tool_choice': expected \"none\", \"auto\", "
                                "\"required\" or a named function.");
        } else if (json_is_object(choice)) {
            how = "named";
            json_t *nm = json_object_get(json_object_get(choice, "function"), "name");
            if (!json_is_string(nm))
                return srv_bad_type(e, "tool_choice.function.name", "a string",
                                    nm ? nm : json_null());
            if (dup_string(nm, &r->force_name, e))
                return -1;
        } else {
            return srv_bad_type(e, "tool_choice", "a string or an object", choice);
        }
        if (!strcmp(how, "required") || !strcmp(how, "named")) {
            if (!tools || !json_array_size(tools))
                return srv_fail(e, 400, "invalid_request_error", "tool_choice", "invalid_value",
                                "Invalid value for 'tool_choice': \"%s\" needs 'tools'.", how);
            r->force_tool = !strcmp(how, "required") ? 1 : 2;
        }
    }
    if (tools && json_array_size(tools) && strcmp(how, "none")) {
        /* a function without a description gets "" (clients leave it out;
         * templates such as gpt-oss's concatenate it) */
        json_t *norm = json_deep_copy(tools);
        size_t i;
        json_t *t;
        json_array_foreach(norm, i, t) {
            json_t *f = json_object_get(t, "function");
            if (!json_is_string(json_object_get(f, "description")))
                json_object_set_new(f, "description", json_string(""));
        }
        json_object_set_new(chat, "tools", norm);
        if (!norm || !(r->tools_json = json_dumps(norm, JSON_COMPACT)))
            return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

/* Fields of the OpenAI API this server does not implement: a 400 naming
 * them, not a silent difference (README lists those it ignores). */
static int refuse_unimplemented(const json_t *root, srv_err *e)
{
    static const char *const fields[] = {"logit_bias", "best_of", "echo", "suffix", "functions",
                                         "function_call", "audio", "modalities", "prediction",
                                         "grammar", "web_search_options", NULL};
    for (int i = 0; fields[i]; i++) {
        json_t *v = srv_member(root, fields[i]);
        if (!v || (json_is_false(v)) || (json_is_object(v) && !json_object_size(v)) ||
            (json_is_array(v) && !json_array_size(v)) ||
            (json_is_string(v) && !json_string_length(v)) ||
            (!strcmp(fields[i], "best_of") && json_is_integer(v) && json_integer_value(v) == 1))
            continue;
        return srv_fail(e, 400, "invalid_request_error", fields[i], "unsupported_parameter",
                        "Unsupported parameter: '%s' is not supported by this server.",
                        fields[i]);
    }
    return 0;
}

/* response_format: {"type": "text" | "json_object" | "json_schema", "json_schema":
 * {"name", "schema", "strict"?}} */
static int get_response_format(const json_t *root, srv_request *r, srv_err *e)
{
    json_t *rf = srv_member(root, "response_format");
    if (!rf)
        return 0;
    if (!json_is_object(rf))
        return srv_bad_type(e, "response_format", "an object", rf);
    json_t *t = json_object_get(rf, "type");
    if (!json_is_string(t))
        return srv_bad_type(e, "response_format.type", "a string", t ? t : json_null());
    const char *ty = json_string_value(t);
    if (!strcmp(ty, "text"))
        return 0;
    if (!strcmp(ty, "json_object")) {
        r->json_mode = 1;
        return 0;
    }
    if (strcmp(ty, "json_schema"))
        return srv_fail(e, 400, "invalid_request_error", "response_format.type", "invalid_value",
                        "Invalid value for 'response_format.type': expected \"text\", "
                        "\"json_object\" or \"json_schema\".");
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return srv_bad_type(e, "response_format.json_schema", "an object", js ? js : json_null());
    json_t *sc = json_object_get(js, "schema");
    if (sc && !json_is_object(sc) && !json_is_boolean(sc))
        return srv_bad_type(e, "response_format.json_schema.schema", "an object", sc);
    r->json_mode = 2;
    r->json_schema = sc ? json_dumps(sc, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{}");
    if (!r->json_schema)
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

static int get_prompt(const json_t *root, srv_request *r, srv_err *e)
{
    json_t *p = srv_member(root, "prompt");
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
        return srv_bad_type(e, "prompt", "a string", p);
    return dup_string(p, &r->prompt, e);
}

static int get_stop(const json_t *root, srv_request *r, srv_err *e)
{
    json_t *v = srv_member(root, "stop");
    if (!v)
        return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return 0;
        r->n_stop = 1;
        return dup_string(v, &r->stop[0], e);
    }
    if (!json_is_array(v))
        return srv_bad_type(e, "stop", "a string or an array of strings", v);
    if (json_array_size(v) > SRV_MAX_STOP)
        return srv_fail(e, 400, "invalid_request_error", "stop", "invalid_value",
                        "Invalid value for 'stop': %zu sequences, at most %d.",
                        json_array_size(v), SRV_MAX_STOP);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s)) {
            char param[32];
            snprintf(param, sizeof param, "stop[%zu]", i);
            return srv_bad_type(e, param, "a string", s);
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
    if ((v = srv_member(root, "model"))) {
        if (!json_is_string(v))
            return srv_bad_type(e, "model", "a string", v);
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
    if ((v = srv_member(root, "stream_options"))) {
        if (!json_is_object(v))
            return srv_bad_type(e, "stream_options", "an object", v);
        json_t *u = srv_member(v, "include_usage");
        if (u && !json_is_boolean(u))
            return srv_bad_type(e, "stream_options.include_usage", "a boolean", u);
        r->include_usage = u && json_is_true(u);
    }
    /* chat: logprobs true + top_logprobs 0..20; completions: logprobs 0..5 */
    json_t *lpv = srv_member(root, "logprobs");
    if (lpv && r->kind == SRV_CHAT) {
        if (get_bool(root, "logprobs", &r->logprobs, e))
            return -1;
        int have_top = 0;
        if (get_int(root, "top_logprobs", 0, 20, &have_top, &iv, e))
            return -1;
        r->top_logprobs = have_top ? (int)iv : 0;
    } else if (lpv) {
        int have_lp = 0;
        if (get_int(root, "logprobs", 0, 5, &have_lp, &iv, e))
            return -1;
        r->logprobs = 1;
        r->top_logprobs = (int)iv;
    } else if (srv_member(root, "top_logprobs") && r->kind == SRV_CHAT) {
        return srv_fail(e, 400, "invalid_request_error", "top_logprobs", "invalid_value",
                        "Invalid value for 'top_logprobs': it needs 'logprobs' true.");
    }
    if (get_number(root, "min_p", 0, 1, &r->have_min_p, &r->min_p, e) ||
        get_number(root, "repeat_penalty", 0.01, 100, &r->have_repeat, &r->repeat_penalty, e) ||
        refuse_unimplemented(root, e) || get_response_format(root, r, e))
        return -1;
    if ((v = srv_member(root, "reasoning_effort"))) {
        if (!json_is_string(v))
            return srv_bad_type(e, "reasoning_effort", "a string", v);
        const char *s = json_string_value(v);
        if (strcmp(s, "low") && strcmp(s, "medium") && strcmp(s, "high"))
            return srv_fail(e, 400, "invalid_request_error", "reasoning_effort", "invalid_value",
                            "Invalid value for 'reasoning_effort': expected \"low\", "
                            "\"medium\" or \"high\".");
        if (dup_string(v, &r->reasoning_effort, e))
            return -1;
    }
    if ((v = srv_member(root, "chat_template_kwargs"))) {
        if (!json_is_object(v))
            return srv_bad_type(e, "chat_template_kwargs", "an object", v);
        json_t *t = srv_member(v, "enable_thinking");
        if (t && !json_is_boolean(t))
            return srv_bad_type(e, "chat_template_kwargs.enable_thinking", "a boolean", t);
        if (t)
            r->thinking = json_is_true(t);
    }
    return 0;
}

/* What a Responses API request keeps beside its chat request (meta: what
 * srv_responses_to_chat gave): the echo, instructions, previous id, store,
 * namespaced tools' names, and the notes, a line each. */
static int responses_meta(srv_request *r, const json_t *meta, srv_err *e)
{
    json_t *echo = json_object_get(meta, "echo"), *notes = json_object_get(meta, "notes");
    r->reasoning_summary =
        json_is_string(json_object_get(json_object_get(echo, "reasoning"), "summary"));
    r->store = json_is_true(json_object_get(echo, "store"));
    const char *ins = json_string_value(json_object_get(echo, "instructions"));
    const char *prev = json_string_value(json_object_get(echo, "previous_response_id"));
    if ((ins && !(r->instructions = strdup(ins))) || (prev && !(r->previous_id = strdup(prev))) ||
        !(r->echo_json = json_dumps(echo, JSON_COMPACT)) ||
        !(r->names_json = json_dumps(json_object_get(meta, "namespaces"), JSON_COMPACT)))
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < json_array_size(notes); i++)
        if (srv_note(r, json_string_value(json_array_get(notes, i))))
            return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

int srv_note(srv_request *r, const char *line)
{
    size_t had = r->notes ? strlen(r->notes) : 0, n = strlen(line);
    char *p = realloc(r->notes, had + n + 2);
    if (!p)
        return -1;
    memcpy(p + had, line, n);
    p[had + n] = '\n';
    p[had + n + 1] = 0;
    r->notes = p;
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
    int rc = -1, chatlike = kind != SRV_COMPLETION;
    json_t *chat = json_object(), *norm = json_array(), *meta = NULL;
    json_object_set(chat, "messages", norm);
    if (!json_is_object(root)) {
        srv_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                 "The request body must be a JSON object, got %s.", type_name(root));
        goto out;
    }
    if (kind != SRV_CHAT && kind != SRV_COMPLETION) {
        /* another API: the chat request it amounts to is what the rest reads */
        json_t *req = NULL;
        int bad = kind == SRV_RESPONSES ? srv_responses_to_chat(root, &req, &meta, e)
                : kind == SRV_OLLAMA_CHAT || kind == SRV_OLLAMA_GENERATE
                    ? srv_ollama_to_chat(root, kind == SRV_OLLAMA_GENERATE, &req, e)
                    : srv_messages_to_chat(root, kind == SRV_COUNT_TOKENS, &req, e);
        json_decref(root);
        root = req;
        if (bad || (kind == SRV_RESPONSES && responses_meta(r, meta, e)))
            goto out;
    }
    if ((chatlike ? get_messages(root, r, norm, e) : get_prompt(root, r, e)) == 0 &&
        get_options(root, r, e) == 0 && (!chatlike || get_tools(root, r, chat, e) == 0))
        rc = 0;
    json_t *kw = srv_member(root, "chat_template_kwargs");
    if (rc == 0 && chatlike) {
        if (kw)
            json_object_set(chat, "chat_template_kwargs", kw);
        if (!(r->chat_json = json_dumps(chat, JSON_COMPACT))) {
            srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            rc = -1;
        }
    }
out:
    json_decref(meta);
    json_decref(norm);
    json_decref(chat);
    json_decref(root);
    return rc;
}

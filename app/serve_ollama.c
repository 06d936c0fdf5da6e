/* moestream serve: a generation as a response of Ollama's API.
 *
 * /api/chat answers a message ({"role": "assistant", "content", "thinking"?,
 * "tool_calls"?: [{"function": {"name", "arguments": {...}}}]}), /api/generate
 * a "response" (and "thinking"). Streamed, each piece of text is a line of
 * its own (newline-delimited JSON, "done": false), tool calls come in one
 * line, and a last line says "done": true with done_reason ("stop",
 * "length") and the counts and durations Ollama reports (nanoseconds: the
 * prompt's evaluation until the first piece of the answer, the answer's
 * after it). Not streamed, one object holds the whole answer and the
 * counts. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "serve.h"

static int generate(const srv_out *o)
{
    return o->j->req.kind == SRV_OLLAMA_GENERATE;
}

/* A line: {"model", "created_at", ...fields, "done"} */
static json_t *line(const srv_out *o, json_t *fields, int done)
{
    char at[32];
    srv_iso_time((time_t)o->j->created, at);
    json_t *l = json_pack("{s:s, s:s}", "model", o->sv->name, "created_at", at);
    json_object_update(l, fields);
    json_decref(fields);
    json_object_set_new(l, "done", json_boolean(done));
    return l;
}

static void emit(srv_out *o, json_t *l)
{
    char *s = l ? json_dumps(l, JSON_COMPACT) : NULL;
    json_decref(l);
    if (!s)
        return;
    size_t n = strlen(s);
    s[n] = '\n'; /* json_dumps leaves room for its NUL: the newline takes it */
    srv_job_emit(o->j, s, n + 1);
    free(s);
}

static json_t *message(const srv_out *o)
{
    return json_array_get(o->parts, 0);
}

static void start(srv_out *o)
{
    (void)o;
}

/* A piece: as a message (chat) or a response (generate). */
static json_t *piece(const srv_out *o, const char *key, json_t *v)
{
    if (generate(o))
        return json_pack("{s:s, s:o}", !strcmp(key, "content") ? "response" : key, "", v);
    return json_pack("{s:{s:s, s:s, s:o}}", "message", "role", "assistant", "content", "", key,
                     v);
}

static void first(srv_out *o)
{
    if (!json_array_size(o->parts))
        json_array_append_new(o->parts, json_pack("{s:s, s:s}", "role", "assistant", "content",
                                                  ""));
}

static void text(srv_out *o, int chan, const char *s, size_t n)
{
    if (!n)
        return;
    first(o);
    const char *key = chan == MS_CHAT_REASONING ? "thinking" : "content";
    json_t *d = srv_json_text(s, n);
    srv_json_append(message(o), key, d);
    if (o->stream)
        emit(o, line(o, piece(o, key, d), 0));
    else
        json_decref(d);
}

static void calls(srv_out *o, const json_t *list)
{
    size_t i;
    json_t *c, *out = json_array();
    first(o);
    json_array_foreach(list, i, c) {
        json_t *f = json_object_get(c, "function");
        const char *args = json_string_value(json_object_get(f, "arguments"));
        json_t *a = args ? json_loads(args, 0, NULL) : NULL;
        if (!json_is_object(a)) { /* arguments must be an object: the call stays text */
            json_decref(a);
            text(o, MS_CHAT_ANSWER, args ? args : "", args ? strlen(args) : 0);
            continue;
        }
        json_array_append_new(out, json_pack("{s:{s:i, s:O, s:o}}", "function", "index", (int)i,
                                             "name", json_object_get(f, "name"), "arguments", a));
    }
    if (!json_array_size(out)) {
        json_decref(out);
        return;
    }
    json_object_set(message(o), "tool_calls", out);
    if (o->stream)
        emit(o, line(o, json_pack("{s:{s:s, s:s, s:o}}", "message", "role", "assistant",
                                  "content", "", "tool_calls", out), 0));
    else
        json_decref(out);
}

static char *end(srv_out *o, const srv_out_end *e)
{
    first(o);
    double now = cli_now(), t0 = o->j->t_start, t1 = o->t_first > 0 ? o->t_first : now;
    json_t *f = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "done_reason",
                          !strcmp(e->finish, "length") ? "length" : "stop", "total_duration",
                          (json_int_t)((now - t0) * 1e9), "load_duration", (json_int_t)0,
                          "prompt_eval_count", (json_int_t)(e->n_prompt - e->cached),
                          "prompt_eval_duration", (json_int_t)((t1 - t0) * 1e9),
                          "eval_count", (json_int_t)e->n_gen, "eval_duration",
                          (json_int_t)((now - t1) * 1e9));
    if (o->stream) {
        json_t *p = piece(o, "content", json_string(""));
        json_object_update(f, p);
        json_decref(p);
        emit(o, line(o, f, 1));
        return NULL;
    }
    json_t *m = message(o);
    if (generate(o)) {
        json_object_set(f, "response", json_object_get(m, "content"));
        if (json_object_get(m, "thinking"))
            json_object_set(f, "thinking", json_object_get(m, "thinking"));
    } else {
        json_object_set(f, "message", m);
    }
    json_t *l = line(o, f, 1);
    char *body = l ? json_dumps(l, JSON_COMPACT) : NULL;
    json_decref(l);
    return body;
}

static void fail(srv_out *o, const char *error_json)
{
    json_t *e = json_loads(error_json, 0, NULL);
    const char *msg = json_string_value(json_object_get(json_object_get(e, "error"), "message"));
    emit(o, json_pack("{s:s}", "error", msg ? msg : "error"));
    json_decref(e);
}

const srv_out_api srv_ollama_api = {start, text, calls, end, fail};

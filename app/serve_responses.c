/* moestream serve: a generation as a response of OpenAI's Responses API.
 *
 * The answer is a list of output items: a "reasoning" item (the model's
 * reasoning, in clear, as content parts of type "reasoning_text", as
 * OpenAI's gpt-oss guide has it; when the request asks for a summary
 * (reasoning.summary), the same text as the item's summary too, since
 * there is no summarizer here and clients such as the Vercel AI SDK show
 * only summaries), a "message" item (the answer, one "output_text" part)
 * and one "function_call" item per tool call (a namespaced tool's call
 * with its namespace and name apart). Streamed, each item is announced
 * (response.output_item.added), filled (its part's deltas) and closed
 * (response.*.done, response.output_item.done) before the next one opens,
 * between response.created / response.in_progress and response.completed
 * (or response.incomplete when max_output_tokens cut it), each event an
 * SSE message `event: TYPE` whose data carries its type and a
 * sequence_number. Not streamed, the same items make the response body.
 * Whether streamed or not, the items are built by the same calls, so both
 * forms hold the same response. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

enum { OPEN_NONE, OPEN_REASONING, OPEN_MESSAGE };

/* The id stem of a job's items: the hex of its id. */
static const char *stem(const srv_job *j)
{
    const char *u = strchr(j->id, '_');
    return u ? u + 1 : j->id;
}

/* An event: its type and sequence_number first, then its fields. */
static void emit(srv_out *r, const char *type, json_t *ev)
{
    if (!r->stream || !ev) {
        json_decref(ev);
        return;
    }
    json_t *o = json_pack("{s:s, s:I}", "type", type, "sequence_number", (json_int_t)r->seq++);
    json_object_update(o, ev);
    json_decref(ev);
    srv_out_event(r, type, o);
}

/* The response object: status, output and usage over the request's echo. */
static json_t *response(const srv_out *r, const char *status, json_t *usage)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:b, s:n, s:n, s:s, s:O}", "id", r->j->id,
                          "object", "response", "created_at", (json_int_t)r->j->created,
                          "status", status, "background", 0, "error", "incomplete_details",
                          "model", r->sv->name, "output", r->parts);
    json_t *echo = json_loads(r->j->req.echo_json ? r->j->req.echo_json : "{}", 0, NULL);
    json_object_update_missing(o, echo);
    json_decref(echo);
    json_object_set_new(o, "usage", usage ? usage : json_null());
    return o;
}

static void start(srv_out *r)
{
    emit(r, "response.created", json_pack("{s:o}", "response", response(r, "in_progress", NULL)));
    emit(r, "response.in_progress",
         json_pack("{s:o}", "response", response(r, "in_progress", NULL)));
}

static json_t *last_item(const srv_out *r)
{
    return json_array_get(r->parts, json_array_size(r->parts) - 1);
}

static int last_index(const srv_out *r)
{
    return (int)json_array_size(r->parts) - 1;
}

/* The item being written, closed: its part's .done, then the item's. */
static void close_item(srv_out *r)
{
    if (r->open == OPEN_NONE)
        return;
    json_t *it = last_item(r);
    json_t *part = json_array_get(json_object_get(it, "content"), 0);
    const char *id = json_string_value(json_object_get(it, "id"));
    int k = last_index(r), msg = r->open == OPEN_MESSAGE;
    json_t *text = json_object_get(part, "text");
    emit(r, msg ? "response.output_text.done" : "response.reasoning_text.done",
         msg ? json_pack("{s:s, s:i, s:i, s:O, s:[]}", "item_id", id, "output_index", k,
                         "content_index", 0, "text", text, "logprobs")
             : json_pack("{s:s, s:i, s:i, s:O}", "item_id", id, "output_index", k,
                         "content_index", 0, "text", text));
    emit(r, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:O}", "item_id", id,
                                                    "output_index", k, "content_index", 0,
                                                    "part", part));
    json_t *sum = json_array_get(json_object_get(it, "summary"), 0);
    if (sum) {
        emit(r, "response.reasoning_summary_text.done",
             json_pack("{s:s, s:i, s:i, s:O}", "item_id", id, "output_index", k,
                       "summary_index", 0, "text", json_object_get(sum, "text")));
        emit(r, "response.reasoning_summary_part.done",
             json_pack("{s:s, s:i, s:i, s:O}", "item_id", id, "output_index", k,
                       "summary_index", 0, "part", sum));
    }
    json_object_set_new(it, "status", json_string("completed"));
    emit(r, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", k, "item", it));
    r->open = OPEN_NONE;
}

/* Opens a reasoning or message item with its one empty text part. */
static void open_item(srv_out *r, int kind)
{
    char id[96];
    int msg = kind == OPEN_MESSAGE;
    snprintf(id, sizeof id, "%s_%s_%zu", msg ? "msg" : "rs", stem(r->j),
             json_array_size(r->parts));
    json_t *it = msg ? json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", id, "type", "message",
                                 "status", "in_progress", "role", "assistant", "content")
                     : json_pack("{s:s, s:s, s:s, s:[], s:[]}", "id", id, "type", "reasoning",
                                 "status", "in_progress", "summary", "content");
    json_array_append_new(r->parts, it);
    r->open = kind;
    int k = last_index(r);
    emit(r, "response.output_item.added", json_pack("{s:i, s:O}", "output_index", k, "item", it));
    json_t *part = msg ? json_pack("{s:s, s:s, s:[], s:[]}", "type", "output_text", "text", "",
                                   "annotations", "logprobs")
                       : json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "");
    emit(r, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:O}", "item_id", id,
                                                     "output_index", k, "content_index", 0,
                                                     "part", part));
    json_array_append_new(json_object_get(it, "content"), part);
    if (!msg && r->summary) {
        json_t *sum = json_pack("{s:s, s:s}", "type", "summary_text", "text", "");
        emit(r, "response.reasoning_summary_part.added",
             json_pack("{s:s, s:i, s:i, s:O}", "item_id", id, "output_index", k,
                       "summary_index", 0, "part", sum));
        json_array_append_new(json_object_get(it, "summary"), sum);
    }
}

static void text(srv_out *r, int chan, const char *s, size_t n)
{
    if (!n)
        return;
    int kind = chan == MS_CHAT_REASONING ? OPEN_REASONING : OPEN_MESSAGE;
    if (r->open != kind) {
        close_item(r);
        open_item(r, kind);
    }
    json_t *it = last_item(r);
    json_t *part = json_array_get(json_object_get(it, "content"), 0);
    json_t *d = srv_json_text(s, n), *sum = json_array_get(json_object_get(it, "summary"), 0);
    srv_json_append(part, "text", d);
    const char *id = json_string_value(json_object_get(it, "id"));
    int k = last_index(r);
    if (sum) {
        srv_json_append(sum, "text", d);
        emit(r, "response.reasoning_summary_text.delta",
             json_pack("{s:s, s:i, s:i, s:O}", "item_id", id, "output_index", k,
                       "summary_index", 0, "delta", d));
    }
    emit(r, kind == OPEN_MESSAGE ? "response.output_text.delta" : "response.reasoning_text.delta",
         kind == OPEN_MESSAGE
             ? json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", id, "output_index", k,
                         "content_index", 0, "delta", d, "logprobs")
             : json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", k,
                         "content_index", 0, "delta", d));
}

static void calls(srv_out *r, const json_t *list)
{
    size_t i;
    json_t *c;
    close_item(r);
    /* a namespaced tool's flat name, split back into the two */
    json_t *names = json_loads(r->j->req.names_json ? r->j->req.names_json : "{}", 0, NULL);
    json_array_foreach(list, i, c) {
        json_t *f = json_object_get(c, "function");
        json_t *args = json_object_get(f, "arguments"), *name = json_object_get(f, "name");
        json_t *ns = json_object_get(names, json_string_value(name));
        char id[96];
        snprintf(id, sizeof id, "fc_%s_%zu", stem(r->j), json_array_size(r->parts));
        json_t *it = json_pack("{s:s, s:s, s:s, s:O, s:O, s:s}", "id", id, "type",
                               "function_call", "status", "in_progress", "call_id",
                               json_object_get(c, "id"), "name",
                               ns ? json_object_get(ns, "name") : name, "arguments", "");
        if (!it)
            continue;
        if (ns)
            json_object_set(it, "namespace", json_object_get(ns, "namespace"));
        json_array_append_new(r->parts, it);
        int k = last_index(r);
        emit(r, "response.output_item.added",
             json_pack("{s:i, s:O}", "output_index", k, "item", it));
        emit(r, "response.function_call_arguments.delta",
             json_pack("{s:s, s:i, s:O}", "item_id", id, "output_index", k, "delta", args));
        json_object_set(it, "arguments", args);
        emit(r, "response.function_call_arguments.done",
             json_pack("{s:s, s:i, s:O, s:O}", "item_id", id, "output_index", k, "name",
                       json_object_get(it, "name"), "arguments", args));
        json_object_set_new(it, "status", json_string("completed"));
        emit(r, "response.output_item.done",
             json_pack("{s:i, s:O}", "output_index", k, "item", it));
    }
    json_decref(names);
}

/* Reasoning tokens (usage): the reasoning items' text, tokenized. Counting
 * the generated ids instead would need each id's channel, which a response
 * with tool calls only learns once parsed whole. */
static int64_t reasoning_tokens(const srv_out *r)
{
    size_t i;
    json_t *it;
    int64_t n = 0;
    json_array_foreach(r->parts, i, it) {
        if (strcmp(json_string_value(json_object_get(it, "type")), "reasoning"))
            continue;
        json_t *t = json_object_get(json_array_get(json_object_get(it, "content"), 0), "text");
        int32_t *ids = NULL;
        int64_t k = 0;
        ms_error err = {0};
        if (!ms_tokenizer_encode(r->sv->tok, json_string_value(t), json_string_length(t), 0,
                                 &ids, &k, &err))
            n += k;
        free(ids);
    }
    return n;
}

static char *end(srv_out *r, const srv_out_end *e)
{
    close_item(r);
    int cut = !strcmp(e->finish, "length");
    json_t *usage = json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens",
                              (json_int_t)e->n_prompt, "input_tokens_details", "cached_tokens",
                              (json_int_t)e->cached, "output_tokens", (json_int_t)e->n_gen,
                              "output_tokens_details", "reasoning_tokens",
                              (json_int_t)reasoning_tokens(r), "total_tokens",
                              (json_int_t)(e->n_prompt + e->n_gen));
    json_t *o = response(r, cut ? "incomplete" : "completed", usage);
    if (cut)
        json_object_set_new(o, "incomplete_details",
                            json_pack("{s:s}", "reason", "max_output_tokens"));
    json_decref(r->final);
    r->final = json_incref(o);
    if (r->on_final)
        r->on_final(r, r->ctx);
    if (r->stream) {
        emit(r, cut ? "response.incomplete" : "response.completed",
             json_pack("{s:o}", "response", o));
        return NULL;
    }
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return body;
}

json_t *srv_responses_answer(const srv_out *r)
{
    json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", ""), *calls = NULL;
    size_t i;
    json_t *it;
    json_array_foreach(r->parts, i, it) {
        const char *ty = json_string_value(json_object_get(it, "type"));
        json_t *text = json_object_get(json_array_get(json_object_get(it, "content"), 0), "text");
        if (!strcmp(ty, "message")) {
            json_object_set(m, "content", text);
        } else if (!strcmp(ty, "reasoning")) {
            json_object_set(m, "reasoning_content", text);
            json_object_set(m, "thinking", text);
        } else if (!strcmp(ty, "function_call")) {
            /* as the template saw it: the flat name, the arguments an object */
            json_t *flat = srv_flat_name(json_string_value(json_object_get(it, "namespace")),
                                         json_string_value(json_object_get(it, "name")));
            const char *args = json_string_value(json_object_get(it, "arguments"));
            json_t *a = args ? json_loads(args, 0, NULL) : NULL;
            if (!json_is_object(a)) {
                json_decref(a);
                a = json_string(args ? args : "");
            }
            if (!calls)
                json_object_set_new(m, "tool_calls", calls = json_array());
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:o, s:o}}", "id",
                                                   json_object_get(it, "call_id"), "type",
                                                   "function", "function", "name", flat,
                                                   "arguments", a));
        }
    }
    return m;
}

static void fail(srv_out *r, const char *error_json)
{
    json_t *e = json_loads(error_json, 0, NULL), *in = json_object_get(e, "error");
    if (!e)
        return;
    /* the error's fields at the top, as OpenAI's "error" event has them, and
     * also under "error", where clients look for a failure in any event */
    json_t *ev = json_pack("{s:O, s:O, s:O, s:O}", "code", json_object_get(in, "code"), "message",
                           json_object_get(in, "message"), "param", json_object_get(in, "param"),
                           "error", in);
    json_decref(e);
    emit(r, "error", ev);
}

const srv_out_api srv_responses_api = {start, text, calls, end, fail};

/* moestream serve: a generation as a response of Anthropic's Messages API.
 *
 * The answer is a message whose content is a list of blocks: "thinking"
 * (the model's reasoning, with an empty signature: nothing here signs it),
 * "text" and one "tool_use" per tool call (its arguments as the input
 * object). Streamed, each block opens (content_block_start), grows
 * (content_block_delta: thinking_delta, text_delta, input_json_delta) and
 * closes (content_block_stop), between message_start and message_delta
 * (stop_reason, usage) + message_stop. Usage counts as Anthropic does:
 * input_tokens are the prompt tokens evaluated for this request, the ones
 * a prompt cache supplied are cache_read_input_tokens. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "serve.h"

enum { OPEN_NONE, OPEN_THINKING, OPEN_TEXT };

static void emit(srv_out *o, const char *type, json_t *data)
{
    if (!o->stream || !data) {
        json_decref(data);
        return;
    }
    json_t *ev = json_pack("{s:s}", "type", type);
    json_object_update(ev, data);
    json_decref(data);
    srv_out_event(o, type, ev);
}

static json_t *usage(int64_t n_prompt, int64_t cached, int64_t n_gen)
{
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", (json_int_t)(n_prompt - cached),
                     "cache_creation_input_tokens", (json_int_t)0, "cache_read_input_tokens",
                     (json_int_t)cached, "output_tokens", (json_int_t)n_gen);
}

static json_t *message(const srv_out *o, json_t *stop_reason, json_t *stop_seq, json_t *u)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:O, s:o, s:o, s:o}", "id", o->j->id, "type",
                     "message", "role", "assistant", "model", o->sv->name, "content", o->parts,
                     "stop_reason", stop_reason, "stop_sequence", stop_seq, "usage", u);
}

static void start(srv_out *o)
{
    /* the prompt cache's share is known at the end (message_delta) */
    emit(o, "message_start", json_pack("{s:o}", "message",
                                       message(o, json_null(), json_null(),
                                               usage(o->j->n_ids, 0, 0))));
}

static int last_index(const srv_out *o)
{
    return (int)json_array_size(o->parts) - 1;
}

static void close_block(srv_out *o)
{
    if (o->open == OPEN_NONE)
        return;
    emit(o, "content_block_stop", json_pack("{s:i}", "index", last_index(o)));
    o->open = OPEN_NONE;
}

static void text(srv_out *o, int chan, const char *s, size_t n)
{
    if (!n)
        return;
    int kind = chan == MS_CHAT_REASONING ? OPEN_THINKING : OPEN_TEXT;
    const char *key = kind == OPEN_THINKING ? "thinking" : "text";
    if (o->open != kind) {
        close_block(o);
        json_t *b = kind == OPEN_THINKING
                        ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "",
                                    "signature", "")
                        : json_pack("{s:s, s:s}", "type", "text", "text", "");
        json_array_append_new(o->parts, b);
        o->open = kind;
        emit(o, "content_block_start", json_pack("{s:i, s:O}", "index", last_index(o),
                                                 "content_block", b));
    }
    json_t *b = json_array_get(o->parts, (size_t)last_index(o));
    json_t *d = srv_json_text(s, n);
    srv_json_append(b, key, d);
    emit(o, "content_block_delta",
         json_pack("{s:i, s:{s:s, s:o}}", "index", last_index(o), "delta", "type",
                   kind == OPEN_THINKING ? "thinking_delta" : "text_delta", key, d));
}

static void calls(srv_out *o, const json_t *list)
{
    size_t i;
    json_t *c;
    close_block(o);
    json_array_foreach(list, i, c) {
        json_t *f = json_object_get(c, "function");
        const char *args = json_string_value(json_object_get(f, "arguments"));
        json_t *in = args ? json_loads(args, 0, NULL) : NULL;
        if (!json_is_object(in)) { /* an input must be an object: the call stays text */
            json_decref(in);
            text(o, MS_CHAT_ANSWER, args ? args : "", args ? strlen(args) : 0);
            close_block(o);
            continue;
        }
        json_t *b = json_pack("{s:s, s:O, s:O, s:{}}", "type", "tool_use", "id",
                              json_object_get(c, "id"), "name", json_object_get(f, "name"),
                              "input");
        if (!b) {
            json_decref(in);
            continue;
        }
        json_array_append_new(o->parts, b);
        int k = last_index(o);
        emit(o, "content_block_start", json_pack("{s:i, s:O}", "index", k, "content_block", b));
        emit(o, "content_block_delta", json_pack("{s:i, s:{s:s, s:s}}", "index", k, "delta",
                                                 "type", "input_json_delta", "partial_json",
                                                 args));
        json_object_set_new(b, "input", in);
        emit(o, "content_block_stop", json_pack("{s:i}", "index", k));
    }
}

static char *end(srv_out *o, const srv_out_end *e)
{
    close_block(o);
    const char *reason = !strcmp(e->finish, "tool_calls") ? "tool_use"
                       : !strcmp(e->finish, "length") ? "max_tokens"
                       : e->stop ? "stop_sequence" : "end_turn";
    json_t *seq = e->stop ? json_string(e->stop) : json_null();
    if (o->stream) {
        emit(o, "message_delta", json_pack("{s:{s:s, s:o}, s:o}", "delta", "stop_reason", reason,
                                           "stop_sequence", seq, "usage",
                                           usage(e->n_prompt, e->cached, e->n_gen)));
        emit(o, "message_stop", json_object());
        return NULL;
    }
    json_t *m = message(o, json_string(reason), seq, usage(e->n_prompt, e->cached, e->n_gen));
    char *body = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    return body;
}

static void fail(srv_out *o, const char *error_json)
{
    json_t *e = json_loads(error_json, 0, NULL), *in = json_object_get(e, "error");
    const char *type = json_string_value(json_object_get(in, "type"));
    const char *msg = json_string_value(json_object_get(in, "message"));
    emit(o, "error", json_pack("{s:{s:s, s:s}}", "error", "type",
                               type && strcmp(type, "server_error") ? type : "api_error",
                               "message", msg ? msg : "error"));
    json_decref(e);
}

const srv_out_api srv_messages_api = {start, text, calls, end, fail};

/* moestream serve: a request of OpenAI's Responses API (POST /v1/responses)
 * as the chat-completions request it amounts to. The Responses API is what
 * gpt-oss was released for and what newer clients speak by default (the
 * Vercel AI SDK's OpenAI provider, agents such as Codex): `instructions`
 * and typed input items (messages, function calls and their outputs,
 * reasoning) instead of `messages`, flat function tools, `text.format`
 * instead of `response_format`, `max_output_tokens`. Translating keeps one
 * path from a request to the template, the sampler and the tool-call
 * parser: srv_parse_request then reads the result as a chat request, and
 * only the output (serve_responses.c) differs. libc + jansson only, like
 * serve_request.c (the fuzzing harness links both).
 *
 * The instructions and a previous response's conversation are put before
 * the input's messages when the prompt is made (srv_responses_compose).
 * What the server cannot do is refused with a 400 naming the field:
 * conversations and item references, non-text input parts, background
 * runs, logprobs. Fields that only matter to OpenAI's platform (metadata,
 * user, prompt_cache_key, safety_identifier, service_tier, truncation,
 * parallel_tool_calls, include's "reasoning.encrypted_content": reasoning
 * comes back in clear) are accepted and have no effect. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static int unsupported(srv_err *e, const char *param, const char *what)
{
    return srv_fail(e, 400, "invalid_request_error", param, "unsupported_parameter",
                    "Unsupported parameter: '%s': %s.", param, what);
}

static const char *const USER_PARTS[] = {"input_text", "output_text", NULL};
static const char *const ASSISTANT_PARTS[] = {"output_text", "refusal", NULL};
static const char *const REASONING_PARTS[] = {"reasoning_text", NULL};
static const char *const SUMMARY_PARTS[] = {"summary_text", NULL};

/* A required member of an item (param: its name, for the caller's errors). */
static int item_member(const json_t *item, const char *key, const char *at, char *param,
                       size_t size, json_t **out, srv_err *e)
{
    snprintf(param, size, "%s.%s", at, key);
    *out = json_object_get(item, key);
    if (!*out || json_is_null(*out))
        return srv_fail(e, 400, "invalid_request_error", param, "missing_required_parameter",
                        "Missing required parameter: '%s'.", param);
    return 0;
}

/* A required string member of an item. */
static int item_string(const json_t *item, const char *key, const char *at, json_t **out,
                       srv_err *e)
{
    char param[160];
    if (item_member(item, key, at, param, sizeof param, out, e))
        return -1;
    return json_is_string(*out) ? 0 : srv_bad_type(e, param, "a string", *out);
}

/* A tool's name as the model sees it: a namespaced tool's is
 * NAMESPACE__NAME (as Codex flattens them where a namespace cannot be
 * kept), and `names` maps it back to the two. */
json_t *srv_flat_name(const char *ns, const char *name)
{
    if (!ns)
        return json_string(name);
    size_t a = strlen(ns), b = strlen(name);
    while (a && ns[a - 1] == '_')
        a--;
    while (*name == '_')
        name++, b--;
    char *s = malloc(a + b + 3);
    if (!s)
        return NULL;
    memcpy(s, ns, a);
    memcpy(s + a, "__", 2);
    memcpy(s + a + 2, name, b + 1);
    json_t *v = json_string(s);
    free(s);
    return v;
}

/* The chat messages of `input`: items in order; function calls join the
 * assistant message before them (or open one), a reasoning item gives its
 * text to the next assistant message. */
static int input_messages(const json_t *input, json_t *msgs, srv_err *e)
{
    char at[96], param[160];
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input))
        return srv_bad_type(e, "input", "a string or an array of input items", input);
    json_t *open = NULL;       /* the assistant message calls may still join */
    json_t *thinking = NULL;   /* reasoning waiting for its assistant message */
    int rc = 0;
    for (size_t i = 0; i < json_array_size(input) && rc == 0; i++) {
        json_t *it = json_array_get(input, i), *v = NULL, *role = NULL;
        snprintf(at, sizeof at, "input[%zu]", i);
        if (!json_is_object(it)) {
            rc = srv_bad_type(e, at, "an object", it);
            break;
        }
        json_t *tyv = json_object_get(it, "type");
        if (tyv && !json_is_string(tyv)) {
            snprintf(param, sizeof param, "%s.type", at);
            rc = srv_bad_type(e, param, "a string", tyv);
            break;
        }
        const char *ty = tyv ? json_string_value(tyv) : "message";
        if (!strcmp(ty, "message")) {
            if ((rc = item_string(it, "role", at, &role, e)))
                break;
            const char *rs = json_string_value(role);
            int assistant = !strcmp(rs, "assistant");
            if (!assistant && strcmp(rs, "user") && strcmp(rs, "system") &&
                strcmp(rs, "developer")) {
                snprintf(param, sizeof param, "%s.role", at);
                rc = srv_fail(e, 400, "invalid_request_error", param, "invalid_value",
                              "Invalid value for '%s': \"%.40s\" is not supported (user, system, "
                              "developer, assistant).", param, rs);
                break;
            }
            json_t *c;
            if ((rc = item_member(it, "content", at, param, sizeof param, &c, e)) ||
                (rc = srv_parts_text(c, param, assistant ? ASSISTANT_PARTS : USER_PARTS, &v, e)))
                break;
            /* developer messages are system messages to the templates */
            json_t *m = json_pack("{s:s, s:o}", "role", !strcmp(rs, "developer") ? "system" : rs,
                                  "content", v);
            if (assistant && thinking) {
                json_object_set(m, "reasoning_content", thinking);
                json_decref(thinking);
                thinking = NULL;
            }
            json_array_append_new(msgs, m);
            open = assistant ? m : NULL;
        } else if (!strcmp(ty, "function_call")) {
            json_t *call_id, *name, *args;
            if ((rc = item_string(it, "call_id", at, &call_id, e)) ||
                (rc = item_string(it, "name", at, &name, e)) ||
                (rc = item_string(it, "arguments", at, &args, e)))
                break;
            json_t *flat = srv_flat_name(json_string_value(json_object_get(it, "namespace")),
                                     json_string_value(name));
            if (!open) {
                open = json_pack("{s:s, s:n}", "role", "assistant", "content");
                json_array_append_new(msgs, open);
            }
            if (thinking) {
                json_object_set(open, "reasoning_content", thinking);
                json_decref(thinking);
                thinking = NULL;
            }
            json_t *calls = json_object_get(open, "tool_calls");
            if (!calls)
                json_object_set_new(open, "tool_calls", calls = json_array());
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:o, s:O}}", "id", call_id,
                                                   "type", "function", "function", "name", flat,
                                                   "arguments", args));
        } else if (!strcmp(ty, "function_call_output")) {
            json_t *call_id;
            if ((rc = item_string(it, "call_id", at, &call_id, e)))
                break;
            json_t *o;
            if ((rc = item_member(it, "output", at, param, sizeof param, &o, e)) ||
                (rc = srv_parts_text(o, param, USER_PARTS, &v, e)))
                break;
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool",
                                                  "tool_call_id", call_id, "content", v));
            open = NULL;
        } else if (!strcmp(ty, "reasoning")) {
            /* its text in clear (content), else its summary; encrypted_content
             * is OpenAI's and cannot be read here */
            json_t *c = json_object_get(it, "content"), *s = json_object_get(it, "summary");
            snprintf(param, sizeof param, "%s.%s", at,
                     json_array_size(c) ? "content" : "summary");
            if (json_array_size(c))
                rc = srv_parts_text(c, param, REASONING_PARTS, &v, e);
            else if (json_array_size(s))
                rc = srv_parts_text(s, param, SUMMARY_PARTS, &v, e);
            if (rc)
                break;
            json_decref(thinking);
            thinking = v;
        } else if (!strcmp(ty, "item_reference")) {
            rc = unsupported(e, at, "this server keeps responses, not items; send the items "
                             "themselves, or previous_response_id");
        } else {
            snprintf(param, sizeof param, "%s.type", at);
            rc = srv_fail(e, 400, "invalid_request_error", param, "invalid_value",
                          "Invalid value for '%s': input items of type \"%.40s\" are not "
                          "supported (message, function_call, function_call_output, reasoning).",
                          param, ty);
        }
    }
    json_decref(thinking);
    if (rc == 0 && json_array_size(msgs) == 0)
        rc = srv_fail(e, 400, "invalid_request_error", "input", "invalid_value",
                      "Invalid value for 'input': it holds no message.");
    return rc;
}

/* A function tool ({"type": "function", "name", "description"?,
 * "parameters"?, "strict"?}) in the chat form, in namespace ns or none. */
static int add_function(const json_t *t, const char *at, const char *ns, json_t *out,
                        json_t *names, srv_err *e)
{
    char param[160];
    json_t *name = json_object_get(t, "name");
    if (!json_is_string(name)) {
        snprintf(param, sizeof param, "%s.name", at);
        return srv_bad_type(e, param, "a string", name ? name : json_null());
    }
    json_t *flat = srv_flat_name(ns, json_string_value(name));
    if (!flat)
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    json_t *f = json_pack("{s:o}", "name", flat);
    static const char *const keys[] = {"description", "parameters", "strict", NULL};
    for (int k = 0; keys[k]; k++)
        if (srv_member(t, keys[k]))
            json_object_set(f, keys[k], json_object_get(t, keys[k]));
    if (ns)
        json_object_set_new(names, json_string_value(flat),
                            json_pack("{s:s, s:O}", "namespace", ns, "name", name));
    json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", f));
    return 0;
}

/* tools: function tools, and namespaces of them ({"type": "namespace",
 * "name", "tools": [...]}). Tools the server cannot run (hosted tools:
 * web_search, file_search, code_interpreter, ...; custom tools) are not
 * offered to the model, with a note: clients such as Codex send them by
 * default. */
static int tools_of(const json_t *root, json_t *chat, json_t *meta, srv_err *e)
{
    json_t *tools = srv_member(root, "tools"), *choice = srv_member(root, "tool_choice");
    json_t *names = json_object_get(meta, "namespaces"), *notes = json_object_get(meta, "notes");
    char param[96], sub[160];
    if (tools) {
        if (!json_is_array(tools))
            return srv_bad_type(e, "tools", "an array", tools);
        json_t *out = json_array();
        json_object_set_new(chat, "tools", out);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i);
            snprintf(param, sizeof param, "tools[%zu]", i);
            if (!json_is_object(t))
                return srv_bad_type(e, param, "an object", t);
            const char *ty = json_string_value(json_object_get(t, "type"));
            if (!ty) {
                snprintf(param, sizeof param, "tools[%zu].type", i);
                return srv_bad_type(e, param, "a string", json_object_get(t, "type") ?
                                    json_object_get(t, "type") : json_null());
            }
            if (!strcmp(ty, "function")) {
                if (add_function(t, param, NULL, out, names, e))
                    return -1;
                continue;
            }
            if (strcmp(ty, "namespace")) {
                char note[256];
                snprintf(note, sizeof note, "%s (\"%.40s\") is not offered to the model: only "
                         "function tools run here", param, ty);
                json_array_append_new(notes, json_string(note));
                continue;
            }
            json_t *ns = json_object_get(t, "name"), *list = json_object_get(t, "tools");
            if (!json_is_string(ns)) {
                snprintf(sub, sizeof sub, "%s.name", param);
                return srv_bad_type(e, sub, "a string", ns ? ns : json_null());
            }
            if (!json_is_array(list)) {
                snprintf(sub, sizeof sub, "%s.tools", param);
                return srv_bad_type(e, sub, "an array", list ? list : json_null());
            }
            for (size_t k = 0; k < json_array_size(list); k++) {
                json_t *f = json_array_get(list, k);
                const char *fty = json_string_value(json_object_get(f, "type"));
                snprintf(sub, sizeof sub, "%s.tools[%zu]", param, k);
                if (!json_is_object(f) || !fty || strcmp(fty, "function"))
                    return srv_fail(e, 400, "invalid_request_error", sub, "invalid_value",
                                    "Invalid value for '%s': a namespace holds function tools.",
                                    sub);
                if (add_function(f, sub, json_string_value(ns), out, names, e))
                    return -1;
            }
        }
    }
    if (choice) {
        if (json_is_object(choice)) {
            const char *ty = json_string_value(json_object_get(choice, "type"));
            if (!ty || strcmp(ty, "function"))
                return srv_fail(e, 400, "invalid_request_error", "tool_choice.type",
                                "invalid_value", "Invalid value for 'tool_choice.type': \"%.40s\": "
                                "a function ({\"type\": \"function\", \"name\": ...}) or \"none\", "
                                "\"auto\", \"required\".", ty ? ty : "(none)");
            json_t *name = json_object_get(choice, "name"), *ns = json_object_get(choice,
                                                                                  "namespace");
            if (!json_is_string(name))
                return srv_bad_type(e, "tool_choice.name", "a string", name ? name : json_null());
            json_t *flat = srv_flat_name(json_string_value(ns), json_string_value(name));
            json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:o}}", "type",
                                                               "function", "function", "name",
                                                               flat));
        } else {
            json_object_set(chat, "tool_choice", choice);
        }
    }
    return 0;
}

/* text: {"format": {"type": "text" | "json_object" | "json_schema", "name",
 * "schema", "strict"?}, "verbosity"?} */
static int format_of(const json_t *root, json_t *chat, srv_err *e)
{
    json_t *text = srv_member(root, "text"), *f;
    if (!text)
        return 0;
    if (!json_is_object(text))
        return srv_bad_type(e, "text", "an object", text);
    if (!(f = srv_member(text, "format")))
        return 0;
    if (!json_is_object(f))
        return srv_bad_type(e, "text.format", "an object", f);
    const char *ty = json_string_value(json_object_get(f, "type"));
    if (!ty)
        return srv_bad_type(e, "text.format.type", "a string",
                            json_object_get(f, "type") ? json_object_get(f, "type") : json_null());
    if (!strcmp(ty, "text") || !strcmp(ty, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", ty));
        return 0;
    }
    if (strcmp(ty, "json_schema"))
        return srv_fail(e, 400, "invalid_request_error", "text.format.type", "invalid_value",
                        "Invalid value for 'text.format.type': \"%.40s\" (text, json_object, "
                        "json_schema).", ty);
    json_t *sc = json_object_get(f, "schema");
    if (!sc)
        return srv_fail(e, 400, "invalid_request_error", "text.format.schema",
                        "missing_required_parameter",
                        "Missing required parameter: 'text.format.schema'.");
    json_object_set_new(chat, "response_format",
                        json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema",
                                  "schema", sc));
    return 0;
}

/* The request's fields a response object repeats, with OpenAI's defaults. */
static json_t *echo_of(const json_t *root)
{
    json_t *o = json_object(), *v;
    static const char *const keys[] = {"instructions", "max_output_tokens", "temperature",
                                       "top_p", "user", NULL};
    for (int k = 0; keys[k]; k++)
        json_object_set(o, keys[k], (v = srv_member(root, keys[k])) ? v : json_null());
    v = srv_member(root, "metadata");
    json_object_set_new(o, "metadata", v ? json_incref(v) : json_object());
    v = srv_member(root, "parallel_tool_calls");
    json_object_set_new(o, "parallel_tool_calls", json_boolean(!v || !json_is_false(v)));
    v = srv_member(root, "previous_response_id");
    json_object_set_new(o, "previous_response_id", v ? json_incref(v) : json_null());
    v = srv_member(root, "reasoning");
    json_t *ef = srv_member(v, "effort"), *sum = srv_member(v, "summary");
    json_object_set_new(o, "reasoning", json_pack("{s:O, s:O}", "effort", ef ? ef : json_null(),
                                                  "summary", sum ? sum : json_null()));
    v = srv_member(root, "store");
    json_object_set_new(o, "store", json_boolean(!v || !json_is_false(v)));
    v = srv_member(srv_member(root, "text"), "format");
    json_object_set_new(o, "text", v ? json_pack("{s:O}", "format", v)
                                     : json_pack("{s:{s:s}}", "format", "type", "text"));
    v = srv_member(root, "tool_choice");
    json_object_set_new(o, "tool_choice", v ? json_incref(v) : json_string("auto"));
    v = srv_member(root, "tools");
    json_object_set_new(o, "tools", v ? json_incref(v) : json_array());
    v = srv_member(root, "truncation");
    json_object_set_new(o, "truncation", v ? json_incref(v) : json_string("disabled"));
    return o;
}

/* The leading system messages (instructions, developer messages) as one:
 * templates such as gpt-oss's take only the first message as the system
 * prompt, and Codex sends several. */
static void merge_system(json_t *msgs)
{
    size_t n = 0, total = 0;
    json_t *m;
    while ((m = json_array_get(msgs, n)) &&
           !strcmp(json_string_value(json_object_get(m, "role")), "system"))
        total += json_string_length(json_object_get(m, "content")) + 2, n++;
    if (n < 2)
        return;
    char *buf = malloc(total), *q = buf;
    if (!buf)
        return;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_object_get(json_array_get(msgs, i), "content");
        if (!json_string_length(c))
            continue;
        if (q > buf)
            *q++ = '\n', *q++ = '\n';
        memcpy(q, json_string_value(c), json_string_length(c));
        q += json_string_length(c);
    }
    json_object_set_new(json_array_get(msgs, 0), "content", json_stringn(buf, (size_t)(q - buf)));
    free(buf);
    for (size_t i = 1; i < n; i++)
        json_array_remove(msgs, 1);
}

int srv_responses_compose(srv_request *r, const char *prev, char **conversation, srv_err *e)
{
    json_t *chat = json_loads(r->chat_json, 0, NULL);
    json_t *own = json_object_get(chat, "messages");
    json_t *before = prev ? json_loads(prev, 0, NULL) : NULL; /* (json_is_array is a macro) */
    if (before && !json_is_array(before)) {
        json_decref(before);
        before = NULL;
    }
    json_t *all = before ? before : json_array();
    json_array_extend(all, own);
    *conversation = json_dumps(all, JSON_COMPACT);
    if (r->instructions && *r->instructions)
        json_array_insert_new(all, 0, json_pack("{s:s, s:s}", "role", "system", "content",
                                                r->instructions));
    merge_system(all);
    json_object_set_new(chat, "messages", all);
    char *s = json_dumps(chat, JSON_COMPACT);
    json_decref(chat);
    if (!s || !*conversation) {
        free(s);
        free(*conversation);
        *conversation = NULL;
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    free(r->chat_json);
    r->chat_json = s;
    return 0;
}

int srv_responses_to_chat(const json_t *root, json_t **chat_out, json_t **meta_out, srv_err *e)
{
    json_t *meta = json_pack("{s:{}, s:[]}", "namespaces", "notes");
    *meta_out = meta;
    json_t *chat = json_object(), *msgs = json_array(), *v;
    json_object_set_new(chat, "messages", msgs);
    *chat_out = chat;
    if ((v = srv_member(root, "previous_response_id")) && !json_is_string(v))
        return srv_bad_type(e, "previous_response_id", "a string", v);
    if ((v = srv_member(root, "store")) && !json_is_boolean(v))
        return srv_bad_type(e, "store", "a boolean", v);
    if ((v = srv_member(root, "conversation")))
        return unsupported(e, "conversation", "this server keeps no conversations; send the "
                           "whole conversation in 'input'");
    if ((v = srv_member(root, "prompt")))
        return unsupported(e, "prompt", "stored prompt templates are OpenAI's");
    if ((v = srv_member(root, "background")) && !json_is_false(v))
        return unsupported(e, "background", "responses run while the request is open");
    if ((v = srv_member(root, "top_logprobs")) && !(json_is_integer(v) &&
                                                   json_integer_value(v) == 0))
        return unsupported(e, "top_logprobs", "logprobs are served by /v1/chat/completions");
    if ((v = srv_member(root, "include"))) {
        if (!json_is_array(v))
            return srv_bad_type(e, "include", "an array", v);
        for (size_t i = 0; i < json_array_size(v); i++) {
            const char *s = json_string_value(json_array_get(v, i));
            if (s && !strcmp(s, "reasoning.encrypted_content"))
                continue;
            char param[32];
            snprintf(param, sizeof param, "include[%zu]", i);
            return unsupported(e, param, "only \"reasoning.encrypted_content\" is accepted (the "
                               "reasoning comes back in clear)");
        }
    }
    v = srv_member(root, "instructions");
    if (v && !json_is_string(v))
        return srv_bad_type(e, "instructions", "a string", v);
    json_t *input = srv_member(root, "input");
    if (!input)
        return srv_fail(e, 400, "invalid_request_error", "input", "missing_required_parameter",
                        "Missing required parameter: 'input'.");
    if (input_messages(input, msgs, e) || tools_of(root, chat, meta, e) ||
        format_of(root, chat, e))
        return -1;
    if ((v = srv_member(root, "max_output_tokens"))) {
        if (!json_is_integer(v))
            return srv_bad_type(e, "max_output_tokens", "an integer", v);
        if (json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX)
            return srv_fail(e, 400, "invalid_request_error", "max_output_tokens", "invalid_value",
                            "Invalid value for 'max_output_tokens': expected an integer between "
                            "1 and %d, got %lld.", INT32_MAX, (long long)json_integer_value(v));
        json_object_set(chat, "max_completion_tokens", v);
    }
    if ((v = srv_member(root, "reasoning"))) {
        if (!json_is_object(v))
            return srv_bad_type(e, "reasoning", "an object", v);
        json_t *ef = srv_member(v, "effort");
        if (ef && !json_is_string(ef))
            return srv_bad_type(e, "reasoning.effort", "a string", ef);
        const char *s = ef ? json_string_value(ef) : NULL;
        if (s && (!strcmp(s, "minimal") || !strcmp(s, "none")))
            s = "low"; /* the lowest the templates know */
        if (s)
            json_object_set_new(chat, "reasoning_effort", json_string(s));
        json_t *sum = srv_member(v, "summary");
        if (sum && !json_is_string(sum))
            return srv_bad_type(e, "reasoning.summary", "a string", sum);
    }
    /* the sampling fields both APIs share, and this server's extensions */
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "seed", "top_k",
                                       "min_p", "repeat_penalty", "presence_penalty",
                                       "frequency_penalty", "stop", "ignore_eos",
                                       "chat_template_kwargs", NULL};
    for (int k = 0; same[k]; k++)
        if ((v = json_object_get(root, same[k])))
            json_object_set(chat, same[k], v);
    json_object_set_new(meta, "echo", echo_of(root));
    return 0;
}

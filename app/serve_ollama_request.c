/* moestream serve: a request of Ollama's API (POST /api/chat, /api/generate)
 * as the chat-completions request it amounts to. Editors and chat front
 * ends that know local models through Ollama (Open WebUI, Continue, Zed,
 * editor plugins) speak this API; on the default port of their settings
 * they find the checkpoint's own model. As with the other APIs
 * (serve_responses_request.c) the translation keeps one path from a request
 * to the template, the sampler and the tool-call parser.
 *
 *   messages              as in chat completions; an assistant's thinking is
 *                         its reasoning, tool_calls' arguments are objects
 *   prompt, system        /api/generate: one user message after a system one
 *   tools                 OpenAI's function tools, as sent
 *   format                "json" (any JSON) or a JSON schema
 *   think                 true / false: the template's enable_thinking;
 *                         "low" / "medium" / "high": its reasoning effort
 *   options               temperature, top_p, top_k, min_p, seed, stop,
 *                         num_predict, repeat_penalty, presence_penalty,
 *                         frequency_penalty; the runner's own (num_ctx,
 *                         num_gpu, num_thread, ...) have no effect here
 *   stream                true unless false (Ollama's default)
 *
 * Refused with a 400 naming the field: images, raw prompts, suffix,
 * templates and contexts of the old API. libc + jansson only (the fuzzing
 * harness links it). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "serve.h"

static int refuse(srv_err *e, const char *param, const char *why)
{
    return srv_fail(e, 400, "invalid_request_error", param, "unsupported_parameter",
                    "Unsupported parameter: '%s': %s.", param, why);
}

/* Fields that carry something when present, non-empty and not false. */
static int given(const json_t *v)
{
    return v && !json_is_null(v) && !json_is_false(v) &&
           !(json_is_string(v) && !json_string_length(v)) &&
           !(json_is_array(v) && !json_array_size(v));
}

static int chat_messages(const json_t *root, json_t *chat, srv_err *e)
{
    json_t *ms = srv_member(root, "messages");
    if (!json_is_array(ms))
        return ms ? srv_bad_type(e, "messages", "an array", ms)
                  : srv_fail(e, 400, "invalid_request_error", "messages",
                             "missing_required_parameter", "Missing required parameter: "
                             "'messages'.");
    json_t *out = json_array();
    json_object_set_new(chat, "messages", out);
    for (size_t i = 0; i < json_array_size(ms); i++) {
        json_t *m = json_array_get(ms, i), *v;
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return srv_bad_type(e, param, "an object", m);
        snprintf(param, sizeof param, "messages[%zu].images", i);
        if (given(json_object_get(m, "images")))
            return refuse(e, param, "this server reads text only");
        json_t *n = json_deep_copy(m);
        json_array_append_new(out, n);
        json_object_del(n, "images");
        if ((v = srv_member(m, "thinking")))
            json_object_set(n, "reasoning_content", v);
        if (!json_object_get(n, "content"))
            json_object_set_new(n, "content", json_string(""));
    }
    return 0;
}

static int generate_messages(const json_t *root, json_t *chat, srv_err *e)
{
    static const char *const refused[] = {"raw", "suffix", "template", "context", "images",
                                          NULL};
    for (int k = 0; refused[k]; k++)
        if (given(json_object_get(root, refused[k])))
            return refuse(e, refused[k], !strcmp(refused[k], "raw")
                                             ? "send raw prompts to /v1/completions"
                                             : "not served by this server's /api/generate");
    json_t *p = srv_member(root, "prompt"), *s = srv_member(root, "system");
    if (!json_is_string(p))
        return p ? srv_bad_type(e, "prompt", "a string", p)
                 : srv_fail(e, 400, "invalid_request_error", "prompt",
                            "missing_required_parameter", "Missing required parameter: 'prompt'.");
    if (s && !json_is_string(s))
        return srv_bad_type(e, "system", "a string", s);
    json_t *out = json_array();
    json_object_set_new(chat, "messages", out);
    if (s && json_string_length(s))
        json_array_append_new(out, json_pack("{s:s, s:O}", "role", "system", "content", s));
    json_array_append_new(out, json_pack("{s:s, s:O}", "role", "user", "content", p));
    return 0;
}

static int options_of(const json_t *root, json_t *chat, srv_err *e)
{
    json_t *o = srv_member(root, "options"), *v;
    if (!o)
        return 0;
    if (!json_is_object(o))
        return srv_bad_type(e, "options", "an object", o);
    static const char *const same[] = {"temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                       "repeat_penalty", "presence_penalty",
                                       "frequency_penalty", NULL};
    for (int k = 0; same[k]; k++)
        if ((v = srv_member(o, same[k])))
            json_object_set(chat, same[k], v);
    /* num_predict: -1 (no limit) and -2 (fill the context) are the defaults here */
    if ((v = srv_member(o, "num_predict"))) {
        if (!json_is_integer(v))
            return srv_bad_type(e, "options.num_predict", "an integer", v);
        if (json_integer_value(v) > 0)
            json_object_set(chat, "max_completion_tokens", v);
        else if (json_integer_value(v) == 0)
            return srv_fail(e, 400, "invalid_request_error", "options.num_predict",
                            "invalid_value", "Invalid value for 'options.num_predict': 0 tokens.");
    }
    return 0;
}

int srv_ollama_to_chat(const json_t *root, int generate, json_t **chat_out, srv_err *e)
{
    json_t *chat = json_object(), *v;
    *chat_out = chat;
    if ((generate ? generate_messages : chat_messages)(root, chat, e) || options_of(root, chat, e))
        return -1;
    if ((v = srv_member(root, "tools")))
        json_object_set(chat, "tools", v);
    if ((v = srv_member(root, "format"))) {
        if (json_is_string(v) && !strcmp(json_string_value(v), "json"))
            json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        else if (json_is_object(v))
            json_object_set_new(chat, "response_format",
                                json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema",
                                          "schema", v));
        else if (!(json_is_string(v) && !json_string_length(v)))
            return srv_fail(e, 400, "invalid_request_error", "format", "invalid_value",
                            "Invalid value for 'format': \"json\" or a JSON schema.");
    }
    if ((v = srv_member(root, "think"))) {
        if (json_is_boolean(v))
            json_object_set_new(chat, "chat_template_kwargs",
                                json_pack("{s:b}", "enable_thinking", json_is_true(v)));
        else if (json_is_string(v))
            json_object_set(chat, "reasoning_effort", v);
        else
            return srv_bad_type(e, "think", "a boolean or \"low\", \"medium\", \"high\"", v);
    }
    if ((v = srv_member(root, "model")))
        json_object_set(chat, "model", v);
    v = json_object_get(root, "stream");
    json_object_set_new(chat, "stream", v && !json_is_null(v) ? json_incref(v) : json_true());
    return 0;
}

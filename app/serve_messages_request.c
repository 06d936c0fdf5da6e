/* moestream serve: a request of Anthropic's Messages API (POST /v1/messages,
 * and /v1/messages/count_tokens) as the chat-completions request it amounts
 * to. Agents built on Anthropic's SDKs
 * (Claude Code among them) speak only this API; pointed at a local server
 * (ANTHROPIC_BASE_URL) they run on the checkpoint's own model. As with the
 * Responses API (serve_responses_request.c), the translation keeps one path
 * from a request to the template, the sampler and the tool-call parser.
 *
 *   system               a system message first (text blocks joined); a
 *                        message of role system stays where it is
 *   user text blocks     a user message; each tool_result block a tool
 *                        message, in the order of the blocks
 *   assistant blocks     one assistant message: text, thinking (its
 *                        reasoning), tool_use (its tool calls)
 *   tools, tool_choice   function tools; auto / any (required) / tool
 *                        (named) / none
 *   max_tokens, stop_sequences, temperature, top_p, top_k, stream
 *   thinking             enabled / adaptive / disabled: the template's
 *                        enable_thinking (budget_tokens is not enforced)
 *   output_config.effort the template's reasoning effort
 *
 * Refused with a 400 naming the block or field: images and documents,
 * server tools (web search, code execution, ...), MCP servers. libc +
 * jansson only (the fuzzing harness links it). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static const char *const TEXT_BLOCKS[] = {"text", NULL};

/* Appends text to a message's content (joined with a newline). */
static void add_text(json_t *m, const json_t *t)
{
    json_t *c = json_object_get(m, "content");
    if (!json_is_string(c) || !json_string_length(c)) {
        json_object_set(m, "content", (json_t *)t);
        return;
    }
    size_t a = json_string_length(c), b = json_string_length(t);
    char *buf = malloc(a + b + 2);
    if (!buf)
        return;
    memcpy(buf, json_string_value(c), a);
    buf[a] = '\n';
    memcpy(buf + a + 1, json_string_value(t), b);
    json_object_set_new(m, "content", json_stringn(buf, a + b + 1));
    free(buf);
}

/* A user turn: text blocks make a user message, tool_result blocks tool
 * messages, in order. */
static int user_turn(const json_t *content, const char *at, json_t *msgs, srv_err *e)
{
    char param[160];
    if (json_is_string(content)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", content));
        return 0;
    }
    json_t *pending = NULL; /* the user message text blocks go to */
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *b = json_array_get(content, i), *t = NULL;
        snprintf(param, sizeof param, "%s.content[%zu]", at, i);
        if (!json_is_object(b))
            return srv_bad_type(e, param, "an object", b);
        const char *ty = json_string_value(json_object_get(b, "type"));
        if (ty && !strcmp(ty, "text")) {
            t = json_object_get(b, "text");
            if (!json_is_string(t)) {
                snprintf(param, sizeof param, "%s.content[%zu].text", at, i);
                return srv_bad_type(e, param, "a string", t ? t : json_null());
            }
            if (!pending) {
                pending = json_pack("{s:s, s:s}", "role", "user", "content", "");
                json_array_append_new(msgs, pending);
            }
            add_text(pending, t);
        } else if (ty && !strcmp(ty, "tool_result")) {
            json_t *id = json_object_get(b, "tool_use_id"), *c = json_object_get(b, "content");
            if (!json_is_string(id)) {
                snprintf(param, sizeof param, "%s.content[%zu].tool_use_id", at, i);
                return srv_bad_type(e, param, "a string", id ? id : json_null());
            }
            snprintf(param, sizeof param, "%s.content[%zu].content", at, i);
            if (!c || json_is_null(c))
                t = json_string("");
            else if (srv_parts_text(c, param, TEXT_BLOCKS, &t, e))
                return -1;
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool",
                                                  "tool_call_id", id, "content", t));
            pending = NULL;
        } else {
            snprintf(param, sizeof param, "%s.content[%zu].type", at, i);
            return srv_fail(e, 400, "invalid_request_error", param, "invalid_value",
                            "Invalid value for '%s': \"%.40s\" blocks are not supported in a "
                            "user turn (text, tool_result).", param, ty ? ty : "(none)");
        }
    }
    if (!json_array_size(content))
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", ""));
    return 0;
}

/* An assistant turn: one message with its text, reasoning and calls. */
static int assistant_turn(const json_t *content, const char *at, json_t *msgs, srv_err *e)
{
    char param[160];
    json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
    json_array_append_new(msgs, m);
    if (json_is_string(content)) {
        json_object_set(m, "content", (json_t *)content);
        return 0;
    }
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *b = json_array_get(content, i), *t;
        snprintf(param, sizeof param, "%s.content[%zu]", at, i);
        if (!json_is_object(b))
            return srv_bad_type(e, param, "an object", b);
        const char *ty = json_string_value(json_object_get(b, "type"));
        const char *key = !ty ? NULL : !strcmp(ty, "text") ? "text"
                        : !strcmp(ty, "thinking") ? "thinking" : NULL;
        if (key) {
            t = json_object_get(b, key);
            if (!json_is_string(t)) {
                snprintf(param, sizeof param, "%s.content[%zu].%s", at, i, key);
                return srv_bad_type(e, param, "a string", t ? t : json_null());
            }
            if (!strcmp(key, "text"))
                add_text(m, t);
            else
                json_object_set(m, "reasoning_content", t);
        } else if (ty && !strcmp(ty, "redacted_thinking")) {
            continue; /* Anthropic's, encrypted */
        } else if (ty && !strcmp(ty, "tool_use")) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"),
                   *in = json_object_get(b, "input");
            const char *bad = !json_is_string(id) ? "id" : !json_is_string(name) ? "name"
                            : !json_is_object(in) ? "input" : NULL;
            if (bad) {
                snprintf(param, sizeof param, "%s.content[%zu].%s", at, i, bad);
                json_t *v = json_object_get(b, bad);
                return srv_bad_type(e, param, strcmp(bad, "input") ? "a string" : "an object",
                                    v ? v : json_null());
            }
            json_t *calls = json_object_get(m, "tool_calls");
            if (!calls)
                json_object_set_new(m, "tool_calls", calls = json_array());
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type",
                                                   "function", "function", "name", name,
                                                   "arguments", in));
        } else {
            snprintf(param, sizeof param, "%s.content[%zu].type", at, i);
            return srv_fail(e, 400, "invalid_request_error", param, "invalid_value",
                            "Invalid value for '%s': \"%.40s\" blocks are not supported in an "
                            "assistant turn (text, thinking, tool_use).", param,
                            ty ? ty : "(none)");
        }
    }
    return 0;
}

static int messages_of(const json_t *root, json_t *msgs, srv_err *e)
{
    json_t *v = srv_member(root, "system"), *t;
    if (v) {
        if (srv_parts_text(v, "system", TEXT_BLOCKS, &t, e))
            return -1;
        if (json_string_length(t))
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", t));
        else
            json_decref(t);
    }
    json_t *ms = srv_member(root, "messages");
    if (!ms)
        return srv_fail(e, 400, "invalid_request_error", "messages", "missing_required_parameter",
                        "Missing required parameter: 'messages'.");
    if (!json_is_array(ms))
        return srv_bad_type(e, "messages", "an array", ms);
    if (!json_array_size(ms))
        return srv_fail(e, 400, "invalid_request_error", "messages", "invalid_value",
                        "Invalid value for 'messages': it must hold at least one message.");
    for (size_t i = 0; i < json_array_size(ms); i++) {
        json_t *m = json_array_get(ms, i), *role, *c;
        char at[64], param[96];
        snprintf(at, sizeof at, "messages[%zu]", i);
        if (!json_is_object(m))
            return srv_bad_type(e, at, "an object", m);
        snprintf(param, sizeof param, "%s.role", at);
        role = json_object_get(m, "role");
        const char *rs = json_string_value(role);
        if (!rs || (strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "system")))
            return srv_fail(e, 400, "invalid_request_error", param, "invalid_value",
                            "Invalid value for '%s': expected \"user\", \"assistant\" or "
                            "\"system\".", param);
        snprintf(param, sizeof param, "%s.content", at);
        c = json_object_get(m, "content");
        if (!json_is_string(c) && !json_is_array(c))
            return srv_bad_type(e, param, "a string or an array of content blocks",
                                c ? c : json_null());
        if (!strcmp(rs, "system")) { /* a system message where it stands */
            if (srv_parts_text(c, param, TEXT_BLOCKS, &t, e))
                return -1;
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", t));
            continue;
        }
        if ((!strcmp(rs, "user") ? user_turn : assistant_turn)(c, at, msgs, e))
            return -1;
    }
    return 0;
}

/* tools: [{"name", "description"?, "input_schema"}]; tool_choice {"type":
 * "auto" | "any" | "tool" | "none", "name"?} */
static int tools_of(const json_t *root, json_t *chat, srv_err *e)
{
    json_t *tools = srv_member(root, "tools"), *choice = srv_member(root, "tool_choice");
    char param[96];
    if (tools) {
        if (!json_is_array(tools))
            return srv_bad_type(e, "tools", "an array", tools);
        json_t *out = json_array();
        json_object_set_new(chat, "tools", out);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i), *name;
            snprintf(param, sizeof param, "tools[%zu]", i);
            if (!json_is_object(t))
                return srv_bad_type(e, param, "an object", t);
            const char *ty = json_string_value(json_object_get(t, "type"));
            if (ty && strcmp(ty, "custom")) {
                snprintf(param, sizeof param, "tools[%zu].type", i);
                return srv_fail(e, 400, "invalid_request_error", param, "invalid_value",
                                "Invalid value for '%s': \"%.40s\": server tools are not "
                                "supported, only tools with an input_schema.", param, ty);
            }
            name = json_object_get(t, "name");
            if (!json_is_string(name)) {
                snprintf(param, sizeof param, "tools[%zu].name", i);
                return srv_bad_type(e, param, "a string", name ? name : json_null());
            }
            json_t *f = json_pack("{s:O}", "name", name), *v;
            if ((v = srv_member(t, "description")))
                json_object_set(f, "description", v);
            if ((v = srv_member(t, "input_schema")))
                json_object_set(f, "parameters", v);
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", f));
        }
    }
    if (!choice)
        return 0;
    if (!json_is_object(choice))
        return srv_bad_type(e, "tool_choice", "an object", choice);
    const char *ty = json_string_value(json_object_get(choice, "type"));
    if (ty && !strcmp(ty, "tool")) {
        json_t *name = json_object_get(choice, "name");
        if (!json_is_string(name))
            return srv_bad_type(e, "tool_choice.name", "a string", name ? name : json_null());
        json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function",
                                                           "function", "name", name));
        return 0;
    }
    const char *how = !ty ? NULL : !strcmp(ty, "auto") ? "auto" : !strcmp(ty, "any") ? "required"
                    : !strcmp(ty, "none") ? "none" : NULL;
    if (!how)
        return srv_fail(e, 400, "invalid_request_error", "tool_choice.type", "invalid_value",
                        "Invalid value for 'tool_choice.type': expected \"auto\", \"any\", "
                        "\"tool\" or \"none\".");
    json_object_set_new(chat, "tool_choice", json_string(how));
    return 0;
}

int srv_messages_to_chat(const json_t *root, int count_only, json_t **chat_out, srv_err *e)
{
    json_t *chat = json_object(), *msgs = json_array(), *v;
    json_object_set_new(chat, "messages", msgs);
    *chat_out = chat;
    if ((v = srv_member(root, "mcp_servers")) && !(json_is_array(v) && !json_array_size(v)))
        return srv_fail(e, 400, "invalid_request_error", "mcp_servers", "unsupported_parameter",
                        "Unsupported parameter: 'mcp_servers': this server calls no MCP server; "
                        "give the tools to the client.");
    if (messages_of(root, msgs, e) || tools_of(root, chat, e))
        return -1;
    v = srv_member(root, "max_tokens");
    if (!v && !count_only)
        return srv_fail(e, 400, "invalid_request_error", "max_tokens",
                        "missing_required_parameter", "Missing required parameter: 'max_tokens'.");
    if (v && !count_only) {
        if (!json_is_integer(v))
            return srv_bad_type(e, "max_tokens", "an integer", v);
        json_object_set(chat, "max_completion_tokens", v);
    }
    if ((v = srv_member(root, "stop_sequences")))
        json_object_set(chat, "stop", v);
    if ((v = srv_member(root, "thinking"))) {
        const char *ty = json_string_value(json_object_get(v, "type"));
        if (!json_is_object(v) || !ty || (strcmp(ty, "enabled") && strcmp(ty, "disabled") &&
                                          strcmp(ty, "adaptive")))
            return srv_fail(e, 400, "invalid_request_error", "thinking.type", "invalid_value",
                            "Invalid value for 'thinking.type': expected \"enabled\" or "
                            "\"disabled\".");
        json_t *kw = json_object_get(root, "chat_template_kwargs");
        kw = json_is_object(kw) ? json_deep_copy(kw) : json_object();
        json_object_set_new(kw, "enable_thinking", json_boolean(strcmp(ty, "disabled") != 0));
        json_object_set_new(chat, "chat_template_kwargs", kw);
    } else if ((v = json_object_get(root, "chat_template_kwargs"))) {
        json_object_set(chat, "chat_template_kwargs", v);
    }
    /* output_config.effort: the template's reasoning effort (low, medium, high) */
    const char *ef = json_string_value(json_object_get(srv_member(root, "output_config"),
                                                       "effort"));
    if (ef)
        json_object_set_new(chat, "reasoning_effort",
                            json_string(!strcmp(ef, "low") || !strcmp(ef, "minimal") ? "low"
                                        : !strcmp(ef, "medium") ? "medium" : "high"));
    static const char *const same[] = {"model", "temperature", "top_p", "top_k", "stream",
                                       "seed", "min_p", "repeat_penalty", "ignore_eos", NULL};
    for (int k = 0; same[k]; k++)
        if ((v = json_object_get(root, same[k])))
            json_object_set(chat, same[k], v);
    if (count_only)
        json_object_del(chat, "stream");
    return 0;
}

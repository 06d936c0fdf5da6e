/* The server's request parser (app/serve_request.c, compiled into this test:
 * it is front-end code, not part of libmoestream): fields, types, ranges,
 * the parameter named in each error, the error JSON, the API key check, and
 * every input of the fuzzing corpus (tools/fuzz/corpus) parsed without harm.
 * (make does not track the included file: after changing it, `touch` this one.) */
#include <dirent.h>
#include <jansson.h>

#include "serve.h"
#include "test.h"

static int parse(int kind, const char *body, srv_request *r, srv_err *e)
{
    memset(e, 0, sizeof *e);
    return srv_parse_request(kind, body, strlen(body), r, e);
}

/* The body is refused with that status, parameter and code. */
static void refused(int kind, const char *body, int status, const char *param, const char *code)
{
    srv_request r;
    srv_err e;
    CHECK(parse(kind, body, &r, &e) == -1, "accepted %s", body);
    CHECK(e.status == status, "%s: status %d", body, e.status);
    CHECK(!strcmp(e.param, param), "%s: param \"%s\", want \"%s\"", body, e.param, param);
    CHECK(e.code && !strcmp(e.code, code), "%s: code %s, want %s", body, e.code, code);
    CHECK(e.message[0], "%s: no message", body);
    srv_request_free(&r);
}

static void test_chat_fields(void)
{
    srv_request r;
    srv_err e;
    const char *b = "{\"model\": \"x\", \"messages\": [{\"role\": \"system\", \"content\": \"S\"},"
                    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
                    "{\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\":"
                    " null, \"reasoning_content\": \"R\"}], \"max_tokens\": 7, "
                    "\"max_completion_tokens\": 9, \"temperature\": 0, \"top_p\": 0.5, \"seed\": -1,"
                    " \"stop\": [\"x\", \"\", \"yz\"], \"stream\": true, \"stream_options\": "
                    "{\"include_usage\": true}, \"n\": 1, \"unknown\": {\"a\": [1]}, "
                    "\"reasoning_effort\": \"low\", \"chat_template_kwargs\": "
                    "{\"enable_thinking\": false}, \"logprobs\": false, \"top_k\": 3}";
    CHECK(parse(SRV_CHAT, b, &r, &e) == 0, "%s", e.message);
    CHECK(r.n_msgs == 3, "%d messages", r.n_msgs);
    if (r.n_msgs == 3) {
        CHECK(!strcmp(r.msgs[1].content, "a\nb"), "parts joined: \"%s\"", r.msgs[1].content);
        CHECK(!strcmp(r.msgs[2].content, "") && r.msgs[2].reasoning &&
              !strcmp(r.msgs[2].reasoning, "R"), "assistant");
    }
    CHECK(r.max_tokens == 9, "max_completion_tokens wins: %lld", (long long)r.max_tokens);
    CHECK(r.have_temperature && r.temperature == 0 && r.have_top_p && r.top_p == 0.5, "sampling");
    CHECK(r.have_seed && r.seed == UINT64_MAX, "seed %llu", (unsigned long long)r.seed);
    CHECK(r.n_stop == 2 && !strcmp(r.stop[1], "yz"), "stop: %d", r.n_stop);
    CHECK(r.stream && r.include_usage && r.thinking == 0 && r.have_top_k && r.top_k == 3, "flags");
    CHECK(r.reasoning_effort && !strcmp(r.reasoning_effort, "low"), "effort");
    srv_request_free(&r);

    CHECK(parse(SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                          "\"stop\": \"END\", \"max_tokens\": null}", &r, &e) == 0, "%s", e.message);
    CHECK(r.n_stop == 1 && !strcmp(r.stop[0], "END") && r.max_tokens == -1 && r.thinking == -1 &&
          !r.stream, "defaults");
    srv_request_free(&r);
}

/* What the chat template gets: tool calls with their arguments as objects,
 * reasoning also as "thinking", tool results with their ids, tools unless
 * tool_choice is "none", chat_template_kwargs as sent. */
static void test_chat_normalized(void)
{
    srv_request r;
    srv_err e;
    const char *b = "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": "
                    "\"assistant\", \"content\": null, \"reasoning_content\": \"R\", \"tool_calls\": "
                    "[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
                    "\"arguments\": \"{\\\"a\\\": [1, \\\"\u00e9\\\"]}\"}}, {\"function\": {\"name\": "
                    "\"g\", \"arguments\": \"not json\"}}]}, {\"role\": \"tool\", \"tool_call_id\": "
                    "\"c1\", \"content\": \"21C\"}], \"tools\": [{\"type\": \"function\", "
                    "\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}], "
                    "\"chat_template_kwargs\": {\"x\": 1}}";
    CHECK(parse(SRV_CHAT, b, &r, &e) == 0, "%s", e.message);
    json_t *j = r.chat_json ? json_loads(r.chat_json, 0, NULL) : NULL;
    CHECK(j != NULL, "chat_json %s", r.chat_json ? r.chat_json : "(null)");
    json_t *m = json_object_get(j, "messages");
    json_t *a = json_array_get(m, 1), *calls = json_object_get(a, "tool_calls");
    json_t *args0 = json_object_get(json_object_get(json_array_get(calls, 0), "function"),
                                    "arguments");
    json_t *args1 = json_object_get(json_object_get(json_array_get(calls, 1), "function"),
                                    "arguments");
    CHECK(json_is_object(args0) && json_array_size(json_object_get(args0, "a")) == 2,
          "arguments parsed into an object");
    CHECK(json_is_string(args1) && !strcmp(json_string_value(args1), "not json"),
          "arguments that are not an object stay a string");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(calls, 0), "id")), "c1"), "id");
    CHECK(!strcmp(json_string_value(json_object_get(a, "content")), "") &&
          !strcmp(json_string_value(json_object_get(a, "thinking")), "R") &&
          !strcmp(json_string_value(json_object_get(a, "reasoning_content")), "R"), "assistant");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m, 2), "tool_call_id")), "c1"),
          "tool result");
    CHECK(json_array_size(json_object_get(j, "tools")) == 1 && r.tools_json, "tools rendered");
    CHECK(json_integer_value(json_object_get(json_object_get(j, "chat_template_kwargs"), "x")) == 1,
          "kwargs");
    json_decref(j);
    srv_request_free(&r);

    CHECK(parse(SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\":"
                          " [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
                          "\"tool_choice\": \"none\"}", &r, &e) == 0, "%s", e.message);
    CHECK(r.chat_json && !strstr(r.chat_json, "\"tools\"") && !r.tools_json,
          "tool_choice none: no tools in %s", r.chat_json ? r.chat_json : "(null)");
    srv_request_free(&r);

    CHECK(parse(SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\":"
                          " [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
                          "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}, "
                          "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                          "{\"name\": \"x\", \"schema\": {\"type\": \"object\"}}}}", &r, &e) == 0,
          "%s", e.message);
    CHECK(r.force_tool == 2 && r.force_name && !strcmp(r.force_name, "f"), "named tool choice");
    CHECK(r.json_mode == 2 && r.json_schema && strstr(r.json_schema, "object"), "json_schema");
    CHECK(r.tools_json && strstr(r.tools_json, "\"description\":\"\""),
          "a missing description becomes \"\": %s", r.tools_json ? r.tools_json : "(null)");
    srv_request_free(&r);
}

/* A Responses API request read as the chat request it amounts to: the
 * instructions first, typed items in order (calls joining the assistant
 * message before them, reasoning given to the next assistant message, call
 * outputs as tool messages), flat tools and tool_choice in the chat form,
 * text.format as response_format, and the fields a response repeats. */
static void test_responses_translated(void)
{
    srv_request r;
    srv_err e;
    const char *b =
        "{\"model\": \"m\", \"instructions\": \"Be brief.\", \"input\": ["
        "{\"role\": \"user\", \"content\": \"w?\"},"
        "{\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": [], \"content\": [{\"type\": "
        "\"reasoning_text\", \"text\": \"R\"}], \"encrypted_content\": \"x\"},"
        "{\"type\": \"message\", \"role\": \"assistant\", \"content\": [{\"type\": \"output_text\","
        " \"text\": \"A\"}]},"
        "{\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": \"f\", \"arguments\": "
        "\"{\\\"a\\\": 1}\"},"
        "{\"type\": \"function_call\", \"call_id\": \"c2\", \"name\": \"g\", \"arguments\": \"{}\"},"
        "{\"type\": \"function_call_output\", \"call_id\": \"c1\", \"output\": \"21C\"},"
        "{\"type\": \"function_call_output\", \"call_id\": \"c2\", \"output\": [{\"type\": "
        "\"input_text\", \"text\": \"ok\"}]},"
        "{\"type\": \"message\", \"role\": \"user\", \"content\": [{\"type\": \"input_text\", "
        "\"text\": \"a\"}, {\"type\": \"input_text\", \"text\": \"b\"}]}],"
        "\"tools\": [{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"type\": "
        "\"object\"}, \"strict\": true}], \"tool_choice\": {\"type\": \"function\", \"name\": \"f\"},"
        "\"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"x\", \"schema\": {\"type\": "
        "\"object\"}}}, \"max_output_tokens\": 9, \"temperature\": 0.5, \"stream\": true, "
        "\"reasoning\": {\"effort\": \"minimal\", \"summary\": \"auto\"}, \"store\": true, "
        "\"include\": [\"reasoning.encrypted_content\"], \"metadata\": {\"k\": \"v\"}, "
        "\"parallel_tool_calls\": false}";
    CHECK(parse(SRV_RESPONSES, b, &r, &e) == 0, "%s", e.message);
    CHECK(r.instructions && !strcmp(r.instructions, "Be brief.") && r.store && !r.previous_id,
          "instructions kept apart");
    char *conv = NULL;
    CHECK(srv_responses_compose(&r, NULL, &conv, &e) == 0, "%s", e.message);
    json_t *cv = conv ? json_loads(conv, 0, NULL) : NULL;
    CHECK(json_array_size(cv) == 5, "the conversation, instructions aside: %s",
          conv ? conv : "(null)");
    json_decref(cv);
    free(conv);
    CHECK(r.kind == SRV_RESPONSES && r.max_tokens == 9 && r.stream && r.have_temperature &&
          r.temperature == 0.5, "options");
    CHECK(r.reasoning_effort && !strcmp(r.reasoning_effort, "low"), "effort minimal -> low");
    CHECK(r.force_tool == 2 && r.force_name && !strcmp(r.force_name, "f"), "tool_choice");
    CHECK(r.json_mode == 2 && r.json_schema && strstr(r.json_schema, "object"), "text.format");
    CHECK(r.tools_json && strstr(r.tools_json, "\"function\":{") &&
          strstr(r.tools_json, "\"description\":\"\""), "tools: %s",
          r.tools_json ? r.tools_json : "(null)");
    json_t *j = r.chat_json ? json_loads(r.chat_json, 0, NULL) : NULL;
    json_t *m = json_object_get(j, "messages");
    CHECK(json_array_size(m) == 6, "6 messages: %s", r.chat_json ? r.chat_json : "(null)");
    static const char *const roles[] = {"system", "user", "assistant", "tool", "tool", "user"};
    for (size_t i = 0; i < 6 && i < json_array_size(m); i++)
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m, i), "role")), roles[i]),
              "message %zu: role", i);
    json_t *a = json_array_get(m, 2), *calls = json_object_get(a, "tool_calls");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m, 0), "content")),
                  "Be brief."), "instructions first");
    CHECK(!strcmp(json_string_value(json_object_get(a, "content")), "A") &&
          !strcmp(json_string_value(json_object_get(a, "reasoning_content")), "R") &&
          json_array_size(calls) == 2, "assistant: text, reasoning, both calls");
    CHECK(json_is_object(json_object_get(json_object_get(json_array_get(calls, 0), "function"),
                                         "arguments")), "call arguments parsed");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(calls, 1), "id")), "c2"),
          "call ids");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m, 4), "content")), "ok") &&
          !strcmp(json_string_value(json_object_get(json_array_get(m, 4), "tool_call_id")), "c2"),
          "call output");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m, 5), "content")), "a\nb"),
          "parts joined");
    json_decref(j);
    json_t *echo = r.echo_json ? json_loads(r.echo_json, 0, NULL) : NULL;
    CHECK(echo && !strcmp(json_string_value(json_object_get(echo, "instructions")), "Be brief.") &&
          json_integer_value(json_object_get(echo, "max_output_tokens")) == 9 &&
          json_is_true(json_object_get(echo, "store")) &&
          json_is_false(json_object_get(echo, "parallel_tool_calls")) &&
          !strcmp(json_string_value(json_object_get(json_object_get(echo, "reasoning"), "effort")),
                  "minimal") &&
          json_array_size(json_object_get(echo, "tools")) == 1, "echo %s",
          r.echo_json ? r.echo_json : "(null)");
    json_decref(echo);
    srv_request_free(&r);

    /* a string input, nothing else: one user message; OpenAI's defaults echoed */
    CHECK(parse(SRV_RESPONSES, "{\"input\": \"hi\"}", &r, &e) == 0, "%s", e.message);
    CHECK(r.n_msgs == 1 && !strcmp(r.msgs[0].role, "user") && !strcmp(r.msgs[0].content, "hi") &&
          r.max_tokens == -1 && !r.stream && !r.tools_json && !r.json_mode, "string input");
    CHECK(r.echo_json && strstr(r.echo_json, "\"tool_choice\":\"auto\"") &&
          strstr(r.echo_json, "\"format\":{\"type\":\"text\"}") &&
          strstr(r.echo_json, "\"instructions\":null"), "defaults %s",
          r.echo_json ? r.echo_json : "(null)");
    srv_request_free(&r);

    /* a call without an assistant message before it opens one; reasoning
     * from the summary when there is no content */
    CHECK(parse(SRV_RESPONSES, "{\"input\": [{\"role\": \"user\", \"content\": \"q\"}, {\"type\": "
                               "\"reasoning\", \"summary\": [{\"type\": \"summary_text\", \"text\": "
                               "\"S\"}]}, {\"type\": \"function_call\", \"call_id\": \"c\", \"name\":"
                               " \"f\", \"arguments\": \"{}\"}, {\"type\": \"function_call_output\","
                               " \"call_id\": \"c\", \"output\": \"o\"}], \"tool_choice\": "
                               "\"required\", \"tools\": [{\"type\": \"function\", \"name\": \"f\"}]}",
                &r, &e) == 0, "%s", e.message);
    CHECK(r.n_msgs == 3 && !strcmp(r.msgs[1].role, "assistant") && r.msgs[1].reasoning &&
          !strcmp(r.msgs[1].reasoning, "S") && r.force_tool == 1, "call alone");
    srv_request_free(&r);

    /* as Codex sends them: developer messages (the leading ones made one system
     * message), a namespace of tools (flat names NS__NAME, mapped back),
     * hosted tools (not offered, with a note), calls of namespaced tools */
    CHECK(parse(SRV_RESPONSES, "{\"instructions\": \"I\", \"input\": [{\"type\": \"message\", "
                               "\"role\": \"developer\", \"content\": [{\"type\": \"input_text\", "
                               "\"text\": \"D1\"}]}, {\"role\": \"developer\", \"content\": \"D2\"},"
                               " {\"role\": \"user\", \"content\": \"u\"}, {\"type\": \"function_call\","
                               " \"call_id\": \"c\", \"namespace\": \"multi_agent_\", \"name\": "
                               "\"close\", \"arguments\": \"{}\"}, {\"role\": \"developer\", "
                               "\"content\": \"D3\"}], \"tools\": [{\"type\": \"function\", \"name\":"
                               " \"exec\"}, {\"type\": \"namespace\", \"name\": \"multi_agent_\", "
                               "\"description\": \"d\", \"tools\": [{\"type\": \"function\", "
                               "\"name\": \"close\"}]}, {\"type\": \"web_search\", "
                               "\"external_web_access\": false}, {\"type\": \"custom\", \"name\": "
                               "\"apply_patch\"}], \"tool_choice\": {\"type\": \"function\", "
                               "\"namespace\": \"multi_agent_\", \"name\": \"close\"}}", &r, &e) == 0,
          "%s", e.message);
    CHECK(srv_responses_compose(&r, NULL, &conv, &e) == 0, "%s", e.message);
    free(conv);
    json_t *cj = r.chat_json ? json_loads(r.chat_json, 0, NULL) : NULL;
    json_t *cm = json_object_get(cj, "messages");
    CHECK(json_array_size(cm) == 4 &&
          !strcmp(json_string_value(json_object_get(json_array_get(cm, 0), "content")),
                  "I\n\nD1\n\nD2") &&
          !strcmp(json_string_value(json_object_get(json_array_get(cm, 3), "role")), "system"),
          "system messages: %s", r.chat_json ? r.chat_json : "(null)");
    json_decref(cj);
    CHECK(r.tools_json && strstr(r.tools_json, "\"name\":\"exec\"") &&
          strstr(r.tools_json, "\"name\":\"multi_agent__close\"") &&
          !strstr(r.tools_json, "web_search") && !strstr(r.tools_json, "apply_patch"),
          "tools %s", r.tools_json ? r.tools_json : "(null)");
    CHECK(r.names_json && !strcmp(r.names_json, "{\"multi_agent__close\":{\"namespace\":"
                                                "\"multi_agent_\",\"name\":\"close\"}}"),
          "names %s", r.names_json ? r.names_json : "(null)");
    CHECK(r.notes && strstr(r.notes, "tools[2] (\"web_search\")") &&
          strstr(r.notes, "tools[3] (\"custom\")"), "notes %s", r.notes ? r.notes : "(null)");
    CHECK(r.force_tool == 2 && !strcmp(r.force_name, "multi_agent__close"), "namespaced choice");
    CHECK(r.chat_json && strstr(r.chat_json, "\"name\":\"multi_agent__close\",\"arguments\""),
          "namespaced call %s", r.chat_json ? r.chat_json : "(null)");
    srv_request_free(&r);
}

/* A request continuing a kept conversation: its instructions first (not
 * the earlier ones, which are not kept), the kept messages, its own; the
 * conversation to keep is the last two without instructions. */
static void test_responses_continued(void)
{
    srv_request r;
    srv_err e;
    CHECK(parse(SRV_RESPONSES, "{\"input\": \"next\", \"instructions\": \"I2\", "
                               "\"previous_response_id\": \"resp_1\", \"store\": false}", &r, &e) == 0,
          "%s", e.message);
    CHECK(r.previous_id && !strcmp(r.previous_id, "resp_1") && !r.store, "previous id, store");
    CHECK(r.echo_json && strstr(r.echo_json, "\"previous_response_id\":\"resp_1\"") &&
          strstr(r.echo_json, "\"store\":false"), "echo %s", r.echo_json ? r.echo_json : "");
    char *conv = NULL;
    const char *prev = "[{\"role\":\"user\",\"content\":\"first\"},{\"role\":\"assistant\","
                       "\"content\":\"A\",\"thinking\":\"R\"}]";
    CHECK(srv_responses_compose(&r, prev, &conv, &e) == 0, "%s", e.message);
    CHECK(r.chat_json && strstr(r.chat_json, "\"messages\":[{\"role\":\"system\",\"content\":\"I2\"},"
                                             "{\"role\":\"user\",\"content\":\"first\"},"
                                             "{\"role\":\"assistant\",\"content\":\"A\","
                                             "\"thinking\":\"R\"},{\"role\":\"user\","
                                             "\"content\":\"next\"}]"),
          "composed %s", r.chat_json ? r.chat_json : "(null)");
    CHECK(conv && !strstr(conv, "I2") && strstr(conv, "first") && strstr(conv, "next"),
          "kept %s", conv ? conv : "(null)");
    free(conv);
    srv_request_free(&r);
}

static void test_responses_refusals(void)
{
    refused(SRV_RESPONSES, "{}", 400, "input", "missing_required_parameter");
    refused(SRV_RESPONSES, "{\"input\": 3}", 400, "input", "invalid_type");
    refused(SRV_RESPONSES, "{\"input\": []}", 400, "input", "invalid_value");
    refused(SRV_RESPONSES, "{\"input\": [\"x\"]}", 400, "input[0]", "invalid_type");
    refused(SRV_RESPONSES, "{\"input\": [{\"content\": \"x\"}]}", 400, "input[0].role",
            "missing_required_parameter");
    refused(SRV_RESPONSES, "{\"input\": [{\"role\": \"tool\", \"content\": \"x\"}]}", 400,
            "input[0].role", "invalid_value");
    refused(SRV_RESPONSES, "{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": "
                           "\"input_image\", \"image_url\": \"u\"}]}]}", 400,
            "input[0].content[0]", "invalid_value");
    refused(SRV_RESPONSES, "{\"input\": [{\"type\": \"function_call\", \"name\": \"f\", "
                           "\"arguments\": \"{}\"}]}", 400, "input[0].call_id",
            "missing_required_parameter");
    refused(SRV_RESPONSES, "{\"input\": [{\"type\": \"function_call_output\", \"call_id\": \"c\"}]}",
            400, "input[0].output", "missing_required_parameter");
    refused(SRV_RESPONSES, "{\"input\": [{\"type\": \"item_reference\", \"id\": \"x\"}]}", 400,
            "input[0]", "unsupported_parameter");
    refused(SRV_RESPONSES, "{\"input\": [{\"type\": \"web_search_call\"}]}", 400, "input[0].type",
            "invalid_value");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"previous_response_id\": 1}", 400,
            "previous_response_id", "invalid_type");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"store\": \"no\"}", 400, "store", "invalid_type");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"background\": true}", 400, "background",
            "unsupported_parameter");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"include\": [\"message.output_text.logprobs\"]}",
            400, "include[0]", "unsupported_parameter");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"top_logprobs\": 2}", 400, "top_logprobs",
            "unsupported_parameter");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"instructions\": 1}", 400, "instructions",
            "invalid_type");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"tools\": [{\"type\": \"namespace\", \"name\": "
                           "\"n\", \"tools\": [{\"type\": \"web_search\"}]}]}", 400,
            "tools[0].tools[0]", "invalid_value");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"tools\": [{\"type\": \"namespace\", \"tools\": []}]}",
            400, "tools[0].name", "invalid_type");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"tools\": [{\"type\": \"function\"}]}", 400,
            "tools[0].name", "invalid_type");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"tool_choice\": {\"type\": \"mcp\"}}", 400,
            "tool_choice.type", "invalid_value");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"tool_choice\": \"required\"}", 400, "tool_choice",
            "invalid_value");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\"}}}",
            400, "text.format.schema", "missing_required_parameter");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"xml\"}}}", 400,
            "text.format.type", "invalid_value");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"max_output_tokens\": 0}", 400,
            "max_output_tokens", "invalid_value");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"max_output_tokens\": \"9\"}", 400,
            "max_output_tokens", "invalid_type");
    refused(SRV_RESPONSES, "{\"input\": \"x\", \"reasoning\": {\"effort\": 1}}", 400,
            "reasoning.effort", "invalid_type");
}

/* An Anthropic Messages API request read as a chat request: the system
 * blocks first, a user turn's tool_result blocks as tool messages in order
 * with its text, an assistant turn's text, thinking and tool_use blocks as
 * one message, tools and tool_choice in the chat form, thinking as the
 * template's enable_thinking; count_tokens without max_tokens. */
static void test_messages_translated(void)
{
    srv_request r;
    srv_err e;
    const char *b =
        "{\"model\": \"m\", \"max_tokens\": 9, \"system\": [{\"type\": \"text\", \"text\": \"S1\"},"
        " {\"type\": \"text\", \"text\": \"S2\", \"cache_control\": {\"type\": \"ephemeral\"}}],"
        "\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": \"assistant\", "
        "\"content\": [{\"type\": \"thinking\", \"thinking\": \"R\", \"signature\": \"s\"}, "
        "{\"type\": \"text\", \"text\": \"A\"}, {\"type\": \"tool_use\", \"id\": \"t1\", \"name\": "
        "\"f\", \"input\": {\"a\": 1}}, {\"type\": \"tool_use\", \"id\": \"t2\", \"name\": \"g\", "
        "\"input\": {}}]}, {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", "
        "\"tool_use_id\": \"t1\", \"content\": \"21C\"}, {\"type\": \"tool_result\", \"tool_use_id\":"
        " \"t2\", \"content\": [{\"type\": \"text\", \"text\": \"ok\"}], \"is_error\": true}, "
        "{\"type\": \"text\", \"text\": \"more\"}]}], \"tools\": [{\"name\": \"f\", \"input_schema\":"
        " {\"type\": \"object\"}}], \"tool_choice\": {\"type\": \"any\"}, \"stop_sequences\": "
        "[\"X\"], \"temperature\": 0.5, \"top_k\": 4, \"stream\": true, \"thinking\": {\"type\": "
        "\"disabled\"}, \"metadata\": {\"user_id\": \"u\"}}";
    CHECK(parse(SRV_MESSAGES, b, &r, &e) == 0, "%s", e.message);
    CHECK(r.kind == SRV_MESSAGES && r.max_tokens == 9 && r.stream && r.temperature == 0.5 &&
          r.have_top_k && r.top_k == 4 && r.n_stop == 1 && !strcmp(r.stop[0], "X") &&
          r.thinking == 0 && r.force_tool == 1, "options");
    CHECK(r.tools_json && strstr(r.tools_json, "\"parameters\":{\"type\":\"object\"}"), "tools %s",
          r.tools_json ? r.tools_json : "(null)");
    static const char *const roles[] = {"system", "user", "assistant", "tool", "tool", "user"};
    CHECK(r.n_msgs == 6, "%d messages: %s", r.n_msgs, r.chat_json ? r.chat_json : "(null)");
    for (int i = 0; i < 6 && i < r.n_msgs; i++)
        CHECK(!strcmp(r.msgs[i].role, roles[i]), "message %d: %s", i, r.msgs[i].role);
    if (r.n_msgs == 6) {
        CHECK(!strcmp(r.msgs[0].content, "S1\nS2"), "system blocks joined");
        CHECK(!strcmp(r.msgs[2].content, "A") && r.msgs[2].reasoning &&
              !strcmp(r.msgs[2].reasoning, "R"), "assistant text and thinking");
        CHECK(!strcmp(r.msgs[4].content, "ok") && !strcmp(r.msgs[5].content, "more"),
              "tool results, then the text after them");
    }
    json_t *j = r.chat_json ? json_loads(r.chat_json, 0, NULL) : NULL;
    json_t *calls = json_object_get(json_array_get(json_object_get(j, "messages"), 2), "tool_calls");
    CHECK(json_array_size(calls) == 2 &&
          !strcmp(json_string_value(json_object_get(json_array_get(calls, 1), "id")), "t2"),
          "tool_use blocks as calls");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(json_object_get(j, "messages"),
                                                                   3), "tool_call_id")), "t1"),
          "tool_result ids");
    json_decref(j);
    srv_request_free(&r);

    CHECK(parse(SRV_COUNT_TOKENS, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", "
                                  "\"content\": \"hi\"}], \"tool_choice\": {\"type\": \"tool\", "
                                  "\"name\": \"f\"}, \"tools\": [{\"name\": \"f\"}]}", &r, &e) == 0,
          "%s", e.message);
    CHECK(r.n_msgs == 1 && r.force_tool == 2 && !strcmp(r.force_name, "f") && !r.stream,
          "count_tokens");
    srv_request_free(&r);

    /* as Claude Code sends them: a system message inside the conversation,
     * adaptive thinking, output_config.effort, context_management */
    CHECK(parse(SRV_MESSAGES, "{\"model\": \"c\", \"max_tokens\": 128000, \"messages\": [{\"role\": "
                              "\"user\", \"content\": \"u\"}, {\"role\": \"system\", \"content\": "
                              "[{\"type\": \"text\", \"text\": \"env\"}]}], \"thinking\": {\"type\": "
                              "\"adaptive\", \"display\": \"omitted\"}, \"output_config\": {\"effort\": "
                              "\"max\"}, \"context_management\": {\"edits\": []}}", &r, &e) == 0,
          "%s", e.message);
    CHECK(r.n_msgs == 2 && !strcmp(r.msgs[1].role, "system") && !strcmp(r.msgs[1].content, "env") &&
          r.thinking == 1 && r.reasoning_effort && !strcmp(r.reasoning_effort, "high"),
          "Claude Code's request");
    srv_request_free(&r);
}

static void test_messages_refusals(void)
{
    static const char *const m = "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]";
    char b[512];
#define MSG(extra) (snprintf(b, sizeof b, "{\"max_tokens\": 5, %s%s}", m, extra), b)
    refused(SRV_MESSAGES, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", 400,
            "max_tokens", "missing_required_parameter");
    refused(SRV_MESSAGES, "{\"max_tokens\": 5}", 400, "messages", "missing_required_parameter");
    refused(SRV_MESSAGES, "{\"max_tokens\": 5, \"messages\": []}", 400, "messages",
            "invalid_value");
    refused(SRV_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"tool\", \"content\": "
                          "\"x\"}]}", 400, "messages[0].role", "invalid_value");
    refused(SRV_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\"}]}", 400,
            "messages[0].content", "invalid_type");
    refused(SRV_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": "
                          "[{\"type\": \"image\", \"source\": {}}]}]}", 400,
            "messages[0].content[0].type", "invalid_value");
    refused(SRV_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": "
                          "[{\"type\": \"tool_result\"}]}]}", 400,
            "messages[0].content[0].tool_use_id", "invalid_type");
    refused(SRV_MESSAGES, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"assistant\", "
                          "\"content\": [{\"type\": \"tool_use\", \"id\": \"t\", \"name\": \"f\", "
                          "\"input\": \"{}\"}]}]}", 400, "messages[0].content[0].input",
            "invalid_type");
    refused(SRV_MESSAGES, MSG(", \"max_tokens\": \"5\""), 400, "max_tokens", "invalid_type");
    refused(SRV_MESSAGES, MSG(", \"system\": [{\"type\": \"image\"}]"), 400, "system[0]",
            "invalid_value");
    refused(SRV_MESSAGES, MSG(", \"tools\": [{\"type\": \"bash_20250124\", \"name\": \"bash\"}]"),
            400, "tools[0].type", "invalid_value");
    refused(SRV_MESSAGES, MSG(", \"tools\": [{\"input_schema\": {}}]"), 400, "tools[0].name",
            "invalid_type");
    refused(SRV_MESSAGES, MSG(", \"tool_choice\": {\"type\": \"some\"}"), 400, "tool_choice.type",
            "invalid_value");
    refused(SRV_MESSAGES, MSG(", \"tool_choice\": {\"type\": \"tool\"}"), 400, "tool_choice.name",
            "invalid_type");
    refused(SRV_MESSAGES, MSG(", \"thinking\": {\"type\": \"on\"}"), 400, "thinking.type",
            "invalid_value");
    refused(SRV_MESSAGES, MSG(", \"mcp_servers\": [{\"url\": \"u\"}]"), 400, "mcp_servers",
            "unsupported_parameter");
#undef MSG
    srv_err e;
    srv_fail(&e, 401, "invalid_request_error", "k", "invalid_api_key", "no");
    char *s = srv_error_json_anthropic(&e);
    CHECK(s && !strcmp(s, "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\","
                          "\"message\":\"k: no\"}}"), "%s", s ? s : "(null)");
    free(s);
}

/* Ollama's /api/chat and /api/generate read as chat requests: options,
 * format, think, thinking given back, stream on by default; images, raw
 * prompts and the old API's fields refused by name. */
static void test_ollama_translated(void)
{
    srv_request r;
    srv_err e;
    CHECK(parse(SRV_OLLAMA_CHAT, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", "
                                 "\"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"\", "
                                 "\"thinking\": \"T\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                                 "\"arguments\": {\"a\": 1}}}]}, {\"role\": \"tool\", \"tool_name\": "
                                 "\"f\", \"content\": \"r\"}], \"options\": {\"temperature\": 0.2, "
                                 "\"top_k\": 5, \"num_predict\": 7, \"stop\": [\"X\"], \"num_ctx\": 4096, "
                                 "\"seed\": 3}, \"format\": \"json\", \"think\": false, \"keep_alive\": "
                                 "\"5m\"}", &r, &e) == 0, "%s", e.message);
    CHECK(r.stream && r.max_tokens == 7 && r.have_temperature && r.temperature == 0.2 &&
          r.top_k == 5 && r.n_stop == 1 && r.have_seed && r.seed == 3 && r.json_mode == 1 &&
          r.thinking == 0, "options");
    CHECK(r.n_msgs == 3 && r.msgs[1].reasoning && !strcmp(r.msgs[1].reasoning, "T") &&
          !strcmp(r.msgs[2].role, "tool"), "messages");
    srv_request_free(&r);

    CHECK(parse(SRV_OLLAMA_GENERATE, "{\"prompt\": \"p\", \"system\": \"s\", \"stream\": false, "
                                     "\"think\": \"high\", \"format\": {\"type\": \"object\"}}",
                &r, &e) == 0, "%s", e.message);
    CHECK(!r.stream && r.n_msgs == 2 && !strcmp(r.msgs[0].role, "system") &&
          !strcmp(r.msgs[1].content, "p") && r.json_mode == 2 && r.reasoning_effort &&
          !strcmp(r.reasoning_effort, "high"), "generate");
    srv_request_free(&r);

    refused(SRV_OLLAMA_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"images\":"
                             " [\"aGk=\"]}]}", 400, "messages[0].images", "unsupported_parameter");
    refused(SRV_OLLAMA_CHAT, "{}", 400, "messages", "missing_required_parameter");
    refused(SRV_OLLAMA_CHAT, "{\"messages\": [], \"options\": 3}", 400, "options", "invalid_type");
    refused(SRV_OLLAMA_CHAT, "{\"messages\": [], \"format\": \"xml\"}", 400, "format",
            "invalid_value");
    refused(SRV_OLLAMA_CHAT, "{\"messages\": [], \"think\": 1}", 400, "think", "invalid_type");
    refused(SRV_OLLAMA_GENERATE, "{\"prompt\": \"p\", \"raw\": true}", 400, "raw",
            "unsupported_parameter");
    refused(SRV_OLLAMA_GENERATE, "{\"prompt\": \"p\", \"context\": [1, 2]}", 400, "context",
            "unsupported_parameter");
    refused(SRV_OLLAMA_GENERATE, "{\"prompt\": 1}", 400, "prompt", "invalid_type");
    refused(SRV_OLLAMA_GENERATE, "{\"prompt\": \"p\", \"options\": {\"num_predict\": 0}}", 400,
            "options.num_predict", "invalid_value");
    srv_err x;
    srv_fail(&x, 400, "invalid_request_error", "think", "invalid_type", "bad");
    char *s = srv_error_json_ollama(&x);
    CHECK(s && !strcmp(s, "{\"error\":\"think: bad\"}"), "%s", s ? s : "(null)");
    free(s);
}

static void test_access(void)
{
    const char *allow[] = {"box.lan"}, *cors[] = {"https://app.example"};
    srv_access a = {.bind = "127.0.0.1", .port = 8080, .allow = allow, .n_allow = 1,
                    .cors = cors, .n_cors = 1};
    CHECK(srv_host_ok(&a, NULL) && srv_host_ok(&a, "localhost:8080") &&
          srv_host_ok(&a, "LOCALHOST") && srv_host_ok(&a, "127.0.0.1:9") &&
          srv_host_ok(&a, "[::1]:8080") && srv_host_ok(&a, "box.lan:8080"), "own names");
    CHECK(!srv_host_ok(&a, "evil.example") && !srv_host_ok(&a, "localhost.evil.example:8080") &&
          !srv_host_ok(&a, "127.0.0.1.nip.io:8080") && !srv_host_ok(&a, ""), "foreign names");
    srv_access any = {.bind = "0.0.0.0", .port = 8080, .wildcard = 1};
    CHECK(srv_host_ok(&any, "192.168.1.5:8080"), "every address, no --allow-host: any name");
    int c = -1;
    CHECK(srv_origin_ok(&a, NULL, &c) && !c, "no Origin");
    CHECK(srv_origin_ok(&a, "http://localhost:8080", &c) && !c, "own origin");
    CHECK(!srv_origin_ok(&a, "http://localhost:9999", &c), "another port is another origin");
    CHECK(!srv_origin_ok(&a, "http://evil.example", &c) && !srv_origin_ok(&a, "null", &c),
          "foreign origins");
    CHECK(srv_origin_ok(&a, "https://app.example", &c) && c, "--cors");
    CHECK(srv_auth_ok("bearer k", "k") && srv_auth_ok("BEARER k", "k") && !srv_auth_ok("Basic k", "k"),
          "the scheme in any case");
}

static void test_completion_fields(void)
{
    srv_request r;
    srv_err e;
    CHECK(parse(SRV_COMPLETION, "{\"prompt\": [\"one\"]}", &r, &e) == 0, "%s", e.message);
    CHECK(r.prompt && !strcmp(r.prompt, "one"), "prompt list of one");
    srv_request_free(&r);
    refused(SRV_COMPLETION, "{\"prompt\": [\"a\", \"b\"]}", 400, "prompt", "invalid_value");
    refused(SRV_COMPLETION, "{\"prompt\": [1, 2]}", 400, "prompt", "invalid_value");
    refused(SRV_COMPLETION, "{\"prompt\": 5}", 400, "prompt", "invalid_type");
    refused(SRV_COMPLETION, "{}", 400, "prompt", "missing_required_parameter");
}

static void test_refusals(void)
{
    const char *m = "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]";
    char b[512];
#define WITH(extra) (snprintf(b, sizeof b, "{%s, %s}", m, extra), b)
    refused(SRV_CHAT, "{", 400, "", "invalid_json");
    refused(SRV_CHAT, "", 400, "", "invalid_json");
    refused(SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"\\u0000\"}]}", 400, "",
            "invalid_json");
    refused(SRV_CHAT, "\"text\"", 400, "", "invalid_json");
    refused(SRV_CHAT, "{}", 400, "messages", "missing_required_parameter");
    refused(SRV_CHAT, "{\"messages\": null}", 400, "messages", "missing_required_parameter");
    refused(SRV_CHAT, "{\"messages\": {}}", 400, "messages", "invalid_type");
    refused(SRV_CHAT, "{\"messages\": []}", 400, "messages", "invalid_value");
    refused(SRV_CHAT, "{\"messages\": [1]}", 400, "messages[0]", "invalid_type");
    refused(SRV_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", 400, "messages[0].role",
            "missing_required_parameter");
    refused(SRV_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", 400, "messages[0].content",
            "missing_required_parameter");
    refused(SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", 400,
            "messages[0].content", "invalid_type");
    refused(SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
            400, "messages[0].content[0].text", "invalid_type");
    refused(SRV_CHAT, "{\"messages\": [{\"role\": \"function\", \"content\": \"x\"}]}", 400,
            "messages[0].role", "invalid_value");
    refused(SRV_CHAT, WITH("\"max_tokens\": 0"), 400, "max_tokens", "invalid_value");
    refused(SRV_CHAT, WITH("\"max_tokens\": 1.5"), 400, "max_tokens", "invalid_type");
    refused(SRV_CHAT, WITH("\"max_completion_tokens\": \"4\""), 400, "max_completion_tokens",
            "invalid_type");
    refused(SRV_CHAT, WITH("\"temperature\": -0.1"), 400, "temperature", "invalid_value");
    refused(SRV_CHAT, WITH("\"top_p\": 1.5"), 400, "top_p", "invalid_value");
    refused(SRV_CHAT, WITH("\"seed\": \"1\""), 400, "seed", "invalid_type");
    refused(SRV_CHAT, WITH("\"n\": 3"), 400, "n", "invalid_value");
    refused(SRV_CHAT, WITH("\"stop\": 1"), 400, "stop", "invalid_type");
    refused(SRV_CHAT, WITH("\"stop\": [\"a\", null]"), 400, "stop[1]", "invalid_type");
    refused(SRV_CHAT, WITH("\"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
                           "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]"),
            400, "stop", "invalid_value");
    refused(SRV_CHAT, WITH("\"stream\": 1"), 400, "stream", "invalid_type");
    refused(SRV_CHAT, WITH("\"stream_options\": true"), 400, "stream_options", "invalid_type");
    refused(SRV_CHAT, WITH("\"stream_options\": {\"include_usage\": 1}"), 400,
            "stream_options.include_usage", "invalid_type");
    refused(SRV_CHAT, WITH("\"logprobs\": true, \"top_logprobs\": 21"), 400, "top_logprobs",
            "invalid_value");
    refused(SRV_CHAT, WITH("\"top_logprobs\": 2"), 400, "top_logprobs", "invalid_value");
    refused(SRV_CHAT, WITH("\"logit_bias\": {\"11\": 5}"), 400, "logit_bias",
            "unsupported_parameter");
    refused(SRV_CHAT, WITH("\"best_of\": 2"), 400, "best_of", "unsupported_parameter");
    refused(SRV_COMPLETION, "{\"prompt\": \"x\", \"echo\": true}", 400, "echo",
            "unsupported_parameter");
    refused(SRV_COMPLETION, "{\"prompt\": \"x\", \"suffix\": \"y\"}", 400, "suffix",
            "unsupported_parameter");
    refused(SRV_CHAT, WITH("\"response_format\": {\"type\": \"xml\"}"), 400,
            "response_format.type", "invalid_value");
    refused(SRV_CHAT, WITH("\"response_format\": {\"type\": \"json_schema\"}"), 400,
            "response_format.json_schema", "invalid_type");
    refused(SRV_CHAT, WITH("\"tool_choice\": \"required\""), 400, "tool_choice",
            "invalid_value");
    refused(SRV_CHAT, WITH("\"tool_choice\": {\"type\": \"function\"}"), 400,
            "tool_choice.function.name", "invalid_type");
    refused(SRV_CHAT, WITH("\"tools\": [{\"type\": \"retrieval\"}]"), 400, "tools[0]",
            "invalid_value");
    refused(SRV_CHAT, WITH("\"tools\": [{\"type\": \"function\", \"function\": {}}]"), 400,
            "tools[0].function.name", "invalid_type");
    refused(SRV_CHAT, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
            "{\"name\": \"f\", \"arguments\": 5}}]}]}", 400,
            "messages[0].tool_calls[0].function.arguments", "invalid_type");
    refused(SRV_CHAT, WITH("\"reasoning_effort\": \"max\""), 400, "reasoning_effort",
            "invalid_value");
    refused(SRV_CHAT, WITH("\"model\": 7"), 400, "model", "invalid_type");
#undef WITH
}

static void test_error_json(void)
{
    srv_err e;
    srv_fail(&e, 400, "invalid_request_error", "messages", "invalid_value", "bad \"%s\"", "x\n");
    char *s = srv_error_json(&e);
    CHECK(s && !strcmp(s, "{\"error\":{\"message\":\"bad \\\"x\\n\\\"\",\"type\":"
                          "\"invalid_request_error\",\"param\":\"messages\",\"code\":"
                          "\"invalid_value\"}}"), "%s", s);
    free(s);
    srv_fail(&e, 500, "server_error", NULL, NULL, "oops");
    s = srv_error_json(&e);
    CHECK(s && strstr(s, "\"param\":null,\"code\":null"), "%s", s);
    free(s);
}

static void test_auth(void)
{
    CHECK(srv_auth_ok("Bearer k3y", "k3y"), "exact");
    CHECK(srv_auth_ok("Bearer  k3y ", "k3y"), "spaces");
    CHECK(!srv_auth_ok("Bearer k3", "k3y"), "prefix");
    CHECK(!srv_auth_ok("Bearer k3yy", "k3y"), "longer");
    CHECK(!srv_auth_ok("k3y", "k3y"), "no scheme");
    CHECK(!srv_auth_ok("Basic k3y", "k3y"), "other scheme");
    CHECK(!srv_auth_ok(NULL, "k3y"), "missing");
    CHECK(!srv_auth_ok("Bearer ", "k3y"), "empty");
}

static void test_fuzz_corpus(void)
{
    const char *dir = "tools/fuzz/corpus";
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    int n = 0;
    for (struct dirent *ent; (ent = readdir(d));) {
        if (ent->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        static char buf[1 << 16];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        for (int kind = 0; kind < SRV_N_KINDS; kind++) {
            srv_request r;
            srv_err e;
            if (srv_parse_request(kind, buf, len, &r, &e))
                CHECK(e.status >= 400 && e.status < 600, "%s: status %d", path, e.status);
            srv_request_free(&r);
        }
        n++;
    }
    closedir(d);
    CHECK(n >= 5, "only %d corpus files", n);
}

int main(void)
{
    TEST_CASE(test_chat_fields);
    TEST_CASE(test_chat_normalized);
    TEST_CASE(test_responses_translated);
    TEST_CASE(test_responses_continued);
    TEST_CASE(test_responses_refusals);
    TEST_CASE(test_messages_translated);
    TEST_CASE(test_messages_refusals);
    TEST_CASE(test_ollama_translated);
    TEST_CASE(test_access);
    TEST_CASE(test_completion_fields);
    TEST_CASE(test_refusals);
    TEST_CASE(test_error_json);
    TEST_CASE(test_auth);
    TEST_CASE(test_fuzz_corpus);
    return t_finish();
}

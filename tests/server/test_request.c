/* The server's request parser (app/serve_request.c, compiled into this test:
 * it is front-end code, not part of libmoestream): fields, types, ranges,
 * the parameter named in each error, the error JSON, the API key check, and
 * every input of the fuzzing corpus (tools/fuzz/corpus) parsed without harm.
 * (make does not track the included file: after changing it, `touch` this one.) */
#include <dirent.h>

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
    refused(SRV_CHAT, WITH("\"logprobs\": true"), 400, "logprobs", "unsupported_parameter");
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
        for (int kind = SRV_CHAT; kind <= SRV_COMPLETION; kind++) {
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
    TEST_CASE(test_completion_fields);
    TEST_CASE(test_refusals);
    TEST_CASE(test_error_json);
    TEST_CASE(test_auth);
    TEST_CASE(test_fuzz_corpus);
    return t_finish();
}

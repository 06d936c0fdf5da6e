/* libFuzzer target for the Jinja interpreter (the chat templates a
 * checkpoint brings, with the variables a request makes): the input up to
 * its first 0xFF byte is the template, the rest a JSON object of
 * variables (when it parses as one; else messages of a plain chat). A parse
 * or render may fail, with "fuzz, line N: ..."; a render that succeeds must
 * be NUL-terminated and within the output cap; nothing may crash, leak,
 * read out of bounds or hang (the step budget bounds loops). Beside the
 * suite's own seeded fuzzer (tests/runtime/test_jinja_fuzz.c) this one is
 * guided by coverage. Seeds: the release templates and the suite's Jinja
 * cases, each with a chat request. Build and run: tools/fuzz/run.sh jinja. */
#include <ctype.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char DEFAULT_VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
    "\"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\", \"tool_calls\": "
    "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, "
    "{\"role\": \"tool\", \"content\": \"42\"}], \"tools\": [{\"type\": \"function\", "
    "\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"a\": {\"type\": \"integer\"}}}}}], \"add_generation_prompt\": true, \"bos_token\": "
    "\"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *ff = memchr(data, 0xFF, size);
    size_t n = ff ? (size_t)(ff - data) : size;
    json_error_t je;
    json_t *vars = NULL;
    if (ff)
        vars = json_loadb((const char *)ff + 1, size - n - 1, 0, &je);
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = json_loads(DEFAULT_VARS, 0, &je);
    }
    ms_jinja *t;
    ms_error err = {0};
    if (ms_jinja_parse((const char *)data, n, "fuzz", &t, &err) == 0) {
        ms_jinja_env env = {.now = 1768435200, .max_steps = 200000, .max_output = 1u << 20};
        char *out = NULL;
        size_t len = 0;
        int rc = ms_jinja_render(t, vars, &env, &out, &len, &err);
        if (rc == 0 && (!out || out[len] || len > env.max_output))
            abort();
        if (rc && (out || strncmp(err.msg, "fuzz, line ", 11) ||
                   !isdigit((unsigned char)err.msg[11]))) {
            fprintf(stderr, "render error without \"fuzz, line N\": %s\n", err.msg);
            abort();
        }
        free(out);
        ms_jinja_free(t);
    } else if (strncmp(err.msg, "fuzz, line ", 11)) {
        fprintf(stderr, "parse error without \"fuzz, line N\": %s\n", err.msg);
        abort();
    }
    json_decref(vars);
    return 0;
}

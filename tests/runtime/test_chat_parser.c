/* The response parser splits reasoning from the answer whatever the piece
 * boundaries of the streamed text (markers split across pieces included). */
#include "moestream.h"
#include "test.h"

typedef struct out {
    char text[2][512];
    size_t n[2];
} out;

static void emit(void *ctx, int chan, const char *s, size_t n)
{
    out *o = ctx;
    memcpy(o->text[chan] + o->n[chan], s, n);
    o->n[chan] += n;
    o->text[chan][o->n[chan]] = 0;
}

/* Feeds `resp` in pieces of `step` bytes; checks both channels. */
static void check(const char *family, int thinking, const char *resp, const char *reason,
                  const char *answer)
{
    for (size_t step = 1; step <= strlen(resp); step += step < 4 ? 1 : 5) {
        ms_chat_parser *p;
        ms_error err;
        out o = {0};
        CHECK(ms_chat_parser_open(family, thinking, &p, &err) == 0, "open");
        for (size_t i = 0; i < strlen(resp); i += step) {
            size_t k = strlen(resp) - i < step ? strlen(resp) - i : step;
            ms_chat_parser_feed(p, resp + i, k, emit, &o);
        }
        ms_chat_parser_close(p);
        CHECK(!strcmp(o.text[MS_CHAT_REASONING], reason), "%s step %zu: reasoning \"%s\"",
              family, step, o.text[MS_CHAT_REASONING]);
        CHECK(!strcmp(o.text[MS_CHAT_ANSWER], answer), "%s step %zu: answer \"%s\"", family,
              step, o.text[MS_CHAT_ANSWER]);
    }
}

static void test_harmony(void)
{
    check("gpt_oss", -1,
          "<|channel|>analysis<|message|>User asks 2+2.<|end|><|start|>assistant<|channel|>"
          "final<|message|>4<|return|>", "User asks 2+2.", "4");
    check("gpt_oss", -1, "<|channel|>final<|message|>Just the answer.<|return|>", "",
          "Just the answer.");
}

static void test_qwen3(void)
{
    check("qwen3_moe", 1, "<think>\nLet me think.\n</think>\n\nParis.<|im_end|>",
          "Let me think.\n", "Paris.");
    check("qwen3_moe", 0, "Paris.<|im_end|>", "", "Paris.");
}

static void test_longcat(void)
{
    check("longcat_flash", 1, "Simple sum.\n</longcat_think>\nThe answer is 4.</longcat_s>",
          "Simple sum.\n", "The answer is 4.");
    check("longcat_flash", 0, "Hello!</longcat_s>", "", "Hello!");
}

int main(void)
{
    TEST_CASE(test_harmony);
    TEST_CASE(test_qwen3);
    TEST_CASE(test_longcat);
    return t_finish();
}

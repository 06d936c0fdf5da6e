/* ms_session_set_cancel: a prompt evaluation stopped between two layers
 * fails with MS_E_CANCELLED, the session keeps the positions before the
 * stopped span (or none, where the span overwrote a sliding-window ring's
 * history), and evaluating the rest from there gives the logits of an
 * evaluation never stopped, bit for bit. The flag is raised from the
 * progress report after the first layer, so the stop falls mid-span
 * whatever the machine's speed. */
#include <stdlib.h>
#include <string.h>

#include "moestream.h"
#include "test.h"

enum { PRE = 20, SPAN = 1024 };

static volatile int stop_flag;
static int arm; /* raise the flag at the next prefill report */

static void on_progress(void *user, const ms_progress *p)
{
    (void)user;
    if (arm && !strcmp(p->what, "prefill") && p->done < p->total)
        stop_flag = 1, arm = 0;
}

/* PRE positions, then n more stopped after a layer, then the rest from
 * wherever the session was left: its logits against ref. */
static void check_stop(ms_engine *eng, const int32_t *ids, int64_t n, const float *ref,
                       int32_t V, const char *name, int64_t want_pos_a, int64_t want_pos_b)
{
    ms_error err = {0};
    ms_session *s = NULL;
    ms_session_opts so = {.ctx = 2048};
    if (ms_session_open(eng, &so, &s, &err) || ms_session_eval(s, ids, PRE, NULL, &err)) {
        CHECK(0, "%s: %s", name, err.msg);
        ms_session_close(s);
        return;
    }
    ms_session_set_cancel(s, &stop_flag);
    stop_flag = 0;
    arm = 1;
    int rc = ms_session_eval(s, ids + PRE, n, NULL, &err);
    arm = 0;
    int64_t pos = ms_session_pos(s);
    CHECK(rc != 0 && err.code == MS_E_CANCELLED, "%s: a span of %lld stopped: rc %d, code %d, "
          "\"%s\"", name, (long long)n, rc, err.code, err.msg);
    CHECK(pos == want_pos_a || pos == want_pos_b, "%s: a span of %lld stopped: the session "
          "holds %lld positions, wanted %lld or %lld", name, (long long)n, (long long)pos,
          (long long)want_pos_a, (long long)want_pos_b);
    stop_flag = 0;
    if (pos >= 0 && pos <= PRE + n && ms_session_eval(s, ids + pos, PRE + n - pos, NULL, &err))
        CHECK(0, "%s: after the stop: %s", name, err.msg);
    else
        CHECK(!memcmp(ms_session_logits(s), ref, (size_t)V * 4), "%s: a span of %lld stopped "
              "(the session left at %lld), then the rest: logits differ from a run never "
              "stopped", name, (long long)n, (long long)pos);
    ms_session_close(s);
}

/* window: the model's sliding window (0: none) */
static void check_family(const char *gen, const char *name, int window)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cancel_%s", t_tmpdir(), name);
    if (t_make_model(gen, dir)) {
        CHECK(0, "%s: tools/tinyckpt/%s failed", name, gen);
        return;
    }
    ms_error err = {0};
    ms_engine *eng = NULL;
    ms_engine_opts eo = {.span = SPAN, .progress = on_progress}; /* not quiet: progress */
    if (ms_engine_open(dir, &eo, &eng, &err)) {
        CHECK(0, "%s: %s", name, err.msg);
        return;
    }
    int32_t V = ms_engine_info(eng)->vocab_size;
    int64_t lens[2] = {40, 900}; /* within a ring's slack; far past it */
    int32_t *ids = malloc(sizeof *ids * (PRE + 900));
    float *ref = malloc(sizeof *ref * (size_t)V);
    for (int i = 0; ids && i < PRE + 900; i++)
        ids[i] = (int32_t)((i * 29 + 11) % V);
    for (int c = 0; ids && ref && c < 2; c++) {
        ms_session *s = NULL;
        ms_session_opts so = {.ctx = 2048};
        /* never stopped: the same calls, the flag set on the session but low */
        stop_flag = 0;
        if (ms_session_open(eng, &so, &s, &err) || (ms_session_set_cancel(s, &stop_flag), 0) ||
            ms_session_eval(s, ids, PRE, NULL, &err) ||
            ms_session_eval(s, ids + PRE, lens[c], NULL, &err)) {
            CHECK(0, "%s: %s", name, err.msg);
            ms_session_close(s);
            break;
        }
        memcpy(ref, ms_session_logits(s), (size_t)V * 4);
        ms_session_close(s);
        /* a short span keeps the positions before it; a long one over a
         * sliding window's ring leaves the session empty */
        int64_t want = c == 1 && window ? 0 : PRE;
        check_stop(eng, ids, lens[c], ref, V, name, want, want);
    }
    free(ids);
    free(ref);
    ms_engine_close(eng);
}

static void test_gpt_oss(void) { check_family("gpt_oss.py", "gpt_oss", 1); }
static void test_qwen3_moe(void) { check_family("qwen3_moe.py", "qwen3_moe", 0); }
static void test_deepseek_v3(void) { check_family("deepseek_v3.py", "deepseek_v3", 0); }

int main(void)
{
    TEST_CASE(test_gpt_oss);
    TEST_CASE(test_qwen3_moe);
    TEST_CASE(test_deepseek_v3);
    return t_finish();
}

/* Batched decode (ms_session_eval_batch) gives every session exactly the
 * logits it gets alone: on a tiny checkpoint of each family (written by
 * tools/tinyckpt/ into $MS_TMP), three conversations with prompts of
 * different lengths are decoded greedily alone, then together, with one
 * joining late and one leaving early; every step's logits must be equal
 * bit for bit, and a refusal (a full session) must leave the others intact. */
#include <stdint.h>
#include <unistd.h>

#include "test.h"
#include "moestream.h"

#define STEPS 6
#define NSEQ 3

static void check_family(const char *gen, const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/batch_%s", t_tmpdir(), name);
    if (t_make_model(gen, dir)) {
        CHECK(0, "%s: tools/tinyckpt/%s failed", name, gen);
        return;
    }
    ms_error err = {0};
    ms_engine *eng = NULL;
    ms_engine_opts eo = {.quiet = 1};
    if (ms_engine_open(dir, &eo, &eng, &err)) {
        CHECK(0, "%s: %s", name, err.msg);
        return;
    }
    int32_t V = ms_engine_info(eng)->vocab_size;
    static const int plen[NSEQ] = {5, 11, 2};
    int32_t prompt[NSEQ][16];
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < plen[s]; i++)
            prompt[s][i] = (int32_t)((s * 37 + i * 11 + 3) % V);
    /* alone: logits of every step */
    float *solo = calloc((size_t)NSEQ * (STEPS + 1) * (size_t)V, sizeof *solo);
    for (int s = 0; s < NSEQ && solo; s++) {
        ms_session *ss = NULL;
        ms_session_opts so = {.ctx = 64};
        if (ms_session_open(eng, &so, &ss, &err) || ms_session_eval(ss, prompt[s], plen[s], NULL, &err)) {
            CHECK(0, "%s: %s", name, err.msg);
            break;
        }
        for (int k = 0; k <= STEPS; k++) {
            const float *l = ms_session_logits(ss);
            memcpy(solo + ((size_t)s * (STEPS + 1) + (size_t)k) * (size_t)V, l, (size_t)V * 4);
            int32_t id = t_argmax(l, V);
            if (k < STEPS && ms_session_eval(ss, &id, 1, NULL, &err))
                CHECK(0, "%s: %s", name, err.msg);
        }
        ms_session_close(ss);
    }
    /* together: seq 2 joins at step 2, seq 1 leaves after step 4 */
    ms_session *ss[NSEQ] = {0};
    int step[NSEQ] = {0};
    for (int s = 0; s < NSEQ; s++) {
        ms_session_opts so = {.ctx = 64};
        if (ms_session_open(eng, &so, &ss[s], &err) ||
            ms_session_eval(ss[s], prompt[s], plen[s], NULL, &err))
            CHECK(0, "%s: %s", name, err.msg);
    }
    int mismatches = 0, batched_rows = 0;
    for (int round = 0; round < STEPS + 2 && solo; round++) {
        ms_session *act[NSEQ];
        int32_t ids[NSEQ];
        int who[NSEQ], n = 0;
        for (int s = 0; s < NSEQ; s++) {
            if (step[s] >= STEPS || (s == 2 && round < 2) || (s == 1 && step[s] >= 4))
                continue;
            const float *l = ms_session_logits(ss[s]);
            const float *want = solo + ((size_t)s * (STEPS + 1) + (size_t)step[s]) * (size_t)V;
            if (memcmp(l, want, (size_t)V * 4)) {
                if (!mismatches++)
                    CHECK(0, "%s: sequence %d step %d: batched logits differ from alone", name, s,
                          step[s]);
            }
            act[n] = ss[s];
            ids[n] = t_argmax(l, V);
            who[n++] = s;
        }
        if (!n)
            continue;
        batched_rows += n > 1 ? n : 0;
        if (ms_session_eval_batch(act, ids, n, &err)) {
            CHECK(0, "%s: %s", name, err.msg);
            break;
        }
        for (int i = 0; i < n; i++)
            step[who[i]]++;
    }
    for (int s = 0; s < NSEQ; s++) /* the last logits of those that ran to the end */
        if (step[s] == STEPS && memcmp(ms_session_logits(ss[s]),
                                       solo + ((size_t)s * (STEPS + 1) + STEPS) * (size_t)V,
                                       (size_t)V * 4))
            CHECK(0, "%s: sequence %d: the final logits differ", name, s);
    CHECK(batched_rows >= 6, "%s: only %d rows ran batched", name, batched_rows);
    /* a full session refuses the whole step, the others are untouched */
    ms_session *full = NULL;
    ms_session_opts tiny = {.ctx = 3};
    int32_t two[2] = {1, 2}, one[2] = {5, 6};
    int64_t before = ms_session_pos(ss[0]);
    if (ms_session_open(eng, &tiny, &full, &err) == 0 && ms_session_eval(full, two, 2, NULL, &err) == 0 &&
        ms_session_eval(full, one, 1, NULL, &err) == 0) {
        ms_session *pair[2] = {ss[0], full};
        int rc = ms_session_eval_batch(pair, one, 2, &err);
        CHECK(rc != 0 && err.code == MS_E_CONTEXT_FULL && ms_session_pos(ss[0]) == before,
              "%s: a full session in the step: rc %d, \"%s\"", name, rc, err.msg);
        ms_session *dup[2] = {ss[0], ss[0]};
        CHECK(ms_session_eval_batch(dup, one, 2, &err) != 0 && ms_session_pos(ss[0]) == before,
              "%s: a session twice in one step was taken", name);
    } else {
        CHECK(0, "%s: %s", name, err.msg);
    }
    ms_session_close(full);
    for (int s = 0; s < NSEQ; s++)
        ms_session_close(ss[s]);
    free(solo);
    ms_engine_close(eng);
}

static void test_gpt_oss(void) { check_family("gpt_oss.py", "gpt_oss"); }
static void test_qwen3_moe(void) { check_family("qwen3_moe.py", "qwen3_moe"); }
static void test_deepseek_v3(void) { check_family("deepseek_v3.py", "deepseek_v3"); }
static void test_longcat_flash(void) { check_family("longcat_flash.py", "longcat_flash"); }

int main(void)
{
    TEST_CASE(test_gpt_oss);
    TEST_CASE(test_qwen3_moe);
    TEST_CASE(test_deepseek_v3);
    TEST_CASE(test_longcat_flash);
    return t_finish();
}

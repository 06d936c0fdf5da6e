/* Batched decode (ms_session_eval_batch) and prompts fed together
 * (ms_session_eval_many) give every session exactly the logits it gets
 * alone: on a tiny checkpoint of each family (written by
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

/* Prompts fed together (ms_session_eval_many) against each alone: the
 * logits after each prompt and after one more token fed alone (so the
 * caches hold the same keys) are equal bit for bit, with prompts that fit
 * one pass, prompts that need several (a session split across passes),
 * and a refusal that leaves every session where it was. */
static void check_many(ms_engine *eng, const char *name, int32_t V)
{
    enum { N = 3 };
    /* prompts in one pass; in two; a session decoding (one token after 20
     * of its own) beside two prompts, what the server does when a request
     * arrives while another decodes */
    static const int64_t short_len[N] = {5, 11, 2}, long_len[N] = {120, 150, 70},
                         beside_len[N] = {1, 150, 70}, no_pre[N] = {0}, beside_pre[N] = {20};
    const int64_t *lens[3] = {short_len, long_len, beside_len};
    const int64_t *pres[3] = {no_pre, no_pre, beside_pre};
    int32_t *prompt[N];
    for (int s = 0; s < N; s++) {
        prompt[s] = malloc(160 * sizeof **prompt);
        for (int i = 0; prompt[s] && i < 160; i++)
            prompt[s][i] = (int32_t)((s * 41 + i * 13 + 7) % V);
    }
    ms_error err = {0};
    for (int c = 0; c < 3; c++) {
        const int64_t *len = lens[c], *pre = pres[c];
        float *solo = calloc((size_t)N * 2 * (size_t)V, sizeof *solo);
        ms_session *alone[N] = {0}, *together[N] = {0};
        ms_session_opts so = {.ctx = 512};
        int32_t next = 3;
        for (int s = 0; s < N && solo; s++) {
            if (ms_session_open(eng, &so, &alone[s], &err) ||
                (pre[s] && ms_session_eval(alone[s], prompt[s] + 100, pre[s], NULL, &err)) ||
                ms_session_eval(alone[s], prompt[s], len[s], NULL, &err)) {
                CHECK(0, "%s: %s", name, err.msg);
                break;
            }
            memcpy(solo + (size_t)(2 * s) * (size_t)V, ms_session_logits(alone[s]),
                   (size_t)V * 4);
            if (ms_session_eval(alone[s], &next, 1, NULL, &err))
                CHECK(0, "%s: %s", name, err.msg);
            memcpy(solo + (size_t)(2 * s + 1) * (size_t)V, ms_session_logits(alone[s]),
                   (size_t)V * 4);
        }
        for (int s = 0; s < N; s++)
            if (ms_session_open(eng, &so, &together[s], &err) ||
                (pre[s] && ms_session_eval(together[s], prompt[s] + 100, pre[s], NULL, &err)))
                CHECK(0, "%s: %s", name, err.msg);
        const int32_t *ids[N] = {prompt[0], prompt[1], prompt[2]};
        if (ms_session_eval_many(together, ids, len, N, &err)) {
            CHECK(0, "%s: prompts together: %s", name, err.msg);
        } else {
            for (int s = 0; s < N; s++) {
                CHECK(ms_session_pos(together[s]) == pre[s] + len[s],
                      "%s: session %d at %lld, not %lld", name, s,
                      (long long)ms_session_pos(together[s]), (long long)(pre[s] + len[s]));
                CHECK(!memcmp(ms_session_logits(together[s]), solo + (size_t)(2 * s) * (size_t)V,
                              (size_t)V * 4),
                      "%s: prompts of %lld, %lld, %lld (after %lld, %lld, %lld) together: "
                      "session %d's logits differ from alone", name, (long long)len[0],
                      (long long)len[1], (long long)len[2], (long long)pre[0],
                      (long long)pre[1], (long long)pre[2], s);
                if (ms_session_eval(together[s], &next, 1, NULL, &err))
                    CHECK(0, "%s: %s", name, err.msg);
                CHECK(!memcmp(ms_session_logits(together[s]),
                              solo + (size_t)(2 * s + 1) * (size_t)V, (size_t)V * 4),
                      "%s: session %d: the token after its prompt differs from alone", name, s);
            }
        }
        if (c == 1) { /* 512 - 151 positions left in session 1: 400 refuse the call */
            int64_t over[N] = {1, 400, 1};
            int64_t before[N];
            for (int s = 0; s < N; s++)
                before[s] = ms_session_pos(together[s]);
            const int32_t *big[N] = {prompt[0], prompt[1], prompt[2]};
            int32_t *many = calloc(400, sizeof *many);
            big[1] = many;
            int rc = many ? ms_session_eval_many(together, big, over, N, &err) : -1;
            CHECK(rc != 0 && err.code == MS_E_CONTEXT_FULL, "%s: a session overflowing its "
                  "context: rc %d, \"%s\"", name, rc, err.msg);
            for (int s = 0; s < N; s++)
                CHECK(ms_session_pos(together[s]) == before[s],
                      "%s: session %d moved on a refused call", name, s);
            free(many);
        }
        for (int s = 0; s < N; s++) {
            ms_session_close(alone[s]);
            ms_session_close(together[s]);
        }
        free(solo);
    }
    for (int s = 0; s < N; s++)
        free(prompt[s]);
}

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
    check_many(eng, name, V);
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

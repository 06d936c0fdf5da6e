/* Pipeline stages in one process: a model split into 2 and 3 engines over
 * ranges of its layers, linked by a queue that runs the later stages at
 * once (the transport app/pipeline_mpi.c replaces), gives bit for bit the
 * logits of one engine over the whole model: a prompt (every row), greedy
 * decode steps, a rewind and a new branch, a batched step of two sessions,
 * and a session saved to a file (each stage its part) and loaded into
 * another, with micro-batches (in_flight 1 and 3). On every family's
 * upstream fixture and on the tiny checkpoints of tools/tinyckpt. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "moestream.h"

#define MAX_STAGES 3
#define MAX_SESS 16
#define MAX_QUEUE 8

/* The stages after the first, and their sessions keyed by the first's ids. */
typedef struct chain {
    int n;                          /* engines after the first */
    ms_engine *eng[MAX_STAGES];
    uint64_t sid[MAX_SESS];
    ms_session *ss[MAX_STAGES][MAX_SESS];
    int n_sess, closed;
    float *q[MAX_QUEUE];            /* results not yet received, oldest first */
    int64_t qn[MAX_QUEUE];
    int nq;
} chain;

static int slot_of(chain *c, uint64_t sid, int64_t ctx, int kvf, ms_error *err)
{
    for (int i = 0; i < c->n_sess; i++)
        if (c->sid[i] == sid)
            return i;
    if (c->n_sess == MAX_SESS)
        return -1;
    int i = c->n_sess++;
    c->sid[i] = sid;
    for (int k = 0; k < c->n; k++) {
        ms_session_opts so = {.ctx = ctx, .kv_format = kvf};
        if (ms_session_open(c->eng[k], &so, &c->ss[k][i], err))
            return -1;
    }
    return i;
}

static int q_send(void *user, const ms_stage_rows *r, const float *x, ms_error *err)
{
    chain *c = user;
    if (c->nq == MAX_QUEUE)
        return -1;
    float *y = malloc(sizeof *y * (size_t)(r->n * r->d));
    memcpy(y, x, sizeof *y * (size_t)(r->n * r->d));
    ms_session *ss[MAX_SESS];
    for (int k = 0; k < c->n; k++) {
        for (int i = 0; i < r->n_seq; i++) {
            int slot = slot_of(c, r->sid[i], r->ctx[i], r->kv_format[i], err);
            if (slot < 0)
                return -1;
            ss[i] = c->ss[k][slot];
        }
        if (ms_stage_eval(ss, r, y, err))
            return -1;
    }
    c->q[c->nq] = y;
    c->qn[c->nq++] = r->n;
    return 0;
}

static int q_recv(void *user, float *x, int64_t n, int64_t d, ms_error *err)
{
    chain *c = user;
    (void)err;
    if (!c->nq || c->qn[0] != n)
        return -1;
    memcpy(x, c->q[0], sizeof *x * (size_t)(n * d));
    free(c->q[0]);
    memmove(c->q, c->q + 1, sizeof c->q[0] * (size_t)(c->nq - 1));
    memmove(c->qn, c->qn + 1, sizeof c->qn[0] * (size_t)(c->nq - 1));
    c->nq--;
    return 0;
}

static void q_closed(void *user, uint64_t sid)
{
    chain *c = user;
    (void)sid;
    c->closed++;
}

/* Each later stage's part of a session file, beside path. */
static int q_file(void *user, int op, uint64_t sid, int64_t ctx, int32_t kvf, const char *path,
                  ms_error *err)
{
    chain *c = user;
    for (int k = 0; k < c->n; k++) {
        char part[600];
        if (ms_stage_file_path(path, k + 1, part, sizeof part))
            return -1;
        if (op == MS_STAGE_REMOVE) {
            unlink(part);
            continue;
        }
        int slot = slot_of(c, sid, ctx, kvf, err);
        if (slot < 0 || (op == MS_STAGE_SAVE ? ms_session_save(c->ss[k][slot], part, err)
                                             : ms_session_load(c->ss[k][slot], part, err)))
            return -1;
    }
    return 0;
}

#define NP 13
#define STEPS 4

#define ROWS (NP + STEPS + 3 + 2 + 2 + 2)

/* Everything one model gives for the script below: the prompt's rows, the
 * greedy steps, the branch after a rewind, a batched step, one token and a
 * prompt of two sessions in one call, a session saved to `path` and loaded
 * into another, both going on by one token. */
static float *script(ms_engine *eng, int V, const char *path, ms_error *err)
{
    size_t rows = ROWS;
    float *out = calloc(rows * (size_t)V, sizeof *out), *o = out;
    ms_session *a = NULL, *b = NULL;
    ms_session_opts so = {.ctx = 64};
    int32_t p[NP];
    for (int i = 0; i < NP; i++)
        p[i] = (int32_t)((i * 37 + 5) % V);
    int rc = ms_session_open(eng, &so, &a, err) || ms_session_open(eng, &so, &b, err) ||
             ms_session_eval(a, p, NP, o, err);
    o += (size_t)NP * (size_t)V;
    for (int k = 0; rc == 0 && k < STEPS; k++) {
        int32_t id = t_argmax(ms_session_logits(a), V);
        rc = ms_session_eval(a, &id, 1, NULL, err);
        memcpy(o, ms_session_logits(a), (size_t)V * 4), o += V;
    }
    /* rewind into the prompt and branch with three other tokens */
    int32_t br[3] = {1, 2, 3};
    rc = rc ? rc : ms_session_truncate(a, NP - 2, err) || ms_session_eval(a, br, 3, NULL, err);
    if (rc == 0)
        memcpy(o, ms_session_logits(a), (size_t)V * 4), o += V;
    o += 2 * (size_t)V; /* rows of the branch before its last stay zero */
    /* a batched step: a continues, b starts */
    int32_t two[2] = {4, 5};
    rc = rc ? rc : ms_session_eval(b, p, 4, NULL, err);
    ms_session *ab[2] = {a, b};
    rc = rc ? rc : ms_session_eval_batch(ab, two, 2, err);
    if (rc == 0) {
        memcpy(o, ms_session_logits(a), (size_t)V * 4), o += V;
        memcpy(o, ms_session_logits(b), (size_t)V * 4), o += V;
    }
    /* b's next token and d's prompt in one call (parts of the pipeline
     * hold rows of both) */
    ms_session *d = NULL;
    int32_t seven = 7;
    const int32_t *many[2] = {&seven, p + 1};
    int64_t counts[2] = {1, 5};
    rc = rc ? rc : ms_session_open(eng, &so, &d, err) ||
                   ms_session_eval_many((ms_session *[]){b, d}, many, counts, 2, err);
    if (rc == 0) {
        memcpy(o, ms_session_logits(b), (size_t)V * 4), o += V;
        memcpy(o, ms_session_logits(d), (size_t)V * 4), o += V;
    }
    ms_session_close(d);
    /* a's cache in a file (every stage's part), into a new session */
    ms_session *c = NULL;
    int32_t six = 6;
    rc = rc ? rc : ms_session_save(a, path, err) || ms_session_eval(a, &six, 1, NULL, err) ||
                   ms_session_open(eng, &so, &c, err) || ms_session_load(c, path, err) ||
                   ms_session_eval(c, &six, 1, NULL, err);
    if (rc == 0) {
        memcpy(o, ms_session_logits(a), (size_t)V * 4), o += V;
        memcpy(o, ms_session_logits(c), (size_t)V * 4);
    }
    rc = rc ? rc : ms_session_file_remove(eng, path, err);
    ms_session_close(a);
    ms_session_close(b);
    ms_session_close(c);
    if (rc) {
        free(out);
        return NULL;
    }
    return out;
}

static void check_model(const char *dir, const char *name)
{
    ms_error err = {0};
    ms_engine *whole = NULL;
    ms_engine_opts eo = {.quiet = 1};
    if (ms_engine_open(dir, &eo, &whole, &err)) {
        CHECK(0, "%s: %s", name, err.msg);
        return;
    }
    int V = ms_engine_info(whole)->vocab_size;
    char path[512], part[600];
    snprintf(path, sizeof path, "%s/stage_%s.kv", t_tmpdir(), name);
    float *ref = script(whole, V, path, &err);
    ms_engine_close(whole);
    CHECK(ref, "%s: whole model: %s", name, err.msg);
    int64_t *lb = NULL, ends = 0;
    int L = 0;
    CHECK(ms_layer_bytes(dir, &lb, &L, &ends, &err) == 0 && L >= 2 && ends > 0 && lb[0] > 0,
          "%s: layer bytes: %s", name, err.msg);
    free(lb);
    size_t rows = ROWS;
    if (ref)
        CHECK(memcmp(ref + (ROWS - 2) * (size_t)V, ref + (ROWS - 1) * (size_t)V,
                     (size_t)V * 4) == 0, "%s: a session loaded from a file goes on as the "
              "saved one", name);
    for (int K = 2; ref && K <= MAX_STAGES && K <= L; K++)
        for (int inflight = 1; inflight <= 3; inflight += 2) {
            chain c = {.n = K - 1};
            ms_stage_link link = {q_send, q_recv, q_closed, q_file, &c, inflight};
            int cut[MAX_STAGES + 1];
            for (int k = 0; k <= K; k++)
                cut[k] = L * k / K;
            ms_engine_opts first = {.quiet = 1, .stage_end = cut[1], .link = &link};
            ms_engine *e0 = NULL;
            int ok = ms_engine_open(dir, &first, &e0, &err) == 0;
            for (int k = 1; ok && k < K; k++) {
                ms_engine_opts so = {.quiet = 1, .stage_first = cut[k], .stage_end = cut[k + 1],
                                     .stage_no_ends = 1};
                ok = ms_engine_open(dir, &so, &c.eng[k - 1], &err) == 0;
            }
            float *got = ok ? script(e0, V, path, &err) : NULL;
            CHECK(got, "%s: %d stages: %s", name, K, err.msg);
            if (got)
                CHECK(memcmp(got, ref, rows * (size_t)V * 4) == 0,
                      "%s: %d stages, %d in flight: logits differ from the whole model", name,
                      K, inflight);
            CHECK(c.nq == 0 && c.closed == 4, "%s: %d stages: %d results left, %d closes",
                  name, K, c.nq, c.closed);
            if (ok) { /* an image in memory would lack the stages' parts: refused */
                ms_session *s = NULL;
                void *img = NULL;
                size_t nb = 0;
                ms_error e2 = {0};
                ms_session_opts o1 = {.ctx = 64};
                CHECK(ms_session_open(e0, &o1, &s, &e2) == 0 &&
                          ms_session_image(s, &img, &nb, &e2) != 0 && strstr(e2.msg, "pipeline"),
                      "%s: %d stages: a session's image is not refused: %s", name, K, e2.msg);
                free(img);
                ms_session_close(s);
            }
            ms_stage_file_path(path, 1, part, sizeof part);
            CHECK(access(path, F_OK) != 0 && access(part, F_OK) != 0,
                  "%s: %d stages: the session file or its stage 1 part is left", name, K);
            free(got);
            ms_engine_close(e0);
            for (int k = 0; k < K - 1; k++) {
                for (int i = 0; i < c.n_sess; i++)
                    ms_session_close(c.ss[k][i]);
                ms_engine_close(c.eng[k]);
            }
        }
    free(ref);
}

/* A stage outside the model and a link without functions are refused. */
static void test_refusals(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", t_fixtures_dir(), "qwen3_moe");
    ms_error err = {0};
    ms_engine *e = NULL;
    ms_engine_opts o = {.quiet = 1, .stage_first = 2, .stage_end = 9};
    CHECK(ms_engine_open(dir, &o, &e, &err) != 0 && strstr(err.msg, "layers 2-8"),
          "a stage past the last layer: %s", err.msg);
    ms_stage_link none = {0};
    ms_engine_opts l = {.quiet = 1, .link = &none};
    CHECK(ms_engine_open(dir, &l, &e, &err) != 0 && strstr(err.msg, "stage link"),
          "an empty link: %s", err.msg);
}

static void fixture(const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", t_fixtures_dir(), name);
    check_model(dir, name);
}

static void tiny(const char *gen, const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/stage_%s", t_tmpdir(), name);
    if (t_make_model(gen, dir)) {
        CHECK(0, "%s: tools/tinyckpt/%s failed", name, gen);
        return;
    }
    check_model(dir, name);
}

static void test_fixtures(void)
{
    static const char *f[] = {"gpt_oss", "qwen3_moe", "qwen3_moe_fp8", "deepseek_v3",
                              "longcat_flash", "longcat_flash_fp8"};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        fixture(f[i]);
}

static void test_tiny(void)
{
    tiny("gpt_oss.py", "gpt_oss");
    tiny("qwen3_moe.py", "qwen3_moe");
    tiny("deepseek_v3.py", "deepseek_v3");
    tiny("longcat_flash.py", "longcat_flash");
    tiny("glm4_moe.py", "glm4_moe");
}

int main(void)
{
    TEST_CASE(test_refusals);
    TEST_CASE(test_fixtures);
    TEST_CASE(test_tiny);
    return t_finish();
}

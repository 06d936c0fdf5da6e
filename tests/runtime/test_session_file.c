/* A session saved to a file and loaded into another session continues
 * exactly as the original: the same logits bit for bit and the same next
 * tokens, for every KV format (f32, bf16, fp8) and for a sliding-window
 * model whose ring has wrapped (gpt_oss) and an MLA model (deepseek_v3),
 * on tiny checkpoints written by tools/tinyckpt/ into $MS_TMP. Refused,
 * naming what differs: another context, another format, another model, a
 * cut or damaged file; a refusal from the header leaves the session as it
 * was. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "moestream.h"

/* Whether two files hold the same bytes. */
static int same_file(const char *p, const char *q)
{
    FILE *a = fopen(p, "rb"), *b = fopen(q, "rb");
    int same = a && b, ca, cb;
    while (same && ((ca = getc(a)) != EOF) | ((cb = getc(b)) != EOF))
        same = ca == cb;
    if (a)
        fclose(a);
    if (b)
        fclose(b);
    return same;
}

/* Evaluates a prompt of n ids in a, saves it, writes its image to a second
 * file (the same bytes), loads that into b, then decodes 6 greedy steps in
 * both: every step's logits equal. */
static void roundtrip(ms_engine *eng, int kv, int64_t n, const char *what)
{
    ms_error err = {0};
    ms_session *a = NULL, *b = NULL;
    ms_session_opts so = {.ctx = 512, .kv_format = kv};
    int32_t V = ms_engine_info(eng)->vocab_size;
    char path[600], path2[620];
    snprintf(path, sizeof path, "%s/session_%s_%d.kv", t_tmpdir(), what, kv);
    snprintf(path2, sizeof path2, "%s.image", path);
    if (ms_session_open(eng, &so, &a, &err) || ms_session_open(eng, &so, &b, &err)) {
        CHECK(0, "%s: %s", what, err.msg);
        goto out;
    }
    int32_t ids[400];
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)((i * 37 + 11) % (V - 20));
    /* the same file through the image in memory (a server's writer thread) */
    void *img = NULL;
    size_t img_bytes = 0;
    if (ms_session_eval(a, ids, n, NULL, &err) || ms_session_save(a, path, &err) ||
        ms_session_image(a, &img, &img_bytes, &err) ||
        ms_session_write_image(img, img_bytes, path2, &err)) {
        CHECK(0, "%s kv %d: %s", what, kv, err.msg);
        free(img);
        goto out;
    }
    free(img);
    CHECK(same_file(path, path2), "%s kv %d: the image written is not the saved file", what, kv);
    if (ms_session_load(b, path2, &err)) {
        CHECK(0, "%s kv %d: %s", what, kv, err.msg);
        goto out;
    }
    CHECK(ms_session_pos(b) == n, "%s: position %lld after load, want %lld", what,
          (long long)ms_session_pos(b), (long long)n);
    CHECK(ms_session_shared(b, ids, n) == n - 1 || ms_session_shared(b, ids, n) == n,
          "%s: the loaded session does not hold the prompt's ids", what);
    for (int step = 0; step < 6; step++) {
        const float *la = ms_session_logits(a), *lb = ms_session_logits(b);
        CHECK(la && lb && memcmp(la, lb, sizeof *la * (size_t)V) == 0,
              "%s kv %d: logits differ at step %d", what, kv, step);
        int32_t t = t_argmax(la, V);
        if (ms_session_eval(a, &t, 1, NULL, &err) || ms_session_eval(b, &t, 1, NULL, &err)) {
            CHECK(0, "%s: %s", what, err.msg);
            break;
        }
    }
out:
    unlink(path);
    unlink(path2);
    ms_session_close(a);
    ms_session_close(b);
}

static ms_engine *open_model(const char *gen, const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/session_file_%s", t_tmpdir(), name);
    if (t_make_model(gen, dir)) {
        CHECK(0, "tools/tinyckpt/%s failed", gen);
        return NULL;
    }
    ms_error err = {0};
    ms_engine *eng = NULL;
    ms_engine_opts eo = {.quiet = 1};
    if (ms_engine_open(dir, &eo, &eng, &err)) {
        CHECK(0, "%s: %s", name, err.msg);
        return NULL;
    }
    return eng;
}

static void test_roundtrip_every_format_sliding_ring(void)
{
    ms_engine *eng = open_model("gpt_oss.py --preset tiny --seed 3", "gpt_oss");
    if (!eng)
        return;
    /* 300 positions: past the tiny model's sliding window, so its ring has wrapped */
    for (int kv = MS_KVCACHE_F32; kv <= MS_KVCACHE_FP8; kv++)
        roundtrip(eng, kv, 300, "gpt_oss");
    ms_engine_close(eng);
}

static void test_roundtrip_mla(void)
{
    ms_engine *eng = open_model("deepseek_v3.py --preset tiny --seed 7", "deepseek");
    if (!eng)
        return;
    roundtrip(eng, MS_KVCACHE_F32, 40, "deepseek_v3");
    roundtrip(eng, MS_KVCACHE_FP8, 40, "deepseek_v3");
    ms_engine_close(eng);
}

static void test_refusals(void)
{
    ms_engine *eng = open_model("gpt_oss.py --preset tiny --seed 3", "gpt_oss_r");
    ms_engine *other = open_model("gpt_oss.py --preset tiny --seed 4", "gpt_oss_other");
    if (!eng || !other) {
        ms_engine_close(eng);
        ms_engine_close(other);
        return;
    }
    ms_error err = {0};
    ms_session *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL;
    ms_session_opts so = {.ctx = 256, .kv_format = MS_KVCACHE_F32};
    ms_session_opts small = {.ctx = 128, .kv_format = MS_KVCACHE_F32};
    ms_session_opts bf16 = {.ctx = 256, .kv_format = MS_KVCACHE_BF16};
    char path[600], cut[600];
    snprintf(path, sizeof path, "%s/session_refuse.kv", t_tmpdir());
    snprintf(cut, sizeof cut, "%s/session_cut.kv", t_tmpdir());
    int32_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = 5 + 3 * i;
    if (ms_session_open(eng, &so, &a, &err) || ms_session_open(eng, &small, &b, &err) ||
        ms_session_open(eng, &bf16, &c, &err) || ms_session_open(other, &so, &d, &err) ||
        ms_session_open(eng, &so, &e, &err) || ms_session_eval(a, ids, 20, NULL, &err) ||
        ms_session_save(a, path, &err) || ms_session_eval(b, ids, 7, NULL, &err)) {
        CHECK(0, "%s", err.msg);
        goto out;
    }
    CHECK(ms_session_load(b, path, &err) != 0 && strstr(err.msg, "context of 256"),
          "another context: %s", err.msg);
    CHECK(ms_session_pos(b) == 7, "a header refusal changed the session (pos %lld)",
          (long long)ms_session_pos(b));
    CHECK(ms_session_load(c, path, &err) != 0 && strstr(err.msg, "bf16"), "another format: %s",
          err.msg);
    CHECK(ms_session_load(d, path, &err) != 0 && strstr(err.msg, "another model"),
          "another model: %s", err.msg);
    /* cut short, then one byte flipped in the KV data */
    FILE *f = fopen(path, "rb");
    char buf[1 << 16];
    size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    CHECK(len > 200 && len < sizeof buf, "unexpected file size %zu", len);
    f = fopen(cut, "wb");
    fwrite(buf, 1, len - 100, f);
    fclose(f);
    CHECK(ms_session_load(e, cut, &err) != 0 && strstr(err.msg, "cut short"), "cut: %s",
          err.msg);
    buf[len - 200] ^= 0x40;
    f = fopen(cut, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    CHECK(ms_session_load(e, cut, &err) != 0 && strstr(err.msg, "checksum"), "damaged: %s",
          err.msg);
    CHECK(ms_session_pos(e) == 0, "a damaged body left position %lld", (long long)ms_session_pos(e));
    int32_t *got = NULL;
    int64_t n = 0;
    /* a damaged position (and context) of 2^40: refused from the file's size,
     * before a buffer of that many ids is asked for */
    buf[len - 200] ^= 0x40;
    int64_t huge = INT64_C(1) << 40;
    memcpy(buf + 16, &huge, sizeof huge); /* header: magic, model, ctx, pos, ... */
    memcpy(buf + 24, &huge, sizeof huge);
    f = fopen(cut, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    CHECK(ms_session_file_ids(cut, eng, &got, &n, &err) != 0 && strstr(err.msg, "cut short") &&
          !got && n == 0, "a huge position: %s", err.msg);
    CHECK(ms_session_file_ids(path, eng, &got, &n, &err) == 0 && n == 20 && got &&
          memcmp(got, ids, sizeof ids) == 0, "file ids: %s", err.msg);
    free(got);
out:
    unlink(path);
    unlink(cut);
    ms_session_close(a);
    ms_session_close(b);
    ms_session_close(c);
    ms_session_close(d);
    ms_session_close(e);
    ms_engine_close(eng);
    ms_engine_close(other);
}

/* Run under a memory limit (test_hardening.sh: memlimit 256M): a session
 * of 8192 tokens (16 MB of f32 cache) gives its image; then memory is
 * taken 8 MB at a time until the image would need more than half of what is
 * left, where it must be refused with MS_E_NOMEM (before allocating it: the
 * process stays under its limit). */
static void test_image_refused_under_a_limit(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/qwen3_moe", t_fixtures_dir());
    ms_error err = {0};
    ms_engine *eng = NULL;
    ms_session *s = NULL;
    ms_engine_opts eo = {.quiet = 1};
    ms_session_opts so = {.ctx = 8192, .kv_format = MS_KVCACHE_F32};
    enum { BLOCKS = 40, BLOCK = 8 << 20 };
    char *taken[BLOCKS] = {0};
    int32_t ids[8192];
    if (ms_engine_open(dir, &eo, &eng, &err) || ms_session_open(eng, &so, &s, &err)) {
        CHECK(0, "%s", err.msg);
        goto out;
    }
    int32_t V = ms_engine_info(eng)->vocab_size;
    for (int i = 0; i < 8192; i++)
        ids[i] = (int32_t)((i * 37 + 11) % (V - 20));
    if (ms_session_eval(s, ids, 8192, NULL, &err)) {
        CHECK(0, "%s", err.msg);
        goto out;
    }
    int given = 0, refused = 0, b = 0;
    for (; !refused && b <= BLOCKS; b++) {
        void *img = NULL;
        size_t n = 0;
        ms_error e2 = {0};
        if (ms_session_image(s, &img, &n, &e2) == 0)
            given++;
        else
            refused = e2.code == MS_E_NOMEM && strstr(e2.msg, "memory available") ? 1 : -1;
        free(img);
        if (refused)
            printf("  with %d MB taken: %s\n", 8 * b, e2.msg);
        else if (b < BLOCKS && (taken[b] = malloc(BLOCK)))
            memset(taken[b], 1, BLOCK);
    }
    CHECK(given > 0 && refused == 1, "%d images given, then %s", given,
          refused ? "another error" : "none refused");
out:
    for (int k = 0; k < BLOCKS; k++)
        free(taken[k]);
    ms_session_close(s);
    ms_engine_close(eng);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--image-limit")) {
        TEST_CASE(test_image_refused_under_a_limit);
        return t_finish();
    }
    TEST_CASE(test_roundtrip_every_format_sliding_ring);
    TEST_CASE(test_roundtrip_mla);
    TEST_CASE(test_refusals);
    return t_finish();
}

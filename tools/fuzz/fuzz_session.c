/* libFuzzer target for session files (serve's prompt cache on disk,
 * `--session`), damaged in any byte: the first input byte picks the
 * session's KV format (f32, bf16, fp8), the rest is written as the file and
 * loaded into a session of the tiny gpt_oss fixture, then read for its ids
 * alone. A load may fail, with a message, and a session it fails on must
 * still decode; nothing may crash, leak, read out of bounds or ask for
 * memory a damaged field makes up (run with -malloc_limit_mb). Seeds: run
 * with SEEDS=DIR to write real files (1, 17 and 33 positions in each
 * format) and exit. The model: $MOESTREAM_FIXTURES/gpt_oss (default
 * ../shared/fixtures). Build and run: tools/fuzz/run.sh session. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moestream.h"
#include "scratch.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ms_engine *eng;
static ms_session *sessions[3];
static const int formats[3] = {MS_KVCACHE_F32, MS_KVCACHE_BF16, MS_KVCACHE_FP8};

static void die(const char *what, const ms_error *err)
{
    fprintf(stderr, "fuzz_session: %s: %s\n", what, err->msg);
    exit(1);
}

/* Writes the seeds: each file prefixed by its format's byte. */
static void write_seeds(const char *dir)
{
    ms_error err = {0};
    int32_t ids[33];
    for (int i = 0; i < 33; i++)
        ids[i] = 3 + 7 * i;
    for (int k = 0; k < 3; k++)
        for (int n = 1; n <= 33; n += 16) {
            char path[1024], seed[1100];
            snprintf(path, sizeof path, "%s/.session", dir);
            snprintf(seed, sizeof seed, "%s/session_%d_%d", dir, k, n);
            if (ms_session_truncate(sessions[k], 0, &err) ||
                ms_session_eval(sessions[k], ids, n, NULL, &err) ||
                ms_session_save(sessions[k], path, &err))
                die("writing a seed", &err);
            FILE *in = fopen(path, "rb"), *out = fopen(seed, "wb");
            if (!in || !out)
                exit(1);
            fputc(k, out);
            for (int c; (c = fgetc(in)) != EOF;)
                fputc(c, out);
            fclose(in);
            fclose(out);
            unlink(path);
        }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *fx = getenv("MOESTREAM_FIXTURES");
    char model[1024];
    snprintf(model, sizeof model, "%s/gpt_oss", fx && *fx ? fx : "../shared/fixtures");
    ms_error err = {0};
    ms_engine_opts eo = {.quiet = 1};
    if (ms_engine_open(model, &eo, &eng, &err))
        die(model, &err);
    for (int k = 0; k < 3; k++) {
        ms_session_opts so = {.ctx = 64, .kv_format = formats[k]};
        if (ms_session_open(eng, &so, &sessions[k], &err))
            die("a session", &err);
    }
    const char *seeds = getenv("SEEDS");
    if (seeds) {
        write_seeds(seeds);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "%s", scratch_path("session"));
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    ms_error err = {0};
    ms_session *s = sessions[data[0] % 3];
    if (ms_session_load(s, path, &err))
        if (!err.msg[0])
            abort();
    int32_t id = 5;
    if (ms_session_pos(s) == ms_session_ctx(s) && ms_session_truncate(s, 0, &err))
        abort();
    if (ms_session_eval(s, &id, 1, NULL, &err)) {
        fprintf(stderr, "a session decodes no more after a load (%s)\n", err.msg);
        abort();
    }
    int32_t *ids;
    int64_t n;
    if (ms_session_file_ids(path, eng, &ids, &n, &err) == 0)
        free(ids);
    else if (!err.msg[0])
        abort();
    return 0;
}

/* libFuzzer target for what a checkpoint folder says about itself: its
 * config.json, its model.safetensors.index.json and the header of its first
 * shard, each damaged in any byte, then opened as a model and run for two
 * tokens. The input: a byte picking the fixture family, then config.json,
 * 0xFF, the index, 0xFF, the first shard's JSON header. They are written
 * over the last input's in the family's folder in /dev/shm (made once: links
 * to the fixture's other files), the first shard with the data section the
 * fixture has. Opening may fail, with a message; nothing may crash, leak,
 * read out of bounds or hang, and a model that opens must run. Seeds: run
 * with SEEDS=DIR to write each family's own files and exit. The fixtures:
 * $MOESTREAM_FIXTURES (default ../shared/fixtures). Build and run:
 * tools/fuzz/run.sh checkpoint. */
#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moestream.h"
#include "scratch.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const FAMILIES[] = {"gpt_oss", "qwen3_moe", "deepseek_v3", "longcat_flash"};
enum { N_FAMILIES = 4 };

typedef struct family {
    char dir[1024];
    char work[128];        /* its folder in /dev/shm: links to dir's other files */
    char first[256];       /* the first shard's name (in name order) */
    uint8_t *data;         /* its data section */
    size_t n_data;
    char *header;          /* its JSON header */
    size_t n_header;
} family;
static family fams[N_FAMILIES];

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    rewind(f);
    uint8_t *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static int is_shard(const char *name)
{
    size_t n = strlen(name);
    return n > 12 && !strcmp(name + n - 12, ".safetensors");
}

static void load_family(family *fm, const char *fixtures, const char *name)
{
    snprintf(fm->dir, sizeof fm->dir, "%s/%s", fixtures, name);
    DIR *d = opendir(fm->dir);
    if (!d) {
        fprintf(stderr, "fuzz_checkpoint: no fixture %s\n", fm->dir);
        exit(1);
    }
    for (struct dirent *e; (e = readdir(d));)
        if (is_shard(e->d_name) && (!fm->first[0] || strcmp(e->d_name, fm->first) < 0))
            snprintf(fm->first, sizeof fm->first, "%s", e->d_name);
    closedir(d);
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", fm->dir, fm->first);
    size_t n;
    uint8_t *b = slurp(path, &n);
    uint64_t h;
    if (!b || n < 8 || (memcpy(&h, b, 8), h > n - 8)) {
        fprintf(stderr, "fuzz_checkpoint: cannot read %s\n", path);
        exit(1);
    }
    fm->n_header = (size_t)h;
    fm->header = malloc(fm->n_header);
    memcpy(fm->header, b + 8, fm->n_header);
    fm->n_data = n - 8 - fm->n_header;
    fm->data = malloc(fm->n_data ? fm->n_data : 1);
    memcpy(fm->data, b + 8 + fm->n_header, fm->n_data);
    free(b);
}

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    fwrite(p, 1, n, f);
    fclose(f);
}

static void write_seeds(const char *out)
{
    for (int k = 0; k < N_FAMILIES; k++) {
        family *fm = &fams[k];
        char path[1400], seed[1400];
        size_t nc, ni;
        snprintf(path, sizeof path, "%s/config.json", fm->dir);
        uint8_t *cfg = slurp(path, &nc);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", fm->dir);
        uint8_t *idx = slurp(path, &ni);
        snprintf(seed, sizeof seed, "%s/checkpoint_%s", out, FAMILIES[k]);
        FILE *f = fopen(seed, "wb");
        if (!f || !cfg || !idx)
            exit(1);
        fputc(k, f);
        fwrite(cfg, 1, nc, f);
        fputc(0xFF, f);
        fwrite(idx, 1, ni, f);
        fputc(0xFF, f);
        fwrite(fm->header, 1, fm->n_header, f);
        fclose(f);
        free(cfg);
        free(idx);
    }
}

/* fm's work folder, made once: a link to each of the fixture's files but
 * the three an input writes. */
static void make_folder(family *fm, int k)
{
    char name[16];
    snprintf(name, sizeof name, "ckpt%d", k);
    snprintf(fm->work, sizeof fm->work, "%s", scratch_path(name));
    mkdir(fm->work, 0755);
    DIR *d = opendir(fm->dir);
    if (!d)
        exit(1);
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "config.json") ||
            !strcmp(e->d_name, "model.safetensors.index.json") || !strcmp(e->d_name, fm->first))
            continue;
        char from[PATH_MAX], to[PATH_MAX];
        snprintf(from, sizeof from, "%s/%s", fm->dir, e->d_name);
        snprintf(to, sizeof to, "%s/%s", fm->work, e->d_name);
        unlink(to);
        if (symlink(from, to))
            exit(1);
    }
    closedir(d);
}

/* The three damaged files, written over the last input's in fm's folder. */
static void write_input(const family *fm, const uint8_t *cfg, size_t nc, const uint8_t *idx,
                        size_t ni, const uint8_t *hdr, size_t nh)
{
    write_file(fm->work, "config.json", cfg, nc);
    write_file(fm->work, "model.safetensors.index.json", idx, ni);
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", fm->work, fm->first);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    uint64_t h = nh;
    fwrite(&h, 1, 8, f);
    fwrite(hdr, 1, nh, f);
    fwrite(fm->data, 1, fm->n_data, f);
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *fx = getenv("MOESTREAM_FIXTURES");
    for (int k = 0; k < N_FAMILIES; k++)
        load_family(&fams[k], fx && *fx ? fx : "../shared/fixtures", FAMILIES[k]);
    const char *seeds = getenv("SEEDS");
    if (seeds) {
        write_seeds(seeds);
        exit(0);
    }
    for (int k = 0; k < N_FAMILIES; k++)
        make_folder(&fams[k], k);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    const family *fm = &fams[data[0] % N_FAMILIES];
    const uint8_t *cfg = data + 1, *end = data + size;
    const uint8_t *ff1 = memchr(cfg, 0xFF, (size_t)(end - cfg));
    if (!ff1)
        return 0;
    const uint8_t *idx = ff1 + 1, *ff2 = memchr(idx, 0xFF, (size_t)(end - idx));
    if (!ff2)
        return 0;
    const uint8_t *hdr = ff2 + 1;
    write_input(fm, cfg, (size_t)(ff1 - cfg), idx, (size_t)(ff2 - idx), hdr, (size_t)(end - hdr));
    ms_engine *eng;
    ms_error err = {0};
    ms_engine_opts eo = {.quiet = 1};
    if (ms_engine_open(fm->work, &eo, &eng, &err)) {
        if (!err.msg[0])
            abort();
        return 0;
    }
    ms_session *s;
    ms_session_opts so = {.ctx = 8};
    if (ms_session_open(eng, &so, &s, &err) == 0) {
        int32_t ids[2] = {1, 2};
        if (ms_session_eval(s, ids, 2, NULL, &err) && !err.msg[0])
            abort();
        ms_session_close(s);
    } else if (!err.msg[0]) {
        abort();
    }
    ms_engine_close(eng);
    return 0;
}

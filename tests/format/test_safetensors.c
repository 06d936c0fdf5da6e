/* Safetensors and checkpoint-folder loader: valid files open and resolve by
 * name; every corruption is refused with an error naming file and tensor. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/checkpoint.h"
#include "test.h"

static char tmpdir[512];

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

/* Writes a safetensors file with the given header JSON (length prefix added,
 * padded with spaces to a multiple of 8 as the safetensors library does
 * unless `unpadded`) followed by `data_len` bytes of 0..255 pattern. */
static void write_st_pad(const char *path, const char *header, size_t data_len, int unpadded)
{
    size_t hl = strlen(header), pad = unpadded ? 0 : (8 - hl % 8) % 8;
    size_t total = 8 + hl + pad + data_len;
    unsigned char *buf = malloc(total);
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', pad);
    hl += pad;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    for (size_t i = 0; i < data_len; i++)
        buf[8 + hl + i] = (unsigned char)i;
    write_file(path, buf, total);
    free(buf);
}

static void write_st(const char *path, const char *header, size_t data_len)
{
    write_st_pad(path, header, data_len, 0);
}

static char *path_in(const char *name)
{
    static char p[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

/* Opens path as a safetensors file expecting failure; returns the message. */
static const char *open_fails(const char *path)
{
    static ms_err err;
    ms_st_file f;
    memset(&err, 0, sizeof err);
    if (ms_st_open(path, 0, &f, &err) == 0) {
        ms_st_close(&f);
        return NULL;
    }
    return err.msg;
}

#define GOOD_HDR                                                                  \
    "{\"__metadata__\":{\"format\":\"pt\"},"                                      \
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"          \
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}"

static void test_valid_file(void)
{
    const char *p = path_in("good.safetensors");
    write_st(p, GOOD_HDR, 32);
    ms_st_file f;
    ms_err err = {0};
    CHECK(ms_st_open(p, 3, &f, &err) == 0, "open failed: %s", err.msg);
    if (t_case_failed)
        return;
    CHECK(f.n_tensors == 2, "%d tensors", f.n_tensors);
    CHECK(f.has_metadata, "metadata not seen");
    const ms_tensor_info *b = &f.tensors[1];
    CHECK(!strcmp(b->name, "b") && b->dtype == MS_DTYPE_BF16 && b->nbytes == 8, "b wrong");
    CHECK(b->file == 3, "file index %d", b->file);
    size_t hl = strlen(GOOD_HDR);
    CHECK(b->offset == 8 + hl + 24, "offset %llu", (unsigned long long)b->offset);
    CHECK(f.map[b->offset] == 24, "data byte %d", f.map[b->offset]);
    ms_st_close(&f);
}

static void test_refusals(void)
{
    struct {
        const char *name, *header, *want;
        size_t data;
    } cases[] = {
        {"trunc", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         "tensor \"a\": data_offsets [0, 16] end past the data section (10 bytes)", 10},
        {"overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         "tensors \"a\" and \"b\" overlap", 16},
        {"size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}",
         "tensor \"a\": 16 bytes in data_offsets but shape [3] x F32 (4 bytes) needs 12", 16},
        {"dtype", "{\"a\":{\"dtype\":\"F7\",\"shape\":[3],\"data_offsets\":[0,3]}}",
         "tensor \"a\": unknown dtype \"F7\"", 3},
        {"json", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],", "invalid JSON", 4},
        {"utf8", "{\"a\xff\xfe\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
         "invalid JSON", 1},
        {"dup",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
         "duplicate", 2},
        {"negshape", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}",
         "shape[0] is not a non-negative integer", 1},
        {"offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,1]}}",
         "0 <= begin <= end", 4},
        {"notobj", "[1,2,3]", "header is not a JSON object", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad_%s.safetensors", cases[i].name);
        const char *p = path_in(name);
        write_st(p, cases[i].header, cases[i].data);
        const char *msg = open_fails(p);
        CHECK(msg != NULL, "%s: corrupt file accepted", cases[i].name);
        if (msg) {
            CHECK_STR_CONTAINS(msg, cases[i].want);
            CHECK_STR_CONTAINS(msg, name);
        }
    }
}

static void test_header_length(void)
{
    unsigned char buf[16] = {0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0, '{', '}'};
    const char *p = path_in("hlen.safetensors");
    write_file(p, buf, 10);
    const char *msg = open_fails(p);
    CHECK(msg != NULL, "accepted");
    if (msg)
        CHECK_STR_CONTAINS(msg, "header length 268435455 is impossible for a 10-byte file");
    p = path_in("short.safetensors");
    write_file(p, buf, 5);
    msg = open_fails(p);
    CHECK(msg != NULL, "accepted");
    if (msg)
        CHECK_STR_CONTAINS(msg, "too short for the 8-byte header length");
    msg = open_fails(path_in("does-not-exist.safetensors"));
    CHECK(msg && strstr(msg, "cannot open"), "missing file: %s", msg ? msg : "(accepted)");
}

/* A tensor whose first element is not aligned to its size (a header length
 * that is not a multiple of 8, or an odd data offset) is refused, naming the
 * tensor and its file offset; byte tensors may start anywhere. */
static void test_misaligned_refused(void)
{
    const char *h1 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    char *p = path_in("misaligned.safetensors");
    CHECK(strlen(h1) % 4 != 0, "the case needs a header whose length is not a multiple of 4");
    write_st_pad(p, h1, 8, 1);
    const char *msg = open_fails(p);
    CHECK(msg != NULL, "unpadded header with an F32 tensor accepted");
    if (msg) {
        CHECK_STR_CONTAINS(msg, "tensor \"a\" starts at file offset");
        CHECK_STR_CONTAINS(msg, "not a multiple of its 4-byte F32 elements");
    }
    write_st(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[1,5]}}", 5);
    msg = open_fails(p);
    CHECK(msg && strstr(msg, "tensor \"b\" starts at file offset"), "odd BF16 offset: %s",
          msg ? msg : "(accepted)");
    write_st_pad(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3, 1);
    msg = open_fails(p);
    CHECK(msg == NULL, "a byte tensor after an unpadded header refused: %s", msg);
}

/* A folder with config.json, two shards and an index. */
static void make_folder(const char *dir, int drop_shard2, int wrong_map)
{
    char p[1024];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_file(p, "{\"model_type\":\"x\"}", 18);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    if (!drop_shard2)
        write_st(p, "{\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                    "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]}}", 4);
    else
        unlink(p);
    const char *idx = wrong_map
        ? "{\"metadata\":{\"total_size\":12},\"weight_map\":{"
          "\"a\":\"model-00002-of-00002.safetensors\","
          "\"b\":\"model-00001-of-00002.safetensors\"}}"
        : "{\"metadata\":{\"total_size\":12},\"weight_map\":{"
          "\"a\":\"model-00001-of-00002.safetensors\","
          "\"b\":\"model-00002-of-00002.safetensors\","
          "\"c\":\"model-00002-of-00002.safetensors\"}}";
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_file(p, idx, strlen(idx));
}

static void test_folder(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/ckpt", tmpdir);
    make_folder(dir, 0, 0);
    ms_checkpoint *ck;
    ms_err err = {0};
    CHECK(ms_ckpt_open(dir, &ck, &err) == 0, "open: %s", err.msg);
    if (t_case_failed)
        return;
    CHECK(ck->n_files == 2 && ck->n_tensors == 3, "%d files %lld tensors", ck->n_files,
          (long long)ck->n_tensors);
    const ms_tensor_info *b = ms_ckpt_find(ck, "b");
    CHECK(b && b->file == 1, "b not found in shard 2");
    CHECK(b && ((const unsigned char *)ms_ckpt_data(ck, b))[2] == 2, "b data wrong");
    CHECK(ms_ckpt_find(ck, "zz") == NULL, "phantom tensor");
    CHECK(ck->index_total_size == 12 && ck->total_bytes == 12, "sizes");
    ms_ckpt_close(ck);
}

static void test_folder_refusals(void)
{
    char dir[1024];
    ms_checkpoint *ck;
    ms_err err = {0};
    snprintf(dir, sizeof dir, "%s/missing_shard", tmpdir);
    make_folder(dir, 1, 0);
    CHECK(ms_ckpt_open(dir, &ck, &err) != 0, "missing shard accepted");
    CHECK_STR_CONTAINS(err.msg, "shard model-00002-of-00002.safetensors");
    CHECK_STR_CONTAINS(err.msg, "is missing");

    snprintf(dir, sizeof dir, "%s/wrong_map", tmpdir);
    make_folder(dir, 0, 1);
    CHECK(ms_ckpt_open(dir, &ck, &err) != 0, "wrong weight_map accepted");
    CHECK_STR_CONTAINS(err.msg, "is listed in shard");

    snprintf(dir, sizeof dir, "%s/no_config", tmpdir);
    mkdir(dir, 0755);
    CHECK(ms_ckpt_open(dir, &ck, &err) != 0, "no config accepted");
    CHECK_STR_CONTAINS(err.msg, "config.json");

    char p[1100];
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_file(p, "{\"model_type\":\"x\"}", 18);
    CHECK(ms_ckpt_open(dir, &ck, &err) != 0, "no weights accepted");
    CHECK_STR_CONTAINS(err.msg, "no model.safetensors");

    snprintf(p, sizeof p, "%s/config.json", dir);
    write_file(p, "{\"model_type\": \"x\",}", 20);
    CHECK(ms_ckpt_open(dir, &ck, &err) != 0, "bad config accepted");
    CHECK_STR_CONTAINS(err.msg, "config.json: invalid JSON at line 1");

    CHECK(ms_ckpt_open("/nonexistent/dir", &ck, &err) != 0, "missing dir accepted");
    CHECK_STR_CONTAINS(err.msg, "not a model folder");
}

/* The same tensor in two shards is refused. */
static void test_duplicate_across_shards(void)
{
    char dir[1024], p[1100];
    snprintf(dir, sizeof dir, "%s/dup", tmpdir);
    make_folder(dir, 0, 0);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_st(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]}}", 4);
    ms_checkpoint *ck;
    ms_err err = {0};
    CHECK(ms_ckpt_open(dir, &ck, &err) != 0, "duplicate accepted");
    CHECK_STR_CONTAINS(err.msg, "tensor \"a\" is stored in both");
}

/* 120k tensors in one file (DeepSeek-V3 scale): all found by name. */
static void test_many_tensors(void)
{
    enum { N = 120000 };
    size_t cap = (size_t)N * 96 + 64, k = 0;
    char *h = malloc(cap);
    k += (size_t)snprintf(h + k, cap - k, "{");
    for (int i = 0; i < N; i++)
        k += (size_t)snprintf(h + k, cap - k,
                              "%s\"model.layers.%d.mlp.experts.%d.w\":{\"dtype\":\"U8\","
                              "\"shape\":[1],\"data_offsets\":[%d,%d]}",
                              i ? "," : "", i / 256, i % 256, i, i + 1);
    snprintf(h + k, cap - k, "}");
    char dir[1024], p[1100];
    snprintf(dir, sizeof dir, "%s/many", tmpdir);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_file(p, "{}", 2);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_st(p, h, N);
    free(h);
    ms_checkpoint *ck;
    ms_err err = {0};
    CHECK(ms_ckpt_open(dir, &ck, &err) == 0, "open: %s", err.msg);
    if (t_case_failed)
        return;
    int found = 0;
    for (int i = 0; i < N; i++) {
        char name[96];
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.w", i / 256, i % 256);
        const ms_tensor_info *t = ms_ckpt_find(ck, name);
        found += t && ((const unsigned char *)ms_ckpt_data(ck, t))[0] == (unsigned char)i;
    }
    CHECK(found == N, "found %d of %d", found, N);
    ms_ckpt_close(ck);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/st-XXXXXX", getenv("MS_TMP") ? getenv("MS_TMP") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    TEST_CASE(test_valid_file);
    TEST_CASE(test_refusals);
    TEST_CASE(test_header_length);
    TEST_CASE(test_folder);
    TEST_CASE(test_folder_refusals);
    TEST_CASE(test_duplicate_across_shards);
    TEST_CASE(test_many_tensors);
    TEST_CASE(test_misaligned_refused);
    return t_finish();
}

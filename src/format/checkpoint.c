/* Hugging Face checkpoint folder: config, index, shards, tensor hash. */
#include "format/checkpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json.h"

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

const char *ms_ckpt_path(const ms_checkpoint *ck, const char *file, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", ck->dir, file);
    return buf;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

const ms_tensor_info *ms_ckpt_find(const ms_checkpoint *ck, const char *name)
{
    if (!ck->n_slots)
        return NULL;
    uint64_t mask = ck->n_slots - 1;
    for (uint64_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
        const ms_tensor_info *t = ck->slots[i];
        if (!t)
            return NULL;
        if (strcmp(t->name, name) == 0)
            return t;
    }
}

const void *ms_ckpt_data(const ms_checkpoint *ck, const ms_tensor_info *t)
{
    return ck->files[t->file].map + t->offset;
}

const char *ms_ckpt_file_of(const ms_checkpoint *ck, const ms_tensor_info *t)
{
    return ck->files[t->file].path;
}

void ms_ckpt_foreach(const ms_checkpoint *ck,
                     void (*fn)(const ms_tensor_info *t, void *ctx), void *ctx)
{
    for (int f = 0; f < ck->n_files; f++)
        for (int i = 0; i < ck->files[f].n_tensors; i++)
            fn(&ck->files[f].tensors[i], ctx);
}

/* Inserts every tensor of every shard; a name stored twice is an error. */
static int build_hash(ms_checkpoint *ck, ms_err *err)
{
    uint64_t n = 16;
    while (n < 2 * (uint64_t)ck->n_tensors + 1)
        n <<= 1;
    ck->slots = ms_calloc(n, sizeof *ck->slots, "tensor hash", err);
    if (!ck->slots)
        return -1;
    ck->n_slots = n;
    for (int f = 0; f < ck->n_files; f++) {
        for (int i = 0; i < ck->files[f].n_tensors; i++) {
            const ms_tensor_info *t = &ck->files[f].tensors[i];
            uint64_t j = hash_name(t->name) & (n - 1);
            while (ck->slots[j]) {
                if (strcmp(ck->slots[j]->name, t->name) == 0)
                    return ms_err_set(err, MS_E_FORMAT,
                                      "tensor \"%s\" is stored in both %s and %s", t->name,
                                      ck->files[ck->slots[j]->file].path, ck->files[f].path);
                j = (j + 1) & (n - 1);
            }
            ck->slots[j] = t;
        }
    }
    return 0;
}

static int open_shards(ms_checkpoint *ck, const char **names, int n, ms_err *err)
{
    ck->files = ms_calloc((size_t)n, sizeof *ck->files, "shard table", err);
    if (!ck->files)
        return -1;
    for (int i = 0; i < n; i++)
        ck->files[i].fd = -1;
    ck->n_files = n;
    for (int i = 0; i < n; i++) {
        char path[4096];
        if (ms_st_open(ms_ckpt_path(ck, names[i], path, sizeof path), i, &ck->files[i], err))
            return -1;
        ck->n_tensors += ck->files[i].n_tensors;
        for (int j = 0; j < ck->files[i].n_tensors; j++)
            ck->total_bytes += ck->files[i].tensors[j].nbytes;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Reads model.safetensors.index.json: opens the shards it names (sorted,
 * unique) and checks that each listed tensor is where the index says. */
static int open_indexed(ms_checkpoint *ck, const char *index_path, ms_err *err)
{
    json_t *idx;
    if (ms_json_load_file(index_path, &idx, err))
        return -1;
    int rc = -1;
    const char **names = NULL;
    const json_t *wm = json_object_get(idx, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        ms_err_set(err, MS_E_FORMAT, "%s: \"weight_map\" must be a non-empty object",
                   index_path);
        goto out;
    }
    const json_t *meta = json_object_get(idx, "metadata");
    const json_t *ts = json_is_object(meta) ? json_object_get(meta, "total_size") : NULL;
    ck->index_total_size = json_is_integer(ts) ? json_integer_value(ts) : -1;
    names = ms_malloc(sizeof *names * json_object_size(wm), "shard names", err);
    if (!names)
        goto out;
    int n = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)wm, key, v) {
        const char *s = json_string_value(v);
        if (!s || !*s || strchr(s, '/') || strcmp(s, "..") == 0 || strcmp(s, ".") == 0) {
            ms_err_set(err, MS_E_FORMAT,
                       "%s: weight_map[\"%s\"] must be a shard file name in the folder",
                       index_path, key);
            goto out;
        }
        names[n++] = s;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int u = 0;
    for (int i = 0; i < n; i++)
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0)
            names[u++] = names[i];
    for (int i = 0; i < u; i++) {
        char path[4096];
        if (!file_exists(ms_ckpt_path(ck, names[i], path, sizeof path))) {
            json_object_foreach((json_t *)wm, key, v) if (strcmp(json_string_value(v),
                                                                 names[i]) == 0) break;
            ms_err_set(err, MS_E_IO,
                       "%s: shard %s (holding \"%s\" and others) is missing: %s",
                       index_path, names[i], key, strerror(ENOENT));
            goto out;
        }
    }
    if (open_shards(ck, names, u, err) || build_hash(ck, err))
        goto out;
    json_object_foreach((json_t *)wm, key, v) {
        const ms_tensor_info *t = ms_ckpt_find(ck, key);
        const char *want = json_string_value(v);
        if (!t) {
            ms_err_set(err, MS_E_FORMAT, "%s: tensor \"%s\" is listed in shard %s but no "
                       "shard holds it", index_path, key, want);
            goto out;
        }
        const char *got = strrchr(ck->files[t->file].path, '/') + 1;
        if (strcmp(got, want) != 0) {
            ms_err_set(err, MS_E_FORMAT, "%s: tensor \"%s\" is listed in shard %s but is "
                       "stored in %s", index_path, key, want, got);
            goto out;
        }
    }
    /* and the other way: a tensor the index does not list is one the
     * reference loader never reads; using it would make another model */
    for (int fi = 0; fi < ck->n_files; fi++)
        for (int ti = 0; ti < ck->files[fi].n_tensors; ti++) {
            const char *tn = ck->files[fi].tensors[ti].name;
            if (!json_object_get(wm, tn)) {
                ms_err_set(err, MS_E_FORMAT, "%s: tensor \"%s\" is stored in %s but the "
                           "weight_map does not list it", index_path, tn,
                           strrchr(ck->files[fi].path, '/') + 1);
                goto out;
            }
        }
    rc = 0;
out:
    free(names);
    json_decref(idx);
    return rc;
}

static int open_single(ms_checkpoint *ck, ms_err *err)
{
    const char *name = "model.safetensors";
    ck->index_total_size = -1;
    return open_shards(ck, &name, 1, err) || build_hash(ck, err) ? -1 : 0;
}

static int load_configs(ms_checkpoint *ck, ms_err *err)
{
    char path[4096];
    if (ms_json_load_file(ms_ckpt_path(ck, "config.json", path, sizeof path), &ck->config,
                          err))
        return -1;
    if (!json_is_object(ck->config))
        return ms_err_set(err, MS_E_FORMAT, "%s: not a JSON object", path);
    ms_ckpt_path(ck, "generation_config.json", path, sizeof path);
    if (file_exists(path)) {
        if (ms_json_load_file(path, &ck->gen_config, err))
            return -1;
        if (!json_is_object(ck->gen_config))
            return ms_err_set(err, MS_E_FORMAT, "%s: not a JSON object", path);
    }
    return 0;
}

int ms_ckpt_open(const char *dir, ms_checkpoint **out, ms_err *err)
{
    *out = NULL;
    struct stat st;
    errno = 0;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return ms_err_set(err, MS_E_IO, "%s: not a model folder (%s)", dir,
                          errno ? strerror(errno) : "not a directory");
    ms_checkpoint *ck = ms_calloc(1, sizeof *ck, "checkpoint", err);
    if (!ck)
        return -1;
    ck->dir = strdup(dir);
    if (!ck->dir) {
        free(ck);
        return ms_err_set(err, MS_E_NOMEM, "out of memory");
    }
    char path[4096];
    int rc = load_configs(ck, err);
    if (rc == 0) {
        if (file_exists(ms_ckpt_path(ck, "model.safetensors.index.json", path, sizeof path)))
            rc = open_indexed(ck, path, err);
        else if (file_exists(ms_ckpt_path(ck, "model.safetensors", path, sizeof path)))
            rc = open_single(ck, err);
        else
            rc = ms_err_set(err, MS_E_IO,
                            "%s: no model.safetensors.index.json and no model.safetensors",
                            dir);
    }
    if (rc) {
        ms_ckpt_close(ck);
        return -1;
    }
    *out = ck;
    return 0;
}

void ms_ckpt_close(ms_checkpoint *ck)
{
    if (!ck)
        return;
    for (int i = 0; i < ck->n_files; i++)
        ms_st_close(&ck->files[i]);
    free(ck->files);
    free(ck->slots);
    json_decref(ck->config);
    json_decref(ck->gen_config);
    free(ck->dir);
    free(ck);
}

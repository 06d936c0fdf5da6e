/* moestream synth: random-weight checkpoints in a release's layout.
 *
 * Values are random but sane for the kernels: norms are 1, float weights
 * have magnitudes around 1e-2, FP8 codes are spread as trained ones are
 * (ms_synth_e4m3: no NaN, few subnormals), MXFP4 scales
 * stay near 2^-7. The routing of such a model is close to uniform, which is
 * the pessimistic case for an expert cache. */
#include "runtime/synth.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/json.h"
#include "base/log.h"
#include "base/rng.h"
#include "format/dtype.h"
#include "models/family.h"

#define DEFAULT_SHARD (4600ll << 20)

const char *ms_synth_name(int i)
{
    for (int k = 0; ms_builtin_configs[k].name; k++)
        if (k == i)
            return ms_builtin_configs[k].name;
    return NULL;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The codes of ms_synth_e4m3 by u: a logistic quantile (tails a little
 * heavier than a Gaussian's, as trained weights have), scaled so that the
 * outermost of the 65536 reaches 448. */
static uint8_t e4m3_table[1 << 16];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void e4m3_build(void)
{
    double top = log(65535.5 / 0.5);
    for (int u = 0; u < 1 << 16; u++) {
        double p = (u + 0.5) / 65536.0;
        e4m3_table[u] = ms_f32_to_e4m3((float)(448.0 * log(p / (1.0 - p)) / top));
    }
}

uint8_t ms_synth_e4m3(uint16_t u)
{
    pthread_once(&e4m3_once, e4m3_build);
    return e4m3_table[u];
}

/* Fills n bytes of tensor t's data starting at element offset (bytes `at`). */
static void fill(const ms_tensor_spec *t, ms_rng *r, uint8_t *buf, size_t n)
{
    int is_norm = strstr(t->name, "norm") != NULL;
    size_t i = 0;
    switch (t->dtype) {
    case MS_DTYPE_BF16:
        for (; i + 8 <= n; i += 8) {
            uint64_t x = ms_rng_next(r);
            for (int k = 0; k < 4; k++) {
                uint16_t v = (uint16_t)(x >> (16 * k));
                /* sign, exponent 117..120 (~1e-3..1.6e-2), 7 mantissa bits */
                v = is_norm ? 0x3F80 : (uint16_t)((v & 0x807F) | ((117 + ((v >> 7) & 3)) << 7));
                memcpy(buf + i + 2 * k, &v, 2);
            }
        }
        break;
    case MS_DTYPE_F32:
        for (; i + 8 <= n; i += 8) {
            uint64_t x = ms_rng_next(r);
            for (int k = 0; k < 2; k++) {
                uint32_t u = (uint32_t)(x >> (32 * k));
                float f = ends_with(t->name, "weight_scale_inv") ? 0x1p-12f
                        : is_norm ? 1.0f : ((float)(u & 0xFFFF) / 65536.0f - 0.5f) * 0.03f;
                memcpy(buf + i + 4 * k, &f, 4);
            }
        }
        break;
    case MS_DTYPE_F8_E4M3:
        for (; i + 4 <= n; i += 4) {
            uint64_t x = ms_rng_next(r);
            for (int k = 0; k < 4; k++)
                buf[i + (size_t)k] = ms_synth_e4m3((uint16_t)(x >> (16 * k)));
        }
        break;
    case MS_DTYPE_U8:
        for (; i + 8 <= n; i += 8) {
            uint64_t x = ms_rng_next(r);
            if (ends_with(t->name, "_scales")) /* e8m0 scales 2^-9..2^-6 */
                for (int k = 0; k < 8; k++)
                    buf[i + (size_t)k] = (uint8_t)(118 + ((x >> (8 * k)) & 3));
            else
                memcpy(buf + i, &x, 8);
        }
        break;
    default:
        break;
    }
    if (i < n) /* tail and other dtypes: zeros (or ones for norms in fill above) */
        memset(buf + i, 0, n - i);
}

static uint64_t spec_bytes(const ms_tensor_spec *t)
{
    uint64_t n = (uint64_t)ms_dtype_size(t->dtype);
    for (int i = 0; i < t->n_dims; i++)
        n *= (uint64_t)t->shape[i];
    return n;
}

typedef struct shard {
    int first, count;     /* spec range, in model order */
    uint64_t bytes;
    char name[64];
} shard;

static int cmp_spec_ptr(const void *a, const void *b)
{
    const ms_tensor_spec *x = *(const ms_tensor_spec *const *)a;
    const ms_tensor_spec *y = *(const ms_tensor_spec *const *)b;
    int sx = ms_dtype_size(x->dtype), sy = ms_dtype_size(y->dtype);
    if (sx != sy) /* wider dtypes first keeps every tensor naturally aligned */
        return sy - sx;
    return strcmp(x->name, y->name);
}

static int write_all(int fd, const void *p, size_t n, const char *path, ms_err *err)
{
    const uint8_t *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return ms_err_set(err, MS_E_IO, "%s: write failed: %s", path, strerror(errno));
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* A new file DIR/.NAME.partial for writing: O_EXCL | O_NOFOLLOW, so that
 * nothing is written through a link planted there (a stale partial of an
 * interrupted run is removed first; a link is removed, never followed). */
static int create_partial(const char *dir, const char *name, char *tmp, size_t cap, ms_err *err)
{
    snprintf(tmp, cap, "%s/.%s.partial", dir, name);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        ms_err_set(err, MS_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    return fd;
}

/* Renames the finished partial over DIR/NAME (a link there is replaced,
 * not followed). */
static int put_in_place(const char *dir, const char *name, const char *tmp, ms_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return ms_err_set(err, MS_E_IO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    return 0;
}

/* Bytes written of all shards, for the caller's progress function. */
typedef struct written {
    const ms_synth_opts *o;
    int64_t done, total;
    double t0;
} written;

/* One shard: header (tensors sorted by dtype width then name, as the
 * safetensors writer does), then the data. */
static int write_shard(const char *dir, const shard *sh, const ms_tensor_spec *specs,
                       int has_meta, ms_rng *r, uint8_t *buf, size_t cap, written *wr,
                       ms_err *err)
{
    const ms_tensor_spec **v = malloc(sizeof *v * (size_t)sh->count);
    json_t *hdr = json_object();
    if (!v || !hdr)
        return ms_err_set(err, MS_E_NOMEM, "out of memory for a shard header");
    for (int i = 0; i < sh->count; i++)
        v[i] = &specs[sh->first + i];
    qsort(v, (size_t)sh->count, sizeof *v, cmp_spec_ptr);
    if (has_meta)
        json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t off = 0;
    for (int i = 0; i < sh->count; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < v[i]->n_dims; d++)
            json_array_append_new(shape, json_integer(v[i]->shape[d]));
        uint64_t nb = spec_bytes(v[i]);
        json_object_set_new(hdr, v[i]->name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", ms_dtype_name(v[i]->dtype),
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + nb)));
        off += nb;
    }
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    char path[4096];
    int fd = text ? create_partial(dir, sh->name, path, sizeof path, err) : -1;
    int rc = -1;
    if (fd < 0)
        goto out;
    size_t tl = strlen(text), hl = (tl + 7) & ~(size_t)7;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memset(buf, ' ', hl);
    memcpy(buf, text, tl);
    if (write_all(fd, len8, 8, path, err) || write_all(fd, buf, hl, path, err))
        goto out;
    for (int i = 0; i < sh->count; i++) {
        for (uint64_t left = spec_bytes(v[i]); left;) {
            size_t k = left < cap ? (size_t)left : cap;
            fill(v[i], r, buf, k);
            if (write_all(fd, buf, k, path, err))
                goto out;
            left -= k;
            wr->done += (int64_t)k;
            if (wr->o->progress && !wr->o->quiet)
                wr->o->progress(wr->o->progress_user,
                                &(ms_progress){"synth", wr->done, wr->total, ms_now() - wr->t0});
        }
    }
    rc = 0;
out:
    if (fd >= 0 && close(fd) && rc == 0)
        rc = ms_err_set(err, MS_E_IO, "%s: close failed: %s", path, strerror(errno));
    if (fd >= 0 && rc)
        unlink(path);
    if (rc == 0)
        rc = put_in_place(dir, sh->name, path, err);
    free(text);
    free(v);
    return rc;
}

/* Shard names as each release spells them: gpt-oss numbers from zero,
 * DeepSeek-V3 writes a six-digit total, the others the HF default. */
static void shard_name(const char *family, int i, int n, char *out, size_t cap)
{
    if (n == 1)
        snprintf(out, cap, "model.safetensors");
    else if (!strcmp(family, "gpt_oss"))
        snprintf(out, cap, "model-%05d-of-%05d.safetensors", i, n - 1);
    else if (!strcmp(family, "deepseek_v3"))
        snprintf(out, cap, "model-%05d-of-%06d.safetensors", i + 1, n);
    else
        snprintf(out, cap, "model-%05d-of-%05d.safetensors", i + 1, n);
}

static int write_json(const char *dir, const char *name, json_t *j, ms_err *err)
{
    char tmp[4096];
    int fd = create_partial(dir, name, tmp, sizeof tmp, err);
    if (fd < 0)
        return -1;
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    int bad = !text || write_all(fd, text, strlen(text), tmp, err) ||
              write_all(fd, "\n", 1, tmp, err);
    if (close(fd))
        bad = 1;
    free(text);
    if (bad) {
        unlink(tmp);
        return err->msg[0] ? -1 : ms_err_set(err, MS_E_IO, "%s: cannot write", tmp);
    }
    return put_in_place(dir, name, tmp, err);
}

static int write_index(const char *dir, const shard *sh, int n_sh, const ms_tensor_spec *specs,
                       uint64_t total, ms_err *err)
{
    json_t *map = json_object();
    for (int s = 0; s < n_sh; s++)
        for (int i = 0; i < sh[s].count; i++)
            json_object_set_new(map, specs[sh[s].first + i].name, json_string(sh[s].name));
    json_t *idx = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total,
                            "weight_map", map);
    int rc = write_json(dir, "model.safetensors.index.json", idx, err);
    json_decref(idx);
    return rc;
}

/* Loads the configuration (built-in or file) and applies --layers. */
static int load_config(const ms_synth_opts *o, json_t **cfg, json_t **gen, ms_err *err)
{
    *cfg = *gen = NULL;
    if (o->like) {
        for (int k = 0; ms_builtin_configs[k].name; k++)
            if (!strcmp(ms_builtin_configs[k].name, o->like)) {
                if (ms_json_load_buf(ms_builtin_configs[k].config,
                                     strlen(ms_builtin_configs[k].config), o->like, cfg, err))
                    return -1;
                if (ms_builtin_configs[k].gen &&
                    ms_json_load_buf(ms_builtin_configs[k].gen, strlen(ms_builtin_configs[k].gen),
                                     o->like, gen, err))
                    return -1;
            }
        if (!*cfg) {
            char names[512] = "";
            size_t n = 0;
            for (int k = 0; ms_builtin_configs[k].name; k++)
                n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", k ? ", " : "",
                                      ms_builtin_configs[k].name);
            return ms_err_set(err, MS_E_ARG, "no built-in configuration \"%s\" (have: %s)",
                              o->like, names);
        }
    } else {
        if (ms_json_load_file(o->config_path, cfg, err))
            return -1;
        char gp[4096];
        snprintf(gp, sizeof gp, "%s", o->config_path);
        char *slash = strrchr(gp, '/');
        snprintf(slash ? slash + 1 : gp, sizeof gp - (size_t)(slash ? slash + 1 - gp : 0),
                 "generation_config.json");
        struct stat st;
        if (stat(gp, &st) == 0 && ms_json_load_file(gp, gen, err))
            return -1;
    }
    if (o->layers > 0) {
        /* LongCat-Flash counts its layers in num_layers; DeepSeek-V3 keeps
         * at least one MoE layer after its first_k_dense_replace dense ones */
        json_object_set_new(*cfg, json_object_get(*cfg, "num_layers") ? "num_layers"
                                                                       : "num_hidden_layers",
                            json_integer(o->layers));
        json_t *fk = json_object_get(*cfg, "first_k_dense_replace");
        if (json_is_integer(fk) && json_integer_value(fk) >= o->layers)
            json_object_set_new(*cfg, "first_k_dense_replace", json_integer(o->layers - 1));
        json_t *lt = json_object_get(*cfg, "layer_types");
        if (json_is_array(lt))
            while (json_array_size(lt) > (size_t)o->layers)
                json_array_remove(lt, json_array_size(lt) - 1);
    }
    return 0;
}

/* The tensors of the family's release, in model order, via the binder. */
static int collect_specs(json_t *cfg, const char *dir, ms_binder *b, const ms_family **fam,
                         ms_err *err)
{
    ms_checkpoint ck = {.dir = (char *)dir, .config = cfg};
    if (!(*fam = ms_family_find(&ck, err)))
        return -1;
    const json_t *q = json_object_get(cfg, "quantization_config");
    const char *qm = json_string_value(json_object_get(q, "quant_method"));
    int fp8 = qm && !strcmp(qm, "fp8");
    if (ms_binder_init_collect(b, &ck, fp8, (*fam)->fp8_scale_dtype, err) ||
        ms_binder_config(b, cfg, err))
        return -1;
    ms_model_opts mo = {.max_batch = 1, .check_only = 1};
    ms_model *m = NULL;
    if ((*fam)->open(&ck, b, &mo, &m, err))
        return -1;
    (*fam)->close(m);
    b->ck = NULL;
    return 0;
}

int ms_synth(const ms_synth_opts *o, ms_error *err)
{
    if (!o->out_dir || (!o->like == !o->config_path))
        return ms_err_set(err, MS_E_ARG, "synth needs an output folder and one of --like NAME "
                          "or --config FILE");
    json_t *cfg, *gen;
    ms_binder b = {0};
    const ms_family *fam;
    shard *sh = NULL;
    uint8_t *buf = NULL;
    int rc = -1;
    if (load_config(o, &cfg, &gen, err))
        goto out;
    if (mkdir(o->out_dir, 0755) && errno != EEXIST) {
        ms_err_set(err, MS_E_IO, "%s: cannot create: %s", o->out_dir, strerror(errno));
        goto out;
    }
    if (!o->force) { /* never overwrite a folder by accident (a real model, say) */
        DIR *dd = opendir(o->out_dir);
        struct dirent *de;
        const char *seen = NULL;
        char first[256] = "";
        while (dd && (de = readdir(dd)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
                !strstr(de->d_name, ".partial")) {
                snprintf(first, sizeof first, "%s", de->d_name);
                seen = first;
                break;
            }
        if (dd)
            closedir(dd);
        if (!dd || seen) {
            ms_err_set(err, MS_E_ARG, dd ? "%s is not empty (it holds %s); synth writes only "
                       "into an empty or new folder, or give --force" : "%s: not a folder%s",
                       o->out_dir, dd ? seen : "");
            goto out;
        }
    }
    if (collect_specs(cfg, o->out_dir, &b, &fam, err))
        goto out;
    uint64_t total = 0, limit = o->shard_bytes > 0 ? (uint64_t)o->shard_bytes : DEFAULT_SHARD;
    int n_sh = 0;
    sh = ms_calloc((size_t)b.n_specs, sizeof *sh, "shards", err);
    if (!sh)
        goto out;
    for (int i = 0; i < b.n_specs; i++) { /* cut in model order, as releases are */
        uint64_t nb = spec_bytes(&b.specs[i]);
        if (!n_sh || (sh[n_sh - 1].bytes && sh[n_sh - 1].bytes + nb > limit))
            sh[n_sh++].first = i;
        sh[n_sh - 1].count++;
        sh[n_sh - 1].bytes += nb;
        total += nb;
    }
    for (int s = 0; s < n_sh; s++)
        shard_name(fam->model_type, s, n_sh, sh[s].name, sizeof sh[s].name);
    size_t cap = 16u << 20;
    buf = ms_malloc(cap + (64u << 20), "synth buffer", err); /* + room for big headers */
    if (!buf)
        goto out;
    ms_rng r;
    ms_rng_seed(&r, o->seed);
    ms_logger lg = {o->quiet ? NULL : o->log, o->log_user};
    double t0 = ms_now();
    written wr = {o, 0, (int64_t)total, t0};
    for (int s = 0; s < n_sh; s++) {
        ms_logf(&lg, "synth: %s (%d tensors, %.2f GB)", sh[s].name, sh[s].count,
                (double)sh[s].bytes / 1e9);
        if (write_shard(o->out_dir, &sh[s], b.specs, strcmp(fam->model_type, "gpt_oss") != 0,
                        &r, buf, cap, &wr, err))
            goto out;
    }
    if ((n_sh > 1 && write_index(o->out_dir, sh, n_sh, b.specs, total, err)) ||
        write_json(o->out_dir, "config.json", cfg, err) ||
        (gen && write_json(o->out_dir, "generation_config.json", gen, err)))
        goto out;
    double dt = ms_now() - t0;
    ms_logf(&lg, "synth: %d tensors, %.2f GB in %d file%s, %.1f s (%.0f MB/s)", b.n_specs,
            (double)total / 1e9, n_sh, n_sh > 1 ? "s" : "", dt,
            dt > 0 ? (double)total / 1e6 / dt : 0.0);
    rc = 0;
out:
    free(buf);
    free(sh);
    ms_binder_free(&b);
    json_decref(cfg);
    json_decref(gen);
    return rc;
}

/* Binder: tensors -> weight views, with L0 bookkeeping. */
#include "weights/bind.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int64_t ordinal(const ms_binder *b, const ms_tensor_info *t)
{
    int64_t base = 0;
    for (int f = 0; f < t->file; f++)
        base += b->ck->files[f].n_tensors;
    return base + (t - b->ck->files[t->file].tensors);
}

int ms_binder_init(ms_binder *b, const ms_checkpoint *ck, int check_only, ms_err *err)
{
    memset(b, 0, sizeof *b);
    b->ck = ck;
    b->check_only = check_only;
    b->fp8_block[0] = b->fp8_block[1] = 128;
    b->fp8_scale = "_scale_inv";
    b->used = ms_calloc((size_t)ck->n_tensors, 1, "binder marks", err);
    b->ignored = ms_calloc((size_t)ck->n_tensors, 1, "binder marks", err);
    if (!b->used || !b->ignored) {
        ms_binder_free(b);
        return -1;
    }
    return 0;
}

/* An FP8 block shape [rows, cols] (each in 1..4096, cols a multiple of
 * cols_unit) into b->fp8_block; -1 when bs is not one. */
static int block_shape(ms_binder *b, const json_t *bs, int cols_unit)
{
    const json_t *r = json_array_get(bs, 0), *c = json_array_get(bs, 1);
    if (json_array_size(bs) != 2 || !json_is_integer(r) || !json_is_integer(c) ||
        json_integer_value(r) <= 0 || json_integer_value(c) <= 0 ||
        json_integer_value(c) % cols_unit || json_integer_value(r) > 4096 ||
        json_integer_value(c) > 4096)
        return -1;
    b->fp8_block[0] = (int32_t)json_integer_value(r);
    b->fp8_block[1] = (int32_t)json_integer_value(c);
    return 0;
}

/* compressed-tensors' "float-quantized" format with one config group of 8-bit
 * float weights: weight_scale per output channel, or per block_structure
 * block. Static activation scales (input_scale tensors) are refused: the
 * engine keeps float32 activations and would leave them unread. */
static int compressed_tensors(ms_binder *b, const json_t *q, ms_err *err)
{
    const char *fmt = json_string_value(json_object_get(q, "format"));
    const json_t *groups = json_object_get(q, "config_groups");
    if (!fmt || strcmp(fmt, "float-quantized"))
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: quantization_config.format is "
                          "%s%s%s; of compressed-tensors only \"float-quantized\" (FP8) is "
                          "supported", fmt ? "\"" : "", fmt ? fmt : "absent", fmt ? "\"" : "");
    if (!json_is_object(groups) || json_object_size(groups) != 1)
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: quantization_config.config_groups "
                          "must hold exactly one group (one FP8 scheme for every linear)");
    const char *gname = json_object_iter_key(json_object_iter((json_t *)groups));
    const json_t *g = json_object_get(groups, gname);
    const json_t *w = json_object_get(g, "weights"), *in = json_object_get(g, "input_activations");
    const char *type = json_string_value(json_object_get(w, "type"));
    const char *strategy = json_string_value(json_object_get(w, "strategy"));
    const json_t *bits = json_object_get(w, "num_bits"), *sym = json_object_get(w, "symmetric");
    if (!json_is_object(w) || !type || strcmp(type, "float") || !json_is_integer(bits) ||
        json_integer_value(bits) != 8 || (sym && !json_is_true(sym)))
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: quantization_config.config_groups."
                          "%s.weights must be 8-bit symmetric float (FP8 e4m3)", gname);
    if (json_is_object(in) && !json_is_true(json_object_get(in, "dynamic")))
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: quantization_config.config_groups."
                          "%s.input_activations.dynamic is not true: static activation scales "
                          "(input_scale tensors) are not supported", gname);
    b->fp8_scale = "_scale";
    if (strategy && !strcmp(strategy, "channel")) {
        b->fp8_block[0] = 1;
        b->fp8_block[1] = 0;
        return 0;
    }
    if (!strategy || strcmp(strategy, "block") ||
        block_shape(b, json_object_get(w, "block_structure"), 1))
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: quantization_config.config_groups."
                          "%s.weights.strategy is %s%s%s: \"channel\", or \"block\" with "
                          "block_structure [rows, cols], is supported", gname,
                          strategy ? "\"" : "", strategy ? strategy : "absent",
                          strategy ? "\"" : "");
    return 0;
}

int ms_binder_config(ms_binder *b, const json_t *config, ms_err *err)
{
    const json_t *q = json_object_get(config, "quantization_config");
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    if (method && !strcmp(method, "compressed-tensors"))
        return compressed_tensors(b, q, err);
    if (method && !strcmp(method, "mxfp4")) /* gpt-oss: its family binds the MXFP4 experts */
        return 0;
    if (json_is_object(q) && method && strcmp(method, "fp8"))
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: quantization_config.quant_method "
                          "is \"%s\"; \"fp8\", \"compressed-tensors\" (FP8) and gpt-oss's "
                          "\"mxfp4\" are supported", method);
    const json_t *bs = json_is_object(q) ? json_object_get(q, "weight_block_size") : NULL;
    if (!bs || json_is_null(bs))
        return 0;
    if (block_shape(b, bs, 32))
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: quantization_config."
                          "weight_block_size must be [rows, cols] with cols a multiple of 32");
    return 0;
}

int ms_binder_init_collect(ms_binder *b, const ms_checkpoint *ck, int fp8, ms_dtype scale,
                           ms_err *err)
{
    if (ms_binder_init(b, ck, 1, err))
        return -1;
    b->collect = 1;
    b->collect_fp8 = fp8;
    b->collect_scale = scale;
    return 0;
}

/* Records a requested tensor with the first dtype of the mask a release
 * would use (BF16 before F32 before the rest). */
static void collect(ms_binder *b, ms_role role, const char *name, uint32_t dtypes, int n_dims,
                    const int64_t *shape)
{
    if (b->n_specs == b->cap_specs) {
        int cap = b->cap_specs ? 2 * b->cap_specs : 1024;
        ms_tensor_spec *v = realloc(b->specs, sizeof *v * (size_t)cap);
        if (!v) {
            ms_bind_problem(b, "out of memory recording %s", name);
            return;
        }
        b->specs = v;
        b->cap_specs = cap;
    }
    ms_tensor_spec *s = &b->specs[b->n_specs++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->role = role;
    s->n_dims = n_dims;
    for (int i = 0; i < n_dims && i < 4; i++)
        s->shape[i] = shape[i];
    static const ms_dtype pref[] = {MS_DTYPE_BF16, MS_DTYPE_F32, MS_DTYPE_F8_E4M3, MS_DTYPE_U8};
    s->dtype = MS_DTYPE_INVALID;
    for (size_t i = 0; i < sizeof pref / sizeof pref[0] && !s->dtype; i++)
        if (dtypes & MS_DT(pref[i]))
            s->dtype = pref[i];
    for (int d = 1; d < MS_DTYPE_COUNT && !s->dtype; d++)
        if (dtypes & MS_DT(d))
            s->dtype = (ms_dtype)d;
}

void ms_binder_free(ms_binder *b)
{
    if (!b)
        return;
    free(b->specs);
    for (int i = 0; i < b->n_problems; i++)
        free(b->problems[i]);
    free(b->problems);
    for (int i = 0; i < b->n_notes; i++)
        free(b->notes[i]);
    free(b->notes);
    free(b->used);
    free(b->ignored);
    free(b->dense);
    memset(b, 0, sizeof *b);
}

static void add_line(char ***list, int *n, const char *line)
{
    char **p = realloc(*list, sizeof *p * (size_t)(*n + 1));
    if (!p)
        return;
    *list = p;
    p[*n] = strdup(line);
    if (p[*n])
        (*n)++;
}

void ms_bind_problem(ms_binder *b, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    add_line(&b->problems, &b->n_problems, buf);
}

/* Dims equal but for trailing 1s on either side (the same bytes in the same
 * order: a redundant dimension does not change the math). */
static int same_but_trailing_ones(const int64_t *a, int na, const int64_t *b, int nb)
{
    int n = na < nb ? na : nb;
    for (int i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    for (int i = n; i < na; i++)
        if (a[i] != 1)
            return 0;
    for (int i = n; i < nb; i++)
        if (b[i] != 1)
            return 0;
    return 1;
}

static void dtype_list(uint32_t mask, char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = 0;
    for (int d = 1; d < MS_DTYPE_COUNT; d++)
        if (mask & MS_DT(d))
            k += (size_t)snprintf(buf + k, cap - k, "%s%s", k ? " or " : "",
                                  ms_dtype_name((ms_dtype)d));
}

static void mark_used(ms_binder *b, ms_role role, const ms_tensor_info *t)
{
    int64_t i = ordinal(b, t);
    if (b->used[i])
        return;
    b->used[i] = 1;
    b->n_used++;
    if (b->skip)
        return;
    b->bytes[role] += t->nbytes;
    if (role == MS_ROLE_DENSE) {
        if (b->n_dense == b->cap_dense) {
            int cap = b->cap_dense ? 2 * b->cap_dense : 256;
            ms_span *v = realloc(b->dense, sizeof *v * (size_t)cap);
            if (!v)
                return; /* pinning is an optimisation: a shorter list only pins less */
            b->dense = v;
            b->cap_dense = cap;
        }
        b->dense[b->n_dense++] = ms_span_of(t);
    }
}

const ms_tensor_info *ms_bind_tensor(ms_binder *b, ms_role role, const char *name,
                                     uint32_t dtypes, int n_dims, const int64_t *shape)
{
    if (b->collect) {
        collect(b, role, name, dtypes, n_dims, shape);
        return NULL;
    }
    const ms_tensor_info *t = ms_ckpt_find(b->ck, name);
    char want[128], got[128];
    if (!t) {
        ms_bind_problem(b, "missing tensor %s %s", name,
                        ms_shape_str(shape, n_dims, want, sizeof want));
        return NULL;
    }
    mark_used(b, role, t); /* present: never also reported as unexpected */
    if (!(dtypes & MS_DT(t->dtype))) {
        dtype_list(dtypes, want, sizeof want);
        ms_bind_problem(b, "mis-typed tensor %s: dtype %s, expected %s", name,
                        ms_dtype_name(t->dtype), want);
        return NULL;
    }
    int same = t->n_dims == n_dims;
    for (int i = 0; same && i < n_dims; i++)
        same = t->shape[i] == shape[i];
    if (!same && same_but_trailing_ones(t->shape, t->n_dims, shape, n_dims)) {
        char note[512];
        snprintf(note, sizeof note, "tensor %s has shape %s where the release has %s: a "
                 "redundant dimension of 1, read as %s", name,
                 ms_shape_str(t->shape, t->n_dims, got, sizeof got),
                 ms_shape_str(shape, n_dims, want, sizeof want), want);
        add_line(&b->notes, &b->n_notes, note);
        same = 1;
    }
    if (!same) {
        ms_bind_problem(b, "mis-shaped tensor %s: shape %s, expected %s", name,
                        ms_shape_str(t->shape, t->n_dims, got, sizeof got),
                        ms_shape_str(shape, n_dims, want, sizeof want));
        return NULL;
    }
    return t;
}

ms_span ms_span_of(const ms_tensor_info *t)
{
    ms_span s = {t->file, t->offset, t->nbytes, t->name, t->offset};
    return s;
}

static ms_wfmt float_fmt(ms_dtype d)
{
    return d == MS_DTYPE_F32 ? MS_WFMT_F32 : d == MS_DTYPE_BF16 ? MS_WFMT_BF16 : MS_WFMT_F16;
}

int ms_bind_linear(ms_binder *b, ms_role role, const char *prefix, int64_t rows,
                   int64_t cols, ms_mat *m, ms_span *span)
{
    char name[256];
    if (span)
        span[0].file = span[1].file = -1;
    int64_t shape[2] = {rows, cols};
    memset(m, 0, sizeof *m);
    m->rows = rows;
    m->cols = cols;
    snprintf(name, sizeof name, "%s.weight", prefix);
    int64_t br = b->fp8_block[0], bc = b->fp8_block[1] ? b->fp8_block[1] : cols;
    int64_t sshape[2] = {(rows + br - 1) / br, (cols + bc - 1) / bc};
    if (b->collect) {
        ms_bind_tensor(b, role, name, b->collect_fp8 ? MS_DT(MS_DTYPE_F8_E4M3) : MS_DT_FLOAT, 2,
                       shape);
        snprintf(name, sizeof name, "%s.weight%s", prefix, b->fp8_scale);
        if (b->collect_fp8)
            ms_bind_tensor(b, role, name, MS_DT(b->collect_scale), 2, sshape);
        return -1;
    }
    const ms_tensor_info *t = ms_bind_tensor(b, role, name,
                                             MS_DT_FLOAT | MS_DT(MS_DTYPE_F8_E4M3), 2, shape);
    if (!t)
        return -1;
    m->w = ms_ckpt_data(b->ck, t);
    if (span)
        span[0] = ms_span_of(t);
    if (t->dtype != MS_DTYPE_F8_E4M3) {
        m->fmt = float_fmt(t->dtype);
        return 0;
    }
    snprintf(name, sizeof name, "%s.weight%s", prefix, b->fp8_scale);
    const ms_tensor_info *s = ms_bind_tensor(b, role, name, MS_DT_FLOAT, 2, sshape);
    if (!s)
        return -1;
    m->fmt = MS_WFMT_FP8_BLOCK;
    m->scale = ms_ckpt_data(b->ck, s);
    if (span)
        span[1] = ms_span_of(s);
    m->scale_dtype = s->dtype;
    m->block_rows = (int32_t)br;
    m->block_cols = (int32_t)bc;
    return 0;
}

int ms_bind_plain_linear(ms_binder *b, ms_role role, const char *name, int64_t rows,
                         int64_t cols, ms_dtype release, ms_mat *m)
{
    int64_t shape[2] = {rows, cols};
    memset(m, 0, sizeof *m);
    m->rows = rows;
    m->cols = cols;
    const ms_tensor_info *t = ms_bind_tensor(b, role, name,
                                             b->collect ? MS_DT(release) : MS_DT_FLOAT, 2, shape);
    if (!t)
        return -1;
    m->fmt = float_fmt(t->dtype);
    m->w = ms_ckpt_data(b->ck, t);
    return 0;
}

int ms_bind_plain_vector(ms_binder *b, ms_role role, const char *name, int64_t n,
                         ms_dtype release, float **out)
{
    if (b->collect) {
        *out = NULL;
        ms_bind_tensor(b, role, name, MS_DT(release), 1, &n);
        return -1;
    }
    return ms_bind_vector(b, role, name, n, out);
}

/* Widens a float tensor of n elements into dst. */
static void widen(const ms_tensor_info *t, const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    switch (t->dtype) {
    case MS_DTYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case MS_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = ms_bf16_to_f32(h[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = ms_f16_to_f32(h[i]);
        break;
    }
}

static int bind_floats(ms_binder *b, ms_role role, const char *name, int n_dims,
                       const int64_t *shape, float **out)
{
    *out = NULL;
    const ms_tensor_info *t = ms_bind_tensor(b, role, name, MS_DT_FLOAT, n_dims, shape);
    if (!t)
        return -1;
    if (b->check_only || b->skip || !b->arena)
        return 0;
    int64_t n = ms_tensor_numel(t);
    ms_err err;
    float *dst = ms_arena_alloc(b->arena, (size_t)n * 4, name, &err);
    if (!dst) {
        ms_bind_problem(b, "%s", err.msg);
        return -1;
    }
    widen(t, ms_ckpt_data(b->ck, t), dst, n);
    *out = dst;
    return 0;
}

int ms_bind_vector(ms_binder *b, ms_role role, const char *name, int64_t n, float **out)
{
    return bind_floats(b, role, name, 1, &n, out);
}

int ms_bind_matrix_f32(ms_binder *b, ms_role role, const char *name, int64_t rows,
                       int64_t cols, float **out)
{
    int64_t shape[2] = {rows, cols};
    return bind_floats(b, role, name, 2, shape, out);
}

int ms_bind_mxfp4_experts(ms_binder *b, const char *blocks, const char *scales,
                          int64_t n_experts, int64_t rows, int64_t cols, ms_mat *m,
                          ms_span *span)
{
    if (cols % 32) {
        ms_bind_problem(b, "%s: %lld input columns is not a multiple of the MXFP4 group "
                        "of 32", blocks, (long long)cols);
        return -1;
    }
    int64_t g = cols / 32;
    int64_t bshape[4] = {n_experts, rows, g, 16}, sshape[3] = {n_experts, rows, g};
    const ms_tensor_info *tb = ms_bind_tensor(b, MS_ROLE_EXPERT, blocks,
                                              MS_DT(MS_DTYPE_U8), 4, bshape);
    const ms_tensor_info *ts = ms_bind_tensor(b, MS_ROLE_EXPERT, scales,
                                              MS_DT(MS_DTYPE_U8), 3, sshape);
    if (!tb || !ts)
        return -1;
    const uint8_t *wb = ms_ckpt_data(b->ck, tb), *sb = ms_ckpt_data(b->ck, ts);
    uint64_t wstride = (uint64_t)(rows * g * 16), sstride = (uint64_t)(rows * g);
    for (int64_t e = 0; e < n_experts; e++) {
        ms_mat *x = &m[e];
        memset(x, 0, sizeof *x);
        x->fmt = MS_WFMT_MXFP4;
        x->rows = rows;
        x->cols = cols;
        x->w = wb + (uint64_t)e * wstride;
        x->scale = sb + (uint64_t)e * sstride;
        x->scale_dtype = MS_DTYPE_U8;
        if (span) {
            span[2 * e] = (ms_span){tb->file, tb->offset + (uint64_t)e * wstride, wstride,
                                    tb->name, tb->offset};
            span[2 * e + 1] = (ms_span){ts->file, ts->offset + (uint64_t)e * sstride, sstride,
                                        ts->name, ts->offset};
        }
    }
    return 0;
}

static void ignore_one(const ms_tensor_info *t, void *ctx)
{
    void **a = ctx;
    ms_binder *b = a[0];
    const char *prefix = a[1];
    if (strncmp(t->name, prefix, strlen(prefix)) == 0)
        b->ignored[ordinal(b, t)] = 1;
}

void ms_bind_ignore_prefix(ms_binder *b, const char *prefix)
{
    void *ctx[2] = {b, (void *)prefix};
    ms_ckpt_foreach(b->ck, ignore_one, ctx);
}

static void finish_one(const ms_tensor_info *t, void *ctx)
{
    ms_binder *b = ctx;
    int64_t i = ordinal(b, t);
    b->dtype_count[t->dtype]++;
    b->dtype_bytes[t->dtype] += t->nbytes;
    if (!b->used[i] && !b->ignored[i])
        ms_bind_problem(b, "unexpected tensor %s (%s in %s)", t->name,
                        ms_dtype_name(t->dtype), ms_ckpt_file_of(b->ck, t));
}

void ms_bind_finish(ms_binder *b)
{
    ms_ckpt_foreach(b->ck, finish_one, b);
}

void ms_binder_skip(ms_binder *b, int on)
{
    b->skip = on;
}

int ms_bind_skipping(const ms_binder *b)
{
    return b->skip;
}

int ms_bind_problems(const ms_binder *b)
{
    return b->n_problems;
}

int ms_bind_collecting(const ms_binder *b)
{
    return b->collect;
}

void ms_binder_set_arena(ms_binder *b, ms_arena *arena)
{
    b->arena = arena;
}

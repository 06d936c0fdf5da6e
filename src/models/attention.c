/* Grouped-query attention over the KV cache. */
#include "models/attention.h"

#include <math.h>
#include <stdio.h>

#include "models/attend.h"
#include "models/ops.h"

int ms_gqa_bind(ms_gqa *a, ms_binder *b, const char *prefix, int qkv_bias, int o_bias,
                int qk_norm)
{
    int64_t qd = (int64_t)a->n_heads * a->head_dim, kd = (int64_t)a->n_kv_heads * a->head_dim;
    int64_t d = a->d_model;
    struct { const char *name; ms_mat *m; int64_t rows, cols; const float **bias; int has; } p[4] = {
        {"q_proj", &a->wq, qd, d, &a->bq, qkv_bias}, {"k_proj", &a->wk, kd, d, &a->bk, qkv_bias},
        {"v_proj", &a->wv, kd, d, &a->bv, qkv_bias}, {"o_proj", &a->wo, d, qd, &a->bo, o_bias},
    };
    char n[256];
    int before = ms_bind_problems(b);
    float *v;
    for (int i = 0; i < 4; i++) {
        snprintf(n, sizeof n, "%s.%s", prefix, p[i].name);
        ms_bind_linear(b, MS_ROLE_DENSE, n, p[i].rows, p[i].cols, p[i].m, NULL);
        if (!p[i].has)
            continue;
        snprintf(n, sizeof n, "%s.%s.bias", prefix, p[i].name);
        ms_bind_vector(b, MS_ROLE_DENSE, n, p[i].rows, &v);
        *p[i].bias = v;
    }
    if (qk_norm) {
        snprintf(n, sizeof n, "%s.q_norm.weight", prefix);
        ms_bind_vector(b, MS_ROLE_DENSE, n, a->head_dim, &v);
        a->q_norm = v;
        snprintf(n, sizeof n, "%s.k_norm.weight", prefix);
        ms_bind_vector(b, MS_ROLE_DENSE, n, a->head_dim, &v);
        a->k_norm = v;
    }
    return ms_bind_problems(b) - before;
}

int64_t ms_gqa_scratch(const ms_gqa *a, int64_t n)
{
    int64_t qd = (int64_t)a->n_heads * a->head_dim, kd = (int64_t)a->n_kv_heads * a->head_dim;
    return n * (2 * qd + 2 * kd) + a->rope->dim;
}

/* Per-head RMSNorm over head_dim (qwen3's q_norm/k_norm). */
static void head_norm(float *v, int n_heads, int hd, const float *w, float eps)
{
    ms_rmsnorm(v, w, eps, n_heads, hd, v);
}

int ms_gqa_forward(const ms_gqa *a, const ms_fwd *f, int layer, const float *x, float *out,
                   float *scratch, ms_err *err)
{
    int64_t n = f->n, hd = a->head_dim;
    int64_t qd = (int64_t)a->n_heads * hd, kd = (int64_t)a->n_kv_heads * hd;
    float *q = scratch, *kk = q + n * qd, *v = kk + n * kd, *att = v + n * kd;
    float *cs = att + n * qd;

    ms_matmul_job qkv[3] = {{.w = &a->wq, .X = x, .n = (int)n, .Y = q, .bias = a->bq},
                            {.w = &a->wk, .X = x, .n = (int)n, .Y = kk, .bias = a->bk},
                            {.w = &a->wv, .X = x, .n = (int)n, .Y = v, .bias = a->bv}};
    ms_matmul_many(qkv, 3);
    /* every row's key and value are stored before any row attends (the
     * ring of a sliding layer holds a whole block beyond its window) */
    for (int64_t t = 0; t < n; t++) {
        int64_t pos = ms_fwd_pos(f, t);
        ms_kv *kv = ms_fwd_kv(f, layer, t);
        float *qt = q + t * qd, *kt = kk + t * kd;
        if (a->q_norm) {
            head_norm(qt, a->n_heads, (int)hd, a->q_norm, a->norm_eps);
            head_norm(kt, a->n_kv_heads, (int)hd, a->k_norm, a->norm_eps);
        }
        ms_rope_table(a->rope, pos, cs);
        ms_rope_apply(a->rope, cs, qt, a->n_heads, hd);
        ms_rope_apply(a->rope, cs, kt, a->n_kv_heads, hd);
        ms_kv_write(kv, pos, 0, kt, kd);
        ms_kv_write(kv, pos, kd, v + t * kd, kd);
    }
    ms_attend at = {.n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads, .dk = (int)hd,
                    .dv = (int)hd, .k_off = 0, .v_off = kd, .k_step = hd, .v_step = hd,
                    .scale = a->scale, .sinks = a->sinks, .window = a->window};
    if (ms_attend_rows(&at, f, layer, q, hd, att, hd, err))
        return -1;
    ms_matmul_many(&(ms_matmul_job){.w = &a->wo, .X = att, .n = (int)n, .Y = out, .bias = a->bo},
                   1);
    return 0;
}

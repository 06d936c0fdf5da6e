/* Grouped-query attention over the KV cache. */
#include "models/attention.h"

#include <math.h>

#include "base/pool.h"
#include "models/ops.h"

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

/* One query head against keys lo..hi of the cache: softmax (with the sink
 * logit in the denominator when present) and the weighted sum of values. */
static void attend_head(const ms_gqa *a, const ms_kv *kv, int h, const float *q, int64_t lo,
                        int64_t hi, float *sc, float *o)
{
    const ms_kernel_ops *k = ms_kernels();
    int hd = a->head_dim, g = a->n_heads / a->n_kv_heads, kvh = h / g;
    int64_t koff = (int64_t)kvh * hd, voff = (int64_t)a->n_kv_heads * hd + koff;
    float m = a->sinks ? a->sinks[h] : -INFINITY;
    for (int64_t p = lo; p <= hi; p++) {
        float s = k->dot(q, ms_kv_at(kv, p) + koff, hd) * a->scale;
        sc[p - lo] = s;
        m = s > m ? s : m;
    }
    double den = a->sinks ? exp((double)(a->sinks[h] - m)) : 0.0;
    for (int64_t p = lo; p <= hi; p++) {
        sc[p - lo] = expf(sc[p - lo] - m);
        den += sc[p - lo];
    }
    float inv = (float)(1.0 / den);
    for (int i = 0; i < hd; i++)
        o[i] = 0;
    for (int64_t p = lo; p <= hi; p++)
        k->axpy(sc[p - lo] * inv, ms_kv_at(kv, p) + voff, o, hd);
}

/* The heads of one position, one task per head; scores: [threads][ctx]. */
typedef struct heads_job {
    const ms_gqa *a;
    const ms_kv *kv;
    const float *q;   /* [n_heads][head_dim] */
    int64_t lo, pos, ctx;
    float *scores, *o; /* o: [n_heads][head_dim] */
} heads_job;

static void head_task(void *ctx, int64_t h, int worker)
{
    const heads_job *j = ctx;
    int64_t hd = j->a->head_dim;
    attend_head(j->a, j->kv, (int)h, j->q + h * hd, j->lo, j->pos,
                j->scores + (int64_t)worker * j->ctx, j->o + h * hd);
}

void ms_gqa_forward(const ms_gqa *a, const ms_fwd *f, int layer, const float *x,
                    float *out, float *scratch)
{
    int64_t n = f->n, hd = a->head_dim;
    int64_t qd = (int64_t)a->n_heads * hd, kd = (int64_t)a->n_kv_heads * hd;
    float *q = scratch, *kk = q + n * qd, *v = kk + n * kd, *att = v + n * kd;
    float *cs = att + n * qd;

    ms_matmul_job qkv[3] = {{.w = &a->wq, .X = x, .n = (int)n, .Y = q},
                            {.w = &a->wk, .X = x, .n = (int)n, .Y = kk},
                            {.w = &a->wv, .X = x, .n = (int)n, .Y = v}};
    ms_matmul_many(qkv, 3);
    if (a->bq) {
        ms_add_bias(q, a->bq, n, qd);
        ms_add_bias(kk, a->bk, n, kd);
        ms_add_bias(v, a->bv, n, kd);
    }
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
        float *slot = ms_kv_at(kv, pos);
        for (int64_t i = 0; i < kd; i++) {
            slot[i] = kt[i];
            slot[kd + i] = v[t * kd + i];
        }
        int64_t lo = a->window && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
        heads_job hj = {.a = a, .kv = kv, .q = qt, .lo = lo, .pos = pos, .ctx = f->ctx,
                        .scores = f->scores, .o = att + t * qd};
        ms_pool_run(a->n_heads, head_task, &hj);
    }
    ms_matmul(&a->wo, att, (int)n, out);
    if (a->bo)
        ms_add_bias(out, a->bo, n, a->d_model);
}

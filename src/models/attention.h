/* Grouped-query attention with the variants the GQA families use: q/k/v/o
 * biases (gpt_oss), per-head RMSNorm of q and k before RoPE (qwen3_moe),
 * attention sinks (gpt_oss: one learned logit per head in the softmax
 * denominator), and a sliding window (a query at p sees keys p-window+1..p).
 *
 * Head h reads KV head h / (n_heads / n_kv_heads), as upstream's
 * q.view(-1, n_kv, q_mult, d) and repeat_kv both do. The KV row of a
 * position is [K: n_kv*head_dim | V: n_kv*head_dim]. */
#ifndef MS_MODELS_ATTENTION_H
#define MS_MODELS_ATTENTION_H

#include "models/family.h"
#include "models/rope.h"

typedef struct ms_gqa {
    int n_heads, n_kv_heads, head_dim;
    int64_t d_model;
    ms_mat wq, wk, wv, wo;          /* [n_heads*hd][d], [n_kv*hd][d] x2, [d][n_heads*hd] */
    const float *bq, *bk, *bv, *bo; /* biases or NULL */
    const float *q_norm, *k_norm;   /* [head_dim] RMSNorm weights or NULL */
    float norm_eps;
    const float *sinks;             /* [n_heads] or NULL */
    int64_t window;                 /* 0: full causal attention */
    float scale;                    /* softmax scale, 1/sqrt(head_dim) */
    const ms_rope *rope;
} ms_gqa;

/* Floats per position in this layer's KV cache. */
static inline int64_t ms_gqa_kv_row(const ms_gqa *a)
{
    return 2 * (int64_t)a->n_kv_heads * a->head_dim;
}

/* Layer l's KV cache geometry in m: rows of [K | V], a plane per KV head's
 * key or value, fp8 scales per head, the key planes read by tiles. */
static inline void ms_gqa_describe_kv(const ms_gqa *a, ms_model *m, int l)
{
    m->kv_row[l] = ms_gqa_kv_row(a);
    m->kv_group[l] = a->head_dim;
    m->kv_plane[l] = a->head_dim;
    m->kv_kplanes[l] = a->n_kv_heads;
}

/* Binds "<prefix>.{q,k,v,o}_proj" for a (its dimensions set), the biases
 * of q/k/v when qkv_bias and of o when o_bias, and "<prefix>.{q,k}_norm"
 * when qk_norm. Returns the number of problems recorded. */
int ms_gqa_bind(ms_gqa *a, ms_binder *b, const char *prefix, int qkv_bias, int o_bias,
                int qk_norm);

/* Scratch floats ms_gqa_forward needs for n positions. */
int64_t ms_gqa_scratch(const ms_gqa *a, int64_t n);

/* Attention over the rows of f with x = normed input [n][d_model]: writes
 * their K/V into the caches and the projected output (o_proj + bias, no
 * residual) into out [n][d_model]. -1 with err when attention's scratch
 * cannot be had. */
int ms_gqa_forward(const ms_gqa *a, const ms_fwd *f, int layer, const float *x, float *out,
                   float *scratch, ms_err *err);

#endif

/* Multi-head Latent Attention (DeepSeek-V2/V3, LongCat-Flash), computed in
 * the absorbed form over a compressed KV cache.
 *
 * Upstream (expanded form, transformers DeepseekV3Attention /
 * LongcatFlashMLA):
 *   q      = q_b(RMSNorm(q_a(x)))  (q_proj(x) when q_lora_rank is null),
 *            per head [nope | rope], times q_scale (LongCat's
 *            mla_scale_q_lora, on BOTH parts; 1 for DeepSeek)
 *   [c|kr] = kv_a_proj_with_mqa(x): latent c [kv_lora], shared k_rope [rope]
 *   c      = RMSNorm(c) times kv_scale (LongCat's mla_scale_kv_lora, after
 *            the norm; k_rope is not scaled)
 *   [k_nope | v]_h = kv_b(c) per head; k_rope shared by all heads
 *   RoPE on q_rope and k_rope; score = (q_nope.k_nope + q_rope.k_rope) * scale
 *   out    = o_proj(concat_h softmax(score) @ v_h)
 *
 * Absorbed form (DeepSeek inference/model.py, attn_impl "absorb"): with
 * W_UK_h, W_UV_h the k_nope and v rows of kv_b for head h,
 *   q_nope.k_nope = (W_UK_h^T q_nope) . c     and     v_h = W_UV_h c,
 * so the cache holds only [c | k_rope] per position (kv_lora + rope floats:
 * 576 for DeepSeek-V3, instead of heads * (nope + rope + v)), a query
 * becomes [W_UK_h^T q_nope | q_rope] per head and the output W_UV_h applied
 * to the attention-weighted latent. Prefill and decode both take this path,
 * so a prompt gives the same bits whether fed whole or token by token.
 *
 * RoPE layout: interleaved pairs (2i, 2i+1), kept interleaved (DeepSeek
 * inference/model.py); transformers de-interleaves q and k alike, which
 * leaves every q.k unchanged. rope_interleave false selects rotate_half.
 *
 * W_UK_h^T is computed by the kernels as a matrix of its own: at load, each
 * head's k_nope rows of kv_b are transposed into a copy in the stored
 * format (same bytes as those rows; FP8 codes with their block scales
 * transposed, the head's first row padded back to a block boundary with
 * zero columns that meet zero query entries). */
#ifndef MS_MODELS_MLA_H
#define MS_MODELS_MLA_H

#include "models/family.h"
#include "models/rope.h"

typedef struct ms_mla {
    int n_heads, q_lora, kv_lora, nope, rope, v; /* q_lora 0: q_proj, no LoRA */
    int64_t d_model;
    ms_mat wq_a;              /* [q_lora][d] */
    ms_mat wq_b;              /* [n_heads*(nope+rope)][q_lora] */
    ms_mat wq;                /* [n_heads*(nope+rope)][d], q_lora 0 only */
    ms_mat wkv_a;             /* [kv_lora+rope][d] */
    ms_mat wkv_b;             /* [n_heads*(nope+v)][kv_lora]: per head [k_nope rows | v rows] */
    ms_mat wo;                /* [d][n_heads*v] */
    const float *q_a_norm;    /* [q_lora] */
    const float *kv_a_norm;   /* [kv_lora] */
    const float *bq_a, *bkv_a, *bo; /* attention_bias: [q_lora], [kv_lora+rope], [d]; or NULL */
    float lora_eps;           /* eps of q_a_layernorm / kv_a_layernorm */
    float q_scale, kv_scale;  /* LongCat mla_scale_q_lora / _kv_lora; 1 for DeepSeek */
    float scale;              /* softmax scale */
    const ms_rope *rope_tab;
    int64_t kv_off;           /* offset of this block's [c | k_rope] in the layer's KV row */
    /* built by ms_mla_prepare */
    ms_mat *uk_t;             /* [n_heads]: W_UK_h^T, [kv_lora][uk_pad[h] + nope] */
    int *uk_pad;              /* [n_heads]: leading zero columns of uk_t[h] */
    int uk_pad_max;
} ms_mla;

/* Floats per position this block adds to a KV row: the latent and k_rope. */
static inline int64_t ms_mla_kv_row(const ms_mla *a)
{
    return (int64_t)a->kv_lora + a->rope;
}

/* Elements per FP8 scale of the cache row: a common divisor of the latent
 * and k_rope, so that no scale spans both. */
static inline int ms_mla_kv_group(const ms_mla *a)
{
    int x = a->kv_lora, y = a->rope;
    while (y) {
        int t = x % y;
        x = y;
        y = t;
    }
    return x > 64 && x % 64 == 0 ? 64 : x;
}

/* Binds the block's tensors "<prefix>.q_a_proj" ... "<prefix>.o_proj" (the
 * same names in both families) as dense weights; with_bias binds the
 * attention_bias vectors. Problems are recorded in b. */
void ms_mla_bind(ms_mla *a, ms_binder *b, const char *prefix, int with_bias);

/* Builds the absorbed-form query matrices into the arena. Call after a
 * binding without problems (never in check-only mode). */
int ms_mla_prepare(ms_mla *a, ms_arena *arena, ms_err *err);

/* Scratch floats ms_mla_forward needs for n positions. */
int64_t ms_mla_scratch(const ms_mla *a, int64_t n);

/* Attention over the rows of f with x = normed input [n][d_model]: writes
 * their [c | k_rope] into the caches (at kv_off of each row) and the
 * projected output (o_proj, no residual) into out [n][d_model]. -1 with
 * err when attention's scratch cannot be had. */
int ms_mla_forward(const ms_mla *a, const ms_fwd *f, int layer, const float *x, float *out,
                   float *scratch, ms_err *err);

/* The rotary settings of an MLA model, read by ms_mla_read_rope. */
typedef struct ms_mla_rope_cfg {
    double theta;
    int interleaved;          /* rope_interleave: pairs (2i, 2i+1), else rotate_half */
    int use_yarn;
    ms_yarn yarn;             /* use_yarn: resolved, attn_factor included */
    double scale_mult;        /* multiplies the softmax scale: yarn_get_mscale(factor,
                               * mscale_all_dim)^2 with YaRN, else 1 */
} ms_mla_rope_cfg;

/* Reads rope_theta, max_position_embeddings and rope_scaling (null,
 * "default" or "yarn" with DeepSeek's mscale / mscale_all_dim) from a
 * config and builds the table for the rope_dim rotated dims. */
int ms_mla_read_rope(const json_t *config, int rope_dim, int interleaved, ms_rope *rope,
                     ms_mla_rope_cfg *out, ms_err *err);

/* Prints the block's dimensions, KV row, softmax scale and rope settings
 * (inspect's config lines). */
void ms_mla_describe(const ms_mla *a, const ms_mla_rope_cfg *rc, FILE *out);

#endif

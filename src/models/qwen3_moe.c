/* qwen3_moe: Qwen/Qwen3-30B-A3B, Qwen3-235B-A22B and their -FP8 releases.
 *
 * Upstream: transformers models/qwen3_moe/modeling_qwen3_moe.py and
 * configuration_qwen3_moe.py. Details that cause bugs:
 *  - QK-norm: an RMSNorm over head_dim applied to every q and k head BEFORE
 *    RoPE (v is not normed); rotate-half RoPE;
 *  - router: softmax over ALL experts in float32, top-k of the
 *    probabilities, renormalised only when norm_topk_prob;
 *  - dense layers: mlp_only_layers, or layers where (l + 1) %
 *    decoder_sparse_step != 0, run a SwiGLU MLP of intermediate_size;
 *  - experts are separate tensors experts.E.{gate,up,down}_proj, plain SwiGLU;
 *  - FP8 releases store linears as F8_E4M3 with 128x128 weight_scale_inv
 *    (BF16 in Qwen3-FP8, F16 in some 2507 files): detected per tensor;
 *  - lm_head is embed_tokens when tie_word_embeddings;
 *  - use_sliding_window is false in every release; refused when true, since
 *    its per-layer meaning changed across transformers versions. */
#include <math.h>
#include <string.h>

#include "base/json.h"
#include "models/config.h"
#include "models/decoder.h"

typedef struct qwen3 {
    ms_model base;
    int64_t n_layers, d, n_heads, n_kv_heads, head_dim, d_ff, d_ff_dense, vocab;
    int64_t n_experts, top_k, sparse_step, max_pos;
    int norm_topk, tie, attn_bias, sliding;
    json_t *mlp_only;                 /* borrowed from the config */
    double rope_theta, eps;
    ms_rope rope;
    ms_decoder dec;
} qwen3;

#define K(key, type, req, def, lo, hi, field) {key, type, req, def, lo, hi, 0, offsetof(qwen3, field)}
static const ms_cfg_key keys[] = {
    K("num_hidden_layers", MS_KEY_INT, 1, 0, 1, 4096, n_layers),
    K("hidden_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d),
    K("num_attention_heads", MS_KEY_INT, 1, 0, 1, 65536, n_heads),
    {"num_key_value_heads", MS_KEY_INT, 0, 0, 0, 65536, 1, offsetof(qwen3, n_kv_heads)}, /* 0: heads */
    {"head_dim", MS_KEY_INT, 0, 0, 0, 65536, 1, offsetof(qwen3, head_dim)}, /* 0: hidden / heads */
    K("moe_intermediate_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d_ff),
    K("intermediate_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d_ff_dense),
    K("num_experts", MS_KEY_INT, 1, 0, 1, MS_ROUTER_MAX_EXPERTS, n_experts),
    K("num_experts_per_tok", MS_KEY_INT, 1, 0, 1, MS_ROUTER_MAX_EXPERTS, top_k),
    K("decoder_sparse_step", MS_KEY_INT, 0, 1, 1, 4096, sparse_step),
    K("vocab_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_VOCAB, vocab),
    K("max_position_embeddings", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_POS, max_pos),
    K("norm_topk_prob", MS_KEY_BOOL, 0, 0, 0, 1, norm_topk),
    K("tie_word_embeddings", MS_KEY_BOOL, 0, 0, 0, 1, tie),
    K("attention_bias", MS_KEY_BOOL, 0, 0, 0, 1, attn_bias),
    K("use_sliding_window", MS_KEY_BOOL, 0, 0, 0, 1, sliding),
    {"rope_theta", MS_KEY_NUM, 1, 0, 0, 1e12, 1, offsetof(qwen3, rope_theta)},
    {"rms_norm_eps", MS_KEY_NUM, 1, 0, 0, 0.5, 1, offsetof(qwen3, eps)},
};
#undef K
#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))

static int read_config(qwen3 *m, const json_t *c, ms_err *err)
{
    const char *f = "config.json";
    if (ms_cfg_read(c, f, keys, N_KEYS, m, err))
        return -1;
    m->n_kv_heads = m->n_kv_heads ? m->n_kv_heads : m->n_heads;
    m->head_dim = m->head_dim ? m->head_dim : m->d / m->n_heads;
    m->mlp_only = json_object_get(c, "mlp_only_layers");
    if (m->sliding)
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: use_sliding_window is true; no "
                          "Qwen3-MoE release uses it and its meaning changed across versions");
    const json_t *rs = json_object_get(c, "rope_scaling");
    if (rs && !json_is_null(rs))
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: rope_scaling is set; this build "
                          "runs Qwen3-MoE with plain RoPE as released (rope_scaling null)");
    if (m->mlp_only && !json_is_null(m->mlp_only) && !json_is_array(m->mlp_only))
        return ms_err_set(err, MS_E_FORMAT, "config.json: mlp_only_layers must be a list");
    /* every dimension has its range above; these are the relations */
    if (ms_json_check_int(f, "head_dim", m->head_dim, 1, 65536, err) ||
        ms_json_check_int(f, "num_experts_per_tok", m->top_k, 1, m->n_experts, err) ||
        ms_json_check_multiple(f, "num_attention_heads", m->n_heads, m->n_kv_heads,
                               "num_key_value_heads: heads share KV heads in equal groups",
                               err))
        return -1;
    return 0;
}

/* Sparse unless listed in mlp_only_layers or off the decoder_sparse_step grid. */
static int layer_is_moe(const qwen3 *m, int l)
{
    size_t i;
    const json_t *v;
    json_array_foreach(m->mlp_only, i, v) if (json_integer_value(v) == l) return 0;
    return (l + 1) % m->sparse_step == 0;
}

/* Layer l: GQA with QK-norm; the softmax router and SwiGLU experts, or a
 * dense MLP. */
static void layer(void *fam, ms_binder *b, int l)
{
    qwen3 *m = fam;
    ms_decoder_layer *L = &m->dec.layers[l];
    ms_gqa *a = &L->attn;
    *a = (ms_gqa){.n_heads = (int)m->n_heads, .n_kv_heads = (int)m->n_kv_heads,
                  .head_dim = (int)m->head_dim, .d_model = m->d, .norm_eps = (float)m->eps,
                  .scale = (float)(1.0 / sqrt((double)m->head_dim)), .rope = &m->rope};
    L->is_moe = layer_is_moe(m, l);
    L->router = (ms_router){.kind = MS_ROUTER_SOFTMAX_TOPK, .n_experts = (int)m->n_experts,
                            .top_k = (int)m->top_k, .norm_topk = m->norm_topk};
    L->moe = (ms_moe){.layer = l, .n_experts = (int)m->n_experts, .top_k = (int)m->top_k,
                      .d_model = m->d, .d_ff = m->d_ff, .ffn = MS_FFN_SWIGLU};
    L->mlp = (ms_mlp){.d_model = m->d, .d_ff = m->d_ff_dense};
    ms_gqa_describe_kv(a, &m->base, l);

    char p[64], n[128];
    snprintf(p, sizeof p, "model.layers.%d", l);
    ms_decoder_bind_norms(L, b, p, m->d);
    snprintf(n, sizeof n, "%s.self_attn", p);
    ms_gqa_bind(a, b, n, m->attn_bias, m->attn_bias, 1);
    if (!L->is_moe) {
        snprintf(n, sizeof n, "%s.mlp", p);
        ms_mlp_bind(&L->mlp, b, n, MS_ROLE_DENSE, NULL);
        return;
    }
    /* the router stays unquantised in FP8 releases */
    snprintf(n, sizeof n, "%s.mlp.gate.weight", p);
    ms_bind_plain_linear(b, MS_ROLE_DENSE, n, m->n_experts, m->d, MS_DTYPE_BF16, &L->router.w);
    snprintf(n, sizeof n, "%s.mlp.experts", p);
    ms_moe_bind_experts(b, m->base.experts, l, n, (int)m->n_experts, m->d, m->d_ff);
}

static int qwen3_open(const ms_checkpoint *ck, ms_binder *b, const ms_model_opts *opts,
                      ms_model **out, ms_err *err)
{
    qwen3 tmp = {0};
    *out = NULL;
    if (read_config(&tmp, ck->config, err))
        return -1;
    qwen3 *m = ms_model_create(&(ms_model_spec){.tmp = &tmp, .size = sizeof *m,
                                    .family = &ms_family_qwen3_moe, .n_layers = (int)tmp.n_layers,
                                    .n_experts = (int)tmp.n_experts, .n_used = (int)tmp.top_k,
                                    .d_model = tmp.d, .vocab = tmp.vocab,
                                    .max_ctx = tmp.max_pos},
                                 opts, b, err);
    if (!m)
        return -1;
    if (ms_decoder_init(&m->dec, &m->base, m->d, m->vocab, (float)m->eps, err) ||
        ms_rope_init(&m->rope, (int)m->head_dim, m->rope_theta, MS_ROPE_HALF, err) ||
        ms_expert_store_open((int)m->n_layers, (int)m->n_experts, 3, &m->base.experts, err) ||
        ms_decoder_bind(&m->dec, b, "model", m->tie, 0, layer, NULL, m, opts, err)) {
        ms_model_free(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}

static void qwen3_describe(const ms_model *mb, FILE *out)
{
    const qwen3 *m = (const qwen3 *)mb;
    int dense = 0;
    for (int l = 0; l < mb->n_layers; l++)
        dense += !m->dec.layers[l].is_moe;
    ms_cfg_describe(keys, N_KEYS, mb, out);
    fprintf(out, "  (dense layers: %d)\n", dense);
}

static int qwen3_forward(ms_model *mb, const ms_fwd *f, ms_err *err)
{
    return ms_decoder_forward(&((qwen3 *)mb)->dec, f, err);
}

const ms_family ms_family_qwen3_moe = {
    .model_type = "qwen3_moe",
    .fp8_scale_dtype = MS_DTYPE_BF16,
    .open = qwen3_open,
    .close = ms_model_free, /* nothing beyond the arena and the shared tables */
    .describe = qwen3_describe,
    .forward = qwen3_forward,
};

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
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "models/decoder.h"

typedef struct qwen3 {
    ms_model base;
    /* hyper-parameters from config.json */
    int64_t d, n_heads, n_kv_heads, head_dim, d_ff, d_ff_dense, vocab;
    int n_experts, top_k, norm_topk, sparse_step, tie, attn_bias;
    json_t *mlp_only;                 /* borrowed from the config */
    double rope_theta, eps;
    ms_rope rope;
    ms_decoder dec;
} qwen3;

static int read_config(qwen3 *m, const json_t *c, int64_t *n_layers, ms_err *err)
{
    const char *f = "config.json";
    int64_t e, k, step, hd;
    int sw;
    if (ms_json_int_in(c, f, "num_hidden_layers", 1, 4096, n_layers, err) ||
        ms_json_int_in(c, f, "hidden_size", 1, MS_CFG_MAX_DIM, &m->d, err) ||
        ms_json_int_in(c, f, "num_attention_heads", 1, 65536, &m->n_heads, err) ||
        ms_json_int_opt_in(c, f, "num_key_value_heads",
                           1, 65536, m->n_heads, &m->n_kv_heads, err) ||
        ms_json_int_opt_in(c, f, "head_dim",
                           1, 65536, m->n_heads ? m->d / m->n_heads : 0, &hd, err) ||
        ms_json_int_in(c, f, "moe_intermediate_size", 1, MS_CFG_MAX_DIM, &m->d_ff, err) ||
        ms_json_int_in(c, f, "intermediate_size", 1, MS_CFG_MAX_DIM, &m->d_ff_dense, err) ||
        ms_json_int_in(c, f, "vocab_size", 1, MS_CFG_MAX_VOCAB, &m->vocab, err) ||
        ms_json_int_in(c, f, "num_experts", 1, MS_ROUTER_MAX_EXPERTS, &e, err) ||
        ms_json_int_in(c, f, "num_experts_per_tok", 1, MS_ROUTER_MAX_EXPERTS, &k, err) ||
        ms_json_int_opt_in(c, f, "decoder_sparse_step", 1, 4096, 1, &step, err) ||
        ms_json_bool_opt(c, f, "norm_topk_prob", 0, &m->norm_topk, err) ||
        ms_json_bool_opt(c, f, "tie_word_embeddings", 0, &m->tie, err) ||
        ms_json_bool_opt(c, f, "attention_bias", 0, &m->attn_bias, err) ||
        ms_json_bool_opt(c, f, "use_sliding_window", 0, &sw, err) ||
        ms_json_num(c, f, "rope_theta", &m->rope_theta, err) ||
        ms_json_range(f, "rope_theta", m->rope_theta, 0, 1e12, 1, err) ||
        ms_json_num(c, f, "rms_norm_eps", &m->eps, err) ||
        ms_json_range(f, "rms_norm_eps", m->eps, 0, 0.5, 1, err) ||
        ms_json_int_in(c, f, "max_position_embeddings", 1, MS_CFG_MAX_POS, &m->base.max_ctx, err))
        return -1;
    m->head_dim = hd;
    m->n_experts = (int)e;
    m->top_k = (int)k;
    m->sparse_step = (int)step;
    m->mlp_only = json_object_get(c, "mlp_only_layers");
    if (sw)
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: use_sliding_window is true; no "
                          "Qwen3-MoE release uses it and its meaning changed across versions");
    const json_t *rs = json_object_get(c, "rope_scaling");
    if (rs && !json_is_null(rs))
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: rope_scaling is set; this build "
                          "runs Qwen3-MoE with plain RoPE as released (rope_scaling null)");
    if (m->mlp_only && !json_is_null(m->mlp_only) && !json_is_array(m->mlp_only))
        return ms_err_set(err, MS_E_FORMAT, "config.json: mlp_only_layers must be a list");
    /* every dimension has its range above; these are the relations */
    if (ms_json_check_int(f, "num_experts_per_tok", k, 1, e, err) ||
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

static void describe_layer(qwen3 *m, int l)
{
    ms_decoder_layer *L = &m->dec.layers[l];
    ms_gqa *a = &L->attn;
    a->n_heads = (int)m->n_heads;
    a->n_kv_heads = (int)m->n_kv_heads;
    a->head_dim = (int)m->head_dim;
    a->d_model = m->d;
    a->norm_eps = (float)m->eps;
    a->scale = (float)(1.0 / sqrt((double)m->head_dim));
    a->rope = &m->rope;
    L->is_moe = layer_is_moe(m, l);
    L->router = (ms_router){.kind = MS_ROUTER_SOFTMAX_TOPK, .n_experts = m->n_experts,
                            .top_k = m->top_k, .norm_topk = m->norm_topk};
    L->moe = (ms_moe){.layer = l, .n_experts = m->n_experts, .top_k = m->top_k,
                      .d_model = m->d, .d_ff = m->d_ff, .ffn = MS_FFN_SWIGLU};
    L->mlp.d_model = m->d;
    L->mlp.d_ff = m->d_ff_dense;
    m->base.kv_row[l] = ms_gqa_kv_row(a);
    m->base.kv_group[l] = a->head_dim;
    m->base.kv_plane[l] = a->head_dim;
}

static void bind_layer(qwen3 *m, ms_binder *b, int l)
{
    ms_decoder_layer *L = &m->dec.layers[l];
    char p[160], n[200];
    int64_t qd = m->n_heads * m->head_dim, kd = m->n_kv_heads * m->head_dim, d = m->d;
    float *v;
    snprintf(p, sizeof p, "model.layers.%d", l);
#define VEC(field, suffix, len)                                                 \
    do {                                                                        \
        snprintf(n, sizeof n, "%s.%s", p, suffix);                              \
        ms_bind_vector(b, MS_ROLE_DENSE, n, len, &v);                           \
        field = v;                                                              \
    } while (0)
#define LIN(mat, suffix, rows, cols)                                            \
    do {                                                                        \
        snprintf(n, sizeof n, "%s.%s", p, suffix);                              \
        ms_bind_linear(b, MS_ROLE_DENSE, n, rows, cols, &mat, NULL);            \
    } while (0)
    VEC(L->attn_norm, "input_layernorm.weight", d);
    VEC(L->ffn_norm, "post_attention_layernorm.weight", d);
    LIN(L->attn.wq, "self_attn.q_proj", qd, d);
    LIN(L->attn.wk, "self_attn.k_proj", kd, d);
    LIN(L->attn.wv, "self_attn.v_proj", kd, d);
    LIN(L->attn.wo, "self_attn.o_proj", d, qd);
    VEC(L->attn.q_norm, "self_attn.q_norm.weight", m->head_dim);
    VEC(L->attn.k_norm, "self_attn.k_norm.weight", m->head_dim);
    if (m->attn_bias) {
        VEC(L->attn.bq, "self_attn.q_proj.bias", qd);
        VEC(L->attn.bk, "self_attn.k_proj.bias", kd);
        VEC(L->attn.bv, "self_attn.v_proj.bias", kd);
        VEC(L->attn.bo, "self_attn.o_proj.bias", d);
    }
    if (!L->is_moe) {
        LIN(L->mlp.gate, "mlp.gate_proj", m->d_ff_dense, d);
        LIN(L->mlp.up, "mlp.up_proj", m->d_ff_dense, d);
        LIN(L->mlp.down, "mlp.down_proj", d, m->d_ff_dense);
        return;
    }
    /* the router stays unquantised in FP8 releases */
    snprintf(n, sizeof n, "%s.mlp.gate.weight", p);
    int64_t rshape[2] = {m->n_experts, d};
    const ms_tensor_info *rt = ms_bind_tensor(b, MS_ROLE_DENSE, n, MS_DT_FLOAT, 2, rshape);
    if (rt) {
        L->router.w = (ms_mat){.fmt = rt->dtype == MS_DTYPE_F32 ? MS_WFMT_F32
                                    : rt->dtype == MS_DTYPE_BF16 ? MS_WFMT_BF16 : MS_WFMT_F16,
                               .rows = m->n_experts, .cols = d, .w = ms_ckpt_data(b->ck, rt)};
    }
    for (int e = 0; e < m->n_experts; e++) {
        static const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
        ms_mat mats[3];
        ms_span sp[6];
        int ok = 1;
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof n, "%s.mlp.experts.%d.%s", p, e, proj[k]);
            ok &= ms_bind_linear(b, MS_ROLE_EXPERT, n, k == 2 ? d : m->d_ff,
                                 k == 2 ? m->d_ff : d, &mats[k], &sp[2 * k]) == 0;
        }
        if (ok)
            ms_expert_store_set(m->base.experts, l, e, mats, sp);
    }
#undef VEC
#undef LIN
}

static int qwen3_open(const ms_checkpoint *ck, ms_binder *b, const ms_model_opts *opts,
                      ms_model **out, ms_err *err)
{
    int64_t n_layers;
    qwen3 tmp = {0};
    *out = NULL;
    if (read_config(&tmp, ck->config, &n_layers, err))
        return -1;
    qwen3 *m = ms_model_create(&tmp, sizeof *m, &ms_family_qwen3_moe, (int)n_layers, tmp.d, tmp.vocab,
                            tmp.n_experts, tmp.top_k, opts, b, err);
    if (!m)
        return -1;
    if (ms_decoder_init(&m->dec, &m->base, m->d, m->vocab, (float)m->eps, err) ||
        ms_rope_init(&m->rope, (int)m->head_dim, m->rope_theta, MS_ROPE_HALF, err) ||
        ms_expert_store_open((int)n_layers, m->n_experts, 3, &m->base.experts, err)) {
        ms_model_free(&m->base);
        return -1;
    }
    ms_bind_linear(b, MS_ROLE_EMBED, "model.embed_tokens", m->vocab, m->d, &m->dec.embed, NULL);
    for (int l = 0; l < (int)n_layers; l++) {
        describe_layer(m, l);
        bind_layer(m, b, l);
    }
    float *v;
    ms_bind_vector(b, MS_ROLE_DENSE, "model.norm.weight", m->d, &v);
    m->dec.final_norm = v;
    if (m->tie)
        m->dec.lm_head = m->dec.embed;
    else
        ms_bind_linear(b, MS_ROLE_DENSE, "lm_head", m->vocab, m->d, &m->dec.lm_head, NULL);
    if (!opts->check_only && ms_decoder_alloc_scratch(&m->dec, err)) {
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
    fprintf(out, "  hidden_size: %lld\n  num_hidden_layers: %d (%d dense)\n", (long long)m->d,
            mb->n_layers, dense);
    fprintf(out, "  num_attention_heads: %lld\n  num_key_value_heads: %lld\n  head_dim: %lld\n",
            (long long)m->n_heads, (long long)m->n_kv_heads, (long long)m->head_dim);
    fprintf(out, "  moe_intermediate_size: %lld\n  intermediate_size: %lld\n",
            (long long)m->d_ff, (long long)m->d_ff_dense);
    fprintf(out, "  num_experts: %d\n  num_experts_per_tok: %d\n  norm_topk_prob: %s\n",
            m->n_experts, m->top_k, m->norm_topk ? "true" : "false");
    fprintf(out, "  decoder_sparse_step: %d\n  vocab_size: %lld\n  tie_word_embeddings: %s\n",
            m->sparse_step, (long long)m->vocab, m->tie ? "true" : "false");
    fprintf(out, "  max_position_embeddings: %lld\n  rope_theta: %g\n  rms_norm_eps: %g\n",
            (long long)mb->max_ctx, m->rope_theta, m->eps);
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

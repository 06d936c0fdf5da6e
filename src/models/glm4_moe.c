/* glm4_moe: zai-org/GLM-4.5, GLM-4.5-Air and GLM-4.6 (bf16 releases).
 *
 * Upstream: transformers models/glm4_moe/modeling_glm4_moe.py and
 * configuration_glm4_moe.py. Details that cause bugs:
 *  - partial RoPE: only the first int(head_dim * partial_rotary_factor) dims
 *    of each q and k head rotate (rotate-half pairs within them); inv_freq
 *    over that dim; the rest pass unchanged;
 *  - q/k/v carry biases when attention_bias, o_proj never;
 *  - QK-norm only when use_qk_norm (GLM-4.5 and 4.6 yes, Air no): RMSNorm
 *    over head_dim per head, before RoPE;
 *  - the router is DeepSeek-V3's noaux_tc: sigmoid of float32 logits;
 *    e_score_correction_bias (F32) chooses, never weighs; group-limited
 *    top-k; weights renormalised (norm_topk_prob, + 1e-20) then times
 *    routed_scaling_factor;
 *  - shared experts, n_shared_experts * moe_intermediate_size wide, on the
 *    same normed input; layers below first_k_dense_replace are dense;
 *  - the MTP layers model.layers.{num_hidden_layers + i}.* are stored but
 *    not part of the main model: knowingly ignored;
 *  - the FP8 releases are compressed-tensors checkpoints (float-quantized,
 *    one FP8 e4m3 weight_scale per output channel, activations dynamic):
 *    the binder reads them (weights/bind.c); the router and lm_head stay
 *    bf16 there. */
#include <math.h>
#include <string.h>

#include "base/json.h"
#include "models/config.h"
#include "models/decoder.h"

typedef struct glm4 {
    ms_model base;
    int64_t n_layers, d, n_heads, n_kv, head_dim, d_ff, d_ff_expert, n_experts, n_shared;
    int64_t top_k, n_group, topk_group, first_dense, n_mtp, vocab, max_pos;
    int norm_topk, qk_norm, attn_bias, tie;
    double eps, theta, partial, rsf;
    ms_rope rope;
    ms_decoder dec;
} glm4;

#define K(key, type, req, def, lo, hi, field) {key, type, req, def, lo, hi, 0, offsetof(glm4, field)}
#define N(key, def, lo, hi, field) {key, MS_KEY_NUM, 0, def, lo, hi, 1, offsetof(glm4, field)}
static const ms_cfg_key keys[] = {
    K("num_hidden_layers", MS_KEY_INT, 1, 0, 1, 4096, n_layers),
    K("hidden_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d),
    K("num_attention_heads", MS_KEY_INT, 1, 0, 1, 65536, n_heads),
    K("num_key_value_heads", MS_KEY_INT, 1, 0, 1, 65536, n_kv),
    {"head_dim", MS_KEY_INT, 0, 0, 0, 65536, 1, offsetof(glm4, head_dim)}, /* 0: hidden/heads */
    K("intermediate_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d_ff),
    K("moe_intermediate_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d_ff_expert),
    K("n_routed_experts", MS_KEY_INT, 1, 0, 1, MS_ROUTER_MAX_EXPERTS, n_experts),
    K("n_shared_experts", MS_KEY_INT, 0, 0, 0, 64, n_shared),
    K("num_experts_per_tok", MS_KEY_INT, 1, 0, 1, MS_ROUTER_MAX_EXPERTS, top_k),
    K("n_group", MS_KEY_INT, 0, 1, 1, MS_ROUTER_MAX_GROUPS, n_group),
    K("topk_group", MS_KEY_INT, 0, 1, 1, MS_ROUTER_MAX_GROUPS, topk_group),
    K("first_k_dense_replace", MS_KEY_INT, 0, 0, 0, 4096, first_dense),
    K("num_nextn_predict_layers", MS_KEY_INT, 0, 0, 0, 64, n_mtp),
    K("vocab_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_VOCAB, vocab),
    K("max_position_embeddings", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_POS, max_pos),
    K("norm_topk_prob", MS_KEY_BOOL, 0, 1, 0, 1, norm_topk),
    K("use_qk_norm", MS_KEY_BOOL, 0, 0, 0, 1, qk_norm),
    K("attention_bias", MS_KEY_BOOL, 0, 0, 0, 1, attn_bias),
    K("tie_word_embeddings", MS_KEY_BOOL, 0, 0, 0, 1, tie),
    N("rms_norm_eps", 1e-5, 0, 0.5, eps),
    N("rope_theta", 10000, 0, 1e12, theta),
    N("partial_rotary_factor", 0.5, 0, 1, partial),
    N("routed_scaling_factor", 1.0, 0, 1e4, rsf),
};
#undef K
#undef N

static int read_config(glm4 *m, const json_t *c, ms_err *err)
{
    static const ms_cfg_fixed fixed[] = {{"hidden_act", "silu"}};
    const char *f = "config.json";
    if (ms_cfg_read(c, f, keys, (int)(sizeof keys / sizeof keys[0]), m, err))
        return -1;
    m->head_dim = m->head_dim ? m->head_dim : m->d / m->n_heads;
    int64_t rot = (int64_t)((double)m->head_dim * m->partial);
    const json_t *rs = json_object_get(c, "rope_scaling");
    if (ms_cfg_check_fixed(c, f, "glm4_moe", fixed, 1, err))
        return -1;
    if (rs && !json_is_null(rs))
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: rope_scaling is set; glm4_moe runs "
                          "plain RoPE as released (rope_scaling null)");
    if (ms_json_check_multiple(f, "num_attention_heads", m->n_heads, m->n_kv,
                               "num_key_value_heads: heads share KV heads in equal groups", err) ||
        ms_json_check_multiple(f, "n_routed_experts", m->n_experts, m->n_group,
                               "n_group: experts split into equal groups", err) ||
        ms_json_check_int(f, "topk_group", m->topk_group, 1, m->n_group, err) ||
        ms_json_check_int(f, "num_experts_per_tok", m->top_k, 1,
                          m->topk_group * (m->n_experts / m->n_group), err) ||
        ms_json_check_int(f, "first_k_dense_replace", m->first_dense, 0, m->n_layers, err) ||
        ms_json_check_int(f, "head_dim", m->head_dim, 1, 65536, err))
        return -1;
    if (rot < 2 || rot % 2 || rot > 1024)
        return ms_err_set(err, MS_E_FORMAT, "config.json: head_dim %lld x partial_rotary_factor "
                          "%g gives %lld rotary dims: an even count in [2, 1024] is needed",
                          (long long)m->head_dim, m->partial, (long long)rot);
    return 0;
}

/* Layer l: GQA with partial RoPE; dense MLP below first_k_dense_replace,
 * else the sigmoid group router, routed and shared experts. */
static void layer(void *fam, ms_binder *b, int l)
{
    glm4 *m = fam;
    ms_decoder_layer *L = &m->dec.layers[l];
    ms_gqa *a = &L->attn;
    *a = (ms_gqa){.n_heads = (int)m->n_heads, .n_kv_heads = (int)m->n_kv,
                  .head_dim = (int)m->head_dim, .d_model = m->d, .norm_eps = (float)m->eps,
                  .scale = (float)(1.0 / sqrt((double)m->head_dim)), .rope = &m->rope};
    L->is_moe = l >= m->first_dense;
    L->router = (ms_router){.kind = MS_ROUTER_SIGMOID_GROUP, .n_experts = (int)m->n_experts,
                            .top_k = (int)m->top_k, .norm_topk = m->norm_topk,
                            .n_group = (int)m->n_group, .topk_group = (int)m->topk_group,
                            .routed_scale = (float)m->rsf};
    L->moe = (ms_moe){.layer = l, .n_experts = (int)m->n_experts, .top_k = (int)m->top_k,
                      .d_model = m->d, .d_ff = m->d_ff_expert, .ffn = MS_FFN_SWIGLU};
    L->shared = (ms_mlp){.d_model = m->d, .d_ff = m->n_shared * m->d_ff_expert};
    L->mlp = (ms_mlp){.d_model = m->d, .d_ff = m->d_ff};
    ms_gqa_describe_kv(a, &m->base, l);

    char p[64], n[128];
    snprintf(p, sizeof p, "model.layers.%d", l);
    ms_decoder_bind_norms(L, b, p, m->d);
    snprintf(n, sizeof n, "%s.self_attn", p);
    ms_gqa_bind(a, b, n, m->attn_bias, 0, m->qk_norm);
    snprintf(n, sizeof n, "%s.mlp", p);
    if (!L->is_moe) {
        ms_mlp_bind(&L->mlp, b, n, MS_ROLE_DENSE, NULL);
        return;
    }
    ms_router_bind_sigmoid(&L->router, b, n, m->d);
    snprintf(n, sizeof n, "%s.mlp.shared_experts", p);
    if (L->shared.d_ff)
        ms_mlp_bind(&L->shared, b, n, MS_ROLE_DENSE, NULL);
    snprintf(n, sizeof n, "%s.mlp.experts", p);
    ms_moe_bind_experts(b, m->base.experts, l, n, (int)m->n_experts, m->d, m->d_ff_expert);
}

static int glm4_open(const ms_checkpoint *ck, ms_binder *b, const ms_model_opts *opts,
                     ms_model **out, ms_err *err)
{
    glm4 tmp = {0};
    *out = NULL;
    if (read_config(&tmp, ck->config, err))
        return -1;
    glm4 *m = ms_model_create(&(ms_model_spec){.tmp = &tmp, .size = sizeof *m,
                                    .family = &ms_family_glm4_moe, .n_layers = (int)tmp.n_layers,
                                    .n_experts = (int)tmp.n_experts, .n_used = (int)tmp.top_k,
                                    .d_model = tmp.d, .vocab = tmp.vocab,
                                    .max_ctx = tmp.max_pos},
                                 opts, b, err);
    if (!m)
        return -1;
    int rot = (int)((double)m->head_dim * m->partial);
    if (ms_decoder_init(&m->dec, &m->base, m->d, m->vocab, (float)m->eps, err) ||
        ms_rope_init(&m->rope, rot, m->theta, MS_ROPE_HALF, err) ||
        ms_expert_store_open((int)m->n_layers, (int)m->n_experts, 3, &m->base.experts, err) ||
        ms_decoder_bind(&m->dec, b, "model", m->tie, m->n_mtp, layer, NULL, m, opts, err)) {
        ms_model_free(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}

static void glm4_describe(const ms_model *mb, FILE *out)
{
    ms_cfg_describe(keys, (int)(sizeof keys / sizeof keys[0]), mb, out);
    fprintf(out, "  (rotary dims per head: %d; MTP layers ignored: %lld)\n",
            ((const glm4 *)mb)->rope.dim, (long long)((const glm4 *)mb)->n_mtp);
}

static int glm4_forward(ms_model *mb, const ms_fwd *f, ms_err *err)
{
    return ms_decoder_forward(&((glm4 *)mb)->dec, f, err);
}

const ms_family ms_family_glm4_moe = {
    .model_type = "glm4_moe",
    .fp8_scale_dtype = MS_DTYPE_F32,
    .open = glm4_open,
    .close = ms_model_free, /* nothing beyond the arena and the shared tables */
    .describe = glm4_describe,
    .forward = glm4_forward,
};

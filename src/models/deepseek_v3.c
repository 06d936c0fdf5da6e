/* deepseek_v3: deepseek-ai/DeepSeek-V3, DeepSeek-R1 and their updates (same
 * code; every size from config.json).
 *
 * Upstream: transformers models/deepseek_v3/modeling_deepseek_v3.py and
 * configuration_deepseek_v3.py; deepseek-ai/DeepSeek-V3 inference/model.py.
 * Details that cause bugs:
 *  - MLA (mla.h): q_a_proj -> q_a_layernorm -> q_b_proj (q_proj when
 *    q_lora_rank is null); kv_a_proj_with_mqa = [latent kv_lora | k_rope];
 *    q_a_layernorm / kv_a_layernorm use eps 1e-6 (their RMSNorm default),
 *    not rms_norm_eps; RoPE on the qk_rope_head_dim dims only, interleaved
 *    pairs (rope_interleave, default true), k_rope shared by every head;
 *  - the KV cache holds the normed latent + roped k_rope: kv_lora + rope
 *    floats per token and layer (576 in the release);
 *  - softmax scale = (nope + rope)^-0.5 * mscale^2, mscale = 0.1 *
 *    mscale_all_dim * ln(factor) + 1 when YaRN is configured (x 1.874 in the
 *    release, whose factor is 40); cos/sin times mscale(factor, mscale) /
 *    mscale(factor, mscale_all_dim) (1 in the release);
 *  - router: SIGMOID scores; e_score_correction_bias (F32) chooses, never
 *    weighs; group-limited top-k: n_group groups ranked by the sum of their
 *    two best biased scores, the topk_group best kept, then top-k among their
 *    experts; weights = unbiased scores renormalised (norm_topk_prob) times
 *    routed_scaling_factor (2.5);
 *  - shared experts (n_shared_experts * moe_intermediate_size wide) on the
 *    same normed input, added to the routed sum;
 *  - layers < first_k_dense_replace are dense (intermediate_size MLP);
 *  - the MTP layers model.layers.{num_hidden_layers + i}.*
 *    (num_nextn_predict_layers) are stored but not part of the main model:
 *    knowingly ignored;
 *  - FP8 release: every linear of attention, MLPs and experts is e4m3 with
 *    F32 128x128 weight_scale_inv; embed, lm_head, norms and the router
 *    (bf16) and the correction bias (F32) stay as stored;
 *  - BOS id 0 opens the chat template; the engine never adds one. */
#include <math.h>
#include <string.h>

#include "base/json.h"
#include "models/config.h"
#include "models/decoder.h"

typedef struct deepseek_v3 {
    ms_model base;
    /* hyper-parameters from config.json */
    int64_t n_layers, d, n_heads, n_kv, q_lora, kv_lora, nope, rope_dim, v, vocab, max_pos;
    int64_t d_ff, d_ff_expert, n_shared, first_dense, n_mtp, moe_freq;
    int64_t n_experts, top_k, n_group, topk_group;
    int norm_topk, tie, attn_bias, interleave;
    double eps, rsf;
    ms_mla_rope_cfg rc;
    ms_rope rope;
    ms_decoder dec;
} deepseek_v3;

#define K(key, type, req, def, lo, hi, field) \
    {key, type, req, def, lo, hi, 0, offsetof(deepseek_v3, field)}
static const ms_cfg_key keys[] = {
    K("num_hidden_layers", MS_KEY_INT, 1, 0, 1, 4096, n_layers),
    K("hidden_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d),
    K("num_attention_heads", MS_KEY_INT, 1, 0, 1, 65536, n_heads),
    {"num_key_value_heads", MS_KEY_INT, 0, 0, 0, 65536, 1, offsetof(deepseek_v3, n_kv)},
    K("q_lora_rank", MS_KEY_INT, 0, 0, 0, MS_CFG_MAX_DIM, q_lora), /* null: q_proj */
    K("kv_lora_rank", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, kv_lora),
    K("qk_nope_head_dim", MS_KEY_INT, 1, 0, 1, 65536, nope),
    K("qk_rope_head_dim", MS_KEY_INT, 1, 0, 2, 65536, rope_dim),
    K("v_head_dim", MS_KEY_INT, 1, 0, 1, 65536, v),
    K("vocab_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_VOCAB, vocab),
    K("intermediate_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d_ff),
    K("moe_intermediate_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d_ff_expert),
    K("n_routed_experts", MS_KEY_INT, 1, 0, 1, MS_ROUTER_MAX_EXPERTS, n_experts),
    K("n_shared_experts", MS_KEY_INT, 0, 0, 0, MS_ROUTER_MAX_EXPERTS, n_shared),
    K("num_experts_per_tok", MS_KEY_INT, 1, 0, 1, MS_ROUTER_MAX_EXPERTS, top_k),
    K("n_group", MS_KEY_INT, 0, 1, 1, MS_ROUTER_MAX_GROUPS, n_group),
    K("topk_group", MS_KEY_INT, 0, 1, 1, MS_ROUTER_MAX_GROUPS, topk_group),
    K("first_k_dense_replace", MS_KEY_INT, 0, 0, 0, 4096, first_dense),
    K("num_nextn_predict_layers", MS_KEY_INT, 0, 0, 0, 4096, n_mtp),
    K("moe_layer_freq", MS_KEY_INT, 0, 1, 1, 4096, moe_freq),
    K("max_position_embeddings", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_POS, max_pos),
    K("norm_topk_prob", MS_KEY_BOOL, 0, 1, 0, 1, norm_topk),
    K("tie_word_embeddings", MS_KEY_BOOL, 0, 0, 0, 1, tie),
    K("attention_bias", MS_KEY_BOOL, 0, 0, 0, 1, attn_bias),
    K("rope_interleave", MS_KEY_BOOL, 0, 1, 0, 1, interleave),
    {"routed_scaling_factor", MS_KEY_NUM, 1, 0, 0, 1e4, 1, offsetof(deepseek_v3, rsf)},
    {"rms_norm_eps", MS_KEY_NUM, 1, 0, 0, 0.5, 1, offsetof(deepseek_v3, eps)},
};
#undef K
#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))

static int read_config(deepseek_v3 *m, const json_t *c, ms_err *err)
{
    static const ms_cfg_fixed fixed[] = {
        {"hidden_act", "silu"}, {"scoring_func", "sigmoid"}, {"topk_method", "noaux_tc"},
    };
    const char *f = "config.json";
    if (ms_cfg_read(c, f, keys, N_KEYS, m, err) ||
        ms_cfg_check_fixed(c, f, "deepseek_v3", fixed, 3, err))
        return -1;
    if (m->moe_freq != 1)
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: moe_layer_freq %lld (the "
                          "DeepSeek-V3 code makes every layer from first_k_dense_replace on "
                          "MoE; only 1 is supported)", (long long)m->moe_freq);
    if (m->n_kv && m->n_kv != m->n_heads)
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: num_key_value_heads %lld != "
                          "num_attention_heads %lld (MLA has one latent for all heads)",
                          (long long)m->n_kv, (long long)m->n_heads);
    /* every dimension has its range above; these are the relations */
    if (ms_json_check_multiple(f, "qk_rope_head_dim", m->rope_dim, 2, "RoPE turns pairs", err) ||
        ms_json_check_multiple(f, "n_routed_experts", m->n_experts, m->n_group,
                               "n_group: groups of equal size", err) ||
        ms_json_check_int(f, "topk_group", m->topk_group, 1, m->n_group, err) ||
        ms_json_check_int(f, "num_experts_per_tok", m->top_k, 1,
                          m->topk_group * (m->n_experts / m->n_group), err) ||
        ms_json_check_int(f, "first_k_dense_replace", m->first_dense, 0, m->n_layers, err))
        return -1;
    return 0;
}

/* Layer l's graph: MLA; dense MLP below first_k_dense_replace, else the
 * sigmoid group router, routed experts and the shared experts. */
static void layer(void *fam, ms_binder *b, int l)
{
    deepseek_v3 *m = fam;
    ms_decoder_layer *L = &m->dec.layers[l];
    ms_mla *a = &L->mla;
    L->use_mla = 1;
    *a = (ms_mla){.n_heads = (int)m->n_heads, .q_lora = (int)m->q_lora,
                  .kv_lora = (int)m->kv_lora, .nope = (int)m->nope, .rope = (int)m->rope_dim,
                  .v = (int)m->v, .d_model = m->d, .lora_eps = 1e-6f, .q_scale = 1.0f,
                  .kv_scale = 1.0f, .rope_tab = &m->rope};
    a->scale = (float)(1.0 / sqrt((double)(m->nope + m->rope_dim)) * m->rc.scale_mult);
    L->is_moe = l >= m->first_dense;
    L->router = (ms_router){.kind = MS_ROUTER_SIGMOID_GROUP, .n_experts = (int)m->n_experts,
                            .top_k = (int)m->top_k, .norm_topk = m->norm_topk,
                            .n_group = (int)m->n_group, .topk_group = (int)m->topk_group,
                            .routed_scale = (float)m->rsf};
    L->moe = (ms_moe){.layer = l, .n_experts = (int)m->n_experts, .top_k = (int)m->top_k,
                      .d_model = m->d, .d_ff = m->d_ff_expert, .ffn = MS_FFN_SWIGLU};
    L->shared = (ms_mlp){.d_model = m->d, .d_ff = m->n_shared * m->d_ff_expert};
    L->mlp = (ms_mlp){.d_model = m->d, .d_ff = m->d_ff};
    m->base.kv_row[l] = ms_mla_kv_row(a);
    m->base.kv_group[l] = ms_mla_kv_group(a);
    m->base.kv_plane[l] = ms_mla_kv_row(a);

    char p[160], n[256];
    snprintf(p, sizeof p, "model.layers.%d", l);
    ms_decoder_bind_norms(L, b, p, m->d);
    snprintf(n, sizeof n, "%s.self_attn", p);
    ms_mla_bind(&L->mla, b, n, m->attn_bias);
    if (!L->is_moe) {
        snprintf(n, sizeof n, "%s.mlp", p);
        ms_mlp_bind(&L->mlp, b, n, MS_ROLE_DENSE, NULL);
        return;
    }
    snprintf(n, sizeof n, "%s.mlp", p);
    ms_router_bind_sigmoid(&L->router, b, n, m->d);
    if (L->shared.d_ff) {
        snprintf(n, sizeof n, "%s.mlp.shared_experts", p);
        ms_mlp_bind(&L->shared, b, n, MS_ROLE_DENSE, NULL);
    }
    snprintf(n, sizeof n, "%s.mlp.experts", p);
    ms_moe_bind_experts(b, m->base.experts, l, n, (int)m->n_experts, m->d, m->d_ff_expert);
}

/* A bound layer's absorbed MLA. */
static int prepare(void *fam, int l, ms_err *err)
{
    deepseek_v3 *m = fam;
    return ms_mla_prepare(&m->dec.layers[l].mla, &m->base.arena, err);
}

static int deepseek_v3_open(const ms_checkpoint *ck, ms_binder *b, const ms_model_opts *opts,
                            ms_model **out, ms_err *err)
{
    deepseek_v3 tmp = {0};
    *out = NULL;
    if (read_config(&tmp, ck->config, err))
        return -1;
    deepseek_v3 *m = ms_model_create(&(ms_model_spec){.tmp = &tmp, .size = sizeof *m,
                                    .family = &ms_family_deepseek_v3, .n_layers = (int)tmp.n_layers,
                                    .n_experts = (int)tmp.n_experts, .n_used = (int)tmp.top_k,
                                    .d_model = tmp.d, .vocab = tmp.vocab,
                                    .max_ctx = tmp.max_pos},
                                 opts, b, err);
    if (!m)
        return -1;
    if (ms_decoder_init(&m->dec, &m->base, m->d, m->vocab, (float)m->eps, err) ||
        ms_mla_read_rope(ck->config, (int)m->rope_dim, m->interleave, &m->rope, &m->rc, err) ||
        ms_expert_store_open((int)m->n_layers, (int)m->n_experts, 3, &m->base.experts, err) ||
        ms_decoder_bind(&m->dec, b, "model", m->tie, m->n_mtp, layer, prepare, m, opts, err)) {
        ms_model_free(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}

static void deepseek_v3_describe(const ms_model *mb, FILE *out)
{
    const deepseek_v3 *m = (const deepseek_v3 *)mb;
    ms_cfg_describe(keys, N_KEYS, mb, out);
    fprintf(out, "  (MTP layers ignored: %lld)\n", (long long)m->n_mtp);
    ms_mla_describe(&m->dec.layers[0].mla, &m->rc, out);
}

static int deepseek_v3_forward(ms_model *mb, const ms_fwd *f, ms_err *err)
{
    return ms_decoder_forward(&((deepseek_v3 *)mb)->dec, f, err);
}

const ms_family ms_family_deepseek_v3 = {
    .model_type = "deepseek_v3",
    .fp8_scale_dtype = MS_DTYPE_F32,
    .open = deepseek_v3_open,
    .close = ms_model_free, /* nothing beyond the arena and the shared tables */
    .describe = deepseek_v3_describe,
    .forward = deepseek_v3_forward,
};

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
#include "models/decoder.h"

typedef struct deepseek_v3 {
    ms_model base;
    /* hyper-parameters from config.json */
    int64_t d, n_heads, q_lora, kv_lora, nope, rope_dim, v, vocab;
    int64_t d_ff, d_ff_expert, n_shared, first_dense, n_mtp;
    int n_experts, top_k, n_group, topk_group, norm_topk, tie, attn_bias, interleave;
    double eps, rsf;
    ms_mla_rope_cfg rc;
    ms_rope rope;
    ms_decoder dec;
} deepseek_v3;

/* The keys whose only supported value is upstream's: refuse anything else. */
static int check_fixed(const json_t *c, ms_err *err)
{
    static const struct { const char *key, *want; } fixed[] = {
        {"hidden_act", "silu"}, {"scoring_func", "sigmoid"}, {"topk_method", "noaux_tc"},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        const char *v = json_string_value(json_object_get(c, fixed[i].key));
        if (json_object_get(c, fixed[i].key) && (!v || strcmp(v, fixed[i].want) != 0))
            return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: %s is %s%s%s (deepseek_v3 "
                              "runs \"%s\")", fixed[i].key, v ? "\"" : "", v ? v : "not a string",
                              v ? "\"" : "", fixed[i].want);
    }
    int64_t freq;
    if (ms_json_int_opt_in(c, "config.json", "moe_layer_freq", 1, 4096, 1, &freq, err))
        return -1;
    if (freq != 1)
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: moe_layer_freq %lld (the "
                          "DeepSeek-V3 code makes every layer from first_k_dense_replace on "
                          "MoE; only 1 is supported)", (long long)freq);
    return 0;
}

static int read_config(deepseek_v3 *m, const json_t *c, int64_t *n_layers, ms_err *err)
{
    const char *f = "config.json";
    int64_t kv_heads, e, k, g, tg;
    if (ms_json_int_in(c, f, "num_hidden_layers", 1, 4096, n_layers, err) ||
        ms_json_int_in(c, f, "hidden_size", 1, MS_CFG_MAX_DIM, &m->d, err) ||
        ms_json_int_in(c, f, "num_attention_heads", 1, 65536, &m->n_heads, err) ||
        ms_json_int_opt_in(c, f, "num_key_value_heads", 1, 65536, m->n_heads, &kv_heads, err) ||
        ms_json_int_opt_in(c, f, "q_lora_rank",
                           0, MS_CFG_MAX_DIM, 0, &m->q_lora, err) || /* null: q_proj */
        ms_json_int_in(c, f, "kv_lora_rank", 1, MS_CFG_MAX_DIM, &m->kv_lora, err) ||
        ms_json_int_in(c, f, "qk_nope_head_dim", 1, 65536, &m->nope, err) ||
        ms_json_int_in(c, f, "qk_rope_head_dim", 2, 65536, &m->rope_dim, err) ||
        ms_json_int_in(c, f, "v_head_dim", 1, 65536, &m->v, err) ||
        ms_json_int_in(c, f, "vocab_size", 1, MS_CFG_MAX_VOCAB, &m->vocab, err) ||
        ms_json_int_in(c, f, "intermediate_size", 1, MS_CFG_MAX_DIM, &m->d_ff, err) ||
        ms_json_int_in(c, f, "moe_intermediate_size", 1, MS_CFG_MAX_DIM, &m->d_ff_expert, err) ||
        ms_json_int_in(c, f, "n_routed_experts", 1, MS_ROUTER_MAX_EXPERTS, &e, err) ||
        ms_json_int_opt_in(c, f, "n_shared_experts",
                           0, MS_ROUTER_MAX_EXPERTS, 0, &m->n_shared, err) ||
        ms_json_int_in(c, f, "num_experts_per_tok", 1, MS_ROUTER_MAX_EXPERTS, &k, err) ||
        ms_json_int_opt_in(c, f, "n_group", 1, MS_ROUTER_MAX_GROUPS, 1, &g, err) ||
        ms_json_int_opt_in(c, f, "topk_group", 1, MS_ROUTER_MAX_GROUPS, 1, &tg, err) ||
        ms_json_int_opt_in(c, f, "first_k_dense_replace", 0, 4096, 0, &m->first_dense, err) ||
        ms_json_int_opt_in(c, f, "num_nextn_predict_layers", 0, 4096, 0, &m->n_mtp, err) ||
        ms_json_bool_opt(c, f, "norm_topk_prob", 1, &m->norm_topk, err) ||
        ms_json_num(c, f, "routed_scaling_factor", &m->rsf, err) ||
        ms_json_range(f, "routed_scaling_factor", m->rsf, 0, 1e4, 1, err) ||
        ms_json_bool_opt(c, f, "tie_word_embeddings", 0, &m->tie, err) ||
        ms_json_bool_opt(c, f, "attention_bias", 0, &m->attn_bias, err) ||
        ms_json_bool_opt(c, f, "rope_interleave", 1, &m->interleave, err) ||
        ms_json_num(c, f, "rms_norm_eps", &m->eps, err) ||
        ms_json_range(f, "rms_norm_eps", m->eps, 0, 0.5, 1, err) ||
        ms_json_int_in(c, f, "max_position_embeddings", 1, MS_CFG_MAX_POS, &m->base.max_ctx, err) ||
        check_fixed(c, err))
        return -1;
    m->n_experts = (int)e;
    m->top_k = (int)k;
    m->n_group = (int)g;
    m->topk_group = (int)tg;
    if (kv_heads != m->n_heads)
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: num_key_value_heads %lld != "
                          "num_attention_heads %lld (MLA has one latent for all heads)",
                          (long long)kv_heads, (long long)m->n_heads);
    /* every dimension has its range above; these are the relations */
    if (ms_json_check_multiple(f, "qk_rope_head_dim", m->rope_dim, 2, "RoPE turns pairs", err) ||
        ms_json_check_multiple(f, "n_routed_experts", e, g, "n_group: groups of equal size",
                               err) ||
        ms_json_check_int(f, "topk_group", tg, 1, g, err) ||
        ms_json_check_int(f, "num_experts_per_tok", k, 1, tg * (e / g), err) ||
        ms_json_check_int(f, "first_k_dense_replace", m->first_dense, 0, *n_layers, err))
        return -1;
    return 0;
}

/* Layer l's graph: MLA; dense MLP below first_k_dense_replace, else the
 * sigmoid group router, routed experts and the shared experts. */
static void describe_layer(deepseek_v3 *m, int l)
{
    ms_decoder_layer *L = &m->dec.layers[l];
    ms_mla *a = &L->mla;
    L->use_mla = 1;
    *a = (ms_mla){.n_heads = (int)m->n_heads, .q_lora = (int)m->q_lora,
                  .kv_lora = (int)m->kv_lora, .nope = (int)m->nope, .rope = (int)m->rope_dim,
                  .v = (int)m->v, .d_model = m->d, .lora_eps = 1e-6f, .q_scale = 1.0f,
                  .kv_scale = 1.0f, .rope_tab = &m->rope};
    a->scale = (float)(1.0 / sqrt((double)(m->nope + m->rope_dim)) * m->rc.scale_mult);
    L->is_moe = l >= m->first_dense;
    L->router = (ms_router){.kind = MS_ROUTER_SIGMOID_GROUP, .n_experts = m->n_experts,
                            .top_k = m->top_k, .norm_topk = m->norm_topk,
                            .n_group = m->n_group, .topk_group = m->topk_group,
                            .routed_scale = (float)m->rsf};
    L->moe = (ms_moe){.layer = l, .n_experts = m->n_experts, .top_k = m->top_k,
                      .d_model = m->d, .d_ff = m->d_ff_expert, .ffn = MS_FFN_SWIGLU};
    L->shared = (ms_mlp){.d_model = m->d, .d_ff = m->n_shared * m->d_ff_expert};
    L->mlp = (ms_mlp){.d_model = m->d, .d_ff = m->d_ff};
    m->base.kv_row[l] = ms_mla_kv_row(a);
    m->base.kv_group[l] = ms_mla_kv_group(a);
    m->base.kv_plane[l] = ms_mla_kv_row(a);
}

static void bind_layer(deepseek_v3 *m, ms_binder *b, int l)
{
    ms_decoder_layer *L = &m->dec.layers[l];
    char p[160], n[256];
    float *v;
    snprintf(p, sizeof p, "model.layers.%d", l);
    snprintf(n, sizeof n, "%s.input_layernorm.weight", p);
    ms_bind_vector(b, MS_ROLE_DENSE, n, m->d, &v);
    L->attn_norm = v;
    snprintf(n, sizeof n, "%s.post_attention_layernorm.weight", p);
    ms_bind_vector(b, MS_ROLE_DENSE, n, m->d, &v);
    L->ffn_norm = v;
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
    ms_moe_bind_experts(b, m->base.experts, l, n, m->n_experts, m->d, m->d_ff_expert);
}

/* Binds everything and, for a runnable model, prepares the absorbed MLA. */
static int bind_model(deepseek_v3 *m, ms_binder *b, const ms_model_opts *opts, ms_err *err)
{
    int n_layers = m->base.n_layers;
    char n[64];
    ms_bind_plain_linear(b, MS_ROLE_EMBED, "model.embed_tokens.weight", m->vocab, m->d,
                         MS_DTYPE_BF16, &m->dec.embed);
    for (int l = 0; l < n_layers; l++) {
        describe_layer(m, l);
        bind_layer(m, b, l);
    }
    float *v;
    ms_bind_vector(b, MS_ROLE_DENSE, "model.norm.weight", m->d, &v);
    m->dec.final_norm = v;
    if (m->tie)
        m->dec.lm_head = m->dec.embed;
    else
        ms_bind_plain_linear(b, MS_ROLE_DENSE, "lm_head.weight", m->vocab, m->d, MS_DTYPE_BF16,
                             &m->dec.lm_head);
    for (int64_t i = 0; i < m->n_mtp; i++) { /* the MTP layers: not the main model */
        snprintf(n, sizeof n, "model.layers.%lld.", (long long)(n_layers + i));
        ms_bind_ignore_prefix(b, n);
    }
    if (opts->check_only || b->n_problems)
        return 0;
    for (int l = 0; l < n_layers; l++)
        if (ms_mla_prepare(&m->dec.layers[l].mla, &m->base.arena, err))
            return -1;
    return ms_decoder_alloc_scratch(&m->dec, err);
}

static int deepseek_v3_open(const ms_checkpoint *ck, ms_binder *b, const ms_model_opts *opts,
                            ms_model **out, ms_err *err)
{
    int64_t n_layers;
    deepseek_v3 tmp = {0};
    *out = NULL;
    if (read_config(&tmp, ck->config, &n_layers, err))
        return -1;
    deepseek_v3 *m = ms_model_create(&tmp, sizeof *m, &ms_family_deepseek_v3, (int)n_layers, tmp.d, tmp.vocab,
                            tmp.n_experts, tmp.top_k, opts, b, err);
    if (!m)
        return -1;
    if (ms_decoder_init(&m->dec, &m->base, m->d, m->vocab, (float)m->eps, err) ||
        ms_mla_read_rope(ck->config, (int)m->rope_dim, m->interleave, &m->rope, &m->rc, err) ||
        ms_expert_store_open((int)n_layers, m->n_experts, 3, &m->base.experts, err) ||
        bind_model(m, b, opts, err)) {
        ms_model_free(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}

static void deepseek_v3_describe(const ms_model *mb, FILE *out)
{
    const deepseek_v3 *m = (const deepseek_v3 *)mb;
    fprintf(out, "  hidden_size: %lld\n  num_hidden_layers: %d (first_k_dense_replace %lld, "
            "MTP layers ignored: %lld)\n", (long long)m->d, mb->n_layers,
            (long long)m->first_dense, (long long)m->n_mtp);
    ms_mla_describe(&m->dec.layers[0].mla, &m->rc, out);
    fprintf(out, "  intermediate_size: %lld\n  moe_intermediate_size: %lld\n",
            (long long)m->d_ff, (long long)m->d_ff_expert);
    fprintf(out, "  n_routed_experts: %d\n  n_shared_experts: %lld\n  num_experts_per_tok: %d "
            "(n_group %d, topk_group %d, sigmoid, norm_topk_prob %s, routed_scaling_factor "
            "%g)\n", m->n_experts, (long long)m->n_shared, m->top_k, m->n_group, m->topk_group,
            m->norm_topk ? "true" : "false", m->rsf);
    fprintf(out, "  vocab_size: %lld\n  max_position_embeddings: %lld\n  rms_norm_eps: %g\n",
            (long long)m->vocab, (long long)mb->max_ctx, m->eps);
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

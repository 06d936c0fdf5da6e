/* gpt_oss: openai/gpt-oss-20b and -120b (same code; every size from config).
 *
 * Upstream: openai/gpt-oss gpt_oss/torch/model.py + weights.py, and
 * transformers models/gpt_oss/modeling_gpt_oss.py. Details that cause bugs:
 *  - attention sinks: one learned logit per q head, added to the softmax
 *    denominator only (its column is dropped after the softmax);
 *  - sliding window per `layer_types` (default: even layers), a query at p
 *    sees keys p-window+1..p;
 *  - YaRN with `truncate: false`: the correction range is not rounded; the
 *    concentration 0.1*ln(factor)+1 multiplies cos and sin;
 *  - router: top-k of the raw logits (+bias), softmax over those k only;
 *  - experts: MXFP4, gate_up rows interleaved (2j gate, 2j+1 up); clipped
 *    SwiGLU with alpha 1.702 (a constant of the architecture, not in
 *    config), limit swiglu_limit, and (up + 1);
 *  - lm_head and the embedding stay in their stored precision (bf16): the
 *    quantisation exclusion list must be honoured (Picchio §0.10). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "models/family.h"
#include "models/decoder.h"
#include "models/ops.h"

#define GPT_OSS_SWIGLU_ALPHA 1.702f

typedef struct gpt_oss {
    ms_model base;
    /* hyper-parameters from config.json */
    int64_t d, n_heads, n_kv_heads, head_dim, d_ff, vocab;
    int n_experts, top_k;
    int64_t window;
    double rope_theta, eps, swiglu_limit;
    ms_yarn yarn;
    int use_yarn;
    ms_rope rope;
    ms_decoder dec;
} gpt_oss;

/* Reads the hyper-parameters; errors name the key. */
static int read_config(gpt_oss *m, const json_t *c, int64_t *n_layers, ms_err *err)
{
    const char *f = "config.json";
    int64_t e, k, tie;
    if (ms_json_int_in(c, f, "num_hidden_layers", 1, 4096, n_layers, err) ||
        ms_json_int_in(c, f, "hidden_size", 1, MS_CFG_MAX_DIM, &m->d, err) ||
        ms_json_int_in(c, f, "num_attention_heads", 1, 65536, &m->n_heads, err) ||
        ms_json_int_in(c, f, "num_key_value_heads", 1, 65536, &m->n_kv_heads, err) ||
        ms_json_int_in(c, f, "head_dim", 1, 65536, &m->head_dim, err) ||
        ms_json_int_in(c, f, "intermediate_size", 1, MS_CFG_MAX_DIM, &m->d_ff, err) ||
        ms_json_int_in(c, f, "vocab_size", 1, MS_CFG_MAX_VOCAB, &m->vocab, err) ||
        ms_json_int_in(c, f, "num_local_experts", 1, MS_ROUTER_MAX_EXPERTS, &e, err) ||
        ms_json_int_in(c, f, "sliding_window", 0, MS_CFG_MAX_POS, &m->window, err) ||
        ms_json_num(c, f, "rope_theta", &m->rope_theta, err) ||
        ms_json_range(f, "rope_theta", m->rope_theta, 0, 1e12, 1, err) ||
        ms_json_num(c, f, "rms_norm_eps", &m->eps, err) ||
        ms_json_range(f, "rms_norm_eps", m->eps, 0, 0.5, 1, err) ||
        ms_json_num_opt(c, f, "swiglu_limit", 7.0, &m->swiglu_limit, err) ||
        ms_json_range(f, "swiglu_limit", m->swiglu_limit, 0, 1e6, 1, err) ||
        ms_json_int_in(c, f, "max_position_embeddings", 1, MS_CFG_MAX_POS, &m->base.max_ctx, err))
        return -1;
    /* HF names it num_experts_per_tok; the original config experts_per_token */
    if (ms_json_int_either(c, f, "num_experts_per_tok", "experts_per_token", &k, err))
        return -1;
    int itie;
    if (ms_json_bool_opt(c, f, "tie_word_embeddings", 0, &itie, err))
        return -1;
    tie = itie;
    if (tie)
        return ms_err_set(err, MS_E_UNSUPPORTED,
                          "config.json: tie_word_embeddings is true; gpt_oss releases ship "
                          "a separate lm_head");
    m->n_experts = (int)e;
    m->top_k = (int)k;
    /* every dimension has its range above; these are the relations */
    if (ms_json_check_int(f, "num_experts_per_tok", k, 1, e, err) ||
        ms_json_check_multiple(f, "num_attention_heads", m->n_heads, m->n_kv_heads,
                               "num_key_value_heads: heads share KV heads in equal groups",
                               err))
        return -1;
    return 0;
}

static int read_rope(gpt_oss *m, const json_t *c, ms_err *err)
{
    const char *f = "config.json rope_scaling";
    const json_t *rs = json_object_get(c, "rope_scaling");
    if (!rs || json_is_null(rs))
        return ms_rope_init(&m->rope, (int)m->head_dim, m->rope_theta, MS_ROPE_HALF, err);
    const char *type;
    if (ms_json_str(rs, f, "rope_type", &type, err))
        return -1;
    if (strcmp(type, "yarn") != 0)
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: rope_type \"%s\" (gpt_oss uses yarn)", f,
                          type);
    ms_yarn *y = &m->yarn;
    if (ms_json_num(rs, f, "factor", &y->factor, err) ||
        ms_json_num_opt(rs, f, "beta_fast", 32.0, &y->beta_fast, err) ||
        ms_json_num_opt(rs, f, "beta_slow", 1.0, &y->beta_slow, err) ||
        ms_json_num(rs, f, "original_max_position_embeddings", &y->original_max_pos, err) ||
        ms_json_bool_opt(rs, f, "truncate", 1, &y->truncate, err) ||
        ms_yarn_check(y, f, err))
        return -1;
    y->attn_factor = ms_yarn_mscale(y->factor, 1.0);
    m->use_yarn = 1;
    return ms_rope_init_yarn(&m->rope, (int)m->head_dim, m->rope_theta, y, MS_ROPE_HALF, err);
}

/* Per-layer attention type from layer_types (HF default: even layers slide). */
static int layer_window(gpt_oss *m, const json_t *c, int l, int64_t *window, ms_err *err)
{
    const json_t *lt = json_object_get(c, "layer_types");
    if (!lt || json_is_null(lt)) {
        *window = l % 2 == 0 ? m->window : 0;
        return 0;
    }
    const char *s = json_string_value(json_array_get(lt, (size_t)l));
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)m->base.n_layers || !s)
        return ms_err_set(err, MS_E_FORMAT,
                          "config.json: layer_types must list %d strings", m->base.n_layers);
    if (strcmp(s, "sliding_attention") == 0)
        *window = m->window;
    else if (strcmp(s, "full_attention") == 0)
        *window = 0;
    else
        return ms_err_set(err, MS_E_FORMAT, "config.json: layer_types[%d] = \"%s\" "
                          "(expected sliding_attention or full_attention)", l, s);
    return 0;
}

static void bind_layer(gpt_oss *m, ms_binder *b, int l, ms_mat *experts, ms_span *spans)
{
    ms_decoder_layer *L = &m->dec.layers[l];
    char p[160], n[200];
    int64_t qd = m->n_heads * m->head_dim, kd = m->n_kv_heads * m->head_dim, d = m->d;
    int64_t E = m->n_experts, ff = m->d_ff;
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
    VEC(L->attn.bq, "self_attn.q_proj.bias", qd);
    VEC(L->attn.bk, "self_attn.k_proj.bias", kd);
    VEC(L->attn.bv, "self_attn.v_proj.bias", kd);
    VEC(L->attn.bo, "self_attn.o_proj.bias", d);
    VEC(L->attn.sinks, "self_attn.sinks", m->n_heads);
    LIN(L->router.w, "mlp.router", E, d);
    VEC(L->router.bias, "mlp.router.bias", E);

    /* experts: fused tensors [E][...] in MXFP4, biases [E][...] */
    char bl[200], sc[200];
    snprintf(bl, sizeof bl, "%s.mlp.experts.gate_up_proj_blocks", p);
    snprintf(sc, sizeof sc, "%s.mlp.experts.gate_up_proj_scales", p);
    int ok = ms_bind_mxfp4_experts(b, bl, sc, E, 2 * ff, d, experts, spans) == 0;
    snprintf(bl, sizeof bl, "%s.mlp.experts.down_proj_blocks", p);
    snprintf(sc, sizeof sc, "%s.mlp.experts.down_proj_scales", p);
    ok &= ms_bind_mxfp4_experts(b, bl, sc, E, d, ff, experts + E, spans + 2 * E) == 0;
    snprintf(n, sizeof n, "%s.mlp.experts.gate_up_proj_bias", p);
    ms_bind_matrix_f32(b, MS_ROLE_EXPERT, n, E, 2 * ff, &v);
    L->moe.gate_up_bias = v;
    snprintf(n, sizeof n, "%s.mlp.experts.down_proj_bias", p);
    ms_bind_matrix_f32(b, MS_ROLE_EXPERT, n, E, d, &v);
    L->moe.down_bias = v;
#undef VEC
#undef LIN
    for (int64_t e = 0; ok && e < E; e++) {
        ms_mat mats[2] = {experts[e], experts[E + e]};
        ms_span sp[4] = {spans[2 * e], spans[2 * e + 1], spans[2 * E + 2 * e],
                         spans[2 * E + 2 * e + 1]};
        ms_expert_store_set(m->base.experts, l, (int)e, mats, sp);
    }
}

/* Layer l's graph: GQA with biases, sinks and its window; the gpt_oss router;
 * MXFP4 experts with the clipped SwiGLU. */
static void describe_layer(gpt_oss *m, int l, int64_t window)
{
    ms_decoder_layer *L = &m->dec.layers[l];
    ms_gqa *a = &L->attn;
    a->n_heads = (int)m->n_heads;
    a->n_kv_heads = (int)m->n_kv_heads;
    a->head_dim = (int)m->head_dim;
    a->d_model = m->d;
    a->window = window;
    a->scale = (float)(1.0 / sqrt((double)m->head_dim));
    a->rope = &m->rope;
    L->is_moe = 1;
    L->router.kind = MS_ROUTER_TOPK_SOFTMAX;
    L->router.n_experts = m->n_experts;
    L->router.top_k = m->top_k;
    ms_moe *e = &L->moe;
    e->layer = l;
    e->n_experts = m->n_experts;
    e->top_k = m->top_k;
    e->d_model = m->d;
    e->d_ff = m->d_ff;
    e->ffn = MS_FFN_OAI_CLAMPED;
    e->alpha = GPT_OSS_SWIGLU_ALPHA;
    e->limit = (float)m->swiglu_limit;
    m->base.kv_row[l] = ms_gqa_kv_row(a);
    m->base.kv_group[l] = a->head_dim;
    m->base.kv_plane[l] = a->head_dim;
    m->base.kv_window[l] = window;
}

static int gpt_oss_open(const ms_checkpoint *ck, ms_binder *b, const ms_model_opts *opts,
                        ms_model **out, ms_err *err)
{
    int64_t n_layers;
    gpt_oss tmp = {0};
    *out = NULL;
    if (read_config(&tmp, ck->config, &n_layers, err))
        return -1;
    gpt_oss *m = ms_model_create(&tmp, sizeof *m, &ms_family_gpt_oss, (int)n_layers, tmp.d, tmp.vocab,
                            tmp.n_experts, tmp.top_k, opts, b, err);
    if (!m)
        return -1;
    int64_t E = m->n_experts;
    ms_mat *ex = NULL;
    ms_span *sp = NULL;
    if (ms_decoder_init(&m->dec, &m->base, m->d, m->vocab, (float)m->eps, err) ||
        read_rope(m, ck->config, err) ||
        ms_expert_store_open((int)n_layers, (int)E, 2, &m->base.experts, err))
        goto fail;
    ex = ms_malloc(sizeof *ex * (size_t)(2 * E), "expert views", err);
    sp = ms_malloc(sizeof *sp * (size_t)(4 * E), "expert spans", err);
    if (!ex || !sp)
        goto fail;
    ms_bind_linear(b, MS_ROLE_EMBED, "model.embed_tokens", m->vocab, m->d, &m->dec.embed, NULL);
    for (int l = 0; l < (int)n_layers; l++) {
        int64_t window = 0;
        if (layer_window(m, ck->config, l, &window, err))
            goto fail;
        describe_layer(m, l, window);
        bind_layer(m, b, l, ex, sp);
    }
    float *v;
    ms_bind_vector(b, MS_ROLE_DENSE, "model.norm.weight", m->d, &v);
    m->dec.final_norm = v;
    ms_bind_linear(b, MS_ROLE_DENSE, "lm_head", m->vocab, m->d, &m->dec.lm_head, NULL);
    free(ex);
    free(sp);
    ex = NULL;
    sp = NULL;
    if (!opts->check_only && ms_decoder_alloc_scratch(&m->dec, err))
        goto fail;
    *out = &m->base;
    return 0;
fail:
    free(ex);
    free(sp);
    ms_model_free(&m->base);
    return -1;
}

static void gpt_oss_describe(const ms_model *mb, FILE *out)
{
    const gpt_oss *m = (const gpt_oss *)mb;
    fprintf(out, "  hidden_size: %lld\n  num_hidden_layers: %d\n", (long long)m->d,
            mb->n_layers);
    fprintf(out, "  num_attention_heads: %lld\n  num_key_value_heads: %lld\n  head_dim: %lld\n",
            (long long)m->n_heads, (long long)m->n_kv_heads, (long long)m->head_dim);
    fprintf(out, "  intermediate_size: %lld\n  num_local_experts: %d\n  experts_per_token: %d\n",
            (long long)m->d_ff, m->n_experts, m->top_k);
    fprintf(out, "  vocab_size: %lld\n  max_position_embeddings: %lld\n", (long long)m->vocab,
            (long long)mb->max_ctx);
    fprintf(out, "  sliding_window: %lld\n  layer_types:", (long long)m->window);
    for (int l = 0; l < mb->n_layers; l++)
        fprintf(out, " %s", mb->kv_window[l] ? "sliding" : "full");
    fprintf(out, "\n  rope_theta: %g\n  rms_norm_eps: %g\n  swiglu_limit: %g (alpha %g)\n",
            m->rope_theta, m->eps, m->swiglu_limit, (double)GPT_OSS_SWIGLU_ALPHA);
    if (m->use_yarn)
        fprintf(out, "  rope_scaling: yarn factor %g beta_fast %g beta_slow %g "
                "original_max_position_embeddings %g truncate %s (attention factor %.6f)\n",
                m->yarn.factor, m->yarn.beta_fast, m->yarn.beta_slow, m->yarn.original_max_pos,
                m->yarn.truncate ? "true" : "false", m->yarn.attn_factor);
}

static int gpt_oss_forward(ms_model *mb, const ms_fwd *f, ms_err *err)
{
    return ms_decoder_forward(&((gpt_oss *)mb)->dec, f, err);
}

const ms_family ms_family_gpt_oss = {
    .model_type = "gpt_oss",
    .fp8_scale_dtype = MS_DTYPE_F32,
    .open = gpt_oss_open,
    .close = ms_model_free, /* nothing beyond the arena and the shared tables */
    .describe = gpt_oss_describe,
    .forward = gpt_oss_forward,
};

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
#include "models/config.h"
#include "models/decoder.h"
#include "models/ops.h"

#define GPT_OSS_SWIGLU_ALPHA 1.702f

typedef struct gpt_oss {
    ms_model base;
    /* hyper-parameters from config.json */
    int64_t n_layers, d, n_heads, n_kv_heads, head_dim, d_ff, vocab, n_experts, top_k;
    int64_t window, max_pos;
    int tie;
    double rope_theta, eps, swiglu_limit;
    const json_t *layer_types;   /* borrowed from the config; NULL: even layers slide */
    ms_yarn yarn;
    int use_yarn;
    ms_rope rope;
    ms_decoder dec;
} gpt_oss;

#define K(key, type, req, def, lo, hi, field) {key, type, req, def, lo, hi, 0, offsetof(gpt_oss, field)}
static const ms_cfg_key keys[] = {
    K("num_hidden_layers", MS_KEY_INT, 1, 0, 1, 4096, n_layers),
    K("hidden_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d),
    K("num_attention_heads", MS_KEY_INT, 1, 0, 1, 65536, n_heads),
    K("num_key_value_heads", MS_KEY_INT, 1, 0, 1, 65536, n_kv_heads),
    K("head_dim", MS_KEY_INT, 1, 0, 1, 65536, head_dim),
    K("intermediate_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d_ff),
    K("vocab_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_VOCAB, vocab),
    K("num_local_experts", MS_KEY_INT, 1, 0, 1, MS_ROUTER_MAX_EXPERTS, n_experts),
    K("sliding_window", MS_KEY_INT, 1, 0, 0, MS_CFG_MAX_POS, window),
    K("max_position_embeddings", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_POS, max_pos),
    K("tie_word_embeddings", MS_KEY_BOOL, 0, 0, 0, 1, tie),
    {"rope_theta", MS_KEY_NUM, 1, 0, 0, 1e12, 1, offsetof(gpt_oss, rope_theta)},
    {"rms_norm_eps", MS_KEY_NUM, 1, 0, 0, 0.5, 1, offsetof(gpt_oss, eps)},
    {"swiglu_limit", MS_KEY_NUM, 0, 7.0, 0, 1e6, 1, offsetof(gpt_oss, swiglu_limit)},
};
#undef K
#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))

/* Reads the hyper-parameters; errors name the key. */
static int read_config(gpt_oss *m, const json_t *c, ms_err *err)
{
    const char *f = "config.json";
    if (ms_cfg_read(c, f, keys, N_KEYS, m, err))
        return -1;
    /* HF names it num_experts_per_tok; the original config experts_per_token */
    if (ms_json_int_either(c, f, "num_experts_per_tok", "experts_per_token", &m->top_k, err))
        return -1;
    if (m->tie)
        return ms_err_set(err, MS_E_UNSUPPORTED,
                          "config.json: tie_word_embeddings is true; gpt_oss releases ship "
                          "a separate lm_head");
    /* every dimension has its range above; these are the relations */
    if (ms_json_check_int(f, "num_experts_per_tok", m->top_k, 1, m->n_experts, err) ||
        ms_json_check_multiple(f, "num_attention_heads", m->n_heads, m->n_kv_heads,
                               "num_key_value_heads: heads share KV heads in equal groups",
                               err))
        return -1;
    /* per-layer attention type (HF default when absent: even layers slide) */
    const json_t *lt = json_object_get(c, "layer_types");
    m->layer_types = lt && !json_is_null(lt) ? lt : NULL;
    if (m->layer_types && (!json_is_array(lt) || json_array_size(lt) != (size_t)m->n_layers))
        return ms_err_set(err, MS_E_FORMAT, "config.json: layer_types must list %lld strings",
                          (long long)m->n_layers);
    for (size_t l = 0; m->layer_types && l < json_array_size(lt); l++) {
        const char *s = json_string_value(json_array_get(lt, l));
        if (!s || (strcmp(s, "sliding_attention") && strcmp(s, "full_attention")))
            return ms_err_set(err, MS_E_FORMAT, "config.json: layer_types[%zu] = \"%s\" "
                              "(expected sliding_attention or full_attention)", l,
                              s ? s : "not a string");
    }
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

/* Layer l: GQA with biases, sinks and its window; the gpt_oss router;
 * MXFP4 experts with the clipped SwiGLU. */
static void layer(void *fam, ms_binder *b, int l)
{
    gpt_oss *m = fam;
    ms_decoder_layer *L = &m->dec.layers[l];
    ms_gqa *a = &L->attn;
    const char *type = json_string_value(json_array_get(m->layer_types, (size_t)l));
    int64_t window = (type ? !strcmp(type, "sliding_attention") : l % 2 == 0) ? m->window : 0;
    *a = (ms_gqa){.n_heads = (int)m->n_heads, .n_kv_heads = (int)m->n_kv_heads,
                  .head_dim = (int)m->head_dim, .d_model = m->d, .window = window,
                  .scale = (float)(1.0 / sqrt((double)m->head_dim)), .rope = &m->rope};
    L->is_moe = 1;
    L->router = (ms_router){.kind = MS_ROUTER_TOPK_SOFTMAX, .n_experts = (int)m->n_experts,
                            .top_k = (int)m->top_k};
    L->moe = (ms_moe){.layer = l, .n_experts = (int)m->n_experts, .top_k = (int)m->top_k,
                      .d_model = m->d, .d_ff = m->d_ff, .ffn = MS_FFN_OAI_CLAMPED,
                      .alpha = GPT_OSS_SWIGLU_ALPHA, .limit = (float)m->swiglu_limit};
    ms_gqa_describe_kv(a, &m->base, l);
    m->base.kv_window[l] = window;

    char p[64], n[128];
    float *v;
    snprintf(p, sizeof p, "model.layers.%d", l);
    ms_decoder_bind_norms(L, b, p, m->d);
    snprintf(n, sizeof n, "%s.self_attn", p);
    ms_gqa_bind(a, b, n, 1, 1, 0);
    snprintf(n, sizeof n, "%s.self_attn.sinks", p);
    ms_bind_vector(b, MS_ROLE_DENSE, n, m->n_heads, &v);
    a->sinks = v;
    snprintf(n, sizeof n, "%s.mlp.router", p);
    ms_bind_linear(b, MS_ROLE_DENSE, n, m->n_experts, m->d, &L->router.w, NULL);
    snprintf(n, sizeof n, "%s.mlp.router.bias", p);
    ms_bind_vector(b, MS_ROLE_DENSE, n, m->n_experts, &v);
    L->router.bias = v;
    snprintf(n, sizeof n, "%s.mlp.experts", p);
    ms_moe_bind_mxfp4(&L->moe, b, m->base.experts, n);
}

static int gpt_oss_open(const ms_checkpoint *ck, ms_binder *b, const ms_model_opts *opts,
                        ms_model **out, ms_err *err)
{
    gpt_oss tmp = {0};
    *out = NULL;
    if (read_config(&tmp, ck->config, err))
        return -1;
    gpt_oss *m = ms_model_create(&(ms_model_spec){.tmp = &tmp, .size = sizeof *m,
                                    .family = &ms_family_gpt_oss, .n_layers = (int)tmp.n_layers,
                                    .n_experts = (int)tmp.n_experts, .n_used = (int)tmp.top_k,
                                    .d_model = tmp.d, .vocab = tmp.vocab,
                                    .max_ctx = tmp.max_pos},
                                 opts, b, err);
    if (!m)
        return -1;
    if (ms_decoder_init(&m->dec, &m->base, m->d, m->vocab, (float)m->eps, err) ||
        read_rope(m, ck->config, err) ||
        ms_expert_store_open((int)m->n_layers, (int)m->n_experts, 2, &m->base.experts, err) ||
        ms_decoder_bind(&m->dec, b, "model", 0, 0, layer, NULL, m, opts, err)) {
        ms_model_free(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}

static void gpt_oss_describe(const ms_model *mb, FILE *out)
{
    const gpt_oss *m = (const gpt_oss *)mb;
    ms_cfg_describe(keys, N_KEYS, mb, out);
    fprintf(out, "  experts_per_token: %lld\n  layer_types:", (long long)m->top_k);
    for (int l = 0; l < mb->n_layers; l++)
        fprintf(out, " %s", mb->kv_window[l] ? "sliding" : "full");
    fprintf(out, "\n  swiglu alpha: %g\n", (double)GPT_OSS_SWIGLU_ALPHA);
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

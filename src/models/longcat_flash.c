/* longcat_flash: meituan-longcat/LongCat-Flash-Chat (bf16), -Chat-FP8 and
 * -Thinking (same code; every size from config.json).
 *
 * Upstream: transformers models/longcat_flash/modeling_longcat_flash.py and
 * configuration_longcat_flash.py (vLLM/sglang longcat_flash.py for the FP8
 * layout and the mla_scale_* flags). Details that cause bugs (dragon.c §4,
 * §6):
 *  - a layer is TWO sub-blocks, each MLA attention + dense MLP, and ONE
 *    shortcut MoE (ScMoE): the MoE reads sub-block 0's post-attention-normed
 *    state and its output is added at the END of sub-block 1, after
 *    sub-block 1's MLP;
 *  - mla_scale_q_lora = sqrt(hidden / q_lora_rank) multiplies q (nope AND
 *    rope parts); mla_scale_kv_lora = sqrt(hidden / kv_lora_rank) multiplies
 *    the latent AFTER kv_a_layernorm (k_rope is not scaled) -- 2 and 2*sqrt(3)
 *    in the release, derived from the dims here, never hard-coded; applied
 *    unless the config's flag is present and false (vLLM/sglang);
 *  - interleaved-pair RoPE on the 64 rope dims (transformers' head_dim, which
 *    must equal qk_rope_head_dim), k_rope shared by every head; softmax scale
 *    (nope + rope)^-0.5 (times the YaRN mscale^2 only with rope_scaling);
 *    q_a_layernorm / kv_a_layernorm eps 1e-6 as transformers;
 *  - router in float32 over n_routed_experts + zero_expert_num candidates:
 *    softmax, top-k (moe_topk) of probability + e_score_correction_bias
 *    (selection only), weights = probability * routed_scaling_factor (6), no
 *    renormalisation; the router and the correction bias stay F32 in the
 *    FP8 release;
 *  - ids >= n_routed_experts are zero-computation identity experts: output =
 *    input * weight; they have no weights and never go through the store;
 *  - the KV cache holds, per layer, [latent | k_rope] of both sub-blocks;
 *  - NEVER prepend BOS (id 1): it poisons layer 0 (dragon.c §6); the engine
 *    feeds ids as given and adds no BOS;
 *  - the MTP module (model.mtp.*) is not part of the main model: ignored. */
#include <math.h>
#include <string.h>

#include "base/json.h"
#include "models/config.h"
#include "models/decoder.h"
#include "models/mla.h"
#include "models/moe.h"
#include "models/ops.h"

typedef struct lc_layer {
    const float *in_norm[2], *post_norm[2]; /* [d] input_layernorm.i, post_attention_layernorm.i */
    ms_mla attn[2];
    ms_mlp mlp[2];                          /* mlps.i, ffn_hidden_size */
    ms_router router;
    ms_moe moe;                             /* n_routed stored + zero_expert_num identity */
} lc_layer;

typedef struct longcat {
    ms_model base;
    /* hyper-parameters from config.json */
    int64_t n_layers, d, n_heads, n_kv, q_lora, kv_lora, nope, rope_dim, v, qk, rot, d_ff,
        d_ff_expert, vocab, max_pos;
    int64_t n_experts, n_zero, top_k;
    int router_bias, attn_bias, tie, scale_q, scale_kv;
    double eps, rsf;
    ms_mla_rope_cfg rc;
    ms_rope rope;
    ms_decoder dec;                         /* embedding, layer loop, head */
    lc_layer *layers;                       /* [n_layers] */
    /* scratch for max_batch positions (the residual is the decoder's) */
    float *xn, *h, *tmp, *sc, *rlogits, *topw, *work, *mwork;
    int32_t *topi;
} longcat;

static const ms_cfg_fixed fixed[] = {
    {"hidden_act", "silu"}, {"zero_expert_type", "identity"}, {"attention_method", "MLA"},
};

#define K(key, type, req, def, lo, hi, field) {key, type, req, def, lo, hi, 0, offsetof(longcat, field)}
#define DERIVED(key, field) {key, MS_KEY_INT, 0, 0, 0, 65536, 1, offsetof(longcat, field)}
static const ms_cfg_key keys[] = {
    K("num_layers", MS_KEY_INT, 1, 0, 1, 4096, n_layers),
    K("hidden_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d),
    K("num_attention_heads", MS_KEY_INT, 1, 0, 1, 65536, n_heads),
    DERIVED("num_key_value_heads", n_kv),              /* 0: the heads */
    K("q_lora_rank", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, q_lora),
    K("kv_lora_rank", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, kv_lora),
    K("qk_nope_head_dim", MS_KEY_INT, 1, 0, 1, 65536, nope),
    K("qk_rope_head_dim", MS_KEY_INT, 1, 0, 2, 65536, rope_dim),
    K("v_head_dim", MS_KEY_INT, 1, 0, 1, 65536, v),
    DERIVED("qk_head_dim", qk),                        /* 0: nope + rope */
    K("head_dim", MS_KEY_INT, 0, 64, 1, 65536, rot),   /* transformers' rotary dim */
    K("vocab_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_VOCAB, vocab),
    K("expert_ffn_hidden_size", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_DIM, d_ff_expert),
    K("n_routed_experts", MS_KEY_INT, 1, 0, 1, MS_ROUTER_MAX_EXPERTS, n_experts),
    K("zero_expert_num", MS_KEY_INT, 0, 0, 0, MS_ROUTER_MAX_EXPERTS, n_zero),
    K("max_position_embeddings", MS_KEY_INT, 1, 0, 1, MS_CFG_MAX_POS, max_pos),
    K("router_bias", MS_KEY_BOOL, 0, 0, 0, 1, router_bias),
    K("attention_bias", MS_KEY_BOOL, 0, 0, 0, 1, attn_bias),
    K("tie_word_embeddings", MS_KEY_BOOL, 0, 0, 0, 1, tie),
    K("mla_scale_q_lora", MS_KEY_BOOL, 0, 1, 0, 1, scale_q),
    K("mla_scale_kv_lora", MS_KEY_BOOL, 0, 1, 0, 1, scale_kv),
    {"routed_scaling_factor", MS_KEY_NUM, 1, 0, 0, 1e4, 1, offsetof(longcat, rsf)},
    {"rms_norm_eps", MS_KEY_NUM, 1, 0, 0, 0.5, 1, offsetof(longcat, eps)},
};
#undef K
#undef DERIVED
#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))

static int read_config(longcat *m, const json_t *c, ms_err *err)
{
    const char *f = "config.json";
    const char *ffkey = json_object_get(c, "ffn_hidden_size") ? "ffn_hidden_size"
                                                               : "intermediate_size";
    if (ms_cfg_read(c, f, keys, N_KEYS, m, err) ||
        ms_json_int_in(c, f, ffkey, 1, MS_CFG_MAX_DIM, &m->d_ff, err) ||
        ms_json_int_either(c, f, "moe_topk", "num_experts_per_tok", &m->top_k, err) ||
        ms_cfg_check_fixed(c, f, "longcat_flash", fixed, 3, err))
        return -1;
    int64_t kv_heads = m->n_kv ? m->n_kv : m->n_heads, qk = m->qk ? m->qk : m->nope + m->rope_dim;
    if (kv_heads != m->n_heads || qk != m->nope + m->rope_dim || m->rot != m->rope_dim)
        return ms_err_set(err, MS_E_UNSUPPORTED, "config.json: num_key_value_heads %lld, "
                          "qk_head_dim %lld, head_dim %lld: longcat_flash needs num_attention_"
                          "heads %lld, qk_nope + qk_rope %lld and qk_rope_head_dim %lld",
                          (long long)kv_heads, (long long)qk, (long long)m->rot,
                          (long long)m->n_heads, (long long)(m->nope + m->rope_dim),
                          (long long)m->rope_dim);
    /* every dimension has its range above; these are the relations */
    if (ms_json_check_multiple(f, "qk_rope_head_dim", m->rope_dim, 2, "RoPE turns pairs", err) ||
        ms_json_check_int(f, "zero_expert_num", m->n_zero, 0,
                          MS_ROUTER_MAX_EXPERTS - m->n_experts, err) ||
        ms_json_check_int(f, "moe_topk", m->top_k, 1, m->n_experts + m->n_zero, err))
        return -1;
    return 0;
}

/* Layer l's graph: two MLA sub-blocks (the LoRA scales derived from the
 * dims), two dense MLPs, the softmax router over real + zero experts. */
static void describe_layer(longcat *m, int l)
{
    lc_layer *L = &m->layers[l];
    double sq = m->scale_q ? sqrt((double)m->d / (double)m->q_lora) : 1.0;
    double skv = m->scale_kv ? sqrt((double)m->d / (double)m->kv_lora) : 1.0;
    for (int i = 0; i < 2; i++) {
        ms_mla *a = &L->attn[i];
        *a = (ms_mla){.n_heads = (int)m->n_heads, .q_lora = (int)m->q_lora,
                      .kv_lora = (int)m->kv_lora, .nope = (int)m->nope,
                      .rope = (int)m->rope_dim, .v = (int)m->v, .d_model = m->d,
                      .lora_eps = 1e-6f, .q_scale = (float)sq, .kv_scale = (float)skv,
                      .rope_tab = &m->rope};
        a->scale = (float)(1.0 / sqrt((double)(m->nope + m->rope_dim)) * m->rc.scale_mult);
        a->kv_off = i * ms_mla_kv_row(a);
        L->mlp[i] = (ms_mlp){.d_model = m->d, .d_ff = m->d_ff};
    }
    L->router = (ms_router){.kind = MS_ROUTER_SOFTMAX_BIAS,
                            .n_experts = (int)(m->n_experts + m->n_zero), .top_k = (int)m->top_k,
                            .routed_scale = (float)m->rsf};
    L->moe = (ms_moe){.layer = l, .n_experts = (int)m->n_experts, .n_identity = (int)m->n_zero,
                      .top_k = (int)m->top_k, .d_model = m->d, .d_ff = m->d_ff_expert,
                      .ffn = MS_FFN_SWIGLU};
    m->base.kv_row[l] = 2 * ms_mla_kv_row(&L->attn[0]);
    m->base.kv_group[l] = ms_mla_kv_group(&L->attn[0]);
    m->base.kv_plane[l] = ms_mla_kv_row(&L->attn[0]);
}

static void bind_layer(longcat *m, ms_binder *b, int l)
{
    lc_layer *L = &m->layers[l];
    int64_t E = m->n_experts + m->n_zero;
    char p[160], n[256];
    float *v;
    snprintf(p, sizeof p, "model.layers.%d", l);
    for (int i = 0; i < 2; i++) {
        snprintf(n, sizeof n, "%s.input_layernorm.%d.weight", p, i);
        ms_bind_vector(b, MS_ROLE_DENSE, n, m->d, &v);
        L->in_norm[i] = v;
        snprintf(n, sizeof n, "%s.post_attention_layernorm.%d.weight", p, i);
        ms_bind_vector(b, MS_ROLE_DENSE, n, m->d, &v);
        L->post_norm[i] = v;
        snprintf(n, sizeof n, "%s.self_attn.%d", p, i);
        ms_mla_bind(&L->attn[i], b, n, m->attn_bias);
        snprintf(n, sizeof n, "%s.mlps.%d", p, i);
        ms_mlp_bind(&L->mlp[i], b, n, MS_ROLE_DENSE, NULL);
    }
    snprintf(n, sizeof n, "%s.mlp.router.classifier.weight", p);
    ms_bind_plain_linear(b, MS_ROLE_DENSE, n, E, m->d, MS_DTYPE_F32, &L->router.w);
    if (m->router_bias) {
        snprintf(n, sizeof n, "%s.mlp.router.classifier.bias", p);
        ms_bind_plain_vector(b, MS_ROLE_DENSE, n, E, MS_DTYPE_F32, &v);
        L->router.bias = v;
    }
    snprintf(n, sizeof n, "%s.mlp.router.e_score_correction_bias", p);
    ms_bind_plain_vector(b, MS_ROLE_DENSE, n, E, MS_DTYPE_F32, &v);
    L->router.choice_bias = v;
    snprintf(n, sizeof n, "%s.mlp.experts", p); /* the zero experts have no weights */
    ms_moe_bind_experts(b, m->base.experts, l, n, (int)m->n_experts, m->d, m->d_ff_expert);
}

static int alloc_scratch(longcat *m, ms_err *err)
{
    int64_t B = m->base.max_batch, d = m->d, E = m->n_experts + m->n_zero, K = m->top_k;
    int64_t work = ms_mlp_scratch(m->d_ff, B), moe = ms_moe_scratch(&m->layers[0].moe, B);
    for (int l = m->base.layer0; l < m->base.layer1; l++) /* pads of W_UK^T: each kv_b's format */
        for (int i = 0; i < 2; i++) {
            int64_t a = ms_mla_scratch(&m->layers[l].attn[i], B);
            work = a > work ? a : work;
        }
    moe = moe > m->n_experts ? moe : m->n_experts; /* also the prefetch's id list */
    struct { void **p; int64_t n; } bufs[] = {
        {(void **)&m->xn, B * d},        {(void **)&m->h, B * d},
        {(void **)&m->tmp, B * d},  {(void **)&m->sc, B * d},        {(void **)&m->rlogits, B * E},
        {(void **)&m->topw, B * K}, {(void **)&m->topi, B * K},      {(void **)&m->work, work},
        {(void **)&m->mwork, moe},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = ms_arena_alloc(&m->base.arena, (size_t)bufs[i].n * 4, "activations",
                                          err)))
            return -1;
    return 0;
}

static void layer_bind(void *fam, ms_binder *b, int l)
{
    describe_layer(fam, l);
    bind_layer(fam, b, l);
}

/* A bound layer's absorbed MLA (both sub-blocks). */
static int prepare(void *fam, int l, ms_err *err)
{
    longcat *m = fam;
    for (int i = 0; i < 2; i++)
        if (ms_mla_prepare(&m->layers[l].attn[i], &m->base.arena, err))
            return -1;
    return 0;
}

static int layer_forward(void *fam, const ms_fwd *f, int l, float *x, ms_err *err);

/* Binds everything through the decoder (which owns embedding, head and the
 * layer loop) and, for a runnable model, the ScMoE layers' scratch. */
static int bind_model(longcat *m, ms_binder *b, const ms_model_opts *opts, ms_err *err)
{
    m->dec.layer_forward = layer_forward;
    m->dec.fam = m;
    ms_bind_ignore_prefix(b, "model.mtp."); /* multi-token prediction: not the main model */
    if (ms_decoder_bind(&m->dec, b, "model", m->tie, 0, layer_bind, prepare, m, opts, err))
        return -1;
    if (opts->check_only || ms_bind_problems(b))
        return 0;
    return alloc_scratch(m, err);
}

static int lc_open(const ms_checkpoint *ck, ms_binder *b, const ms_model_opts *opts,
                   ms_model **out, ms_err *err)
{
    longcat tmp = {0};
    *out = NULL;
    if (read_config(&tmp, ck->config, err))
        return -1;
    int64_t n_layers = tmp.n_layers;
    longcat *m = ms_model_create(&(ms_model_spec){.tmp = &tmp, .size = sizeof *m,
                                    .family = &ms_family_longcat_flash, .n_layers = (int)n_layers,
                                    .n_experts = (int)tmp.n_experts, .n_used = (int)tmp.top_k,
                                    .d_model = tmp.d, .vocab = tmp.vocab,
                                    .max_ctx = tmp.max_pos},
                                 opts, b, err);
    if (!m)
        return -1;
    m->layers = ms_arena_alloc(&m->base.arena, sizeof *m->layers * (size_t)n_layers, "layers",
                               err);
    if (!m->layers || ms_decoder_init(&m->dec, &m->base, m->d, m->vocab, (float)m->eps, err) ||
        ms_mla_read_rope(ck->config, (int)m->rope_dim, 1, &m->rope, &m->rc, err) ||
        ms_expert_store_open((int)n_layers, (int)m->n_experts, 3, &m->base.experts, err) ||
        bind_model(m, b, opts, err)) {
        ms_model_free(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}

static void lc_describe(const ms_model *mb, FILE *out)
{
    const longcat *m = (const longcat *)mb;
    ms_cfg_describe(keys, N_KEYS, mb, out);
    fprintf(out, "  ffn_hidden_size: %lld\n  moe_topk: %lld\n  (a layer: 2 attention + 2 dense MLP "
            "sub-blocks and 1 shortcut MoE; zero experts are identities)\n",
            (long long)m->d_ff, (long long)m->top_k);
    ms_mla_describe(&m->layers[0].attn[0], &m->rc, out);
}

/* x += attention sub-block i of layer l (input norm, MLA). */
static int attention(longcat *m, const ms_fwd *f, float *x, int l, int i, ms_err *err)
{
    lc_layer *L = &m->layers[l];
    int64_t n = f->n, d = m->d;
    ms_rmsnorm(x, L->in_norm[i], (float)m->eps, n, d, m->xn);
    if (ms_mla_forward(&L->attn[i], f, l, m->xn, m->tmp, m->work, err))
        return -1;
    ms_add(x, m->tmp, n * d);
    ms_trace_f32(f->trace, x, n, d, "L%d.attn%d_out", l, i);
    return 0;
}

/* x += dense MLP i of layer l on the normed state xn. */
static void dense_mlp(longcat *m, const ms_fwd *f, float *x, const ms_mlp *mlp,
                      const float *xn)
{
    ms_mlp_apply(&mlp->gate, &mlp->up, &mlp->down, mlp->d_ff, xn, (int)f->n, m->tmp, m->work);
    ms_add(x, m->tmp, f->n * m->d);
}

/* One ScMoE layer, as LongcatFlashDecoderLayer.forward. */
static int layer_forward(void *fam, const ms_fwd *f, int l, float *x, ms_err *err)
{
    longcat *m = fam;
    lc_layer *L = &m->layers[l];
    ms_model *b = &m->base;
    int64_t n = f->n, d = m->d;
    int k = L->router.top_k;
    ms_timers *tm = f->timers;
    double t0 = ms_now(), t1;

    if (attention(m, f, x, l, 0, err))
        return -1;
    t1 = ms_now();
    tm->attn += t1 - t0;
    /* h: sub-block 0's post-attention-normed state, the input of both its
     * MLP and the shortcut MoE */
    ms_rmsnorm(x, L->post_norm[0], (float)m->eps, n, d, m->h);
    ms_route(&L->router, m->h, n, m->rlogits, m->topi, m->topw);
    ms_trace_f32(f->trace, m->rlogits, n, L->router.n_experts, "L%d.router_logits", l);
    ms_trace_i32(f->trace, m->topi, n, k, "L%d.topk_ids", l);
    ms_trace_f32(f->trace, m->topw, n, k, "L%d.topk_w", l);
    /* decode: the chosen experts start loading now and are consumed only
     * after sub-block 1's attention (the window ScMoE was designed for) */
    if (b->prefetch && n == 1)
        ms_moe_prefetch_ids(b->experts, &L->moe, m->topi, n, (int32_t *)m->mwork);
    dense_mlp(m, f, x, &L->mlp[0], m->h);
    t0 = ms_now();
    tm->experts += t0 - t1;

    if (attention(m, f, x, l, 1, err))
        return -1;
    t1 = ms_now();
    tm->attn += t1 - t0;
    /* the shortcut MoE depends only on h and the routing above, never on
     * sub-block 1: it may run concurrently with it (own scratch and output) */
    if (ms_moe_forward(&L->moe, b->experts, m->h, n, m->topi, m->topw, m->sc, m->mwork, err))
        return -1;
    ms_rmsnorm(x, L->post_norm[1], (float)m->eps, n, d, m->xn);
    dense_mlp(m, f, x, &L->mlp[1], m->xn);
    ms_add(x, m->sc, n * d); /* residual + mlp1 + shortcut, in upstream's order */
    ms_trace_f32(f->trace, x, n, d, "L%d.moe_out", l);
    tm->experts += ms_now() - t1;
    return 0;
}

static int lc_forward(ms_model *mb, const ms_fwd *f, ms_err *err)
{
    return ms_decoder_forward(&((longcat *)mb)->dec, f, err); /* ids as given: no BOS, ever */
}

const ms_family ms_family_longcat_flash = {
    .model_type = "longcat_flash",
    .fp8_scale_dtype = MS_DTYPE_F32,
    .open = lc_open,
    .close = ms_model_free, /* nothing beyond the arena and the shared tables */
    .describe = lc_describe,
    .forward = lc_forward,
};

/* The pre-norm decoder shared by gpt_oss, qwen3_moe and deepseek_v3:
 *
 *   x = embed(ids)
 *   per layer:  x += attn(rmsnorm(x, attn_norm))        GQA or MLA
 *               h  = rmsnorm(x, ffn_norm)
 *               x += moe(h, route(h)) [+ shared(h)]   or   x += mlp(h)
 *   logits = lm_head(rmsnorm(x, final_norm))
 *
 * A family describes its layers with this struct (which attention and its
 * options, which router, which expert FFN, shared experts, which layers are
 * dense) and binds their
 * weights; the loop, the scratch, the trace names (L<l>.attn_out,
 * L<l>.router_logits, L<l>.topk_ids, L<l>.topk_w, L<l>.moe_out, final_norm,
 * logits), the timers and the prefetch live here once.
 *
 * The loop is layer-major: a call of n positions (up to ms_model.max_span)
 * runs each layer over all of them before the next, attention in blocks of
 * max_batch, so a layer's routed experts are fetched once per call, not
 * once per block. */
#ifndef MS_MODELS_DECODER_H
#define MS_MODELS_DECODER_H

#include "models/attention.h"
#include "models/mla.h"
#include "models/moe.h"

typedef struct ms_decoder_layer {
    const float *attn_norm, *ffn_norm;  /* [d] */
    int use_mla;                        /* attention: mla when set, else attn */
    ms_gqa attn;
    ms_mla mla;
    int is_moe;
    ms_router router;                   /* is_moe */
    ms_moe moe;                         /* is_moe */
    ms_mlp shared;                      /* is_moe: shared experts on the same input, added
                                         * to the routed sum; d_ff 0 = none */
    ms_mlp mlp;                         /* dense layers */
} ms_decoder_layer;

/* A family's own layer, for graphs the shared one does not draw
 * (LongCat's ScMoE): x [n][d] += layer l, n <= max_batch (such a model
 * runs prompts in blocks of max_batch). */
typedef int ms_layer_forward_fn(void *fam, const ms_fwd *f, int l, float *x, ms_err *err);

typedef struct ms_decoder {
    ms_model *base;
    ms_layer_forward_fn *layer_forward; /* NULL: the shared layer below */
    void *fam;                          /* its first argument */
    int64_t d, vocab;
    float eps;                          /* rms_norm_eps of every norm */
    ms_mat embed, lm_head;              /* [vocab][d] */
    const float *final_norm;
    ms_decoder_layer *layers;           /* [n_layers] */
    /* scratch for max_batch positions (longer calls: ms_model.span) */
    int64_t max_experts, max_topk;      /* routing scratch per position */
    float *x, *xn, *tmp, *rlogits, *topw, *work;
    float *shared_out;                  /* [max_batch][d] when a layer has shared experts */
    int32_t *topi;
    /* the next layer's prediction, run beside the next dispatch: its
     * work area (d + max_experts) and the arguments it was given */
    float *pf_tmp;
    struct {
        int layer;
        const float *x;
        int64_t n;
    } pf;
} ms_decoder;

/* Allocates the layer table (zeroed) in the model's arena. */
int ms_decoder_init(ms_decoder *dec, ms_model *base, int64_t d, int64_t vocab, float eps,
                    ms_err *err);
/* The family's description and binding of layer l (fam: the family's model). */
typedef void ms_layer_fn(void *fam, ms_binder *b, int l);
/* What a layer needs once bound, before the scratch is sized (MLA's
 * absorbed matrices); 0 or -1 with err. */
typedef int ms_prepare_fn(void *fam, int l, ms_err *err);
/* Binds "<prefix>.embed_tokens.weight", every layer through `layer`,
 * "<prefix>.norm.weight" and "lm_head.weight" (the embedding when tie),
 * marks the n_mtp MTP layers after the last as knowingly ignored, and
 * (unless check-only or a problem was recorded) runs `prepare` (may be
 * NULL) on every layer and allocates the scratch. */
int ms_decoder_bind(ms_decoder *dec, ms_binder *b, const char *prefix, int tie, int64_t n_mtp,
                    ms_layer_fn *layer, ms_prepare_fn *prepare, void *fam,
                    const ms_model_opts *opts, ms_err *err);
/* "<prefix>.input_layernorm.weight" and "<prefix>.post_attention_layernorm.weight"
 * ([d] each) as the layer's attn_norm and ffn_norm. */
void ms_decoder_bind_norms(ms_decoder_layer *L, ms_binder *b, const char *prefix, int64_t d);
/* Allocates the scratch for the layers as described; call after binding. */
int ms_decoder_alloc_scratch(ms_decoder *dec, ms_err *err);
int ms_decoder_forward(ms_decoder *dec, const ms_fwd *f, ms_err *err);

#endif

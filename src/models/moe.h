/* Feed-forward blocks: routers, the routed mixture of experts applied
 * through the expert-load boundary, and the dense SwiGLU MLP.
 *
 * Batched evaluation: for n positions, every expert in the union of their
 * top-k is fetched once and applied to all positions that chose it; the
 * contributions are then summed per position in canonical top-k order
 * (j = 0..k-1), so the result is bit-identical to evaluating each position
 * alone, whatever the order in which experts arrive. */
#ifndef MS_MODELS_MOE_H
#define MS_MODELS_MOE_H

#include "models/family.h"

typedef enum ms_router_kind {
    MS_ROUTER_TOPK_SOFTMAX = 0, /* gpt_oss: top-k of the logits, softmax over those k */
    MS_ROUTER_SOFTMAX_TOPK,     /* qwen3_moe: softmax over all experts (float32), top-k of
                                 * the probabilities, renormalised when norm_topk */
    MS_ROUTER_SIGMOID_GROUP,    /* deepseek_v3 (noaux_tc): scores = sigmoid(logits); choice =
                                 * score + choice_bias, limited to the topk_group groups (of
                                 * n_experts / n_group) whose two best choices sum highest;
                                 * weights = the unbiased scores, / (sum + 1e-20) when
                                 * norm_topk, x routed_scale */
    MS_ROUTER_SOFTMAX_BIAS,     /* longcat_flash: probabilities = softmax over all candidates
                                 * (float32); choice = probability + choice_bias; weights =
                                 * probabilities x routed_scale, never renormalised */
} ms_router_kind;

#define MS_ROUTER_MAX_EXPERTS 4096 /* candidates per router (the routing scratch is on the stack) */
#define MS_ROUTER_MAX_GROUPS 64

typedef struct ms_router {
    ms_router_kind kind;
    ms_mat w;                   /* [n_experts][d] */
    const float *bias;          /* [n_experts] or NULL: added to the logits */
    int n_experts, top_k;       /* n_experts: every candidate, zero-computation ones included */
    int norm_topk;
    /* SIGMOID_GROUP and SOFTMAX_BIAS only: */
    const float *choice_bias;   /* [n_experts] e_score_correction_bias: selection only */
    int n_group, topk_group;    /* SIGMOID_GROUP (n_group <= MS_ROUTER_MAX_GROUPS); 1, 1 =
                                 * no group limit */
    float routed_scale;         /* routed_scaling_factor, multiplies the weights */
} ms_router;

/* Routes n positions x [n][d]: logits [n][n_experts], ids/w [n][top_k]
 * (ids in descending order of the score they were chosen by: logits or
 * probabilities, plus choice_bias where the kind has one). */
void ms_route(const ms_router *r, const float *x, int64_t n, float *logits, int32_t *ids,
              float *w);

/* Indices of the k largest of v[0..n) in descending order (ties: lower index). */
void ms_topk(const float *v, int n, int k, int32_t *idx);

/* Dense SwiGLU MLP: down(silu(gate(x)) * up(x)). */
typedef struct ms_mlp {
    ms_mat gate, up, down;      /* [d_ff][d], [d_ff][d], [d][d_ff] */
    int64_t d_model, d_ff;
} ms_mlp;

int64_t ms_mlp_scratch(int64_t d_ff, int64_t n);
/* Binds "<prefix>.gate_proj", ".up_proj", ".down_proj" with the shapes of
 * mlp->d_model and mlp->d_ff; span (6 entries: weights and scales of each)
 * receives their byte ranges when not NULL. Returns the number of problems
 * recorded (0 when all three are bound). */
int ms_mlp_bind(ms_mlp *mlp, ms_binder *b, const char *prefix, ms_role role, ms_span *span);
/* A SIGMOID_GROUP router's "<prefix>.gate.weight" [n_experts][d] (kept
 * unquantised by the releases, bf16) and "<prefix>.gate.e_score_correction_bias"
 * (F32). Returns the number of problems recorded. */
int ms_router_bind_sigmoid(ms_router *r, ms_binder *b, const char *prefix, int64_t d);
/* The routed experts of layer l stored apart, "<prefix>.<e>.{gate,up,down}_proj"
 * for e < n_experts, each a SwiGLU MLP d_model x d_ff, into the expert
 * store (not in collect mode). Returns the number of problems recorded. */
int ms_moe_bind_experts(ms_binder *b, ms_expert_store *st, int layer, const char *prefix,
                        int n_experts, int64_t d_model, int64_t d_ff);
/* X [rows][d] -> Y [rows][d]. */
void ms_mlp_apply(const ms_mat *gate, const ms_mat *up, const ms_mat *down, int64_t d_ff,
                  const float *X, int rows, float *Y, float *scratch);

typedef enum ms_expert_ffn {
    MS_FFN_SWIGLU = 0,  /* mats: gate, up, down; silu(gate) * up */
    MS_FFN_OAI_CLAMPED, /* mats: gate_up (rows interleaved: 2j gate, 2j+1 up), down;
                         * gate clamped above at limit, up to [-limit, limit],
                         * gate * sigmoid(alpha * gate) * (up + 1); biases */
} ms_expert_ffn;

typedef struct ms_moe {
    int layer;                  /* layer index in the expert store */
    int n_experts, top_k;       /* n_experts: those in the store */
    int n_identity;             /* zero-computation experts, ids n_experts.. n_experts +
                                 * n_identity - 1: output = input (times the routing weight),
                                 * never fetched (longcat_flash) */
    int64_t d_model, d_ff;
    ms_expert_ffn ffn;
    const float *gate_up_bias;  /* OAI: [n_experts][2*d_ff] */
    const float *down_bias;     /* OAI: [n_experts][d_model] */
    float alpha, limit;         /* OAI: 1.702, swiglu_limit */
} ms_moe;

/* gpt_oss's fused MXFP4 experts of layer m->layer: "<prefix>.gate_up_proj_{blocks,
 * scales,bias}" [E][2 d_ff][...] and "<prefix>.down_proj_{blocks,scales,bias}"
 * [E][d_model][...]; the biases into m, each expert's two matrices into the
 * store (not in collect mode). Returns the number of problems recorded. */
int ms_moe_bind_mxfp4(ms_moe *m, ms_binder *b, ms_expert_store *st, const char *prefix);

/* Decode prefetch: predicts the experts the next MoE layer will ask for from
 * the residuals x [n][d] of a step's rows (next layer's norm, then its
 * router: Picchio's proxy B, ~89% right on gpt-oss-20b from the residual
 * after the current layer) and asks the store to start loading the union of
 * each row's best `count` (at most top_k).
 * When `deferred`, the reads start at the store's next batch, after that
 * batch's own (ms_expert_prefetch_deferred). tmp: d + n_experts floats.
 * Every candidate of r must be a stored expert (no identity ones). */
void ms_moe_prefetch_next(ms_expert_store *st, int next_layer, const float *x, int64_t n,
                          int64_t d, const float *norm_w, float eps, const ms_router *r,
                          int count, int deferred, float *tmp);

/* Asks the store to start loading the stored experts among ids [n][top_k]
 * (advisory; identity experts skipped). tmp: n_experts int32. */
void ms_moe_prefetch_ids(ms_expert_store *st, const ms_moe *m, const int32_t *ids, int64_t n,
                         int32_t *tmp);

/* Scratch floats ms_moe_forward needs for n positions. */
int64_t ms_moe_scratch(const ms_moe *m, int64_t n);

/* out[t] = sum_j w[t][j] * expert_{ids[t][j]}(x[t]) for n positions;
 * x [n][d_model], ids/w [n][top_k], out [n][d_model] (overwritten); an
 * identity expert contributes w * x[t]. */
int ms_moe_forward(const ms_moe *m, ms_expert_store *st, const float *x, int64_t n,
                   const int32_t *ids, const float *w, float *out, float *scratch,
                   ms_err *err);

#endif

/* Routed mixture-of-experts: the routers the families use and the expert FFN
 * applied through the expert-load boundary.
 *
 * Batched evaluation: for n positions, every expert in the union of their
 * top-k is fetched once and applied to all positions that chose it; the
 * contributions are then summed per position in canonical top-k order
 * (j = 0..k-1), so the result is bit-identical to evaluating each position
 * alone, whatever the order in which experts are computed. */
#ifndef MS_MODELS_MOE_H
#define MS_MODELS_MOE_H

#include "models/family.h"

typedef enum ms_expert_ffn {
    MS_FFN_SWIGLU = 0,  /* mats: gate, up, down; silu(gate) * up */
    MS_FFN_OAI_CLAMPED, /* mats: gate_up (rows interleaved: 2j gate, 2j+1 up), down;
                         * gate clamped above at limit, up to [-limit, limit],
                         * gate * sigmoid(alpha * gate) * (up + 1); biases */
} ms_expert_ffn;

typedef struct ms_moe {
    int layer;                  /* layer index in the expert store */
    int n_experts, top_k;
    int64_t d_model, d_ff;
    ms_expert_ffn ffn;
    const float *gate_up_bias;  /* OAI: [n_experts][2*d_ff] */
    const float *down_bias;     /* OAI: [n_experts][d_model] */
    float alpha, limit;         /* OAI: 1.702, swiglu_limit */
} ms_moe;

/* gpt_oss router: top-k of the logits (descending), softmax over those k. */
void ms_route_topk_softmax(const float *logits, int64_t n, int n_experts, int k,
                           int32_t *ids, float *w);

/* Indices of the k largest of v[0..n) in descending order (ties: lower index). */
void ms_topk(const float *v, int n, int k, int32_t *idx);

/* Decode prefetch: predicts the experts MoE layer next_layer will ask for
 * from the residual x [d] after the current layer (next layer's norm, its
 * router + bias, top-k: Picchio's proxy B, ~89% right on gpt-oss-20b) and asks
 * the store to start loading them while the next attention runs.
 * tmp: d + n_experts floats. */
void ms_moe_prefetch_next(ms_expert_store *st, int next_layer, const float *x, int64_t d,
                          const float *norm_w, float eps, const ms_mat *router,
                          const float *bias, int n_experts, int k, float *tmp);

/* Scratch floats ms_moe_forward needs for n positions. */
int64_t ms_moe_scratch(const ms_moe *m, int64_t n);

/* out[t] = sum_j w[t][j] * expert_{ids[t][j]}(x[t]) for n positions;
 * x [n][d_model], ids/w [n][top_k], out [n][d_model] (overwritten). */
int ms_moe_forward(const ms_moe *m, ms_expert_store *st, const float *x, int64_t n,
                   const int32_t *ids, const float *w, float *out, float *scratch,
                   ms_err *err);

#endif

/* Attention of queries over a KV cache in any of its formats, the one
 * routine every family's attention ends in (GQA, and MLA as one KV "head"
 * whose value is the front of its key).
 *
 * The canonical computation of query (t, h), fixed so that no split of the
 * work can change a bit: its keys, max(0, pos - window + 1) .. pos, go in
 * chunks of MS_ATTN_CHUNK positions aligned to multiples of it, chunks in
 * spans of MS_ATTN_SPAN; within a span the chunks update one online-softmax
 * state in order (the kernels' ms_attn_step); the spans' states are then
 * merged in order with the sink logit (gpt_oss) in the denominator:
 *   M = max(m_s, sink), L = sum_s l_s e^(m_s - M) + e^(sink - M),
 *   out = (sum_s e^(m_s - M) acc_s) / L.
 * Work is split by rows, heads and spans (split-K) to fill the threads;
 * each KV chunk is widened once per group of heads reading it. */
#ifndef MS_MODELS_ATTEND_H
#define MS_MODELS_ATTEND_H

#include "models/family.h"

#define MS_ATTN_SPAN (16 * MS_ATTN_CHUNK) /* 4096 keys */

typedef struct ms_attend {
    int n_heads, n_kv_heads;  /* head h reads KV head h / (n_heads / n_kv_heads) */
    int dk, dv;               /* query/key and value dims */
    int64_t k_off, v_off;     /* KV head 0's key and value in a KV row (elements) */
    int64_t k_step, v_step;   /* from one KV head to the next */
    float scale;              /* of the scores */
    const float *sinks;       /* [n_heads] or NULL */
    int64_t window;           /* 0: all positions up to the query's */
} ms_attend;

/* For every row t of f and head h: the attention of the query at
 * q + (t * n_heads + h) * ldq into out + (t * n_heads + h) * ldo (dv
 * floats), over the cache of row t's sequence, which already holds the
 * keys of every row. Uses f->scratch. */
int ms_attend_rows(const ms_attend *a, const ms_fwd *f, int layer, const float *q, int64_t ldq,
                   float *out, int64_t ldo, ms_err *err);

#endif

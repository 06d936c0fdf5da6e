/* Inside the expert store: the part every policy shares, and the table of
 * operations a policy supplies (experts_pagecache.c, experts_cache.c).
 *
 * experts.c keeps what does not depend on where experts live: registration,
 * sizes, read plans, the batch bookkeeping (ids, trace, scoring of
 * predictions, the request count) and the statistics. A policy only decides
 * how a requested expert becomes a lease, and counts each request as a hit,
 * a prefetch hit or a miss. */
#ifndef MS_WEIGHTS_EXPERTS_IMPL_H
#define MS_WEIGHTS_EXPERTS_IMPL_H

#include "weights/experts.h"

#define MS_EXPERT_ALIGN 4096u
#define MS_EXPERT_MAX_SEGS (2 * MS_EXPERT_MAX_MATS)
/* The engine cache's reads (and the disk probe's, which measures them):
 * io_uring reads of at most MS_EXPERT_READ_PIECE bytes, in order,
 * MS_EXPERT_READ_WINDOW of them in flight. */
#define MS_EXPERT_READ_PIECE (4u << 20)
#define MS_EXPERT_READ_WINDOW 3

/* One aligned read covering one or more of an expert's spans, laid out at
 * dst of a buffer (a cache slot, or the disk probe's scratch). */
typedef struct ms_expert_seg {
    int file;
    uint64_t off, len;    /* aligned request */
    uint64_t need;        /* bytes from off that must arrive (the rest is padding) */
    uint64_t dst;         /* offset in the buffer */
} ms_expert_seg;

typedef struct ms_expert_policy_ops {
    /* Attaches what is in memory for the current batch (st->b_ids) and
     * starts reading the rest; counts every request as a hit, a prefetch
     * hit or a miss. */
    int (*begin)(ms_expert_store *st, ms_err *err);
    /* The next ready expert of the batch (ms_expert_batch_next). */
    int (*next)(ms_expert_store *st, ms_expert_lease *out, ms_err *err);
    void (*put)(ms_expert_store *st, ms_expert_lease *lease);
    /* Advisory reads of experts of `layer` (after the prediction is noted). */
    void (*prefetch)(ms_expert_store *st, int layer, const int32_t *ids, int n);
    void (*close)(ms_expert_store *st);
    int holds_all;        /* a batch's leases may be held together */
} ms_expert_policy_ops;

struct ms_expert_store {
    int n_layers, n_experts, n_mats;
    ms_mat *mats;                   /* [n_layers][n_experts][n_mats] registered views */
    ms_span *spans;                 /* [n_layers][n_experts][n_mats][2] */
    ms_expert_policy policy;
    const ms_expert_policy_ops *ops;
    void *impl;                     /* the policy's state */
    const ms_checkpoint *ck;
    ms_logger log;
    int n_slots;                    /* cache policy: slots and their size */
    uint64_t slot_bytes;
    /* the current batch: distinct ids of one layer, delivered b_done of b_n */
    int b_layer, b_n, b_done;
    int32_t *b_ids;
    ms_expert_stats st;
    int pend_layer, pend_n;         /* deferred prefetch (layer -1: none) */
    int32_t *pend_ids;              /* [n_experts] */
    int pred_layer;                 /* the layer predictions were made for, or -1 */
    uint8_t *pred;                  /* [n_experts]: predicted for pred_layer */
    FILE *trace;
    char desc[256];
};

static inline size_t ms_expert_idx(const ms_expert_store *st, int layer, int e)
{
    return ((size_t)layer * (size_t)st->n_experts + (size_t)e) * (size_t)st->n_mats;
}

/* Groups an expert's spans into aligned segments laid out back to back;
 * returns the buffer bytes they need. */
uint64_t ms_expert_plan(const ms_expert_store *st, int layer, int e, ms_expert_seg *segs,
                        int *n_seg);

/* The policies' constructors, called by ms_expert_store_start. */
int ms_expert_pagecache_start(ms_expert_store *st, ms_err *err);
int ms_expert_cache_start(ms_expert_store *st, const ms_expert_opts *o, ms_err *err);

#endif

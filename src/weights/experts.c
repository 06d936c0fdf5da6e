/* Expert store, the part every policy shares: registration, sizes, read
 * plans, the batch bookkeeping and the statistics. Where experts live is
 * the policy's (experts_impl.h): experts_pagecache.c, experts_cache.c. */
#include "weights/experts_impl.h"

#include <stdlib.h>
#include <string.h>

int ms_expert_store_open(int n_layers, int n_experts, int n_mats, ms_expert_store **out,
                         ms_err *err)
{
    *out = NULL;
    if (n_mats < 1 || n_mats > MS_EXPERT_MAX_MATS || n_layers < 1 || n_experts < 1)
        return ms_err_set(err, MS_E_ARG, "expert store: %d layers x %d experts x %d matrices",
                          n_layers, n_experts, n_mats);
    ms_expert_store *st = ms_calloc(1, sizeof *st, "expert store", err);
    if (!st)
        return -1;
    size_t n = (size_t)n_layers * (size_t)n_experts * (size_t)n_mats;
    st->n_layers = n_layers;
    st->n_experts = n_experts;
    st->n_mats = n_mats;
    st->mats = ms_calloc(n, sizeof *st->mats, "expert views", err);
    st->spans = ms_calloc(2 * n, sizeof *st->spans, "expert spans", err);
    st->b_ids = ms_calloc((size_t)n_experts, sizeof *st->b_ids, "expert batch", err);
    st->pred = ms_calloc((size_t)n_experts, sizeof *st->pred, "expert prediction", err);
    st->pend_ids = ms_calloc((size_t)n_experts, sizeof *st->pend_ids, "deferred prefetch", err);
    st->pred_layer = st->pend_layer = -1;
    if (!st->mats || !st->spans || !st->b_ids || !st->pred || !st->pend_ids ||
        ms_expert_pagecache_start(st, err)) {
        ms_expert_store_close(st);
        return -1;
    }
    for (size_t i = 0; i < 2 * n; i++)
        st->spans[i].file = -1;
    *out = st;
    return 0;
}

void ms_expert_store_close(ms_expert_store *st)
{
    if (!st)
        return;
    if (st->ops)
        st->ops->close(st);
    free(st->b_ids);
    free(st->pred);
    free(st->pend_ids);
    free(st->mats);
    free(st->spans);
    free(st);
}

void ms_expert_store_set(ms_expert_store *st, int layer, int e, const ms_mat *mats,
                         const ms_span *spans)
{
    size_t i = ms_expert_idx(st, layer, e);
    memcpy(&st->mats[i], mats, sizeof *mats * (size_t)st->n_mats);
    memcpy(&st->spans[2 * i], spans, sizeof *spans * 2 * (size_t)st->n_mats);
}

int ms_expert_store_start(ms_expert_store *st, const ms_checkpoint *ck,
                          const ms_expert_opts *o, ms_err *err)
{
    st->ck = ck;
    st->log = o->log;
    if (o->policy == MS_EXPERTS_PAGECACHE) {
        if (o->io)
            ms_io_close(o->io);
        return 0;
    }
    st->ops->close(st);
    st->ops = NULL;
    return ms_expert_cache_start(st, o, err);
}

/* ---- sizes ------------------------------------------------------------------ */

uint64_t ms_expert_bytes(const ms_expert_store *st, int layer, int e)
{
    const ms_span *sp = &st->spans[2 * ms_expert_idx(st, layer, e)];
    uint64_t n = 0;
    for (int k = 0; k < 2 * st->n_mats; k++)
        if (sp[k].file >= 0)
            n += sp[k].nbytes;
    return n;
}

uint64_t ms_expert_bytes_typical(const ms_expert_store *st)
{
    for (int l = 0; l < st->n_layers; l++) {
        uint64_t b = ms_expert_bytes(st, l, 0);
        if (b)
            return b;
    }
    return 0;
}

uint64_t ms_expert_total_bytes(const ms_expert_store *st)
{
    uint64_t n = 0;
    for (int l = 0; l < st->n_layers; l++)
        for (int e = 0; e < st->n_experts; e++)
            n += ms_expert_bytes(st, l, e);
    return n;
}

int ms_expert_store_spans(const ms_expert_store *st, ms_span *out)
{
    int n = 0;
    const ms_span *sp = st->spans;
    for (int64_t i = 0; sp && i < (int64_t)st->n_layers * st->n_experts * st->n_mats * 2; i++)
        if (sp[i].file >= 0 && sp[i].nbytes) {
            if (out)
                out[n] = sp[i];
            n++;
        }
    return n;
}

ms_expert_policy ms_expert_store_policy(const ms_expert_store *st)
{
    return st->policy;
}

const char *ms_expert_store_describe(const ms_expert_store *st)
{
    return st->desc;
}

void ms_expert_store_stats(const ms_expert_store *st, ms_expert_stats *out)
{
    *out = st->st;
}

int ms_expert_store_slots(const ms_expert_store *st)
{
    return st->n_slots;
}

uint64_t ms_expert_slot_size(const ms_expert_store *st)
{
    ms_expert_seg segs[MS_EXPERT_MAX_SEGS];
    int ns;
    uint64_t slot_bytes = 0;
    for (int l = 0; l < st->n_layers; l++)
        for (int e = 0; e < st->n_experts; e++) {
            uint64_t b = ms_expert_plan(st, l, e, segs, &ns);
            slot_bytes = b > slot_bytes ? b : slot_bytes;
        }
    return slot_bytes;
}

uint64_t ms_expert_store_slot_bytes(const ms_expert_store *st)
{
    return st->slot_bytes;
}

void ms_expert_store_trace(ms_expert_store *st, FILE *f)
{
    st->trace = f;
    if (f)
        fprintf(f, "# moestream expert trace v1 layers=%d experts=%d slot_bytes=%llu "
                "expert_bytes=%llu slots=%d\n", st->n_layers, st->n_experts,
                (unsigned long long)st->slot_bytes, (unsigned long long)ms_expert_bytes_typical(st),
                st->n_slots);
}

/* ---- read plans ------------------------------------------------------------ */

#define COALESCE_GAP (64u << 10)  /* read through gaps this small: one request beats two */

static int cmp_span(const void *a, const void *b)
{
    const ms_span *x = *(const ms_span *const *)a, *y = *(const ms_span *const *)b;
    if (x->file != y->file)
        return x->file - y->file;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

uint64_t ms_expert_plan(const ms_expert_store *st, int layer, int e, ms_expert_seg *segs,
                        int *n_seg)
{
    const ms_span *sp = &st->spans[2 * ms_expert_idx(st, layer, e)], *v[MS_EXPERT_MAX_SEGS];
    const uint64_t A = MS_EXPERT_ALIGN;
    int n = 0;
    for (int k = 0; k < 2 * st->n_mats; k++)
        if (sp[k].file >= 0 && sp[k].nbytes)
            v[n++] = &sp[k];
    qsort(v, (size_t)n, sizeof *v, cmp_span);
    uint64_t dst = 0;
    *n_seg = 0;
    for (int i = 0; i < n; i++) {
        uint64_t end = v[i]->offset + v[i]->nbytes;
        ms_expert_seg *s = *n_seg ? &segs[*n_seg - 1] : NULL;
        if (s && s->file == v[i]->file && v[i]->offset <= s->off + s->need + COALESCE_GAP) {
            if (end > s->off + s->need)
                s->need = end - s->off;
        } else {
            if (s) {
                s->len = (s->need + A - 1) & ~(A - 1);
                dst = s->dst + s->len;
            }
            s = &segs[(*n_seg)++];
            s->file = v[i]->file;
            s->off = v[i]->offset & ~(A - 1);
            s->need = end - s->off;
            s->dst = dst;
        }
    }
    if (*n_seg) {
        ms_expert_seg *s = &segs[*n_seg - 1];
        s->len = (s->need + A - 1) & ~(A - 1);
        dst = s->dst + s->len;
    }
    return dst;
}

/* ---- batches ------------------------------------------------------------------ */

int ms_expert_batch_begin(ms_expert_store *st, int layer, const int32_t *ids, int n,
                          ms_err *err)
{
    if (layer < 0 || layer >= st->n_layers || n < 0 || n > st->n_experts)
        return ms_err_set(err, MS_E_ARG, "expert batch: layer %d, %d experts", layer, n);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= st->n_experts)
            return ms_err_set(err, MS_E_ARG, "expert %d out of range (%d experts)", ids[i],
                              st->n_experts);
    st->b_layer = layer;
    st->b_n = n;
    st->b_done = 0;
    memcpy(st->b_ids, ids, sizeof *ids * (size_t)n);
    st->st.requests += n;
    if (st->trace) {
        fprintf(st->trace, "B %d", layer);
        for (int i = 0; i < n; i++)
            fprintf(st->trace, " %d", ids[i]);
        fprintf(st->trace, "\n");
    }
    if (st->pred_layer == layer) { /* score the predictions made for this layer */
        for (int e = 0; e < st->n_experts; e++)
            st->st.prefetch_predicted += st->pred[e];
        for (int i = 0; i < n; i++)
            st->st.prefetch_correct += st->pred[ids[i]];
        st->pred_layer = -1;
    }
    if (st->ops->begin(st, err))
        return -1;
    if (st->pend_layer >= 0) {
        int pl = st->pend_layer;
        st->pend_layer = -1;
        ms_expert_prefetch(st, pl, st->pend_ids, st->pend_n);
    }
    return 0;
}

int ms_expert_batch_next(ms_expert_store *st, ms_expert_lease *out, ms_err *err)
{
    if (st->b_done == st->b_n)
        return 0;
    return st->ops->next(st, out, err);
}

int ms_expert_batch_holds_all(const ms_expert_store *st)
{
    return st->ops->holds_all;
}

void ms_expert_put(ms_expert_store *st, ms_expert_lease *lease)
{
    st->ops->put(st, lease);
    lease->mat = NULL;
    lease->slot = -1;
}

int ms_expert_get(ms_expert_store *st, int layer, int e, ms_expert_lease *out, ms_err *err)
{
    int32_t id = e;
    if (ms_expert_batch_begin(st, layer, &id, 1, err))
        return -1;
    int rc = ms_expert_batch_next(st, out, err);
    return rc == 1 ? 0 : rc == 0 ? ms_err_set(err, MS_E_ARG, "expert batch empty") : -1;
}

void ms_expert_prefetch(ms_expert_store *st, int layer, const int32_t *ids, int n)
{
    if (layer < 0 || layer >= st->n_layers || n > st->n_experts)
        return;
    if (st->pred_layer != layer)
        memset(st->pred, 0, (size_t)st->n_experts);
    st->pred_layer = layer;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < st->n_experts)
            st->pred[ids[i]] = 1;
    st->ops->prefetch(st, layer, ids, n);
}

void ms_expert_prefetch_deferred(ms_expert_store *st, int layer, const int32_t *ids, int n)
{
    if (layer < 0 || layer >= st->n_layers || n < 0 || n > st->n_experts)
        return;
    memcpy(st->pend_ids, ids, sizeof *ids * (size_t)n);
    st->pend_n = n;
    st->pend_layer = layer;
}

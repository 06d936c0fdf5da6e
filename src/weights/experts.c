/* Expert store, page-cache policy: leases expose the mapped bytes in place;
 * the kernel pages them in on touch and evicts under pressure. */
#include "weights/experts.h"

#include <stdlib.h>
#include <string.h>

struct ms_expert_store {
    int n_layers, n_experts, n_mats;
    ms_mat *mats;     /* [n_layers][n_experts][n_mats] */
    ms_span *spans;   /* [n_layers][n_experts][n_mats][2] */
};

static size_t idx(const ms_expert_store *st, int layer, int e)
{
    return ((size_t)layer * (size_t)st->n_experts + (size_t)e) * (size_t)st->n_mats;
}

int ms_expert_store_open(int n_layers, int n_experts, int n_mats, ms_expert_store **out,
                         ms_err *err)
{
    *out = NULL;
    if (n_mats < 1 || n_mats > MS_EXPERT_MAX_MATS)
        return ms_err_set(err, MS_E_ARG, "expert store: %d matrices per expert (1..%d)",
                          n_mats, MS_EXPERT_MAX_MATS);
    ms_expert_store *st = ms_calloc(1, sizeof *st, "expert store", err);
    if (!st)
        return -1;
    size_t n = (size_t)n_layers * (size_t)n_experts * (size_t)n_mats;
    st->n_layers = n_layers;
    st->n_experts = n_experts;
    st->n_mats = n_mats;
    st->mats = ms_calloc(n, sizeof *st->mats, "expert views", err);
    st->spans = ms_calloc(2 * n, sizeof *st->spans, "expert spans", err);
    if (!st->mats || !st->spans) {
        ms_expert_store_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

void ms_expert_store_close(ms_expert_store *st)
{
    if (!st)
        return;
    free(st->mats);
    free(st->spans);
    free(st);
}

void ms_expert_store_set(ms_expert_store *st, int layer, int e, const ms_mat *mats,
                         const ms_span *spans)
{
    size_t i = idx(st, layer, e);
    memcpy(&st->mats[i], mats, sizeof *mats * (size_t)st->n_mats);
    memcpy(&st->spans[2 * i], spans, sizeof *spans * 2 * (size_t)st->n_mats);
}

int ms_expert_get(ms_expert_store *st, int layer, int e, ms_expert_lease *out, ms_err *err)
{
    if (layer < 0 || layer >= st->n_layers || e < 0 || e >= st->n_experts)
        return ms_err_set(err, MS_E_ARG, "expert (%d, %d) out of range (%d layers, %d experts)",
                          layer, e, st->n_layers, st->n_experts);
    out->mat = &st->mats[idx(st, layer, e)];
    out->layer = layer;
    out->expert = e;
    out->slot = -1;
    return 0;
}

void ms_expert_put(ms_expert_store *st, ms_expert_lease *lease)
{
    (void)st;
    lease->mat = NULL;
}

uint64_t ms_expert_bytes(const ms_expert_store *st, int layer, int e)
{
    size_t i = idx(st, layer, e);
    uint64_t n = 0;
    for (int k = 0; k < 2 * st->n_mats; k++)
        if (st->spans[2 * i + (size_t)k].file >= 0)
            n += st->spans[2 * i + (size_t)k].nbytes;
    return n;
}

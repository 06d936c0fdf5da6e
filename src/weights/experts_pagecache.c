/* The page-cache policy: a lease is a view of the checkpoint's mapping and
 * the kernel pages experts in and out. Prefetch is MADV_WILLNEED on the
 * experts that do not look cached. The engine reads nothing itself, so
 * bytes_read stays 0; a request counts as a hit when the expert's first
 * page is resident when it is asked for (mincore), as a prefetch hit when a
 * prefetch advised it for this visit, else as a miss (the kernel reads it
 * on fault). */
#include "weights/experts_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct pagecache {
    uint8_t *advised;     /* [n_layers][n_experts]: advised for the layer's next visit */
} pagecache;

/* Whether every page of bytes [from, to) of span sp's file is resident:
 * one mincore a 16 MiB, which costs ~2 us on this VM whatever its length
 * (4 KiB to 8 MiB alike). A request's hit is its first page (pc_begin); a
 * prefetch skips a span whose every page is there: MADV_WILLNEED walks the
 * page cache page by page even when everything is (~6% of resident decode
 * on the synthetic gpt-oss-20b). Three single-page probes a span (first,
 * middle, last) took ~1,000 calls a token of that decode, ~2.5 ms; one
 * over the span takes a third as many and misses no page. */
static int resident(const ms_expert_store *st, const ms_span *sp, uint64_t from, uint64_t to)
{
    unsigned char v[4096];
    const uint8_t *map = st->ck->files[sp->file].map;
    for (uint64_t a = from & ~(uint64_t)(MS_EXPERT_ALIGN - 1); a < to;) {
        uint64_t len = to - a < sizeof v * MS_EXPERT_ALIGN ? to - a : sizeof v * MS_EXPERT_ALIGN;
        if (mincore((void *)(map + a), len, v))
            return 0;
        for (uint64_t i = 0; i < (len + MS_EXPERT_ALIGN - 1) / MS_EXPERT_ALIGN; i++)
            if (!(v[i] & 1))
                return 0;
        a += len;
    }
    return 1;
}

static int pc_begin(ms_expert_store *st, ms_err *err)
{
    (void)err;
    pagecache *pc = st->impl;
    uint8_t *adv = pc->advised + (size_t)st->b_layer * (size_t)st->n_experts;
    for (int i = 0; i < st->b_n; i++) {
        int e = st->b_ids[i];
        const ms_span *sp = &st->spans[2 * ms_expert_idx(st, st->b_layer, e)];
        if (adv[e]) {
            st->st.prefetch_hits++;
            adv[e] = 0;
        } else if (!st->ck || sp->file < 0 || resident(st, sp, sp->offset, sp->offset + 1)) {
            st->st.hits++;
        } else {
            st->st.misses++;
        }
    }
    for (int e = 0; e < st->n_experts; e++) /* advised, not asked for by this visit */
        if (adv[e]) {
            adv[e] = 0;
            st->st.prefetch_wasted_bytes += (int64_t)ms_expert_bytes(st, st->b_layer, e);
        }
    return 0;
}

static int pc_next(ms_expert_store *st, ms_expert_lease *out, ms_err *err)
{
    (void)err;
    int e = st->b_ids[st->b_done++];
    out->layer = st->b_layer;
    out->expert = e;
    out->slot = -1;
    out->mat = &st->mats[ms_expert_idx(st, st->b_layer, e)];
    return 1;
}

static void pc_put(ms_expert_store *st, ms_expert_lease *lease)
{
    (void)st;
    (void)lease;
}

static void pc_prefetch(ms_expert_store *st, int layer, const int32_t *ids, int n)
{
    pagecache *pc = st->impl;
    if (!st->ck)
        return;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= st->n_experts)
            continue;
        const ms_span *sp = &st->spans[2 * ms_expert_idx(st, layer, ids[i])];
        int advised = 0;
        for (int k = 0; k < 2 * st->n_mats; k++) {
            if (sp[k].file < 0 || !sp[k].nbytes ||
                resident(st, &sp[k], sp[k].offset, sp[k].offset + sp[k].nbytes))
                continue;
            uint64_t a = sp[k].offset & ~(uint64_t)(MS_EXPERT_ALIGN - 1);
            const uint8_t *map = st->ck->files[sp[k].file].map;
            madvise((void *)(map + a), sp[k].offset + sp[k].nbytes - a, MADV_WILLNEED);
            advised = 1;
        }
        if (advised) {
            pc->advised[(size_t)layer * (size_t)st->n_experts + (size_t)ids[i]] = 1;
            st->st.prefetch_issued++;
        }
    }
}

static void pc_close(ms_expert_store *st)
{
    pagecache *pc = st->impl;
    if (pc)
        free(pc->advised);
    free(pc);
    st->impl = NULL;
}

static const ms_expert_policy_ops pagecache_ops = {
    .begin = pc_begin, .next = pc_next, .put = pc_put, .prefetch = pc_prefetch,
    .close = pc_close, .holds_all = 1,
};

int ms_expert_pagecache_start(ms_expert_store *st, ms_err *err)
{
    pagecache *pc = ms_calloc(1, sizeof *pc, "page-cache policy", err);
    if (!pc)
        return -1;
    pc->advised = ms_calloc((size_t)st->n_layers * (size_t)st->n_experts, 1,
                            "page-cache prefetch marks", err);
    st->impl = pc;
    st->ops = &pagecache_ops;
    st->policy = MS_EXPERTS_PAGECACHE;
    st->n_slots = 0;
    st->slot_bytes = 0;
    snprintf(st->desc, sizeof st->desc, "page cache (experts used in place from the mapping)");
    if (!pc->advised) {
        pc_close(st);
        st->ops = NULL;
        return -1;
    }
    return 0;
}

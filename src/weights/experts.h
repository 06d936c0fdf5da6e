/* The expert-load boundary: every family gets a routed expert's weights
 * through this store, never by touching the checkpoint.
 *
 * Contract:
 *  - at load, a family registers the views of every (layer, expert) in the
 *    native format (views into the mapping) and the byte spans they come
 *    from (ms_expert_store_set);
 *  - a layer's experts are fetched as a batch: ms_expert_batch_begin with the
 *    union of experts the layer needs, then ms_expert_batch_next returns
 *    them one at a time, each as soon as its bytes are ready (completion
 *    order, not request order); every lease is put back exactly once, before
 *    the next call to batch_next;
 *  - placement decides speed only: a lease exposes exactly the checkpoint's
 *    bytes, whatever the policy, budget, I/O backend or completion order; a
 *    failed or short read is an error naming shard, tensor and offset and is
 *    never exposed as weights;
 *  - prefetch is advisory: it fills free or least-recently-used slots, never
 *    a leased one, never one the current batch still needs.
 *
 * Policies:
 *  - page cache: leases point into the mapping; the kernel pages experts in
 *    and out (good when the model almost fits in RAM);
 *  - cache: an engine-owned cache of whole experts within a byte budget, each
 *    slot filled by large aligned reads (O_DIRECT where the filesystem allows
 *    it), submitted together at queue depth > 1 (io_uring, or a pread pool). */
#ifndef MS_WEIGHTS_EXPERTS_H
#define MS_WEIGHTS_EXPERTS_H

#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "base/io.h"
#include "base/log.h"
#include "format/checkpoint.h"
#include "kernels/kernels.h"
#include "weights/bind.h"

#define MS_EXPERT_MAX_MATS 3

typedef struct ms_expert_store ms_expert_store;

typedef struct ms_expert_lease {
    const ms_mat *mat;      /* [n_mats] views, family-defined order */
    int32_t layer, expert;
    int32_t slot;           /* store-internal */
} ms_expert_lease;

typedef enum ms_expert_policy {
    MS_EXPERTS_PAGECACHE = 0,
    MS_EXPERTS_CACHE,
} ms_expert_policy;

typedef struct ms_expert_opts {
    ms_expert_policy policy;
    uint64_t budget;        /* cache: bytes for expert slots (>= one expert) */
    int slots;              /* cache: > 0 sizes the cache in experts instead of bytes */
    int io_threads;         /* cache: 0 = io_uring; > 0 = pread pool of that size */
    int io_depth;           /* cache: io_uring reads in flight (default 3 of 4 MB) */
    int read_depth;         /* cache: a batch's experts read at once (default 2) */
    int buffered;           /* cache: 1 = never try O_DIRECT */
    ms_io *io;              /* tests: use this backend (the store takes ownership) */
    ms_logger log;          /* notices (a fallback taken); none when fn is NULL */
    const char *usage_file; /* cache: routing counts read at start (seeding eviction and
                             * the cache with the hot experts) and written at close;
                             * NULL = none (usage_file.h) */
} ms_expert_opts;

typedef struct ms_expert_stats {
    /* every expert a batch asks for is exactly one of: a hit (in memory,
     * no read issued for it by anyone), a prefetch hit (brought, or still
     * being brought, by a read a prefetch started for this visit) or a miss
     * (read on demand); requests = hits + prefetch_hits + misses. Under the
     * page-cache policy "in memory" is the kernel's: the expert's first page
     * resident when asked for (mincore). */
    int64_t requests, hits, prefetch_hits, misses;
    int64_t bytes_read;              /* bytes read from disk into slots, demand and prefetch */
    int64_t prefetch_bytes;          /* of bytes_read: by prefetch */
    int64_t prefetch_predicted;      /* distinct experts predicted for the next layer */
    int64_t prefetch_correct;        /* ... that the layer then asked for */
    int64_t prefetch_issued;         /* reads (or page-cache advice) started by prefetch */
    int64_t prefetch_wasted_bytes;   /* prefetched, then not asked for by that visit */
    double t_wait;                   /* seconds blocked waiting for reads */
} ms_expert_stats;

/* n_mats matrices per expert. Registration happens before ms_expert_store_start. */
int ms_expert_store_open(int n_layers, int n_experts, int n_mats, ms_expert_store **out,
                         ms_err *err);
void ms_expert_store_close(ms_expert_store *st);

/* Registers expert (layer, e): n_mats views and their 2*n_mats spans
 * (weights, scales; span.file = -1 for an absent scale). */
void ms_expert_store_set(ms_expert_store *st, int layer, int e, const ms_mat *mats,
                         const ms_span *spans);

/* Chooses the policy and allocates the cache. Until called, the store runs
 * the page-cache policy. */
int ms_expert_store_start(ms_expert_store *st, const ms_checkpoint *ck,
                          const ms_expert_opts *opts, ms_err *err);

/* Starts fetching the experts ids[0..n) (distinct) of a layer. */
int ms_expert_batch_begin(ms_expert_store *st, int layer, const int32_t *ids, int n,
                          ms_err *err);
/* Next ready expert of the batch: 1 with *out filled, 0 when the batch is
 * exhausted, -1 on error (a failed read). */
int ms_expert_batch_next(ms_expert_store *st, ms_expert_lease *out, ms_err *err);
/* Whether a batch's leases may be held together, each put back after the
 * last batch_next (page-cache policy: a lease is a view of the mapping);
 * otherwise each is put back before the next call. */
int ms_expert_batch_holds_all(const ms_expert_store *st);
void ms_expert_put(ms_expert_store *st, ms_expert_lease *lease);

/* One expert, waiting for it (tests and simple callers). */
int ms_expert_get(ms_expert_store *st, int layer, int e, ms_expert_lease *out, ms_err *err);

/* Advisory: starts loading experts of a layer that are likely needed soon. */
void ms_expert_prefetch(ms_expert_store *st, int layer, const int32_t *ids, int n);
/* The same, started by the next ms_expert_batch_begin once that batch's own
 * reads are on their way (a prediction made before a batch whose reads
 * must come first); replaces one still pending. */
void ms_expert_prefetch_deferred(ms_expert_store *st, int layer, const int32_t *ids, int n);

/* Writes every batch request as a line "B <layer> <id>..." after a header
 * (the routing trace replayed by `moestream replay`). f stays the caller's. */
void ms_expert_store_trace(ms_expert_store *st, FILE *f);

/* Bytes of one expert (all matrices and scales) of a layer. */
uint64_t ms_expert_bytes(const ms_expert_store *st, int layer, int e);
/* Bytes of one expert of the first layer that has routed experts (layers
 * before first_k_dense_replace register none). */
uint64_t ms_expert_bytes_typical(const ms_expert_store *st);
/* Sum over all registered experts. */
uint64_t ms_expert_total_bytes(const ms_expert_store *st);

/* Disk bandwidth at expert-sized reads: reads n distinct experts (spread over
 * layers) with O_DIRECT where possible, `depth` at a time, through a fresh
 * io_uring, into scratch memory (the cache is not touched). */
int ms_expert_store_probe(const ms_expert_store *st, const ms_checkpoint *ck, int n, int depth,
                          double *bytes_per_s, ms_err *err);

/* The spans of every registered expert (absent scales left out), into out
 * when not NULL; returns their count. */
int ms_expert_store_spans(const ms_expert_store *st, ms_span *out);

ms_expert_policy ms_expert_store_policy(const ms_expert_store *st);
/* One line describing policy, budget, slots and backend. */
const char *ms_expert_store_describe(const ms_expert_store *st);
void ms_expert_store_stats(const ms_expert_store *st, ms_expert_stats *out);
int ms_expert_store_slots(const ms_expert_store *st);
uint64_t ms_expert_store_slot_bytes(const ms_expert_store *st);
/* The bytes of a cache slot (the largest expert's aligned read), whatever
 * the policy. */
uint64_t ms_expert_slot_size(const ms_expert_store *st);

#endif

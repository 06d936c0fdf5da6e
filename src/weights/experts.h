/* The expert-load boundary: every family gets a routed expert's weights
 * through ms_expert_get / ms_expert_put, never by touching the checkpoint.
 *
 * Contract:
 *  - a family registers, at load, the views of every (layer, expert) in the
 *    native format (views into the mapping) and their byte spans on disk;
 *  - ms_expert_get returns a lease whose views stay valid until the lease is
 *    put back; put exactly once;
 *  - placement (page cache, engine cache, disk) decides speed only: the bytes
 *    a lease exposes are always the checkpoint's bytes, so results never
 *    depend on the policy.
 * Policy today: page cache (views are the mapping itself). */
#ifndef MS_WEIGHTS_EXPERTS_H
#define MS_WEIGHTS_EXPERTS_H

#include <stdint.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "weights/bind.h"

#define MS_EXPERT_MAX_MATS 3

typedef struct ms_expert_store ms_expert_store;

typedef struct ms_expert_lease {
    const ms_mat *mat;      /* [n_mats] views, family-defined order */
    int32_t layer, expert;
    int32_t slot;           /* store-internal */
} ms_expert_lease;

/* n_mats matrices per expert; spans: 2 per matrix (weights, scales). */
int ms_expert_store_open(int n_layers, int n_experts, int n_mats, ms_expert_store **out,
                         ms_err *err);
void ms_expert_store_close(ms_expert_store *st);

/* Registers expert (layer, e): n_mats views and their 2*n_mats spans
 * (span.file = -1 for an absent scale). */
void ms_expert_store_set(ms_expert_store *st, int layer, int e, const ms_mat *mats,
                         const ms_span *spans);

int ms_expert_get(ms_expert_store *st, int layer, int e, ms_expert_lease *out,
                  ms_err *err);
void ms_expert_put(ms_expert_store *st, ms_expert_lease *lease);

/* Bytes of one expert (all matrices and scales) of a layer. */
uint64_t ms_expert_bytes(const ms_expert_store *st, int layer, int e);

#endif

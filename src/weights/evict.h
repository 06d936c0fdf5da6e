/* Which cached expert to give up: Belady's rule (evict the one needed
 * furthest in the future) with the future estimated from the model's shape.
 *
 * Layers are visited in a cycle, so an expert of layer l cannot be needed
 * before the cycle comes back to l: d(l) = (l - current + L) % L layer
 * visits away (L when l is the current layer). When l comes back, its
 * router picks the expert with probability q, estimated from past visits;
 * so the expected distance is d(l) + L * (1/q - 1). LRU gets this backwards
 * when the cache is smaller than one cycle (it evicts the next layers'
 * experts first); this score does not.
 *
 * Shared by the expert store and by `moestream replay`, which compares it
 * with LRU and with the true optimum on recorded traces. */
#ifndef MS_WEIGHTS_EVICT_H
#define MS_WEIGHTS_EVICT_H

#include <stdint.h>
#include <stdlib.h>

typedef struct ms_usage {
    int n_layers, n_experts;
    uint32_t *uses;      /* [n_layers][n_experts] */
    uint32_t *visits;    /* [n_layers] */
    uint64_t requests, batches;
} ms_usage;

static inline int ms_usage_init(ms_usage *u, int n_layers, int n_experts)
{
    u->n_layers = n_layers;
    u->n_experts = n_experts;
    u->uses = calloc((size_t)n_layers * (size_t)n_experts, sizeof *u->uses);
    u->visits = calloc((size_t)n_layers, sizeof *u->visits);
    u->requests = u->batches = 0;
    return u->uses && u->visits ? 0 : -1;
}

static inline void ms_usage_free(ms_usage *u)
{
    free(u->uses);
    free(u->visits);
    u->uses = NULL;
    u->visits = NULL;
}

/* Records one visit of a layer that asked for ids[0..n). Counts of a layer
 * are halved every 1024 visits so the estimate follows a drifting workload. */
static inline void ms_usage_visit(ms_usage *u, int layer, const int32_t *ids, int n)
{
    uint32_t *c = u->uses + (size_t)layer * (size_t)u->n_experts;
    if (++u->visits[layer] > 1024) {
        u->visits[layer] /= 2;
        for (int e = 0; e < u->n_experts; e++)
            c[e] /= 2;
    }
    for (int i = 0; i < n; i++)
        c[ids[i]]++;
    u->requests += (uint64_t)n;
    u->batches++;
}

/* Layer visits until the cycle comes back to `layer`, seen from `cur`. */
static inline int ms_usage_distance(const ms_usage *u, int layer, int cur)
{
    int L = u->n_layers, d = (layer - cur + L) % L;
    return d ? d : L;
}

/* Expected layer visits until (layer, e) is needed again, seen from a batch
 * of layer `cur`. Larger = better victim. */
static inline double ms_usage_score(const ms_usage *u, int layer, int e, int cur)
{
    int L = u->n_layers;
    int d = ms_usage_distance(u, layer, cur);
    /* prior: the average share of experts a visit asks for, weight 4 visits */
    double prior = u->batches ? (double)u->requests / (double)u->batches / u->n_experts : 0.5;
    double q = (u->uses[(size_t)layer * (size_t)u->n_experts + (size_t)e] + 4.0 * prior) /
               (u->visits[layer] + 4.0);
    if (q < 1e-6)
        q = 1e-6;
    return d + L * (1.0 / q - 1.0);
}

#endif

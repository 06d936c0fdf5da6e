/* Per-expert routing counts kept across runs (the learned placement): the
 * engine cache writes its ms_usage at close and reads it back at the next
 * start, so that eviction scores start from what earlier runs routed to
 * instead of from nothing, and the experts used far above their layer's
 * average are read into the cache before the first prompt asks for them.
 *
 * The file is text, one header line, one line of visits, then one line of
 * counts per layer:
 *   moestream expert usage 1 layers L experts E bytes B
 *   visits v_0 .. v_{L-1}
 *   u_{l,0} .. u_{l,E-1}                       (L lines)
 * B is the expert store's total bytes: a file written for another model
 * (or another shape of the same one) is refused with what differs. */
#ifndef MS_WEIGHTS_USAGE_FILE_H
#define MS_WEIGHTS_USAGE_FILE_H

#include <stdint.h>

#include "base/error.h"
#include "weights/evict.h"

/* Reads path into u (already sized by ms_usage_init): 1 when read, 0 when
 * there is no such file, -1 with err naming the file, line and what was
 * expected (u unchanged). */
int ms_usage_load(ms_usage *u, const char *path, uint64_t bytes, ms_err *err);

/* Writes u to path (through a temporary file renamed over it, so a reader
 * never sees half a file); -1 with err on failure. */
int ms_usage_save(const ms_usage *u, const char *path, uint64_t bytes, ms_err *err);

/* The experts a layer picked at least MS_USAGE_HOT_RATIO times as often
 * as its average expert, over at least MS_USAGE_HOT_VISITS visits, into out
 * (room for every expert), most used first (by share of their layer's
 * visits); returns how many. */
enum { MS_USAGE_HOT_RATIO = 2, MS_USAGE_HOT_VISITS = 32 };
typedef struct ms_usage_pick {
    double share;
    int32_t layer, expert;
} ms_usage_pick;
int ms_usage_hot(const ms_usage *u, ms_usage_pick *out);

/* Scales each layer's counts down to a prior worth MS_USAGE_PRIOR_VISITS
 * visits (layers with fewer keep theirs), so that the current workload
 * outweighs past runs within a few tokens. At full weight the counts of
 * one earlier run cost the synthetic gpt-oss-20b under 6 GB 2-7% more
 * bytes per token on a prompt other than the one they were learned on; at
 * 8 visits' weight 3% fewer (skewed router) or the same (uniform)
 * (docs/perf.md, "Learned placement"). */
enum { MS_USAGE_PRIOR_VISITS = 8 };
void ms_usage_as_prior(ms_usage *u);

#endif

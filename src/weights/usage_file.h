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

#endif

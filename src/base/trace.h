/* The trace hook: every named intermediate of a forward pass goes through
 * ms_trace_*; nothing is written unless a dump folder was set.
 *
 * Format (shared with tools/oracle dumps): DIR/<name>.f32 or .i32, raw
 * little-endian rows appended call after call, and DIR/manifest.json
 * {name: {"dtype": "f32"|"i32", "shape": [rows, cols]}} rewritten on close.
 * Names follow "L<layer>.<what>" (e.g. "L0.attn_out") or a bare name
 * ("logits"). */
#ifndef MS_BASE_TRACE_H
#define MS_BASE_TRACE_H

#include <stdint.h>

#include "base/error.h"

typedef struct ms_trace ms_trace;

/* NULL dir means tracing off (returns NULL without error). */
int ms_trace_open(const char *dir, ms_trace **out, ms_err *err);
/* Writes the manifest and frees; accepts NULL. */
int ms_trace_close(ms_trace *tr, ms_err *err);

/* Appends rows x cols values under a printf-style name; no-op when tr is
 * NULL. A name's cols must stay the same across calls. */
void ms_trace_f32(ms_trace *tr, const float *v, int64_t rows, int64_t cols,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void ms_trace_i32(ms_trace *tr, const int32_t *v, int64_t rows, int64_t cols,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif

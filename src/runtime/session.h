/* The session's private layout, shared by session.c and session_file.c
 * (saving and loading a session's cache). */
#ifndef MS_RUNTIME_SESSION_H
#define MS_RUNTIME_SESSION_H

#include "base/trace.h"
#include "models/family.h"
#include "moestream.h"

struct ms_session {
    ms_engine *eng;
    int64_t ctx, pos;
    ms_kv *kv;             /* [n_layers] */
    ms_kvfmt kv_fmt;
    ms_scratch scratch;    /* attention's work area, grown on demand */
    float *logits;         /* [vocab]: last evaluated row */
    int have_logits;
    ms_timers timers;
    ms_stats stats;
    ms_trace *trace;
    int32_t *hist;         /* [ctx]: the token at each cached position */
    uint64_t sid;          /* ms_session_id */
    const volatile int *cancel; /* ms_session_set_cancel */
};

/* The statistics of a call of n rows taking dt seconds, row t a position
 * of session ss[seq[t]] (a session's rows consecutive): a session's row
 * counts as decode where it is its only one, else as prefill. */
void ms_session_count_rows(ms_session *const *ss, const int *seq, int64_t n, double dt);

#endif

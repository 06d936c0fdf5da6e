/* Typed access to JSON documents (jansson) with errors that name the file
 * and key. Used for config.json, generation_config.json, index files and
 * safetensors headers.
 *
 * Required getters fail when the key is absent or has the wrong type;
 * optional getters return the default given by the caller only when the key
 * is absent (or null) and still fail on a wrong type. A default belongs to
 * the upstream config class, never to one model size. */
#ifndef MS_BASE_JSON_H
#define MS_BASE_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "base/error.h"

/* Parses a whole file; rejects duplicate keys and invalid UTF-8. The error
 * names the file, line and column. Caller owns the result (json_decref). */
int ms_json_load_file(const char *path, json_t **out, ms_err *err);

/* Parses a buffer; `what` names it in errors (e.g. "shard X header"). */
int ms_json_load_buf(const char *buf, size_t len, const char *what, json_t **out,
                     ms_err *err);

int ms_json_int(const json_t *obj, const char *file, const char *key, int64_t *out,
                ms_err *err);
/* Bounds of config.json values that no release comes near: dimensions,
 * vocabulary, positions. */
#define MS_CFG_MAX_DIM (INT64_C(1) << 24)
#define MS_CFG_MAX_VOCAB (INT64_C(1) << 26)
#define MS_CFG_MAX_POS (INT64_C(1) << 40)

/* An integer key that must lie in [lo, hi]; the error names key, value and
 * range. */
int ms_json_int_in(const json_t *obj, const char *file, const char *key, int64_t lo,
                   int64_t hi, int64_t *out, ms_err *err);
/* The same for an optional key (def when absent; def is checked too). */
int ms_json_int_opt_in(const json_t *obj, const char *file, const char *key, int64_t lo,
                       int64_t hi, int64_t def, int64_t *out, ms_err *err);
/* v (read from key) in [lo, hi], else the same error. */
int ms_json_check_int(const char *file, const char *key, int64_t v, int64_t lo, int64_t hi,
                      ms_err *err);
/* v (read from key) a multiple of m, else an error naming key, value, m and
 * why it must be. */
int ms_json_check_multiple(const char *file, const char *key, int64_t v, int64_t m,
                           const char *why, ms_err *err);
int ms_json_int_opt(const json_t *obj, const char *file, const char *key, int64_t def,
                    int64_t *out, ms_err *err);
/* An integer a config may give under either of two names (releases and
 * HF conversions differ): the one present; both present and different is
 * an error naming both, since which the model was trained with is unknown. */
int ms_json_int_either(const json_t *obj, const char *file, const char *a, const char *b,
                       int64_t *out, ms_err *err);

/* A number read from a config: refused, naming the key, the value and the
 * range, unless finite and in (lo, hi] (lo_open) or [lo, hi]. */
int ms_json_range(const char *file, const char *key, double v, double lo, double hi,
                  int lo_open, ms_err *err);

int ms_json_num(const json_t *obj, const char *file, const char *key, double *out,
                ms_err *err);
int ms_json_num_opt(const json_t *obj, const char *file, const char *key, double def,
                    double *out, ms_err *err);
int ms_json_bool_opt(const json_t *obj, const char *file, const char *key, int def,
                     int *out, ms_err *err);
/* The string stays owned by the document. */
int ms_json_str(const json_t *obj, const char *file, const char *key, const char **out,
                ms_err *err);
/* An integer or an array of integers (e.g. eos_token_id); up to cap values. */
int ms_json_int_list(const json_t *obj, const char *file, const char *key, int64_t *out,
                     int cap, int *n_out, ms_err *err);

#endif

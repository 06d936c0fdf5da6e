/* Typed JSON getters over jansson; every failure names file and key. */
#include <math.h>
#include "base/json.h"

#include <stdlib.h>
#include <string.h>

int ms_json_load_file(const char *path, json_t **out, ms_err *err)
{
    json_error_t je;
    char *text = NULL;
    size_t n = 0;
    *out = NULL;
    if (ms_read_file(path, (size_t)256 << 20, &text, &n, err))
        return -1;
    *out = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!*out)
        return ms_err_set(err, MS_E_FORMAT, "%s: invalid JSON at line %d column %d: %s",
                          path, je.line, je.column, je.text);
    return 0;
}

int ms_json_load_buf(const char *buf, size_t len, const char *what, json_t **out,
                     ms_err *err)
{
    json_error_t je;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!*out)
        return ms_err_set(err, MS_E_FORMAT, "%s: invalid JSON at byte %d: %s", what,
                          je.position, je.text);
    return 0;
}

static const json_t *get(const json_t *obj, const char *key)
{
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return json_is_null(v) ? NULL : v;
}

int ms_json_int(const json_t *obj, const char *file, const char *key, int64_t *out,
                ms_err *err)
{
    const json_t *v = get(obj, key);
    if (!v)
        return ms_err_set(err, MS_E_FORMAT, "%s: missing required key \"%s\"", file, key);
    if (!json_is_integer(v))
        return ms_err_set(err, MS_E_FORMAT, "%s: key \"%s\" must be an integer", file, key);
    *out = json_integer_value(v);
    return 0;
}

int ms_json_int_in(const json_t *obj, const char *file, const char *key, int64_t lo,
                   int64_t hi, int64_t *out, ms_err *err)
{
    if (ms_json_int(obj, file, key, out, err))
        return -1;
    return ms_json_check_int(file, key, *out, lo, hi, err);
}

int ms_json_check_int(const char *file, const char *key, int64_t v, int64_t lo, int64_t hi,
                      ms_err *err)
{
    if (v >= lo && v <= hi)
        return 0;
    return ms_err_set(err, MS_E_FORMAT, "%s: \"%s\" is %lld, expected an integer in [%lld, "
                      "%lld]", file, key, (long long)v, (long long)lo, (long long)hi);
}

int ms_json_check_multiple(const char *file, const char *key, int64_t v, int64_t m,
                           const char *why, ms_err *err)
{
    if (m > 0 && v % m == 0)
        return 0;
    return ms_err_set(err, MS_E_FORMAT, "%s: \"%s\" is %lld, expected a multiple of %lld (%s)",
                      file, key, (long long)v, (long long)m, why);
}

int ms_json_int_opt_in(const json_t *obj, const char *file, const char *key, int64_t lo,
                       int64_t hi, int64_t def, int64_t *out, ms_err *err)
{
    if (ms_json_int_opt(obj, file, key, def, out, err))
        return -1;
    return ms_json_check_int(file, key, *out, lo, hi, err);
}

int ms_json_int_opt(const json_t *obj, const char *file, const char *key, int64_t def,
                    int64_t *out, ms_err *err)
{
    if (!get(obj, key)) {
        *out = def;
        return 0;
    }
    return ms_json_int(obj, file, key, out, err);
}

int ms_json_int_either(const json_t *obj, const char *file, const char *a, const char *b,
                       int64_t *out, ms_err *err)
{
    int64_t va = 0, vb = 0;
    int ha = get(obj, a) != NULL, hb = get(obj, b) != NULL;
    if (ha && ms_json_int(obj, file, a, &va, err))
        return -1;
    if (hb && ms_json_int(obj, file, b, &vb, err))
        return -1;
    if (ha && hb && va != vb)
        return ms_err_set(err, MS_E_FORMAT, "%s: \"%s\" is %lld but \"%s\" is %lld: they name "
                          "the same setting and must agree", file, a, (long long)va, b,
                          (long long)vb);
    if (!ha && !hb)
        return ms_err_set(err, MS_E_FORMAT, "%s: missing required key \"%s\" (or \"%s\")", file,
                          a, b);
    *out = ha ? va : vb;
    return 0;
}

int ms_json_range(const char *file, const char *key, double v, double lo, double hi,
                  int lo_open, ms_err *err)
{
    if (isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi)
        return 0;
    return ms_err_set(err, MS_E_FORMAT, "%s: \"%s\" is %g, expected a finite number in %c%g, "
                      "%g]", file, key, v, lo_open ? '(' : '[', lo, hi);
}

int ms_json_num(const json_t *obj, const char *file, const char *key, double *out,
                ms_err *err)
{
    const json_t *v = get(obj, key);
    if (!v)
        return ms_err_set(err, MS_E_FORMAT, "%s: missing required key \"%s\"", file, key);
    if (!json_is_number(v))
        return ms_err_set(err, MS_E_FORMAT, "%s: key \"%s\" must be a number", file, key);
    *out = json_number_value(v);
    return 0;
}

int ms_json_num_opt(const json_t *obj, const char *file, const char *key, double def,
                    double *out, ms_err *err)
{
    if (!get(obj, key)) {
        *out = def;
        return 0;
    }
    return ms_json_num(obj, file, key, out, err);
}

int ms_json_bool_opt(const json_t *obj, const char *file, const char *key, int def,
                     int *out, ms_err *err)
{
    const json_t *v = get(obj, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return ms_err_set(err, MS_E_FORMAT, "%s: key \"%s\" must be true or false", file,
                          key);
    *out = json_is_true(v);
    return 0;
}

int ms_json_str(const json_t *obj, const char *file, const char *key, const char **out,
                ms_err *err)
{
    const json_t *v = get(obj, key);
    if (!v)
        return ms_err_set(err, MS_E_FORMAT, "%s: missing required key \"%s\"", file, key);
    if (!json_is_string(v))
        return ms_err_set(err, MS_E_FORMAT, "%s: key \"%s\" must be a string", file, key);
    *out = json_string_value(v);
    return 0;
}

int ms_json_int_list(const json_t *obj, const char *file, const char *key, int64_t *out,
                     int cap, int *n_out, ms_err *err)
{
    const json_t *v = get(obj, key);
    *n_out = 0;
    if (!v)
        return 0;
    if (json_is_integer(v)) {
        if (cap < 1)
            return ms_err_set(err, MS_E_FORMAT, "%s: key \"%s\": too many values", file, key);
        out[0] = json_integer_value(v);
        *n_out = 1;
        return 0;
    }
    if (!json_is_array(v))
        return ms_err_set(err, MS_E_FORMAT,
                          "%s: key \"%s\" must be an integer or a list of integers", file, key);
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e))
            return ms_err_set(err, MS_E_FORMAT, "%s: key \"%s\"[%zu] must be an integer",
                              file, key, i);
        if ((int)i >= cap)
            return ms_err_set(err, MS_E_FORMAT, "%s: key \"%s\" has more than %d values",
                              file, key, cap);
        out[i] = json_integer_value(e);
        *n_out = (int)i + 1;
    }
    return 0;
}

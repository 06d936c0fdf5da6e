/* The key-table reader of the families' config.json (config.h). */
#include "models/config.h"

#include <stdint.h>
#include <string.h>

#include "base/json.h"

int ms_cfg_read(const json_t *c, const char *file, const ms_cfg_key *keys, int n, void *dst,
                ms_err *err)
{
    for (int i = 0; i < n; i++) {
        const ms_cfg_key *k = &keys[i];
        char *f = (char *)dst + k->off;
        int rc = 0;
        switch (k->type) {
        case MS_KEY_INT:
            rc = k->required
                     ? ms_json_int_in(c, file, k->key, (int64_t)k->lo, (int64_t)k->hi,
                                      (int64_t *)f, err)
                     : ms_json_int_opt_in(c, file, k->key, (int64_t)k->lo, (int64_t)k->hi,
                                          (int64_t)k->def, (int64_t *)f, err);
            if (rc == 0 && k->lo_open && *(int64_t *)f == 0 && json_object_get(c, k->key))
                rc = ms_err_set(err, MS_E_FORMAT, "%s: \"%s\" is 0; leave it out to have it "
                                "derived, or give a positive value", file, k->key);
            break;
        case MS_KEY_BOOL:
            rc = ms_json_bool_opt(c, file, k->key, (int)k->def, (int *)f, err);
            if (rc == 0 && k->required && !json_object_get(c, k->key))
                rc = ms_err_set(err, MS_E_FORMAT, "%s: missing key \"%s\"", file, k->key);
            break;
        case MS_KEY_NUM:
            rc = k->required ? ms_json_num(c, file, k->key, (double *)f, err)
                             : ms_json_num_opt(c, file, k->key, k->def, (double *)f, err);
            if (rc == 0)
                rc = ms_json_range(file, k->key, *(double *)f, k->lo, k->hi, k->lo_open, err);
            break;
        }
        if (rc)
            return -1;
    }
    return 0;
}

int ms_cfg_check_fixed(const json_t *c, const char *file, const char *family,
                       const ms_cfg_fixed *fixed, int n, ms_err *err)
{
    for (int i = 0; i < n; i++) {
        const json_t *j = json_object_get(c, fixed[i].key);
        const char *v = json_string_value(j);
        if (j && (!v || strcmp(v, fixed[i].want) != 0))
            return ms_err_set(err, MS_E_UNSUPPORTED, "%s: %s is %s%s%s (%s runs \"%s\")", file,
                              fixed[i].key, v ? "\"" : "", v ? v : "not a string", v ? "\"" : "",
                              family, fixed[i].want);
    }
    return 0;
}

void ms_cfg_describe(const ms_cfg_key *keys, int n, const void *src, FILE *out)
{
    for (int i = 0; i < n; i++) {
        const char *f = (const char *)src + keys[i].off;
        switch (keys[i].type) {
        case MS_KEY_INT:
            fprintf(out, "  %s: %lld\n", keys[i].key, (long long)*(const int64_t *)f);
            break;
        case MS_KEY_BOOL:
            fprintf(out, "  %s: %s\n", keys[i].key, *(const int *)f ? "true" : "false");
            break;
        case MS_KEY_NUM:
            fprintf(out, "  %s: %g\n", keys[i].key, *(const double *)f);
            break;
        }
    }
}

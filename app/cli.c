/* Front-end helpers: errors, option values, id files. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const ms_error *err)
{
    fprintf(stderr, "moestream: %s\n", err->msg);
    return err->code == MS_E_ARG ? 2 : 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "moestream %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see `moestream help`)\n");
    return 2;
}

const char *cli_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    if (strcmp(argv[*i], name) != 0)
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    *i += 1;
    return argv[*i];
}

int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_f64(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

int cli_read_ids(const char *path, int32_t **ids, int64_t *n, ms_error *err)
{
    FILE *f = fopen(path, "r");
    *ids = NULL;
    *n = 0;
    if (!f) {
        snprintf(err->msg, sizeof err->msg, "%s: cannot open: %s", path, strerror(errno));
        err->code = MS_E_IO;
        return -1;
    }
    int64_t cap = 0;
    char tok[64];
    int rc = 0;
    while (fscanf(f, "%63s", tok) == 1) {
        int64_t v;
        if (cli_parse_i64(tok, 0, INT32_MAX, &v)) {
            snprintf(err->msg, sizeof err->msg, "%s: token %lld is \"%s\", expected a "
                     "non-negative decimal id", path, (long long)*n, tok);
            err->code = MS_E_ARG;
            rc = -1;
            break;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 256;
            int32_t *p = realloc(*ids, sizeof *p * (size_t)cap);
            if (!p) {
                snprintf(err->msg, sizeof err->msg, "out of memory reading %s", path);
                err->code = MS_E_NOMEM;
                rc = -1;
                break;
            }
            *ids = p;
        }
        (*ids)[(*n)++] = (int32_t)v;
    }
    fclose(f);
    if (rc == 0 && *n == 0) {
        snprintf(err->msg, sizeof err->msg, "%s: no token ids in the file", path);
        err->code = MS_E_ARG;
        rc = -1;
    }
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}

int cli_parse_precision(const char *cmd, const char *v, int *precision)
{
    if (!strcmp(v, "exact"))
        *precision = MS_PRECISION_EXACT;
    else if (!strcmp(v, "fast"))
        *precision = MS_PRECISION_FAST;
    else
        return cli_usage_error(cmd, "--precision expects exact or fast, got \"%s\"", v);
    return 0;
}

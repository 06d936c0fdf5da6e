/* Error values: formatting and allocation helpers. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ms_err_set(ms_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return -1;
}

int ms_err_wrap(ms_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%.255s: %.760s", prefix, old);
    return -1;
}

void *ms_malloc(size_t n, const char *what, ms_err *err)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        ms_err_set(err, MS_E_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *ms_calloc(size_t count, size_t size, const char *what, ms_err *err)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        ms_err_set(err, MS_E_NOMEM, "out of memory allocating %zu x %zu bytes for %s",
                   count, size, what);
    return p;
}

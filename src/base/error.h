/* Errors as values with a sentence.
 *
 * Every function that can fail returns an int status (0 = success, negative
 * = failure) and fills an ms_err with the object concerned, what was expected
 * and what was found. Only front ends print and exit. */
#ifndef MS_BASE_ERROR_H
#define MS_BASE_ERROR_H

#include <stddef.h>

#include "moestream.h"

typedef ms_error ms_err;

/* Sets err (may be NULL) to code + printf-style message; returns -1 so that
 * callers can write `return ms_err_set(err, ...)`. */
int ms_err_set(ms_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message (adds context on the way up). */
int ms_err_wrap(ms_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Allocation helpers that set MS_E_NOMEM with what was being allocated. */
void *ms_malloc(size_t n, const char *what, ms_err *err);
void *ms_calloc(size_t count, size_t size, const char *what, ms_err *err);

#endif

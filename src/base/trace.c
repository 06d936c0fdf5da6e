/* Named-tensor dumps for comparison with the oracle. Off unless opened. */
#include "base/trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct entry {
    char name[96];
    int is_int;
    int64_t rows, cols;
} entry;

struct ms_trace {
    char *dir;
    entry *e;
    int n, cap;
    int failed;            /* first write error, reported at close */
    char why[256];
};

int ms_trace_open(const char *dir, ms_trace **out, ms_err *err)
{
    *out = NULL;
    if (!dir)
        return 0;
    if (mkdir(dir, 0755) && errno != EEXIST)
        return ms_err_set(err, MS_E_IO, "%s: cannot create dump folder: %s", dir,
                          strerror(errno));
    ms_trace *tr = ms_calloc(1, sizeof *tr, "trace", err);
    if (!tr)
        return -1;
    tr->dir = strdup(dir);
    *out = tr;
    return 0;
}

static void put(ms_trace *tr, const void *v, int is_int, int64_t rows, int64_t cols,
                const char *fmt, va_list ap)
{
    char name[96];
    vsnprintf(name, sizeof name, fmt, ap);
    entry *e = NULL;
    for (int i = 0; i < tr->n; i++)
        if (strcmp(tr->e[i].name, name) == 0)
            e = &tr->e[i];
    if (!e) {
        if (tr->n == tr->cap) {
            int cap = tr->cap ? 2 * tr->cap : 64;
            entry *ne = realloc(tr->e, sizeof *ne * (size_t)cap);
            if (!ne)
                return;
            tr->e = ne;
            tr->cap = cap;
        }
        e = &tr->e[tr->n++];
        snprintf(e->name, sizeof e->name, "%s", name);
        e->is_int = is_int;
        e->cols = cols;
        e->rows = 0;
    }
    if (e->cols != cols && !tr->failed) {
        tr->failed = 1;
        snprintf(tr->why, sizeof tr->why, "trace %.90s: %lld columns, then %lld", name,
                 (long long)e->cols, (long long)cols);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", tr->dir, name, is_int ? "i32" : "f32");
    FILE *f = fopen(path, e->rows ? "ab" : "wb");
    if (!f || fwrite(v, 4, (size_t)(rows * cols), f) != (size_t)(rows * cols)) {
        if (!tr->failed) {
            tr->failed = 1;
            snprintf(tr->why, sizeof tr->why, "%.200s: write failed", path);
        }
    }
    if (f)
        fclose(f);
    e->rows += rows;
}

void ms_trace_f32(ms_trace *tr, const float *v, int64_t rows, int64_t cols,
                  const char *fmt, ...)
{
    if (!tr)
        return;
    va_list ap;
    va_start(ap, fmt);
    put(tr, v, 0, rows, cols, fmt, ap);
    va_end(ap);
}

void ms_trace_i32(ms_trace *tr, const int32_t *v, int64_t rows, int64_t cols,
                  const char *fmt, ...)
{
    if (!tr)
        return;
    va_list ap;
    va_start(ap, fmt);
    put(tr, v, 1, rows, cols, fmt, ap);
    va_end(ap);
}

int ms_trace_close(ms_trace *tr, ms_err *err)
{
    if (!tr)
        return 0;
    int rc = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", tr->dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "{\n");
        for (int i = 0; i < tr->n; i++)
            fprintf(f, "  \"%s\": {\"dtype\": \"%s\", \"shape\": [%lld, %lld]}%s\n",
                    tr->e[i].name, tr->e[i].is_int ? "i32" : "f32",
                    (long long)tr->e[i].rows, (long long)tr->e[i].cols,
                    i + 1 < tr->n ? "," : "");
        fprintf(f, "}\n");
        if (fclose(f))
            rc = ms_err_set(err, MS_E_IO, "%s: write failed", path);
    } else {
        rc = ms_err_set(err, MS_E_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    if (tr->failed)
        rc = ms_err_set(err, MS_E_IO, "%s", tr->why);
    free(tr->e);
    free(tr->dir);
    free(tr);
    return rc;
}

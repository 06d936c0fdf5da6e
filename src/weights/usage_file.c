/* Per-expert routing counts kept across runs: the text format of
 * usage_file.h, read strictly (a count out of place is an error, not a
 * guess) and written whole through a temporary file; and what a start makes
 * of the counts (the hot experts, the prior). */
#include "weights/usage_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAGIC "moestream expert usage 1"

/* Reads n unsigned counts of one line into out; -1 unless the line holds
 * exactly n of them, each below 2^32. */
static int read_counts(FILE *f, uint32_t *out, int n, const char *prefix)
{
    if (prefix) {
        char word[16];
        if (fscanf(f, " %15s", word) != 1 || strcmp(word, prefix) != 0)
            return -1;
    }
    for (int i = 0; i < n; i++) {
        unsigned long long v;
        int c;
        while ((c = fgetc(f)) == ' ' || c == '\t')
            ;
        if (c == EOF || c == '\n' || c < '0' || c > '9')
            return -1;
        ungetc(c, f);
        if (fscanf(f, "%llu", &v) != 1 || v > UINT32_MAX)
            return -1;
        out[i] = (uint32_t)v;
    }
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\r')
        ;
    return c == '\n' || c == EOF ? 0 : -1;
}

int ms_usage_load(ms_usage *u, const char *path, uint64_t bytes, ms_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        return ms_err_set(err, MS_E_IO, "%s: cannot read the expert usage: %s", path,
                          strerror(errno));
    }
    int layers = 0, experts = 0;
    unsigned long long b = 0;
    char line[256];
    if (!fgets(line, sizeof line, f) ||
        sscanf(line, MAGIC " layers %d experts %d bytes %llu", &layers, &experts, &b) != 3) {
        fclose(f);
        return ms_err_set(err, MS_E_FORMAT, "%s:1: expected \"" MAGIC " layers L experts E "
                          "bytes B\"", path);
    }
    if (layers != u->n_layers || experts != u->n_experts || b != bytes) {
        fclose(f);
        return ms_err_set(err, MS_E_MISMATCH, "%s: written for %d layers x %d experts of %llu "
                          "bytes, this model has %d x %d of %llu", path, layers, experts, b,
                          u->n_layers, u->n_experts, (unsigned long long)bytes);
    }
    size_t n = (size_t)layers * (size_t)experts;
    uint32_t *visits = malloc(sizeof *visits * (size_t)layers);
    uint32_t *uses = malloc(sizeof *uses * n);
    int rc = visits && uses ? 0 : ms_err_set(err, MS_E_NOMEM, "out of memory reading %s", path);
    if (rc == 0 && read_counts(f, visits, layers, "visits"))
        rc = ms_err_set(err, MS_E_FORMAT, "%s:2: expected \"visits\" and %d counts", path,
                        layers);
    for (int l = 0; rc == 0 && l < layers; l++) {
        uint32_t *c = uses + (size_t)l * (size_t)experts;
        if (read_counts(f, c, experts, NULL))
            rc = ms_err_set(err, MS_E_FORMAT, "%s:%d: expected %d counts of layer %d", path,
                            l + 3, experts, l);
    }
    fclose(f);
    if (rc == 0) {
        uint64_t requests = 0, batches = 0;
        for (size_t i = 0; i < n; i++)
            requests += uses[i];
        for (int l = 0; l < layers; l++)
            batches += visits[l];
        memcpy(u->uses, uses, sizeof *uses * n);
        memcpy(u->visits, visits, sizeof *visits * (size_t)layers);
        u->requests = requests;
        u->batches = batches;
    }
    free(uses);
    free(visits);
    return rc ? -1 : 1;
}

int ms_usage_save(const ms_usage *u, const char *path, uint64_t bytes, ms_err *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp)
        return ms_err_set(err, MS_E_ARG, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return ms_err_set(err, MS_E_IO, "%s: cannot write the expert usage: %s", tmp,
                          strerror(errno));
    fprintf(f, MAGIC " layers %d experts %d bytes %llu\nvisits", u->n_layers, u->n_experts,
            (unsigned long long)bytes);
    for (int l = 0; l < u->n_layers; l++)
        fprintf(f, " %u", u->visits[l]);
    for (int l = 0; l < u->n_layers; l++) {
        fputc('\n', f);
        for (int e = 0; e < u->n_experts; e++)
            fprintf(f, e ? " %u" : "%u", u->uses[(size_t)l * (size_t)u->n_experts + (size_t)e]);
    }
    fputc('\n', f);
    int bad = ferror(f);
    if (fclose(f) || bad || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return ms_err_set(err, MS_E_IO, "%s: cannot write the expert usage: %s", path,
                          strerror(e));
    }
    return 0;
}

static int hotter(const void *a, const void *b)
{
    const ms_usage_pick *x = a, *y = b;
    if (x->share != y->share)
        return x->share < y->share ? 1 : -1;
    return x->layer != y->layer ? x->layer - y->layer : x->expert - y->expert;
}

int ms_usage_hot(const ms_usage *u, ms_usage_pick *out)
{
    int n = 0;
    for (int l = 0; l < u->n_layers; l++) {
        const uint32_t *cnt = u->uses + (size_t)l * (size_t)u->n_experts;
        uint64_t sum = 0;
        for (int e = 0; e < u->n_experts; e++)
            sum += cnt[e];
        if (u->visits[l] < MS_USAGE_HOT_VISITS || !sum)
            continue;
        double avg = (double)sum / u->n_experts;
        for (int e = 0; e < u->n_experts; e++)
            if (cnt[e] >= MS_USAGE_HOT_RATIO * avg)
                out[n++] = (ms_usage_pick){(double)cnt[e] / u->visits[l], l, e};
    }
    qsort(out, (size_t)n, sizeof *out, hotter);
    return n;
}

void ms_usage_as_prior(ms_usage *u)
{
    u->requests = u->batches = 0;
    for (int l = 0; l < u->n_layers; l++) {
        uint32_t v = u->visits[l], *cnt = u->uses + (size_t)l * (size_t)u->n_experts;
        if (v > MS_USAGE_PRIOR_VISITS) {
            for (int e = 0; e < u->n_experts; e++)
                cnt[e] = (uint32_t)(((uint64_t)cnt[e] * MS_USAGE_PRIOR_VISITS + v / 2) / v);
            u->visits[l] = v = MS_USAGE_PRIOR_VISITS;
        }
        for (int e = 0; e < u->n_experts; e++)
            u->requests += cnt[e];
        u->batches += v;
    }
}

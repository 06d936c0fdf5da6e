/* Offline replay of expert routing traces: LRU, the engine's policy, the
 * best fixed set and Belady's optimum for a given number of cache slots, on
 * the exact request sequence the engine issued (one line "B <layer>
 * <ids...>" per batch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "weights/evict.h"

typedef struct trace {
    int32_t *key;          /* layer * n_experts + expert, per request */
    int64_t n, cap;
    int32_t *batch;        /* batch index per request */
    int n_keys, n_layers, n_experts;
    uint64_t slot_bytes;
    int64_t slots;          /* the cache size the engine ran with (header) */
    int64_t skip;           /* requests that only warm the cache: not counted */
} trace;

static int push(trace *t, int32_t key, int32_t batch)
{
    if (t->n == t->cap) {
        int64_t cap = t->cap ? 2 * t->cap : 4096;
        int32_t *k = realloc(t->key, sizeof *k * (size_t)cap);
        if (!k)
            return -1;
        t->key = k;
        int32_t *b = realloc(t->batch, sizeof *b * (size_t)cap);
        if (!b)
            return -1;
        t->batch = b;
        t->cap = cap;
    }
    t->key[t->n] = key;
    t->batch[t->n++] = batch;
    return 0;
}

static int load(const char *path, trace *t, ms_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ms_err_set(err, MS_E_IO, "%s: cannot open the trace", path);
    char line[1 << 16];
    int layers = 0, experts = 0, lineno = 0, nb = 0, rc = 0;
    unsigned long long slot = 0, eb = 0;
    long long hslots = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#') {
            if (sscanf(line, "# moestream expert trace v1 layers=%d experts=%d slot_bytes=%llu "
                       "expert_bytes=%llu slots=%lld", &layers, &experts, &slot, &eb,
                       &hslots) < 4)
                rc = ms_err_set(err, MS_E_FORMAT, "%s:%d: not a moestream trace header", path,
                                lineno);
            t->slot_bytes = slot ? slot : (eb + 4095) / 4096 * 4096;
            t->slots = hslots;
            continue;
        }
        char *p = line;
        int layer, used;
        if (!layers || sscanf(p, "B %d%n", &layer, &used) != 1 || layer < 0 || layer >= layers) {
            rc = ms_err_set(err, MS_E_FORMAT, "%s:%d: expected \"B <layer> <expert>...\" after "
                            "the header", path, lineno);
            break;
        }
        p += used;
        int e;
        while (rc == 0 && sscanf(p, " %d%n", &e, &used) == 1) {
            if (e < 0 || e >= experts)
                rc = ms_err_set(err, MS_E_FORMAT, "%s:%d: expert %d out of range", path,
                                lineno, e);
            else if (push(t, layer * experts + e, nb))
                rc = ms_err_set(err, MS_E_NOMEM, "out of memory reading %s", path);
            p += used;
        }
        nb++;
    }
    fclose(f);
    t->n_keys = layers * experts;
    t->n_layers = layers;
    t->n_experts = experts;
    return rc;
}

/* The engine's policy (evict.h) replayed on the trace. As in the store, the
 * batch's hits are attached first and kept until served; misses take the
 * slot with the largest expected distance to its next use, which may be an
 * expert this batch already served. cached[k] < 0: absent; 1: pinned hit. */
static int64_t engine_hits(const trace *t, int64_t slots, int64_t *cached, int n_layers,
                           int n_experts)
{
    ms_usage u;
    if (ms_usage_init(&u, n_layers, n_experts))
        return -1;
    int64_t hits = 0, used = 0;
    for (int64_t i = 0; i < t->n;) {
        int64_t j = i; /* the batch is t->key[i..j) */
        while (j < t->n && t->batch[j] == t->batch[i])
            j++;
        int layer = t->key[i] / n_experts;
        int32_t ids[4096];
        int n = 0;
        for (int64_t q = i; q < j && n < 4096; q++)
            ids[n++] = t->key[q] % n_experts;
        ms_usage_visit(&u, layer, ids, n);
        for (int64_t q = i; q < j; q++)
            if (cached[t->key[q]] >= 0) {
                cached[t->key[q]] = 1;
                hits += q >= t->skip;
            }
        for (int64_t q = i; q < j; q++) {
            int32_t k = t->key[q];
            if (cached[k] == 1) {
                cached[k] = 0; /* served: evictable again */
                continue;
            }
            if (used < slots) {
                used++;
            } else {
                int32_t v = -1;
                double best = 0;
                for (int32_t c = 0; c < t->n_keys; c++) {
                    if (cached[c] != 0)
                        continue;
                    double sc = ms_usage_score(&u, c / n_experts, c % n_experts, layer);
                    if (v < 0 || sc > best) {
                        v = c;
                        best = sc;
                    }
                }
                if (v < 0)
                    continue; /* every slot holds a pending hit: read through */
                cached[v] = -1;
            }
            cached[k] = 0;
        }
        i = j;
    }
    ms_usage_free(&u);
    return hits;
}

/* Plain LRU, for comparison. */
static int64_t lru_hits(const trace *t, int64_t slots, int64_t *stamp)
{
    int64_t hits = 0, used = 0, clock = 0;
    for (int64_t i = 0; i < t->n; i++) {
        int32_t k = t->key[i];
        if (stamp[k] >= 0) {
            hits += i >= t->skip;
        } else if (used < slots) {
            used++;
        } else {
            int32_t v = -1;
            for (int32_t j = 0; j < t->n_keys; j++)
                if (stamp[j] >= 0 && (v < 0 || stamp[j] < stamp[v]))
                    v = j;
            stamp[v] = -1;
        }
        stamp[k] = ++clock;
    }
    return hits;
}

/* The best fixed set: the `slots` experts that gain most from a slot of
 * their own over the whole trace (requests after skip, less one for the
 * read of each first requested after it), each read on its first request
 * and never evicted; the others are read through, into no slot. When the
 * requests are independent draws (the independent reference model) no
 * policy that knows how often each expert is used, but not when, does
 * better; so where the engine's policy comes close to it, the gap to
 * Belady is what knowing the order is worth. Reading through, it can
 * exceed the Belady above, which gives every read a slot. */
static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int64_t fixed_hits(const trace *t, int64_t slots, int64_t *gain, int64_t *first)
{
    for (int32_t j = 0; j < t->n_keys; j++) {
        gain[j] = 0;
        first[j] = -1;
    }
    for (int64_t i = 0; i < t->n; i++) {
        int32_t k = t->key[i];
        if (first[k] < 0)
            first[k] = i;
        gain[k] += i >= t->skip && i != first[k];
    }
    qsort(gain, (size_t)t->n_keys, sizeof *gain, cmp_desc);
    int64_t hits = 0;
    for (int64_t j = 0; j < slots && j < t->n_keys; j++)
        hits += gain[j];
    return hits;
}

/* Belady: on a miss with a full cache, evict the expert whose next request
 * is furthest away (or never comes). */
static int64_t opt_hits(const trace *t, int64_t slots, int64_t *next_use, int64_t *cached)
{
    int64_t *last = cached; /* reuse: first as "next position of key" */
    for (int32_t j = 0; j < t->n_keys; j++)
        last[j] = INT64_MAX;
    for (int64_t i = t->n - 1; i >= 0; i--) {
        next_use[i] = last[t->key[i]];
        last[t->key[i]] = i;
    }
    for (int32_t j = 0; j < t->n_keys; j++)
        cached[j] = -1; /* -1: absent, else the position of its next request */
    int64_t hits = 0, used = 0;
    for (int64_t i = 0; i < t->n; i++) {
        int32_t k = t->key[i];
        if (cached[k] >= 0) {
            hits += i >= t->skip;
        } else if (used < slots) {
            used++;
        } else {
            int32_t v = -1;
            for (int32_t j = 0; j < t->n_keys; j++)
                if (cached[j] >= 0 && (v < 0 || cached[j] > cached[v]))
                    v = j;
            cached[v] = -1;
        }
        cached[k] = next_use[i];
    }
    return hits;
}

int ms_replay(const char *trace_path, int64_t slots, int64_t ram, ms_replay_result *out,
              ms_error *err)
{
    return ms_replay_after(trace_path, 0, slots, ram, out, err);
}

int ms_replay_after(const char *trace_path, int64_t skip, int64_t slots, int64_t ram,
                    ms_replay_result *out, ms_error *err)
{
    trace t = {0};
    memset(out, 0, sizeof *out);
    int rc = load(trace_path, &t, err);
    if (rc == 0 && (skip < 0 || skip >= t.n))
        rc = ms_err_set(err, MS_E_ARG, "replay: %s has %lld requests, none after the first %lld",
                        trace_path, (long long)t.n, (long long)skip);
    t.skip = skip;
    if (rc == 0 && slots <= 0 && ram <= 0) {
        slots = t.slots; /* the budget the engine itself ran with */
        if (slots <= 0)
            rc = ms_err_set(err, MS_E_ARG, "replay: %s was recorded with the experts in the "
                            "page cache, which has no cache budget: give one (--ram SIZE or "
                            "--slots N)", trace_path);
    }
    if (rc == 0 && slots <= 0)
        slots = t.slot_bytes ? (int64_t)((uint64_t)ram / t.slot_bytes) : 0;
    if (rc == 0 && slots <= 0)
        rc = ms_err_set(err, MS_E_ARG, "replay: a cache of %lld bytes holds no expert of %llu "
                        "bytes", (long long)ram, (unsigned long long)t.slot_bytes);
    int64_t *a = NULL, *b = NULL;
    if (rc == 0) {
        a = malloc(sizeof *a * (size_t)(t.n > t.n_keys ? t.n : t.n_keys));
        b = malloc(sizeof *b * (size_t)t.n_keys);
        if (!a || !b)
            rc = ms_err_set(err, MS_E_NOMEM, "out of memory replaying %s", trace_path);
    }
    if (rc == 0) {
        for (int32_t j = 0; j < t.n_keys; j++)
            b[j] = -1;
        double counted = (double)(t.n - skip);
        out->requests = t.n - skip;
        out->slots = slots;
        out->lru_hit = (double)lru_hits(&t, slots, b) / counted;
        for (int32_t j = 0; j < t.n_keys; j++)
            b[j] = -1;
        int64_t eh = engine_hits(&t, slots, b, t.n_layers, t.n_experts);
        if (eh < 0)
            rc = ms_err_set(err, MS_E_NOMEM, "out of memory replaying %s", trace_path);
        out->engine_hit = (double)eh / counted;
        out->fixed_hit = (double)fixed_hits(&t, slots, a, b) / counted;
        out->opt_hit = (double)opt_hits(&t, slots, a, b) / counted;
    }
    free(a);
    free(b);
    free(t.key);
    free(t.batch);
    return rc;
}

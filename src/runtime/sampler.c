/* Token sampling: greedy, temperature, top-k, top-p, min-p, seeded RNG.
 * The RNG state lives in the sampler (base/rng.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/rng.h"
#include "runtime/engine.h"

struct ms_sampler {
    ms_sampling p;
    int32_t vocab;
    ms_rng rng;
    float *prob;
    int32_t *idx, *idx2;     /* candidates in order; the radix sort's other buffer */
    uint32_t *key, *key2;    /* their sort keys, and the other buffer */
    uint32_t *seen;     /* [vocab] occurrences, for the penalties */
    int penalised;
    int32_t limit;      /* draw only ids < limit */
};

void ms_engine_default_sampling(const ms_engine *eng, ms_sampling *out)
{
    const json_t *g = eng->ck->gen_config;
    const char *f = "generation_config.json";
    double t = 1.0, p = 1.0;
    int64_t k = 0;
    int do_sample = 1;
    memset(out, 0, sizeof *out);
    if (g) {
        /* a malformed optional value keeps the default; load already parsed the file */
        if (ms_json_num_opt(g, f, "temperature", 1.0, &t, NULL))
            t = 1.0;
        if (ms_json_num_opt(g, f, "top_p", 1.0, &p, NULL))
            p = 1.0;
        if (ms_json_int_opt(g, f, "top_k", 0, &k, NULL))
            k = 0;
        if (ms_json_bool_opt(g, f, "do_sample", 1, &do_sample, NULL))
            do_sample = 1;
    }
    double rp = 1.0;
    if (g && ms_json_num_opt(g, f, "repetition_penalty", 1.0, &rp, NULL))
        rp = 1.0;
    out->temperature = do_sample ? (float)t : 0.0f;
    out->top_p = (float)p;
    out->top_k = (int32_t)k;
    out->min_p = 0.0f;
    out->repetition_penalty = (float)rp;
}

int ms_sampler_open(const ms_sampling *p, int32_t vocab, ms_sampler **out, ms_error *err)
{
    *out = NULL;
    if (!(p->temperature >= 0) || !(p->top_p > 0 && p->top_p <= 1) ||
        !(p->min_p >= 0 && p->min_p <= 1) || p->top_k < 0 || !(p->repetition_penalty >= 0))
        return ms_err_set(err, MS_E_ARG, "sampling: temperature %g must be >= 0, top_p %g in "
                          "(0, 1], min_p %g in [0, 1], top_k %d >= 0", (double)p->temperature,
                          (double)p->top_p, (double)p->min_p, p->top_k);
    ms_sampler *s = ms_calloc(1, sizeof *s, "sampler", err);
    if (!s)
        return -1;
    s->p = *p;
    s->vocab = vocab;
    s->limit = vocab;
    ms_rng_seed(&s->rng, p->seed);
    s->prob = ms_malloc(sizeof *s->prob * (size_t)vocab, "sampler", err);
    s->idx = s->prob ? ms_malloc(sizeof *s->idx * (size_t)vocab, "sampler", err) : NULL;
    s->idx2 = s->idx ? ms_malloc(sizeof *s->idx2 * (size_t)vocab, "sampler", err) : NULL;
    s->key = s->idx2 ? ms_malloc(sizeof *s->key * (size_t)vocab, "sampler", err) : NULL;
    s->key2 = s->key ? ms_malloc(sizeof *s->key2 * (size_t)vocab, "sampler", err) : NULL;
    s->seen = s->key2 ? ms_calloc((size_t)vocab, sizeof *s->seen, "sampler", err) : NULL;
    s->penalised = (p->repetition_penalty > 0 && p->repetition_penalty != 1) ||
                   p->presence_penalty != 0 || p->frequency_penalty != 0;
    if (!s->seen) {
        ms_sampler_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void ms_sampler_close(ms_sampler *s)
{
    if (!s)
        return;
    free(s->prob);
    free(s->idx);
    free(s->idx2);
    free(s->key);
    free(s->key2);
    free(s->seen);
    free(s);
}

/* The lowest id of the largest value, as a scan from id 0 that moves on a
 * strictly larger value finds it (a NaN is never larger; one at id 0 is
 * kept). Sixteen running maxima (a loop the compiler turns into vmaxps),
 * then the first id that holds their largest: one scalar chain over a
 * 201,088-id vocabulary took ~0.5 ms a token, ~0.5% of a decode. */
static int32_t argmax(const float *v, int32_t n)
{
    enum { LANES = 16 };
    if (n <= 0 || isnan(v[0]))
        return 0;
    float m[LANES], best = v[0];
    for (int j = 0; j < LANES; j++)
        m[j] = v[0];
    int32_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            m[j] = v[i + j] > m[j] ? v[i + j] : m[j];
    for (int j = 0; j < LANES; j++)
        best = m[j] > best ? m[j] : best;
    for (; i < n; i++)
        best = v[i] > best ? v[i] : best;
    for (i = 0; i < n - 1 && v[i] != best; i++) /* best is one of the values, not a NaN */
        ;
    return i;
}

/* A float's sort key: unsigned keys in ascending order are the values in
 * descending order (-0 the same as +0). */
static uint32_t desc_key(float f)
{
    uint32_t u;
    if (f == 0)
        f = 0; /* -0 as +0: equal values are ties */
    memcpy(&u, &f, sizeof u);
    u = u & 0x80000000u ? ~u : u | 0x80000000u; /* ascending order of values */
    return ~u;
}

/* The n candidates s->idx[] (ascending ids) in descending value, ties by
 * id: a stable LSD radix sort on their keys, a byte a pass (a pass is
 * skipped where every key has the same byte). The order is the total order
 * a comparison sort by (value desc, id asc) gives; qsort_r with such a
 * comparator took ~8-28 ms for a 45k-200k head, this ~1. */
static void sort_desc(ms_sampler *s, int32_t n)
{
    int32_t *idx = s->idx, *to_idx = s->idx2;
    uint32_t *key = s->key, *to_key = s->key2;
    for (int32_t i = 0; i < n; i++)
        key[i] = desc_key(s->prob[idx[i]]);
    for (int shift = 0; shift < 32; shift += 8) {
        int32_t count[257] = {0};
        for (int32_t i = 0; i < n; i++)
            count[((key[i] >> shift) & 0xFF) + 1]++;
        if (count[((key[0] >> shift) & 0xFF) + 1] == n)
            continue; /* one byte value: the order stands */
        for (int b = 0; b < 256; b++)
            count[b + 1] += count[b];
        for (int32_t i = 0; i < n; i++) {
            int32_t at = count[(key[i] >> shift) & 0xFF]++;
            to_idx[at] = idx[i];
            to_key[at] = key[i];
        }
        int32_t *ti = idx;
        idx = to_idx;
        to_idx = ti;
        uint32_t *tk = key;
        key = to_key;
        to_key = tk;
    }
    if (idx != s->idx)
        memcpy(s->idx, idx, sizeof *idx * (size_t)n);
}

void ms_sampler_accept(ms_sampler *s, const int32_t *ids, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < s->vocab)
            s->seen[ids[i]]++;
}

void ms_sampler_limit(ms_sampler *s, int32_t n)
{
    s->limit = n > 0 && n < s->vocab ? n : s->vocab;
}

void ms_sampler_reset(ms_sampler *s)
{
    memset(s->seen, 0, sizeof *s->seen * (size_t)s->vocab);
}

/* The logits after the penalties, in s->prob. */
static void penalise(ms_sampler *s, const float *logits)
{
    float rp = s->p.repetition_penalty;
    for (int32_t i = 0; i < s->limit; i++) {
        float l = logits[i];
        if (s->seen[i]) {
            if (rp > 0 && rp != 1)
                l = l > 0 ? l / rp : l * rp;
            l -= s->p.presence_penalty + s->p.frequency_penalty * (float)s->seen[i];
        }
        s->prob[i] = l;
    }
}

/* A draw from all n ids (scaled logits in s->prob, m their largest, sum
 * their weights exp(l - m), added in id order): nothing is cut, so no
 * order is needed, and the draw walks the ids in id order, as the sum was
 * made. (Walking them best first, as the cuts below must, had sorted the
 * whole vocabulary: ~35 ms a token for 201,088 ids, 14% of the samples of a
 * gpt-oss-20b server at its defaults, temperature 1 and top-p 1.) Past
 * every id of nonzero weight, rounding alone can leave the draw unspent:
 * the last such id is taken. */
static int32_t draw_all(ms_sampler *s, int32_t n, float m, double sum)
{
    double r = (double)(ms_rng_next(&s->rng) >> 11) * 0x1.0p-53 * sum;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        double e = exp((double)(s->prob[i] - m));
        if (e > 0)
            last = i;
        r -= e;
        if (r < 0)
            return i;
    }
    return last;
}

int32_t ms_sampler_next(ms_sampler *s, const float *logits)
{
    int32_t n = s->limit; /* ids past the limit are simply not candidates */
    if (s->penalised) {
        penalise(s, logits);
        logits = s->prob;
    }
    if (s->p.temperature == 0)
        return argmax(logits, n);
    /* Only the head of the distribution is ever sorted: the candidates within
     * `span` of the best logit, widened until they hold the top-k set and
     * the cut of top-p / min-p (a sorted 200k vocabulary cost ~30 ms a
     * token). The normalizer over all ids is summed in id order. */
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        s->prob[i] = logits[i] / s->p.temperature;
        m = s->prob[i] > m ? s->prob[i] : m;
    }
    int32_t keep = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
    double sum = 0;
    if (keep == n)
        for (int32_t i = 0; i < n; i++)
            sum += exp((double)(s->prob[i] - m));
    if (keep == n && s->p.top_p >= 1 && s->p.min_p <= 0)
        return draw_all(s, n, m, sum);
    int32_t cut = -1;
    for (float span = 4.0f;; span *= 4.0f) {
        float t = m - span;
        int32_t nc = 0;
        for (int32_t i = 0; i < n; i++)
            if (s->prob[i] >= t || !(span < 1e30f))
                s->idx[nc++] = i;
        int all = nc == n;
        if (keep < n && nc < keep && !all)
            continue; /* the top-k set is not all in (without top-k, any head is a prefix) */
        sort_desc(s, nc);
        if (keep < n) {
            sum = 0;
            for (int32_t i = 0; i < keep; i++)
                sum += exp((double)(s->prob[s->idx[i]] - m));
        }
        /* top-p: the smallest prefix whose mass reaches p; min-p: relative floor */
        double cum = 0, top = 1.0 / sum;
        int32_t lim = nc < keep ? nc : keep;
        for (int32_t i = 0; i < lim; i++) {
            double pi = exp((double)(s->prob[s->idx[i]] - m)) / sum;
            if (pi < s->p.min_p * top) {
                cut = i;
                break;
            }
            cum += pi;
            if (cum >= s->p.top_p) {
                cut = i + 1;
                break;
            }
        }
        if (cut < 0 && (lim == keep || all))
            cut = lim;
        if (cut >= 0)
            break;
    }
    cut = cut < 1 ? 1 : cut;
    double total = 0;
    for (int32_t i = 0; i < cut; i++)
        total += exp((double)(s->prob[s->idx[i]] - m));
    double r = (double)(ms_rng_next(&s->rng) >> 11) * 0x1.0p-53 * total;
    for (int32_t i = 0; i < cut; i++) {
        r -= exp((double)(s->prob[s->idx[i]] - m));
        if (r < 0)
            return s->idx[i];
    }
    return s->idx[cut - 1];
}

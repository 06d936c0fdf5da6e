/* The sampler draws only what its settings allow, with the frequencies the
 * distribution gives: top-k keeps the k best ids, top-p the smallest set of
 * best ids whose mass reaches p, min-p drops ids below p times the best;
 * greedy is the argmax; a seed fixes the draws. Expectations are worked out
 * by hand from the logits; the head-only sorting must not change any of it,
 * on peaked and on flat 200k-id distributions alike; a draw with nothing
 * cut is the one a walk of the ids in id order gives. */
#include <math.h>

#include "test.h"
#include "moestream.h"
#include "base/rng.h" /* the draws' stream, to replay them here */

#define DRAWS 1000

static ms_sampler *open_s(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed,
                          int32_t vocab)
{
    ms_sampling p = {.temperature = temp, .top_k = top_k, .top_p = top_p, .min_p = min_p,
                     .seed = seed, .repetition_penalty = 1};
    ms_sampler *s = NULL;
    ms_error err = {0};
    if (ms_sampler_open(&p, vocab, &s, &err))
        printf("     sampler: %s\n", err.msg);
    return s;
}

/* logits: id i has log-weight w[i]; the rest of the vocabulary far below */
static float *peaked(int32_t vocab, const float *w, int n)
{
    float *l = malloc(sizeof *l * (size_t)vocab);
    for (int32_t i = 0; i < vocab; i++)
        l[i] = -40.0f - (float)(i % 7);
    for (int i = 0; i < n; i++)
        l[i * 1000 + 17] = w[i]; /* spread over the ids, not the first ones */
    return l;
}

static void test_top_k_top_p_min_p(void)
{
    const int32_t V = 20000;
    const float w[4] = {2.0f, 1.0f, 0.0f, -1.0f}; /* probabilities ~ .64 .24 .09 .03 */
    float *l = peaked(V, w, 4);
    struct { int32_t k; float p, mp; int allowed; } cases[] = {
        {2, 1.0f, 0.0f, 2},    /* top-k 2 */
        {0, 0.8f, 0.0f, 2},    /* .64 < .8 <= .64 + .24 */
        {0, 0.5f, 0.0f, 1},    /* the best alone reaches .5 */
        {0, 0.95f, 0.0f, 3},   /* .64 + .24 + .09 = .97 */
        {0, 1.0f, 0.1f, 3},    /* min-p .1: .03 / .64 < .1 drops the fourth */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ms_sampler *s = open_s(1.0f, cases[c].k, cases[c].p, cases[c].mp, 7, V);
        int count[4] = {0}, other = 0;
        for (int d = 0; s && d < DRAWS; d++) {
            int32_t id = ms_sampler_next(s, l);
            if (id % 1000 == 17 && id / 1000 < 4)
                count[id / 1000]++;
            else
                other++;
        }
        int seen = 0;
        for (int i = 0; i < 4; i++)
            seen += count[i] > 0;
        CHECK(other == 0 && seen == cases[c].allowed,
              "case %zu: %d ids seen (want %d), %d outside: %d %d %d %d", c, seen,
              cases[c].allowed, other, count[0], count[1], count[2], count[3]);
        if (c == 1) /* renormalized over two: .64 / .88 = .73 */
            CHECK(count[0] > DRAWS * 0.64 && count[0] < DRAWS * 0.82, "top-p 0.8: %d of %d",
                  count[0], DRAWS);
        ms_sampler_close(s);
    }
    free(l);
}

static void test_flat_and_seeded(void)
{
    const int32_t V = 200000;
    float *l = malloc(sizeof *l * V);
    for (int32_t i = 0; i < V; i++)
        l[i] = (float)((i * 2654435761u) % 1000) * 1e-3f; /* flat: every id counts */
    ms_sampler *a = open_s(1.0f, 0, 0.9f, 0.0f, 42, V), *b = open_s(1.0f, 0, 0.9f, 0.0f, 42, V);
    int same = 1, spread = 0;
    int32_t first = -1;
    for (int d = 0; a && b && d < 20; d++) {
        int32_t x = ms_sampler_next(a, l), y = ms_sampler_next(b, l);
        same &= x == y;
        if (first < 0)
            first = x;
        spread |= x != first;
    }
    CHECK(same, "the same seed gives other draws");
    CHECK(spread, "a flat distribution gives one id only");
    ms_sampler *g = open_s(0.0f, 0, 1.0f, 0.0f, 1, V);
    l[123457] = 5.0f;
    CHECK(g && ms_sampler_next(g, l) == 123457, "greedy is the argmax");
    ms_sampler_close(a);
    ms_sampler_close(b);
    ms_sampler_close(g);
    free(l);
}

/* The argmax a plain scan gives: the lowest id of the largest value (a
 * NaN never larger, one at id 0 kept). */
static int32_t scan_argmax(const float *v, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[b])
            b = i;
    return b;
}

/* Greedy picks what the scan picks: ties at any distance (in one lane of a
 * vector and in different ones), zeros of both signs, NaNs, infinities,
 * the best in the ragged tail, vocabularies shorter than a vector. */
static void test_greedy_ties(void)
{
    const int32_t sizes[] = {1, 5, 16, 17, 31, 33, 1000, 201088};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int32_t V = sizes[k];
        float *l = malloc(sizeof *l * (size_t)V);
        ms_sampler *g = open_s(0.0f, 0, 1.0f, 0.0f, 1, V);
        for (int c = 0; g && c < 12; c++) {
            for (int32_t i = 0; i < V; i++)
                l[i] = -1.0f - (float)((i * 2654435761u + (unsigned)c) % 97) * 0.25f;
            int32_t a = (V * 5) / 7, b = V - 1 - (V / 3), z = V / 2;
            switch (c) {
            case 0: l[a] = 3.0f; l[b] = 3.0f; break;             /* a tie */
            case 1: l[V - 1] = 3.0f; break;                      /* the last id */
            case 2: l[0] = 3.0f; l[V - 1] = 3.0f; break;         /* the first of a tie */
            case 3: for (int32_t i = 0; i < V; i++) l[i] = 0.0f; /* all equal */
                break;
            case 4: l[z] = -0.0f; l[a] = 0.0f; l[b] = -0.0f; break; /* zeros */
            case 5: l[0] = NAN; l[a] = 5.0f; break;              /* a NaN at id 0 */
            case 6: l[a] = NAN; l[b] = 4.0f; l[z] = NAN; break;  /* NaNs further on */
            case 7: l[b] = INFINITY; l[a] = INFINITY; break;
            case 8: for (int32_t i = 0; i < V; i++) l[i] = -INFINITY;
                l[b] = -1e30f; break;
            case 9: for (int32_t i = 0; i < V; i++) l[i] = -INFINITY;
                break;
            case 10: l[z] = 2.0f; l[z < V - 1 ? z + 1 : z] = 2.0f; break; /* neighbours */
            case 11: for (int32_t i = 0; i < V; i++) l[i] = (float)(i % 16); /* per lane */
                break;
            }
            int32_t want = scan_argmax(l, V), got = ms_sampler_next(g, l);
            CHECK(got == want, "vocabulary %d, case %d: greedy %d, the scan %d", V, c, got,
                  want);
        }
        ms_sampler_close(g);
        free(l);
    }
}

/* The draw without a cut (no top-k, top-p 1, no min-p), replayed here:
 * u from the seed's stream, r = u x the weights' sum, then r minus each
 * weight exp(l - max) in id order until it is spent; past every id of
 * nonzero weight, the last such id. Distributions spread over many logit
 * units, flat, peaked with ties, and mostly of zero weight. */
static void test_no_cut_draws_in_id_order(void)
{
    const int32_t V = 50000;
    float *l = malloc(sizeof *l * V), *q = malloc(sizeof *q * V);
    const float temp = 0.7f;
    for (int c = 0; c < 4; c++) {
        uint64_t h = 12345 + (uint64_t)c;
        for (int32_t i = 0; i < V; i++) {
            h = h * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(h >> 11) * 0x1.0p-53;
            switch (c) {
            case 0: l[i] = (float)(-60 * u); break;
            case 1: l[i] = (float)(-2 * u); break;
            case 2: l[i] = i % 97 == 5 ? 3.0f : (float)(-30 * u); break;
            case 3: l[i] = i % 5 ? -INFINITY : (float)(-900 * u); break;
            }
        }
        float m = -INFINITY;
        for (int32_t i = 0; i < V; i++) {
            q[i] = l[i] / temp;
            m = q[i] > m ? q[i] : m;
        }
        double sum = 0;
        for (int32_t i = 0; i < V; i++)
            sum += exp((double)(q[i] - m));
        ms_sampler *s = open_s(temp, 0, 1.0f, 0.0f, 99, V);
        ms_rng rng;
        ms_rng_seed(&rng, 99);
        int bad = 0;
        for (int d = 0; s && d < 400 && !bad; d++) {
            double r = (double)(ms_rng_next(&rng) >> 11) * 0x1.0p-53 * sum;
            int32_t want = -1, last = 0;
            for (int32_t i = 0; i < V && want < 0; i++) {
                double e = exp((double)(q[i] - m));
                last = e > 0 ? i : last;
                r -= e;
                if (r < 0)
                    want = i;
            }
            want = want < 0 ? last : want;
            int32_t got = ms_sampler_next(s, l);
            if (got != want) {
                CHECK(0, "distribution %d, draw %d: id %d, the replay gives %d", c, d, got,
                      want);
                bad = 1;
            }
        }
        CHECK(s != NULL, "sampler opens");
        ms_sampler_close(s);
    }
    free(l);
    free(q);
}

/* Draws with a cut (top-k, top-p < 1, min-p), replayed with a sort of the
 * whole vocabulary: the best-first order (ties by id), the weights' sum
 * (over all ids in id order, or over the top k best first), the cut (the
 * first id under min-p x the best's probability, or the prefix whose mass
 * reaches top-p, at most k), then r = u x the cut's weights best first,
 * spent in that order. The sampler sorts only a head of the vocabulary;
 * these must not tell. */
static const float *ref_key;
static int ref_desc(const void *a, const void *b)
{
    float x = ref_key[*(const int32_t *)a], y = ref_key[*(const int32_t *)b];
    if (x != y)
        return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

static void test_cuts_as_a_whole_sort(void)
{
    const int32_t V = 20000;
    float *l = malloc(sizeof *l * V), *q = malloc(sizeof *q * V);
    int32_t *ord = malloc(sizeof *ord * V);
    struct { float t, p, mp; int32_t k; } cfg[] = {
        {0.6f, 0.95f, 0.0f, 0}, {1.0f, 0.5f, 0.0f, 0}, {0.7f, 1.0f, 0.05f, 0},
        {0.6f, 0.95f, 0.0f, 20}, {1.0f, 1.0f, 0.0f, 300}, {0.8f, 0.9f, 0.01f, 50}};
    for (int c = 0; c < 3; c++) {
        uint64_t h = 777 + (uint64_t)c;
        for (int32_t i = 0; i < V; i++) {
            h = h * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(h >> 11) * 0x1.0p-53;
            l[i] = c == 0 ? (float)(6 * u) /* flat */
                 : c == 1 ? i % 300 == 7 ? 12.0f - (float)(i % 7) : (float)(-20 + 8 * u)
                 /* ties everywhere, negative values, -0 beside +0 (equal: ties by id) */
                 : i % 13 == 0 ? -0.0f : 0.25f * (float)((int)(24 * u) - 16);
        }
        for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
            float m = -INFINITY;
            for (int32_t i = 0; i < V; i++) {
                q[i] = l[i] / cfg[k].t;
                m = q[i] > m ? q[i] : m;
                ord[i] = i;
            }
            ref_key = q;
            qsort(ord, (size_t)V, sizeof *ord, ref_desc);
            int32_t keep = cfg[k].k > 0 && cfg[k].k < V ? cfg[k].k : V;
            double sum = 0;
            if (keep == V)
                for (int32_t i = 0; i < V; i++)
                    sum += exp((double)(q[i] - m));
            else
                for (int32_t i = 0; i < keep; i++)
                    sum += exp((double)(q[ord[i]] - m));
            int32_t cut = keep;
            double cum = 0;
            for (int32_t i = 0; i < keep; i++) {
                double pi = exp((double)(q[ord[i]] - m)) / sum;
                if (pi < cfg[k].mp * (1.0 / sum)) {
                    cut = i;
                    break;
                }
                cum += pi;
                if (cum >= cfg[k].p) {
                    cut = i + 1;
                    break;
                }
            }
            cut = cut < 1 ? 1 : cut;
            double total = 0;
            for (int32_t i = 0; i < cut; i++)
                total += exp((double)(q[ord[i]] - m));
            ms_sampler *s = open_s(cfg[k].t, cfg[k].k, cfg[k].p, cfg[k].mp, 31, V);
            ms_rng rng;
            ms_rng_seed(&rng, 31);
            int bad = !s;
            for (int d = 0; s && d < 100 && !bad; d++) {
                double r = (double)(ms_rng_next(&rng) >> 11) * 0x1.0p-53 * total;
                int32_t want = ord[cut - 1];
                for (int32_t i = 0; i < cut; i++) {
                    r -= exp((double)(q[ord[i]] - m));
                    if (r < 0) {
                        want = ord[i];
                        break;
                    }
                }
                int32_t got = ms_sampler_next(s, l);
                if (got != want) {
                    CHECK(0, "distribution %d, settings %zu, draw %d: id %d, the sort gives %d", c,
                          k, d, got, want);
                    bad = 1;
                }
            }
            CHECK(s != NULL, "sampler opens");
            ms_sampler_close(s);
        }
    }
    free(l);
    free(q);
    free(ord);
}

int main(void)
{
    TEST_CASE(test_no_cut_draws_in_id_order);
    TEST_CASE(test_cuts_as_a_whole_sort);
    TEST_CASE(test_top_k_top_p_min_p);
    TEST_CASE(test_flat_and_seeded);
    TEST_CASE(test_greedy_ties);
    return t_finish();
}

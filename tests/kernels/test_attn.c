/* The attention step (ms_attn_step) of every op table this CPU runs against
 * a float64 softmax, its independence from the batch and the split, and the
 * KV widening (bit-exact against format/dtype.c's scalar decoders); the
 * fast table's own step over bf16 rows (x86_attn_bf16.h) against the same
 * reference with the bound of its bf16 rounding (check_rows).
 *
 * Tolerance of one query over n keys chained through chunks: with scores
 * s_p computed to within ds = (dk + 2) u * scale * sum_c |q_c k_c| (u =
 * 2^-24) and exp to a few ulp, each weight w_p = e^(s_p - m) / L moves by
 * at most 2 ds + (n + 16) u relative to itself, so
 *   |out - ref| <= 2 * (2 ds_max + (n + 16) u) * max |v|   (factor 2: slack).
 * A wrong key, range or rescale moves the result by ~ max|v| / n, far
 * outside it (case checker_fails). */
#include <stdint.h>

#include "base/sysmem.h"
#include "format/dtype.h"
#include "kernels/kernels.h"
#include "models/kvcache.h"
#include "test.h"

#define U (1.0 / 16777216.0)

static const ms_kernel_ops *cur;

static uint64_t rng = 0x243F6A8885A308D3ull;
static double unit(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float sym(double a)
{
    return (float)((2 * unit() - 1) * a);
}

typedef struct qcase {
    int dk, dv, n;       /* n keys in all, fed in chunks aligned at 0 */
    int lo, hi;          /* the query sees keys [lo, hi) */
    float scale, qmag;
} qcase;

/* Runs one query over keys [lo, hi) of K/V (n rows) chunk by chunk, as the
 * model's driver does, alone or with `others` more queries in each step. */
static void run_query_rows(const qcase *c, const float *q, const void *K, const void *V,
                           int bf16, int others, const float *oq, float *st)
{
    int es = bf16 ? 2 : 4; /* bytes per element */
    float *ost = calloc((size_t)(others + 1) * (2 + c->dv), sizeof(float));
    st[0] = -INFINITY;
    memset(st + 1, 0, (size_t)(1 + c->dv) * sizeof(float));
    for (int i = 0; i < others; i++)
        ost[i * (2 + c->dv)] = -INFINITY;
    float *sbuf = malloc((size_t)ms_attn_scratch(c->dk) * sizeof(float));
    for (int c0 = 0; c0 < c->hi; c0 += MS_ATTN_CHUNK) {
        int n = c->hi - c0 < MS_ATTN_CHUNK ? c->hi - c0 : MS_ATTN_CHUNK;
        int lo = c->lo > c0 ? c->lo - c0 : 0;
        if (lo >= n)
            continue;
        const float *qs[32];
        float *sts[32];
        int los[32], his[32], nq = 0;
        for (int i = 0; i < others; i++) { /* others see the whole chunk */
            qs[nq] = oq + i * c->dk;
            sts[nq] = ost + i * (2 + c->dv);
            los[nq] = 0;
            his[nq++] = n;
        }
        qs[nq] = q;
        sts[nq] = st;
        los[nq] = lo;
        his[nq++] = n;
        ms_attn_step a = {.nq = nq, .n = n, .dk = c->dk, .dv = c->dv, .scale = c->scale,
                          .k = (const float *)((const char *)K + (int64_t)c0 * c->dk * es),
                          .v = (const float *)((const char *)V + (int64_t)c0 * c->dv * es),
                          .ldk = c->dk, .ldv = c->dv, .q = qs, .lo = los, .hi = his, .st = sts,
                          .s = sbuf, .bf16 = bf16};
        cur->attn(&a);
    }
    free(ost);
    free(sbuf);
}


/* One query against float64: keys and values stored as f32, or as bf16
 * (bf16: the reference then uses the bf16 values themselves); `rounded`:
 * the step rounds queries and softmax weights to bf16 (the fast table over
 * bf16 rows), relative error <= 2^-9 each, so on top of the bound above
 * each score moves by up to 2^-9 * scale * sum_c |q_c k_c| and each weight
 * by 2^-9 of itself:
 *   |out - ref| <= 2 * (2 ds_max + r + (n + 16) u) * max |v|,
 *   ds = (r + (dk + 2) u) * scale * sum_c |q_c k_c|,  r = 2^-9 or 0. */
static double check_rows(const qcase *c, int others, int corrupt, int bf16, int rounded)
{
    int64_t nk = (int64_t)c->hi * c->dk, nv = (int64_t)c->hi * c->dv;
    float *K = malloc((size_t)nk * 4), *V = malloc((size_t)nv * 4), *q = malloc((size_t)c->dk * 4);
    uint16_t *Kh = malloc((size_t)nk * 2), *Vh = malloc((size_t)nv * 2);
    float *oq = malloc((size_t)(others + 1) * c->dk * 4);
    double r = rounded ? 1.0 / 512 : 0;
    for (int64_t i = 0; i < nk; i++) /* K, V: the values the step sees */
        K[i] = bf16 ? ms_bf16_to_f32(Kh[i] = ms_f32_to_bf16(sym(1.0))) : sym(1.0);
    for (int64_t i = 0; i < nv; i++)
        V[i] = bf16 ? ms_bf16_to_f32(Vh[i] = ms_f32_to_bf16(sym(1.0))) : sym(1.0);
    for (int i = 0; i < c->dk; i++)
        q[i] = sym(c->qmag);
    for (int i = 0; i < others * c->dk; i++)
        oq[i] = sym(c->qmag);
    const void *Ks = bf16 ? (const void *)Kh : K, *Vs = bf16 ? (const void *)Vh : V;
    float *st = malloc((size_t)(2 + c->dv) * 4), *st1 = malloc((size_t)(2 + c->dv) * 4);
    run_query_rows(c, q, Ks, Vs, bf16, others, oq, st);
    run_query_rows(c, q, Ks, Vs, bf16, 0, oq, st1);
    CHECK(memcmp(st, st1, (size_t)(2 + c->dv) * 4) == 0,
          "%s rows, dk %d dv %d keys [%d,%d): the state depends on the other queries of the step",
          bf16 ? "bf16" : "f32", c->dk, c->dv, c->lo, c->hi);
    if (corrupt)
        st[2] += 0.5f * st[1]; /* out[0] off by 0.5 */
    /* float64 reference */
    double *s = malloc((size_t)c->hi * sizeof(double)), m = -INFINITY, L = 0, ds = 0, vmax = 0;
    for (int p = c->lo; p < c->hi; p++) {
        double d = 0, mag = 0;
        for (int i = 0; i < c->dk; i++) {
            d += (double)q[i] * K[(int64_t)p * c->dk + i];
            mag += fabs((double)q[i] * K[(int64_t)p * c->dk + i]);
        }
        s[p] = d * c->scale;
        m = s[p] > m ? s[p] : m;
        double e = (r + (c->dk + 2) * U) * c->scale * mag;
        ds = e > ds ? e : ds;
    }
    for (int p = c->lo; p < c->hi; p++)
        L += exp(s[p] - m);
    double worst = 0;
    for (int d = 0; d < c->dv; d++) {
        double ref = 0;
        for (int p = c->lo; p < c->hi; p++) {
            ref += exp(s[p] - m) / L * V[(int64_t)p * c->dv + d];
            vmax = fabs(V[(int64_t)p * c->dv + d]) > vmax ? fabs(V[(int64_t)p * c->dv + d]) : vmax;
        }
        double got = st[2 + d] / st[1], err = fabs(got - ref);
        worst = err > worst ? err : worst;
    }
    double tol = 2 * (2 * ds + r + (c->hi - c->lo + 16) * U) * vmax;
    free(s);
    free(K);
    free(V);
    free(Kh);
    free(Vh);
    free(q);
    free(oq);
    free(st);
    free(st1);
    return worst / tol;
}

static double check_query(const qcase *c, int others, int corrupt)
{
    return check_rows(c, others, corrupt, 0, 0);
}

static void case_softmax(void)
{
    static const qcase cs[] = {
        {64, 64, 0, 0, 1, 0.125f, 1.0},     {64, 64, 0, 0, 64, 0.125f, 1.0},
        {64, 64, 0, 5, 130, 0.125f, 3.0},   {64, 64, 0, 100, 229, 0.125f, 8.0},
        {128, 128, 0, 0, 300, 0.0884f, 2.0}, {576, 512, 0, 0, 200, 0.07f, 1.0},
        {8, 8, 0, 3, 77, 0.35f, 1.0},       {40, 24, 0, 0, 65, 0.16f, 4.0},
        {16, 16, 0, 63, 64, 0.25f, 1.0},    {72, 72, 0, 17, 18, 0.1f, 1.0},
        {64, 64, 0, 250, 700, 0.125f, 2.0}, /* three chunks, from the end of the first */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        double r = check_query(&cs[i], 3, 0);
        CHECK(r <= 1.0, "dk %d dv %d keys [%d,%d): error %.2f x the bound", cs[i].dk, cs[i].dv,
              cs[i].lo, cs[i].hi, r);
    }
}

/* Steps of 16 and more queries with the same keys (MLA's heads): where the
 * query sees the whole chunk, a vector of them goes by the transposed
 * queries (x86_attn.h), and its state must be the bits it gets alone (which
 * the keys-transposed path computes). 7, 15 and 20 others: groups of 8, 16,
 * 16 + 5 with the query inside each. */
static void case_wide_groups(void)
{
    static const qcase cs[] = {
        {576, 512, 0, 0, 200, 0.07f, 1.0}, {64, 64, 0, 0, 130, 0.125f, 3.0},
        {64, 64, 0, 70, 229, 0.125f, 2.0}, {40, 24, 0, 0, 77, 0.16f, 4.0},
        {8, 8, 0, 0, 64, 0.35f, 1.0},
    };
    static const int others[] = {7, 15, 20};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (size_t o = 0; o < sizeof others / sizeof others[0]; o++) {
            double r = check_query(&cs[i], others[o], 0);
            CHECK(r <= 1.0, "dk %d dv %d keys [%d,%d), %d others: error %.2f x the bound",
                  cs[i].dk, cs[i].dv, cs[i].lo, cs[i].hi, others[o], r);
        }
}

static void case_checker_fails(void)
{
    qcase c = {64, 64, 0, 0, 100, 0.125f, 1.0};
    CHECK(check_query(&c, 0, 1) > 1.0, "a corrupted result passes the check");
}

/* widen: every format against the scalar decoders, bit for bit, odd lengths
 * and groups included. */
static void case_widen(void)
{
    static const int lens[] = {1, 7, 16, 33, 64, 100, 576};
    static const int groups[] = {8, 16, 64};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int n = lens[li];
        float src[576], out[576], sc[72];
        uint16_t h[576];
        uint8_t b[576];
        for (int i = 0; i < n; i++) {
            src[i] = sym(100.0);
            h[i] = ms_f32_to_bf16(src[i]);
            b[i] = (uint8_t)(unit() * 256);
            if ((b[i] & 0x7F) == 0x7F)
                b[i] ^= 1;
        }
        cur->widen(MS_KV_F32, src, NULL, 0, n, out);
        CHECK(memcmp(out, src, (size_t)n * 4) == 0, "f32 widen n=%d", n);
        cur->widen(MS_KV_BF16, h, NULL, 0, n, out);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += out[i] != ms_bf16_to_f32(h[i]);
        CHECK(!bad, "bf16 widen n=%d: %d elements off", n, bad);
        for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
            int g = groups[gi];
            if (n % g && n > g)
                continue;
            for (int k = 0; k < 72; k++)
                sc[k] = (float)ldexp(0.5 + unit(), (int)(unit() * 20) - 10);
            cur->widen(MS_KV_FP8, b, sc, g, n, out);
            bad = 0;
            for (int i = 0; i < n; i++)
                bad += out[i] != ms_e4m3_to_f32(b[i]) * sc[i / g];
            CHECK(!bad, "fp8 widen n=%d group %d: %d elements off", n, g, bad);
        }
    }
}

/* Keys and values stored as bf16 and read as such give the bits the same
 * values widened to f32 give (the kernel widens exactly as it loads). */
static void case_bf16_rows(void)
{
    /* 16 over [0, n) (wide), 4 over [7, 41) (not), 16 over [0, n) (wide
     * again, after the other group used the scratch the widened keys are in) */
    enum { NB = 36 };
    static const int dims[][2] = {{64, 64}, {16, 16}, {40, 24}, {576, 512}};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int dk = dims[di][0], dv = dims[di][1], n = 50;
        uint16_t *kh = malloc((size_t)n * dk * 2), *vh = malloc((size_t)n * dv * 2);
        float *kf = malloc((size_t)n * dk * 4), *vf = malloc((size_t)n * dv * 4);
        float *q = malloc((size_t)NB * dk * 4), *st[2][NB], *s = malloc((size_t)ms_attn_scratch(dk) * 4);
        for (int i = 0; i < n * dk; i++)
            kf[i] = ms_bf16_to_f32(kh[i] = ms_f32_to_bf16(sym(1.0)));
        for (int i = 0; i < n * dv; i++)
            vf[i] = ms_bf16_to_f32(vh[i] = ms_f32_to_bf16(sym(1.0)));
        for (int i = 0; i < NB * dk; i++)
            q[i] = sym(1.0);
        const float *qs[NB];
        int lo[NB], hi[NB];
        for (int w = 0; w < NB; w++) {
            int other = w >= 16 && w < 20;
            qs[w] = q + (int64_t)w * dk;
            lo[w] = other ? 7 : 0;
            hi[w] = other ? 41 : n;
        }
        for (int r = 0; r < 2; r++) {
            for (int w = 0; w < NB; w++) {
                st[r][w] = calloc((size_t)(2 + dv), 4);
                st[r][w][0] = -INFINITY;
            }
            ms_attn_step a = {.nq = NB, .n = n, .dk = dk, .dv = dv, .scale = 0.1f,
                              .k = r ? (const float *)kh : kf, .v = r ? (const float *)vh : vf,
                              .ldk = dk, .ldv = dv, .q = qs, .lo = lo, .hi = hi, .st = st[r],
                              .s = s, .bf16 = r};
            cur->attn(&a);
        }
        int same = 1;
        for (int w = 0; w < NB; w++)
            same &= memcmp(st[0][w], st[1][w], (size_t)(2 + dv) * 4) == 0;
        CHECK(same, "dk %d dv %d: bf16 rows give other bits than their f32 widening", dk, dv);
        for (int r = 0; r < 2; r++)
            for (int w = 0; w < NB; w++)
                free(st[r][w]);
        free(kh);
        free(vh);
        free(kf);
        free(vf);
        free(q);
        free(s);
    }
}

/* Keys in tiles (kvcache.h), f32 or bf16, give the bits the same keys in
 * rows give (rows: checked against float64 above), for groups that go by
 * the transposed keys and by the transposed queries alike; the keys past
 * n in the last tile are NaN and must not reach any result. The fast
 * table runs it over bf16 only (its step over f32 is the exact one). */
static void tiled_keys(int bf16)
{
    enum { NB = 36, T = MS_KV_TILE };
    static const int dims[][3] = {{64, 64, 50}, {16, 16, 64}, {40, 24, 7}, {64, 64, 33}};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int dk = dims[di][0], dv = dims[di][1], n = dims[di][2], nt = (n + T - 1) / T * T;
        float *kr = malloc((size_t)n * dk * 4), *kt = malloc((size_t)nt * dk * 4);
        float *v = malloc((size_t)n * dv * 4), *q = malloc((size_t)NB * dk * 4);
        float *st[2][NB], *s = malloc((size_t)ms_attn_scratch(dk) * 4);
        uint16_t *krh = (uint16_t *)kr, *kth = (uint16_t *)kt, *vh = (uint16_t *)v;
        for (int i = 0; i < nt * dk; i++)
            kt[i] = NAN; /* bf16: two NaN halves */
        for (int p = 0; p < n; p++)
            for (int d = 0; d < dk; d++) {
                float x = sym(1.0);
                if (bf16)
                    kth[(p - p % T) * dk + 2 * ((d / 2) * T + p % T) + d % 2] = krh[p * dk + d] =
                        ms_f32_to_bf16(x);
                else
                    kt[(p - p % T) * dk + d * T + p % T] = kr[p * dk + d] = x;
            }
        for (int i = 0; i < n * dv; i++) {
            float x = sym(1.0);
            if (bf16)
                vh[i] = ms_f32_to_bf16(x);
            else
                v[i] = x;
        }
        for (int i = 0; i < NB * dk; i++)
            q[i] = sym(1.0);
        const float *qs[NB];
        int lo[NB], hi[NB];
        for (int w = 0; w < NB; w++) { /* 16 wide, 4 over another range, 16 wide */
            int other = w >= 16 && w < 20;
            qs[w] = q + (int64_t)w * dk;
            lo[w] = other ? n / 3 : 0;
            hi[w] = other ? n - n / 4 : n;
        }
        for (int r = 0; r < 2; r++) {
            for (int w = 0; w < NB; w++) {
                st[r][w] = calloc((size_t)(2 + dv), 4);
                st[r][w][0] = -INFINITY;
            }
            ms_attn_step a = {.nq = NB, .n = n, .dk = dk, .dv = dv, .scale = 0.1f,
                              .k = r ? kt : kr, .v = v, .ldk = dk, .ldv = dv, .q = qs,
                              .lo = lo, .hi = hi, .st = st[r], .s = s, .ktiled = r,
                              .bf16 = bf16};
            cur->attn(&a);
        }
        int same = 1, finite = 1;
        for (int w = 0; w < NB; w++) {
            same &= memcmp(st[0][w], st[1][w], (size_t)(2 + dv) * 4) == 0;
            for (int i = 0; i < 2 + dv; i++)
                finite &= isfinite(st[1][w][i]);
        }
        CHECK(finite, "%s dk %d dv %d n %d: the NaN keys past n in the last tile reached a "
              "result", bf16 ? "bf16" : "f32", dk, dv, n);
        CHECK(same, "%s dk %d dv %d n %d: tiled keys give other bits than rows",
              bf16 ? "bf16" : "f32", dk, dv, n);
        for (int r = 0; r < 2; r++)
            for (int w = 0; w < NB; w++)
                free(st[r][w]);
        free(kr);
        free(kt);
        free(v);
        free(q);
        free(s);
    }
}

static void case_tiled_keys(void)
{
    tiled_keys(0);
    tiled_keys(1);
}

static void case_tiled_bf16(void)
{
    tiled_keys(1);
}

/* The cache's layout: f32 and bf16 key planes in tiles at the index
 * kvcache.h states, value planes in rows; what is written (whole rows, or
 * pieces starting inside a plane) reads back from its index in every
 * case, across the ring. fp8 keys stay rows. */
static void case_kv_tiles(void)
{
    enum { CAP = 64, PLANE = 8, PLANES = 4, KPL = 2, T = MS_KV_TILE };
    static const ms_kvfmt fs[] = {MS_KV_F32, MS_KV_BF16};
    float row[PLANES * PLANE];
    for (size_t i = 0; i < 2; i++) {
        ms_kv kv;
        ms_err e;
        CHECK(ms_kv_alloc(&kv, fs[i], CAP, PLANES * PLANE, PLANE, KPL, PLANE, &e) == 0,
              "alloc %s", ms_kvfmt_name(fs[i]));
        CHECK(kv.tiled == KPL, "%s: %lld tiled planes", ms_kvfmt_name(fs[i]),
              (long long)kv.tiled);
        int bad_index = 0, bad_value = 0;
        for (int64_t pos = 40; pos < 40 + CAP; pos++) { /* wraps past CAP */
            for (int k = 0; k < PLANES * PLANE; k++)
                row[k] = (float)(pos * 100 + k); /* exact in bf16 only below 256 */
            if (pos % 3 == 0) { /* in pieces that start inside a plane, at odd elements */
                ms_kv_write(&kv, pos, 0, row, 3);
                ms_kv_write(&kv, pos, 3, row + 3, PLANE + 2);
                ms_kv_write(&kv, pos, PLANE + 5, row + PLANE + 5, PLANES * PLANE - PLANE - 5);
            } else {
                ms_kv_write(&kv, pos, 0, row, PLANES * PLANE);
            }
            int64_t sl = pos % CAP;
            for (int k = 0; k < PLANES * PLANE; k++) {
                int64_t p = k / PLANE, el = k % PLANE, want;
                if (p < KPL && fs[i] == MS_KV_BF16)
                    want = (p * CAP + sl - sl % T) * PLANE + 2 * ((el / 2) * T + sl % T) + el % 2;
                else if (p < KPL)
                    want = (p * CAP + sl - sl % T) * PLANE + el * T + sl % T;
                else
                    want = (p * CAP + sl) * PLANE + el;
                bad_index += ms_kv_index(&kv, pos, k) != want;
                float got = fs[i] == MS_KV_F32 ? ((const float *)kv.data)[want]
                                               : ms_bf16_to_f32(((const uint16_t *)kv.data)[want]);
                bad_value += got != (fs[i] == MS_KV_F32 ? row[k]
                                                         : ms_bf16_to_f32(ms_f32_to_bf16(row[k])));
            }
        }
        CHECK(!bad_index, "%s: %d elements at another index", ms_kvfmt_name(fs[i]), bad_index);
        CHECK(!bad_value, "%s: %d elements read back wrong", ms_kvfmt_name(fs[i]), bad_value);
        ms_kv_free(&kv);
    }
    ms_kv kv;
    ms_err e;
    CHECK(ms_kv_alloc(&kv, MS_KV_F32, 40, 32, 8, 2, 8, &e) == -1, "a tiled cache of 40 positions "
          "was allowed");
    CHECK(ms_kv_alloc(&kv, MS_KV_FP8, 64, 32, 8, 2, 8, &e) == 0 && kv.tiled == 0,
          "fp8 keys in tiles");
    ms_kv_free(&kv);
    CHECK(ms_kv_alloc(&kv, MS_KV_BF16, 64, 30, 5, 3, 5, &e) == 0 && kv.tiled == 0,
          "bf16 keys of odd dimension in tiles");
    ms_kv_free(&kv);
}

/* e4m3 encoding: round to nearest even against every code's value. */
static void case_e4m3_encode(void)
{
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F)
            continue;
        float v = ms_e4m3_to_f32((uint8_t)c);
        bad += ms_f32_to_e4m3(v) != c && !(v == 0 && (c & 0x7F) == 0);
    }
    CHECK(!bad, "%d codes do not encode to themselves", bad);
    CHECK(ms_f32_to_e4m3(1.0625f) == 0x38, "1 + 1/16 is a tie: to even (1.0)");
    CHECK(ms_f32_to_e4m3(1.1875f) == 0x3A, "1 + 3/16 is a tie: to even (1.25)");
    CHECK(ms_f32_to_e4m3(1000.0f) == 0x7E && ms_f32_to_e4m3(-1000.0f) == 0xFE, "saturation");
    CHECK(ms_f32_to_e4m3(0.0009765625f) == 0x00, "2^-10: a tie between 0 and 2^-9, to even 0");
    CHECK(ms_f32_to_e4m3(NAN) == 0x7F, "NaN");
}

/* A KV cache written in each format reads back within its rounding. */
static void case_kv_roundtrip(void)
{
    float row[128], back[128];
    for (int i = 0; i < 128; i++)
        row[i] = sym(i < 64 ? 10.0 : 0.01);
    static const struct {
        ms_kvfmt f;
        double rel; /* of the group's largest magnitude */
    } fs[] = {{MS_KV_F32, 0}, {MS_KV_BF16, 1.0 / 256}, {MS_KV_FP8, 1.0 / 16}};
    for (size_t i = 0; i < 3; i++) {
        ms_kv kv;
        ms_err e;
        CHECK(ms_kv_alloc(&kv, fs[i].f, 128, 128, 128, 0, 64, &e) == 0, "alloc %s", ms_kvfmt_name(fs[i].f));
        ms_kv_write(&kv, 200, 0, row, 128); /* slot 200 % 128 */
        cur->widen(kv.fmt, ms_kv_elems(&kv, 200, 0), ms_kv_scales(&kv, 200, 0), kv.group, 128,
                   back);
        int bad = 0;
        for (int g = 0; g < 2; g++) {
            double amax = 0;
            for (int k = 0; k < 64; k++)
                amax = fabs(row[g * 64 + k]) > amax ? fabs(row[g * 64 + k]) : amax;
            for (int k = 0; k < 64; k++) {
                double err = fabs((double)back[g * 64 + k] - row[g * 64 + k]);
                double lim = fs[i].f == MS_KV_BF16 ? fs[i].rel * fabs(row[g * 64 + k])
                                                   : fs[i].rel * amax;
                bad += err > lim;
            }
        }
        CHECK(!bad, "%s: %d elements beyond the format's rounding", ms_kvfmt_name(fs[i].f), bad);
        ms_kv_free(&kv);
    }
}

/* ---- the fast table's step over bf16 rows (x86_attn_bf16.h) ---------------- */
static void case_fast_bf16(void)
{
    static const qcase cs[] = {
        {64, 64, 0, 0, 1, 0.125f, 1.0},      {64, 64, 0, 0, 64, 0.125f, 1.0},
        {64, 64, 0, 5, 130, 0.125f, 3.0},    {64, 64, 0, 100, 229, 0.125f, 8.0},
        {64, 64, 0, 0, 300, 0.125f, 8.0},    {128, 128, 0, 0, 300, 0.0884f, 2.0},
        {576, 512, 0, 0, 200, 0.07f, 1.0},   {8, 8, 0, 3, 77, 0.35f, 1.0},
        {40, 24, 0, 0, 65, 0.16f, 4.0},      {16, 16, 0, 63, 64, 0.25f, 1.0},
        {72, 72, 0, 17, 18, 0.1f, 1.0},      {2, 40, 0, 1, 70, 0.5f, 2.0},
        {34, 50, 0, 7, 150, 0.2f, 6.0},      {104, 40, 0, 0, 90, 0.1f, 4.0},
        {64, 64, 0, 250, 700, 0.125f, 2.0}, {576, 512, 0, 0, 300, 0.07f, 1.0},
        {104, 40, 0, 30, 131, 0.1f, 8.0},
    };
    static const int others[] = {0, 3, 7, 15};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (size_t o = 0; o < sizeof others / sizeof others[0]; o++) {
            double r = check_rows(&cs[i], others[o], 0, 1, 1);
            CHECK(r <= 1.0, "fast: dk %d dv %d keys [%d,%d), %d others: error %.2f x the bound",
                  cs[i].dk, cs[i].dv, cs[i].lo, cs[i].hi, others[o], r);
        }
    qcase bad = {64, 64, 0, 0, 100, 0.125f, 1.0};
    CHECK(check_rows(&bad, 0, 1, 1, 1) > 1.0, "fast: a corrupted result passes the check");
}

/* The fast step runs (other bits than the exact one on bf16 rows) and
 * leaves what it does not take to the exact step, bit for bit: float rows,
 * and bf16 keys of odd dimension. */
static void case_fast_path(void)
{
    const ms_kernel_ops *exact = ms_kernels_avx512();
    static const int dims[][3] = {{64, 64, 0}, {64, 64, 1}, {9, 16, 1}, {576, 512, 0}};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int dk = dims[di][0], dv = dims[di][1], bf = dims[di][2], n = 50, es = bf ? 2 : 4;
        char *K = malloc((size_t)n * dk * es), *V = malloc((size_t)n * dv * es);
        for (int i = 0; i < n * dk; i++) {
            float f = sym(1.0);
            if (bf)
                ((uint16_t *)K)[i] = ms_f32_to_bf16(f);
            else
                ((float *)K)[i] = f;
        }
        for (int i = 0; i < n * dv; i++) {
            float f = sym(1.0);
            if (bf)
                ((uint16_t *)V)[i] = ms_f32_to_bf16(f);
            else
                ((float *)V)[i] = f;
        }
        float *q = malloc((size_t)dk * 4), *st[2];
        for (int i = 0; i < dk; i++)
            q[i] = sym(2.0);
        qcase c = {dk, dv, 0, 0, n, 0.1f, 2.0};
        const ms_kernel_ops *tables[2] = {exact, cur};
        for (int t = 0; t < 2; t++) {
            const ms_kernel_ops *keep = cur;
            st[t] = malloc((size_t)(2 + dv) * 4);
            cur = tables[t];
            run_query_rows(&c, q, K, V, bf, 0, NULL, st[t]);
            cur = keep;
        }
        int same = memcmp(st[0], st[1], (size_t)(2 + dv) * 4) == 0;
        int takes = bf && dk % 2 == 0;
        CHECK(same != takes, "dk %d dv %d %s rows: the fast step %s", dk, dv, bf ? "bf16" : "f32",
              takes ? "did not run (the exact bits)" : "changed bits it must leave to the exact step");
        free(K);
        free(V);
        free(q);
        free(st[0]);
        free(st[1]);
    }
}

/* ms_kv_alloc asks for the cache in huge pages: its data starts on a 2 MiB
 * boundary, in a mapping marked MADV_HUGEPAGE ("hg" among the VmFlags of
 * /proc/self/smaps). Whether the kernel then gives huge pages depends on
 * its settings and free memory, so that share is printed, not asserted. */
static void case_kv_huge_pages(void)
{
    ms_kv kv;
    ms_err e = {0};
    CHECK(ms_kv_alloc(&kv, MS_KV_F32, 4096, 1024, 64, 8, 64, &e) == 0, "alloc: %s", e.msg);
    if (!kv.data)
        return;
    CHECK(((uintptr_t)kv.data & ((2u << 20) - 1)) == 0, "the cache at %p is not on a 2 MiB "
          "boundary", kv.data);
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL, "/proc/self/smaps cannot be read");
    char line[512];
    int in = 0, marked = 0, found = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)kv.data >= lo && (uintptr_t)kv.data < hi;
            found |= in;
        } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            marked = strstr(line, " hg") != NULL;
        }
    }
    if (f)
        fclose(f);
    CHECK(found && marked, "the cache's mapping %s", found ? "is not marked MADV_HUGEPAGE"
                                                           : "is not in /proc/self/smaps");
    memset(kv.data, 1, kv.bytes);
    printf("note: %lld of %zu MiB of a KV cache in huge pages\n",
           (long long)(ms_huge_bytes(kv.data, kv.bytes) >> 20), kv.bytes >> 20);
    ms_kv_free(&kv);
}

int main(void)
{
    const ms_kernel_ops *all[3] = {ms_kernels_scalar(), ms_kernels_avx2(), ms_kernels_avx512()};
    static const char *names[3] = {"scalar", "avx2", "avx512"};
    char name[64];
    for (int i = 0; i < 3; i++) {
        if (!all[i]) {
            printf("SKIP attn_%s: this CPU lacks its instructions\n", names[i]);
            continue;
        }
        cur = all[i];
#define RUN(fn)                                                                    \
    snprintf(name, sizeof name, "%s_%s", #fn, names[i]);                          \
    t_run_case(name, fn);
        RUN(case_softmax)
        RUN(case_checker_fails)
        RUN(case_wide_groups)
        RUN(case_widen)
        RUN(case_kv_roundtrip)
        RUN(case_bf16_rows)
        RUN(case_tiled_keys)
#undef RUN
    }
    cur = ms_kernels_avx512_bf16();
    if (!cur) {
        printf("SKIP attn_fast: this CPU lacks AVX512-BF16 (the fast table's step over bf16 rows)\n");
    } else {
        t_run_case("fast_bf16_avx512-bf16-fast", case_fast_bf16);
        t_run_case("fast_path_avx512-bf16-fast", case_fast_path);
        t_run_case("tiled_keys_avx512-bf16-fast", case_tiled_bf16);
        /* what the fast table leaves to the exact step keeps its checks */
        t_run_case("softmax_avx512-bf16-fast", case_softmax);
    }
    t_run_case("e4m3_encode", case_e4m3_encode);
    t_run_case("kv_tiles", case_kv_tiles);
#if MS_KV_ON_HEAP
    printf("SKIP kv_huge_pages: under AddressSanitizer the KV cache stays on the heap, whose "
           "bounds it checks\n");
#else
    t_run_case("kv_huge_pages", case_kv_huge_pages);
#endif
    return t_finish();
}

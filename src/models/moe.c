/* Routers and the batched expert FFN. */
#include "models/moe.h"

#include <math.h>
#include <string.h>

#include "models/ops.h"

void ms_topk(const float *v, int n, int k, int32_t *idx)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++)
                taken |= idx[q] == i;
            if (!taken && (best < 0 || v[i] > v[best]))
                best = i;
        }
        idx[j] = best;
    }
}

/* DeepSeek-V3 noaux_tc group limit (transformers DeepseekV3TopkRouter, the
 * official Gate): groups ranked by the sum of their two best biased scores;
 * the experts of groups not kept are masked with -inf as the official Gate
 * does (transformers fills 0.0: the same choice while every biased score is
 * > 0). v: biased scores [n_experts], in place. */
static void limit_groups(const ms_router *r, float *v)
{
    int G = r->n_group, gs = r->n_experts / G;
    float gscore[MS_ROUTER_MAX_GROUPS] = {0};
    int32_t keep[MS_ROUTER_MAX_GROUPS], top2[2];
    int n2 = gs < 2 ? gs : 2;
    if (r->topk_group >= G)
        return;
    for (int g = 0; g < G; g++) {
        ms_topk(v + g * gs, gs, n2, top2);
        gscore[g] = v[g * gs + top2[0]] + (n2 == 2 ? v[g * gs + top2[1]] : 0.0f);
    }
    ms_topk(gscore, G, r->topk_group, keep);
    for (int g = 0; g < G; g++) {
        int kept = 0;
        for (int j = 0; j < r->topk_group; j++)
            kept |= keep[j] == g;
        for (int e = g * gs; !kept && e < (g + 1) * gs; e++)
            v[e] = -INFINITY;
    }
}

/* Turns one position's logits v into the values experts are chosen by, in
 * place, and picks the top-k ids in descending order of those values. */
static void choose(const ms_router *r, float *v, int32_t *id)
{
    int E = r->n_experts;
    if (r->kind == MS_ROUTER_SIGMOID_GROUP) {
        for (int e = 0; e < E; e++)
            v[e] = 1.0f / (1.0f + expf(-v[e])) + r->choice_bias[e];
        limit_groups(r, v);
    } else if (r->kind == MS_ROUTER_SOFTMAX_BIAS) {
        ms_softmax(v, E);
        for (int e = 0; e < E; e++)
            v[e] += r->choice_bias[e];
    }
    /* the other kinds choose on the logits: softmax is monotonic */
    ms_topk(v, E, r->top_k, id);
}

/* Weights of the chosen ids from the logits l (tmp: n_experts floats). */
static void weigh(const ms_router *r, const float *l, const int32_t *id, float *tmp, float *wt)
{
    int E = r->n_experts, k = r->top_k;
    if (r->kind == MS_ROUTER_TOPK_SOFTMAX) {
        for (int j = 0; j < k; j++)
            wt[j] = l[id[j]];
        ms_softmax(wt, k);
    } else if (r->kind == MS_ROUTER_SOFTMAX_TOPK) {
        float m = l[id[0]];
        double sum = 0, sel = 0;
        for (int e = 0; e < E; e++)
            sum += expf(l[e] - m);
        for (int j = 0; j < k; j++) {
            wt[j] = (float)(expf(l[id[j]] - m) / sum);
            sel += wt[j];
        }
        if (r->norm_topk)
            for (int j = 0; j < k; j++)
                wt[j] = (float)(wt[j] / sel);
    } else if (r->kind == MS_ROUTER_SIGMOID_GROUP) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++) { /* the unbiased scores */
            wt[j] = 1.0f / (1.0f + expf(-l[id[j]]));
            sum += wt[j];
        }
        for (int j = 0; j < k; j++)
            wt[j] = (r->norm_topk ? wt[j] / (sum + 1e-20f) : wt[j]) * r->routed_scale;
    } else { /* SOFTMAX_BIAS: the unbiased probabilities, never renormalised */
        memcpy(tmp, l, (size_t)E * 4);
        ms_softmax(tmp, E);
        for (int j = 0; j < k; j++)
            wt[j] = tmp[id[j]] * r->routed_scale;
    }
}

void ms_route(const ms_router *r, const float *x, int64_t n, float *logits, int32_t *ids,
              float *w)
{
    int E = r->n_experts, k = r->top_k;
    float tmp[MS_ROUTER_MAX_EXPERTS];
    /* routers always run exact, also under --precision fast: a rounded
     * router logit can flip the choice of an expert, a discrete change the
     * fast path must not add for a product this small */
    ms_matmul_ops(ms_kernels_exact(), &r->w, x, (int)n, logits);
    if (r->bias)
        ms_add_bias(logits, r->bias, n, E);
    for (int64_t t = 0; t < n; t++) {
        const float *l = logits + t * E;
        memcpy(tmp, l, (size_t)E * 4);
        choose(r, tmp, ids + t * k);
        weigh(r, l, ids + t * k, tmp, w + t * k);
    }
}

void ms_moe_prefetch_next(ms_expert_store *st, int next_layer, const float *x, int64_t n,
                          int64_t d, const float *norm_w, float eps, const ms_router *r,
                          int count, int deferred, float *tmp)
{
    float *xn = tmp, *logits = tmp + d;
    int32_t ids[MS_ROUTER_MAX_EXPERTS], uni[MS_ROUTER_MAX_EXPERTS];
    uint8_t seen[MS_ROUTER_MAX_EXPERTS] = {0};
    int nu = 0;
    count = count < r->top_k ? count : r->top_k;
    for (int64_t t = 0; t < n; t++) { /* the union of the rows' predictions, in row order */
        ms_rmsnorm(x + t * d, norm_w, eps, 1, d, xn);
        ms_matmul_ops(ms_kernels_exact(), &r->w, xn, 1, logits);
        if (r->bias)
            ms_add(logits, r->bias, r->n_experts);
        choose(r, logits, ids); /* descending: the best first */
        for (int j = 0; j < count; j++)
            if (!seen[ids[j]]) {
                seen[ids[j]] = 1;
                uni[nu++] = ids[j];
            }
    }
    if (deferred)
        ms_expert_prefetch_deferred(st, next_layer, uni, nu);
    else
        ms_expert_prefetch(st, next_layer, uni, nu);
}

void ms_moe_prefetch_ids(ms_expert_store *st, const ms_moe *m, const int32_t *ids, int64_t n,
                         int32_t *tmp)
{
    int nu = 0; /* distinct stored ids in order of first appearance (top-k order) */
    for (int64_t i = 0; i < n * m->top_k; i++) {
        int seen = ids[i] >= m->n_experts;
        for (int j = 0; j < nu && !seen; j++)
            seen = tmp[j] == ids[i];
        if (!seen)
            tmp[nu++] = ids[i];
    }
    ms_expert_prefetch(st, m->layer, tmp, nu);
}

int ms_mlp_bind(ms_mlp *mlp, ms_binder *b, const char *prefix, ms_role role, ms_span *span)
{
    static const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
    ms_mat *mats[3] = {&mlp->gate, &mlp->up, &mlp->down};
    char n[256];
    int before = ms_bind_problems(b);
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "%s.%s", prefix, proj[k]);
        ms_bind_linear(b, role, n, k == 2 ? mlp->d_model : mlp->d_ff,
                       k == 2 ? mlp->d_ff : mlp->d_model, mats[k], span ? span + 2 * k : NULL);
    }
    return ms_bind_problems(b) - before;
}

int ms_moe_bind_mxfp4(ms_moe *m, ms_binder *b, ms_expert_store *st, const char *prefix)
{
    int64_t E = m->n_experts, ff = m->d_ff, d = m->d_model;
    int before = ms_bind_problems(b);
    ms_err err = {0};
    /* the fused tensors bind matrix-major: [gate_up of every expert | down of every expert] */
    ms_mat *mats = ms_malloc(sizeof *mats * (size_t)(2 * E), "expert views", &err);
    ms_span *spans = ms_malloc(sizeof *spans * (size_t)(4 * E), "expert spans", &err);
    char bl[256], sc[256];
    float *v;
    if (!mats || !spans) {
        ms_bind_problem(b, "%s: %s", prefix, err.msg);
        free(mats);
        free(spans);
        return ms_bind_problems(b) - before;
    }
    snprintf(bl, sizeof bl, "%s.gate_up_proj_blocks", prefix);
    snprintf(sc, sizeof sc, "%s.gate_up_proj_scales", prefix);
    int ok = ms_bind_mxfp4_experts(b, bl, sc, E, 2 * ff, d, mats, spans) == 0;
    snprintf(bl, sizeof bl, "%s.down_proj_blocks", prefix);
    snprintf(sc, sizeof sc, "%s.down_proj_scales", prefix);
    ok &= ms_bind_mxfp4_experts(b, bl, sc, E, d, ff, mats + E, spans + 2 * E) == 0;
    snprintf(bl, sizeof bl, "%s.gate_up_proj_bias", prefix);
    ms_bind_matrix_f32(b, MS_ROLE_EXPERT, bl, E, 2 * ff, &v);
    m->gate_up_bias = v;
    snprintf(bl, sizeof bl, "%s.down_proj_bias", prefix);
    ms_bind_matrix_f32(b, MS_ROLE_EXPERT, bl, E, d, &v);
    m->down_bias = v;
    for (int64_t e = 0; ok && !ms_bind_skipping(b) && e < E; e++) { /* expert-major */
        ms_mat two[2] = {mats[e], mats[E + e]};
        ms_span sp[4] = {spans[2 * e], spans[2 * e + 1], spans[2 * E + 2 * e],
                         spans[2 * E + 2 * e + 1]};
        ms_expert_store_set(st, m->layer, (int)e, two, sp);
    }
    free(mats);
    free(spans);
    return ms_bind_problems(b) - before;
}

int ms_router_bind_sigmoid(ms_router *r, ms_binder *b, const char *prefix, int64_t d)
{
    char n[256];
    float *v;
    int before = ms_bind_problems(b);
    snprintf(n, sizeof n, "%s.gate.weight", prefix);
    ms_bind_plain_linear(b, MS_ROLE_DENSE, n, r->n_experts, d, MS_DTYPE_BF16, &r->w);
    snprintf(n, sizeof n, "%s.gate.e_score_correction_bias", prefix);
    ms_bind_plain_vector(b, MS_ROLE_DENSE, n, r->n_experts, MS_DTYPE_F32, &v);
    r->choice_bias = v;
    return ms_bind_problems(b) - before;
}

int ms_moe_bind_experts(ms_binder *b, ms_expert_store *st, int layer, const char *prefix,
                        int n_experts, int64_t d_model, int64_t d_ff)
{
    char n[256];
    int before = ms_bind_problems(b);
    for (int e = 0; e < n_experts; e++) {
        ms_mlp ex = {.d_model = d_model, .d_ff = d_ff};
        ms_span sp[6];
        snprintf(n, sizeof n, "%s.%d", prefix, e);
        if (ms_mlp_bind(&ex, b, n, MS_ROLE_EXPERT, sp) == 0 && !ms_bind_collecting(b) &&
            !ms_bind_skipping(b))
            ms_expert_store_set(st, layer, e, (ms_mat[3]){ex.gate, ex.up, ex.down}, sp);
    }
    return ms_bind_problems(b) - before;
}

int64_t ms_mlp_scratch(int64_t d_ff, int64_t n)
{
    return 3 * n * d_ff;
}

/* H = silu(G) * U over rows of cols, shared by the pool. */
typedef struct silu_job {
    const float *G, *U;
    float *H;
    int64_t cols;
} silu_job;

static void silu_span(void *ctx, int64_t r, int64_t c0, int64_t c1)
{
    const silu_job *j = ctx;
    const float *G = j->G + r * j->cols, *U = j->U + r * j->cols;
    float *H = j->H + r * j->cols;
    for (int64_t i = c0; i < c1; i++)
        H[i] = G[i] / (1.0f + expf(-G[i])) * U[i];
}

static void silu_mul(const float *G, const float *U, int64_t rows, int64_t cols, float *H)
{
    silu_job j = {G, U, H, cols};
    ms_rows_parallel(rows, cols, silu_span, &j);
}

void ms_mlp_apply(const ms_mat *gate, const ms_mat *up, const ms_mat *down, int64_t d_ff,
                  const float *X, int rows, float *Y, float *scratch)
{
    float *G = scratch, *U = G + rows * d_ff, *H = U + rows * d_ff;
    ms_matmul_job gu[2] = {{.w = gate, .X = X, .n = rows, .Y = G},
                           {.w = up, .X = X, .n = rows, .Y = U}};
    ms_matmul_many(gu, 2);
    silu_mul(G, U, rows, d_ff, H);
    ms_matmul(down, H, rows, Y);
}

/* Rows of experts' FFNs computed together at most: the work areas are
 * bounded by this, not by the number of positions, so a whole prompt can go
 * through a layer at once (each row's result does not depend on the rows
 * beside it). */
#define CHUNK_ROWS 1024

static int64_t chunk_rows(const ms_moe *m, int64_t n)
{
    int64_t rows = n * m->top_k;
    return rows < CHUNK_ROWS ? rows : CHUNK_ROWS;
}

int64_t ms_moe_scratch(const ms_moe *m, int64_t n)
{
    /* gathered inputs, FFN work and outputs for a chunk of rows; then all
     * contributions [n][k][d], slots [chunk] and the union [n_experts] */
    int64_t C = chunk_rows(m, n);
    return C * m->d_model + C * 3 * m->d_ff + C * m->d_model + n * m->top_k * m->d_model + C +
           m->n_experts;
}

/* The clipped SwiGLU of gpt_oss on gate_up rows (interleaved gate, up),
 * each row's gate_up bias (bias[r], or none) added first. */
typedef struct glu_job {
    const ms_moe *m;
    const float *H2;
    const float *const *bias;
    float *H;
} glu_job;

static void oai_glu_span(void *ctx, int64_t r, int64_t c0, int64_t c1)
{
    const glu_job *j = ctx;
    const ms_moe *m = j->m;
    int64_t ff = m->d_ff;
    const float *h2 = j->H2 + r * 2 * ff, *b = j->bias[r];
    float *h = j->H + r * ff;
    for (int64_t i = c0; i < c1; i++) {
        float g = h2[2 * i], u = h2[2 * i + 1];
        if (b) {
            g += b[2 * i];
            u += b[2 * i + 1];
        }
        g = g > m->limit ? m->limit : g;
        u = u > m->limit ? m->limit : u < -m->limit ? -m->limit : u;
        float glu = g / (1.0f + expf(-m->alpha * g));
        h[i] = glu * (u + 1.0f);
    }
}

/* Experts computed together (at most GROUP_MAX): each with its lease and
 * its rows [row0, row0 + rows) of the group's work areas. */
#define GROUP_MAX 64

typedef struct expert_run {
    ms_expert_lease lease;
    int64_t row0;
    int rows;
    int last;               /* the lease's last run: put it back after this group */
} expert_run;

/* One phase of a group in one dispatch: product `mat` of every expert on
 * its rows of In [R][in_cols] into Out [R][out_cols] (and, when mat2 >= 0,
 * product mat2 into Out2 in the same dispatch), plus each expert's row of
 * bias [n_experts][out_cols] when given (not with mat2). */
static void group_products(const expert_run *g, int ng, int mat, int mat2, const float *in,
                           int64_t in_cols, float *out, float *out2, int64_t out_cols,
                           const float *bias)
{
    ms_matmul_job jobs[2 * GROUP_MAX];
    int nj = 0;
    for (int i = 0; i < ng; i++) {
        const float *X = in + g[i].row0 * in_cols;
        int64_t o = g[i].row0 * out_cols;
        jobs[nj++] = (ms_matmul_job){.w = &g[i].lease.mat[mat], .X = X, .n = g[i].rows,
                                     .Y = out + o,
                                     .bias = bias ? bias + (int64_t)g[i].lease.expert * out_cols
                                                  : NULL};
        if (mat2 >= 0)
            jobs[nj++] = (ms_matmul_job){.w = &g[i].lease.mat[mat2], .X = X, .n = g[i].rows,
                                         .Y = out2 + o};
    }
    ms_matmul_many(jobs, nj);
}

/* The FFNs of a group of experts on their rows of X [R][d_model] -> Y
 * [R][d_model], R the group's rows; work: R * 3 * d_ff floats. Each phase's
 * products go out in one dispatch (the up/gate projections of every
 * expert, then every down projection): the same rows calls as one expert
 * at a time, so the same bits, with no join between small products. */
static void experts_ffn(const ms_moe *m, const expert_run *g, int ng, int64_t R, const float *X,
                        float *work, float *Y)
{
    int64_t ff = m->d_ff, d = m->d_model;
    if (m->ffn == MS_FFN_SWIGLU) {
        float *G = work, *U = G + R * ff, *H = U + R * ff;
        group_products(g, ng, 0, 1, X, d, G, U, ff, NULL);
        silu_mul(G, U, R, ff, H);
        group_products(g, ng, 2, -1, H, ff, Y, NULL, d, NULL);
        return;
    }
    float *H2 = work, *H = work + R * 2 * ff;
    const float *bias[CHUNK_ROWS];
    for (int i = 0; i < ng; i++)
        for (int k = 0; k < g[i].rows; k++)
            bias[g[i].row0 + k] = m->gate_up_bias
                                      ? m->gate_up_bias + (int64_t)g[i].lease.expert * 2 * ff
                                      : NULL;
    group_products(g, ng, 0, -1, X, d, H2, NULL, 2 * ff, NULL);
    ms_rows_parallel(R, ff, oai_glu_span, &(glu_job){m, H2, bias, H});
    group_products(g, ng, 1, -1, H, ff, Y, NULL, d, m->down_bias);
}

/* Gathers rows [skip, skip + run->rows) of those routed to run->lease.expert
 * (in position order) at row `row0` of X, noting their slots. */
static void gather(const ms_moe *m, const float *x, int64_t n, const int32_t *ids,
                   expert_run *run, int64_t skip, float *X, int32_t *slot)
{
    int64_t d = m->d_model, k = m->top_k, seen = 0, got = 0;
    for (int64_t i = 0; i < n * k && got < run->rows; i++)
        if (ids[i] == run->lease.expert && seen++ >= skip) {
            slot[run->row0 + got] = (int32_t)i;
            memcpy(X + (run->row0 + got) * d, x + (i / k) * d, (size_t)d * 4);
            got++;
        }
}

/* Runs a group and scatters its outputs to their slots, then puts back the
 * leases whose last rows it ran. */
static void run_group(const ms_moe *m, ms_expert_store *st, expert_run *g, int ng, int64_t R,
                      const float *X, float *work, float *Y, const int32_t *slot, float *contrib)
{
    int64_t d = m->d_model;
    experts_ffn(m, g, ng, R, X, work, Y);
    for (int64_t r = 0; r < R; r++)
        memcpy(contrib + (int64_t)slot[r] * d, Y + r * d, (size_t)d * 4);
    for (int i = 0; i < ng; i++)
        if (g[i].last)
            ms_expert_put(st, &g[i].lease);
}

int ms_moe_forward(const ms_moe *m, ms_expert_store *st, const float *x, int64_t n,
                   const int32_t *ids, const float *w, float *out, float *scratch,
                   ms_err *err)
{
    int64_t d = m->d_model, k = m->top_k, C = chunk_rows(m, n);
    float *X = scratch, *work = X + C * d, *Y = work + C * 3 * m->d_ff;
    float *contrib = Y + C * d;                  /* [n][k][d] */
    int32_t *slot = (int32_t *)(contrib + n * k * d); /* [C] slot of each gathered row */
    int32_t *uni = slot + C;                     /* [n_experts] the union, ascending */
    int32_t count[MS_ROUTER_MAX_EXPERTS] = {0};  /* rows routed to each expert */

    for (int64_t i = 0; i < n * k; i++)
        if (ids[i] < m->n_experts)
            count[ids[i]]++;
    int nu = 0;
    for (int e = 0; e < m->n_experts; e++)
        if (count[e])
            uni[nu++] = e;
    if (nu && ms_expert_batch_begin(st, m->layer, uni, nu, err))
        return -1;
    /* experts arrive in completion order; each writes only its own slots.
     * Where the store lets a batch's leases be held together (page cache:
     * they are views of the mapping) a group gathers experts up to C rows,
     * else each expert is a group of its own while the next one loads; an
     * expert with more than C rows runs in pieces of C. */
    int together = ms_expert_batch_holds_all(st);
    expert_run g[GROUP_MAX];
    int ng = 0, rc = 0;
    int64_t rows = 0;
    ms_expert_lease lease;
    while (nu && (rc = ms_expert_batch_next(st, &lease, err)) == 1) {
        int64_t total = count[lease.expert];
        for (int64_t done = 0; done < total;) {
            if (ng == GROUP_MAX || rows == C) {
                run_group(m, st, g, ng, rows, X, work, Y, slot, contrib);
                ng = 0;
                rows = 0;
            }
            int64_t take = total - done < C - rows ? total - done : C - rows;
            g[ng] = (expert_run){lease, rows, (int)take, done + take == total};
            gather(m, x, n, ids, &g[ng], done, X, slot);
            rows += take;
            done += take;
            ng++;
        }
        if (!together) {
            run_group(m, st, g, ng, rows, X, work, Y, slot, contrib);
            ng = 0;
            rows = 0;
        }
    }
    if (rc < 0) {
        for (int i = 0; i < ng; i++)
            if (g[i].last)
                ms_expert_put(st, &g[i].lease);
        return -1;
    }
    if (ng)
        run_group(m, st, g, ng, rows, X, work, Y, slot, contrib);
    /* canonical top-k order: bit-identical whatever the completion order */
    for (int64_t t = 0; t < n; t++) {
        float *o = out + t * d;
        memset(o, 0, (size_t)d * 4);
        for (int64_t j = 0; j < k; j++) {
            /* an identity (zero-computation) expert returns its input */
            const float *c = ids[t * k + j] >= m->n_experts ? x + t * d
                                                            : contrib + (t * k + j) * d;
            float wj = w[t * k + j];
            for (int64_t i = 0; i < d; i++)
                o[i] += wj * c[i];
        }
    }
    return 0;
}

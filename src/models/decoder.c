/* The pre-norm decoder loop of the GQA families and deepseek_v3. */
#include "models/decoder.h"

#include <string.h>

#include "base/pool.h"
#include "models/ops.h"

int ms_decoder_init(ms_decoder *dec, ms_model *base, int64_t d, int64_t vocab, float eps,
                    ms_err *err)
{
    dec->base = base;
    dec->d = d;
    dec->vocab = vocab;
    dec->eps = eps;
    dec->layers = ms_arena_alloc(&base->arena, sizeof *dec->layers * (size_t)base->n_layers,
                                 "layers", err);
    return dec->layers ? 0 : -1;
}

static int64_t moe_scratch(const ms_decoder *dec, int64_t n);

int ms_decoder_alloc_scratch(ms_decoder *dec, ms_err *err)
{
    const ms_model *b = dec->base;
    int64_t B = b->max_batch, d = dec->d, work = 0, E = 1, K = 1, shared = 0;
    if (dec->layer_forward) { /* the family's layers keep their own scratch; blocks, no spans */
        if (!(dec->x = ms_arena_alloc(&dec->base->arena, (size_t)(B * d) * 4, "activations", err)) ||
            !(dec->xn = ms_arena_alloc(&dec->base->arena, (size_t)(B * d) * 4, "activations",
                                       err)))
            return -1;
        return 0;
    }
    for (int l = b->layer0; l < b->layer1; l++) {
        const ms_decoder_layer *L = &dec->layers[l];
        int64_t w = L->use_mla ? ms_mla_scratch(&L->mla, B) : ms_gqa_scratch(&L->attn, B);
        if (L->is_moe) {
            int64_t m = ms_moe_scratch(&L->moe, B);
            if (L->shared.d_ff) {
                int64_t s = ms_mlp_scratch(L->shared.d_ff, B);
                m = m > s ? m : s;
                shared = B * d;
            }
            w = w > m ? w : m;
            E = L->router.n_experts > E ? L->router.n_experts : E;
            K = L->router.top_k > K ? L->router.top_k : K;
        } else {
            int64_t m = ms_mlp_scratch(L->mlp.d_ff, B);
            w = w > m ? w : m;
        }
        work = w > work ? w : work;
    }
    dec->max_experts = E;
    dec->max_topk = K;
    /* a span beyond max_batch positions: residual, normed input, ffn output,
     * routing, the MoE's contributions per position */
    dec->base->span_row_bytes = 4 * (3 * d + E + 2 * K) + 4 * (moe_scratch(dec, 2 * B) -
                                                               moe_scratch(dec, B)) / B;
    ms_arena *a = &dec->base->arena;
    struct { void **p; int64_t n; } bufs[] = {
        {(void **)&dec->x, B * d},       {(void **)&dec->xn, B * d},
        {(void **)&dec->tmp, B * d},     {(void **)&dec->rlogits, B * E},
        {(void **)&dec->topw, B * K},    {(void **)&dec->topi, B * K},
        {(void **)&dec->work, work},     {(void **)&dec->shared_out, shared},
        {(void **)&dec->pf_tmp, d + E},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i].n && !(*bufs[i].p = ms_arena_alloc(a, (size_t)bufs[i].n * 4, "activations",
                                                       err)))
            return -1;
    return 0;
}

/* The per-position buffers of one forward call: the arena's for a call of
 * at most max_batch positions, else the model's span buffers. */
typedef struct rows {
    float *x, *xn, *out;      /* [n][d] residual, normed, ffn output */
    float *rlogits, *topw;    /* [n][E], [n][K] */
    int32_t *topi;            /* [n][K] */
    float *moe;               /* ms_moe_scratch(n) */
} rows;

static int64_t moe_scratch(const ms_decoder *dec, int64_t n)
{
    int64_t w = 0;
    for (int l = dec->base->layer0; l < dec->base->layer1; l++)
        if (dec->layers[l].is_moe) {
            int64_t m = ms_moe_scratch(&dec->layers[l].moe, n);
            w = m > w ? m : w;
        }
    return w;
}

static int get_rows(ms_decoder *dec, int64_t n, rows *r, ms_err *err)
{
    ms_model *b = dec->base;
    if (n <= b->max_batch) {
        *r = (rows){dec->x, dec->xn, dec->tmp, dec->rlogits, dec->topw, dec->topi, dec->work};
        return 0;
    }
    int64_t d = dec->d, E = dec->max_experts, K = dec->max_topk;
    float *p = ms_scratch_get(&b->span, n * (3 * d + E + 2 * K) + moe_scratch(dec, n), err);
    if (!p) {
        ms_err_wrap(err, "a prefill span of %lld positions", (long long)n);
        return -1;
    }
    r->x = p;
    r->xn = r->x + n * d;
    r->out = r->xn + n * d;
    r->rlogits = r->out + n * d;
    r->topw = r->rlogits + n * E;
    r->topi = (int32_t *)(r->topw + n * K);
    r->moe = (float *)r->topi + n * K;
    return 0;
}

/* Final norm and lm_head for the rows the caller wants (none when the
 * caller passed no logits buffer: an inner block of a longer prompt): all,
 * the last, or those of head_rows (the last row of each sequence's span in
 * a call of several), a block of max_batch rows at a time. The norm works
 * row by row, so gathering rows changes no bit. */
static void head(ms_decoder *dec, const ms_fwd *f, const float *x)
{
    int64_t n = f->n, d = dec->d, B = dec->base->max_batch;
    int64_t first = f->logits_all ? 0 : n - 1, n_rows = f->head_rows ? f->n_head : n - first;
    if (!f->logits)
        return;
    for (int64_t i0 = 0; i0 < n_rows; i0 += B) {
        int64_t nb = n_rows - i0 < B ? n_rows - i0 : B;
        if (f->head_rows)
            for (int64_t i = 0; i < nb; i++)
                ms_rmsnorm(x + f->head_rows[i0 + i] * d, dec->final_norm, dec->eps, 1, d,
                           dec->xn + i * d);
        else
            ms_rmsnorm(x + (first + i0) * d, dec->final_norm, dec->eps, nb, d, dec->xn);
        ms_trace_f32(f->trace, dec->xn, nb, d, "final_norm");
        float *lg = f->logits + i0 * dec->vocab;
        ms_matmul(&dec->lm_head, dec->xn, (int)nb, lg);
        ms_trace_f32(f->trace, lg, nb, dec->vocab, "logits");
    }
}

/* Prefetch for the next MoE layer after l, from the residuals x [n][d] of
 * the call's rows. A few rows (a decode step, one or several sequences):
 * each row's prediction (the next layer's norm and router, top-k), their
 * union read at once. From the residual after l's MoE (early 0) all top-k;
 * from the residual before l's MoE (early 1) each row's best prefetch_early,
 * started once l's own reads are, so the disk keeps reading while l's
 * experts compute (docs/perf.md: that prediction is less often right and
 * reads more bytes). Many rows (a prompt) that pick at least twice as many
 * experts as the layer has will ask for nearly all of them: all are read
 * while the next attention runs, where they fit in half the cache (page
 * cache: always). tmp: d + n_experts floats (the work area is free then). */
static void prefetch_next(ms_decoder *dec, int l, const float *x, int64_t n, int early,
                          float *tmp)
{
    ms_model *b = dec->base;
    for (int nl = l + 1; nl < b->layer1; nl++) { /* the next stage predicts its own */
        const ms_decoder_layer *N = &dec->layers[nl];
        if (!N->is_moe)
            continue;
        int E = N->moe.n_experts, k = N->router.top_k;
        if (n * k < 2 * (int64_t)E) {
            ms_moe_prefetch_next(b->experts, nl, x, n, dec->d, N->ffn_norm, dec->eps,
                                 &N->router, early ? b->prefetch_early : k, early, tmp);
            return;
        }
        int slots = ms_expert_store_slots(b->experts);
        int32_t ids[MS_ROUTER_MAX_EXPERTS];
        if (early || (slots && 2 * E > slots))
            return;
        for (int e = 0; e < E; e++)
            ids[e] = e;
        ms_expert_prefetch(b->experts, nl, ids, E);
        return;
    }
}

/* prefetch_next (from the residual after layer l's MoE) as a job beside
 * the next dispatch, the next layer's q, k and v: it reads the residual,
 * which that dispatch leaves alone, and writes only pf_tmp and the
 * expert store, which no product touches. On the synthetic gpt-oss-20b
 * the prediction (the next router, a mincore per expert span) took ~65 us
 * a layer in which the other thread waited. */
static void prefetch_beside(void *ctx)
{
    ms_decoder *dec = ctx;
    prefetch_next(dec, dec->pf.layer, dec->pf.x, dec->pf.n, 0, dec->pf_tmp);
}

/* r->out = moe(h) or mlp(h) for layer l over all n rows, h = ffn_norm(x)
 * already in r->xn; the dense products go a block at a time. */
static int ffn(ms_decoder *dec, const ms_fwd *f, int l, const rows *r, ms_err *err)
{
    ms_decoder_layer *L = &dec->layers[l];
    ms_model *b = dec->base;
    int64_t n = f->n, d = dec->d, B = b->max_batch;
    if (L->is_moe) {
        int k = L->router.top_k;
        if (b->prefetch && b->prefetch_early)
            prefetch_next(dec, l, r->x, n, 1, dec->work);
        ms_route(&L->router, r->xn, n, r->rlogits, r->topi, r->topw);
        ms_trace_f32(f->trace, r->rlogits, n, L->router.n_experts, "L%d.router_logits", l);
        ms_trace_i32(f->trace, r->topi, n, k, "L%d.topk_ids", l);
        ms_trace_f32(f->trace, r->topw, n, k, "L%d.topk_w", l);
        if (ms_moe_forward(&L->moe, b->experts, r->xn, n, r->topi, r->topw, r->out, r->moe,
                           err))
            return -1;
    }
    for (int64_t t0 = 0; t0 < n && (!L->is_moe || L->shared.d_ff); t0 += B) {
        int64_t nb = n - t0 < B ? n - t0 : B;
        const float *h = r->xn + t0 * d;
        if (!L->is_moe) {
            ms_mlp_apply(&L->mlp.gate, &L->mlp.up, &L->mlp.down, L->mlp.d_ff, h, (int)nb,
                         r->out + t0 * d, dec->work);
        } else { /* upstream: routed sum + shared experts, then the residual */
            ms_mlp_apply(&L->shared.gate, &L->shared.up, &L->shared.down, L->shared.d_ff, h,
                         (int)nb, dec->shared_out, dec->work);
            ms_add(r->out + t0 * d, dec->shared_out, nb * d);
        }
    }
    return 0;
}

void ms_decoder_bind_norms(ms_decoder_layer *L, ms_binder *b, const char *prefix, int64_t d)
{
    char n[256];
    float *v;
    snprintf(n, sizeof n, "%s.input_layernorm.weight", prefix);
    ms_bind_vector(b, MS_ROLE_DENSE, n, d, &v);
    L->attn_norm = v;
    snprintf(n, sizeof n, "%s.post_attention_layernorm.weight", prefix);
    ms_bind_vector(b, MS_ROLE_DENSE, n, d, &v);
    L->ffn_norm = v;
}

int ms_decoder_bind(ms_decoder *dec, ms_binder *b, const char *prefix, int tie, int64_t n_mtp,
                    ms_layer_fn *layer, ms_prepare_fn *prepare, void *fam,
                    const ms_model_opts *opts, ms_err *err)
{
    const ms_model *m = dec->base;
    int n_layers = m->n_layers;
    char n[160];
    float *v;
    /* a pipeline stage binds its own layers; the rest is described and
     * checked (the skip mode), so every stage knows every layer's shape */
    ms_binder_skip(b, !m->ends);
    snprintf(n, sizeof n, "%s.embed_tokens.weight", prefix);
    ms_bind_plain_linear(b, MS_ROLE_EMBED, n, dec->vocab, dec->d, MS_DTYPE_BF16, &dec->embed);
    for (int l = 0; l < n_layers; l++) {
        ms_binder_skip(b, !ms_model_has_layer(m, l));
        layer(fam, b, l);
    }
    ms_binder_skip(b, !m->ends);
    snprintf(n, sizeof n, "%s.norm.weight", prefix);
    ms_bind_vector(b, MS_ROLE_DENSE, n, dec->d, &v);
    dec->final_norm = v;
    if (tie)
        dec->lm_head = dec->embed;
    else
        ms_bind_plain_linear(b, MS_ROLE_DENSE, "lm_head.weight", dec->vocab, dec->d,
                             MS_DTYPE_BF16, &dec->lm_head);
    for (int64_t i = 0; i < n_mtp; i++) { /* the MTP layers: not the main model */
        snprintf(n, sizeof n, "%s.layers.%lld.", prefix, (long long)(n_layers + i));
        ms_bind_ignore_prefix(b, n);
    }
    ms_binder_skip(b, 0);
    if (opts->check_only || ms_bind_problems(b))
        return 0;
    for (int l = m->layer0; prepare && l < m->layer1; l++)
        if (prepare(fam, l, err))
            return -1;
    return ms_decoder_alloc_scratch(dec, err);
}

static int non_finite(int l, ms_err *err)
{
    return ms_err_set(err, MS_E_FORMAT, "layer %d produced non-finite values (NaN or Inf) in "
                      "the residual stream: the checkpoint's weights or config give them", l);
}

/* After layer l: whether the caller asked the call to stop (not after the
 * last layer, where finishing costs only the head). */
static int stop_asked(const ms_model *b, const ms_fwd *f, int l, ms_err *err)
{
    if (!f->cancel || !*f->cancel || l + 1 == b->layer1)
        return 0;
    ms_err_set(err, MS_E_CANCELLED, "cancelled after layer %d of %d", l + 1 - b->layer0,
               b->layer1 - b->layer0);
    return 1;
}

static int forward(ms_decoder *dec, const ms_fwd *f, ms_err *err);

int ms_decoder_forward(ms_decoder *dec, const ms_fwd *f, ms_err *err)
{
    int rc = forward(dec, f, err);
    ms_pool_beside_flush(); /* the last layer's prediction, if nothing ran it */
    return rc;
}

static int forward(ms_decoder *dec, const ms_fwd *f, ms_err *err)
{
    ms_model *b = dec->base;
    int64_t n = f->n, d = dec->d, B = b->max_batch;
    ms_timers *tm = f->timers;
    double t0 = ms_now(), t1;
    rows r;
    if (get_rows(dec, n, &r, err))
        return -1;
    if (f->x_in)
        memcpy(r.x, f->x_in, sizeof *r.x * (size_t)(n * d));
    else
        for (int64_t t = 0; t < n; t++)
            ms_mat_row(&dec->embed, f->ids[t], r.x + t * d);
    /* layer-major: each layer runs over all n positions (attention a block
     * of max_batch at a time, in order, so a block sees the keys of the
     * blocks before it) before the next layer, so a layer's experts are
     * fetched once for the whole call */
    for (int l = b->layer0; l < b->layer1 && !f->head_only; l++) {
        ms_decoder_layer *L = &dec->layers[l];
        t1 = ms_now();
        tm->other += t1 - t0;
        if (dec->layer_forward) { /* it keeps its own timers */
            if (dec->layer_forward(dec->fam, f, l, r.x, err))
                return -1;
            t0 = ms_now();
            if (!ms_all_finite(r.x, n * d))
                return non_finite(l, err);
            if (f->on_layer)
                f->on_layer(f->on_layer_ctx, l + 1 - b->layer0, b->layer1 - b->layer0);
            if (stop_asked(b, f, l, err))
                return -1;
            continue;
        }
        for (int64_t b0 = 0; b0 < n; b0 += B) {
            ms_fwd fb = *f;
            fb.ids = f->ids + b0;
            fb.n = n - b0 < B ? n - b0 : B;
            fb.pos0 = f->pos0 + b0;
            float *x = r.x + b0 * d;
            ms_rmsnorm(x, L->attn_norm, dec->eps, fb.n, d, dec->xn);
            if (L->use_mla ? ms_mla_forward(&L->mla, &fb, l, dec->xn, dec->tmp, dec->work, err)
                           : ms_gqa_forward(&L->attn, &fb, l, dec->xn, dec->tmp, dec->work, err))
                return -1;
            ms_add(x, dec->tmp, fb.n * d);
        }
        ms_trace_f32(f->trace, r.x, n, d, "L%d.attn_out", l);
        t0 = ms_now();
        tm->attn += t0 - t1;
        ms_rmsnorm(r.x, L->ffn_norm, dec->eps, n, d, r.xn);
        if (ffn(dec, f, l, &r, err))
            return -1;
        ms_add(r.x, r.out, n * d);
        ms_trace_f32(f->trace, r.x, n, d, "L%d.moe_out", l);
        if (b->prefetch && b->experts) {
            dec->pf.layer = l;
            dec->pf.x = r.x;
            dec->pf.n = n;
            ms_pool_beside(prefetch_beside, dec);
        }
        if (!ms_all_finite(r.x, n * d))
            return non_finite(l, err);
        t1 = ms_now();
        tm->experts += t1 - t0;
        t0 = t1;
        if (f->on_layer)
            f->on_layer(f->on_layer_ctx, l + 1 - b->layer0, b->layer1 - b->layer0);
        if (stop_asked(b, f, l, err))
            return -1;
    }
    if (f->x_out) {
        memcpy(f->x_out, r.x, sizeof *r.x * (size_t)(n * d));
        tm->other += ms_now() - t0;
        return 0;
    }
    head(dec, f, r.x);
    tm->head += ms_now() - t0;
    return 0;
}

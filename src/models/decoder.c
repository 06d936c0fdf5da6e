/* The pre-norm decoder loop of the GQA families and deepseek_v3. */
#include "models/decoder.h"

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

int ms_decoder_alloc_scratch(ms_decoder *dec, ms_err *err)
{
    const ms_model *b = dec->base;
    int64_t B = b->max_batch, d = dec->d, work = 0, E = 1, K = 1, shared = 0;
    for (int l = 0; l < b->n_layers; l++) {
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
    ms_arena *a = &dec->base->arena;
    struct { void **p; int64_t n; } bufs[] = {
        {(void **)&dec->x, B * d},       {(void **)&dec->xn, B * d},
        {(void **)&dec->tmp, B * d},     {(void **)&dec->rlogits, B * E},
        {(void **)&dec->topw, B * K},    {(void **)&dec->topi, B * K},
        {(void **)&dec->work, work},     {(void **)&dec->shared_out, shared},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i].n && !(*bufs[i].p = ms_arena_alloc(a, (size_t)bufs[i].n * 4, "activations",
                                                       err)))
            return -1;
    return 0;
}

/* Final norm and lm_head for the rows the caller wants (none when the
 * caller passed no logits buffer: an inner block of a longer prompt). */
static void head(ms_decoder *dec, const ms_fwd *f)
{
    int64_t n = f->n, d = dec->d;
    int64_t first = f->logits_all ? 0 : n - 1;
    if (!f->logits)
        return;
    ms_rmsnorm(dec->x + first * d, dec->final_norm, dec->eps, n - first, d, dec->xn);
    ms_trace_f32(f->trace, dec->xn, n - first, d, "final_norm");
    ms_matmul(&dec->lm_head, dec->xn, (int)(n - first), f->logits);
    ms_trace_f32(f->trace, f->logits, n - first, dec->vocab, "logits");
}

/* Decode prefetch for the next MoE layer after l, from the residual x [d]
 * after l's MoE: its norm, then its router, top-k. (Predicting earlier, from
 * the pre-MoE residual, overlaps more but read 28% more bytes on the
 * synthetic gpt-oss-20b under 6G: worse on a disk-bound run; docs/perf.md.)
 * tmp: ms_moe_prefetch_scratch floats (the work area is free then). */
static void prefetch_next(ms_decoder *dec, int l, const float *x, float *tmp)
{
    ms_model *b = dec->base;
    for (int nl = l + 1; nl < b->n_layers; nl++) {
        const ms_decoder_layer *N = &dec->layers[nl];
        if (!N->is_moe)
            continue;
        ms_moe_prefetch_next(b->experts, nl, x, dec->d, N->ffn_norm, dec->eps, &N->router,
                             tmp);
        return;
    }
}

/* x += moe(h) or mlp(h) for layer l, h = ffn_norm(x) already in xn. */
static int ffn(ms_decoder *dec, const ms_fwd *f, int l, ms_err *err)
{
    ms_decoder_layer *L = &dec->layers[l];
    ms_model *b = dec->base;
    int64_t n = f->n, d = dec->d;
    if (!L->is_moe) {
        ms_mlp_apply(&L->mlp.gate, &L->mlp.up, &L->mlp.down, L->mlp.d_ff, dec->xn, (int)n,
                     dec->tmp, dec->work);
    } else {
        int k = L->router.top_k;
        ms_route(&L->router, dec->xn, n, dec->rlogits, dec->topi, dec->topw);
        ms_trace_f32(f->trace, dec->rlogits, n, L->router.n_experts, "L%d.router_logits", l);
        ms_trace_i32(f->trace, dec->topi, n, k, "L%d.topk_ids", l);
        ms_trace_f32(f->trace, dec->topw, n, k, "L%d.topk_w", l);
        if (ms_moe_forward(&L->moe, b->experts, dec->xn, n, dec->topi, dec->topw, dec->tmp,
                           dec->work, err))
            return -1;
        if (L->shared.d_ff) { /* upstream: routed sum + shared experts, then the residual */
            ms_mlp_apply(&L->shared.gate, &L->shared.up, &L->shared.down, L->shared.d_ff,
                         dec->xn, (int)n, dec->shared_out, dec->work);
            ms_add(dec->tmp, dec->shared_out, n * d);
        }
    }
    ms_add(dec->x, dec->tmp, n * d);
    ms_trace_f32(f->trace, dec->x, n, d, "L%d.moe_out", l);
    if (b->prefetch && n == 1)
        prefetch_next(dec, l, dec->x, dec->work);
    return 0;
}

int ms_decoder_forward(ms_decoder *dec, const ms_fwd *f, ms_err *err)
{
    ms_model *b = dec->base;
    int64_t n = f->n, d = dec->d;
    ms_timers *tm = f->timers;
    double t0 = ms_now(), t1;

    for (int64_t t = 0; t < n; t++)
        ms_mat_row(&dec->embed, f->ids[t], dec->x + t * d);
    for (int l = 0; l < b->n_layers; l++) {
        ms_decoder_layer *L = &dec->layers[l];
        t1 = ms_now();
        tm->other += t1 - t0;
        ms_rmsnorm(dec->x, L->attn_norm, dec->eps, n, d, dec->xn);
        if (L->use_mla ? ms_mla_forward(&L->mla, f, l, dec->xn, dec->tmp, dec->work, err)
                       : ms_gqa_forward(&L->attn, f, l, dec->xn, dec->tmp, dec->work, err))
            return -1;
        ms_add(dec->x, dec->tmp, n * d);
        ms_trace_f32(f->trace, dec->x, n, d, "L%d.attn_out", l);
        t0 = ms_now();
        tm->attn += t0 - t1;
        ms_rmsnorm(dec->x, L->ffn_norm, dec->eps, n, d, dec->xn);
        if (ffn(dec, f, l, err))
            return -1;
        if (!ms_all_finite(dec->x, n * d))
            return ms_err_set(err, MS_E_FORMAT, "layer %d produced non-finite values (NaN or "
                              "Inf) in the residual stream: the checkpoint's weights or "
                              "config give them", l);
        t1 = ms_now();
        tm->experts += t1 - t0;
        t0 = t1;
    }
    head(dec, f);
    tm->head += ms_now() - t0;
    return 0;
}

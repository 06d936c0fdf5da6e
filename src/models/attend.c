/* Attention over the KV cache: the work split and the merge of attend.h
 * over the kernels' online-softmax step. */
#include "models/attend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/pool.h"

enum {
    ROW_BLOCK = 8,          /* rows of one sequence sharing a pass over a chunk */
    MAX_HEADS = 128,        /* heads per work item */
    PARTIAL_BUDGET = 4 << 20, /* floats of span states per pass (16 MB) */
};

float *ms_scratch_get(ms_scratch *s, int64_t n, ms_err *err)
{
    if (n <= s->n)
        return s->p;
    float *p = ms_malloc((size_t)n * sizeof *p, "attention scratch", err);
    if (!p)
        return NULL;
    free(s->p);
    s->p = p;
    s->n = n;
    return p;
}

/* One pass: rows [t0, t0 + nt) of the call, in blocks; items are (block,
 * KV head, head group, run of consecutive spans). */
typedef struct pass {
    const ms_attend *a;
    const ms_fwd *f;
    int layer;
    const float *q;
    int64_t ldq;
    float *out;
    int64_t ldo;
    int64_t t0, nt;
    int block, n_blocks;       /* rows per block */
    int heads, n_groups;       /* heads per item, items per KV head */
    int64_t n_spans;           /* spans a row of the pass may touch */
    int64_t run, runs;         /* consecutive spans per item (the last run may be shorter),
                                  items per (block, KV head, group) */
    float *part;               /* [nt][n_heads][n_spans][2 + dv] */
    float *work;               /* per worker: tiles and scores */
    int64_t work_floats;
} pass;

static int64_t row_lo(const ms_attend *a, int64_t pos)
{
    return a->window && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
}

/* MLA: the value is the front of the key, read from the key's rows. */
static int value_in_key(const ms_attend *a)
{
    return a->v_off == a->k_off && a->v_step == a->k_step && a->dv <= a->dk;
}

static float *state(const pass *p, int64_t t, int h, int64_t s)
{
    int64_t st = 2 + p->a->dv;
    return p->part + (((t - p->t0) * p->a->n_heads + h) * p->n_spans + s) * st;
}

/* The rows of block b: [*r0, *r1). In a batched step (several sequences)
 * every row is its own block. */
static void block_rows(const pass *p, int64_t b, int64_t *r0, int64_t *r1)
{
    *r0 = p->t0 + b * p->block;
    *r1 = *r0 + p->block < p->t0 + p->nt ? *r0 + p->block : p->t0 + p->nt;
}

/* Keys [c0, c0 + n) of KV head kvh as float rows: in place when the cache
 * is f32 (or bf16, asked; tiled keys: as their tiles), else widened into
 * tile. */
static const float *keys_of(const ms_kv *kv, int64_t c0, int n, int64_t off, int dim,
                            int raw_bf16, float *tile, int64_t *ld)
{
    if (kv->fmt == MS_KV_F32 || raw_bf16) {
        *ld = kv->plane; /* the kernel reads f32 (and bf16, asked) rows as stored */
        return ms_kv_elems(kv, c0, off);
    }
    const ms_kernel_ops *k = ms_kernels();
    if (dim == kv->plane) /* the chunk's rows are contiguous: one pass */
        k->widen(kv->fmt, ms_kv_elems(kv, c0, off), ms_kv_scales(kv, c0, off), kv->group,
                 (int64_t)n * dim, tile);
    else
        for (int p = 0; p < n; p++)
            k->widen(kv->fmt, ms_kv_elems(kv, c0 + p, off), ms_kv_scales(kv, c0 + p, off),
                     kv->group, dim, tile + (int64_t)p * dim);
    *ld = dim;
    return tile;
}

/* Where a chunk's keys (or values) of one head lie, for the kernel to ask
 * for ahead of their use (a chunk is read in bursts too short for the
 * hardware prefetcher); NULL when its rows are not contiguous. */
static const char *chunk_bytes(const ms_kv *kv, int64_t c0, int64_t off, int dim, int64_t *bytes)
{
    *bytes = (int64_t)MS_ATTN_CHUNK * dim * ms_kvfmt_size(kv->fmt);
    return dim == kv->plane ? ms_kv_elems(kv, c0, off) : NULL;
}

static void item_task(void *ctx, int64_t it, int worker)
{
    const pass *p = ctx;
    const ms_attend *a = p->a;
    int64_t s0 = it % p->runs * p->run, rest = it / p->runs;
    int64_t s1 = s0 + p->run < p->n_spans ? s0 + p->run : p->n_spans; /* spans [s0, s1) */
    int hg = (int)(rest % p->n_groups), kvh = (int)(rest / p->n_groups % a->n_kv_heads);
    int64_t b = rest / p->n_groups / a->n_kv_heads, r0, r1;
    block_rows(p, b, &r0, &r1);
    int g = a->n_heads / a->n_kv_heads, h0 = kvh * g + hg * p->heads;
    int64_t k0 = s0 * MS_ATTN_SPAN, k1 = s1 * MS_ATTN_SPAN; /* keys of the run */
    int64_t lo_min = INT64_MAX, hi_max = -1;
    for (int64_t t = r0; t < r1; t++) {
        int64_t pos = ms_fwd_pos(p->f, t), lo = row_lo(a, pos);
        lo_min = lo < lo_min ? lo : lo_min;
        hi_max = pos > hi_max ? pos : hi_max;
        for (int64_t s = s0; s < s1; s++)
            if (lo < (s + 1) * MS_ATTN_SPAN && pos >= s * MS_ATTN_SPAN)
                for (int j = 0; j < p->heads; j++) {
                    float *st = state(p, t, h0 + j, s);
                    st[0] = -INFINITY;
                    memset(st + 1, 0, (size_t)(1 + a->dv) * sizeof *st);
                }
    }
    if (lo_min >= k1 || hi_max < k0)
        return;
    const ms_kv *kv = ms_fwd_kv(p->f, p->layer, r0);
    float *w = p->work + worker * p->work_floats;
    float *ktile = w, *vtile = ktile + MS_ATTN_CHUNK * a->dk,
          *sbuf = vtile + MS_ATTN_CHUNK * a->dv;
    int v_in_k = value_in_key(a);
    const float *qs[ROW_BLOCK * MAX_HEADS];
    float *sts[ROW_BLOCK * MAX_HEADS];
    int los[ROW_BLOCK * MAX_HEADS], his[ROW_BLOCK * MAX_HEADS];
    int64_t c_first = (lo_min > k0 ? lo_min : k0) / MS_ATTN_CHUNK;
    int64_t c_last = (hi_max < k1 - 1 ? hi_max : k1 - 1) / MS_ATTN_CHUNK;
    for (int64_t c = c_first; c <= c_last; c++) {
        int64_t c0 = c * MS_ATTN_CHUNK;
        int nq = 0, n = 0;
        for (int64_t t = r0; t < r1; t++) {
            int64_t pos = ms_fwd_pos(p->f, t), lo = row_lo(a, pos);
            int64_t l = lo > c0 ? lo : c0, h = pos < c0 + MS_ATTN_CHUNK - 1 ? pos : c0 + MS_ATTN_CHUNK - 1;
            if (l > h)
                continue;
            for (int j = 0; j < p->heads; j++) {
                qs[nq] = p->q + (t * a->n_heads + h0 + j) * p->ldq;
                sts[nq] = state(p, t, h0 + j, c0 / MS_ATTN_SPAN);
                los[nq] = (int)(l - c0);
                his[nq] = (int)(h - c0 + 1);
                n = his[nq] > n ? his[nq] : n;
                nq++;
            }
        }
        if (!nq)
            continue;
        int64_t ldk, ldv;
        /* bf16 chunks whose rows are contiguous go to the kernel as stored */
        int raw = kv->fmt == MS_KV_BF16 && a->dk == kv->plane && (v_in_k || a->dv == kv->plane);
        const float *k = keys_of(kv, c0, n, a->k_off + kvh * a->k_step, a->dk, raw, ktile, &ldk);
        const float *v = v_in_k ? k : keys_of(kv, c0, n, a->v_off + kvh * a->v_step, a->dv, raw,
                                             vtile, &ldv);
        if (v_in_k)
            ldv = ldk;
        ms_attn_step step = {.nq = nq, .n = n, .dk = a->dk, .dv = a->dv, .scale = a->scale,
                             .k = k, .v = v, .ldk = ldk, .ldv = ldv, .q = qs, .lo = los,
                             .hi = his, .st = sts, .s = sbuf, .bf16 = raw,
                             .ktiled = ms_kv_tiled(kv, a->k_off + kvh * a->k_step)};
        if (c < c_last) { /* the next chunk (of this span or the next) streams in while this
                             one computes */
            step.next[0] = chunk_bytes(kv, c0 + MS_ATTN_CHUNK, a->k_off + kvh * a->k_step,
                                       a->dk, &step.next_bytes[0]);
            if (!v_in_k)
                step.next[1] = chunk_bytes(kv, c0 + MS_ATTN_CHUNK, a->v_off + kvh * a->v_step,
                                           a->dv, &step.next_bytes[1]);
        }
        ms_kernels()->attn(&step);
    }
}

/* Query i of the pass (row t0 + i / n_heads): its spans merged in order. */
static void merge_task(void *ctx, int64_t i, int worker)
{
    (void)worker;
    const pass *p = ctx;
    const ms_attend *a = p->a;
    int64_t t = p->t0 + i / a->n_heads;
    int h = (int)(i % a->n_heads);
    int64_t pos = ms_fwd_pos(p->f, t), s0 = row_lo(a, pos) / MS_ATTN_SPAN,
            s1 = pos / MS_ATTN_SPAN;
    float m = a->sinks ? a->sinks[h] : -INFINITY;
    for (int64_t s = s0; s <= s1; s++)
        m = state(p, t, h, s)[0] > m ? state(p, t, h, s)[0] : m;
    float l = a->sinks ? expf(a->sinks[h] - m) : 0.0f;
    float *o = p->out + (t * a->n_heads + h) * p->ldo;
    memset(o, 0, (size_t)a->dv * sizeof *o);
    const ms_kernel_ops *k = ms_kernels();
    for (int64_t s = s0; s <= s1; s++) {
        const float *st = state(p, t, h, s);
        float e = expf(st[0] - m);
        l += st[1] * e;
        k->axpy(e, st + 2, o, a->dv);
    }
    float inv = 1.0f / l;
    for (int d = 0; d < a->dv; d++)
        o[d] *= inv;
}

/* Cache bytes row t reads: its positions' keys and values of every KV head. */
static int64_t row_bytes(const ms_attend *a, const ms_kv *kv, int64_t pos)
{
    int v_in_k = value_in_key(a);
    int64_t per = ms_kv_bytes_per_pos(kv->fmt, a->dk, kv->group < a->dk ? kv->group : a->dk);
    if (!v_in_k)
        per += ms_kv_bytes_per_pos(kv->fmt, a->dv, kv->group < a->dv ? kv->group : a->dv);
    return (pos - row_lo(a, pos) + 1) * per * a->n_kv_heads;
}

/* Floating-point operations row t's heads spend on those positions: a
 * multiply-add per key dimension for the score and per value dimension for
 * the sum (the softmax's exponentials not counted). */
static double row_flops(const ms_attend *a, int64_t pos)
{
    return 2.0 * (double)(pos - row_lo(a, pos) + 1) * a->n_heads * (a->dk + a->dv);
}

int ms_attend_rows(const ms_attend *a, const ms_fwd *f, int layer, const float *q, int64_t ldq,
                   float *out, int64_t ldo, ms_err *err)
{
    double t0 = ms_now();
    int64_t n = f->n, max_pos = 0;
    for (int64_t t = 0; t < n; t++) {
        max_pos = ms_fwd_pos(f, t) > max_pos ? ms_fwd_pos(f, t) : max_pos;
        f->timers->kv_bytes += row_bytes(a, ms_fwd_kv(f, layer, t), ms_fwd_pos(f, t));
        f->timers->attn_flops += row_flops(a, ms_fwd_pos(f, t));
    }
    int threads = ms_pool_threads(), g = a->n_heads / a->n_kv_heads;
    int64_t n_spans = max_pos / MS_ATTN_SPAN + 1, st = 2 + a->dv;
    int64_t per_row = (int64_t)a->n_heads * n_spans * st;
    int64_t rows = PARTIAL_BUDGET / per_row;
    rows = rows < 1 ? 1 : rows > n ? n : rows;
    pass p = {.a = a, .f = f, .layer = layer, .q = q, .ldq = ldq, .out = out, .ldo = ldo,
              .block = f->n_seq > 1 ? 1 : ROW_BLOCK, .n_spans = n_spans};
    p.work_floats = MS_ATTN_CHUNK * ((int64_t)a->dk + a->dv) + ms_attn_scratch(a->dk);
    float *buf = ms_scratch_get(f->scratch, rows * per_row + threads * p.work_floats, err);
    if (!buf)
        return -1;
    p.part = buf;
    p.work = buf + rows * per_row;
    for (p.t0 = 0; p.t0 < n; p.t0 += rows) {
        p.nt = n - p.t0 < rows ? n - p.t0 : rows;
        p.n_blocks = (int)((p.nt + p.block - 1) / p.block);
        /* heads per item: the whole group, halved while there are too few
         * items for the threads (a short context with few KV heads) */
        p.heads = g;
        while (p.heads > MAX_HEADS || g % p.heads)
            p.heads--;
        while (p.heads % 2 == 0 &&
               (int64_t)p.n_blocks * a->n_kv_heads * (g / p.heads) * n_spans < 2 * threads)
            p.heads /= 2;
        p.n_groups = g / p.heads;
        /* a row's spans in one item where the (block, KV head, group)
         * items alone are enough for the threads: a run streams on from one
         * span's last chunk into the next span's first, asked for ahead
         * like the others (the first chunk of an item is not) */
        int64_t items = (int64_t)p.n_blocks * a->n_kv_heads * p.n_groups;
        p.run = items >= 4 * threads ? n_spans : 1;
        p.runs = (n_spans + p.run - 1) / p.run;
        ms_pool_run(items * p.runs, item_task, &p);
        ms_pool_run(p.nt * a->n_heads, merge_task, &p);
    }
    f->timers->attn_kv += ms_now() - t0;
    return 0;
}

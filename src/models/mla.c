/* Multi-head Latent Attention in the absorbed form over the compressed
 * cache; see mla.h for the algebra. */
#include "models/mla.h"

#include <math.h>
#include <string.h>

#include "base/json.h"
#include "base/pool.h"
#include "models/attend.h"
#include "models/ops.h"

void ms_mla_bind(ms_mla *a, ms_binder *b, const char *prefix, int with_bias)
{
    char n[256];
    int64_t d = a->d_model, H = a->n_heads, qk = (int64_t)a->nope + a->rope;
    int64_t row = ms_mla_kv_row(a);
    float *v;
#define LIN(mat, name, rows, cols)                                              \
    do {                                                                        \
        snprintf(n, sizeof n, "%s.%s", prefix, name);                           \
        ms_bind_linear(b, MS_ROLE_DENSE, n, rows, cols, &a->mat, NULL);         \
    } while (0)
#define VEC(field, name, len)                                                   \
    do {                                                                        \
        snprintf(n, sizeof n, "%s.%s", prefix, name);                           \
        ms_bind_vector(b, MS_ROLE_DENSE, n, len, &v);                           \
        a->field = v;                                                           \
    } while (0)
    if (a->q_lora) {
        LIN(wq_a, "q_a_proj", a->q_lora, d);
        VEC(q_a_norm, "q_a_layernorm.weight", a->q_lora);
        LIN(wq_b, "q_b_proj", H * qk, a->q_lora);
    } else {
        LIN(wq, "q_proj", H * qk, d);
    }
    LIN(wkv_a, "kv_a_proj_with_mqa", row, d);
    VEC(kv_a_norm, "kv_a_layernorm.weight", a->kv_lora);
    LIN(wkv_b, "kv_b_proj", H * (a->nope + a->v), a->kv_lora);
    LIN(wo, "o_proj", d, H * a->v);
    /* upstream: attention_bias adds biases to q_a_proj, kv_a_proj_with_mqa
     * and o_proj; q_proj and the b projections never have one */
    if (with_bias) {
        if (a->q_lora)
            VEC(bq_a, "q_a_proj.bias", a->q_lora);
        VEC(bkv_a, "kv_a_proj_with_mqa.bias", row);
        VEC(bo, "o_proj.bias", d);
    }
#undef LIN
#undef VEC
}

/* W_UK_h^T for head h: rows kv_lora, columns pad + nope, element [c][pad + j]
 * = kv_b[r0 + j][c] with r0 = h * (nope + v). FP8 keeps its codes and block
 * scales (transposed); pad = r0 % block_rows realigns the head's first row
 * to a scale block, its columns hold code 0 and meet zero query entries. */
static int transpose_uk(const ms_mla *a, int h, ms_mat *t, int *pad, ms_arena *arena,
                        ms_err *err)
{
    const ms_mat *w = &a->wkv_b;
    int64_t kvl = a->kv_lora, nope = a->nope, r0 = (int64_t)h * (a->nope + a->v);
    if (w->fmt != MS_WFMT_FP8_BLOCK) {
        int es = w->fmt == MS_WFMT_F32 ? 4 : 2;
        uint8_t *dst = ms_arena_alloc(arena, (size_t)(kvl * nope * es), "MLA W_UK^T", err);
        if (!dst)
            return -1;
        const uint8_t *src = w->w;
        for (int64_t j = 0; j < nope; j++)
            for (int64_t c = 0; c < kvl; c++)
                memcpy(dst + (c * nope + j) * es, src + ((r0 + j) * kvl + c) * es, (size_t)es);
        *t = (ms_mat){.fmt = w->fmt, .rows = kvl, .cols = nope, .w = dst};
        *pad = 0;
        return 0;
    }
    int64_t br = w->block_rows, bc = w->block_cols;
    if (br % 32)
        return ms_err_set(err, MS_E_UNSUPPORTED, "MLA absorbed form: FP8 weight_block_size "
                          "rows %lld is not a multiple of 32", (long long)br);
    int64_t p = r0 % br, cols = p + nope, base = r0 - p;
    int64_t wsc = (kvl + bc - 1) / bc, tsr = wsc, tsc = (cols + br - 1) / br;
    int es = ms_dtype_size(w->scale_dtype);
    uint8_t *codes = ms_arena_alloc(arena, (size_t)(kvl * cols), "MLA W_UK^T", err);
    uint8_t *scale = codes ? ms_arena_alloc(arena, (size_t)(tsr * tsc * es), "MLA W_UK^T", err)
                           : NULL;
    if (!scale)
        return -1;
    const uint8_t *src = w->w, *ssrc = w->scale;
    for (int64_t j = 0; j < nope; j++) /* the arena zeroed the pad columns (code 0 = +0) */
        for (int64_t c = 0; c < kvl; c++)
            codes[c * cols + p + j] = src[(r0 + j) * kvl + c];
    for (int64_t i = 0; i < tsr; i++)
        for (int64_t k = 0; k < tsc; k++)
            memcpy(scale + (i * tsc + k) * es, ssrc + ((base / br + k) * wsc + i) * es,
                   (size_t)es);
    *t = (ms_mat){.fmt = MS_WFMT_FP8_BLOCK, .rows = kvl, .cols = cols, .w = codes,
                  .scale = scale, .scale_dtype = w->scale_dtype, .block_rows = (int32_t)bc,
                  .block_cols = (int32_t)br};
    *pad = (int)p;
    return 0;
}

int ms_mla_prepare(ms_mla *a, ms_arena *arena, ms_err *err)
{
    a->uk_t = ms_arena_alloc(arena, sizeof *a->uk_t * (size_t)a->n_heads, "MLA heads", err);
    a->uk_pad = ms_arena_alloc(arena, sizeof *a->uk_pad * (size_t)a->n_heads, "MLA heads", err);
    if (!a->uk_t || !a->uk_pad)
        return -1;
    a->uk_pad_max = 0;
    for (int h = 0; h < a->n_heads; h++) {
        if (transpose_uk(a, h, &a->uk_t[h], &a->uk_pad[h], arena, err))
            return -1;
        a->uk_pad_max = a->uk_pad[h] > a->uk_pad_max ? a->uk_pad[h] : a->uk_pad_max;
    }
    return 0;
}

int64_t ms_mla_scratch(const ms_mla *a, int64_t n)
{
    int64_t H = a->n_heads, qk = (int64_t)a->nope + a->rope, row = ms_mla_kv_row(a);
    return n * (a->q_lora + H * qk            /* q_a output, q */
                + row                         /* [c | k_rope] of the new positions */
                + H * (a->uk_pad_max + a->nope) /* q_nope, padded per head */
                + H * row                     /* [W_UK^T q_nope | q_rope] per head */
                + H * a->kv_lora              /* attention-weighted latent per head */
                + H * ((int64_t)a->nope + a->v) /* kv_b rows (v part used) */
                + H * a->v)                   /* per-head values, o_proj input */
           + a->rope;                         /* cos/sin */
}

/* q [n][n_heads][nope + rope], LoRA scale applied, from the first
 * projection of x: qa = q_a_proj(x) with q_lora (then norm and q_b_proj),
 * else q = q_proj(x) already. */
static void finish_q(const ms_mla *a, int64_t n, float *qa, float *q)
{
    int64_t qd = (int64_t)a->n_heads * (a->nope + a->rope);
    if (a->q_lora) {
        if (a->bq_a)
            ms_add_bias(qa, a->bq_a, n, a->q_lora);
        ms_rmsnorm(qa, a->q_a_norm, a->lora_eps, n, a->q_lora, qa);
        ms_matmul(&a->wq_b, qa, (int)n, q);
    }
    if (a->q_scale != 1.0f)
        for (int64_t i = 0; i < n * qd; i++)
            q[i] *= a->q_scale;
}

/* A product per head over all n positions: rows [r0 + h*r_step,
 * r0 + h*r_step + n_rows) of head h's matrix (mats[h], or mats[0] for all). */
typedef struct head_rows {
    const ms_mat *mats;
    int per_head_mat;
    const float *X;   /* head h reads X + h * x_step, row stride ldx */
    int64_t x_step, ldx;
    float *Y;         /* head h writes Y + h * y_step, row stride ldy */
    int64_t y_step, ldy;
    int64_t r0, r_step, n_rows;
    int n;
} head_rows;

static void head_rows_task(void *ctx, int64_t h, int worker)
{
    (void)worker;
    const head_rows *j = ctx;
    const ms_mat *w = j->per_head_mat ? &j->mats[h] : j->mats;
    int64_t r0 = j->r0 + h * j->r_step;
    ms_kernels()->rows[w->fmt](w, j->X + h * j->x_step, j->n, j->ldx, j->Y + h * j->y_step,
                               j->ldy, r0, r0 + j->n_rows);
}

/* The heads' products in one dispatch, counted as one (their weight bytes,
 * and the product profile's row of their kind). */
static void run_heads(const head_rows *j, int64_t H)
{
    double t0 = ms_products_timing() ? ms_now() : 0;
    ms_pool_run(H, head_rows_task, (void *)j);
    int64_t bytes = 0;
    for (int64_t h = 0; h < H; h++) {
        const ms_mat *w = j->per_head_mat ? &j->mats[h] : j->mats;
        int64_t r0 = j->r0 + h * j->r_step;
        bytes += ms_rows_bytes(w, r0, r0 + j->n_rows);
    }
    ms_products_note(j->mats, j->n_rows, (int)H, j->n, bytes, t0 ? ms_now() - t0 : 0);
}

/* qcat[t][h] = [W_UK_h^T q_nope[t][h] | q_rope[t][h]]: one product per head
 * over all n positions, heads in parallel. */
static void absorb_q(const ms_mla *a, const float *q, int64_t n, float *qp, float *qcat)
{
    int64_t H = a->n_heads, nope = a->nope, qk = nope + a->rope, row = ms_mla_kv_row(a);
    int64_t P = a->uk_pad_max + nope;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *src = q + (t * H + h) * qk;
            float *dst = qp + (t * H + h) * P;
            int pad = a->uk_pad[h];
            memset(dst, 0, (size_t)pad * 4);
            memcpy(dst + pad, src, (size_t)nope * 4);
            memcpy(qcat + (t * H + h) * row + a->kv_lora, src + nope, (size_t)a->rope * 4);
        }
    head_rows j = {.mats = a->uk_t, .per_head_mat = 1, .X = qp, .x_step = P, .ldx = H * P,
                   .Y = qcat, .y_step = row, .ldy = H * row, .n_rows = a->kv_lora, .n = (int)n};
    run_heads(&j, H);
}

/* vout[t][h] = W_UV_h olat[t][h]: the v rows of kv_b, heads in parallel. */
static void absorb_out(const ms_mla *a, const float *olat, int64_t n, float *kvb, float *vout)
{
    int64_t H = a->n_heads, kvl = a->kv_lora, hv = (int64_t)a->nope + a->v;
    head_rows j = {.mats = &a->wkv_b, .X = olat, .x_step = kvl, .ldx = H * kvl, .Y = kvb,
                   .ldy = H * hv, .r0 = a->nope, .r_step = hv, .n_rows = a->v, .n = (int)n};
    run_heads(&j, H);
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++)
            memcpy(vout + (t * H + h) * a->v, kvb + t * H * hv + h * hv + a->nope,
                   (size_t)a->v * 4);
}

int ms_mla_forward(const ms_mla *a, const ms_fwd *f, int layer, const float *x, float *out,
                   float *scratch, ms_err *err)
{
    int64_t n = f->n, H = a->n_heads, kvl = a->kv_lora, row = ms_mla_kv_row(a);
    int64_t qk = (int64_t)a->nope + a->rope, P = a->uk_pad_max + a->nope;
    float *qa = scratch, *q = qa + n * a->q_lora, *ckv = q + n * H * qk;
    float *qp = ckv + n * row, *qcat = qp + n * H * P, *olat = qcat + n * H * row;
    float *kvb = olat + n * H * kvl, *vout = kvb + n * H * ((int64_t)a->nope + a->v);
    float *cs = vout + n * H * a->v;

    /* q_a_proj (or q_proj) and kv_a_proj_with_mqa both read x: one dispatch */
    ms_matmul_job in[2] = {{.w = a->q_lora ? &a->wq_a : &a->wq, .X = x, .n = (int)n,
                            .Y = a->q_lora ? qa : q},
                           {.w = &a->wkv_a, .X = x, .n = (int)n, .Y = ckv}};
    ms_matmul_many(in, 2);
    finish_q(a, n, qa, q);
    if (a->bkv_a)
        ms_add_bias(ckv, a->bkv_a, n, row);
    for (int64_t t = 0; t < n; t++) {
        float *c = ckv + t * row;
        ms_rmsnorm(c, a->kv_a_norm, a->lora_eps, 1, kvl, c);
        if (a->kv_scale != 1.0f) /* after the norm, never on k_rope */
            for (int64_t i = 0; i < kvl; i++)
                c[i] *= a->kv_scale;
        int64_t pos = ms_fwd_pos(f, t);
        ms_rope_table(a->rope_tab, pos, cs);
        ms_rope_apply(a->rope_tab, cs, q + t * H * qk + a->nope, (int)H, qk);
        ms_rope_apply(a->rope_tab, cs, c + kvl, 1, row);
        ms_kv_write(ms_fwd_kv(f, layer, t), pos, a->kv_off, c, row);
    }
    absorb_q(a, q, n, qp, qcat);
    /* one KV "head" for all heads: the key is [latent | k_rope], the value
     * the latent in front of it */
    ms_attend at = {.n_heads = (int)H, .n_kv_heads = 1, .dk = (int)row, .dv = (int)kvl,
                    .k_off = a->kv_off, .v_off = a->kv_off, .scale = a->scale};
    if (ms_attend_rows(&at, f, layer, qcat, row, olat, kvl, err))
        return -1;
    absorb_out(a, olat, n, kvb, vout);
    ms_matmul(&a->wo, vout, (int)n, out);
    if (a->bo)
        ms_add_bias(out, a->bo, n, a->d_model);
    return 0;
}

int ms_mla_read_rope(const json_t *c, int dim, int interleaved, ms_rope *rope,
                     ms_mla_rope_cfg *rc, ms_err *err)
{
    const char *f = "config.json", *fs = "config.json rope_scaling", *type = NULL;
    ms_rope_layout layout = interleaved ? MS_ROPE_INTERLEAVED : MS_ROPE_HALF;
    ms_yarn *y = &rc->yarn;
    double mscale, mscale_all, attn;
    int64_t max_pos;
    memset(rc, 0, sizeof *rc);
    rc->interleaved = interleaved;
    rc->scale_mult = 1.0;
    if (ms_json_num(c, f, "rope_theta", &rc->theta, err) ||
        ms_json_range(f, "rope_theta", rc->theta, 0, 1e12, 1, err) ||
        ms_json_int_in(c, f, "max_position_embeddings", 1, MS_CFG_MAX_POS, &max_pos, err))
        return -1;
    const json_t *rs = json_object_get(c, "rope_scaling");
    if (rs && !json_is_null(rs) &&
        ms_json_str(rs, fs, json_object_get(rs, "rope_type") ? "rope_type" : "type", &type, err))
        return -1;
    if (!type || strcmp(type, "default") == 0)
        return ms_rope_init(rope, dim, rc->theta, layout, err);
    if (strcmp(type, "yarn") != 0)
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: type \"%s\" (supported: yarn, default)",
                          fs, type);
    /* transformers _compute_yarn_parameters: attention_factor, else
     * get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when
     * both are set, else get_mscale(factor); `factor` as DeepSeek's own code
     * (some transformers versions use max_position_embeddings / original
     * instead: the same 40 in the release) */
    if (ms_json_num(rs, fs, "factor", &y->factor, err) ||
        ms_json_num_opt(rs, fs, "beta_fast", 32.0, &y->beta_fast, err) ||
        ms_json_num_opt(rs, fs, "beta_slow", 1.0, &y->beta_slow, err) ||
        ms_json_num_opt(rs, fs, "original_max_position_embeddings", (double)max_pos,
                        &y->original_max_pos, err) ||
        ms_json_bool_opt(rs, fs, "truncate", 1, &y->truncate, err) ||
        ms_json_num_opt(rs, fs, "mscale", 0.0, &mscale, err) ||
        ms_json_num_opt(rs, fs, "mscale_all_dim", 0.0, &mscale_all, err) ||
        ms_json_num_opt(rs, fs, "attention_factor", 0.0, &attn, err) ||
        ms_yarn_check(y, fs, err) || ms_json_range(fs, "mscale", mscale, 0, 1e3, 0, err) ||
        ms_json_range(fs, "mscale_all_dim", mscale_all, 0, 1e3, 0, err) ||
        ms_json_range(fs, "attention_factor", attn, 0, 1e3, 0, err))
        return -1;
    if (attn == 0.0)
        attn = mscale != 0.0 && mscale_all != 0.0
                   ? ms_yarn_mscale(y->factor, mscale) / ms_yarn_mscale(y->factor, mscale_all)
                   : ms_yarn_mscale(y->factor, 1.0);
    y->attn_factor = attn;
    /* DeepseekV3Attention / LongcatFlashMLA: scaling *= mscale(factor, mscale_all_dim)^2 */
    if (mscale_all != 0.0) {
        double m = ms_yarn_mscale(y->factor, mscale_all);
        rc->scale_mult = m * m;
    }
    rc->use_yarn = 1;
    return ms_rope_init_yarn(rope, dim, rc->theta, y, layout, err);
}

void ms_mla_describe(const ms_mla *a, const ms_mla_rope_cfg *rc, FILE *out)
{
    fprintf(out, "  attention: MLA, %d heads, q_lora_rank %d%s, kv_lora_rank %d, qk_nope %d + "
            "qk_rope %d, v %d\n", a->n_heads, a->q_lora, a->q_lora ? "" : " (q_proj)",
            a->kv_lora, a->nope, a->rope, a->v);
    fprintf(out, "  KV cache row: latent %d + k_rope %d = %lld floats per token (absorbed "
            "form)\n", a->kv_lora, a->rope, (long long)ms_mla_kv_row(a));
    fprintf(out, "  softmax scale: %.8f (mscale^2 %.6f); q/kv LoRA scales %.6f / %.6f\n",
            (double)a->scale, rc->scale_mult, (double)a->q_scale, (double)a->kv_scale);
    fprintf(out, "  rope: theta %g, %s", rc->theta, rc->interleaved ? "interleaved pairs"
                                                                     : "rotate_half");
    if (rc->use_yarn)
        fprintf(out, ", yarn factor %g beta_fast %g beta_slow %g original_max_position_"
                "embeddings %g truncate %s (cos/sin factor %.6f)", rc->yarn.factor,
                rc->yarn.beta_fast, rc->yarn.beta_slow, rc->yarn.original_max_pos,
                rc->yarn.truncate ? "true" : "false", rc->yarn.attn_factor);
    fprintf(out, "\n");
}

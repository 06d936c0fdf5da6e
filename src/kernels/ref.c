/* The scalar op table: the always-compiled reference the SIMD tables are
 * tested against, and the fallback on CPUs without AVX2.
 *
 * It favours obviousness over speed: every element goes through the exact
 * decoders of format/dtype.c, and each (token, row) is one sequential float
 * sum, in column order. Scaled formats first sum a scale block (FP8) or
 * group (MXFP4) into a partial, then add partial * scale. The file is built
 * for baseline x86-64 in ISO C mode, so a*b + c is never contracted to an
 * FMA. Determinism holds trivially: a (token, row) is computed the same way
 * whatever the batch or row range. */
#include <math.h>

#include "kernels/internal.h"

typedef float (*row_dot_fn)(const ms_mat *w, int64_t r, const float *x);

static float row_f32(const ms_mat *w, int64_t r, const float *x)
{
    float acc = 0.0f;
    for (int64_t c = 0; c < w->cols; c++)
        acc += ms_load_f32(w->w, r * w->cols + c) * x[c];
    return acc;
}

static float row_bf16(const ms_mat *w, int64_t r, const float *x)
{
    float acc = 0.0f;
    for (int64_t c = 0; c < w->cols; c++)
        acc += ms_bf16_to_f32(ms_load_u16(w->w, r * w->cols + c)) * x[c];
    return acc;
}

static float row_f16(const ms_mat *w, int64_t r, const float *x)
{
    float acc = 0.0f;
    for (int64_t c = 0; c < w->cols; c++)
        acc += ms_f16_to_f32(ms_load_u16(w->w, r * w->cols + c)) * x[c];
    return acc;
}

/* Blocks of block_cols columns; the last one may be ragged. */
static float row_fp8(const ms_mat *w, int64_t r, const float *x)
{
    const uint8_t *q = (const uint8_t *)w->w + r * w->cols;
    float acc = 0.0f;
    for (int64_t c0 = 0, b = 0; c0 < w->cols; c0 += w->block_cols, b++) {
        int64_t c1 = c0 + w->block_cols < w->cols ? c0 + w->block_cols : w->cols;
        float part = 0.0f;
        for (int64_t c = c0; c < c1; c++)
            part += ms_e4m3_to_f32(q[c]) * x[c];
        acc += part * ms_fp8_scale(w, r, b, ms_f16_to_f32);
    }
    return acc;
}

/* Groups of 32 columns in 16 bytes: byte k holds element 2k (low nibble)
 * and 2k+1 (high nibble). */
static float row_mxfp4(const ms_mat *w, int64_t r, const float *x)
{
    int64_t groups = w->cols / 32;
    const uint8_t *q = (const uint8_t *)w->w + r * groups * 16;
    float acc = 0.0f;
    for (int64_t g = 0; g < groups; g++, q += 16, x += 32) {
        float part = 0.0f;
        for (int k = 0; k < 16; k++) {
            part += ms_e2m1_to_f32(q[k] & 0xF) * x[2 * k];
            part += ms_e2m1_to_f32(q[k] >> 4) * x[2 * k + 1];
        }
        acc += part * ms_e8m0_to_f32(ms_mx_scale_byte(w, r, g));
    }
    return acc;
}

static void rows_each(row_dot_fn f, const ms_mat *w, const float *X, int n, int64_t ldx,
                      float *Y, int64_t ldy, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n; t++)
            Y[t * ldy + r] = f(w, r, X + t * ldx);
}

#define MS_REF_ROWS(name)                                                              \
    static void rows_##name(const ms_mat *w, const float *X, int n, int64_t ldx,       \
                            float *Y, int64_t ldy, int64_t r0, int64_t r1)             \
    {                                                                                  \
        rows_each(row_##name, w, X, n, ldx, Y, ldy, r0, r1);                           \
    }
MS_REF_ROWS(f32)
MS_REF_ROWS(bf16)
MS_REF_ROWS(f16)
MS_REF_ROWS(fp8)
MS_REF_ROWS(mxfp4)
#undef MS_REF_ROWS

static float dot_ref(const float *a, const float *b, int64_t n)
{
    float acc = 0.0f;
    for (int64_t i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

static void axpy_ref(float a, const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static uint64_t stream_ref(const void *p, int64_t bytes)
{
    const uint64_t *q = p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = 0; i < bytes / 8; i += 4) {
        a ^= q[i];
        b ^= q[i + 1];
        c ^= q[i + 2];
        d ^= q[i + 3];
    }
    return a ^ b ^ c ^ d;
}

/* The fma op of the scalar table: 12 independent chains of fmaf, which
 * the compiler may keep scalar (the floor of a CPU this table runs on). */
static double fma_ref(int64_t iters, float *sink)
{
    float a[12];
    for (int i = 0; i < 12; i++)
        a[i] = 1.0f + (float)i;
    for (int64_t k = 0; k < iters; k++)
        for (int i = 0; i < 12; i++)
            a[i] = __builtin_fmaf(a[i], 0.999999f, 1e-7f);
    float s = 0;
    for (int i = 0; i < 12; i++)
        s += a[i];
    *sink = s;
    return 2.0 * 12 * (double)iters;
}

/* Element j of row p of the step's keys or values (f32 or bf16; tiled:
 * keys in tiles, kernels.h). */
static float kv_at(const ms_attn_step *a, const float *base, int64_t ld, int tiled, int p, int j)
{
    const int T = MS_KV_TILE;
    int64_t i = !tiled   ? p * ld + j
                : a->bf16 ? (int64_t)(p - p % T) * ld + (j / 2) * 2 * T + (p % T) * 2 + j % 2
                          : (int64_t)(p - p % T) * ld + j * T + p % T;
    return a->bf16 ? ms_bf16_to_f32(ms_load_u16(base, i)) : ms_load_f32(base, i);
}

/* The step of ms_attn_step, one query at a time, every sum in key order. */
static void attn_ref(const ms_attn_step *a)
{
    for (int i = 0; i < a->nq; i++) {
        const float *q = a->q[i];
        float *s = a->s, *st = a->st[i], *acc = st + 2, mc = -INFINITY;
        for (int p = a->lo[i]; p < a->hi[i]; p++) {
            float d = 0.0f;
            for (int j = 0; j < a->dk; j++)
                d += q[j] * kv_at(a, a->k, a->ldk, a->ktiled, p, j);
            s[p] = d * a->scale;
            mc = s[p] > mc ? s[p] : mc;
        }
        float m = st[0] > mc ? st[0] : mc;
        float alpha = expf(st[0] - m), sum = 0.0f;
        for (int p = a->lo[i]; p < a->hi[i]; p++) {
            s[p] = expf(s[p] - m);
            sum += s[p];
        }
        st[1] = alpha * st[1] + sum;
        st[0] = m;
        for (int d = 0; d < a->dv; d++)
            acc[d] *= alpha;
        for (int p = a->lo[i]; p < a->hi[i]; p++)
            for (int j = 0; j < a->dv; j++)
                acc[j] += s[p] * kv_at(a, a->v, a->ldv, 0, p, j);
    }
}

static void widen_ref(ms_kvfmt fmt, const void *src, const float *scale, int group, int64_t n,
                      float *dst)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = fmt == MS_KV_F32    ? ms_load_f32(src, i)
                 : fmt == MS_KV_BF16 ? ms_bf16_to_f32(ms_load_u16(src, i))
                                     : ms_e4m3_to_f32(b[i]) * scale[i / group];
}

static const ms_kernel_ops scalar_ops = {
    .name = "scalar",
    .rows = {
        [MS_WFMT_F32] = rows_f32,
        [MS_WFMT_BF16] = rows_bf16,
        [MS_WFMT_F16] = rows_f16,
        [MS_WFMT_FP8_BLOCK] = rows_fp8,
        [MS_WFMT_MXFP4] = rows_mxfp4,
    },
    .dot = dot_ref,
    .axpy = axpy_ref,
    .stream = stream_ref,
    .fma = fma_ref,
    .attn = attn_ref,
    .widen = widen_ref,
};

const ms_kernel_ops *ms_kernels_scalar(void)
{
    return &scalar_ops;
}

/* Row-wise helpers for the model graphs. */
#include "models/ops.h"

#include <math.h>
#include <string.h>

#include "base/pool.h"

void ms_rmsnorm(const float *x, const float *w, float eps, int64_t n, int64_t d, float *out)
{
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + t * d;
        float *o = out + t * d;
        double ss = 0; /* double: the sum of squares of thousands of values */
        for (int64_t i = 0; i < d; i++)
            ss += (double)xr[i] * xr[i];
        float r = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
        for (int64_t i = 0; i < d; i++)
            o[i] = xr[i] * r * w[i];
    }
}

void ms_add(float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

void ms_add_bias(float *x, const float *bias, int64_t n, int64_t d)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < d; i++)
            x[t * d + i] += bias[i];
}

void ms_mat_row(const ms_mat *w, int64_t r, float *out)
{
    const uint16_t *h = w->w;
    switch (w->fmt) {
    case MS_WFMT_F32:
        memcpy(out, (const float *)w->w + r * w->cols, (size_t)w->cols * 4);
        break;
    case MS_WFMT_BF16:
        for (int64_t c = 0; c < w->cols; c++)
            out[c] = ms_bf16_to_f32(h[r * w->cols + c]);
        break;
    case MS_WFMT_F16:
        for (int64_t c = 0; c < w->cols; c++)
            out[c] = ms_f16_to_f32(h[r * w->cols + c]);
        break;
    default:
        for (int64_t c = 0; c < w->cols; c++)
            out[c] = ms_mat_get(w, r, c);
        break;
    }
}

void ms_softmax(float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

int ms_all_finite(const float *x, int64_t n)
{
    /* x * 0 is 0 for every finite x and NaN for NaN and the infinities */
    float acc = 0;
    for (int64_t i = 0; i < n; i++)
        acc += x[i] * 0.0f;
    return acc == 0;
}

typedef struct span_job {
    ms_span_fn *fn;
    void *ctx;
    int64_t cols, per_row;
} span_job;

static void span_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    const span_job *j = ctx;
    int64_t r = t / j->per_row, c0 = t % j->per_row * MS_SPAN_COLS;
    j->fn(j->ctx, r, c0, c0 + MS_SPAN_COLS < j->cols ? c0 + MS_SPAN_COLS : j->cols);
}

/* The activations between a layer's products (expf per element, ~5 ns)
 * ran on one thread while the other waited: ~1.5 ms a token of the
 * synthetic gpt-oss-20b's decode, and 141 M expf in a 512-token prefill. */
void ms_rows_parallel(int64_t rows, int64_t cols, ms_span_fn *fn, void *ctx)
{
    if (rows <= 0 || cols <= 0)
        return;
    span_job j = {fn, ctx, cols, (cols + MS_SPAN_COLS - 1) / MS_SPAN_COLS};
    if (rows * cols < MS_SPAN_INLINE) {
        for (int64_t t = 0; t < rows * j.per_row; t++)
            span_task(&j, t, 0);
        return;
    }
    ms_pool_run(rows * j.per_row, span_task, &j);
}

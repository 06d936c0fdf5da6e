/* Small row-wise operations shared by the families (norms, activations,
 * embedding rows, softmax). Scalar float32; they are cheap next to the
 * matrix work and their order of operations is fixed. */
#ifndef MS_MODELS_OPS_H
#define MS_MODELS_OPS_H

#include <stdint.h>

#include "base/clock.h"
#include "kernels/kernels.h"

/* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, for n rows of d (in place ok). */
void ms_rmsnorm(const float *x, const float *w, float eps, int64_t n, int64_t d, float *out);

/* x[i] += y[i] over n values. */
void ms_add(float *x, const float *y, int64_t n);

/* Adds bias[j] to each of n rows of d. */
void ms_add_bias(float *x, const float *bias, int64_t n, int64_t d);

/* Exact float32 decode of row r of an embedding/weight matrix. */
void ms_mat_row(const ms_mat *w, int64_t r, float *out);

/* In-place softmax over n values. */
void ms_softmax(float *x, int64_t n);


/* The elementwise work of row r over columns [c0, c1). */
typedef void ms_span_fn(void *ctx, int64_t r, int64_t c0, int64_t c1);

/* Runs fn over rows x cols in pieces of at most MS_SPAN_COLS columns on the
 * thread pool, or all on the calling thread when there is too little work
 * to share (MS_SPAN_INLINE elements). Each element's arithmetic is the
 * same whoever computes it, so no result depends on the threads. */
enum { MS_SPAN_COLS = 1024, MS_SPAN_INLINE = 2048 };
void ms_rows_parallel(int64_t rows, int64_t cols, ms_span_fn *fn, void *ctx);

/* 1 when all n values are finite (no NaN, no Inf). */
int ms_all_finite(const float *x, int64_t n);

#endif

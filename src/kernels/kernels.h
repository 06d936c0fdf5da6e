/* Compute kernels over weights in their stored format.
 *
 * A weight matrix is a view (ms_mat) over bytes as the checkpoint stores them
 * (mmap or expert cache); kernels decode in registers and never convert a
 * file. Activations are float32. Dimension order is [rows=out][cols=in]
 * everywhere: y[r] = sum_c W[r][c] * x[c].
 *
 * Each ISA provides an op table (ms_kernel_ops). The scalar table is always
 * compiled and is the oracle for the SIMD ones; the table used at run time is
 * chosen once from the CPU's features (ms_kernels()).
 *
 * Determinism contract, relied on by the model code and tested:
 *  - a row's result depends only on the row, x and the op table: not on the
 *    thread count, the row range a thread gets, or how many tokens are
 *    batched (matmul row t == matvec of X[t], bit for bit);
 *  - no -ffast-math: IEEE float32 with FMA contraction as written. */
#ifndef MS_KERNELS_H
#define MS_KERNELS_H

#include <stdint.h>

#include "format/dtype.h"

typedef enum ms_wfmt {
    MS_WFMT_F32 = 0,  /* w: float[rows][cols] */
    MS_WFMT_BF16,     /* w: uint16[rows][cols] */
    MS_WFMT_F16,      /* w: uint16[rows][cols] */
    MS_WFMT_FP8_BLOCK,/* w: e4m3[rows][cols]; scale: [ceil(rows/br)][ceil(cols/bc)] of
                       * scale_dtype (F32, BF16 or F16); W = e4m3 * scale */
    MS_WFMT_MXFP4,    /* w: uint8[rows][cols/32][16], low nibble = even element;
                       * scale: uint8 e8m0[rows][cols/32]; cols % 32 == 0 */
    MS_WFMT_COUNT
} ms_wfmt;

typedef struct ms_mat {
    ms_wfmt fmt;
    int64_t rows, cols;
    const void *w;
    const void *scale;     /* FP8_BLOCK and MXFP4 only */
    ms_dtype scale_dtype;  /* FP8_BLOCK: F32, BF16 or F16 */
    int32_t block_rows;    /* FP8_BLOCK: weight_block_size[0] (128 in releases) */
    int32_t block_cols;    /* FP8_BLOCK: weight_block_size[1], a multiple of 32 */
} ms_mat;

/* Rows [r0, r1) of Y = X W^T for n tokens:
 *   Y[t*ldy + r] = sum_c W[r][c] * X[t*ldx + c],  0 <= t < n.
 * Single-threaded; the caller splits rows across threads. */
typedef void (*ms_rows_fn)(const ms_mat *w, const float *X, int n, int64_t ldx,
                           float *Y, int64_t ldy, int64_t r0, int64_t r1);

typedef struct ms_kernel_ops {
    const char *name;                 /* "scalar", "avx2", "avx512" */
    ms_rows_fn rows[MS_WFMT_COUNT];
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float a, const float *x, float *y, int64_t n); /* y += a*x */
} ms_kernel_ops;

/* Op tables compiled into this binary; NULL when the CPU cannot run it. */
const ms_kernel_ops *ms_kernels_scalar(void);
const ms_kernel_ops *ms_kernels_avx2(void);
const ms_kernel_ops *ms_kernels_avx512(void);

/* The table for this CPU, chosen once (thread-safe): the fastest available.
 * The environment is not consulted; tests reach the others directly. */
const ms_kernel_ops *ms_kernels(void);

/* Multithreaded drivers over the active op table (OpenMP over row blocks).
 * y[rows] = W x ;  Y[n][rows] = X[n][cols] W^T (row strides = cols, rows). */
void ms_matvec(const ms_mat *w, const float *x, float *y);
void ms_matmul(const ms_mat *w, const float *X, int n, float *Y);
/* Same with an explicit op table (tests, bench). */
void ms_matmul_ops(const ms_kernel_ops *ops, const ms_mat *w, const float *X, int n,
                   float *Y);

/* Exact scalar decode of one weight element (test oracle helper). */
float ms_mat_get(const ms_mat *w, int64_t r, int64_t c);

/* Bytes of weight data (and scales) a full pass over w reads. */
int64_t ms_mat_bytes(const ms_mat *w);

#endif

/* Helpers shared by the op tables (ref.c, x86_*.c) and the dispatcher:
 * element loads that tolerate any alignment, and the exact scale of a block.
 *
 * Everything here is static inline so that each ISA file gets its own copy
 * compiled with its own flags; nothing here is SIMD. Views come from
 * safetensors offsets, which need not be aligned, hence memcpy loads. */
#ifndef MS_KERNELS_INTERNAL_H
#define MS_KERNELS_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

/* The distances ms_kernels_prefetch() reports (dispatch.c); the kernels
 * read them once per call. */
extern ms_prefetch ms_prefetch_bytes;

/* The ms_matmul_many dispatch whose task this thread runs (0 outside
 * one: direct rows calls). A job's X does not change within a dispatch,
 * so a rows kernel may keep what it derived from X (its transposed
 * activations) for this thread's next task of the same job. */
extern __thread uint64_t ms_rows_dispatch;

/* Whether the AVX2 and AVX-512 tables run FP8 in byte-lane order (whose
 * decode leaves e4m3 subnormals as float subnormals) or in column order:
 * chosen per CPU vendor (dispatch.c, ms_kernels_set_fp8_lanes). */
extern int ms_fp8_lanes;

/* Whether the CPU converts half floats (F16C: CPUID.1 ECX bit 29), which
 * the AVX2 and AVX-512 tables need beside their own features. Read from
 * CPUID, as __builtin_cpu_supports("f16c") is GCC's alone (clang 14
 * refuses the name, so the kernels did not build with CC=clang). */
int ms_cpu_f16c(void);

/* rows over X token by token's choice: runs of tokens for which
 * below(x, cols, limit) (every |x| under limit) agrees go together to yes
 * or no, so that what a token gets never depends on the others in its
 * batch (FP8's byte-lane kernels take only tokens whose x their scaling
 * keeps finite). */
static inline void ms_rows_by_token(ms_rows_fn yes, ms_rows_fn no,
                                    int (*below)(const float *x, int64_t cols, float limit),
                                    float limit, const ms_mat *w, const float *X, int n,
                                    int64_t ldx, float *Y, int64_t ldy, int64_t r0, int64_t r1)
{
    for (int t0 = 0; t0 < n;) {
        int ok = below(X + t0 * ldx, w->cols, limit), t1 = t0 + 1;
        while (t1 < n && below(X + t1 * ldx, w->cols, limit) == ok)
            t1++;
        (ok ? yes : no)(w, X + t0 * ldx, t1 - t0, ldx, Y + t0 * ldy, ldy, r0, r1);
        t0 = t1;
    }
}

/* Whether FP8 scale blocks tile a lane-order kernel's units and panels. */
static inline int ms_fp8_blocks_tile(const ms_mat *w, int64_t unit, int64_t panel)
{
    return w->block_cols % unit == 0 && panel % w->block_cols == 0;
}

static inline int64_t ms_ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static inline uint16_t ms_load_u16(const void *p, int64_t i)
{
    uint16_t v;
    memcpy(&v, (const uint8_t *)p + 2 * i, 2);
    return v;
}

static inline float ms_load_f32(const void *p, int64_t i)
{
    float v;
    memcpy(&v, (const uint8_t *)p + 4 * i, 4);
    return v;
}

static inline float ms_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* E8M0 scale byte s -> the bits of 2^(s-127), equal to ms_e8m0_to_f32(s):
 * s is the float's exponent field, except that s == 0 is the subnormal
 * 2^-127 and s == 255 is NaN. A table, because it is read once per 32
 * weights: computing it there cost as much as the group it scales. */
#define MS_E8M0_1(s) ((s) == 0 ? 0x00400000u : (s) == 255 ? 0x7FC00000u : (uint32_t)(s) << 23)
#define MS_E8M0_4(s) MS_E8M0_1(s), MS_E8M0_1(s + 1), MS_E8M0_1(s + 2), MS_E8M0_1(s + 3)
#define MS_E8M0_16(s) MS_E8M0_4(s), MS_E8M0_4(s + 4), MS_E8M0_4(s + 8), MS_E8M0_4(s + 12)
#define MS_E8M0_64(s) MS_E8M0_16(s), MS_E8M0_16(s + 16), MS_E8M0_16(s + 32), MS_E8M0_16(s + 48)

static inline uint32_t ms_e8m0_bits(uint8_t s)
{
    static const uint32_t bits[256] = {MS_E8M0_64(0), MS_E8M0_64(64), MS_E8M0_64(128),
                                       MS_E8M0_64(192)};
    return bits[s];
}

static inline float ms_e8m0_fast(uint8_t s)
{
    return ms_bits_f32(ms_e8m0_bits(s));
}

/* Bytes from a row's start to column c (c even for MXFP4), scales excluded. */
static inline int64_t ms_col_bytes(ms_wfmt f, int64_t c)
{
    return c * ms_wfmt_info[f].bits / 8;
}

/* FP8_BLOCK: index of the first scale of row r's block row; block bc of the
 * row has its scale at that index + bc. */
static inline int64_t ms_fp8_scale_row(const ms_mat *w, int64_t r)
{
    return (r / w->block_rows) * ms_ceil_div(w->cols, w->block_cols);
}

/* FP8_BLOCK scale entry i widened exactly to float. f16 is the half decoder
 * to use (the scalar one, or F16C in the SIMD files). */
static inline float ms_fp8_scale_at(const ms_mat *w, int64_t i, float (*f16)(uint16_t))
{
    switch (w->scale_dtype) {
    case MS_DTYPE_BF16:
        return ms_bf16_to_f32(ms_load_u16(w->scale, i));
    case MS_DTYPE_F16:
        return f16(ms_load_u16(w->scale, i));
    default:
        return ms_load_f32(w->scale, i);
    }
}

/* FP8_BLOCK scale of (row r, column block bc). */
static inline float ms_fp8_scale(const ms_mat *w, int64_t r, int64_t bc,
                                 float (*f16)(uint16_t))
{
    return ms_fp8_scale_at(w, ms_fp8_scale_row(w, r) + bc, f16);
}

/* MXFP4: the e8m0 scale byte of (row r, group g). */
static inline uint8_t ms_mx_scale_byte(const ms_mat *w, int64_t r, int64_t g)
{
    return ((const uint8_t *)w->scale)[r * (w->cols / 32) + g];
}

/* An opt-in table (--precision fast, int8): a base table with some formats'
 * rows (and maybe its attention step) replaced, built on first use
 * (thread-safe); NULL where the base is. The caller checks the instructions
 * its own kernels need. */
typedef struct ms_derived_ops {
    const ms_kernel_ops *(*base)(void);
    const char *name;
    ms_rows_fn rows[MS_WFMT_COUNT]; /* NULL: the base's */
    void (*attn)(const ms_attn_step *a); /* NULL: the base's */
    ms_kernel_ops ops;              /* built */
    int built;
} ms_derived_ops;
const ms_kernel_ops *ms_kernels_derive(ms_derived_ops *d);

#endif

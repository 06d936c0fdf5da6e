/* Rotary position embeddings: the frequency table (plain or YaRN) and its
 * application in the two layouts upstream code uses.
 *
 * Details that caused bugs elsewhere:
 *  - YaRN with `truncate: false` (gpt-oss) keeps the correction range
 *    fractional; truncate (the HF default) floors low and ceils high.
 *  - The attention factor (YaRN "concentration"/mscale) multiplies both cos
 *    and sin, i.e. it scales q and k each once.
 *  - inv_freq and the angle pos * inv_freq are float32 as in upstream torch;
 *    cos/sin are then taken exactly and rounded to float32. */
#ifndef MS_MODELS_ROPE_H
#define MS_MODELS_ROPE_H

#include <stdint.h>

#include "base/error.h"

typedef enum ms_rope_layout {
    MS_ROPE_HALF = 0,     /* pairs (i, i + dim/2): rotate_half / chunk in two */
    MS_ROPE_INTERLEAVED,  /* pairs (2i, 2i + 1) */
} ms_rope_layout;

typedef struct ms_rope {
    int dim;                 /* rotated dims (even) */
    ms_rope_layout layout;
    float attn_factor;       /* multiplies cos and sin */
    float inv_freq[512];     /* [dim/2] */
} ms_rope;

typedef struct ms_yarn {
    double factor;
    double beta_fast, beta_slow;
    double original_max_pos;
    int truncate;
    double attn_factor;      /* already resolved by the family */
} ms_yarn;

/* The ranges of the rope_scaling keys of y as read from `file`: factor and
 * the betas finite in (0, 1e4], original_max_position_embeddings in [1,
 * 2^40]; the error names the key, the value and the range. */
int ms_yarn_check(const ms_yarn *y, const char *file, ms_err *err);

/* Plain RoPE: inv_freq[i] = base^(-2i/dim). */
int ms_rope_init(ms_rope *r, int dim, double base, ms_rope_layout layout, ms_err *err);
/* YaRN ("NTK by parts") as transformers' _compute_yarn_parameters. */
int ms_rope_init_yarn(ms_rope *r, int dim, double base, const ms_yarn *y,
                      ms_rope_layout layout, ms_err *err);

/* cos/sin table for one position: cs[0..dim/2) = cos, cs[dim/2..dim) = sin,
 * both multiplied by attn_factor. */
void ms_rope_table(const ms_rope *r, int64_t pos, float *cs);

/* Rotates the first r->dim values of each of n_heads vectors spaced by
 * stride floats, with a table from ms_rope_table. */
void ms_rope_apply(const ms_rope *r, const float *cs, float *x, int n_heads, int64_t stride);

/* YaRN's get_mscale: 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1. */
double ms_yarn_mscale(double scale, double mscale);

#endif

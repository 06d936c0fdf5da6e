/* RoPE tables and rotation, following transformers' modeling_rope_utils and
 * openai/gpt-oss's RotaryEmbedding (float32 frequencies and angles). */
#include "models/rope.h"

#include <math.h>

#include "base/json.h"

static int check_dim(int dim, ms_err *err)
{
    if (dim <= 0 || dim % 2 || dim / 2 > 512)
        return ms_err_set(err, MS_E_UNSUPPORTED, "rotary dimension %d must be even and <= 1024",
                          dim);
    return 0;
}

/* base^(2i/dim) in float32, as torch computes `base ** (arange(0, dim, 2) / dim)`. */
static float pos_freq(double base, int i, int dim)
{
    float e = (float)(2 * i) / (float)dim;
    return (float)pow(base, (double)e);
}

int ms_rope_init(ms_rope *r, int dim, double base, ms_rope_layout layout, ms_err *err)
{
    if (check_dim(dim, err))
        return -1;
    r->dim = dim;
    r->layout = layout;
    r->attn_factor = 1.0f;
    for (int i = 0; i < dim / 2; i++)
        r->inv_freq[i] = 1.0f / pos_freq(base, i, dim);
    return 0;
}

double ms_yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* Dimension index at which a wavelength completes num_rot rotations over
 * max_pos positions. */
static double correction_dim(double num_rot, int dim, double base, double max_pos)
{
    return (dim * log(max_pos / (num_rot * 2.0 * M_PI))) / (2.0 * log(base));
}

int ms_rope_init_yarn(ms_rope *r, int dim, double base, const ms_yarn *y,
                      ms_rope_layout layout, ms_err *err)
{
    if (check_dim(dim, err))
        return -1;
    if (!(y->factor > 0) || !(y->original_max_pos > 0))
        return ms_err_set(err, MS_E_FORMAT, "yarn: factor %g and original_max_position %g "
                          "must be positive", y->factor, y->original_max_pos);
    r->dim = dim;
    r->layout = layout;
    r->attn_factor = (float)y->attn_factor;
    double low = correction_dim(y->beta_fast, dim, base, y->original_max_pos);
    double high = correction_dim(y->beta_slow, dim, base, y->original_max_pos);
    if (y->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0)
        low = 0;
    if (high > dim - 1)
        high = dim - 1;
    if (low == high)
        high += 0.001;
    for (int i = 0; i < dim / 2; i++) {
        float pf = pos_freq(base, i, dim);
        float extra = 1.0f / pf;
        float inter = 1.0f / ((float)y->factor * pf);
        float ramp = (float)(((float)i - (float)low) / (float)(high - low));
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float extra_factor = 1.0f - ramp;
        r->inv_freq[i] = inter * (1.0f - extra_factor) + extra * extra_factor;
    }
    return 0;
}

void ms_rope_table(const ms_rope *r, int64_t pos, float *cs)
{
    int h = r->dim / 2;
    for (int i = 0; i < h; i++) {
        float a = (float)pos * r->inv_freq[i];
        cs[i] = (float)cos((double)a) * r->attn_factor;
        cs[h + i] = (float)sin((double)a) * r->attn_factor;
    }
}

void ms_rope_apply(const ms_rope *r, const float *cs, float *x, int n_heads, int64_t stride)
{
    int h = r->dim / 2;
    const float *c = cs, *s = cs + h;
    for (int k = 0; k < n_heads; k++) {
        float *v = x + k * stride;
        for (int i = 0; i < h; i++) {
            int a = r->layout == MS_ROPE_HALF ? i : 2 * i;
            int b = r->layout == MS_ROPE_HALF ? i + h : 2 * i + 1;
            float x1 = v[a], x2 = v[b];
            v[a] = x1 * c[i] - x2 * s[i];
            v[b] = x2 * c[i] + x1 * s[i];
        }
    }
}

int ms_yarn_check(const ms_yarn *y, const char *file, ms_err *err)
{
    return ms_json_range(file, "factor", y->factor, 0, 1e4, 1, err) ||
                   ms_json_range(file, "beta_fast", y->beta_fast, 0, 1e4, 1, err) ||
                   ms_json_range(file, "beta_slow", y->beta_slow, 0, 1e4, 1, err) ||
                   ms_json_range(file, "original_max_position_embeddings", y->original_max_pos,
                                 1, (double)MS_CFG_MAX_POS, 0, err)
               ? -1
               : 0;
}

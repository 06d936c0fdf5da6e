/* Storage dtypes as safetensors names them, one row each in a traits table.
 *
 * A dtype here is how bytes are stored in a file, not how a kernel computes.
 * MXFP4 has no dtype of its own on disk: its blocks and scales are U8
 * tensors; the weight view (kernels/kernels.h) pairs them. */
#ifndef MS_FORMAT_DTYPE_H
#define MS_FORMAT_DTYPE_H

#include <stdint.h>

typedef enum ms_dtype {
    MS_DTYPE_INVALID = 0,
    MS_DTYPE_F64,
    MS_DTYPE_F32,
    MS_DTYPE_F16,
    MS_DTYPE_BF16,
    MS_DTYPE_F8_E4M3,
    MS_DTYPE_F8_E5M2,
    MS_DTYPE_I64,
    MS_DTYPE_I32,
    MS_DTYPE_I16,
    MS_DTYPE_I8,
    MS_DTYPE_U64,
    MS_DTYPE_U32,
    MS_DTYPE_U16,
    MS_DTYPE_U8,
    MS_DTYPE_BOOL,
    MS_DTYPE_COUNT
} ms_dtype;

typedef struct ms_dtype_traits {
    const char *name; /* as written in a safetensors header */
    int size;         /* bytes per element */
} ms_dtype_traits;

/* Traits of a valid dtype (d in (INVALID, COUNT)). */
const ms_dtype_traits *ms_dtype_traits_of(ms_dtype d);
const char *ms_dtype_name(ms_dtype d);
int ms_dtype_size(ms_dtype d);

/* Looks up a safetensors dtype name; MS_DTYPE_INVALID when unknown. */
ms_dtype ms_dtype_from_name(const char *name);

/* Scalar element decoders: exact widening to float. */
static inline float ms_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}

float ms_f16_to_f32(uint16_t h);

/* OCP e4m3fn: bias 7, subnormals, no infinities, S.1111.111 is NaN. */
float ms_e4m3_to_f32(uint8_t b);

/* OCP E2M1 code (low 4 bits) to float: {0,.5,1,1.5,2,3,4,6} with sign. */
float ms_e2m1_to_f32(uint8_t code);

/* E8M0 scale: 2^(s-127); s == 255 is NaN. */
float ms_e8m0_to_f32(uint8_t s);

/* Round-to-nearest-even float -> bf16 (used by writers and tests). */
uint16_t ms_f32_to_bf16(float f);

/* Round-to-nearest-even float -> e4m3fn, saturating at +-448; NaN -> NaN. */
uint8_t ms_f32_to_e4m3(float f);

#endif

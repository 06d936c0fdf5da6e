/* The dtype traits table and exact scalar decoders for every element format
 * the engine reads. These decoders are the reference the SIMD kernels are
 * tested against. */
#include "format/dtype.h"

#include <math.h>
#include <string.h>

static const ms_dtype_traits traits[MS_DTYPE_COUNT] = {
    [MS_DTYPE_F64] = {"F64", 8},         [MS_DTYPE_F32] = {"F32", 4},
    [MS_DTYPE_F16] = {"F16", 2},         [MS_DTYPE_BF16] = {"BF16", 2},
    [MS_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [MS_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [MS_DTYPE_I64] = {"I64", 8},         [MS_DTYPE_I32] = {"I32", 4},
    [MS_DTYPE_I16] = {"I16", 2},         [MS_DTYPE_I8] = {"I8", 1},
    [MS_DTYPE_U64] = {"U64", 8},         [MS_DTYPE_U32] = {"U32", 4},
    [MS_DTYPE_U16] = {"U16", 2},         [MS_DTYPE_U8] = {"U8", 1},
    [MS_DTYPE_BOOL] = {"BOOL", 1},
};

const ms_dtype_traits *ms_dtype_traits_of(ms_dtype d)
{
    return (d > MS_DTYPE_INVALID && d < MS_DTYPE_COUNT) ? &traits[d] : NULL;
}

const char *ms_dtype_name(ms_dtype d)
{
    const ms_dtype_traits *t = ms_dtype_traits_of(d);
    return t ? t->name : "INVALID";
}

int ms_dtype_size(ms_dtype d)
{
    const ms_dtype_traits *t = ms_dtype_traits_of(d);
    return t ? t->size : 0;
}

ms_dtype ms_dtype_from_name(const char *name)
{
    for (int d = MS_DTYPE_INVALID + 1; d < MS_DTYPE_COUNT; d++)
        if (strcmp(traits[d].name, name) == 0)
            return (ms_dtype)d;
    return MS_DTYPE_INVALID;
}

float ms_f16_to_f32(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    float v;
    if (exp == 0)
        v = ldexpf((float)mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexpf((float)(mant | 0x400), exp - 25);
    return sign ? -v : v;
}

float ms_e4m3_to_f32(uint8_t b)
{
    int sign = b >> 7, exp = (b >> 3) & 0xF, mant = b & 0x7;
    float v;
    if (exp == 0xF && mant == 0x7)
        return NAN;
    if (exp == 0)
        v = ldexpf((float)mant, -9); /* mant/8 * 2^-6 */
    else
        v = ldexpf((float)(mant | 0x8), exp - 10); /* (8+mant)/8 * 2^(exp-7) */
    return sign ? -v : v;
}

float ms_e2m1_to_f32(uint8_t code)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[code & 7];
    return (code & 8) ? -v : v;
}

float ms_e8m0_to_f32(uint8_t s)
{
    if (s == 255)
        return NAN;
    return ldexpf(1.0f, (int)s - 127);
}

uint16_t ms_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint8_t ms_f32_to_e4m3(float f)
{
    if (f != f)
        return 0x7F;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f)
        return sign | 0x7E;
    if (a < 0.015625f) /* below 2^-6: subnormal steps of 2^-9, code = steps (8 = 2^-6) */
        return sign | (uint8_t)nearbyintf(a * 512.0f);
    uint32_t u;
    memcpy(&u, &a, 4);
    u += 0x7FFFFu + ((u >> 20) & 1u); /* round the mantissa to 3 bits, carry into the exponent */
    return sign | (uint8_t)((u >> 20) - ((127u - 7u) << 3));
}

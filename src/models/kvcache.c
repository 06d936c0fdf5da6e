/* KV cache storage: formats, allocation, and the conversion on write. */
#include "models/kvcache.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/sysmem.h"
#include "format/dtype.h"

static const char *const names[MS_KV_COUNT] = {"f32", "bf16", "fp8"};

const char *ms_kvfmt_name(ms_kvfmt f)
{
    return f >= 0 && f < MS_KV_COUNT ? names[f] : "?";
}

int ms_kvfmt_parse(const char *s, ms_kvfmt *out)
{
    for (int f = 0; f < MS_KV_COUNT; f++)
        if (strcmp(s, names[f]) == 0) {
            *out = (ms_kvfmt)f;
            return 0;
        }
    return -1;
}

int64_t ms_kv_bytes_per_pos(ms_kvfmt f, int64_t row, int group)
{
    return row * ms_kvfmt_size(f) + (f == MS_KV_FP8 ? row / group * 4 : 0);
}

int ms_kv_alloc(ms_kv *kv, ms_kvfmt f, int64_t cap, int64_t row, int64_t plane,
                int64_t kplanes, int group, ms_err *err)
{
    memset(kv, 0, sizeof *kv);
    if (plane <= 0 || row % plane)
        return ms_err_set(err, MS_E_ARG, "a KV row of %lld elements cannot have planes of %lld",
                          (long long)row, (long long)plane);
    if (f == MS_KV_FP8 && (group <= 0 || plane % group))
        return ms_err_set(err, MS_E_ARG, "an fp8 KV plane of %lld elements cannot have scale "
                          "groups of %d", (long long)plane, group);
    if (kplanes < 0 || kplanes > row / plane)
        return ms_err_set(err, MS_E_ARG, "a KV row of %lld planes cannot have %lld key planes",
                          (long long)(row / plane), (long long)kplanes);
    /* fp8 keys are widened into rows before a step; bf16 tiles pair dimensions */
    int tiles = f == MS_KV_F32 || (f == MS_KV_BF16 && plane % 2 == 0);
    if (tiles && kplanes && cap % MS_KV_TILE)
        return ms_err_set(err, MS_E_ARG, "a KV cache of %lld positions is not a whole number "
                          "of tiles of %d", (long long)cap, MS_KV_TILE);
    kv->tiled = tiles ? kplanes : 0;
    kv->fmt = f;
    kv->cap = cap;
    kv->row = row;
    kv->plane = plane;
    kv->group = group;
    kv->bytes = (size_t)(cap * row) * (size_t)ms_kvfmt_size(f);
#if MS_KV_ON_HEAP
    kv->data = ms_calloc((size_t)(cap * row), (size_t)ms_kvfmt_size(f), "KV cache", err);
    if (!kv->data)
        return -1;
#else
    kv->data = ms_map_huge(kv->bytes);
    if (!kv->data)
        return ms_err_set(err, MS_E_NOMEM, "cannot map %zu bytes for a KV cache: %s",
                          kv->bytes, strerror(errno));
#endif
    if (f == MS_KV_FP8) {
        kv->scale = ms_calloc((size_t)(cap * row / group), 4, "KV cache scales", err);
        if (!kv->scale) {
            ms_kv_free(kv);
            return -1;
        }
    }
    return 0;
}

void ms_kv_free(ms_kv *kv)
{
#if MS_KV_ON_HEAP
    free(kv->data);
#else
    if (kv->data)
        munmap(kv->data, kv->bytes);
#endif
    free(kv->scale);
    kv->data = NULL;
    kv->scale = NULL;
}

static void write_span(ms_kv *kv, int64_t pos, int64_t off, const float *src, int64_t n);

void ms_kv_write(ms_kv *kv, int64_t pos, int64_t off, const float *src, int64_t n)
{
    while (n > 0) { /* plane by plane */
        int64_t k = kv->plane - off % kv->plane;
        k = k < n ? k : n;
        write_span(kv, pos, off, src, k);
        off += k;
        src += k;
        n -= k;
    }
}

static void write_span(ms_kv *kv, int64_t pos, int64_t off, const float *src, int64_t n)
{
    if (ms_kv_tiled(kv, off)) {
        /* a row's elements lie apart in their tile (kvcache.h): element e
         * of the plane at base + e * T (f32), base + 2T * (e / 2) + e % 2
         * (bf16). One ms_kv_index per span, not per element: its three
         * divisions per element took ~27 us of each decode layer's ~40
         * between products on the synthetic gpt-oss-20b. */
        const int64_t T = MS_KV_TILE, e0 = off % kv->plane;
        int64_t at = ms_kv_index(kv, pos, off);
        if (kv->fmt == MS_KV_F32) {
            float *d = (float *)kv->data + at;
            for (int64_t i = 0; i < n; i++)
                d[i * T] = src[i];
        } else {
            uint16_t *d = (uint16_t *)kv->data + at - 2 * T * (e0 / 2) - e0 % 2;
            for (int64_t i = 0, e = e0; i < n; i++, e++)
                d[2 * T * (e / 2) + e % 2] = ms_f32_to_bf16(src[i]);
        }
        return;
    }
    void *dst = (void *)ms_kv_elems(kv, pos, off);
    switch (kv->fmt) {
    case MS_KV_F32:
        memcpy(dst, src, (size_t)n * 4);
        return;
    case MS_KV_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++)
            h[i] = ms_f32_to_bf16(src[i]);
        return;
    }
    default: {
        uint8_t *b = dst;
        float *sc = (float *)ms_kv_scales(kv, pos, off);
        for (int64_t g = 0; g < n / kv->group; g++) {
            const float *x = src + g * kv->group;
            float amax = 0.0f;
            for (int i = 0; i < kv->group; i++)
                amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            /* a zero (or non-finite) group keeps scale 1: its codes say it */
            float s = amax > 0.0f && isfinite(amax) ? amax / 448.0f : 1.0f;
            sc[g] = s;
            for (int i = 0; i < kv->group; i++)
                b[g * kv->group + i] = ms_f32_to_e4m3(x[i] / s);
        }
        return;
    }
    }
}

/* The KV cache of one layer of one sequence: cap positions of `row`
 * elements in one of the formats of ms_kvfmt (kernels.h). Position p lives
 * in slot p % cap; cap is a multiple of MS_ATTN_CHUNK, so an aligned chunk
 * of positions is contiguous, and cap < context only for sliding-window
 * layers (cap >= window + a prefill block + the rewind slack).
 *
 * A row is stored in planes of `plane` elements (a KV head's key or value,
 * or an MLA block's [latent | k_rope]), each plane [cap][plane], so that
 * what one head reads over consecutive positions is contiguous. In f32 and
 * bf16 the leading `tiled` planes (GQA's keys) go in tiles of T =
 * MS_KV_TILE positions, dimension-major: element e of slot s in tile s / T
 * at offset e * T + s % T (f32), or by dimension pairs at 2 * ((e / 2) * T
 * + s % T) + e % 2 (bf16: the dword of a pair is one bf16 dot product's
 * operand). The scores of a group of queries take a key dimension across
 * T keys per vector, which row order would need a transpose per step for
 * (docs/perf.md, "Keys in tiles"); a tile is still contiguous, and so are
 * a plane's consecutive tiles.
 *
 * f32 is the reference. bf16 rounds each element to nearest even (what the
 * upstream models run with in practice). fp8 stores OCP e4m3fn codes with
 * one float scale per `group` elements (a head, or a part of MLA's latent),
 * amax / 448, so each group uses the code's whole range. */
#ifndef MS_MODELS_KVCACHE_H
#define MS_MODELS_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "kernels/kernels.h"

/* AddressSanitizer checks the bounds of heap blocks, not of mappings: its
 * builds keep the cache on the heap (ms_kv_alloc), so that a stray index
 * into it is still caught there. */
#if defined(__SANITIZE_ADDRESS__)
#define MS_KV_ON_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MS_KV_ON_HEAP 1
#endif
#endif
#ifndef MS_KV_ON_HEAP
#define MS_KV_ON_HEAP 0
#endif

typedef struct ms_kv {
    void *data;      /* [cap][row] elements of fmt */
    size_t bytes;    /* data's size (its mapping's, see ms_kv_alloc) */
    float *scale;    /* MS_KV_FP8: [cap][row / group] */
    int64_t cap, row;
    int64_t plane;   /* elements per plane; divides row */
    int64_t tiled;   /* leading planes stored in tiles (keys), else 0 */
    ms_kvfmt fmt;
    int group;       /* elements per FP8 scale; divides plane */
} ms_kv;

/* Name of a format ("f32", "bf16", "fp8"); ms_kvfmt_parse returns -1 for
 * anything else. */
const char *ms_kvfmt_name(ms_kvfmt f);
int ms_kvfmt_parse(const char *s, ms_kvfmt *out);

/* Bytes one position of `row` elements takes (scales included). */
int64_t ms_kv_bytes_per_pos(ms_kvfmt f, int64_t row, int group);

/* Allocates cap positions (zeroed; pages are touched only when written);
 * kplanes: the leading planes that hold keys, tiled where the format is
 * (cap a multiple of MS_KV_TILE then). The data is asked for in 2 MiB
 * pages (ms_map_huge): decode attention streams the whole cache every
 * token, and over 4 KiB pages it was slower in 21 of 23 interleaved runs,
 * by a median of ~10% at 32k positions and ~15% at 8k (docs/perf.md, "The
 * KV cache in huge pages"). A plane's first write may then commit 2 MiB of
 * it, not 4 KiB. Builds with AddressSanitizer keep the heap, whose bounds
 * it checks. */
int ms_kv_alloc(ms_kv *kv, ms_kvfmt f, int64_t cap, int64_t row, int64_t plane,
                int64_t kplanes, int group, ms_err *err);
void ms_kv_free(ms_kv *kv);

/* Stores n floats at element off of position pos (FP8: off and n on group
 * boundaries). */
void ms_kv_write(ms_kv *kv, int64_t pos, int64_t off, const float *src, int64_t n);

/* Index of element off of position pos in the storage: in a plane of
 * rows, the elements of a plane follow each other, and so do a plane's
 * consecutive slots; in a tiled plane, see above. */
static inline int64_t ms_kv_index(const ms_kv *kv, int64_t pos, int64_t off)
{
    int64_t p = off / kv->plane, e = off % kv->plane, s = pos % kv->cap;
    const int T = MS_KV_TILE;
    if (p < kv->tiled && kv->fmt == MS_KV_BF16)
        return (p * kv->cap + s - s % T) * kv->plane + 2 * ((e / 2) * T + s % T) + e % 2;
    if (p < kv->tiled)
        return (p * kv->cap + s - s % T) * kv->plane + e * T + s % T;
    return (p * kv->cap + s) * kv->plane + e;
}

/* Whether element off's plane is tiled. */
static inline int ms_kv_tiled(const ms_kv *kv, int64_t off)
{
    return off / kv->plane < kv->tiled;
}

/* Bytes of one element of format f (FP8 scales not included). */
static inline int ms_kvfmt_size(ms_kvfmt f)
{
    return f == MS_KV_F32 ? 4 : f == MS_KV_BF16 ? 2 : 1;
}

/* Element off of position pos (in a plane of rows, the rest of its plane
 * follows it, then the same plane of the next slot; a tiled plane's tile
 * starts there when pos is a tile's first), and its FP8 scales. */
static inline const void *ms_kv_elems(const ms_kv *kv, int64_t pos, int64_t off)
{
    return (const uint8_t *)kv->data + ms_kv_index(kv, pos, off) * ms_kvfmt_size(kv->fmt);
}

static inline const float *ms_kv_scales(const ms_kv *kv, int64_t pos, int64_t off)
{
    return kv->scale ? kv->scale + ms_kv_index(kv, pos, off) / kv->group : 0;
}

#endif

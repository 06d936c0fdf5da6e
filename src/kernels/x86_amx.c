/* The exact AMX table: the AVX-512 table with its BF16 products run on
 * the tile unit (AMX-BF16's TDPBF16PS: C[16][16] float32 += A[16][32] x
 * B[32][16] bf16, 16 x 16 x 32 multiply-adds per instruction). The other
 * formats, dot, axpy, attention and widening are AVX-512's. Not chosen by
 * the dispatcher yet: it doubles prefill but slows decode of short rows
 * (docs/perf.md, "AMX"). MXFP4 stays on AVX-512: decoding its weights to
 * bf16 for the tiles costs what the whole AVX-512 kernel does, and such a
 * matvec ran at half the speed.
 *
 * Exact. Every BF16 weight is a bf16 number, and each float32 activation is split without
 * loss into three bf16 numbers, x = h + m + l: h is x with its low 16 bits
 * cleared, m the same of x - h, l = x - h - m (8 + 8 + 8 significant
 * bits; each subtraction is exact). So every product the unit forms is
 * exact and, as in the other exact tables, only the float32 sums round.
 * What the unit adds: it treats subnormal inputs and results as zero, a
 * change of at most 2^-126 * |w| (or |x|) per column, covered by the
 * kernel tests' absolute term. An infinite x gives NaN (h - x is inf -
 * inf); activations are never infinite in the families.
 *
 * Operands, per block of 32 weight rows:
 *  - A (tiles 0, 1: rows 0-15 and 16-31, 32 columns each) is the weights,
 *    read in place (stride = the matrix row), or copied zero-padded for
 *    the last block and for columns that do not fill the last tile step.
 *  - B (tiles 2, 3) is five tokens of x: column 3t + p holds part p of
 *    token t (column 15 is zero), row k the pair of columns 2k, 2k+1, as
 *    TDPBF16PS wants (the "VNNI" layout). Packed once per call.
 *  - C (tiles 4-7): two row halves x two token groups. Each element sums
 *    one part of one token over all columns in column order, and
 *    y[t][r] = (C[r][3t] + C[r][3t+1]) + C[r][3t+2].
 * Determinism: each C element depends only on its weight row and its
 * token's column of B, so a (token, row) gets the same bits alone,
 * batched or in any row range, whatever the thread count. */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/internal.h"
#include "kernels/x86_avx512_common.h"

enum {
    TOKENS = 5,        /* tokens per B tile (three columns each) */
    ROWS = 32,         /* weight rows per block: two A tiles */
    KB = 32,           /* columns per tile step */
    TILE = 1024,       /* bytes of one 16 x 64-byte tile */
};

/* ---- per-thread scratch ---- */

/* Grown on demand, freed when the thread ends (a key's destructor). */
typedef struct arena {
    uint8_t *p;
    size_t cap;
} arena;

static pthread_key_t arena_key;

static void arena_free(void *v)
{
    arena *a = v;
    free(a->p);
    free(a);
}

/* NULL when memory is short. */
static uint8_t *scratch(size_t bytes)
{
    arena *a = pthread_getspecific(arena_key);
    if (!a) {
        a = calloc(1, sizeof *a);
        if (!a || pthread_setspecific(arena_key, a) != 0) {
            free(a);
            return NULL;
        }
    }
    if (a->cap < bytes) {
        size_t cap = (bytes + 4095) & ~(size_t)4095;
        uint8_t *p = aligned_alloc(64, cap);
        if (!p)
            return NULL;
        free(a->p);
        a->p = p;
        a->cap = cap;
    }
    return a->p;
}

/* ---- tile configuration ---- */

typedef struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static __thread int configured;

/* Every tile 16 rows x 64 bytes, loaded once per thread. */
AI void configure(void)
{
    if (__builtin_expect(configured, 1))
        return;
    _Alignas(64) tilecfg c = {.palette = 1};
    for (int i = 0; i < 8; i++) {
        c.rows[i] = 16;
        c.colsb[i] = 64;
    }
    _tile_loadconfig(&c);
    configured = 1;
}

/* ---- B: activations split into three bf16 parts ---- */

/* Transposes 16 rows of 16 dwords in place. */
AI void transpose16(__m512i r[16])
{
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* b[4q + c], 128-bit lane L: rows 4q..4q+3 at column 4L + c */
    for (int q = 0; q < 16; q += 4) {
        b[q] = _mm512_unpacklo_epi64(a[q], a[q + 2]);
        b[q + 1] = _mm512_unpackhi_epi64(a[q], a[q + 2]);
        b[q + 2] = _mm512_unpacklo_epi64(a[q + 1], a[q + 3]);
        b[q + 3] = _mm512_unpackhi_epi64(a[q + 1], a[q + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i u0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x88);
        __m512i u1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xDD);
        __m512i v0 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x88);
        __m512i v1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xDD);
        r[c] = _mm512_shuffle_i32x4(u0, v0, 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(u0, v0, 0xDD);
        r[4 + c] = _mm512_shuffle_i32x4(u1, v1, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(u1, v1, 0xDD);
    }
}

/* The high halves of 32 floats (each exactly a bf16) as 16 pairs. */
AI __m512i high_halves(__m512 lo, __m512 hi)
{
    static const _Alignas(64) uint16_t odd_words[32] = {
        1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
        33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
    const __m512i odd = _mm512_load_si512(odd_words);
    return _mm512_permutex2var_epi16(_mm512_castps_si512(lo), odd, _mm512_castps_si512(hi));
}

/* x = h + m + l, each part exactly a bf16 (see the opening comment). */
AI void split3(__m512 x, __m512 part[3])
{
    const __m512 top = _mm512_castsi512_ps(_mm512_set1_epi32((int)0xFFFF0000u));
    part[0] = _mm512_and_ps(x, top);
    __m512 r = _mm512_sub_ps(x, part[0]);
    part[1] = _mm512_and_ps(r, top);
    part[2] = _mm512_sub_ps(r, part[1]);
}

/* B tiles of tokens [t0, t0 + nt) (nt <= TOKENS), all kbs tile steps of
 * cols columns (zero past cols), at b: tile kb at b + kb * TILE. */
static void pack_group(const float *X, int64_t ldx, int nt, int64_t cols, int64_t kbs,
                       uint8_t *b)
{
    for (int64_t kb = 0; kb < kbs; kb++) {
        __m512i v[16];
        for (int j = 0; j < 16; j++)
            v[j] = _mm512_setzero_si512();
        int64_t c0 = kb * KB, left = cols - c0;
        __mmask16 m0 = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
        __mmask16 m1 = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
        for (int t = 0; t < nt; t++) {
            const float *x = X + t * ldx + c0;
            __m512 p0[3], p1[3];
            split3(_mm512_maskz_loadu_ps(m0, x), p0);
            split3(_mm512_maskz_loadu_ps(m1, x + 16), p1);
            for (int p = 0; p < 3; p++)
                v[3 * t + p] = high_halves(p0[p], p1[p]);
        }
        transpose16(v);
        for (int k = 0; k < 16; k++)
            _mm512_store_si512(b + kb * TILE + 64 * k, v[k]);
    }
}

/* ---- the tile loops ---- */

/* Adds tile steps [0, kbs) of a row block (A at a, rows lda bytes apart)
 * times two token groups (b0, b1) into C tiles 4-7. */
AI void steps_pair(const uint8_t *a, int64_t lda, const uint8_t *b0, const uint8_t *b1,
                   int64_t kbs)
{
    for (int64_t kb = 0; kb < kbs; kb++) {
        _tile_loadd(0, a + 64 * kb, lda);
        _tile_loadd(1, a + 16 * lda + 64 * kb, lda);
        _tile_loadd(2, b0 + TILE * kb, 64);
        _tile_loadd(3, b1 + TILE * kb, 64);
        _tile_dpbf16ps(4, 0, 2);
        _tile_dpbf16ps(5, 0, 3);
        _tile_dpbf16ps(6, 1, 2);
        _tile_dpbf16ps(7, 1, 3);
    }
}

/* The same for one token group: C tiles 4 and 6. */
AI void steps_one(const uint8_t *a, int64_t lda, const uint8_t *b0, int64_t kbs)
{
    for (int64_t kb = 0; kb < kbs; kb++) {
        _tile_loadd(0, a + 64 * kb, lda);
        _tile_loadd(1, a + 16 * lda + 64 * kb, lda);
        _tile_loadd(2, b0 + TILE * kb, 64);
        _tile_dpbf16ps(4, 0, 2);
        _tile_dpbf16ps(6, 1, 2);
    }
}

AI void zero_c(void)
{
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
}

/* y of rows [rb, rb + 32) ∩ [r0, r1) for token groups g (and g + 1 when
 * pair) from C tiles 4-7. */
static void emit(int pair, int g, int n, int64_t rb, int64_t r0, int64_t r1, float *Y,
                 int64_t ldy)
{
    _Alignas(64) float c[4][256];
    _tile_stored(4, c[0], 64);
    _tile_stored(6, c[2], 64);
    if (pair) {
        _tile_stored(5, c[1], 64);
        _tile_stored(7, c[3], 64);
    }
    for (int half = 0; half < 2; half++) {
        for (int q = 0; q < 1 + pair; q++) {
            const float *ct = c[2 * half + q];
            int t0 = (g + q) * TOKENS, nt = n - t0 < TOKENS ? n - t0 : TOKENS;
            for (int i = 0; i < 16; i++) {
                int64_t r = rb + 16 * half + i;
                if (r < r0 || r >= r1)
                    continue;
                for (int t = 0; t < nt; t++) {
                    const float *e = ct + 16 * i + 3 * t;
                    Y[(t0 + t) * ldy + r] = (e[0] + e[1]) + e[2];
                }
            }
        }
    }
}

static void rows_bf16(const ms_mat *w, const float *X, int n, int64_t ldx, float *Y,
                      int64_t ldy, int64_t r0, int64_t r1)
{
    if (r1 <= r0)
        return;
    int64_t kbs = ms_ceil_div(w->cols, KB);
    int groups = (n + TOKENS - 1) / TOKENS;
    int64_t a_stride = 64 * kbs, row_bytes = w->cols * 2;
    size_t b_bytes = (size_t)groups * (size_t)kbs * TILE;
    uint8_t *b = scratch(b_bytes + (size_t)ROWS * (size_t)a_stride);
    if (!b) { /* out of memory: the AVX-512 kernel needs no scratch */
        ms_kernels_avx512()->rows[MS_WFMT_BF16](w, X, n, ldx, Y, ldy, r0, r1);
        return;
    }
    uint8_t *a = b + b_bytes;
    configure();
    for (int g = 0; g < groups; g++) {
        int nt = n - g * TOKENS < TOKENS ? n - g * TOKENS : TOKENS;
        pack_group(X + g * TOKENS * ldx, ldx, nt, w->cols, kbs, b + (size_t)g * kbs * TILE);
    }
    for (int64_t rb = r0; rb < r1; rb += ROWS) {
        /* in place when the block is whole and the columns fill the tile
         * steps; else copied, zero-padded */
        int in_place = w->cols % KB == 0 && rb + ROWS <= w->rows;
        const uint8_t *src = in_place ? (const uint8_t *)w->w + rb * row_bytes : a;
        int64_t lda = in_place ? row_bytes : a_stride;
        for (int i = 0; !in_place && i < ROWS; i++) {
            uint8_t *dst = a + i * a_stride;
            int64_t have = rb + i < w->rows ? row_bytes : 0;
            if (have)
                memcpy(dst, (const uint8_t *)w->w + (rb + i) * row_bytes, (size_t)have);
            memset(dst + have, 0, (size_t)(a_stride - have));
        }
        for (int g = 0; g < groups; g += 2) {
            int pair = g + 1 < groups;
            const uint8_t *b0 = b + (size_t)g * kbs * TILE, *b1 = b0 + kbs * TILE;
            zero_c();
            if (pair)
                steps_pair(src, lda, b0, b1, kbs);
            else
                steps_one(src, lda, b0, kbs);
            emit(pair, g, n, rb, r0, r1, Y, ldy);
        }
    }
}

/* ---- availability ---- */

static ms_kernel_ops amx_ops; /* the avx512 table with the tile kernel */
static int amx_ok;

/* The CPU has AMX-TILE and AMX-BF16, the OS saves tile state (XCR0 bits 17
 * and 18) and grants this process its use (Linux 5.16+). */
static int amx_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
        return 0;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
        return 0;
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

static void build(void)
{
    if (!ms_kernels_avx512() || !amx_usable() || pthread_key_create(&arena_key, arena_free))
        return;
    amx_ops = *ms_kernels_avx512();
    amx_ops.name = "avx512-amx";
    amx_ops.rows[MS_WFMT_BF16] = rows_bf16;
    amx_ok = 1;
}

const ms_kernel_ops *ms_kernels_avx512_amx(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build);
    return amx_ok ? &amx_ops : NULL;
}

/* AVX-512 pieces shared by the exact table (x86_avx512.c), the fast one
 * (x86_avx512bf16.c) and the int8 one (x86_avx512vnni.c). Include only
 * from files compiled with the AVX-512 flags; everything is static inline
 * so each gets its own copy. */
#ifndef MS_KERNELS_X86_AVX512_COMMON_H
#define MS_KERNELS_X86_AVX512_COMMON_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* The row result: lanes summed in a fixed tree. */
AI float hsum(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* MXFP4 in lane order (x86_avx512.c): lane i of a 128-column block holds
 * columns of group i / 4. */
/* A block's 64 code bytes read as 32 words, word l holding columns
 * 4l..4l+3 (column 4l+m in bits 4m..4m+3): wv[m] holds the E2M1 values of
 * columns 4l+m, l = 0..31, as bf16 (exact). The words are shifted right by
 * 4m and looked up by vpermw, which reads 5 index bits, so the 16 values
 * are stored twice. Dword lane i pairs words 2i and 2i+1: columns 8i+m
 * and 8i+4+m, both of group i / 4. */
AI void mx_words(__m512i q, __m512i *wv)
{
    const __m512i tab = _mm512_set_epi16(
        (short)0xC0C0, (short)0xC080, (short)0xC040, (short)0xC000, (short)0xBFC0,
        (short)0xBF80, (short)0xBF00, (short)0x8000, 0x40C0, 0x4080, 0x4040, 0x4000, 0x3FC0,
        0x3F80, 0x3F00, 0x0000, (short)0xC0C0, (short)0xC080, (short)0xC040, (short)0xC000,
        (short)0xBFC0, (short)0xBF80, (short)0xBF00, (short)0x8000, 0x40C0, 0x4080, 0x4040,
        0x4000, 0x3FC0, 0x3F80, 0x3F00, 0x0000);
    wv[0] = _mm512_permutexvar_epi16(q, tab);
    wv[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(q, 4), tab);
    wv[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(q, 8), tab);
    wv[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(q, 12), tab);
}

/* The four scale bytes s4 (group g in byte g) spread over the lanes, lane
 * i taking group i / 4's byte as an int. */
AI __m512i mx_scale_bytes(uint32_t s4)
{
    const __m512i spread = _mm512_setr_epi32(
        (int)0x80808000, (int)0x80808000, (int)0x80808000, (int)0x80808000, (int)0x80808001,
        (int)0x80808001, (int)0x80808001, (int)0x80808001, (int)0x80808002, (int)0x80808002,
        (int)0x80808002, (int)0x80808002, (int)0x80808003, (int)0x80808003, (int)0x80808003,
        (int)0x80808003);
    return _mm512_shuffle_epi8(_mm512_set1_epi32((int)s4), spread);
}

/* The lanes' scales of a full block whose four scale bytes are neither 0
 * nor 255 (mx_scales_odd clear): the bytes' exponent bits alone. */
AI __m512 mx_scales_plain(const uint8_t *sb)
{
    uint32_t s4;
    memcpy(&s4, sb, 4);
    return _mm512_castsi512_ps(_mm512_slli_epi32(mx_scale_bytes(s4), 23));
}

/* Whether any of the n (<= 64) scale bytes at sb is 0 or 255, the two
 * that mx_scales mends. */
AI int mx_scales_odd(const uint8_t *sb, int64_t n)
{
    __mmask64 m = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
    __m512i v = _mm512_maskz_loadu_epi8(m, sb);
    return (_mm512_mask_cmpeq_epi8_mask(m, v, _mm512_setzero_si512()) |
            _mm512_mask_cmpeq_epi8_mask(m, v, _mm512_set1_epi8((char)0xFF))) != 0;
}

/* The scales of one block's ng (1..4) groups at sb, lane i taking group
 * i / 4, as floats 2^(s-127) (s == 0: the subnormal 2^-127, s == 255:
 * NaN, as ms_e8m0_to_f32). Lanes of absent groups are zero. */
AI __m512 mx_scales(const uint8_t *sb, int ng)
{
    uint32_t s4 = 0;
    if (ng == 4)
        memcpy(&s4, sb, 4);
    else
        for (int g = 0; g < ng; g++)
            s4 |= (uint32_t)sb[g] << (8 * g);
    __m512i b = mx_scale_bytes(s4);
    __m512i bits = _mm512_slli_epi32(b, 23);
    /* the byte 0 (absent groups read as 0 too) or 255 in s4: rare, fixed
     * in vector registers; the common block costs three instructions */
    uint32_t lo = s4 - 0x01010101u, hi = ~s4 - 0x01010101u;
    if (__builtin_expect(((lo & ~s4) | (hi & s4)) & 0x80808080u, 0)) {
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                                     _mm512_set1_epi32(0x00400000));
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(255)),
                                     _mm512_set1_epi32(0x7FC00000));
        bits = _mm512_maskz_mov_epi32((__mmask16)((1u << (4 * ng)) - 1), bits);
    }
    return _mm512_castsi512_ps(bits);
}

/* The MXFP4 panel of the lane-order tables (exact, fast, int8), each of
 * which sums a block of 128 columns its own way: blk(nt, q, s, x, a)
 * takes the block's codes q, its lanes' scales s and each token's x for the
 * block at x[t] (in the table's layout, xstep bytes a block), and adds
 * into a[t]. Inlined with blk known, the call is direct. */
typedef void (*mx_block_fn)(int nt, __m512i q, __m512 s, const uint8_t *const *x, __m512 *a);
enum { MX_MAX_NT = 4 }; /* tokens a block takes at most: each table's MAX_NT, checked there */

/* A block's 64 code bytes, loaded once into a register. Left to itself,
 * GCC folds the load into each shift that reads the codes, and rows of
 * 2880 columns (1440 bytes) start every other row 32 bytes into a cache
 * line, where each such load reads two lines. In a /tmp harness of one
 * Zen 5 thread, a decode whose shifts each reloaded the codes took
 * 11.3 cycles a block on rows so placed against 8.1 on aligned ones; with
 * one load, 8.1 on both. The empty asm keeps the one load. */
AI __m512i mx_codes(const uint8_t *q)
{
    __m512i v = _mm512_loadu_si512(q);
    __asm__("" : "+v"(v));
    return v;
}

/* How a row panel asks for the bytes ahead of it, per 64 bytes it reads:
 * a whole row streams, so it asks for its own bytes pf further into L1;
 * in the panel-major order (x86_lanes.h) a panel is a short run of a row,
 * so it asks for the same panel of a row one row block on into L2 (pf is
 * that distance), or for nothing where another token group already did. */
enum { MX_PF_L1, MX_PF_L2, MX_PF_NONE };

/* The MX_PF_* of a row panel given x86_lanes.h's `ahead` (LN_PANEL_AHEAD):
 * -1 a whole row, > 0 the next row block's distance, 0 nothing. */
AI int mx_pf_how(int64_t ahead)
{
    return ahead < 0 ? MX_PF_L1 : ahead ? MX_PF_L2 : MX_PF_NONE;
}

/* n full blocks from codes q and scale bytes sb, the scales tested for the
 * bytes 0 and 255 (odd) or taken as plain exponents. Per block, that test
 * and the ragged block's branch had cost one thread's exact matvec 15-30%
 * of its speed, from memory as from L2 (docs/perf.md, "MXFP4 blocks
 * without per-block tests"); so each (odd, how) pair has its own copy. */
AI void mx_full_blocks(mx_block_fn blk, int nt, const uint8_t *q, const uint8_t *sb,
                       const uint8_t *const *xp, int64_t xstep, int64_t n, int odd, int64_t pf,
                       int how, __m512 *a)
{
    const uint8_t *x[MX_MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        x[t] = xp[t];
    for (int64_t b = 0; b < n; b++, q += 64, sb += 4) {
        if (how == MX_PF_L1)
            _mm_prefetch((const char *)q + pf, _MM_HINT_T0);
        else if (how == MX_PF_L2)
            _mm_prefetch((const char *)q + pf, _MM_HINT_T1);
        __m512 s = odd ? mx_scales(sb, 4) : mx_scales_plain(sb);
        blk(nt, mx_codes(q), s, x, a);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            x[t] += xstep;
    }
}

/* Columns [c0, c1) of MXFP4 row r (c0 on a block boundary, the panel's
 * groups at most 64), x for the panel at xp[t], asking for bytes ahead as
 * `how` says (MX_PF_*, pf bytes on): the full blocks in a loop of their
 * own, in the copy chosen by one test of the panel's scale bytes and by
 * `how`, then the ragged block. The same operations, in the same order, as
 * a loop that tests every block. */
AI void mx_panel(mx_block_fn blk, int nt, const ms_mat *w, int64_t r, const uint8_t *const *xp,
                 int64_t xstep, int64_t c0, int64_t c1, int64_t pf, int how, __m512 *a)
{
    const uint8_t *row = (const uint8_t *)w->w + (w->cols / 2) * r + c0 / 2;
    const uint8_t *sb = (const uint8_t *)w->scale + r * (w->cols / 32) + c0 / 32;
    const int64_t full = (c1 - c0) / 128;
    /* the scales are a second stream beside the codes, ~1.4 lines a row
     * of 2880 columns, which the hardware prefetcher did not keep ahead:
     * asked for ~5 rows ahead, one Zen 5 thread's matvec from memory went
     * 6-16% faster (bench/kernels_ab.sh, four runs); 1 and 2 KiB ahead
     * gained nothing (docs/perf.md, "MXFP4 scales asked for ahead") */
    _mm_prefetch((const char *)sb + 512, _MM_HINT_T0);
    int odd = mx_scales_odd(sb, (c1 - c0) / 32);
    if (how == MX_PF_L2) /* the panel's scales a row block on too (16 code bytes a scale) */
        _mm_prefetch((const char *)sb + pf / 16, _MM_HINT_T1);
#define MX_BLOCKS(o, h) mx_full_blocks(blk, nt, row, sb, xp, xstep, full, o, pf, h, a)
    if (how == MX_PF_L1)
        odd ? MX_BLOCKS(1, MX_PF_L1) : MX_BLOCKS(0, MX_PF_L1);
    else if (how == MX_PF_L2)
        odd ? MX_BLOCKS(1, MX_PF_L2) : MX_BLOCKS(0, MX_PF_L2);
    else
        odd ? MX_BLOCKS(1, MX_PF_NONE) : MX_BLOCKS(0, MX_PF_NONE);
#undef MX_BLOCKS
    int k = (int)(c1 - c0 - full * 128);
    if (k) {
        int ng = k / 32;
        const uint8_t *x[MX_MAX_NT];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            x[t] = xp[t] + full * xstep;
        __m512i q = _mm512_maskz_loadu_epi32((__mmask16)((1u << (4 * ng)) - 1), row + full * 64);
        blk(nt, q, mx_scales(sb + full * 4, ng), x, a);
    }
}

/* FP8 (e4m3) bytes in lane order, shared by the exact table's byte-lane
 * kernel (x86_avx512.c) and the fast one (x86_avx512bf16.c). A byte
 * s.eeee.mmm whose sign sits at bit 15 of a 16-bit word and eeeemmm at
 * bits 10..4 is a bf16 equal to value * 2^-120 (e = 0: a bf16 subnormal,
 * same ratio); at bits 31 and 26..20 of a dword, a float likewise. An
 * arithmetic shift of the words right by 4 puts each word's high byte
 * there (bytes 1 and 3 of each dword: the odd columns); after a word shift
 * left by 8, its low byte (bytes 0 and 2: the even columns). The decode
 * then keeps F8_KEEP of each word (bf16) or F8_KEEP << 16 of each dword
 * (float: the high word as is, the low word shifted up). */
#define F8_KEEP 0x87F0u
AI __m512i f8_odd(__m512i v)
{
    return _mm512_srai_epi16(v, 4);
}
AI __m512i f8_even(__m512i v)
{
    return _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 4);
}

/* The NaN codes (eeeemmm all ones: 0x7F, 0xFF) seen among some bytes: 0x7F
 * is the largest signed byte and 0xFF the largest unsigned, so a running
 * maximum of each finds them in two instructions per 64 bytes. */
typedef struct f8_nan {
    __m512i s, u;
} f8_nan;
AI f8_nan f8_nan_none(void)
{
    return (f8_nan){_mm512_setzero_si512(), _mm512_setzero_si512()};
}
AI void f8_nan_see(f8_nan *n, __m512i v)
{
    n->s = _mm512_max_epi8(n->s, v);
    n->u = _mm512_max_epu8(n->u, v);
}
AI int f8_nan_found(const f8_nan *n)
{
    return _mm512_cmpeq_epi8_mask(n->s, _mm512_set1_epi8(0x7F)) != 0 ||
           _mm512_cmpeq_epi8_mask(n->u, _mm512_set1_epi8((char)0xFF)) != 0;
}

/* Whether every |x[c]| of a token is below limit (NaN lanes pass: they stay
 * NaN however scaled). */
static inline int x_below(const float *x, int64_t cols, float limit)
{
    __m512 top = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16)
        top = _mm512_max_ps(top, _mm512_abs_ps(_mm512_loadu_ps(x + c)));
    if (c < cols)
        top = _mm512_max_ps(
            top, _mm512_abs_ps(_mm512_maskz_loadu_ps((__mmask16)((1u << (cols - c)) - 1), x + c)));
    return !_mm512_cmp_ps_mask(top, _mm512_set1_ps(limit), _CMP_GE_OQ);
}

/* Lanes [lo, hi) of 16 (clamped). */
AI __mmask16 lanes_in(int lo, int hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

/* r[j] lane i <-> r[i] lane j (any 32-bit lanes: shuffles only): pairs,
 * quads, then 128-bit blocks */
AI void tr16(__m512 *r)
{
    __m512 t[16], u[16];
#pragma GCC unroll 16
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
#pragma GCC unroll 16
    for (int k = 0; k < 4; k++) {
        u[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
        r[j] = _mm512_shuffle_f32x4(v0, v2, _MM_SHUFFLE(2, 0, 2, 0));
        r[4 + j] = _mm512_shuffle_f32x4(v0, v2, _MM_SHUFFLE(3, 1, 3, 1));
        r[8 + j] = _mm512_shuffle_f32x4(v1, v3, _MM_SHUFFLE(2, 0, 2, 0));
        r[12 + j] = _mm512_shuffle_f32x4(v1, v3, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

__m512 _ZGVeN16v_expf(__m512 x); /* glibc libmvec */

#endif

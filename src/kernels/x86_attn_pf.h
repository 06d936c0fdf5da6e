/* The prefetch cursor of the attention steps (x86_attn.h, the exact
 * tables'; x86_attn_bf16.h, the fast table's): the step's `next` regions
 * (the chunk the caller reads next) asked for a line at a time through the
 * step's arithmetic, so that it arrives while the step computes. */
#ifndef MS_KERNELS_X86_ATTN_PF_H
#define MS_KERNELS_X86_ATTN_PF_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/kernels.h"

typedef struct xa_pf {
    const char *p[2];
    int64_t left[2];
} xa_pf;

static inline xa_pf xa_pf_of(const ms_attn_step *a)
{
    return (xa_pf){{a->next[0], a->next[1]},
                   {a->next[0] ? a->next_bytes[0] : 0, a->next[1] ? a->next_bytes[1] : 0}};
}

/* Asks for the next 64-byte line of the regions, if any is left, into L2:
 * the step's own keys, their transpose (or the transposed queries) and
 * values fill a 32 KB L1, which the next chunk would evict (docs/perf.md,
 * "Long context"). Callers keep the cursor in registers (a local copy):
 * through memory, its updates were a chain of store-to-load waits. */
static inline __attribute__((always_inline)) void xa_prefetch(xa_pf *f)
{
    if (f->left[0] > 0) {
        _mm_prefetch(f->p[0], _MM_HINT_T1);
        f->p[0] += 64;
        f->left[0] -= 64;
    } else if (f->left[1] > 0) {
        _mm_prefetch(f->p[1], _MM_HINT_T1);
        f->p[1] += 64;
        f->left[1] -= 64;
    }
}

#endif

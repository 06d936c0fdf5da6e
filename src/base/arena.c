/* Bump allocator: 64-byte aligned chunks carved from large blocks. A
 * block comes from calloc, whose large blocks are fresh pages that the
 * kernel zeroes when first touched, and no chunk is ever handed out twice:
 * so chunks need no memset, and the scratch a decoder sizes for its
 * largest pass (with the rest, ~75 MB of resident memory at start for
 * gpt-oss-20b) costs neither start-up time nor memory until a pass uses
 * it. */
#include "base/arena.h"

#include <stdlib.h>
#include <stdint.h>

struct ms_arena_block {
    ms_arena_block *next;
    size_t used, cap;
    unsigned char *mem; /* 64-byte aligned, inside raw */
    void *raw;          /* calloc's block */
};

void *ms_arena_alloc(ms_arena *a, size_t n, const char *what, ms_err *err)
{
    n = (n + 63) & ~(size_t)63;
    ms_arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        b = calloc(1, sizeof *b);
        void *raw = b ? calloc(1, cap + 63) : NULL;
        if (!raw) {
            free(b);
            ms_err_set(err, MS_E_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
            return NULL;
        }
        b->raw = raw;
        b->mem = (unsigned char *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->mem + b->used; /* zero: calloc's, and never handed out before */
    b->used += n;
    a->total += n;
    return p;
}

void ms_arena_free(ms_arena *a)
{
    if (!a)
        return;
    for (ms_arena_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b->raw);
        free(b);
    }
    a->head = NULL;
    a->total = 0;
}

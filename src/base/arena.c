/* Bump allocator: 64-byte aligned chunks carved from large blocks. */
#include "base/arena.h"

#include <stdlib.h>
#include <string.h>

struct ms_arena_block {
    ms_arena_block *next;
    size_t used, cap;
    unsigned char *mem;
};

void *ms_arena_alloc(ms_arena *a, size_t n, const char *what, ms_err *err)
{
    n = (n + 63) & ~(size_t)63;
    ms_arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        b = calloc(1, sizeof *b);
        void *mem = NULL;
        if (!b || posix_memalign(&mem, 64, cap)) {
            free(b);
            ms_err_set(err, MS_E_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
            return NULL;
        }
        b->mem = mem;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->mem + b->used;
    memset(p, 0, n);
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
        free(b->mem);
        free(b);
    }
    a->head = NULL;
    a->total = 0;
}

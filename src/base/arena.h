/* A bump allocator for objects that live as long as their owner (a loaded
 * model's small resident tensors, per-layer tables). Freed all at once. */
#ifndef MS_BASE_ARENA_H
#define MS_BASE_ARENA_H

#include <stddef.h>

#include "base/error.h"

typedef struct ms_arena_block ms_arena_block;
typedef struct ms_arena {
    ms_arena_block *head;
    size_t total;        /* bytes handed out */
} ms_arena;

/* 64-byte aligned, zeroed memory owned by the arena; NULL + err on failure. */
void *ms_arena_alloc(ms_arena *a, size_t n, const char *what, ms_err *err);
void ms_arena_free(ms_arena *a);

#endif

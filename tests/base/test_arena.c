/* The bump allocator: every chunk 64-byte aligned and zeroed, chunks never
 * overlapping (each filled with its own byte, then all checked), small
 * ones sharing blocks and large ones in blocks of their own; and a large
 * chunk that nobody touches costs no resident memory (a decoder's scratch:
 * zeroing it at load had committed ~75 MB more for gpt-oss-20b). */
#include <stdint.h>
#include <stdio.h>

#include "base/arena.h"
#include "test.h"

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static void case_chunks(void)
{
    static const size_t sizes[] = {1, 63, 64, 65, 4000, 1 << 20, (1 << 20) + 1, 3 << 20, 17, 300000};
    enum { N = sizeof sizes / sizeof *sizes };
    ms_arena a = {0};
    ms_err err = {0};
    unsigned char *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = ms_arena_alloc(&a, sizes[i], "test", &err);
        CHECK(p[i] && (uintptr_t)p[i] % 64 == 0, "chunk %d (%zu bytes): %p", i, sizes[i],
              (void *)p[i]);
        if (!p[i])
            return;
        CHECK(all_zero(p[i], sizes[i]), "chunk %d (%zu bytes) not zeroed", i, sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++)
            p[i][j] = (unsigned char)(i + 1);
    }
    for (int i = 0; i < N; i++) {
        size_t bad = 0;
        for (size_t j = 0; j < sizes[i]; j++)
            bad += p[i][j] != (unsigned char)(i + 1);
        CHECK(!bad, "chunk %d: %zu bytes overwritten by another chunk", i, bad);
    }
    size_t want = 0;
    for (int i = 0; i < N; i++)
        want += (sizes[i] + 63) / 64 * 64;
    CHECK(a.total == want, "total %zu, expected %zu", a.total, want);
    ms_arena_free(&a);
    CHECK(a.head == NULL && a.total == 0, "not empty after free");
}

/* Resident pages of this process, from /proc/self/statm. */
static long resident_kb(void)
{
    long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    if (f)
        fclose(f);
    return res < 0 ? -1 : res * 4;
}

static void case_untouched_costs_nothing(void)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("SKIP case_untouched_costs_nothing: AddressSanitizer's allocator commits its own "
           "way\n");
#else
    ms_arena a = {0};
    ms_err err = {0};
    long before = resident_kb();
    unsigned char *p = ms_arena_alloc(&a, (size_t)256 << 20, "test", &err);
    long after = resident_kb();
    CHECK(p && before > 0, "allocation or /proc/self/statm failed");
    CHECK(after - before < 32 << 10, "256 MiB chunk, untouched, made %ld KB resident", after - before);
    printf("  256 MiB arena chunk: %ld KB resident before it is used\n", after - before);
    ms_arena_free(&a);
#endif
}

int main(void)
{
    TEST_CASE(case_chunks);
    TEST_CASE(case_untouched_costs_nothing);
    return t_finish();
}

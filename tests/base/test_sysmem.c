/* Huge-page mappings (base/sysmem.c): ms_map_huge gives writable memory on
 * a 2 MiB boundary of exactly the size asked, and ms_huge_bytes reads how
 * much of it the kernel holds in huge pages, never more than the range nor
 * than the whole process holds (smaps_rollup, read here independently),
 * and the same for several ranges read at once as for each alone;
 * ms_populate maps a whole range in.
 * Whether the kernel gives huge pages at all depends on its settings and
 * free memory, so the fraction is printed, not asserted. */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/mman.h>

#include "base/pool.h"
#include "base/sysmem.h"
#include "test.h"

/* AnonHugePages of the whole process, from smaps_rollup; -1 if unreadable. */
static int64_t process_huge_bytes(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return -1;
    char line[256];
    unsigned long long kb;
    int64_t v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)
            v = (int64_t)kb * 1024;
    fclose(f);
    return v;
}

static void thp_setting(char *buf, size_t cap)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    snprintf(buf, cap, "unknown");
    if (f) {
        if (fgets(buf, (int)cap, f))
            buf[strcspn(buf, "\n")] = 0;
        fclose(f);
    }
}

static void map_huge_aligned_and_usable(void)
{
    size_t sizes[] = {1, 4096, (2u << 20) - 1, (5u << 20) + 123, 64u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        uint8_t *p = ms_map_huge(n);
        CHECK(p != NULL, "%zu bytes: no mapping", n);
        if (!p)
            continue;
        CHECK(((uintptr_t)p & ((2u << 20) - 1)) == 0, "%zu bytes at %p: not on a 2 MiB boundary",
              n, (void *)p);
        for (size_t k = 0; k < n; k += 4093)
            p[k] = (uint8_t)(k * 7 + 1);
        p[n - 1] = 0xA5;
        size_t bad = 0;
        for (size_t k = 0; k + 1 < n; k += 4093)
            bad += p[k] != (uint8_t)(k * 7 + 1);
        CHECK(bad == 0 && p[n - 1] == 0xA5, "%zu bytes: %zu bytes read back wrong", n, bad);
        /* the reservation's slack past the last page is given back */
        unsigned char v;
        uint8_t *after = p + ((n + 4095) & ~(size_t)4095);
        CHECK(mincore(after, 4096, &v) != 0, "%zu bytes: the page after the mapping is still "
              "mapped (the reservation's tail was not trimmed)", n);
        munmap(p, n);
    }
}

static void huge_bytes_bounded(void)
{
    size_t n = 16u << 20;
    uint8_t *p = ms_map_huge(n);
    CHECK(p != NULL, "no mapping");
    if (!p)
        return;
    memset(p, 1, n); /* touch every page */
    int64_t h = ms_huge_bytes(p, n), all = process_huge_bytes();
    CHECK(h >= 0, "smaps could not be read");
    CHECK(h <= (int64_t)n, "%lld bytes in huge pages reported for a %zu-byte range",
          (long long)h, n);
    if (all >= 0)
        CHECK(h <= all, "%lld bytes in huge pages for the range, %lld for the whole process",
              (long long)h, (long long)all);
    CHECK(h % (2 << 20) == 0, "%lld bytes is not a whole number of 2 MiB pages", (long long)h);
    CHECK(ms_huge_bytes(p + 4096, 4096) == 0,
          "a range inside the mapping holds no whole mapping, yet %lld bytes were counted",
          (long long)ms_huge_bytes(p + 4096, 4096));
    char thp[128];
    thp_setting(thp, sizeof thp);
    printf("note: transparent huge pages \"%s\": %lld of %zu MiB of the mapping in huge pages\n",
           thp, (long long)(h >> 20), n >> 20);
    munmap(p, n);
}

/* Several ranges in one read of smaps count what each counts alone. */
static void huge_bytes_of_ranges(void)
{
    size_t n[2] = {8u << 20, 6u << 20};
    uint8_t *p[2] = {ms_map_huge(n[0]), ms_map_huge(n[1])};
    CHECK(p[0] && p[1], "no mapping");
    if (!p[0] || !p[1])
        return;
    memset(p[0], 1, n[0]);
    memset(p[1], 2, n[1]);
    int64_t a = ms_huge_bytes(p[0], n[0]), b = ms_huge_bytes(p[1], n[1]);
    const void *both[2] = {p[0], p[1]};
    int64_t ab = ms_huge_bytes_n(2, both, n);
    CHECK(a >= 0 && b >= 0 && ab == a + b,
          "%lld + %lld bytes in huge pages alone, %lld for both ranges in one read",
          (long long)a, (long long)b, (long long)ab);
    const void *one_and_gap[2] = {p[0], p[1] + 4096};
    size_t gap_n[2] = {n[0], 4096};
    CHECK(ms_huge_bytes_n(2, one_and_gap, gap_n) == a,
          "a range holding no whole mapping added bytes to another's %lld", (long long)a);
    if (b == 0)
        printf("note: the second mapping got no huge pages; the sum is checked on zeros\n");
    munmap(p[0], n[0]);
    munmap(p[1], n[1]);
}

/* ms_populate maps every page of the range, on two threads, as zeroes. */
static void populate_maps_all(void)
{
    size_t n = (200u << 20) + 4096; /* shares of 64 MiB and a ragged last one */
    uint8_t *p = ms_map_huge(n);
    CHECK(p != NULL, "no mapping");
    if (!p)
        return;
    ms_pool_set_threads(2);
    int rc = ms_populate(p, n);
    CHECK(rc == 0, "ms_populate failed: %s", strerror(errno));
    size_t pages = (n + 4095) / 4096, absent = 0;
    unsigned char *v = malloc(pages);
    CHECK(v && mincore(p, n, v) == 0, "mincore failed");
    if (v)
        for (size_t i = 0; i < pages; i++)
            absent += !(v[i] & 1);
    CHECK(absent == 0, "%zu of %zu pages not mapped after ms_populate", absent, pages);
    size_t nonzero = 0;
    for (size_t k = 0; k < n; k += 4093)
        nonzero += p[k] != 0;
    CHECK(nonzero == 0 && p[n - 1] == 0, "%zu sampled bytes not zero", nonzero);
    free(v);
    munmap(p, n);
}

int main(void)
{
    TEST_CASE(map_huge_aligned_and_usable);
    TEST_CASE(huge_bytes_bounded);
    TEST_CASE(huge_bytes_of_ranges);
    TEST_CASE(populate_maps_all);
    return t_finish();
}

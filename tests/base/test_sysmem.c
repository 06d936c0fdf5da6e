/* Huge-page mappings (base/sysmem.c): ms_map_huge gives writable memory on
 * a 2 MiB boundary of exactly the size asked, and ms_huge_bytes reads how
 * much of it the kernel holds in huge pages, never more than the range nor
 * than the whole process holds (smaps_rollup, read here independently),
 * and the same for several ranges read at once as for each alone;
 * ms_populate maps a whole range in; ms_small_runs names the 2 MiB pieces
 * not in huge pages, whose sum is what smaps says is not; ms_file_reread
 * caches again in huge pages a file that was cached in small ones.
 * Whether the kernel gives huge pages at all depends on its settings and
 * free memory, so the fraction is printed, not asserted. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

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
    int64_t each[2] = {-1, -1};
    int64_t ab = ms_huge_bytes_n(2, both, n, each);
    CHECK(a >= 0 && b >= 0 && ab == a + b,
          "%lld + %lld bytes in huge pages alone, %lld for both ranges in one read",
          (long long)a, (long long)b, (long long)ab);
    CHECK(each[0] == a && each[1] == b, "each range's count: %lld and %lld, alone %lld and %lld",
          (long long)each[0], (long long)each[1], (long long)a, (long long)b);
    const void *one_and_gap[2] = {p[0], p[1] + 4096};
    size_t gap_n[2] = {n[0], 4096};
    CHECK(ms_huge_bytes_n(2, one_and_gap, gap_n, each) == a && each[1] == 0,
          "a range holding no whole mapping added bytes to another's %lld", (long long)a);
    if (b == 0)
        printf("note: the second mapping got no huge pages; the sum is checked on zeros\n");
    munmap(p[0], n[0]);
    munmap(p[1], n[1]);
}

/* What ms_small_runs reported: runs relative to the range. */
typedef struct runs {
    uint64_t off[64], len[64];
    int n;
} runs;

static void on_run(void *ctx, uint64_t off, uint64_t len)
{
    runs *r = ctx;
    if (r->n < 64) {
        r->off[r->n] = off;
        r->len[r->n] = len;
    }
    r->n++;
}

/* Runs inside [0, bytes), in order, apart, on 2 MiB boundaries (the last
 * may end at bytes); returns their sum, or -1 after a failed check. */
static int64_t runs_sum(const runs *r, uint64_t bytes, const char *what)
{
    const uint64_t R = 2u << 20;
    int64_t sum = 0;
    CHECK(r->n <= 64, "%s: %d runs", what, r->n);
    for (int i = 0; i < r->n && i < 64; i++) {
        int ok = r->len[i] > 0 && r->off[i] % R == 0 && r->off[i] + r->len[i] <= bytes &&
                 (r->len[i] % R == 0 || r->off[i] + r->len[i] == bytes) &&
                 (i == 0 || r->off[i] > r->off[i - 1] + r->len[i - 1]);
        CHECK(ok, "%s: run %d [%llu, +%llu) of %llu bytes is not a run of whole 2 MiB pieces "
              "after the one before", what, i, (unsigned long long)r->off[i],
              (unsigned long long)r->len[i], (unsigned long long)bytes);
        if (!ok)
            return -1;
        sum += (int64_t)r->len[i];
    }
    return sum;
}

/* A mapping in huge pages with one of them split (a page inside it given
 * back): ms_small_runs names that piece, and its runs sum to what smaps
 * says is not in huge pages; a ragged tail is named too. */
static void small_runs_of_a_split_mapping(void)
{
    const size_t R = 2u << 20, n = 16u << 20;
    uint8_t *p = ms_map_huge(n);
    CHECK(p != NULL, "no mapping");
    if (!p)
        return;
    memset(p, 1, n);
    runs r = {.n = 0};
    if (ms_small_runs(p, n, on_run, &r)) {
        CHECK(errno == ENOTTY || errno == EINVAL, "ms_small_runs: %s", strerror(errno));
        printf("SKIP small_runs_of_a_split_mapping: this kernel has no PAGEMAP_SCAN (%s); the "
               "engine then chooses shards by smaps's totals\n", strerror(errno));
        munmap(p, n);
        return;
    }
    int64_t h = ms_huge_bytes(p, n);
    CHECK(runs_sum(&r, n, "whole mapping") == (int64_t)n - h,
          "the runs sum to %lld bytes, smaps has %lld of %zu in huge pages",
          (long long)runs_sum(&r, n, "whole mapping"), (long long)h, n);
    /* piece 3 split: its page table now maps 4 KiB pages */
    CHECK(madvise(p + 3 * R + 8192, 4096, MADV_DONTNEED) == 0, "madvise: %s", strerror(errno));
    r.n = 0;
    CHECK(ms_small_runs(p, n, on_run, &r) == 0, "ms_small_runs: %s", strerror(errno));
    int64_t after = ms_huge_bytes(p, n), sum = runs_sum(&r, n, "split mapping");
    CHECK(sum == (int64_t)n - after, "after a split the runs sum to %lld bytes, smaps has "
          "%lld of %zu in huge pages", (long long)sum, (long long)after, n);
    int named = 0;
    for (int i = 0; i < r.n && i < 64; i++)
        named |= r.off[i] <= 3 * R && r.off[i] + r.len[i] >= 4 * R;
    CHECK(named, "the split piece [%zu, %zu) is not among the %d runs", 3 * R, 4 * R, r.n);
    if (h == (int64_t)n)
        CHECK(r.n == 1 && r.off[0] == 3 * R && r.len[0] == R,
              "a mapping wholly in huge pages, one split: %d runs, the first [%llu, +%llu)",
              r.n, (unsigned long long)r.off[0], (unsigned long long)r.len[0]);
    else
        printf("note: the kernel gave %lld of %zu MiB in huge pages; the split piece is checked "
               "against smaps's sum\n", (long long)(h >> 20), n >> 20);
    /* a range ending inside a piece: the ragged end is named as a run */
    r.n = 0;
    size_t ragged = 5 * R + 12345;
    CHECK(ms_small_runs(p, ragged, on_run, &r) == 0, "ms_small_runs: %s", strerror(errno));
    CHECK(runs_sum(&r, ragged, "ragged range") >= 0 && r.n >= 1 && r.n <= 64 &&
          r.off[r.n - 1] + r.len[r.n - 1] == ragged,
          "a range of %zu bytes: its ragged last piece is not named", ragged);
    munmap(p, n);
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

/* A file cached in 4 KiB pages (read with readahead off) is cached in
 * 2 MiB pages after ms_file_reread, with its bytes unchanged. Where this
 * kernel and the work folder's file system cache files in small pages
 * only, that is said and the reread is checked for its bytes alone. */
static void reread_caches_in_huge_pages(void)
{
    const size_t n = 16u << 20, R = 2u << 20;
    char path[4096];
    snprintf(path, sizeof path, "%s/ms_test_reread_%d.bin", t_tmpdir(), (int)getpid());
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "%s: cannot write", path);
    if (!f)
        return;
    uint32_t *buf = malloc(n);
    for (size_t i = 0; i < n / 4; i++)
        buf[i] = (uint32_t)(i * 2654435761u);
    CHECK(fwrite(buf, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0, "%s: short write",
          path);
    fclose(f);
    int fd = open(path, O_RDONLY);
    unlink(path);
    CHECK(fd >= 0, "%s: cannot open", path);
    if (fd < 0) {
        free(buf);
        return;
    }
    /* what this kernel gives a file read through a huge mapping from disk */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    const uint8_t *map = ms_map_file_huge(fd, n);
    CHECK(map != NULL, "mapping failed: %s", strerror(errno));
    if (!map) {
        close(fd);
        free(buf);
        return;
    }
    madvise((void *)map, n, MADV_POPULATE_READ);
    int64_t fresh = ms_huge_bytes(map, n);
    /* the same file cached page by page, readahead off */
    munmap((void *)map, n);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    char page[4096];
    for (size_t off = 0; off < n; off += sizeof page)
        CHECK(pread(fd, page, sizeof page, (off_t)off) == (ssize_t)sizeof page, "short read");
    posix_fadvise(fd, 0, 0, POSIX_FADV_NORMAL);
    map = ms_map_file_huge(fd, n);
    madvise((void *)map, n, MADV_POPULATE_READ);
    int64_t small = ms_huge_bytes(map, n);
    runs before = {.n = 0}, left = {.n = 0};
    int scan = ms_small_runs(map, n, on_run, &before) == 0;
    int rc = ms_file_reread(fd, map, 0, n);
    CHECK(rc == 0, "ms_file_reread failed: %s", strerror(errno));
    int64_t after = ms_huge_bytes(map, n);
    if (scan && ms_small_runs(map, n, on_run, &left) == 0) {
        /* the scan agrees with smaps on the file mapping, before and after */
        CHECK(runs_sum(&before, n, "cached page by page") == (int64_t)n - small,
              "cached page by page: the runs sum to %lld bytes, smaps has %lld of %zu in huge "
              "pages", (long long)runs_sum(&before, n, "before"), (long long)small, n);
        CHECK(runs_sum(&left, n, "read again") == (int64_t)n - after,
              "read again: the runs sum to %lld bytes, smaps has %lld of %zu in huge pages",
              (long long)runs_sum(&left, n, "after"), (long long)after, n);
    }
    CHECK(memcmp(map, buf, n) == 0, "the file's bytes differ after the reread");
    printf("note: %zu MiB file: %lld MiB in huge pages read fresh, %lld MiB cached page by page, "
           "%lld MiB after ms_file_reread\n", n >> 20, (long long)(fresh >> 20),
           (long long)(small >> 20), (long long)(after >> 20));
    if (fresh < (int64_t)(n - R))
        printf("SKIP reread_caches_in_huge_pages (huge pages): this kernel cached only %lld of "
               "%zu MiB of a file in %s in huge pages when read fresh, so a reread cannot be "
               "shown to restore them; its bytes were checked\n", (long long)(fresh >> 20),
               n >> 20, t_tmpdir());
    else if (small > (int64_t)(n / 2))
        printf("SKIP reread_caches_in_huge_pages (huge pages): reading with readahead off still "
               "cached %lld MiB of the file in huge pages, so the small-page case could not be "
               "made; its bytes were checked\n", (long long)(small >> 20));
    else
        CHECK(after >= (int64_t)(n - R), "after ms_file_reread %lld of %zu MiB are in huge pages "
              "(%lld when read fresh)", (long long)(after >> 20), n >> 20,
              (long long)(fresh >> 20));
    munmap((void *)map, n);
    close(fd);
    free(buf);
}

int main(void)
{
    TEST_CASE(map_huge_aligned_and_usable);
    TEST_CASE(huge_bytes_bounded);
    TEST_CASE(huge_bytes_of_ranges);
    TEST_CASE(small_runs_of_a_split_mapping);
    TEST_CASE(populate_maps_all);
    TEST_CASE(reread_caches_in_huge_pages);
    return t_finish();
}

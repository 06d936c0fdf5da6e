/* Memory available to the process, cgroup-aware; huge-page mappings. */
#include "base/sysmem.h"
#include "base/pool.h"
#include "moestream.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t meminfo_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

static int read_u64(const char *path, uint64_t *v)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[64] = "";
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || strncmp(buf, "max", 3) == 0)
        return -1;
    *v = strtoull(buf, NULL, 10);
    return 0;
}

/* Headroom (limit - usage) of a cgroup directory and all its ancestors up to
 * `root`, the tightest one; 0 when none has a limit. */
static uint64_t headroom_up(const char *root, const char *rel, const char *limit_file,
                            const char *usage_file)
{
    char path[1200], dir[1000];
    uint64_t best = 0;
    snprintf(dir, sizeof dir, "%s", rel);
    for (;;) {
        uint64_t max, cur;
        snprintf(path, sizeof path, "%s%s/%s", root, dir, limit_file);
        /* v1 writes a huge number for "no limit" */
        if (read_u64(path, &max) == 0 && max < (1ull << 60)) {
            snprintf(path, sizeof path, "%s%s/%s", root, dir, usage_file);
            if (read_u64(path, &cur))
                cur = 0;
            uint64_t h = max > cur ? max - cur : 1;
            best = !best || h < best ? h : best;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || !dir[0] || !strcmp(dir, "/"))
            break;
        *slash = 0;
    }
    return best;
}

/* The cgroup memory limit this process runs under: v2 ("0::/path") or the v1
 * memory controller ("N:memory:/path"). */
static uint64_t cgroup_headroom(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[1024], v2[900] = "", v1[900] = "";
    int have_v1 = 0, have_v2 = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "0::", 3) == 0) {
            snprintf(v2, sizeof v2, "%.899s", line + 3);
            have_v2 = 1;
        }
        const char *m = strstr(line, ":memory:");
        if (m) {
            snprintf(v1, sizeof v1, "%.899s", m + 8);
            have_v1 = 1;
        }
    }
    fclose(f);
    uint64_t h = 0;
    if (have_v1)
        h = headroom_up("/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes",
                        "memory.usage_in_bytes");
    if (!h && have_v2)
        h = headroom_up("/sys/fs/cgroup", v2, "memory.max", "memory.current");
    return h;
}

uint64_t ms_mem_available(void)
{
    uint64_t a = meminfo_available(), c = cgroup_headroom();
    if (c && (!a || c < a))
        return c;
    return a;
}

enum { HUGE_PAGE = 2u << 20 };

/* Maps `bytes` at a 2 MiB boundary: a huge page more is reserved, the
 * mapping is made at the first boundary inside (MAP_FIXED over the
 * reservation), and the slack on both sides is given back. A kernel that
 * does not align large mappings itself (before 6.7, and file mappings)
 * would otherwise leave the first and last 2 MiB regions partial, or, for
 * a file, every region off by the mapping's offset. */
static void *map_aligned(size_t bytes, int prot, int flags, int fd)
{
    size_t span = bytes + HUGE_PAGE;
    uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)r + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (mmap(p, bytes, prot, flags | MAP_FIXED, fd, 0) == MAP_FAILED) {
        int e = errno;
        munmap(r, span);
        errno = e;
        return NULL;
    }
    uint8_t *end = p + ((bytes + 4095) & ~(size_t)4095);
    if (p > r)
        munmap(r, (size_t)(p - r));
    if (r + span > end)
        munmap(end, (size_t)(r + span - end));
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* EINVAL without THP: small pages then */
    return p;
}

void *ms_map_huge(size_t bytes)
{
    return map_aligned(bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

typedef struct populate_job {
    uint8_t *p;
    size_t bytes, share;
    _Atomic int err; /* the first errno, 0 when none */
} populate_job;

static void populate_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    populate_job *j = ctx;
    size_t off = (size_t)t * j->share, len = j->bytes - off < j->share ? j->bytes - off : j->share;
    if (madvise(j->p + off, len, MADV_POPULATE_WRITE)) {
        int none = 0, e = errno;
        atomic_compare_exchange_strong(&j->err, &none, e);
    }
}

int ms_populate(void *p, size_t bytes)
{
    enum { HUGE = 2 << 20, MIN_SHARE = 64 << 20 };
    if (!bytes)
        return 0;
    /* a few shares a thread, so that one slow share does not hold the rest */
    size_t threads = (size_t)ms_pool_threads(), share = bytes / (4 * threads);
    share = share < MIN_SHARE ? MIN_SHARE : (share + HUGE - 1) / HUGE * HUGE;
    populate_job j = {.p = p, .bytes = bytes, .share = share};
    atomic_init(&j.err, 0);
    ms_pool_run((int64_t)((bytes + share - 1) / share), populate_task, &j);
    int e = atomic_load(&j.err);
    if (e) {
        errno = e;
        return -1;
    }
    return 0;
}

const void *ms_map_file_huge(int fd, size_t bytes)
{
    return map_aligned(bytes, PROT_READ, MAP_SHARED, fd);
}

int64_t ms_huge_bytes_n(int n, const void *const *p, const size_t *bytes, int64_t *each)
{
    for (int i = 0; each && i < n; i++)
        each[i] = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int inside = -1; /* the range the current mapping lies in, or -1 */
    int64_t total = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        unsigned long long kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = -1;
            for (int i = 0; i < n && inside < 0; i++) {
                uintptr_t lo = (uintptr_t)p[i], hi = (lo + bytes[i] + 4095) & ~(uintptr_t)4095;
                inside = a >= lo && b <= hi ? i : -1;
            }
        } else if (inside >= 0 && (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1 ||
                              sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1)) {
            total += (int64_t)kb * 1024;
            if (each)
                each[inside] += (int64_t)kb * 1024;
        }
    }
    fclose(f);
    return total;
}

int64_t ms_huge_bytes(const void *p, size_t bytes)
{
    return ms_huge_bytes_n(1, &p, &bytes, NULL);
}

/* PAGEMAP_SCAN's interface (linux/fs.h from Linux 6.7), spelled out for
 * older headers such as Debian 12's. */
typedef struct pm_region {
    uint64_t start, end, categories;
} pm_region;
typedef struct pm_scan {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted,
        category_mask, category_anyof_mask, return_mask;
} pm_scan;
#define PM_SCAN_IOCTL _IOWR('f', 16, pm_scan)
#define PM_PAGE_IS_HUGE (1u << 6) /* PMD-mapped THP or hugetlb */

int ms_small_runs_unsupported;

int ms_small_runs(const void *p, size_t bytes,
                  void (*fn)(void *ctx, uint64_t off, uint64_t len), void *ctx)
{
    const uint64_t R = 2u << 20;
    if (ms_small_runs_unsupported) {
        errno = ENOTTY;
        return -1;
    }
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    uint64_t lo = (uint64_t)(uintptr_t)p, hi = lo + bytes, at = lo; /* at: first piece unsaid */
    pm_region vec[256];
    int rc = 0;
    while (at < hi) {
        /* the huge runs from `at` on; what lies between them is small */
        pm_scan a = {.size = sizeof a, .start = at, .end = hi, .vec = (uint64_t)(uintptr_t)vec,
                     .vec_len = sizeof vec / sizeof *vec, .category_mask = PM_PAGE_IS_HUGE,
                     .return_mask = PM_PAGE_IS_HUGE};
        long n = ioctl(fd, PM_SCAN_IOCTL, &a);
        if (n < 0) {
            rc = -1;
            break;
        }
        uint64_t before = at;
        for (long i = 0; i < n; i++) {
            /* whole pieces only: a run's ragged ends are not whole pages */
            uint64_t s = (vec[i].start - lo + R - 1) / R * R + lo;
            uint64_t e = (vec[i].end - lo) / R * R + lo;
            if (s >= e)
                continue;
            if (s > at)
                fn(ctx, at - lo, s - at);
            if (e > at)
                at = e;
        }
        /* a vector not filled: the walk reached hi; a full one stopped at
         * walk_end, and the next scan goes on from `at` (a run cut there
         * comes again); no whole piece in a full vector cannot happen
         * (huge runs are whole pieces), but would not loop */
        if (n < (long)(sizeof vec / sizeof *vec) || a.walk_end >= hi || at == before) {
            if (at < hi)
                fn(ctx, at - lo, hi - at);
            break;
        }
    }
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int ms_file_reread(int fd, const void *map, uint64_t off, uint64_t len)
{
    uint8_t *p = (uint8_t *)map + off;
    if (madvise(p, len, MADV_DONTNEED))
        return -1;
    int e = posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
    if (e) {
        errno = e;
        return -1;
    }
    return madvise(p, len, MADV_POPULATE_READ);
}

int64_t ms_parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += *end == 'i' ? 1 : 0;
    if (*end == 'B')
        end++;
    if (*end)
        return -1;
    return (int64_t)(v * mul);
}

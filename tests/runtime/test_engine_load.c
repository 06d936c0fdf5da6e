/* Opening an engine whose model fits in memory (the page-cache placement)
 * maps the weights into the process before the first token: the shards'
 * mappings are resident in this process's page tables (their Rss in
 * /proc/self/smaps) right after ms_engine_open, the loading progress runs
 * to its total, and the log says how much is mapped in huge pages. Without
 * the mapping ahead only the pages the binder read (headers, norms) would
 * be in the page tables. With the engine cache, the dense weights are locked
 * in whole 2 MiB regions of the shards' mappings: mlock splits a mapping
 * where the locked range starts and ends, and a 2 MiB folio is mapped whole
 * only inside one mapping, so locked mappings start on a 2 MiB boundary and
 * end on one or at the end of their file. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "moestream.h"
#include "test.h"

static char log_text[8192];
static int64_t load_done = -1, load_total = -1;

static void on_log(void *user, const char *line)
{
    (void)user;
    strncat(log_text, line, sizeof log_text - strlen(log_text) - 2);
    strcat(log_text, "\n");
}

static void on_progress(void *user, const ms_progress *p)
{
    (void)user;
    if (!strcmp(p->what, "loading")) {
        load_done = p->done;
        load_total = p->total;
    }
}

/* Rss and size, in bytes, summed over the mappings of files under dir
 * whose name ends in .safetensors. */
static void shard_rss(const char *dir, int64_t *rss, int64_t *size)
{
    *rss = *size = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return;
    char line[4096];
    int ours = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        unsigned long long kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            const char *path = strchr(line, '/');
            ours = path && strstr(path, dir) && strstr(path, ".safetensors\n");
            if (ours)
                *size += (int64_t)(b - a);
        } else if (ours && sscanf(line, "Rss: %llu kB", &kb) == 1) {
            *rss += (int64_t)kb * 1024;
        }
    }
    fclose(f);
}

static void weights_mapped_at_open(void)
{
    char rel[1024], dir[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/gpt_oss", t_fixtures_dir());
    if (!realpath(rel, dir)) { /* smaps names files by absolute path */
        CHECK(0, "%s: no such fixture folder", rel);
        return;
    }
    ms_engine_opts eo = {.n_threads = 1, .log = on_log, .progress = on_progress};
    ms_engine *eng = NULL;
    ms_error err = {0};
    if (ms_engine_open(dir, &eo, &eng, &err)) {
        CHECK(0, "%s: %s", dir, err.msg);
        return;
    }
    int64_t rss, size;
    shard_rss(dir, &rss, &size);
    CHECK(size > 0, "no mapping of %s/*.safetensors found in /proc/self/smaps", dir);
    CHECK(rss >= size * 9 / 10, "after open, %lld of the shards' %lld mapped bytes are in this "
          "process's page tables: the weights were not mapped ahead", (long long)rss,
          (long long)size);
    CHECK(load_total > 0 && load_done == load_total, "loading progress ended at %lld of %lld",
          (long long)load_done, (long long)load_total);
    CHECK_STR_CONTAINS(log_text, "page cache");
    CHECK_STR_CONTAINS(log_text, "mapped in huge pages");
    printf("note: %lld of %lld mapped bytes resident; log: %s", (long long)rss, (long long)size,
           log_text);
    ms_engine_close(eng);
}

/* The mappings of files under dir, in smaps order: start, end, bytes
 * locked, and whether the next mapping is of the same file. */
typedef struct vma {
    unsigned long a, b;
    long long locked_kb;
    char path[512];
} vma;

static int shard_vmas(const char *dir, vma *v, int max)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return 0;
    char line[4096];
    int n = 0, ours = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        long long kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            const char *path = strchr(line, '/');
            ours = path && strstr(path, dir) && strstr(path, ".safetensors\n") && n < max;
            if (ours) {
                v[n] = (vma){a, b, 0, ""};
                snprintf(v[n].path, sizeof v[n].path, "%s", path);
                n++;
            }
        } else if (ours && sscanf(line, "Locked: %lld kB", &kb) == 1) {
            v[n - 1].locked_kb = kb;
        }
    }
    fclose(f);
    return n;
}

static void dense_locked_in_whole_regions(void)
{
    char rel[1024], dir[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/gpt_oss", t_fixtures_dir());
    if (!realpath(rel, dir)) {
        CHECK(0, "%s: no such fixture folder", rel);
        return;
    }
    log_text[0] = 0;
    ms_engine_opts eo = {.n_threads = 1, .log = on_log, .placement = MS_PLACE_CACHE,
                         .cache_slots = 4};
    ms_engine *eng = NULL;
    ms_error err = {0};
    if (ms_engine_open(dir, &eo, &eng, &err)) {
        CHECK(0, "%s: %s", dir, err.msg);
        return;
    }
    static vma v[4096];
    int n = shard_vmas(dir, v, 4096), locked = 0, bad = 0;
    const unsigned long R = 2ul << 20;
    for (int i = 0; i < n; i++) {
        if (!v[i].locked_kb)
            continue;
        locked++;
        int last = i + 1 == n || strcmp(v[i + 1].path, v[i].path) != 0;
        if (v[i].a % R || (v[i].b % R && !last)) {
            if (!bad++)
                printf("locked mapping %lx-%lx (%lld kB) of %s", v[i].a, v[i].b, v[i].locked_kb,
                       v[i].path);
        }
    }
    CHECK(locked > 0, "no mapping of %s/*.safetensors is locked (log: %s)", dir, log_text);
    CHECK(bad == 0, "%d of %d locked mappings do not start and end on a 2 MiB boundary", bad,
          locked);
    CHECK_STR_CONTAINS(log_text, "pinned, in whole 2 MiB regions");
    ms_engine_close(eng);
}

int main(void)
{
    TEST_CASE(weights_mapped_at_open);
#if defined(__SANITIZE_ADDRESS__)
    printf("SKIP dense_locked_in_whole_regions: AddressSanitizer's mlock locks nothing, so no "
           "mapping can show as locked\n");
#else
    TEST_CASE(dense_locked_in_whole_regions);
#endif
    return t_finish();
}

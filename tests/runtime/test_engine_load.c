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
 * end on one or at the end of their file. A model whose shard the page
 * cache holds in 4 KiB pages is read again at open and mapped in 2 MiB
 * pages, as a fresh read of it would be, and so is a single 2 MiB piece of
 * one. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base/sysmem.h"
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

/* Every .safetensors file of dir: written out, then dropped from the page
 * cache; with small set, read back into it a page at a time with
 * readahead off, so that the cache holds it in 4 KiB pages. */
static void recache_shards(const char *dir, int small)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 12 || strcmp(e->d_name + len - 12, ".safetensors"))
            continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        if (small) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
            char page[4096];
            for (off_t off = 0; pread(fd, page, sizeof page, off) > 0; off += (off_t)sizeof page)
                ;
        }
        close(fd);
    }
    closedir(d);
}

/* The share the log's "N% mapped in huge pages" gives, or -1. */
static int logged_share(void)
{
    const char *p = strstr(log_text, "% mapped in huge pages");
    if (!p)
        return -1;
    while (p > log_text && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return atoi(p);
}

static int open_logged(const char *dir)
{
    log_text[0] = 0;
    ms_engine_opts eo = {.n_threads = 1, .log = on_log};
    ms_engine *eng = NULL;
    ms_error err = {0};
    if (ms_engine_open(dir, &eo, &eng, &err)) {
        CHECK(0, "%s: %s", dir, err.msg);
        return -1;
    }
    ms_engine_close(eng);
    return 0;
}

/* The gpt_oss fixture's configuration with a 16384-token vocabulary (its
 * embedding and lm_head, 6 MiB each, span whole 2 MiB pages) synthesised
 * into base/model; returns 0, or -1 after a failed check. */
static int make_model(const char *base, char *model, size_t cap)
{
    char src[1024], cfg[PATH_MAX + 32];
    snprintf(src, sizeof src, "%s/gpt_oss/config.json", t_fixtures_dir());
    snprintf(cfg, sizeof cfg, "%s/cfg", base);
    snprintf(model, cap, "%s/model", base);
    FILE *f = fopen(src, "r");
    CHECK(f != NULL, "%s: cannot read", src);
    if (!f)
        return -1;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *v = strstr(text, "\"vocab_size\": 1280");
    CHECK(v != NULL, "%s: no \"vocab_size\": 1280", src);
    if (!v)
        return -1;
    memcpy(v, "\"vocab_size\": 9999", 18); /* the same length; 9999 is patched below */
    memcpy(v + 14, "16384", 5);
    mkdir(base, 0700);
    mkdir(cfg, 0700);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/config.json", cfg);
    f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0, "%s: cannot write", path);
    if (f)
        fclose(f);
    ms_error err = {0};
    ms_synth_opts so = {.config_path = path, .out_dir = model, .seed = 7, .quiet = 1};
    if (ms_synth(&so, &err)) {
        CHECK(0, "synth: %s", err.msg);
        return -1;
    }
    return 0;
}

static void remove_model(const char *base)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    CHECK(system(cmd) == 0, "%s", cmd);
}

static void small_pages_read_again(void)
{
    char base[PATH_MAX], model[PATH_MAX + 32];
    snprintf(base, sizeof base, "%s/ms_test_small_pages_%d", t_tmpdir(), (int)getpid());
    if (make_model(base, model, sizeof model))
        return;
    recache_shards(model, 0);
    if (open_logged(model))
        return;
    int fresh = logged_share();
    recache_shards(model, 1);
    if (open_logged(model))
        return;
    int after = logged_share();
    printf("note: read fresh %d%% mapped in huge pages; cached page by page, then opened: %d%%; "
           "log: %s", fresh, after, log_text);
    /* as on a kernel that cannot say which pieces are small: whole shards */
    recache_shards(model, 1);
    ms_small_runs_unsupported = 1;
    int rc = open_logged(model);
    ms_small_runs_unsupported = 0;
    if (rc)
        return;
    int whole = logged_share();
    printf("note: the same without PAGEMAP_SCAN: %d%%; log: %s", whole, log_text);
    if (fresh < 50) {
        printf("SKIP small_pages_read_again (huge pages): this kernel mapped %d%% of a fresh "
               "read of the model in %s in huge pages, so rereading cannot be shown to help\n",
               fresh, t_tmpdir());
    } else {
        CHECK(after >= fresh - 5, "after the reread %d%% is mapped in huge pages, %d%% when "
              "read fresh", after, fresh);
        CHECK_STR_CONTAINS(log_text, "reading them again in 2 MiB pages (whole shards");
        CHECK(whole >= fresh - 5, "without PAGEMAP_SCAN, after the reread %d%% is mapped in "
              "huge pages, %d%% when read fresh", whole, fresh);
    }
    remove_model(base);
}

/* The shard of dir holding `tensor`, into path, and the file offsets of its
 * data; 0, or -1 when no shard names it. Read from the safetensors headers
 * here, apart from the library's parser. */
static int find_tensor(const char *dir, const char *tensor, char *path, size_t cap,
                       uint64_t *from, uint64_t *to)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = -1;
    while (d && found && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 12 || strcmp(e->d_name + len - 12, ".safetensors"))
            continue;
        snprintf(path, cap, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        uint64_t n = 0;
        if (!f || fread(&n, 8, 1, f) != 1 || n > (64u << 20)) {
            if (f)
                fclose(f);
            continue;
        }
        char *h = malloc(n + 1);
        if (h && fread(h, 1, n, f) == n) {
            h[n] = 0;
            char key[256];
            snprintf(key, sizeof key, "\"%s\"", tensor);
            const char *k = strstr(h, key), *o = k ? strstr(k, "\"data_offsets\"") : NULL;
            unsigned long long a, b;
            if (o && sscanf(strchr(o, '[') ? strchr(o, '[') : o, "[%llu ,%llu", &a, &b) == 2) {
                *from = 8 + n + a;
                *to = 8 + n + b;
                found = 0;
            }
        }
        free(h);
        fclose(f);
    }
    if (d)
        closedir(d);
    return found;
}

/* A model read fresh, then one 2 MiB piece of its lm_head dropped from the
 * page cache and read back a page at a time (readahead off), so that the
 * cache holds just that piece in 4 KiB pages: opened again, the piece is
 * read again and the model is mapped in huge pages as when fresh. Telling
 * shards apart by their smaps totals would leave it: 2 MiB is under the
 * share of a shard that made a shard worth reading again. */
static void small_piece_read_again(void)
{
    const uint64_t R = 2u << 20;
    char base[PATH_MAX], model[PATH_MAX + 32], shard[PATH_MAX + 300];
    snprintf(base, sizeof base, "%s/ms_test_small_piece_%d", t_tmpdir(), (int)getpid());
    if (make_model(base, model, sizeof model))
        return;
    uint64_t from = 0, to = 0;
    CHECK(find_tensor(model, "lm_head.weight", shard, sizeof shard, &from, &to) == 0,
          "%s: no shard holds lm_head.weight", model);
    uint64_t piece = (from + R - 1) / R * R;
    CHECK(piece + R <= to, "lm_head.weight [%llu, %llu) holds no whole 2 MiB piece",
          (unsigned long long)from, (unsigned long long)to);
    recache_shards(model, 0);
    if (open_logged(model))
        return;
    int fresh = logged_share();
    int fd = open(shard, O_RDONLY);
    CHECK(fd >= 0, "%s: cannot open", shard);
    if (fd >= 0) {
        posix_fadvise(fd, (off_t)piece, (off_t)R, POSIX_FADV_DONTNEED);
        posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
        char page[4096];
        for (uint64_t off = piece; off < piece + R; off += sizeof page)
            CHECK(pread(fd, page, sizeof page, (off_t)off) == (ssize_t)sizeof page,
                  "%s: short read at %llu", shard, (unsigned long long)off);
        close(fd);
    }
    if (open_logged(model))
        return;
    int after = logged_share();
    printf("note: read fresh %d%% mapped in huge pages; one piece of lm_head cached page by "
           "page, then opened: %d%%; log: %s", fresh, after, log_text);
    if (fresh < 95) {
        printf("SKIP small_piece_read_again (huge pages): this kernel mapped %d%% of a fresh "
               "read of the model in %s in huge pages, so one piece cannot be told apart\n",
               fresh, t_tmpdir());
    } else {
        /* the piece's 2 MB at least (another piece the kernel left small
         * on the fresh read would add to it) */
        const char *h = strstr(log_text, "the page cache holds ");
        double mb = h ? atof(h + strlen("the page cache holds ")) : 0;
        CHECK(h && mb >= 2 && strstr(h, " MB of the weights in 4 KiB pages"),
              "the log does not say the piece of 2 MB is read again: %s", log_text);
        CHECK(after >= fresh, "after the reread %d%% is mapped in huge pages, %d%% when read "
              "fresh", after, fresh);
    }
    remove_model(base);
}

int main(void)
{
    TEST_CASE(weights_mapped_at_open);
    TEST_CASE(small_pages_read_again);
    TEST_CASE(small_piece_read_again);
#if defined(__SANITIZE_ADDRESS__)
    printf("SKIP dense_locked_in_whole_regions: AddressSanitizer's mlock locks nothing, so no "
           "mapping can show as locked\n");
#else
    TEST_CASE(dense_locked_in_whole_regions);
#endif
    return t_finish();
}

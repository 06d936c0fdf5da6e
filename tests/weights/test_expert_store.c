/* The expert store on the upstream gpt_oss fixture: the cache hands out
 * exactly the checkpoint's bytes under eviction with every backend; read
 * faults (injected through the I/O vtable, or a shard truncated after open)
 * are errors naming shard, tensor and offset, never weights. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "models/family.h"
#include "test.h"
#include "weights/experts.h"

static char fixture[1024];
static volatile uint8_t t_sink;

typedef struct loaded {
    ms_checkpoint *ck;
    ms_model *m;
} loaded;

static int load(const char *dir, loaded *l)
{
    ms_err err = {0};
    ms_binder b;
    const ms_family *fam;
    memset(l, 0, sizeof *l);
    if (ms_ckpt_open(dir, &l->ck, &err) || !(fam = ms_family_find(l->ck, &err)) ||
        ms_binder_init(&b, l->ck, 1, &err) || ms_binder_config(&b, l->ck->config, &err)) {
        printf("     cannot open %s: %s\n", dir, err.msg);
        return -1;
    }
    ms_model_opts mo = {.max_batch = 1, .check_only = 1};
    int rc = fam->open(l->ck, &b, &mo, &l->m, &err);
    ms_binder_free(&b);
    if (rc)
        printf("     cannot bind %s: %s\n", dir, err.msg);
    return rc;
}

static void unload(loaded *l)
{
    if (l->m)
        l->m->family->close(l->m);
    ms_ckpt_close(l->ck);
}

/* The bytes of each view of a lease equal those of the mapping's views. */
static int same_bytes(const ms_mat *a, const ms_mat *b, int n_mats)
{
    for (int k = 0; k < n_mats; k++) {
        size_t wb = (size_t)(a[k].rows * a[k].cols / 2), sb = (size_t)(a[k].rows * a[k].cols / 32);
        if (memcmp(a[k].w, b[k].w, wb) || memcmp(a[k].scale, b[k].scale, sb))
            return 0;
    }
    return 1;
}

/* piece > 0: io_uring reading pieces of that size, 2 in flight (the
 * fixture's experts are smaller than the engine's 4 MB pieces). */
static void check_cache_bytes(int io_threads, uint64_t piece)
{
    loaded l, ref;
    if (load(fixture, &l) || load(fixture, &ref)) {
        CHECK(0, "fixture not loadable");
        return;
    }
    ms_err err = {0};
    ms_expert_opts o = {.policy = MS_EXPERTS_CACHE, .slots = 2, .io_threads = io_threads};
    if (piece && ms_io_open_uring(2, piece, &o.io, &err)) {
        printf("SKIP cache_bytes_pieces: %s\n", err.msg);
        unload(&l);
        unload(&ref);
        return;
    }
    CHECK(ms_expert_store_start(l.m->experts, l.ck, &o, &err) == 0, "start: %s", err.msg);
    if (t_case_failed)
        goto out;
    int checked = 0;
    for (int round = 0; round < 3; round++)
        for (int layer = 0; layer < l.m->n_layers; layer++) {
            int32_t ids[4] = {(layer + round) % 12, (layer * 5 + 3) % 12, 11 - layer, round};
            int n = ids[3] == ids[0] || ids[3] == ids[1] || ids[3] == ids[2] ? 3 : 4;
            if (ids[2] == ids[0] || ids[2] == ids[1])
                ids[2] = (ids[2] + 6) % 12, n = 3;
            if (ids[1] == ids[0])
                ids[1] = (ids[1] + 1) % 12;
            CHECK(ms_expert_batch_begin(l.m->experts, layer, ids, n, &err) == 0, "%s", err.msg);
            ms_expert_lease a, b;
            int rc;
            while ((rc = ms_expert_batch_next(l.m->experts, &a, &err)) == 1) {
                CHECK(ms_expert_get(ref.m->experts, layer, a.expert, &b, &err) == 0, "ref get");
                CHECK(same_bytes(a.mat, b.mat, 2), "layer %d expert %d: bytes differ", layer,
                      a.expert);
                ms_expert_put(ref.m->experts, &b);
                ms_expert_put(l.m->experts, &a);
                checked++;
            }
            CHECK(rc == 0, "batch: %s", err.msg);
        }
    ms_expert_stats st;
    ms_expert_store_stats(l.m->experts, &st);
    CHECK(checked >= 45 && st.bytes_read > 0, "checked %d experts, read %lld bytes", checked,
          (long long)st.bytes_read);
out:
    unload(&l);
    unload(&ref);
}

static void test_cache_bytes_uring(void) { check_cache_bytes(0, 0); }
static void test_cache_bytes_threads(void) { check_cache_bytes(3, 0); }
static void test_cache_bytes_pieces(void) { check_cache_bytes(0, 4096); }

/* A shard whose reads fail (or come back short) from some offset on. */
static void check_fault(int64_t res, int at_half, const char *want)
{
    loaded l;
    if (load(fixture, &l)) {
        CHECK(0, "fixture not loadable");
        return;
    }
    ms_err err = {0};
    ms_io *inner, *faulty;
    /* the last shard holds the last layers' experts */
    int f = l.ck->n_files - 1;
    CHECK(ms_io_open_threads(2, &inner, &err) == 0, "io: %s", err.msg);
    uint64_t from = at_half ? l.ck->files[f].size / 2 : 0;
    CHECK(ms_io_open_faulty(inner, l.ck->files[f].fd, from, res, &faulty, &err) == 0, "faulty");
    ms_expert_opts o = {.policy = MS_EXPERTS_CACHE, .slots = 3, .io = faulty, .buffered = 1};
    CHECK(ms_expert_store_start(l.m->experts, l.ck, &o, &err) == 0, "start: %s", err.msg);
    int failed = 0;
    for (int layer = 0; layer < l.m->n_layers && !t_case_failed; layer++) {
        int32_t ids[2] = {1, 7};
        ms_expert_lease a;
        if (ms_expert_batch_begin(l.m->experts, layer, ids, 2, &err))
            break;
        int rc;
        while ((rc = ms_expert_batch_next(l.m->experts, &a, &err)) == 1)
            ms_expert_put(l.m->experts, &a);
        if (rc < 0) {
            failed++;
            CHECK_STR_CONTAINS(err.msg, l.ck->files[f].path);
            CHECK_STR_CONTAINS(err.msg, "mlp.experts.");
            CHECK_STR_CONTAINS(err.msg, "at file offset");
            CHECK_STR_CONTAINS(err.msg, want);
        }
    }
    CHECK(failed > 0, "no read failed");
    unload(&l);
}

static void test_fault_eio(void) { check_fault(-EIO, 0, "Input/output error"); }
static void test_fault_short(void) { check_fault(0, 1, "truncated shard"); }

/* A writable copy of the fixture in the suite's work folder, named by
 * tag and this process; 0, or -1 with the case failed. */
static int copy_fixture(const char *tag, char *dir, size_t cap)
{
    char cmd[4096];
    snprintf(dir, cap, "%.900s/%s-%d", t_tmpdir(), tag, (int)getpid());
    snprintf(cmd, sizeof cmd,
             "rm -rf '%.1000s' && cp -r '%.1000s' '%.1000s' && chmod -R u+w '%.1000s'", dir,
             fixture, dir, dir);
    CHECK(system(cmd) == 0, "copy of the fixture into %s failed", dir);
    return t_case_failed ? -1 : 0;
}

/* A copy of the fixture (copy_fixture), loaded and its store started with
 * o; 0, or -1 with the case failed. */
static int load_copy_started(const char *tag, char *dir, size_t cap, loaded *l,
                             const ms_expert_opts *o)
{
    ms_err err = {0};
    if (copy_fixture(tag, dir, cap) || load(dir, l)) {
        CHECK(0, "copy not loadable");
        return -1;
    }
    CHECK(ms_expert_store_start(l->m->experts, l->ck, o, &err) == 0, "start: %s", err.msg);
    return t_case_failed ? -1 : 0;
}

static void remove_copy(const char *dir)
{
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%.1000s'", dir);
    CHECK(system(cmd) == 0, "cleanup of %s", dir);
}

/* A shard truncated while the engine runs. */
static void test_truncated_shard(void)
{
    char dir[1024];
    loaded l;
    ms_expert_opts o = {.policy = MS_EXPERTS_CACHE, .slots = 2};
    if (load_copy_started("trunc", dir, sizeof dir, &l, &o))
        return;
    ms_err err = {0};
    int f = l.ck->n_files - 1;
    CHECK(truncate(l.ck->files[f].path, (off_t)(l.ck->files[f].size / 3)) == 0, "truncate");
    int failed = 0;
    for (int layer = l.m->n_layers - 1; layer >= 0 && !failed; layer--) {
        ms_expert_lease a;
        if (ms_expert_get(l.m->experts, layer, 11, &a, &err) == 0)
            ms_expert_put(l.m->experts, &a);
        else
            failed = 1;
    }
    CHECK(failed, "reading a truncated shard succeeded");
    CHECK_STR_CONTAINS(err.msg, l.ck->files[f].path);
    CHECK_STR_CONTAINS(err.msg, "truncated shard");
    unload(&l);
    remove_copy(dir);
}

/* Page-cache policy: a shard truncated under the mapping raises SIGBUS on
 * touch; the fault handler names the shard and exits cleanly. */
static void test_truncated_shard_mapped(void)
{
    char dir[1024];
    if (copy_fixture("truncmap", dir, sizeof dir))
        return;
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        ms_install_fault_handler();
        loaded l;
        if (load(dir, &l))
            _exit(3);
        int f = l.ck->n_files - 1;
        if (truncate(l.ck->files[f].path, 4096))
            _exit(4);
        volatile uint8_t sum = 0;
        for (uint64_t i = 0; i < l.ck->files[f].size; i += 4096)
            sum += l.ck->files[f].map[i];
        _exit(sum == 255 ? 5 : 6); /* not reached: the touch past 4096 faults */
    }
    close(fds[1]);
    char out[2048] = "";
    ssize_t n = read(fds[0], out, sizeof out - 1);
    out[n > 0 ? n : 0] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "child status %d", status);
    CHECK_STR_CONTAINS(out, "truncated or became unreadable");
    CHECK_STR_CONTAINS(out, "model-00002-of-00002.safetensors: file offset");
    remove_copy(dir);
}

/* Prefetch never takes a slot someone holds. */
static void test_prefetch_respects_leases(void)
{
    loaded l, ref;
    if (load(fixture, &l) || load(fixture, &ref)) {
        CHECK(0, "fixture not loadable");
        return;
    }
    ms_err err = {0};
    ms_expert_opts o = {.policy = MS_EXPERTS_CACHE, .slots = 2};
    CHECK(ms_expert_store_start(l.m->experts, l.ck, &o, &err) == 0, "start: %s", err.msg);
    ms_expert_lease a, b;
    CHECK(ms_expert_get(l.m->experts, 0, 5, &a, &err) == 0, "get: %s", err.msg);
    int32_t ids[4] = {1, 2, 3, 4};
    for (int layer = 1; layer < 5; layer++)
        ms_expert_prefetch(l.m->experts, layer, ids, 4);
    CHECK(ms_expert_get(ref.m->experts, 0, 5, &b, &err) == 0, "ref");
    CHECK(same_bytes(a.mat, b.mat, 2), "held expert overwritten by prefetch");
    ms_expert_put(l.m->experts, &a);
    ms_expert_put(ref.m->experts, &b);
    unload(&l);
    unload(&ref);
}

/* The fixture loaded and its store started with o; 0, or -1 with the case
 * failed. */
static int load_started(loaded *l, const ms_expert_opts *o)
{
    ms_err err = {0};
    if (load(fixture, l)) {
        CHECK(0, "fixture not loadable");
        return -1;
    }
    CHECK(ms_expert_store_start(l->m->experts, l->ck, o, &err) == 0, "start: %s", err.msg);
    if (t_case_failed) {
        unload(l);
        return -1;
    }
    return 0;
}

/* Takes every expert of one batch and puts it back; the batch's rc. */
static int drain(ms_expert_store *st, int layer, const int32_t *ids, int n, ms_err *err)
{
    ms_expert_lease a;
    int rc;
    if (ms_expert_batch_begin(st, layer, ids, n, err))
        return -1;
    while ((rc = ms_expert_batch_next(st, &a, err)) == 1)
        ms_expert_put(st, &a);
    return rc;
}

/* Honest accounting: an expert a prefetch read for a visit is a prefetch
 * hit of that visit, never a hit; a hit is an expert in memory with no read
 * issued for it; every request is exactly one of hit, prefetch hit, miss;
 * prefetched bytes a visit does not ask for are wasted. */
static void test_accounting(void)
{
    loaded l;
    ms_expert_opts o = {.policy = MS_EXPERTS_CACHE, .slots = 8};
    if (load_started(&l, &o))
        return;
    ms_err err = {0};
    ms_expert_store *st = l.m->experts;
    int64_t eb = (int64_t)ms_expert_bytes(st, 0, 0);
    int32_t a[2] = {0, 1}, b[2] = {2, 3}, c[1] = {4}, d[1] = {5};
    ms_expert_stats s;
    CHECK(drain(st, 0, a, 2, &err) == 0, "%s", err.msg); /* cold: two misses */
    ms_expert_store_stats(st, &s);
    CHECK(s.requests == 2 && s.misses == 2 && s.hits == 0 && s.prefetch_hits == 0,
          "cold batch: %lld requests, %lld misses, %lld hits", (long long)s.requests,
          (long long)s.misses, (long long)s.hits);
    CHECK(s.bytes_read >= 2 * eb && s.prefetch_bytes == 0, "cold batch read %lld bytes",
          (long long)s.bytes_read);
    CHECK(drain(st, 0, a, 2, &err) == 0, "%s", err.msg); /* again: two hits */
    ms_expert_prefetch(st, 1, b, 2);
    CHECK(drain(st, 1, b, 2, &err) == 0, "%s", err.msg); /* prefetched: not hits */
    ms_expert_store_stats(st, &s);
    CHECK(s.hits == 2 && s.prefetch_hits == 2 && s.misses == 2,
          "after a prefetched batch: %lld hits, %lld prefetch hits, %lld misses",
          (long long)s.hits, (long long)s.prefetch_hits, (long long)s.misses);
    CHECK(s.prefetch_issued == 2 && s.prefetch_bytes >= 2 * eb && s.prefetch_wasted_bytes == 0,
          "prefetch: %lld issued, %lld bytes, %lld wasted", (long long)s.prefetch_issued,
          (long long)s.prefetch_bytes, (long long)s.prefetch_wasted_bytes);
    CHECK(drain(st, 1, b, 2, &err) == 0, "%s", err.msg); /* now cached: hits */
    ms_expert_prefetch(st, 2, c, 1);
    CHECK(drain(st, 2, d, 1, &err) == 0, "%s", err.msg); /* mispredicted: a miss */
    ms_expert_store_stats(st, &s);
    CHECK(s.hits == 4 && s.prefetch_hits == 2 && s.misses == 3,
          "after a mispredicted batch: %lld hits, %lld prefetch hits, %lld misses",
          (long long)s.hits, (long long)s.prefetch_hits, (long long)s.misses);
    CHECK(s.prefetch_wasted_bytes >= eb, "wasted %lld bytes", (long long)s.prefetch_wasted_bytes);
    CHECK(s.requests == s.hits + s.prefetch_hits + s.misses, "%lld requests",
          (long long)s.requests);
    CHECK(s.prefetch_predicted == 3 && s.prefetch_correct == 2, "predicted %lld, correct %lld",
          (long long)s.prefetch_predicted, (long long)s.prefetch_correct);
    unload(&l);
}

/* The page-cache policy counts the same way (requests = hits + prefetch
 * hits + misses); the fixture, just read, is resident, so all are hits. */
static void test_accounting_pagecache(void)
{
    loaded l;
    ms_expert_opts o = {.policy = MS_EXPERTS_PAGECACHE};
    if (load_started(&l, &o))
        return;
    ms_err err = {0};
    ms_expert_store *st = l.m->experts;
    for (uint64_t i = 0; i < l.ck->files[0].size; i += 4096) /* make it resident */
        t_sink += l.ck->files[0].map[i];
    for (int f = 1; f < l.ck->n_files; f++)
        for (uint64_t i = 0; i < l.ck->files[f].size; i += 4096)
            t_sink += l.ck->files[f].map[i];
    int32_t a[3] = {0, 1, 2};
    CHECK(drain(st, 0, a, 3, &err) == 0, "%s", err.msg);
    ms_expert_stats s;
    ms_expert_store_stats(st, &s);
    CHECK(s.requests == 3 && s.hits == 3 && s.prefetch_hits == 0 && s.misses == 0 &&
          s.bytes_read == 0, "page cache: %lld requests, %lld hits, %lld misses, %lld bytes",
          (long long)s.requests, (long long)s.hits, (long long)s.misses,
          (long long)s.bytes_read);
    unload(&l);
}

/* Whether every page of shard f is resident. */
static int shard_resident(const ms_checkpoint *ck, int f)
{
    size_t pages = (size_t)(ck->files[f].size + 4095) / 4096;
    unsigned char *v = calloc(pages ? pages : 1, 1);
    int all = v && mincore((void *)ck->files[f].map, (size_t)ck->files[f].size, v) == 0;
    for (size_t i = 0; all && i < pages; i++)
        all = v[i] & 1;
    free(v);
    return all;
}

/* The page-cache policy advises (MADV_WILLNEED) only experts not in
 * memory: a prefetch of experts whose pages the kernel dropped is issued,
 * one of experts whose every page is resident is not. On a copy of the
 * fixture, written out and dropped from the page cache before it is
 * mapped. */
static void test_prefetch_pagecache(void)
{
    char dir[1024];
    loaded l;
    ms_expert_opts o = {.policy = MS_EXPERTS_PAGECACHE};
    if (load_copy_started("pcpf", dir, sizeof dir, &l, &o))
        return;
    int dropped = 1;
    for (int f = 0; f < l.ck->n_files; f++) {
        int fd = open(l.ck->files[f].path, O_RDONLY);
        dropped &= fd >= 0 && fsync(fd) == 0 &&
                   posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
        if (fd >= 0)
            close(fd);
    }
    ms_expert_store *st = l.m->experts;
    int32_t a[2] = {0, 1};
    ms_expert_stats s;
    if (dropped && !shard_resident(l.ck, l.ck->n_files - 1)) {
        ms_expert_prefetch(st, 0, a, 2);
        ms_expert_store_stats(st, &s);
        CHECK(s.prefetch_issued == 2, "experts dropped from the page cache: %lld prefetches "
              "issued, expected 2", (long long)s.prefetch_issued);
    } else {
        printf("     %s: the kernel kept the copy's pages in memory; the dropped half is not "
               "checked\n", t_case_name);
    }
    ms_expert_store_stats(st, &s);
    int64_t before = s.prefetch_issued;
    for (int f = 0; f < l.ck->n_files; f++) /* make it resident */
        for (uint64_t i = 0; i < l.ck->files[f].size; i += 4096)
            t_sink += l.ck->files[f].map[i];
    for (int f = 0; f < l.ck->n_files; f++)
        CHECK(shard_resident(l.ck, f), "shard %d not resident after a touch of every page", f);
    ms_expert_prefetch(st, 1, a, 2);
    ms_expert_store_stats(st, &s);
    CHECK(s.prefetch_issued == before, "resident experts advised: %lld prefetches issued after "
          "%lld", (long long)s.prefetch_issued, (long long)before);
    unload(&l);
    remove_copy(dir);
}

/* ---- the learned placement (usage_file.h) ---- */

typedef struct notices {
    char last[1024];
    int n;
} notices;

static void keep_notice(void *user, const char *line)
{
    notices *nt = user;
    snprintf(nt->last, sizeof nt->last, "%s", line);
    nt->n++;
}

/* A usage file of this process in the suite's temporary folder. */
static void usage_path(char *path, size_t cap, const char *name)
{
    const char *dir = getenv("MS_TMP");
    snprintf(path, cap, "%s/%s-%d.txt", dir ? dir : "/tmp", name, (int)getpid());
}

/* An 8-slot engine cache with that usage file, its notices kept in nt. */
static ms_expert_opts usage_opts(const char *path, notices *nt)
{
    return (ms_expert_opts){.policy = MS_EXPERTS_CACHE, .slots = 8, .usage_file = path,
                            .log = {keep_notice, nt}};
}

/* One run's usage survives the restart: a store that saw layer 0 ask for
 * experts 0 and 1 at every visit (and one other, in turn) writes its
 * counts at close; the next store, given the file, reads those two into
 * the cache before anything is asked, and the first visit finds them as
 * prefetch hits (a read was issued for them), not hits, nor misses. The
 * past counts then weigh as 8 visits (PRIOR_VISITS). */
static void test_usage_survives_restart(void)
{
    char path[1100];
    usage_path(path, sizeof path, "usage");
    unlink(path);
    loaded l;
    notices nt = {0};
    ms_expert_opts o = usage_opts(path, &nt);
    if (load_started(&l, &o))
        return;
    ms_err err = {0};
    int E = l.m->n_experts;
    CHECK(E >= 4, "the fixture has %d experts", E);
    for (int v = 0; v < 40 && !t_case_failed; v++) {
        int32_t ids[3] = {0, 1, 2 + v % (E - 2)};
        CHECK(drain(l.m->experts, 0, ids, 3, &err) == 0, "%s", err.msg);
    }
    unload(&l); /* closes the store: the file is written */
    FILE *f = fopen(path, "r");
    char head[256] = "";
    CHECK(f && fgets(head, sizeof head, f), "%s not written", path);
    if (f)
        fclose(f);
    CHECK_STR_CONTAINS(head, "moestream expert usage 1 layers ");
    if (t_case_failed || load_started(&l, &o))
        return;
    ms_expert_stats s;
    ms_expert_store_stats(l.m->experts, &s);
    CHECK(s.prefetch_issued == 2, "%lld experts read at start, want 2 (experts 0 and 1 of "
          "layer 0): %s", (long long)s.prefetch_issued, nt.last);
    CHECK_STR_CONTAINS(nt.last, "2 (");
    int32_t hot[2] = {0, 1};
    CHECK(drain(l.m->experts, 0, hot, 2, &err) == 0, "%s", err.msg);
    ms_expert_store_stats(l.m->experts, &s);
    CHECK(s.prefetch_hits == 2 && s.hits == 0 && s.misses == 0,
          "first visit after the restart: %lld prefetch hits, %lld hits, %lld misses",
          (long long)s.prefetch_hits, (long long)s.hits, (long long)s.misses);
    unload(&l);
    /* the 40 past visits came back as a prior worth 8, then this run's one */
    unsigned v0 = 0;
    f = fopen(path, "r");
    CHECK(f && fgets(head, sizeof head, f) && fscanf(f, "visits %u", &v0) == 1 && v0 == 9,
          "layer 0 visits after the restart %u, want 8 + 1", v0);
    if (f)
        fclose(f);
    unlink(path);
}

/* A usage file that does not fit is said (file, line, what was expected)
 * and the store starts as without one; nothing is read ahead. */
static void check_usage_refused(const char *text, const char *want)
{
    char path[1100];
    usage_path(path, sizeof path, "bad-usage");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    loaded l;
    notices nt = {0};
    ms_expert_opts o = usage_opts(path, &nt);
    if (load_started(&l, &o))
        return;
    ms_expert_stats s;
    ms_expert_store_stats(l.m->experts, &s);
    CHECK(s.prefetch_issued == 0, "%lld read ahead from a refused file",
          (long long)s.prefetch_issued);
    CHECK(nt.n == 1, "%d notices", nt.n);
    CHECK_STR_CONTAINS(nt.last, path);
    CHECK_STR_CONTAINS(nt.last, want);
    unload(&l);
    unlink(path);
}

static void test_usage_other_model_refused(void)
{
    check_usage_refused("moestream expert usage 1 layers 3 experts 7 bytes 12345\n", "written for 3 "
                        "layers x 7 experts");
}

static void test_usage_malformed_refused(void)
{
    check_usage_refused("not a usage file\n", ":1: expected");
}

int main(void)
{
    snprintf(fixture, sizeof fixture, "%s/gpt_oss", t_fixtures_dir());
    if (access(fixture, R_OK)) {
        printf("FAIL fixture_present: %s not found (set MOESTREAM_FIXTURES)\n", fixture);
        return 1;
    }
    TEST_CASE(test_cache_bytes_uring);
    TEST_CASE(test_cache_bytes_threads);
    TEST_CASE(test_cache_bytes_pieces);
    TEST_CASE(test_fault_eio);
    TEST_CASE(test_fault_short);
    TEST_CASE(test_truncated_shard);
    TEST_CASE(test_truncated_shard_mapped);
    TEST_CASE(test_prefetch_respects_leases);
    TEST_CASE(test_accounting);
    TEST_CASE(test_accounting_pagecache);
    TEST_CASE(test_prefetch_pagecache);
    TEST_CASE(test_usage_survives_restart);
    TEST_CASE(test_usage_other_model_refused);
    TEST_CASE(test_usage_malformed_refused);
    return t_finish();
}

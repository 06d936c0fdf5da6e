/* Engine: open a checkpoint folder, find its family, bind and check every
 * tensor (refusing the model when L0 fails), choose the default context. */
#include <errno.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/json.h"
#include "base/pool.h"
#include "base/sysmem.h"
#include "runtime/engine.h"

int64_t ms_kv_bytes_per_token(const ms_model *m, ms_kvfmt f)
{
    int64_t b = 0;
    for (int l = m->layer0; l < m->layer1; l++)
        if (!m->kv_window[l])
            b += ms_kv_bytes_per_pos(f, m->kv_row[l], m->kv_group[l]);
    return b;
}

/* The default context and KV format. Asked for nothing, a session gets the
 * config's maximum context in f32 when that fits the KV budget (an eighth
 * of the memory available now, so that weights and experts keep the rest),
 * else in bf16, else the longest bf16 context that fits; what was reduced
 * is said once. An explicit --ctx is kept (place_experts refuses what
 * cannot fit at all) and gets f32 when it fits the budget, else bf16.
 * Under --precision fast the cache is bf16 unless asked otherwise: fast
 * rounds activations to bf16 already, and only over a bf16 cache does its
 * attention run in bf16 too (said once). */
static void choose_context(ms_engine *eng, const ms_engine_opts *o)
{
    const ms_model *m = eng->model;
    uint64_t avail = ms_mem_available(), budget = avail / 8;
    /* and never more than what is left beside the dense weights, the
     * working memory and one layer's top-k experts, so the automatic plan
     * runs down to the smallest limit `inspect` states */
    uint64_t fixed = eng->pin_bytes + ms_mem_reserve(avail) +
                     ms_topk_bytes(m);
    if (avail && avail - (fixed < avail ? fixed : avail) < budget)
        budget = fixed < avail ? avail - fixed : 0; /* 0: the shortest context, then refused */
    int64_t ctx = o->ctx > 0 ? o->ctx : m->max_ctx;
    int64_t p32 = ms_kv_bytes_per_token(m, MS_KV_F32);
    ms_kvfmt f = o->kv_format > 0 ? (ms_kvfmt)(o->kv_format - 1) : MS_KV_F32;
    const char *why = NULL;
    if (o->kv_format <= 0 && o->precision == MS_PRECISION_FAST) {
        f = MS_KV_BF16;
        ms_logf(&eng->log, "KV cache bf16: under --precision fast attention runs in bf16 over "
                "it (--kv f32 keeps the float32 cache)");
    } else if (o->kv_format <= 0 && avail && (uint64_t)(p32 * ctx) > budget) {
        f = MS_KV_BF16;
        why = "f32 would not fit";
    }
    int64_t per = ms_kv_bytes_per_token(m, f);
    if (o->ctx <= 0 && avail && per > 0 && (uint64_t)(per * ctx) > budget) {
        ctx = (int64_t)(budget / (uint64_t)per) / MS_ATTN_CHUNK * MS_ATTN_CHUNK;
        ctx = ctx < 256 ? 256 : ctx;
        why = "the model's maximum would not fit";
    }
    eng->default_ctx = ctx;
    eng->kv_fmt = f;
    if (why)
        ms_logf(&eng->log, "context %lld tokens (model maximum %lld), KV cache %s, "
                "%.2f GB (%s in the KV budget of %.2f GB, at most an eighth of the %.1f GB available; "
                "f32 takes %.1f KB/token); --ctx and --kv override", (long long)ctx,
                (long long)m->max_ctx, ms_kvfmt_name(f), (double)(per * ctx) / 1e9, why,
                (double)budget / 1e9, (double)avail / 1e9, (double)p32 / 1024);
}

int ms_engine_read_special_ids(ms_engine *eng, ms_err *err)
{
    const json_t *g = eng->ck->gen_config, *c = eng->ck->config;
    const char *gf = "generation_config.json", *cf = "config.json";
    int64_t ids[MS_MAX_STOP], bos[1];
    int n = 0, nb = 0;
    if (g && ms_json_int_list(g, gf, "eos_token_id", ids, MS_MAX_STOP, &n, err))
        return -1;
    if (!n && ms_json_int_list(c, cf, "eos_token_id", ids, MS_MAX_STOP, &n, err))
        return -1;
    if (g && ms_json_int_list(g, gf, "bos_token_id", bos, 1, &nb, err))
        return -1;
    if (!nb && ms_json_int_list(c, cf, "bos_token_id", bos, 1, &nb, err))
        return -1;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= eng->model->vocab)
            return ms_err_set(err, MS_E_FORMAT, "eos_token_id %lld is outside the vocabulary "
                              "(%lld)", (long long)ids[i], (long long)eng->model->vocab);
        eng->stop_ids[i] = (int32_t)ids[i];
    }
    eng->info.n_stop = n;
    eng->info.stop_ids = eng->stop_ids;
    eng->info.bos_id = nb ? (int32_t)bos[0] : -1;
    return 0;
}

/* Binds the model; refuses it with the first problems when L0 fails. Keeps
 * the dense spans for pinning. */
static int load_model(ms_engine *eng, const ms_engine_opts *o, ms_err *err)
{
    ms_binder b;
    if (ms_binder_init(&b, eng->ck, 0, err))
        return -1;
    if (ms_binder_config(&b, eng->ck->config, err)) {
        ms_binder_free(&b);
        return -1;
    }
    ms_model_opts mo = {.max_batch = MS_MAX_BATCH, .stage_first = o->stage_first,
                        .stage_end = o->stage_end, .stage_no_ends = o->stage_no_ends};
    int rc = eng->family->open(eng->ck, &b, &mo, &eng->model, err);
    if (rc == 0) {
        ms_bind_finish(&b);
        if (b.n_problems) {
            rc = ms_err_set(err, MS_E_MISMATCH,
                            "%s: %d tensor problem%s for %s, first: %s (run `moestream "
                            "inspect %s` for the full list)",
                            eng->ck->dir, b.n_problems, b.n_problems > 1 ? "s" : "",
                            eng->family->model_type, b.problems[0], eng->ck->dir);
        }
    }
    eng->dense_bytes = b.bytes[MS_ROLE_DENSE] + b.bytes[MS_ROLE_EMBED];
    eng->embed_bytes = b.bytes[MS_ROLE_EMBED];
    eng->dense = b.dense;
    eng->n_dense = b.n_dense;
    b.dense = NULL;
    ms_binder_free(&b);
    return rc;
}

static int span_order(const void *a, const void *b)
{
    const ms_span *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Sorts v[0..n) and coalesces it in place into whole 2 MiB regions of the
 * shards (whose mappings start on a 2 MiB boundary, ms_map_file_huge), the
 * last one of a file ending at its end; returns how many regions. What
 * the engine maps in or locks is whole regions: a 2 MiB page-cache folio
 * is mapped whole only where all of its 2 MiB lie in one mapping (mlock
 * splits a mapping at the range it locks), and dense weights locked at 4
 * KiB boundaries, partly in small pages, made attention 1.8-1.9x slower
 * (docs/perf.md, "Dense weights locked in whole regions"). */
static int whole_regions(const ms_engine *eng, ms_span *v, int n)
{
    const uint64_t REGION = 2 << 20;
    qsort(v, (size_t)n, sizeof *v, span_order);
    int m = 0;
    for (int i = 0; i < n; i++) {
        uint64_t size = eng->ck->files[v[i].file].size;
        uint64_t a = v[i].offset & ~(REGION - 1);
        uint64_t e = (v[i].offset + v[i].nbytes + REGION - 1) & ~(REGION - 1);
        e = e < size ? e : size;
        if (m && v[m - 1].file == v[i].file && a <= v[m - 1].offset + v[m - 1].nbytes) {
            uint64_t end = v[m - 1].offset + v[m - 1].nbytes;
            v[m - 1].nbytes = (e > end ? e : end) - v[m - 1].offset;
        } else {
            v[m] = v[i];
            v[m].offset = a;
            v[m].nbytes = e - a;
            m++;
        }
    }
    return m;
}

/* The dense weights' spans coalesced in place into whole regions
 * (whole_regions): what the engine-cache placement locks, and, as
 * eng->pin_bytes, what the memory plan counts as resident. */
static void plan_pinning(ms_engine *eng)
{
    eng->n_dense = whole_regions(eng, eng->dense, eng->n_dense);
    uint64_t bytes = 0;
    for (int i = 0; i < eng->n_dense; i++)
        bytes += eng->dense[i].nbytes;
    uint64_t spans = eng->dense_bytes - eng->embed_bytes;
    eng->pin_bytes = bytes > spans ? bytes : spans;
}

/* Maps the regions v[0..m) into the process now (MADV_POPULATE_READ, which
 * reads from disk what is not cached yet), a step at a time with the
 * loading progress. Returns 0, or -1 with errno: before Linux 5.14 the
 * pages map on first use. */
static int map_in(ms_engine *eng, const ms_span *v, int m)
{
    enum { STEP = 256 << 20 };
    uint64_t total = 0, done = 0;
    for (int i = 0; i < m; i++)
        total += v[i].nbytes;
    double t0 = ms_now();
    for (int i = 0; i < m; i++)
        for (uint64_t off = 0; off < v[i].nbytes; off += STEP) {
            uint64_t len = v[i].nbytes - off < STEP ? v[i].nbytes - off : STEP;
            const uint8_t *p = eng->ck->files[v[i].file].map + v[i].offset + off;
            if (madvise((void *)p, len, MADV_POPULATE_READ))
                return -1;
            done += len;
            if (eng->progress)
                eng->progress(eng->progress_user, &(ms_progress){"loading", (int64_t)done,
                                                                 (int64_t)total, ms_now() - t0});
        }
    return 0;
}

/* The bytes of each shard mapped in huge pages now, into huge[f] (one read
 * of smaps); returns their sum, or -1 when smaps cannot be read. */
static int64_t huge_per_file(const ms_engine *eng, int64_t *huge)
{
    int nf = eng->ck->n_files;
    const void **maps = malloc(sizeof *maps * (size_t)nf);
    size_t *sizes = malloc(sizeof *sizes * (size_t)nf);
    int64_t sum = -1;
    if (maps && sizes) {
        for (int f = 0; f < nf; f++) {
            maps[f] = eng->ck->files[f].map;
            sizes[f] = eng->ck->files[f].size;
        }
        sum = ms_huge_bytes_n(nf, maps, sizes, huge);
    }
    free(maps);
    free(sizes);
    return sum;
}

/* Of a shard's regions' bytes, those not mapped in huge pages. */
static uint64_t small_bytes(uint64_t bytes, int64_t huge)
{
    return huge <= 0 ? bytes : (uint64_t)huge < bytes ? bytes - (uint64_t)huge : 0;
}

/* Whether a shard's regions (bytes of them, huge in huge pages) are mostly
 * in small pages: more than a tenth, and more than the two 2 MiB pieces a
 * file's ragged ends can leave. */
static int mostly_small(uint64_t bytes, int64_t huge)
{
    uint64_t small = small_bytes(bytes, huge);
    return small > bytes / 10 && small > (4u << 20);
}

/* Pieces of the weights to read again: spans of whole 2 MiB pieces, in
 * file order, adjacent ones joined. */
typedef struct pieces {
    ms_span *v;
    int n, cap;
    int file;       /* the region being added to */
    uint64_t base;  /* its offset in the file */
    uint64_t whole; /* the file's whole pieces end here: a ragged last one is never huge */
    int sealed;     /* pieces before this one are never extended */
    int oom;
} pieces;

/* ms_small_runs's callback: [off, off + len) of the current region. */
static void add_piece(void *ctx, uint64_t off, uint64_t len)
{
    pieces *p = ctx;
    uint64_t a = p->base + off, e = a + len < p->whole ? a + len : p->whole;
    if (a >= e || p->oom)
        return;
    ms_span *last = p->n > p->sealed ? &p->v[p->n - 1] : NULL;
    if (last && last->file == p->file && last->offset + last->nbytes == a) {
        last->nbytes = e - last->offset;
        return;
    }
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        ms_span *v = realloc(p->v, sizeof *v * (size_t)cap);
        if (!v) {
            p->oom = 1;
            return;
        }
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = (ms_span){.file = p->file, .offset = a, .nbytes = e - a};
}

/* Adds [off, off + len) of shard f (a 2 MiB boundary) to *p if it is not
 * all mapped in huge pages now: the pieces that are not, where the kernel
 * can say it (ms_small_runs; returns 0), else nothing (-1). */
static int add_small(const ms_engine *eng, int f, uint64_t off, uint64_t len, pieces *p)
{
    const ms_st_file *sf = &eng->ck->files[f];
    p->file = f;
    p->base = off;
    p->whole = sf->size / (2u << 20) * (2u << 20);
    return ms_small_runs(sf->map + off, len, add_piece, p);
}

static uint64_t pieces_bytes(const pieces *p, int from, int to)
{
    uint64_t b = 0;
    for (int i = from; i < to; i++)
        b += p->v[i].nbytes;
    return b;
}

/* "123 MB" or "1.23 GB" into buf. */
static const char *size_text(char *buf, size_t n, uint64_t bytes)
{
    if (bytes < 1000000000u)
        snprintf(buf, n, "%.0f MB", (double)bytes / 1e6);
    else
        snprintf(buf, n, "%.2f GB", (double)bytes / 1e9);
    return buf;
}

/* Reads pieces p->v[first, end) again, shard by shard; in exact mode
 * (ms_small_runs) appends what stays in small pages after them. Stops,
 * said on the log, with -1 at a shard whose pieces mostly stay small (or
 * that cannot be read); else 0. read counts the bytes. */
static int read_pass(ms_engine *eng, pieces *p, int first, int end, int exact,
                     int64_t *huge, const uint64_t *bytes, uint64_t *read)
{
    const ms_st_file *files = eng->ck->files;
    p->sealed = p->n;
    for (int i = first; i < end;) {
        int f = p->v[i].file, j = i;
        for (; j < end && p->v[j].file == f; j++) {
            if (ms_file_reread(files[f].fd, files[f].map, p->v[j].offset, p->v[j].nbytes)) {
                ms_logf(&eng->log, "%s: cannot read it again (%s); left in small pages",
                        files[f].path, strerror(errno));
                return -1;
            }
            *read += p->v[j].nbytes;
        }
        int stayed;
        if (exact) {
            int before = p->n;
            for (int k = i; k < j && !p->oom; k++)
                if (add_small(eng, f, p->v[k].offset, p->v[k].nbytes, p))
                    break;
            stayed = p->oom || 2 * pieces_bytes(p, before, p->n) > pieces_bytes(p, i, j);
        } else {
            stayed = huge_per_file(eng, huge) >= 0 && mostly_small(bytes[f], huge[f]);
        }
        if (stayed) {
            ms_logf(&eng->log, "%s came back in small pages too (memory too fragmented for "
                    "2 MiB pages, or another process maps them): the other shards are left "
                    "as they are", files[f].path);
            return -1;
        }
        i = j;
    }
    return 0;
}

/* The page cache keeps a file in the folios it was first read into: a
 * shard read without readahead, or while memory was fragmented, stays in 4
 * KiB pages, and over such weights the synthetic gpt-oss-20b decoded at
 * 208-210 ms/token against 129-136 and prefilled at 4 against 12-18 tok/s
 * (docs/perf.md, "Weights cached in small pages"). Parts of a shard left
 * so cost too: with 100 MB of Qwen3's lm_head in small pages its head took
 * 12.2 ms a token against 11.35 (docs/perf.md, "Weights left in small
 * pages"). So after the regions v[0..m) (sorted by file) are mapped in,
 * the 2 MiB pieces of them that are not mapped as huge pages are read
 * again (ms_file_reread) through the shards' huge mappings. The kernel
 * says which pieces those are (ms_small_runs); where it cannot (before
 * Linux 6.7), smaps's totals per shard choose the shards whose regions are
 * mostly in small pages, and those are read again whole. Where nothing at
 * all is in huge pages, one 2 MiB piece is read again first, to learn
 * whether this kernel caches the file system's files in large folios at
 * all; if it does not, nothing more is read. The rereading stops at a
 * shard whose pieces stay in small pages (memory too fragmented for 2 MiB
 * folios, or pages another process maps, which are not dropped). Said on
 * the log either way. */
static void reread_small_pages(ms_engine *eng, const ms_span *v, int m)
{
    const uint64_t REGION = 2 << 20;
    int nf = eng->ck->n_files, exact = 1;
    int64_t *huge = calloc((size_t)nf, sizeof *huge);
    uint64_t *bytes = calloc((size_t)nf, sizeof *bytes);
    pieces p = {0};
    char t0s[32], t1s[32];
    if (!huge || !bytes || huge_per_file(eng, huge) < 0)
        goto done;
    for (int i = 0; i < m; i++)
        bytes[v[i].file] += v[i].nbytes;
    uint64_t all = 0;
    int64_t in_huge = 0;
    for (int f = 0; f < nf; f++) {
        all += bytes[f];
        in_huge += huge[f];
    }
    for (int i = 0; i < m && exact; i++)
        exact = add_small(eng, v[i].file, v[i].offset, v[i].nbytes, &p) == 0;
    if (!exact) { /* whole regions of the shards mostly in small pages */
        p.n = 0;
        for (int i = 0; i < m; i++)
            if (mostly_small(bytes[v[i].file], huge[v[i].file])) {
                p.file = v[i].file;
                p.base = v[i].offset;
                p.whole = UINT64_MAX;
                add_piece(&p, 0, v[i].nbytes);
            }
    }
    if (p.oom || p.n == 0)
        goto done;
    const ms_st_file *files = eng->ck->files;
    if (in_huge == 0) {
        int i = 0;
        while (i < p.n && p.v[i].nbytes < REGION)
            i++;
        if (i == p.n)
            goto done;
        const ms_st_file *sf = &files[p.v[i].file];
        if (ms_file_reread(sf->fd, sf->map, p.v[i].offset, REGION) ||
            huge_per_file(eng, huge) <= 0) {
            ms_logf(&eng->log, "the weights are mapped in 4 KiB pages, and %s read again "
                    "comes back in them too: this kernel does not cache this file system's "
                    "files in 2 MiB pages, so they are left as they are", sf->path);
            goto done;
        }
    }
    ms_logf(&eng->log, "the page cache holds %s of the weights in 4 KiB pages, over which "
            "products run slower: reading them again in 2 MiB pages%s",
            size_text(t0s, sizeof t0s, pieces_bytes(&p, 0, p.n)),
            exact ? "" : " (whole shards: this kernel cannot say which pieces are small, "
                         "which PAGEMAP_SCAN from Linux 6.7 tells)");
    double t0 = ms_now();
    uint64_t read = 0;
    /* a second pass over what stayed small: on a start that evicted another
     * model's pages, one pass left 44% of gpt-oss-20b's weights in small
     * pages (5.52 GB read), which the next start read again whole in huge
     * ones; with the second pass Qwen3's 5.89 GB needed 0.59 GB more and
     * came back whole (docs/perf.md, "Weights left in small pages") */
    for (int pass = 0, first = 0, end = p.n; pass < 2 && first < end; pass++) {
        if (read_pass(eng, &p, first, end, exact, huge, bytes, &read))
            break;
        first = end;
        end = p.n;
    }
    in_huge = huge_per_file(eng, huge);
    ms_logf(&eng->log, "read %s again in %.1f s: %.0f%% of the weights now in 2 MiB pages",
            size_text(t1s, sizeof t1s, read), ms_now() - t0,
            all ? 100.0 * (double)(in_huge > 0 ? in_huge : 0) / (double)all : 0.0);
done:
    free(p.v);
    free(huge);
    free(bytes);
}

/* Locks the dense weights in memory so that streaming experts cannot evict
 * them, in their whole 2 MiB regions (plan_pinning), once mapped in (in 2
 * MiB pages where the kernel can: reread_small_pages); an optimisation, so
 * a refusal is reported and not fatal. */
static void pin_dense(ms_engine *eng)
{
    if (map_in(eng, eng->dense, eng->n_dense) == 0)
        reread_small_pages(eng, eng->dense, eng->n_dense);
    for (int i = 0; i < eng->n_dense; i++) {
        const ms_span *s = &eng->dense[i];
        const void *p = eng->ck->files[s->file].map + s->offset;
        if (mlock(p, s->nbytes)) {
            ms_logf(&eng->log, "cannot pin dense weights (mlock: %s); streaming may evict "
                    "them", strerror(errno));
            break;
        }
        eng->pinned_bytes += s->nbytes;
    }
}

/* In the page-cache placement the model fits and all of it is read sooner
 * or later, so the spans of its weights (dense and experts, in whole 2 MiB
 * regions) are mapped into the process before the first token (map_in)
 * instead of by page faults during the first prompt. Through the shards'
 * huge-page mappings (ms_map_file_huge) the pages it reads are 2 MiB folios
 * where the kernel's page cache has them, each mapped whole: on this
 * project's VM (Linux 6.18, ext4) decode 211 -> 136-153 ms/token and a
 * 64-token prefill 8-9 -> 21-25 tok/s on the synthetic gpt-oss-20b
 * (docs/perf.md, "Huge pages"). Shards cached earlier in small pages are
 * read again (reread_small_pages). A kernel without MADV_POPULATE_READ
 * (before 5.14) maps pages on first use, as before, and the log says so.
 * Returns the share of the weights' bytes mapped in huge pages. */
static double populate_weights(ms_engine *eng)
{
    int ne = ms_expert_store_spans(eng->model->experts, NULL), n = eng->n_dense + ne;
    ms_span *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v)
        return 0; /* an optimisation: pages then map on first use */
    memcpy(v, eng->dense, sizeof *v * (size_t)eng->n_dense);
    ms_expert_store_spans(eng->model->experts, v + eng->n_dense);
    int m = whole_regions(eng, v, n);
    uint64_t total = 0;
    for (int i = 0; i < m; i++)
        total += v[i].nbytes;
    if (map_in(eng, v, m)) {
        ms_logf(&eng->log, "cannot map the weights' pages ahead (madvise: %s); they are "
                "mapped on first use", strerror(errno));
        free(v);
        return 0;
    }
    reread_small_pages(eng, v, m);
    free(v);
    int64_t huge = huge_per_file(eng, NULL);
    /* the mappings hold headers and unused tensors too: at most all */
    double share = total && huge > 0 ? (double)huge / (double)total : 0;
    return share < 1 ? share : 1;
}

uint64_t ms_topk_bytes(const ms_model *m)
{
    return m->experts ? (uint64_t)m->n_experts_used * ms_expert_bytes_typical(m->experts) : 0;
}

uint64_t ms_mem_reserve(uint64_t avail)
{
    uint64_t r = (256ull << 20) + avail / 20, cap = avail / 8;
    cap = cap > (32ull << 20) ? cap : 32ull << 20;
    return r < cap ? r : cap;
}

uint64_t ms_mem_smallest(uint64_t need)
{
    uint64_t l = need;
    for (int i = 0; i < 32; i++) /* the reserve grows by at most an eighth of l */
        l = need + ms_mem_reserve(l);
    return l;
}

/* Most positions a prefill call runs through each layer at once (a
 * layer-major family: ms_model.span_row_bytes > 0): what a 32nd of the
 * memory available holds (at most half of the `left` bytes the rest of the
 * plan leaves), in whole blocks, at most the context; returns the bytes it
 * takes beyond a block's scratch. Each layer's experts are read
 * once per span, so under a memory limit a prompt of up to that many tokens
 * reads each expert it routes to once. */
static int64_t choose_span(const ms_engine *eng, int64_t span_opt, uint64_t avail,
                           uint64_t left)
{
    const ms_model *m = eng->model;
    int64_t B = m->max_batch, span = B;
    if (m->span_row_bytes > 0) {
        uint64_t budget = avail ? avail / 32 : 1ull << 30;
        budget = avail && left / 2 < budget ? left / 2 : budget; /* half of what is left */
        span = span_opt > 0 ? span_opt : (int64_t)(budget / (uint64_t)m->span_row_bytes);
        int64_t ctx = (eng->default_ctx + B - 1) / B * B;
        span = span > ctx ? ctx : span;
        span = span > MS_MAX_SPAN ? MS_MAX_SPAN : span;
        span = span_opt > 0 ? span : span / B * B;
        span = span < 1 ? 1 : span;
    }
    return span;
}

/* The memory arithmetic of an engine with `avail` bytes available: what
 * is fixed (dense weights, a session's KV cache, the reserve, one layer's
 * top-k experts, the span buffers), where the experts go and the expert
 * cache's budget. Shared by the placement and by ms_engine_mem_plan. */
typedef struct mem_plan {
    uint64_t kv, resident, reserve, topk, span_bytes, budget;
    int64_t span;
    int place;   /* MS_PLACE_PAGECACHE or MS_PLACE_CACHE */
} mem_plan;

static void plan_memory(const ms_engine *eng, int placement, int64_t ram, int slots,
                        int64_t span_opt, uint64_t avail, mem_plan *p)
{
    const ms_model *m = eng->model;
    p->kv = (uint64_t)(ms_kv_bytes_per_token(m, eng->kv_fmt) * eng->default_ctx);
    p->reserve = ms_mem_reserve(avail);
    p->resident = eng->pin_bytes;
    p->topk = ms_topk_bytes(m);
    uint64_t fixed = p->kv + p->resident + p->reserve + p->topk;
    p->span = choose_span(eng, span_opt, avail, avail > fixed ? avail - fixed : 0);
    int64_t B = m->max_batch;
    p->span_bytes = p->span > B ? (uint64_t)((p->span - B) * m->span_row_bytes) : 0;
    uint64_t experts = m->experts ? ms_expert_total_bytes(m->experts) : 0;
    p->place = placement;
    if (p->place == MS_PLACE_AUTO)
        p->place = ram > 0 || slots > 0 ? MS_PLACE_CACHE
                 : !avail || eng->dense_bytes + experts + p->kv + p->span_bytes + p->reserve < avail
                     ? MS_PLACE_PAGECACHE
                     : MS_PLACE_CACHE;
    uint64_t used = p->resident + p->kv + p->reserve + p->span_bytes;
    p->budget = ram > 0 ? (uint64_t)ram : avail > used ? avail - used : 0;
}

int ms_engine_mem_plan(const ms_engine *eng, uint64_t mem, ms_mem_plan *out)
{
    mem_plan p;
    plan_memory(eng, eng->placement_opt, 0, 0, eng->span_opt, mem, &p);
    memset(out, 0, sizeof *out);
    out->fixed_bytes = p.resident + p.kv + p.reserve + p.span_bytes;
    out->placement = p.place;
    if (p.place == MS_PLACE_CACHE && eng->model->experts) {
        uint64_t slot = ms_expert_slot_size(eng->model->experts);
        out->cache_bytes = p.budget;
        out->cache_slots = slot ? (int64_t)(p.budget / slot) : 0;
    }
    /* the least the placement accepts: one layer's top-k experts held */
    out->fits = p.resident + p.kv + p.reserve + p.topk + p.span_bytes <= mem &&
                (p.place == MS_PLACE_PAGECACHE ||
                 out->cache_slots >= eng->model->n_experts_used);
    return 0;
}

/* Chooses where experts live: the page cache when the whole model fits in
 * the memory available, else an engine cache sized from what is left after
 * the dense weights and the KV cache. Says which, once. */
static int place_experts(ms_engine *eng, const ms_engine_opts *o, ms_err *err)
{
    ms_model *m = eng->model;
    uint64_t avail = ms_mem_available();
    mem_plan p;
    eng->span_opt = o->span;
    eng->placement_opt = o->placement;
    plan_memory(eng, o->placement, o->ram, o->cache_slots, o->span, avail, &p);
    m->max_span = (int)p.span;
    uint64_t kv = p.kv, reserve = p.reserve, resident = p.resident, topk = p.topk;
    uint64_t fixed = kv + resident + reserve + topk, span = p.span_bytes;
    /* what cannot fit is refused here, with the numbers, before anything
     * big is allocated (an OOM kill names nothing) */
    uint64_t kv_least = (uint64_t)(ms_kv_bytes_per_token(m, eng->kv_fmt) * 256);
    if (avail && kv + resident + reserve > avail && kv_least + resident + reserve + topk < avail)
        return ms_err_set(err, MS_E_NOMEM, "a context of %lld tokens needs %.2f GB of KV cache "
                          "per session, with %.2f GB of dense weights more than the %.2f GB "
                          "available: lower --ctx", (long long)eng->default_ctx, (double)kv / 1e9,
                          (double)resident / 1e9, (double)avail / 1e9);
    if (avail && fixed + span > avail && o->ram <= 0 && o->cache_slots <= 0)
        return ms_err_set(err, MS_E_NOMEM, "%.0f MB available (cgroup limit and MemAvailable) "
                          "cannot hold %.0f MB of dense weights, %.0f MB of KV cache (%lld "
                          "tokens), one layer's top-%d experts (%.0f MB) and %.0f MB of working "
                          "memory: this model needs at least %.0f MB available%s",
                          (double)avail / 1e6, (double)resident / 1e6, (double)kv / 1e6,
                          (long long)eng->default_ctx, m->n_experts_used, (double)topk / 1e6,
                          (double)reserve / 1e6,
                          (double)ms_mem_smallest(resident + kv + topk + span) / 1e6,
                          o->ctx > 0 ? " (lower --ctx)" : "");
    if (avail && o->ram > 0 && (uint64_t)o->ram + kv + resident + reserve > avail)
        return ms_err_set(err, MS_E_NOMEM, "--ram %.2f GB for the expert cache, with %.2f GB of "
                          "dense weights and %.2f GB of KV cache, is more than the %.2f GB "
                          "available (cgroup limit and MemAvailable): lower --ram",
                          (double)o->ram / 1e9, (double)resident / 1e9, (double)kv / 1e9,
                          (double)avail / 1e9);
    if (m->experts && !ms_expert_total_bytes(m->experts)) {
        ms_expert_store_close(m->experts); /* a pipeline stage of dense layers only */
        m->experts = NULL;
    }
    if (!m->experts)
        return 0;
    uint64_t experts = ms_expert_total_bytes(m->experts);
    double huge_share = 0; /* page-cache placement: the weights mapped in huge pages */
    ms_expert_opts eo = {.policy = MS_EXPERTS_PAGECACHE, .io_threads = o->io_threads,
                         .buffered = o->buffered, .log = eng->log};
    if (p.place == MS_PLACE_CACHE) {
        eo.policy = MS_EXPERTS_CACHE;
        eo.budget = p.budget;
        eo.slots = o->cache_slots;
        eo.read_depth = o->reads;
        eo.usage_file = o->expert_usage_file;
        pin_dense(eng);
    } else {
        huge_share = populate_weights(eng);
    }
    if (ms_expert_store_start(m->experts, eng->ck, &eo, err))
        return ms_err_wrap(err, "placing experts");
    m->prefetch = !o->no_prefetch;
    m->prefetch_early = o->prefetch_early;
    char huge[64] = "";
    if (p.place != MS_PLACE_CACHE)
        snprintf(huge, sizeof huge, ", %.0f%% mapped in huge pages", 100 * huge_share);
    char pinned[64] = "";
    if (eng->pinned_bytes)
        snprintf(pinned, sizeof pinned, " (%.2f GB pinned, in whole 2 MiB regions)",
                 (double)eng->pinned_bytes / 1e9);
    ms_logf(&eng->log, "experts %.2f GB, dense %.2f GB%s, %.1f GB available: %s%s",
            (double)experts / 1e9, (double)eng->dense_bytes / 1e9, pinned, (double)avail / 1e9,
            ms_expert_store_describe(m->experts), huge);
    if (o->trace_path) {
        eng->trace = fopen(o->trace_path, "w");
        if (!eng->trace)
            return ms_err_set(err, MS_E_IO, "%s: cannot write the trace: %s", o->trace_path,
                              strerror(errno));
        ms_expert_store_trace(m->experts, eng->trace);
    }
    return 0;
}

int ms_engine_open(const char *model_dir, const ms_engine_opts *opts, ms_engine **out,
                   ms_error *err)
{
    static const ms_engine_opts defaults = {0};
    opts = opts ? opts : &defaults;
    *out = NULL;
    ms_engine *eng = ms_calloc(1, sizeof *eng, "engine", err);
    if (!eng)
        return -1;
    if (opts->n_threads > MS_POOL_MAX_THREADS) {
        free(eng);
        return ms_err_set(err, MS_E_ARG, "%d compute threads asked, at most %d are supported",
                          opts->n_threads, MS_POOL_MAX_THREADS);
    }
    if (opts->n_threads > 0 && ms_pool_set_threads(opts->n_threads)) {
        free(eng);
        return ms_err_set(err, MS_E_NOMEM, "could start only %d of %d compute threads",
                          ms_pool_threads(), opts->n_threads);
    }
    eng->n_threads = ms_pool_threads();
    if (opts->link) {
        if (!opts->link->send || !opts->link->recv || opts->link->in_flight < 1) {
            free(eng);
            return ms_err_set(err, MS_E_ARG, "a stage link needs send, recv and in_flight >= 1");
        }
        eng->link = *opts->link;
    }
    if (!opts->quiet) {
        eng->log = (ms_logger){opts->log, opts->log_user};
        eng->progress = opts->progress;
        eng->progress_user = opts->progress_user;
    }
    if (ms_kernels_set_precision(opts->precision)) {
        free(eng);
        if (opts->precision == MS_PRECISION_INT8)
            return ms_err_set(err, MS_E_UNSUPPORTED, "precision int8 needs AVX2 (or AVX-512 "
                              "with AVX512-VNNI), which this CPU lacks (its kernels: %s); use "
                              "the default exact precision", ms_kernels_exact()->name);
        if (opts->precision == MS_PRECISION_FAST)
            return ms_err_set(err, MS_E_UNSUPPORTED, "precision fast needs AVX-512 with "
                              "AVX512-BF16, which this CPU lacks (its kernels: %s); use the "
                              "default exact precision", ms_kernels_exact()->name);
        return ms_err_set(err, MS_E_ARG, "unknown precision %d", opts->precision);
    }
    if (ms_chat_template_open(model_dir, opts->chat_template_file, NULL, &eng->chat_template,
                              err) ||
        ms_ckpt_open(model_dir, &eng->ck, err) ||
        !(eng->family = ms_family_find(eng->ck, err)) || load_model(eng, opts, err) ||
        ms_engine_read_special_ids(eng, err)) {
        ms_engine_close(eng);
        return -1;
    }
    eng->info.family = eng->family->model_type;
    eng->info.vocab_size = (int32_t)eng->model->vocab;
    eng->info.max_ctx = eng->model->max_ctx;
    if (opts->kv_format < 0 || opts->kv_format > MS_KVCACHE_FP8) {
        ms_engine_close(eng);
        return ms_err_set(err, MS_E_ARG, "KV cache format %d is not one of enum ms_kv_format",
                          opts->kv_format);
    }
    plan_pinning(eng);
    choose_context(eng, opts);
    eng->info.ctx = eng->default_ctx;
    eng->info.kv_format = ms_kvfmt_name(eng->kv_fmt);
    if (place_experts(eng, opts, err)) {
        ms_engine_close(eng);
        return -1;
    }
    eng->info.prefill_span = eng->model->max_span;
    eng->info.pass_rows = eng->model->max_batch < eng->model->max_span ? eng->model->max_batch
                                                                        : eng->model->max_span;
    *out = eng;
    return 0;
}

void ms_engine_close(ms_engine *eng)
{
    if (!eng)
        return;
    if (eng->model)
        eng->family->close(eng->model);
    if (eng->trace)
        fclose(eng->trace);
    ms_ckpt_close(eng->ck); /* unmapping also releases the pinned pages */
    ms_chat_template_close(eng->chat_template);
    free(eng->dense);
    free(eng);
}

const ms_model_info *ms_engine_info(const ms_engine *eng)
{
    return &eng->info;
}

int ms_engine_expert_info(const ms_engine *eng, ms_expert_info *out)
{
    const ms_model *m = eng->model;
    memset(out, 0, sizeof *out);
    out->dense_bytes = eng->dense_bytes;
    if (!m->experts)
        return -1;
    out->n_layers = m->n_layers;
    out->n_experts = m->n_experts;
    out->n_used = m->n_experts_used;
    out->expert_bytes = ms_expert_bytes_typical(m->experts);
    out->slot_bytes = ms_expert_store_slot_bytes(m->experts);
    out->slots = ms_expert_store_slots(m->experts);
    return 0;
}

int ms_engine_disk_probe(const ms_engine *eng, int n, int depth, double *bytes_per_s,
                         ms_error *err)
{
    if (!eng->model->experts)
        return ms_err_set(err, MS_E_ARG, "disk probe: the model has no routed experts");
    return ms_expert_store_probe(eng->model->experts, eng->ck, n, depth, bytes_per_s, err);
}

const char *ms_engine_placement(const ms_engine *eng)
{
    return eng->model->experts ? ms_expert_store_describe(eng->model->experts) : "dense model";
}

int ms_engine_threads(const ms_engine *eng)
{
    return eng->n_threads;
}

void ms_engine_stats(const ms_engine *eng, ms_stats *out)
{
    memset(out, 0, sizeof *out);
    const ms_expert_store *st = eng->model->experts;
    if (!st)
        return;
    ms_expert_stats e;
    ms_expert_store_stats(st, &e);
    out->expert_requests = e.requests;
    out->expert_hits = e.hits;
    out->expert_prefetch_hits = e.prefetch_hits;
    out->expert_misses = e.misses;
    out->bytes_read = e.bytes_read;
    out->prefetch_bytes = e.prefetch_bytes;
    out->prefetch_predicted = e.prefetch_predicted;
    out->prefetch_correct = e.prefetch_correct;
    out->prefetch_issued = e.prefetch_issued;
    out->prefetch_wasted_bytes = e.prefetch_wasted_bytes;
    out->t_io_wait = e.t_wait;
}

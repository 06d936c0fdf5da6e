/* The engine-cache policy: whole experts in slots of an engine-owned arena
 * within a byte budget, each slot filled by large aligned reads (O_DIRECT
 * where the filesystem allows it) submitted together at queue depth > 1
 * (io_uring, or a pread pool). Eviction: evict.h's score, seen from the
 * layer being run. */
#include "weights/experts_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/sysmem.h"
#include "weights/evict.h"
#include "weights/usage_file.h"

enum { SLOT_EMPTY = 0, SLOT_LOADING, SLOT_READY, SLOT_FAILED };

typedef struct slot {
    int32_t layer, expert;          /* key; -1 when empty */
    int state, refs, pending;
    int prefetched;                 /* brought by prefetch for its layer's next visit, unused */
    int warmed;                     /* read at start for its past use (usage file), unused */
    int by_prefetch;                /* the current load was started by prefetch */
    uint64_t batch_gen;             /* == gen: the current batch needs it */
    uint64_t last_use;
    uint8_t *buf;
    ms_mat mat[MS_EXPERT_MAX_MATS];
    ms_io_req req[MS_EXPERT_MAX_SEGS];
    ms_expert_seg seg[MS_EXPERT_MAX_SEGS];
    int n_seg;
    char err[512];
} slot;

typedef struct batch_entry {
    int32_t slot;
    int state;                      /* 0 waiting for a slot, 1 attached, 2 delivered */
} batch_entry;

typedef struct cache {
    int *fd;                        /* per shard: the fd reads use */
    int *direct;                    /* per shard: fd is O_DIRECT */
    int *dfd;                       /* per shard: the O_DIRECT fd to close, or -1 */
    ms_io *io;
    slot *slots;
    uint8_t *arena;
    int32_t *slot_of;               /* [n_layers * n_experts] -> slot or -1 */
    uint64_t clock, gen;
    int read_depth;                 /* experts of a batch in flight at once */
    ms_usage usage;                 /* routing statistics for eviction */
    batch_entry *b;                 /* [n_experts]: the current batch, by position */
    int registered;                 /* slots are the backend's fixed buffers */
    char *usage_path;               /* the usage file written at close, or NULL */
} cache;

static int32_t *slot_ref(ms_expert_store *st, int layer, int e)
{
    cache *c = st->impl;
    return &c->slot_of[(size_t)layer * (size_t)st->n_experts + (size_t)e];
}

/* An empty slot, else among those nobody holds, not loading and not needed
 * by the current batch, the one expected to be needed furthest in the future
 * (evict.h), seen from layer `cur`; -1 if none. */
static int victim(ms_expert_store *st, int cur)
{
    cache *c = st->impl;
    int best = -1;
    double best_score = 0;
    for (int i = 0; i < st->n_slots; i++) {
        slot *s = &c->slots[i];
        if (s->state == SLOT_EMPTY)
            return i;
        if (s->refs || s->state == SLOT_LOADING || s->batch_gen == c->gen)
            continue;
        /* a prefetched expert not yet used is predicted for its layer's next
         * visit: value it by that distance alone, not by its past frequency */
        double sc = s->prefetched ? ms_usage_distance(&c->usage, s->layer, cur)
                                  : ms_usage_score(&c->usage, s->layer, s->expert, cur);
        if (best < 0 || sc > best_score ||
            (sc == best_score && s->last_use < c->slots[best].last_use)) {
            best = i;
            best_score = sc;
        }
    }
    return best;
}

static void evict(ms_expert_store *st, int i)
{
    cache *c = st->impl;
    slot *s = &c->slots[i];
    if (s->layer >= 0) {
        *slot_ref(st, s->layer, s->expert) = -1;
        if (s->prefetched || s->warmed) /* evicted before anyone asked for it */
            st->st.prefetch_wasted_bytes += (int64_t)ms_expert_bytes(st, s->layer, s->expert);
    }
    s->layer = s->expert = -1;
    s->state = SLOT_EMPTY;
    s->prefetched = s->warmed = 0;
}

/* Points a slot's views at the bytes of expert (layer, e) in its buffer. */
static void rebase_views(ms_expert_store *st, slot *s, int layer, int e)
{
    size_t i = ms_expert_idx(st, layer, e);
    const ms_span *sp = &st->spans[2 * i];
    for (int m = 0; m < st->n_mats; m++) {
        s->mat[m] = st->mats[i + (size_t)m];
        for (int k = 0; k < 2; k++) {
            const ms_span *x = &sp[2 * m + k];
            if (x->file < 0)
                continue;
            for (int g = 0; g < s->n_seg; g++) {
                const ms_expert_seg *q = &s->seg[g];
                if (q->file == x->file && x->offset >= q->off &&
                    x->offset + x->nbytes <= q->off + q->need) {
                    const void *p = s->buf + q->dst + (x->offset - q->off);
                    if (k == 0)
                        s->mat[m].w = p;
                    else
                        s->mat[m].scale = p;
                }
            }
        }
    }
}

/* Submits the reads that fill slot i with expert (layer, e). */
static int load(ms_expert_store *st, int i, int layer, int e, int by_prefetch, ms_err *err)
{
    cache *c = st->impl;
    slot *s = &c->slots[i];
    evict(st, i);
    ms_expert_plan(st, layer, e, s->seg, &s->n_seg);
    s->layer = layer;
    s->expert = e;
    s->state = SLOT_LOADING;
    s->pending = s->n_seg;
    s->by_prefetch = by_prefetch;
    s->err[0] = 0;
    *slot_ref(st, layer, e) = i;
    rebase_views(st, s, layer, e);
    for (int g = 0; g < s->n_seg; g++) {
        ms_io_req *r = &s->req[g];
        *r = (ms_io_req){c->fd[s->seg[g].file], s->seg[g].off, s->seg[g].len,
                         s->buf + s->seg[g].dst, 0, s, !by_prefetch};
        if (ms_io_submit(c->io, r, err))
            return -1;
    }
    return 0;
}

/* Names the tensor a failed segment was reading, for the error sentence. */
static void describe_failure(ms_expert_store *st, slot *s, const ms_expert_seg *q,
                             const char *why)
{
    const ms_span *sp = &st->spans[2 * ms_expert_idx(st, s->layer, s->expert)];
    const ms_span *hit = NULL;
    for (int k = 0; k < 2 * st->n_mats && !hit; k++)
        if (sp[k].file == q->file && sp[k].offset + sp[k].nbytes > q->off &&
            sp[k].offset < q->off + q->need)
            hit = &sp[k];
    snprintf(s->err, sizeof s->err,
             "%s: reading %s (expert %d of layer %d, tensor bytes %llu..%llu at file offset "
             "%llu) failed: %s",
             st->ck->files[q->file].path, hit ? hit->tensor : "?", s->expert, s->layer,
             hit ? (unsigned long long)(hit->offset - hit->tensor_off) : 0ull,
             hit ? (unsigned long long)(hit->offset - hit->tensor_off + hit->nbytes) : 0ull,
             (unsigned long long)q->off, why);
}

/* Handles one completed read: resubmits the rest of a short read, turns an
 * O_DIRECT refusal into a buffered retry (said once), marks failures. */
static int complete(ms_expert_store *st, ms_io_req *r, ms_err *err)
{
    cache *c = st->impl;
    slot *s = r->user;
    int g = (int)(r - s->req);
    ms_expert_seg *q = &s->seg[g];
    uint64_t got = r->off - q->off; /* bytes of this segment read before this request */
    if (r->res == -EINVAL && c->direct[q->file]) {
        ms_logf(&st->log, "O_DIRECT read refused on %s: switching it to buffered reads",
                st->ck->files[q->file].path);
        c->direct[q->file] = 0; /* the O_DIRECT fd stays open for reads in flight */
        c->fd[q->file] = st->ck->files[q->file].fd;
        r->fd = c->fd[q->file];
        return ms_io_submit(c->io, r, err);
    }
    if (r->res > 0) {
        st->st.bytes_read += r->res;
        if (s->by_prefetch)
            st->st.prefetch_bytes += r->res;
        got += (uint64_t)r->res;
        if (got < q->need && (uint64_t)r->res < r->len) {
            r->off += (uint64_t)r->res; /* short read: ask for the rest */
            r->buf = (char *)r->buf + r->res;
            r->len -= (uint64_t)r->res;
            return ms_io_submit(c->io, r, err);
        }
    }
    if (got < q->need && !s->err[0]) {
        char why[160];
        if (r->res < 0)
            snprintf(why, sizeof why, "%s", strerror((int)-r->res));
        else
            snprintf(why, sizeof why, "file ends after %llu of %llu bytes (truncated shard?)",
                     (unsigned long long)got, (unsigned long long)q->need);
        describe_failure(st, s, q, why);
    }
    if (--s->pending == 0)
        s->state = s->err[0] ? SLOT_FAILED : SLOT_READY;
    return 0;
}

/* Reaps completions; blocks for at least one when `block`. */
static int reap(ms_expert_store *st, int block, ms_err *err)
{
    cache *c = st->impl;
    ms_io_req *done[64];
    double t0 = block ? ms_now() : 0;
    int n = ms_io_wait(c->io, done, 64, block, err);
    if (block)
        st->st.t_wait += ms_now() - t0;
    if (n < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (complete(st, done[i], err))
            return -1;
    return n;
}

/* Starts loading the batch's missing experts, keeping at most read_depth of
 * its experts in flight: the disk reaches its bandwidth with one or two
 * whole experts queued, and experts that arrive one after the other let
 * the compute of the first overlap the reads of the next (all at once, they
 * share the disk and all arrive at the end). Returns the number still
 * waiting for a slot, or -1. */
static int start_misses(ms_expert_store *st, ms_err *err)
{
    cache *c = st->impl;
    int loading = 0, waiting = 0;
    for (int i = 0; i < st->b_n; i++)
        loading += c->b[i].state == 1 && c->slots[c->b[i].slot].state == SLOT_LOADING;
    for (int i = 0; i < st->b_n; i++) {
        batch_entry *b = &c->b[i];
        if (b->state != 0)
            continue;
        int v = loading < c->read_depth ? victim(st, st->b_layer) : -1;
        if (v < 0) {
            waiting++;
            continue;
        }
        if (load(st, v, st->b_layer, st->b_ids[i], 0, err))
            return -1;
        c->slots[v].batch_gen = c->gen;
        b->slot = v;
        b->state = 1;
        loading++;
    }
    return waiting;
}

static int cache_begin(ms_expert_store *st, ms_err *err)
{
    cache *c = st->impl;
    int layer = st->b_layer, n = st->b_n;
    const int32_t *ids = st->b_ids;
    c->gen++;
    for (int i = 0; i < n; i++)
        c->b[i] = (batch_entry){-1, 0};
    /* slots prefetched for this visit that it does not ask for were mispredicted:
     * from now on they are ordinary cached experts (their bytes were wasted) */
    for (int k = 0; k < st->n_slots; k++) {
        slot *s = &c->slots[k];
        if (s->prefetched && s->layer == layer) {
            int wanted = 0;
            for (int i = 0; i < n && !wanted; i++)
                wanted = ids[i] == s->expert;
            if (!wanted) { /* counted whole: its reads may still be in flight */
                s->prefetched = 0;
                st->st.prefetch_wasted_bytes += (int64_t)ms_expert_bytes(st, layer, s->expert);
            }
        }
    }
    ms_usage_visit(&c->usage, layer, ids, n);
    /* attach what is cached (or already loading) and keep it from eviction */
    for (int i = 0; i < n; i++) {
        int32_t k = *slot_ref(st, layer, ids[i]);
        if (k >= 0 && c->slots[k].state == SLOT_FAILED) {
            evict(st, k); /* retry a failed load rather than repeat its error */
            k = -1;
        }
        if (k < 0) {
            st->st.misses++;
            continue;
        }
        slot *s = &c->slots[k];
        c->b[i].slot = k;
        c->b[i].state = 1;
        s->batch_gen = c->gen;
        if (s->prefetched || s->warmed) { /* a read was issued for it before it was asked */
            st->st.prefetch_hits++;
            s->prefetched = s->warmed = 0;
        } else {
            st->st.hits++;
        }
    }
    return start_misses(st, err) < 0 ? -1 : 0;
}

static void fill_lease(ms_expert_store *st, int i, ms_expert_lease *out)
{
    cache *c = st->impl;
    batch_entry *b = &c->b[i];
    slot *s = &c->slots[b->slot];
    b->state = 2;
    st->b_done++;
    out->layer = st->b_layer;
    out->expert = st->b_ids[i];
    out->slot = b->slot;
    s->refs++;
    s->last_use = ++c->clock;
    out->mat = s->mat;
}

static int cache_next(ms_expert_store *st, ms_expert_lease *out, ms_err *err)
{
    cache *c = st->impl;
    for (;;) {
        if (reap(st, 0, err) < 0)
            return -1;
        for (int i = 0; i < st->b_n; i++) {
            batch_entry *b = &c->b[i];
            if (b->state != 1)
                continue;
            slot *s = &c->slots[b->slot];
            if (s->state == SLOT_FAILED)
                return ms_err_set(err, MS_E_IO, "%s", s->err);
            if (s->state == SLOT_READY) {
                if (start_misses(st, err) < 0) /* keep the disk busy while this computes */
                    return -1;
                fill_lease(st, i, out);
                return 1;
            }
        }
        int waiting = start_misses(st, err);
        if (waiting < 0)
            return -1;
        if (c->io->inflight == 0 && waiting)
            return ms_err_set(err, MS_E_ARG, "expert cache of %d slots cannot hold the experts "
                              "this batch needs at once", st->n_slots);
        if (reap(st, 1, err) < 0)
            return -1;
    }
}

static void cache_put(ms_expert_store *st, ms_expert_lease *lease)
{
    cache *c = st->impl;
    if (lease->slot < 0)
        return;
    slot *s = &c->slots[lease->slot];
    s->refs--;
    s->batch_gen = 0; /* delivered: evictable again */
}

static void cache_prefetch(ms_expert_store *st, int layer, const int32_t *ids, int n)
{
    cache *c = st->impl;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= st->n_experts || *slot_ref(st, layer, ids[i]) >= 0)
            continue;
        /* seen from the layer before: `layer` is the next one to run */
        int v = victim(st, (layer + st->n_layers - 1) % st->n_layers);
        if (v < 0 || load(st, v, layer, ids[i], 1, NULL))
            return;
        c->slots[v].prefetched = 1;
        st->st.prefetch_issued++;
    }
}

/* Writes the routing counts for the next start, when this run saw any. */
static void save_usage(ms_expert_store *st)
{
    cache *c = st->impl;
    ms_err e = {0};
    if (c->usage_path && c->usage.batches &&
        ms_usage_save(&c->usage, c->usage_path, ms_expert_total_bytes(st), &e))
        ms_logf(&st->log, "%s; the next start learns the expert usage again", e.msg);
}

static void cache_close(ms_expert_store *st)
{
    cache *c = st->impl;
    if (!c)
        return;
    save_usage(st);
    free(c->usage_path);
    ms_io_close(c->io); /* drains reads still writing into slots */
    if (c->arena)
        munmap(c->arena, (size_t)st->n_slots * st->slot_bytes);
    if (c->dfd && st->ck)
        for (int f = 0; f < st->ck->n_files; f++)
            if (c->dfd[f] >= 0)
                close(c->dfd[f]);
    free(c->dfd);
    free(c->fd);
    free(c->direct);
    free(c->slots);
    free(c->slot_of);
    free(c->b);
    ms_usage_free(&c->usage);
    free(c);
    st->impl = NULL;
}

static const ms_expert_policy_ops cache_ops = {
    .begin = cache_begin, .next = cache_next, .put = cache_put, .prefetch = cache_prefetch,
    .close = cache_close, .holds_all = 0,
};

/* A second descriptor per shard for slot reads: O_DIRECT where the
 * filesystem accepts it (no page-cache copy, no contention with the
 * cache), else the buffered one, said once. */
static int open_fds(ms_expert_store *st, int buffered)
{
    cache *c = st->impl;
    int nf = st->ck->n_files, said = 0;
    c->fd = calloc((size_t)nf, sizeof *c->fd);
    c->direct = calloc((size_t)nf, sizeof *c->direct);
    c->dfd = calloc((size_t)nf, sizeof *c->dfd);
    if (!c->fd || !c->direct || !c->dfd) {
        free(c->dfd);
        c->dfd = NULL; /* nothing to close */
        return -1;
    }
    for (int f = 0; f < nf; f++) {
        c->fd[f] = buffered ? -1 : open(st->ck->files[f].path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        c->direct[f] = c->fd[f] >= 0;
        c->dfd[f] = c->fd[f];
        if (c->fd[f] < 0) {
            if (!buffered && !said++)
                ms_logf(&st->log, "O_DIRECT refused for %s (%s): expert reads go through the "
                        "page cache", st->ck->files[f].path, strerror(errno));
            c->fd[f] = st->ck->files[f].fd;
        }
    }
    return 0;
}

static int open_backend(ms_expert_store *st, const ms_expert_opts *o, ms_err *err)
{
    cache *c = st->impl;
    if (o->io) {
        c->io = o->io;
        return 0;
    }
    if (o->io_threads > 0)
        return ms_io_open_threads(o->io_threads, &c->io, err);
    ms_err e2;
    /* 3 reads of 4 MB in flight, in order: an expert's bytes arrive before the
     * next one's, so it computes while the next reads (docs/perf.md, "Where
     * the disk idles"); demand reads go ahead of prefetches */
    if (ms_io_open_uring(o->io_depth > 0 ? o->io_depth : MS_EXPERT_READ_WINDOW,
                         MS_EXPERT_READ_PIECE, &c->io, &e2) == 0)
        return 0;
    ms_logf(&st->log, "%s; reading experts with 4 pread threads instead", e2.msg);
    return ms_io_open_threads(4, &c->io, err);
}

/* Registers the slots with the backend (io_uring fixed buffers): the kernel
 * pins them once, here, instead of walking a slot's 3,000-odd pages at
 * every read (15% of a streaming decode's CPU time went to submitting
 * reads, most of it that walk; docs/perf.md). Not fatal: where it is
 * refused (a locked-memory limit) reads go unregistered, said once.
 * Registering maps the arena's pages in, the kernel zeroing each, all on
 * this thread: they are mapped in first on every compute thread
 * (ms_populate; docs/perf.md, "Starting under a memory limit"). */
static void register_slots(ms_expert_store *st)
{
    cache *c = st->impl;
    if (st->n_slots > 16384 /* io_uring's most buffers */ || !c->io->v->register_bufs)
        return;
    if (ms_populate(c->arena, (size_t)st->n_slots * st->slot_bytes))
        ms_logf(&st->log, "cannot map the expert cache's memory in ahead (madvise: %s); "
                "registering it does so on one thread", strerror(errno));
    void **bufs = malloc(sizeof *bufs * (size_t)st->n_slots);
    size_t *lens = malloc(sizeof *lens * (size_t)st->n_slots);
    ms_err e = {0};
    if (bufs && lens) {
        for (int i = 0; i < st->n_slots; i++) {
            bufs[i] = c->slots[i].buf;
            lens[i] = st->slot_bytes;
        }
        int rc = ms_io_register(c->io, bufs, lens, st->n_slots, &e);
        if (rc < 0)
            ms_logf(&st->log, "%s; expert reads pin their pages at every read instead", e.msg);
        c->registered = rc == 0;
    }
    free(bufs);
    free(lens);
}

/* The usage file's hot experts (ms_usage_hot), read into at most half of
 * the slots before anyone asks (the rest stays for what the prompt asks);
 * a router that spreads its picks evenly has none, and nothing is read. */
static void warm(ms_expert_store *st, const char *path)
{
    cache *c = st->impl;
    ms_usage_pick *h = malloc(sizeof *h * (size_t)st->n_layers * (size_t)st->n_experts);
    if (!h)
        return;
    int n = ms_usage_hot(&c->usage, h), loaded = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < n && loaded < st->n_slots / 2; i++) {
        int v = victim(st, h[i].layer);
        if (v < 0 || load(st, v, h[i].layer, h[i].expert, 1, NULL))
            break;
        c->slots[v].warmed = 1;
        st->st.prefetch_issued++;
        bytes += ms_expert_bytes(st, h[i].layer, h[i].expert);
        loaded++;
    }
    free(h);
    ms_logf(&st->log, "expert usage from %s: %d of %d experts used at least %dx their layer's "
            "average, %d (%.1f MB) read into the cache ahead", path, n,
            st->n_layers * st->n_experts, MS_USAGE_HOT_RATIO, loaded, (double)bytes / 1e6);
}

/* Reads the usage file's hot experts and seeds the eviction counts with
 * it; a file that cannot be used is said and left to be rewritten at
 * close. */
static void start_usage(ms_expert_store *st, const char *path)
{
    cache *c = st->impl;
    c->usage_path = strdup(path);
    ms_err e = {0};
    int got = ms_usage_load(&c->usage, path, ms_expert_total_bytes(st), &e);
    if (got < 0)
        ms_logf(&st->log, "%s; starting without it (it is rewritten at close)", e.msg);
    else if (got > 0) {
        warm(st, path);
        ms_usage_as_prior(&c->usage);
    }
}

int ms_expert_cache_start(ms_expert_store *st, const ms_expert_opts *o, ms_err *err)
{
    uint64_t slot_bytes = ms_expert_slot_size(st);
    if (!slot_bytes)
        return ms_err_set(err, MS_E_ARG, "expert store: no expert bytes registered");
    uint64_t max_slots = (uint64_t)st->n_layers * (uint64_t)st->n_experts;
    uint64_t n = o->slots > 0 ? (uint64_t)o->slots : o->budget / slot_bytes;
    if (n < 1)
        return ms_err_set(err, MS_E_ARG, "expert cache budget of %.1f MB is below one expert "
                          "(%.1f MB)", (double)o->budget / 1e6, (double)slot_bytes / 1e6);
    cache *c = ms_calloc(1, sizeof *c, "expert cache", err);
    if (!c)
        return -1;
    st->impl = c;
    st->ops = &cache_ops;
    st->policy = MS_EXPERTS_CACHE;
    st->slot_bytes = slot_bytes;
    st->n_slots = (int)(n < max_slots ? n : max_slots);
    c->read_depth = o->read_depth > 0 ? o->read_depth : 2;
    size_t bytes = (size_t)st->n_slots * st->slot_bytes;
    c->arena = ms_map_huge(bytes);
    if (!c->arena)
        return ms_err_set(err, MS_E_NOMEM, "cannot reserve %.1f MB for the expert cache",
                          (double)bytes / 1e6);
    c->slots = ms_calloc((size_t)st->n_slots, sizeof *c->slots, "expert slots", err);
    c->slot_of = ms_malloc(sizeof *c->slot_of * max_slots, "expert index", err);
    c->b = ms_calloc((size_t)st->n_experts, sizeof *c->b, "expert batch", err);
    if (!c->slots || !c->slot_of || !c->b ||
        ms_usage_init(&c->usage, st->n_layers, st->n_experts) || open_fds(st, o->buffered) ||
        open_backend(st, o, err))
        return ms_err_set(err, MS_E_NOMEM, "cannot set up the expert cache");
    for (uint64_t i = 0; i < max_slots; i++)
        c->slot_of[i] = -1;
    for (int i = 0; i < st->n_slots; i++) {
        c->slots[i].layer = c->slots[i].expert = -1;
        c->slots[i].buf = c->arena + (size_t)i * st->slot_bytes;
    }
    register_slots(st);
    if (o->usage_file && *o->usage_file)
        start_usage(st, o->usage_file);
    int direct = 0;
    for (int f = 0; f < st->ck->n_files; f++)
        direct += c->direct[f];
    /* registered slots are all in memory now; others fill as they are read */
    int64_t huge = c->registered ? ms_huge_bytes(c->arena, bytes) : -1;
    char hp[64] = "";
    if (huge >= 0)
        snprintf(hp, sizeof hp, ", %.0f%% in huge pages", 100.0 * (double)huge / (double)bytes);
    snprintf(st->desc, sizeof st->desc,
             "engine cache %.2f GB: %d slots of %.2f MB%s, %s reads via %s%s",
             (double)bytes / 1e9, st->n_slots, (double)st->slot_bytes / 1e6, hp,
             direct == st->ck->n_files ? "O_DIRECT" : direct ? "partly O_DIRECT" : "buffered",
             c->io->v->name, c->registered ? " (registered buffers)" : "");
    return 0;
}

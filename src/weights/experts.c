/* Expert store: registration, the page-cache policy (views into the mapping)
 * and the engine-owned cache (slots filled by aligned asynchronous reads). */
#include "weights/experts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/clock.h"
#include "weights/evict.h"

#define ALIGN 4096u
#define COALESCE_GAP (64u << 10)  /* read through gaps this small: one request beats two */
#define MAX_SEGS (2 * MS_EXPERT_MAX_MATS)

enum { SLOT_EMPTY = 0, SLOT_LOADING, SLOT_READY, SLOT_FAILED };

/* One aligned read into a slot, covering one or more spans. */
typedef struct seg {
    int file;
    uint64_t off, len;    /* aligned request */
    uint64_t need;        /* bytes from off that must arrive (the rest is padding) */
    uint64_t dst;         /* offset in the slot buffer */
} seg;

typedef struct slot {
    int32_t layer, expert;          /* key; -1 when empty */
    int state, refs, pending, prefetched;
    uint64_t batch_gen;             /* == store's gen: the current batch needs it */
    uint64_t last_use;
    uint8_t *buf;
    ms_mat mat[MS_EXPERT_MAX_MATS];
    ms_io_req req[MAX_SEGS];
    seg seg[MAX_SEGS];
    int n_seg;
    int64_t bytes;                  /* bytes read for this load */
    char err[512];
} slot;

typedef struct batch_entry {
    int32_t expert, slot;
    int state;                      /* 0 waiting for a slot, 1 attached, 2 delivered */
} batch_entry;

struct ms_expert_store {
    int n_layers, n_experts, n_mats;
    ms_mat *mats;                   /* [n_layers][n_experts][n_mats] registered views */
    ms_span *spans;                 /* [n_layers][n_experts][n_mats][2] */
    ms_expert_policy policy;
    const ms_checkpoint *ck;
    /* cache policy */
    int *fd;                        /* per shard: the fd reads use */
    int *direct;                    /* per shard: fd is O_DIRECT */
    int *dfd;                       /* per shard: the O_DIRECT fd to close, or -1 */
    ms_io *io;
    slot *slots;
    int n_slots;
    uint64_t slot_bytes, budget;
    uint8_t *arena;
    int32_t *slot_of;               /* [n_layers * n_experts] -> slot or -1 */
    uint64_t clock, gen;
    int read_depth;                 /* experts of a batch in flight at once */
    ms_usage usage;                 /* routing statistics for eviction */
    /* the current batch */
    int b_layer, b_n, b_done;
    batch_entry *b;
    ms_expert_stats st;
    int pred_layer;                 /* the layer predictions were made for, or -1 */
    uint8_t *pred;                  /* [n_experts]: predicted for pred_layer */
    FILE *trace;
    char desc[256];
    ms_mat page_views[MS_EXPERT_MAX_MATS];
};

static size_t idx(const ms_expert_store *st, int layer, int e)
{
    return ((size_t)layer * (size_t)st->n_experts + (size_t)e) * (size_t)st->n_mats;
}

int ms_expert_store_open(int n_layers, int n_experts, int n_mats, ms_expert_store **out,
                         ms_err *err)
{
    *out = NULL;
    if (n_mats < 1 || n_mats > MS_EXPERT_MAX_MATS || n_layers < 1 || n_experts < 1)
        return ms_err_set(err, MS_E_ARG, "expert store: %d layers x %d experts x %d matrices",
                          n_layers, n_experts, n_mats);
    ms_expert_store *st = ms_calloc(1, sizeof *st, "expert store", err);
    if (!st)
        return -1;
    size_t n = (size_t)n_layers * (size_t)n_experts * (size_t)n_mats;
    st->n_layers = n_layers;
    st->n_experts = n_experts;
    st->n_mats = n_mats;
    st->mats = ms_calloc(n, sizeof *st->mats, "expert views", err);
    st->spans = ms_calloc(2 * n, sizeof *st->spans, "expert spans", err);
    st->b = ms_calloc((size_t)n_experts, sizeof *st->b, "expert batch", err);
    st->pred = ms_calloc((size_t)n_experts, sizeof *st->pred, "expert prediction", err);
    st->pred_layer = -1;
    if (!st->mats || !st->spans || !st->b || !st->pred ||
        ms_usage_init(&st->usage, n_layers, n_experts)) {
        ms_expert_store_close(st);
        return -1;
    }
    for (size_t i = 0; i < 2 * n; i++)
        st->spans[i].file = -1;
    snprintf(st->desc, sizeof st->desc, "page cache (experts used in place from the mapping)");
    *out = st;
    return 0;
}

void ms_expert_store_close(ms_expert_store *st)
{
    if (!st)
        return;
    ms_io_close(st->io); /* drains reads still writing into slots */
    if (st->arena)
        munmap(st->arena, (size_t)st->n_slots * st->slot_bytes);
    if (st->dfd && st->ck)
        for (int f = 0; f < st->ck->n_files; f++)
            if (st->dfd[f] >= 0)
                close(st->dfd[f]);
    free(st->dfd);
    free(st->fd);
    free(st->direct);
    free(st->slots);
    free(st->slot_of);
    free(st->b);
    free(st->pred);
    ms_usage_free(&st->usage);
    free(st->mats);
    free(st->spans);
    free(st);
}

void ms_expert_store_set(ms_expert_store *st, int layer, int e, const ms_mat *mats,
                         const ms_span *spans)
{
    size_t i = idx(st, layer, e);
    memcpy(&st->mats[i], mats, sizeof *mats * (size_t)st->n_mats);
    memcpy(&st->spans[2 * i], spans, sizeof *spans * 2 * (size_t)st->n_mats);
}

uint64_t ms_expert_bytes(const ms_expert_store *st, int layer, int e)
{
    size_t i = idx(st, layer, e);
    uint64_t n = 0;
    for (int k = 0; k < 2 * st->n_mats; k++)
        if (st->spans[2 * i + (size_t)k].file >= 0)
            n += st->spans[2 * i + (size_t)k].nbytes;
    return n;
}

uint64_t ms_expert_bytes_typical(const ms_expert_store *st)
{
    for (int l = 0; l < st->n_layers; l++) {
        uint64_t b = ms_expert_bytes(st, l, 0);
        if (b)
            return b;
    }
    return 0;
}

uint64_t ms_expert_total_bytes(const ms_expert_store *st)
{
    uint64_t n = 0;
    for (int l = 0; l < st->n_layers; l++)
        for (int e = 0; e < st->n_experts; e++)
            n += ms_expert_bytes(st, l, e);
    return n;
}

ms_expert_policy ms_expert_store_policy(const ms_expert_store *st)
{
    return st->policy;
}

const char *ms_expert_store_describe(const ms_expert_store *st)
{
    return st->desc;
}

void ms_expert_store_trace(ms_expert_store *st, FILE *f)
{
    st->trace = f;
    if (f)
        fprintf(f, "# moestream expert trace v1 layers=%d experts=%d slot_bytes=%llu "
                "expert_bytes=%llu slots=%d\n", st->n_layers, st->n_experts,
                (unsigned long long)st->slot_bytes, (unsigned long long)ms_expert_bytes_typical(st),
                st->n_slots);
}

void ms_expert_store_stats(const ms_expert_store *st, ms_expert_stats *out)
{
    *out = st->st;
}

int ms_expert_store_slots(const ms_expert_store *st)
{
    return st->n_slots;
}

uint64_t ms_expert_store_slot_bytes(const ms_expert_store *st)
{
    return st->slot_bytes;
}

/* ---- read plans ------------------------------------------------------------ */

static int cmp_span(const void *a, const void *b)
{
    const ms_span *x = *(const ms_span *const *)a, *y = *(const ms_span *const *)b;
    if (x->file != y->file)
        return x->file - y->file;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Groups an expert's spans into aligned segments laid out back to back in a
 * slot; returns the slot bytes needed. order[] receives the sorted spans. */
static uint64_t plan(const ms_expert_store *st, int layer, int e, seg *segs, int *n_seg)
{
    const ms_span *sp = &st->spans[2 * idx(st, layer, e)], *v[MAX_SEGS];
    int n = 0;
    for (int k = 0; k < 2 * st->n_mats; k++)
        if (sp[k].file >= 0 && sp[k].nbytes)
            v[n++] = &sp[k];
    qsort(v, (size_t)n, sizeof *v, cmp_span);
    uint64_t dst = 0;
    *n_seg = 0;
    for (int i = 0; i < n; i++) {
        uint64_t end = v[i]->offset + v[i]->nbytes;
        seg *s = *n_seg ? &segs[*n_seg - 1] : NULL;
        if (s && s->file == v[i]->file && v[i]->offset <= s->off + s->need + COALESCE_GAP) {
            if (end > s->off + s->need)
                s->need = end - s->off;
        } else {
            if (s) {
                s->len = (s->need + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
                dst = s->dst + s->len;
            }
            s = &segs[(*n_seg)++];
            s->file = v[i]->file;
            s->off = v[i]->offset & ~(uint64_t)(ALIGN - 1);
            s->need = end - s->off;
            s->dst = dst;
        }
    }
    if (*n_seg) {
        seg *s = &segs[*n_seg - 1];
        s->len = (s->need + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
        dst = s->dst + s->len;
    }
    return dst;
}

/* Points a slot's views at the bytes of expert (layer, e) in its buffer. */
static void rebase_views(ms_expert_store *st, slot *s, int layer, int e)
{
    size_t i = idx(st, layer, e);
    const ms_span *sp = &st->spans[2 * i];
    for (int m = 0; m < st->n_mats; m++) {
        s->mat[m] = st->mats[i + (size_t)m];
        for (int k = 0; k < 2; k++) {
            const ms_span *x = &sp[2 * m + k];
            if (x->file < 0)
                continue;
            for (int g = 0; g < s->n_seg; g++) {
                const seg *q = &s->seg[g];
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

/* ---- starting the cache policy -------------------------------------------- */

/* A second descriptor per shard for slot reads: O_DIRECT where the
 * filesystem accepts it (no page-cache copy, no contention with the
 * cache), else the buffered one, said once. */
static int open_fds(ms_expert_store *st, int buffered)
{
    int nf = st->ck->n_files, said = 0;
    st->fd = calloc((size_t)nf, sizeof *st->fd);
    st->direct = calloc((size_t)nf, sizeof *st->direct);
    st->dfd = calloc((size_t)nf, sizeof *st->dfd);
    if (!st->fd || !st->direct || !st->dfd)
        return -1;
    for (int f = 0; f < nf; f++) {
        st->fd[f] = buffered ? -1 : open(st->ck->files[f].path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        st->direct[f] = st->fd[f] >= 0;
        st->dfd[f] = st->fd[f];
        if (st->fd[f] < 0) {
            if (!buffered && !said++)
                fprintf(stderr, "moestream: O_DIRECT refused for %s (%s): expert reads go "
                        "through the page cache\n", st->ck->files[f].path, strerror(errno));
            st->fd[f] = st->ck->files[f].fd;
        }
    }
    return 0;
}

static int open_backend(ms_expert_store *st, const ms_expert_opts *o, ms_err *err)
{
    if (o->io) {
        st->io = o->io;
        return 0;
    }
    if (o->io_threads > 0)
        return ms_io_open_threads(o->io_threads, &st->io, err);
    ms_err e2;
    if (ms_io_open_uring(o->io_depth > 0 ? o->io_depth : 64, &st->io, &e2) == 0)
        return 0;
    fprintf(stderr, "moestream: %s; reading experts with 4 pread threads instead\n", e2.msg);
    return ms_io_open_threads(4, &st->io, err);
}

int ms_expert_store_start(ms_expert_store *st, const ms_checkpoint *ck,
                          const ms_expert_opts *o, ms_err *err)
{
    st->ck = ck;
    st->policy = o->policy;
    if (o->policy == MS_EXPERTS_PAGECACHE) {
        if (o->io)
            ms_io_close(o->io);
        return 0;
    }
    seg segs[MAX_SEGS];
    int ns;
    for (int l = 0; l < st->n_layers; l++)
        for (int e = 0; e < st->n_experts; e++) {
            uint64_t b = plan(st, l, e, segs, &ns);
            st->slot_bytes = b > st->slot_bytes ? b : st->slot_bytes;
        }
    if (!st->slot_bytes)
        return ms_err_set(err, MS_E_ARG, "expert store: no expert bytes registered");
    uint64_t max_slots = (uint64_t)st->n_layers * (uint64_t)st->n_experts;
    uint64_t n = o->slots > 0 ? (uint64_t)o->slots : o->budget / st->slot_bytes;
    if (n < 1)
        return ms_err_set(err, MS_E_ARG, "expert cache budget of %.1f MB is below one expert "
                          "(%.1f MB)", (double)o->budget / 1e6, (double)st->slot_bytes / 1e6);
    st->n_slots = (int)(n < max_slots ? n : max_slots);
    st->read_depth = o->read_depth > 0 ? o->read_depth : 2;
    st->budget = o->budget;
    size_t bytes = (size_t)st->n_slots * st->slot_bytes;
    st->arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (st->arena == MAP_FAILED) {
        st->arena = NULL;
        return ms_err_set(err, MS_E_NOMEM, "cannot reserve %.1f MB for the expert cache",
                          (double)bytes / 1e6);
    }
    st->slots = ms_calloc((size_t)st->n_slots, sizeof *st->slots, "expert slots", err);
    st->slot_of = ms_malloc(sizeof *st->slot_of * max_slots, "expert index", err);
    if (!st->slots || !st->slot_of || open_fds(st, o->buffered) || open_backend(st, o, err))
        return ms_err_set(err, MS_E_NOMEM, "cannot set up the expert cache");
    for (uint64_t i = 0; i < max_slots; i++)
        st->slot_of[i] = -1;
    for (int i = 0; i < st->n_slots; i++) {
        st->slots[i].layer = st->slots[i].expert = -1;
        st->slots[i].buf = st->arena + (size_t)i * st->slot_bytes;
    }
    int direct = 0;
    for (int f = 0; f < ck->n_files; f++)
        direct += st->direct[f];
    snprintf(st->desc, sizeof st->desc,
             "engine cache %.2f GB: %d slots of %.2f MB, %s reads via %s",
             (double)bytes / 1e9, st->n_slots, (double)st->slot_bytes / 1e6,
             direct == ck->n_files ? "O_DIRECT" : direct ? "partly O_DIRECT" : "buffered",
             st->io->v->name);
    return 0;
}

/* ---- slot management -------------------------------------------------------- */

static int32_t *slot_ref(ms_expert_store *st, int layer, int e)
{
    return &st->slot_of[(size_t)layer * (size_t)st->n_experts + (size_t)e];
}

/* An empty slot, else among those nobody holds, not loading and not needed
 * by the current batch, the one expected to be needed furthest in the future
 * (evict.h), seen from layer `cur`; -1 if none. */
static int victim(ms_expert_store *st, int cur)
{
    int best = -1;
    double best_score = 0;
    for (int i = 0; i < st->n_slots; i++) {
        slot *s = &st->slots[i];
        if (s->state == SLOT_EMPTY)
            return i;
        if (s->refs || s->state == SLOT_LOADING || s->batch_gen == st->gen)
            continue;
        /* a prefetched expert not yet used is predicted for its layer's next
         * visit: value it by that distance alone, not by its past frequency */
        double sc = s->prefetched ? ms_usage_distance(&st->usage, s->layer, cur)
                                  : ms_usage_score(&st->usage, s->layer, s->expert, cur);
        if (best < 0 || sc > best_score ||
            (sc == best_score && s->last_use < st->slots[best].last_use)) {
            best = i;
            best_score = sc;
        }
    }
    return best;
}

static void evict(ms_expert_store *st, int i)
{
    slot *s = &st->slots[i];
    if (s->layer >= 0) {
        *slot_ref(st, s->layer, s->expert) = -1;
        if (s->prefetched) /* evicted before its layer came */
            st->st.prefetch_wasted_bytes += s->bytes;
    }
    s->layer = s->expert = -1;
    s->state = SLOT_EMPTY;
    s->prefetched = 0;
}

/* Submits the reads that fill slot i with expert (layer, e). */
static int load(ms_expert_store *st, int i, int layer, int e, ms_err *err)
{
    slot *s = &st->slots[i];
    evict(st, i);
    plan(st, layer, e, s->seg, &s->n_seg);
    s->layer = layer;
    s->expert = e;
    s->state = SLOT_LOADING;
    s->pending = s->n_seg;
    s->bytes = 0;
    s->err[0] = 0;
    *slot_ref(st, layer, e) = i;
    rebase_views(st, s, layer, e);
    for (int g = 0; g < s->n_seg; g++) {
        ms_io_req *r = &s->req[g];
        *r = (ms_io_req){st->fd[s->seg[g].file], s->seg[g].off, s->seg[g].len,
                         s->buf + s->seg[g].dst, 0, s};
        if (ms_io_submit(st->io, r, err))
            return -1;
    }
    return 0;
}

/* Names the tensor a failed segment was reading, for the error sentence. */
static void describe_failure(ms_expert_store *st, slot *s, const seg *q, const char *why)
{
    const ms_span *sp = &st->spans[2 * idx(st, s->layer, s->expert)];
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
    slot *s = r->user;
    int g = (int)(r - s->req);
    seg *q = &s->seg[g];
    uint64_t got = r->off - q->off; /* bytes of this segment read before this request */
    if (r->res == -EINVAL && st->direct[q->file]) {
        fprintf(stderr, "moestream: O_DIRECT read refused on %s: switching it to buffered "
                "reads\n", st->ck->files[q->file].path);
        st->direct[q->file] = 0; /* the O_DIRECT fd stays open for reads in flight */
        st->fd[q->file] = st->ck->files[q->file].fd;
        r->fd = st->fd[q->file];
        return ms_io_submit(st->io, r, err);
    }
    if (r->res > 0) {
        st->st.bytes_read += r->res;
        s->bytes += r->res;
        got += (uint64_t)r->res;
        if (got < q->need && (uint64_t)r->res < r->len) {
            r->off += (uint64_t)r->res; /* short read: ask for the rest */
            r->buf = (char *)r->buf + r->res;
            r->len -= (uint64_t)r->res;
            return ms_io_submit(st->io, r, err);
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
    ms_io_req *done[64];
    double t0 = block ? ms_now() : 0;
    int n = ms_io_wait(st->io, done, 64, block, err);
    if (block)
        st->st.t_wait += ms_now() - t0;
    if (n < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (complete(st, done[i], err))
            return -1;
    return n;
}

/* ---- batches ------------------------------------------------------------------ */

/* Starts loading the batch's missing experts, keeping at most read_depth of
 * its experts in flight: the disk reaches its bandwidth with one or two
 * whole experts queued, and experts that arrive one after the other let
 * the compute of the first overlap the reads of the next (all at once, they
 * share the disk and all arrive at the end). Returns the number still
 * waiting for a slot, or -1. */
static int start_misses(ms_expert_store *st, ms_err *err)
{
    int loading = 0, waiting = 0;
    for (int i = 0; i < st->b_n; i++)
        loading += st->b[i].state == 1 && st->slots[st->b[i].slot].state == SLOT_LOADING;
    for (int i = 0; i < st->b_n; i++) {
        batch_entry *b = &st->b[i];
        if (b->state != 0)
            continue;
        int v = loading < st->read_depth ? victim(st, st->b_layer) : -1;
        if (v < 0) {
            waiting++;
            continue;
        }
        if (load(st, v, st->b_layer, b->expert, err))
            return -1;
        st->slots[v].batch_gen = st->gen;
        b->slot = v;
        b->state = 1;
        loading++;
    }
    return waiting;
}

int ms_expert_batch_begin(ms_expert_store *st, int layer, const int32_t *ids, int n,
                          ms_err *err)
{
    if (layer < 0 || layer >= st->n_layers || n < 0 || n > st->n_experts)
        return ms_err_set(err, MS_E_ARG, "expert batch: layer %d, %d experts", layer, n);
    st->gen++;
    st->b_layer = layer;
    st->b_n = n;
    st->b_done = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= st->n_experts)
            return ms_err_set(err, MS_E_ARG, "expert %d out of range (%d experts)", ids[i],
                              st->n_experts);
        st->b[i] = (batch_entry){ids[i], -1, 0};
    }
    st->st.requests += n;
    if (st->trace) {
        fprintf(st->trace, "B %d", layer);
        for (int i = 0; i < n; i++)
            fprintf(st->trace, " %d", ids[i]);
        fprintf(st->trace, "\n");
    }
    /* slots prefetched for this visit that it does not ask for were mispredicted:
     * from now on they are ordinary cached experts (their bytes were wasted) */
    for (int k = 0; k < st->n_slots; k++) {
        slot *s = &st->slots[k];
        if (s->prefetched && s->layer == layer) {
            int wanted = 0;
            for (int i = 0; i < n && !wanted; i++)
                wanted = ids[i] == s->expert;
            if (!wanted) {
                s->prefetched = 0;
                st->st.prefetch_wasted_bytes += s->bytes;
            }
        }
    }
    if (st->pred_layer == layer) { /* score the predictions made for this layer */
        for (int e = 0; e < st->n_experts; e++)
            st->st.prefetch_predicted += st->pred[e];
        for (int i = 0; i < n; i++)
            st->st.prefetch_correct += st->pred[ids[i]];
        st->pred_layer = -1;
    }
    ms_usage_visit(&st->usage, layer, ids, n);
    if (st->policy == MS_EXPERTS_PAGECACHE) {
        st->st.hits += n;
        return 0;
    }
    /* attach what is cached (or already loading) and keep it from eviction */
    for (int i = 0; i < n; i++) {
        int32_t k = *slot_ref(st, layer, ids[i]);
        if (k >= 0 && st->slots[k].state == SLOT_FAILED) {
            evict(st, k); /* retry a failed load rather than repeat its error */
            k = -1;
        }
        if (k < 0)
            continue;
        slot *s = &st->slots[k];
        st->b[i].slot = k;
        st->b[i].state = 1;
        s->batch_gen = st->gen;
        st->st.hits++;
        if (s->prefetched) {
            st->st.prefetch_used++;
            s->prefetched = 0;
        }
    }
    return start_misses(st, err) < 0 ? -1 : 0;
}

static void fill_lease(ms_expert_store *st, int i, ms_expert_lease *out)
{
    batch_entry *b = &st->b[i];
    b->state = 2;
    st->b_done++;
    out->layer = st->b_layer;
    out->expert = b->expert;
    out->slot = b->slot;
    if (st->policy == MS_EXPERTS_PAGECACHE) {
        out->mat = &st->mats[idx(st, st->b_layer, b->expert)];
        return;
    }
    slot *s = &st->slots[b->slot];
    s->refs++;
    s->last_use = ++st->clock;
    out->mat = s->mat;
}

int ms_expert_batch_next(ms_expert_store *st, ms_expert_lease *out, ms_err *err)
{
    if (st->b_done == st->b_n)
        return 0;
    if (st->policy == MS_EXPERTS_PAGECACHE) {
        fill_lease(st, st->b_done, out);
        return 1;
    }
    for (;;) {
        if (reap(st, 0, err) < 0)
            return -1;
        for (int i = 0; i < st->b_n; i++) {
            batch_entry *b = &st->b[i];
            if (b->state != 1)
                continue;
            slot *s = &st->slots[b->slot];
            if (s->state == SLOT_FAILED)
                return ms_err_set(err, MS_E_IO, "%s", s->err);
            if (s->state == SLOT_READY) {
                int w = start_misses(st, err); /* keep the disk busy while this computes */
                if (w < 0)
                    return -1;
                fill_lease(st, i, out);
                return 1;
            }
        }
        int waiting = start_misses(st, err);
        if (waiting < 0)
            return -1;
        if (st->io->inflight == 0 && waiting)
            return ms_err_set(err, MS_E_ARG, "expert cache of %d slots cannot hold the experts "
                              "this batch needs at once", st->n_slots);
        if (reap(st, 1, err) < 0)
            return -1;
    }
}

int ms_expert_batch_holds_all(const ms_expert_store *st)
{
    return st->policy == MS_EXPERTS_PAGECACHE;
}

void ms_expert_put(ms_expert_store *st, ms_expert_lease *lease)
{
    if (lease->slot >= 0 && st->policy == MS_EXPERTS_CACHE) {
        slot *s = &st->slots[lease->slot];
        s->refs--;
        s->batch_gen = 0; /* delivered: evictable again */
    }
    lease->mat = NULL;
    lease->slot = -1;
}

int ms_expert_get(ms_expert_store *st, int layer, int e, ms_expert_lease *out, ms_err *err)
{
    int32_t id = e;
    if (ms_expert_batch_begin(st, layer, &id, 1, err))
        return -1;
    int rc = ms_expert_batch_next(st, out, err);
    return rc == 1 ? 0 : rc == 0 ? ms_err_set(err, MS_E_ARG, "expert batch empty") : -1;
}

/* Whether a mapped range looks cached already: its first, middle and last
 * pages are resident. MADV_WILLNEED walks the page cache page by page even
 * when everything is there (~6% of resident decode on the synthetic
 * gpt-oss-20b), so a range that looks cached is not advised; a range only
 * partly cached that passes this test is just read on demand. */
static int looks_cached(const uint8_t *map, uint64_t a, uint64_t len)
{
    uint64_t last = (a + len - 1) & ~(uint64_t)(ALIGN - 1);
    uint64_t probe[3] = {a, (a + (last - a) / 2) & ~(uint64_t)(ALIGN - 1), last};
    for (int i = 0; i < 3; i++) {
        unsigned char v = 0;
        if (mincore((void *)(map + probe[i]), ALIGN, &v) || !(v & 1))
            return 0;
    }
    return 1;
}

void ms_expert_prefetch(ms_expert_store *st, int layer, const int32_t *ids, int n)
{
    if (layer < 0 || layer >= st->n_layers || n > st->n_experts)
        return;
    if (st->pred_layer != layer)
        memset(st->pred, 0, (size_t)st->n_experts);
    st->pred_layer = layer;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < st->n_experts)
            st->pred[ids[i]] = 1;
    if (st->policy == MS_EXPERTS_PAGECACHE) {
        for (int i = 0; i < n; i++) {
            const ms_span *sp = &st->spans[2 * idx(st, layer, ids[i])];
            for (int k = 0; k < 2 * st->n_mats; k++) {
                if (sp[k].file < 0)
                    continue;
                uint64_t a = sp[k].offset & ~(uint64_t)(ALIGN - 1);
                uint64_t len = sp[k].offset + sp[k].nbytes - a;
                const uint8_t *map = st->ck->files[sp[k].file].map;
                if (len && !looks_cached(map, a, len))
                    madvise((void *)(map + a), len, MADV_WILLNEED);
            }
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= st->n_experts || *slot_ref(st, layer, ids[i]) >= 0)
            continue;
        /* seen from the layer before: `layer` is the next one to run */
        int v = victim(st, (layer + st->n_layers - 1) % st->n_layers);
        if (v < 0 || load(st, v, layer, ids[i], NULL))
            return;
        st->slots[v].prefetched = 1;
        st->st.prefetch_issued++;
    }
}

/* ---- disk probe --------------------------------------------------------------- */

int ms_expert_store_probe(const ms_expert_store *st, const ms_checkpoint *ck, int n, int depth,
                          double *bytes_per_s, ms_err *err)
{
    seg segs[MAX_SEGS];
    int ns, nf = ck->n_files, rc = -1;
    uint64_t max = 0;
    for (int l = 0; l < st->n_layers; l++)
        for (int e = 0; e < st->n_experts; e++) {
            uint64_t b = plan(st, l, e, segs, &ns);
            max = b > max ? b : max;
        }
    int total = st->n_layers * st->n_experts;
    n = n < total ? n : total;
    depth = depth < n ? depth : n;
    int *fd = calloc((size_t)nf, sizeof *fd);
    uint8_t *buf = NULL;
    ms_io *io = NULL;
    ms_io_req *req = calloc((size_t)depth * MAX_SEGS, sizeof *req);
    int *rem = calloc((size_t)depth, sizeof *rem); /* segments in flight per buffer */
    if (!fd || !req || !rem || posix_memalign((void **)&buf, ALIGN, (size_t)depth * max)) {
        ms_err_set(err, MS_E_NOMEM, "disk probe buffers");
        goto out;
    }
    for (int f = 0; f < nf; f++) {
        fd[f] = open(ck->files[f].path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (fd[f] < 0)
            fd[f] = ck->files[f].fd;
    }
    if (ms_io_open_uring(depth * MAX_SEGS, &io, err) && ms_io_open_threads(depth, &io, err))
        goto out;
    uint64_t bytes = 0;
    double t0 = ms_now();
    /* experts visited with a stride coprime to the count: spread, distinct */
    int stride = 7919 % total ? 7919 % total : 1, next = 0, done = 0, inflight = 0;
    while (done < n) {
        while (inflight < depth && next < n) {
            int k = (int)(((int64_t)next * stride) % total), b = -1;
            while (rem[++b]) /* a free buffer exists: inflight < depth */
                ;
            uint8_t *dst = buf + (size_t)b * max;
            plan(st, k / st->n_experts, k % st->n_experts, segs, &ns);
            rem[b] = ns;
            for (int g = 0; g < ns; g++) {
                ms_io_req *r = &req[b * MAX_SEGS + g];
                *r = (ms_io_req){fd[segs[g].file], segs[g].off, segs[g].len, dst + segs[g].dst, 0,
                                 (void *)(intptr_t)b};
                if (ms_io_submit(io, r, err))
                    goto out;
            }
            next++;
            inflight++;
        }
        ms_io_req *d[64];
        int got = ms_io_wait(io, d, 64, 1, err);
        if (got < 0)
            goto out;
        for (int i = 0; i < got; i++) {
            if (d[i]->res < 0) {
                ms_err_set(err, MS_E_IO, "disk probe: read failed: %s", strerror((int)-d[i]->res));
                goto out;
            }
            bytes += (uint64_t)d[i]->res;
            if (--rem[(intptr_t)d[i]->user] == 0) {
                done++;
                inflight--;
            }
        }
    }
    *bytes_per_s = (double)bytes / (ms_now() - t0);
    rc = 0;
out:
    ms_io_close(io);
    if (fd)
        for (int f = 0; f < nf; f++)
            if (fd[f] >= 0 && fd[f] != ck->files[f].fd)
                close(fd[f]);
    free(fd);
    free(req);
    free(rem);
    free(buf);
    return rc;
}

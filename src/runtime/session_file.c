/* A session's cache in a file: the ids it holds, the KV cache of every
 * layer (the positions it holds, as stored: f32, bf16 or e4m3 with its
 * scales) and the last logits, so that a conversation can leave memory and
 * come back without being evaluated again (serve --prompt-cache-dir).
 *
 * Layout (little-endian, this machine's): a header of fixed fields (magic,
 * model identity, context, position, vocabulary, layers, KV format, whether
 * logits are held, the layers held, whether ids are held), the ids, the
 * logits, then per layer its ring geometry and, plane by plane, the slots
 * in use as stored (whole tiles; f32 and bf16 keys tiled since v3); last an FNV-1a checksum of all that precedes it. A pipeline
 * stage's part holds only its layers (no ids, no logits) in a file of its
 * own; the first engine asks the others for theirs (ms_stage_link.file)
 * and writes its own last. The identity hashes the checkpoint folder's
 * real path, its config.json and its shards' sizes and modification times,
 * so another model, or the same folder with other weights, is refused. Loading needs a
 * session of the same engine, context and KV format. Files are written
 * under a temporary name and renamed into place. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "base/sysmem.h"
#include "runtime/engine.h"
#include "runtime/session.h"

static const char magic[8] = {'M', 'S', 'K', 'V', 'v', '3', 0, 0};

/* layer0, layer1: the layers whose caches the file holds (a pipeline
 * stage's); have_ids: whether the ids (and logits) are in it (the engine
 * with the embedding and head). */
typedef struct header {
    char magic[8];
    uint64_t model;
    int64_t ctx, pos, vocab, n_layers, fmt, have_logits, layer0, layer1, have_ids;
} header;

#define FNV_START 14695981039346656037ull /* FNV-1a's offset basis */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The identity of the engine's checkpoint (see the file comment). */
static uint64_t model_id(const ms_engine *eng)
{
    uint64_t h = FNV_START;
    char real[PATH_MAX];
    const char *dir = realpath(eng->ck->dir, real) ? real : eng->ck->dir;
    h = fnv(h, dir, strlen(dir));
    char *cfg = json_dumps(eng->ck->config, JSON_SORT_KEYS | JSON_COMPACT);
    if (cfg)
        h = fnv(h, cfg, strlen(cfg));
    free(cfg);
    for (int i = 0; i < eng->ck->n_files; i++) {
        struct stat st;
        if (stat(eng->ck->files[i].path, &st) == 0) {
            int64_t v[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec,
                            (int64_t)st.st_mtim.tv_nsec};
            h = fnv(h, v, sizeof v);
        }
    }
    return h;
}

typedef struct io {
    FILE *f;      /* a file read or written (checksummed), */
    uint8_t *mem; /* or an image built in memory (ms_session_image: summed when written), */
    size_t at;    /* or neither: bytes counted */
    uint64_t sum;
    int bad;
} io;

static void put(io *o, const void *p, size_t n)
{
    if (o->mem) {
        memcpy(o->mem + o->at, p, n);
    } else if (o->f) {
        if (!o->bad && fwrite(p, 1, n, o->f) != n)
            o->bad = 1;
        o->sum = fnv(o->sum, p, n);
    }
    o->at += n;
}

static int get(io *o, void *p, size_t n)
{
    if (o->bad || fread(p, 1, n, o->f) != n) {
        o->bad = 1;
        return -1;
    }
    o->sum = fnv(o->sum, p, n);
    return 0;
}

/* The slots in use of layer kv holding positions [0, pos): plane by plane,
 * the first min(pos, cap) slots (a ring's slots are in position % cap
 * order, the same in the session it comes back to), in whole tiles (a
 * tiled plane's last tile holds its positions among the others'). */
static int64_t used_slots(const ms_kv *kv, int64_t pos)
{
    int64_t slots = (pos + MS_KV_TILE - 1) / MS_KV_TILE * MS_KV_TILE;
    return slots < kv->cap ? slots : kv->cap;
}

static void put_layer(io *o, const ms_kv *kv, int64_t pos)
{
    int64_t geo[4] = {kv->cap, kv->row, kv->plane, kv->group};
    put(o, geo, sizeof geo);
    int64_t slots = used_slots(kv, pos), planes = kv->row / kv->plane, es = ms_kvfmt_size(kv->fmt);
    for (int64_t p = 0; p < planes; p++) {
        put(o, (const uint8_t *)kv->data + (p * kv->cap) * kv->plane * es,
            (size_t)(slots * kv->plane * es));
        if (kv->scale)
            put(o, kv->scale + (p * kv->cap) * (kv->plane / kv->group),
                sizeof(float) * (size_t)(slots * (kv->plane / kv->group)));
    }
}

static int get_layer(io *o, ms_kv *kv, int64_t pos, int l, ms_err *err)
{
    int64_t geo[4];
    if (get(o, geo, sizeof geo))
        return -1;
    if (geo[0] != kv->cap || geo[1] != kv->row || geo[2] != kv->plane || geo[3] != kv->group)
        return ms_err_set(err, MS_E_MISMATCH, "layer %d's cache is %lld x %lld (planes of %lld) "
                          "in the file, %lld x %lld in this session", l, (long long)geo[0],
                          (long long)geo[1], (long long)geo[2], (long long)kv->cap,
                          (long long)kv->row);
    int64_t slots = used_slots(kv, pos), planes = kv->row / kv->plane, es = ms_kvfmt_size(kv->fmt);
    for (int64_t p = 0; p < planes; p++) {
        if (get(o, (uint8_t *)kv->data + (p * kv->cap) * kv->plane * es,
                (size_t)(slots * kv->plane * es)))
            return -1;
        if (kv->scale && get(o, kv->scale + (p * kv->cap) * (kv->plane / kv->group),
                             sizeof(float) * (size_t)(slots * (kv->plane / kv->group))))
            return -1;
    }
    return 0;
}

int ms_stage_file_path(const char *path, int stage, char *out, size_t size)
{
    return snprintf(out, size, "%s.stage%d", path, stage) >= (int)size ? -1 : 0;
}

/* With a link: the other stages' parts of session s in files beside path. */
static int stage_files(const ms_session *s, int op, const char *path, ms_err *err)
{
    const ms_stage_link *k = &s->eng->link;
    if (!k->send)
        return 0;
    if (!k->file)
        return ms_err_set(err, MS_E_UNSUPPORTED, "%s: a session's cache in a file is not "
                          "available over this pipeline (its link keeps no files)", path);
    return k->file(k->user, op, s->sid, s->ctx, (int32_t)s->kv_fmt, path, err);
}

/* Everything of the file but its checksum: header, ids, logits, layers. */
static void put_session(const ms_session *s, io *o)
{
    const ms_model *m = s->eng->model;
    header h = {.model = model_id(s->eng), .ctx = s->ctx, .pos = s->pos, .vocab = m->vocab,
                .n_layers = m->n_layers, .fmt = s->kv_fmt,
                .have_logits = m->ends && s->have_logits, .layer0 = m->layer0,
                .layer1 = m->layer1, .have_ids = m->ends};
    memcpy(h.magic, magic, sizeof magic);
    put(o, &h, sizeof h);
    if (h.have_ids)
        put(o, s->hist, sizeof *s->hist * (size_t)s->pos);
    if (h.have_logits)
        put(o, s->logits, sizeof *s->logits * (size_t)m->vocab);
    for (int l = m->layer0; l < m->layer1; l++)
        put_layer(o, &s->kv[l], s->pos);
}

/* A file is written beside path and renamed onto it once whole, so that a
 * reader never sees a part of one. */
static int open_tmp(const char *path, char *tmp, size_t size, io *o, ms_err *err)
{
    if (snprintf(tmp, size, "%s.tmp.%d", path, (int)getpid()) >= (int)size)
        return ms_err_set(err, MS_E_ARG, "%s: path too long", path);
    *o = (io){.f = fopen(tmp, "wbx"), .sum = FNV_START};
    if (!o->f)
        return ms_err_set(err, MS_E_IO, "%s: cannot create (%s)", tmp, strerror(errno));
    return 0;
}

static int commit_tmp(io *o, const char *tmp, const char *path, ms_err *err)
{
    uint64_t sum = o->sum;
    put(o, &sum, sizeof sum);
    if (fclose(o->f) != 0)
        o->bad = 1;
    if (o->bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return ms_err_set(err, MS_E_IO, "%s: cannot write the session (%s)", path,
                          strerror(errno ? errno : EIO));
    }
    return 0;
}

int ms_session_save(const ms_session *s, const char *path, ms_error *err)
{
    char tmp[PATH_MAX];
    io o;
    if (stage_files(s, MS_STAGE_SAVE, path, err) || open_tmp(path, tmp, sizeof tmp, &o, err))
        return -1;
    put_session(s, &o);
    return commit_tmp(&o, tmp, path, err);
}

int ms_session_image(const ms_session *s, void **data, size_t *bytes, ms_error *err)
{
    *data = NULL;
    *bytes = 0;
    if (s->eng->link.send)
        return ms_err_set(err, MS_E_UNSUPPORTED, "a session's image in memory is not "
                          "available over a pipeline (each stage keeps its own part)");
    io count = {0};
    put_session(s, &count);
    uint64_t avail = ms_mem_available();
    if (avail && count.at > avail / 2)
        return ms_err_set(err, MS_E_NOMEM, "a session image of %.1f MB would take more than "
                          "half the %.1f MB of memory available", (double)count.at / 1e6,
                          (double)avail / 1e6);
    io o = {.mem = ms_malloc(count.at ? count.at : 1, "session image", err)};
    if (!o.mem)
        return -1;
    put_session(s, &o);
    *data = o.mem;
    *bytes = o.at;
    return 0;
}

int ms_session_write_image(const void *data, size_t bytes, const char *path, ms_error *err)
{
    char tmp[PATH_MAX];
    io o;
    if (open_tmp(path, tmp, sizeof tmp, &o, err))
        return -1;
    put(&o, data, bytes);
    return commit_tmp(&o, tmp, path, err);
}

/* Opens path and checks its header against the engine (and, when s is not
 * NULL, the session's context and format). */
static int open_file(const char *path, const ms_engine *eng, const ms_session *s, io *o,
                     header *h, ms_err *err)
{
    *o = (io){.f = fopen(path, "rb"), .sum = FNV_START};
    if (!o->f)
        return ms_err_set(err, MS_E_IO, "%s: cannot open (%s)", path, strerror(errno));
    const ms_model *m = eng->model;
    if (get(o, h, sizeof *h) || memcmp(h->magic, magic, 5))
        return ms_err_set(err, MS_E_FORMAT, "%s: not a moestream session file", path);
    if (memcmp(h->magic, magic, sizeof magic))
        return ms_err_set(err, MS_E_FORMAT, "%s: a session file of another version (%.3s; this "
                          "moestream reads %.3s)", path, h->magic + 4, magic + 4);
    if (h->model != model_id(eng) || h->vocab != m->vocab || h->n_layers != m->n_layers)
        return ms_err_set(err, MS_E_MISMATCH, "%s: saved from another model (or the same "
                          "folder with other weights)", path);
    if (h->layer0 != m->layer0 || h->layer1 != m->layer1 || h->have_ids != m->ends)
        return ms_err_set(err, MS_E_MISMATCH, "%s: holds layers %lld-%lld%s; this engine runs "
                          "layers %d-%d%s", path, (long long)h->layer0, (long long)h->layer1 - 1,
                          h->have_ids ? " with the ids" : "", m->layer0, m->layer1 - 1,
                          m->ends ? " with the embedding and head" : "");
    if (h->pos < 0 || h->pos > h->ctx || h->ctx < 1 || h->ctx > (INT64_C(1) << 40))
        return ms_err_set(err, MS_E_FORMAT, "%s: position %lld of a context of %lld", path,
                          (long long)h->pos, (long long)h->ctx);
    /* the ids come next: a file too short to hold them is refused before a
     * buffer for h->pos ids is asked for (a damaged position, up to the 2^40
     * above, asked for gigabytes; found by a libFuzzer run) */
    struct stat st;
    if (h->have_ids && fstat(fileno(o->f), &st) == 0 &&
        h->pos > ((int64_t)st.st_size - (int64_t)sizeof *h) / (int64_t)sizeof(int32_t))
        return ms_err_set(err, MS_E_FORMAT, "%s: cut short (%lld bytes cannot hold the ids of "
                          "%lld positions)", path, (long long)st.st_size, (long long)h->pos);
    if (s && (h->ctx != s->ctx || h->fmt != s->kv_fmt))
        return ms_err_set(err, MS_E_MISMATCH, "%s: a context of %lld tokens in %s; this session "
                          "has %lld in %s", path, (long long)h->ctx,
                          ms_kvfmt_name((ms_kvfmt)h->fmt), (long long)s->ctx,
                          ms_kvfmt_name(s->kv_fmt));
    return 0;
}

int ms_session_file_ids(const char *path, const ms_engine *eng, int32_t **ids, int64_t *n,
                        ms_error *err)
{
    io o;
    header h;
    *ids = NULL;
    *n = 0;
    int rc = open_file(path, eng, NULL, &o, &h, err);
    if (rc == 0 && !h.have_ids)
        rc = ms_err_set(err, MS_E_ARG, "%s: a pipeline stage's part holds no ids", path);
    if (rc == 0) {
        *ids = malloc(sizeof **ids * (size_t)(h.pos ? h.pos : 1));
        if (!*ids)
            rc = ms_err_set(err, MS_E_NOMEM, "%s: out of memory reading its ids", path);
        else if (get(&o, *ids, sizeof **ids * (size_t)h.pos))
            rc = ms_err_set(err, MS_E_FORMAT, "%s: cut short", path);
        else
            *n = h.pos;
    }
    if (o.f)
        fclose(o.f);
    if (rc) {
        free(*ids);
        *ids = NULL;
    }
    return rc;
}

int ms_session_load(ms_session *s, const char *path, ms_error *err)
{
    const ms_model *m = s->eng->model;
    io o;
    header h;
    int rc = open_file(path, s->eng, s, &o, &h, err);
    /* the other stages' parts, once this file's header is good; one that
     * fails leaves every stage to be truncated to an empty session */
    if (rc == 0 && (rc = stage_files(s, MS_STAGE_LOAD, path, err))) {
        s->pos = 0;
        s->have_logits = 0;
    }
    int32_t *ids = NULL;
    /* the ids first, in a copy: the session changes only once all is read */
    if (rc == 0 && h.have_ids) {
        ids = malloc(sizeof *ids * (size_t)(h.pos ? h.pos : 1));
        if (!ids || get(&o, ids, sizeof *ids * (size_t)h.pos))
            rc = ms_err_set(err, ids ? MS_E_FORMAT : MS_E_NOMEM, "%s: cut short", path);
        for (int64_t i = 0; rc == 0 && i < h.pos; i++)
            if (ids[i] < 0 || ids[i] >= m->vocab)
                rc = ms_err_set(err, MS_E_FORMAT, "%s: id %d at position %lld is not in the "
                                "vocabulary", path, ids[i], (long long)i);
    }
    if (rc == 0) { /* from here on the session is being overwritten */
        s->pos = 0;
        s->have_logits = 0;
    }
    if (rc == 0 && h.have_logits && get(&o, s->logits, sizeof *s->logits * (size_t)m->vocab))
        rc = ms_err_set(err, MS_E_FORMAT, "%s: cut short", path);
    for (int l = m->layer0; rc == 0 && l < m->layer1; l++)
        if (get_layer(&o, &s->kv[l], h.pos, l, err))
            rc = o.bad ? ms_err_set(err, MS_E_FORMAT, "%s: cut short", path) : -1;
    uint64_t want = o.sum, sum = 0;
    if (rc == 0 && (fread(&sum, 1, sizeof sum, o.f) != sizeof sum || sum != want))
        rc = ms_err_set(err, MS_E_FORMAT, "%s: checksum mismatch (a damaged file)", path);
    if (rc == 0) {
        if (h.have_ids)
            memcpy(s->hist, ids, sizeof *ids * (size_t)h.pos);
        s->pos = h.pos;
        s->have_logits = (int)h.have_logits;
    }
    free(ids);
    if (o.f)
        fclose(o.f);
    return rc;
}

int ms_session_file_remove(const ms_engine *eng, const char *path, ms_error *err)
{
    const ms_stage_link *k = &eng->link;
    int rc = 0;
    if (k->send && k->file)
        rc = k->file(k->user, MS_STAGE_REMOVE, 0, 0, 0, path, err);
    if (unlink(path) != 0 && errno != ENOENT && rc == 0)
        rc = ms_err_set(err, MS_E_IO, "%s: cannot remove (%s)", path, strerror(errno));
    return rc;
}

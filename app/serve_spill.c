/* Prompt caches on disk (serve --prompt-cache-disk SIZE): a conversation
 * whose session is about to be reused for another one is saved
 * (ms_session_save) into the spill folder instead of being lost, and a
 * request that continues a saved conversation loads it back
 * (ms_session_load) rather than evaluating its prompt again. The folder's
 * files are kept within SIZE bytes, the least recently used removed first;
 * at start the files already there (an earlier run on the same model) are
 * indexed by their ids, so conversations survive a restart. With
 * --pipeline every stage keeps its layers' part in a file of its own beside
 * each one (".stageN"); SIZE counts the first stage's files. Only the
 * worker thread uses the index.
 *
 * Writing a long conversation's cache takes a while (hundreds of MB on a
 * real model), and the worker decodes every slot: so the worker only takes
 * the session's image in memory (ms_session_image, a copy) and a writer
 * thread writes it, in queue order. An entry whose file is still queued is
 * waited for before it is loaded or removed, and at most SPILL_QUEUE
 * images wait at once (then the worker waits for the oldest). With a
 * pipeline the worker writes (each stage writes its own part). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline.h"
#include "cli.h"
#include "serve.h"

/* Shorter conversations are cheaper to evaluate again than to write. */
#define SPILL_MIN_TOKENS 32
/* Images waiting for the writer at most. */
#define SPILL_QUEUE 2

/* Until the writer has finished with e's file (written or failed). */
static void wait_written(srv_spill *sp, const srv_spilled *e)
{
    if (e->write < 0)
        return;
    pthread_mutex_lock(&sp->mu);
    while (sp->done_n <= e->write)
        pthread_cond_wait(&sp->cv, &sp->mu);
    pthread_mutex_unlock(&sp->mu);
}

static void *writer_main(void *arg)
{
    srv *sv = arg;
    srv_spill *sp = &sv->spill;
    pthread_mutex_lock(&sp->mu);
    for (;;) {
        while (!sp->head && !sp->closing)
            pthread_cond_wait(&sp->cv, &sp->mu);
        srv_spill_job *w = sp->head;
        if (!w)
            break;
        pthread_mutex_unlock(&sp->mu);
        ms_error err = {0};
        if (ms_session_write_image(w->data, w->bytes, w->path, &err))
            fprintf(stderr, "moestream serve: prompt cache not saved: %s\n", err.msg);
        else
            __atomic_add_fetch(&sv->m_spill_saved, 1, __ATOMIC_RELAXED);
        free(w->data);
        pthread_mutex_lock(&sp->mu);
        sp->head = w->next;
        if (!sp->head)
            sp->tail = NULL;
        sp->queued--;
        sp->done_n++;
        free(w);
        pthread_cond_broadcast(&sp->cv);
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

/* A saved conversation's file goes, with its pipeline stages' parts. */
static void remove_file(const srv *sv, const char *path)
{
    ms_error err = {0};
    if (ms_session_file_remove(sv->eng, path, &err))
        fprintf(stderr, "moestream serve: prompt cache not removed: %s\n", err.msg);
}

static void spill_remove(srv *sv, int k)
{
    srv_spill *sp = &sv->spill;
    wait_written(sp, &sp->e[k]);
    remove_file(sv, sp->e[k].path);
    sp->bytes -= sp->e[k].bytes;
    free(sp->e[k].ids);
    sp->e[k] = sp->e[--sp->n];
}

/* mkdir -p */
static int make_dirs(const char *dir)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            mkdir(p, 0700);
            *c = '/';
        }
    return mkdir(p, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

int srv_spill_open(srv *sv, const char *dir, int64_t budget, ms_error *err)
{
    srv_spill *sp = &sv->spill;
    memset(sp, 0, sizeof *sp);
    if (budget <= 0)
        return 0;
    snprintf(sp->dir, sizeof sp->dir, "%s", dir);
    sp->budget = budget;
    if (make_dirs(sp->dir)) {
        snprintf(err->msg, sizeof err->msg, "--prompt-cache-dir %s: cannot create it (%s)",
                 sp->dir, strerror(errno));
        return -1;
    }
    char base[1024];
    snprintf(base, sizeof base, "%s", sp->dir);
    DIR *d = opendir(base);
    struct dirent *de;
    while (d && (de = readdir(d)) && sp->n < SRV_SPILL_MAX) {
        size_t l = strlen(de->d_name);
        if (l < 4 || strcmp(de->d_name + l - 3, ".kv"))
            continue;
        srv_spilled *e = &sp->e[sp->n];
        snprintf(e->path, sizeof e->path, "%.1000s/%.90s", base, de->d_name);
        struct stat st;
        ms_error e2 = {0};
        if (stat(e->path, &st) || ms_session_file_ids(e->path, sv->eng, &e->ids, &e->n, &e2)) {
            fprintf(stderr, "moestream serve: prompt cache %s left alone: %s\n", e->path,
                    e2.msg[0] ? e2.msg : strerror(errno));
            continue;
        }
        e->bytes = (int64_t)st.st_size;
        e->t = (double)st.st_mtime - 1e10; /* older than anything of this run */
        e->write = -1;
        sp->bytes += e->bytes;
        sp->seq++;
        sp->n++;
    }
    if (d)
        closedir(d);
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->cv, NULL);
    sp->async = pipeline_stages() == 0 && pthread_create(&sp->writer, NULL, writer_main, sv) == 0;
    fprintf(stderr, "moestream serve: prompt caches on disk in %s (%.1f GB budget, %d "
            "conversations found%s)\n", sp->dir, (double)budget / 1e9, sp->n,
            sp->async ? "" : "; written by the worker thread, which waits for each");
    return 0;
}

void srv_spill_close(srv *sv)
{
    srv_spill *sp = &sv->spill;
    if (sp->async) { /* what is queued is written first */
        pthread_mutex_lock(&sp->mu);
        sp->closing = 1;
        pthread_cond_broadcast(&sp->cv);
        pthread_mutex_unlock(&sp->mu);
        pthread_join(sp->writer, NULL);
        sp->async = 0;
    }
    for (int i = 0; i < sp->n; i++)
        free(sp->e[i].ids);
    sp->n = 0;
}

/* Writes s into e->path at once (a pipeline, or an image too big to copy);
 * e->bytes is the file's size. 0, or -1 (said on stderr). */
static int spill_write_now(srv *sv, ms_session *s, srv_spilled *e)
{
    ms_error err = {0};
    struct stat st;
    if (ms_session_save(s, e->path, &err) || stat(e->path, &st)) {
        fprintf(stderr, "moestream serve: prompt cache not saved: %s\n", err.msg);
        return -1;
    }
    e->bytes = (int64_t)st.st_size;
    e->write = -1;
    __atomic_add_fetch(&sv->m_spill_saved, 1, __ATOMIC_RELAXED);
    return 0;
}

/* Writes s into e->path: its image queued for the writer, or at once when
 * there is no writer or the image is too big to copy; e->bytes is the
 * file's size. 0, or -1 (said on stderr). */
static int spill_write(srv *sv, ms_session *s, srv_spilled *e)
{
    srv_spill *sp = &sv->spill;
    ms_error err = {0};
    if (!sp->async)
        return spill_write_now(sv, s, e);
    srv_spill_job *w = calloc(1, sizeof *w);
    if (!w) {
        fprintf(stderr, "moestream serve: prompt cache not saved: out of memory\n");
        return -1;
    }
    if (ms_session_image(s, &w->data, &w->bytes, &err)) {
        free(w);
        if (err.code == MS_E_NOMEM) { /* too big to copy: written here, the slots wait */
            fprintf(stderr, "moestream serve: prompt cache written by the worker: %s\n",
                    err.msg);
            return spill_write_now(sv, s, e);
        }
        fprintf(stderr, "moestream serve: prompt cache not saved: %s\n", err.msg);
        return -1;
    }
    e->bytes = (int64_t)w->bytes + 8; /* and the checksum */
    if (e->bytes > sp->budget) {
        free(w->data);
        free(w);
        return -1;
    }
    snprintf(w->path, sizeof w->path, "%s", e->path);
    pthread_mutex_lock(&sp->mu);
    while (sp->queued >= SPILL_QUEUE)
        pthread_cond_wait(&sp->cv, &sp->mu);
    if (sp->tail)
        sp->tail->next = w;
    else
        sp->head = w;
    sp->tail = w;
    sp->queued++;
    e->write = sp->queued_n++;
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    return 0;
}

void srv_spill_save(srv *sv, ms_session *s, const int32_t *ids, int64_t n)
{
    srv_spill *sp = &sv->spill;
    if (!sp->budget || n < SPILL_MIN_TOKENS)
        return;
    for (int k = 0; k < sp->n; k++) /* the same conversation, or a prefix of it: replaced */
        if (sp->e[k].n <= n && !memcmp(sp->e[k].ids, ids, sizeof *ids * (size_t)sp->e[k].n))
            spill_remove(sv, k--);
    srv_spilled e = {0};
    snprintf(e.path, sizeof e.path, "%.1000s/c%d-%lld.kv", sp->dir, (int)getpid(),
             (long long)sp->seq++);
    if (!(e.ids = malloc(sizeof *ids * (size_t)n)))
        return;
    memcpy(e.ids, ids, sizeof *ids * (size_t)n);
    if (spill_write(sv, s, &e)) {
        free(e.ids);
        return;
    }
    e.n = n;
    e.t = cli_now();
    while (sp->n && (sp->n == SRV_SPILL_MAX || sp->bytes + e.bytes > sp->budget)) {
        int old = 0; /* the least recently used goes */
        for (int k = 1; k < sp->n; k++)
            old = sp->e[k].t < sp->e[old].t ? k : old;
        spill_remove(sv, old);
    }
    if (e.bytes > sp->budget) {
        wait_written(sp, &e);
        remove_file(sv, e.path);
        free(e.ids);
        return;
    }
    sp->e[sp->n++] = e;
    sp->bytes += e.bytes;
}

int srv_spill_find(const srv *sv, const int32_t *ids, int64_t n, int64_t *shared)
{
    const srv_spill *sp = &sv->spill;
    int best = -1;
    *shared = 0;
    for (int k = 0; k < sp->n; k++) { /* the saved conversation sharing the longest prefix */
        const srv_spilled *e = &sp->e[k];
        int64_t m = e->n < n ? e->n : n, i = 0;
        while (i < m && e->ids[i] == ids[i])
            i++;
        if (i >= SPILL_MIN_TOKENS && i > *shared) {
            best = k;
            *shared = i;
        }
    }
    return best;
}

int srv_spill_take(srv *sv, int k, ms_session *s)
{
    srv_spill *sp = &sv->spill;
    ms_error err = {0};
    wait_written(sp, &sp->e[k]);
    int rc = ms_session_load(s, sp->e[k].path, &err);
    if (rc)
        fprintf(stderr, "moestream serve: prompt cache %s not loaded: %s\n", sp->e[k].path,
                err.msg);
    else
        __atomic_add_fetch(&sv->m_spill_loaded, 1, __ATOMIC_RELAXED);
    spill_remove(sv, k); /* in memory now (or useless): saved again when it leaves */
    return rc;
}

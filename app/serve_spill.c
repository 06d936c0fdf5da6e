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
 * worker thread uses it. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve.h"

/* Shorter conversations are cheaper to evaluate again than to write. */
#define SPILL_MIN_TOKENS 32

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
        sp->bytes += e->bytes;
        sp->seq++;
        sp->n++;
    }
    if (d)
        closedir(d);
    fprintf(stderr, "moestream serve: prompt caches on disk in %s (%.1f GB budget, %d "
            "conversations found)\n", sp->dir, (double)budget / 1e9, sp->n);
    return 0;
}

void srv_spill_close(srv *sv)
{
    for (int i = 0; i < sv->spill.n; i++)
        free(sv->spill.e[i].ids);
    sv->spill.n = 0;
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
    ms_error err = {0};
    struct stat st;
    if (ms_session_save(s, e.path, &err) || stat(e.path, &st)) {
        fprintf(stderr, "moestream serve: prompt cache not saved: %s\n", err.msg);
        return;
    }
    e.bytes = (int64_t)st.st_size;
    e.n = n;
    e.t = srv_now();
    if (!(e.ids = malloc(sizeof *ids * (size_t)n))) {
        remove_file(sv, e.path);
        return;
    }
    memcpy(e.ids, ids, sizeof *ids * (size_t)n);
    while (sp->n && (sp->n == SRV_SPILL_MAX || sp->bytes + e.bytes > sp->budget)) {
        int old = 0; /* the least recently used goes */
        for (int k = 1; k < sp->n; k++)
            old = sp->e[k].t < sp->e[old].t ? k : old;
        spill_remove(sv, old);
    }
    if (e.bytes > sp->budget) {
        remove_file(sv, e.path);
        free(e.ids);
        return;
    }
    sp->e[sp->n++] = e;
    sp->bytes += e.bytes;
    __atomic_add_fetch(&sv->m_spill_saved, 1, __ATOMIC_RELAXED);
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
    int rc = ms_session_load(s, sp->e[k].path, &err);
    if (rc)
        fprintf(stderr, "moestream serve: prompt cache %s not loaded: %s\n", sp->e[k].path,
                err.msg);
    else
        __atomic_add_fetch(&sv->m_spill_loaded, 1, __ATOMIC_RELAXED);
    spill_remove(sv, k); /* in memory now (or useless): saved again when it leaves */
    return rc;
}

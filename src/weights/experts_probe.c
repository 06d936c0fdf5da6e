/* The disk's bandwidth at expert-sized reads (ms_expert_store_probe): the
 * figure the streaming floors are judged against, measured with the reads
 * the engine cache issues, into scratch memory (the cache is not touched):
 * O_DIRECT, io_uring reads of MS_EXPERT_READ_PIECE bytes in order with
 * MS_EXPERT_READ_WINDOW in flight, into registered buffers in huge pages.
 * Whole experts at a time into unregistered 4 KiB pages (the probe before)
 * measured 2.0 GB/s where the streaming decode's own reads ran at 3.2
 * (docs/perf.md, "A disk probe that reads as the cache does"). */
#include "weights/experts_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/sysmem.h"

int ms_expert_store_probe(const ms_expert_store *st, const ms_checkpoint *ck, int n, int depth,
                          double *bytes_per_s, ms_err *err)
{
    ms_expert_seg segs[MS_EXPERT_MAX_SEGS];
    int ns, nf = ck->n_files, rc = -1;
    uint64_t slot = ms_expert_slot_size(st);
    int total = st->n_layers * st->n_experts;
    n = n < total ? n : total;
    depth = depth < n ? depth : n; /* experts queued, each in its own buffer */
    size_t buf_bytes = (size_t)depth * slot;
    int *fd = calloc((size_t)nf, sizeof *fd);
    uint8_t *buf = ms_map_huge(buf_bytes);
    ms_io *io = NULL;
    ms_io_req *req = calloc((size_t)depth * MS_EXPERT_MAX_SEGS, sizeof *req);
    int *rem = calloc((size_t)depth, sizeof *rem); /* segments in flight per buffer */
    ms_expert_seg *rseg = calloc((size_t)depth * MS_EXPERT_MAX_SEGS, sizeof *rseg); /* req[i]'s */
    void **bufs = calloc((size_t)depth, sizeof *bufs);
    size_t *lens = calloc((size_t)depth, sizeof *lens);
    if (!fd || !buf || !req || !rem || !rseg || !bufs || !lens) {
        ms_err_set(err, MS_E_NOMEM, "disk probe buffers (%zu bytes)", buf_bytes);
        goto out;
    }
    for (int f = 0; f < nf; f++) {
        fd[f] = open(ck->files[f].path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (fd[f] < 0)
            fd[f] = ck->files[f].fd;
    }
    ms_err e2 = {0};
    if (ms_io_open_uring(MS_EXPERT_READ_WINDOW, MS_EXPERT_READ_PIECE, &io, &e2) == 0) {
        for (int b = 0; b < depth; b++)
            bufs[b] = buf + (size_t)b * slot, lens[b] = slot;
        ms_populate(buf, buf_bytes); /* else registering maps the pages in */
        if (ms_io_register(io, bufs, lens, depth, &e2) < 0)
            ms_logf(&st->log, "disk probe: reading into unregistered buffers (%s)", e2.msg);
    } else {
        ms_logf(&st->log, "disk probe: %s; reading with 4 pread threads instead", e2.msg);
        if (ms_io_open_threads(4, &io, err))
            goto out;
    }
    uint64_t bytes = 0;
    double t0 = ms_now();
    /* experts visited with a stride coprime to the count: spread, distinct */
    int stride = 7919 % total ? 7919 % total : 1, next = 0, done = 0, inflight = 0;
    while (done < n) {
        while (inflight < depth && next < n) {
            int k = (int)(((int64_t)next * stride) % total), b = -1;
            while (rem[++b]) /* a free buffer exists: inflight < depth */
                ;
            uint8_t *dst = buf + (size_t)b * slot;
            ms_expert_plan(st, k / st->n_experts, k % st->n_experts, segs, &ns);
            rem[b] = ns;
            for (int g = 0; g < ns; g++) {
                ms_io_req *r = &req[b * MS_EXPERT_MAX_SEGS + g];
                rseg[b * MS_EXPERT_MAX_SEGS + g] = segs[g];
                *r = (ms_io_req){fd[segs[g].file], segs[g].off, segs[g].len, dst + segs[g].dst, 0,
                                 (void *)(intptr_t)b, 0};
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
            const ms_expert_seg *sg = &rseg[d[i] - req];
            if (d[i]->res < 0 || (uint64_t)d[i]->res < sg->need) {
                ms_err_set(err, MS_E_IO, "disk probe: %s: read at offset %llu: %s",
                           ck->files[sg->file].path, (unsigned long long)sg->off,
                           d[i]->res < 0 ? strerror((int)-d[i]->res) : "short read");
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
    free(rseg);
    free(bufs);
    free(lens);
    if (buf)
        munmap(buf, buf_bytes);
    return rc;
}

/* The disk's bandwidth at expert-sized reads (ms_expert_store_probe): the
 * figure the streaming floors are judged against, measured with the reads
 * the engine cache issues, into scratch memory (the cache is not touched). */
#include "weights/experts_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"

int ms_expert_store_probe(const ms_expert_store *st, const ms_checkpoint *ck, int n, int depth,
                          double *bytes_per_s, ms_err *err)
{
    ms_expert_seg segs[MS_EXPERT_MAX_SEGS];
    int ns, nf = ck->n_files, rc = -1;
    uint64_t max = 0;
    for (int l = 0; l < st->n_layers; l++)
        for (int e = 0; e < st->n_experts; e++) {
            uint64_t b = ms_expert_plan(st, l, e, segs, &ns);
            max = b > max ? b : max;
        }
    int total = st->n_layers * st->n_experts;
    n = n < total ? n : total;
    depth = depth < n ? depth : n;
    int *fd = calloc((size_t)nf, sizeof *fd);
    uint8_t *buf = NULL;
    ms_io *io = NULL;
    ms_io_req *req = calloc((size_t)depth * MS_EXPERT_MAX_SEGS, sizeof *req);
    int *rem = calloc((size_t)depth, sizeof *rem); /* segments in flight per buffer */
    if (!fd || !req || !rem ||
        posix_memalign((void **)&buf, MS_EXPERT_ALIGN, (size_t)depth * max)) {
        ms_err_set(err, MS_E_NOMEM, "disk probe buffers");
        goto out;
    }
    for (int f = 0; f < nf; f++) {
        fd[f] = open(ck->files[f].path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (fd[f] < 0)
            fd[f] = ck->files[f].fd;
    }
    if (ms_io_open_uring(depth * MS_EXPERT_MAX_SEGS, 0, &io, err) &&
        ms_io_open_threads(depth, &io, err))
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
            ms_expert_plan(st, k / st->n_experts, k % st->n_experts, segs, &ns);
            rem[b] = ns;
            for (int g = 0; g < ns; g++) {
                ms_io_req *r = &req[b * MS_EXPERT_MAX_SEGS + g];
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

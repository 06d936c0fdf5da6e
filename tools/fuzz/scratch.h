/* The fuzz targets' scratch files: paths under /dev/shm named for the target
 * and the process, removed (whole folders, links not followed) when the run
 * exits, so that runs leave nothing behind. Header-only: each target is one
 * translation unit. */
#ifndef MS_FUZZ_SCRATCH_H
#define MS_FUZZ_SCRATCH_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char scratch_list[8][128];
static int scratch_n;

static int scratch_rm(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    remove(p);
    return 0;
}

static void scratch_clean(void)
{
    for (int i = 0; i < scratch_n; i++)
        nftw(scratch_list[i], scratch_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* /dev/shm/moestream-fuzz-NAME.PID (made by the caller, a file or a folder),
 * removed at exit. */
static const char *scratch_path(const char *name)
{
    if (scratch_n == 8)
        abort();
    if (!scratch_n)
        atexit(scratch_clean);
    char *p = scratch_list[scratch_n++];
    snprintf(p, sizeof scratch_list[0], "/dev/shm/moestream-fuzz-%s.%d", name, (int)getpid());
    return p;
}

#endif

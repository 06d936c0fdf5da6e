/* Monotonic wall clock in seconds. */
#ifndef MS_BASE_CLOCK_H
#define MS_BASE_CLOCK_H

#include <time.h>

static inline double ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif

/* SIGBUS on a mapped shard: say which file, offset and tensor, then exit.
 * A page of a memory-mapped file that can no longer be read (the file was
 * truncated or the device failed) cannot be recovered from, but it must not
 * look like a crash. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "format/safetensors.h"
#include "moestream.h"

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    char where[1024], line[1200];
    if (!ms_st_describe_address(si->si_addr, where, sizeof where))
        snprintf(where, sizeof where, "address %p outside any model file", si->si_addr);
    int n = snprintf(line, sizeof line, "moestream: cannot read model data (%s): the shard "
                     "was truncated or became unreadable while in use\n", where);
    if (n > 0 && write(2, line, (size_t)n) < 0)
        _exit(1);
    _exit(1);
}

void ms_install_fault_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

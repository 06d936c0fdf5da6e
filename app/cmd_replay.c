/* moestream replay: the hit rates of a routing trace under the engine's
 * policy, LRU, the best fixed set and the optimum (Belady). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_replay(int argc, char **argv)
{
    cli_args a;
    int rc = cli_parse(CMD_REPLAY, argc, argv, &a);
    if (rc)
        return cli_exit(rc);
    const char *path = a.model;
    int64_t slots = a.slots, ram = a.ram;
    ms_error err = {0};
    ms_replay_result r;
    if (ms_replay(path, slots, ram, &r, &err))
        return cli_fail(&err);
    printf("requests %lld  slots %lld  engine policy hit %.1f%%  LRU hit %.1f%%  "
           "fixed set hit %.1f%%  optimal (Belady) hit %.1f%%\n", (long long)r.requests,
           (long long)r.slots, 100 * r.engine_hit, 100 * r.lru_hit, 100 * r.fixed_hit,
           100 * r.opt_hit);
    return 0;
}

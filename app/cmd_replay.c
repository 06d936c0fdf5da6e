/* moestream replay: LRU and optimal (Belady) hit rates of a routing trace. */
#include <stdio.h>
#include <string.h>

#include "base/sysmem.h"
#include "cli.h"

int cmd_replay(int argc, char **argv)
{
    const char *path = NULL;
    int64_t slots = 0, ram = 0;
    for (int i = 1; i < argc; i++) {
        int miss = 0;
        const char *v;
        if ((v = cli_value(argc, argv, &i, "--slots", &miss))) {
            if (cli_parse_i64(v, 1, INT32_MAX, &slots))
                return cli_usage_error("replay", "--slots expects a positive integer");
        } else if ((v = cli_value(argc, argv, &i, "--ram", &miss))) {
            if ((ram = ms_parse_size(v)) <= 0)
                return cli_usage_error("replay", "--ram expects a size like 6G");
        } else if (miss) {
            return cli_usage_error("replay", "%s needs a value", argv[i]);
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            return cli_usage_error("replay", "unexpected argument \"%s\"", argv[i]);
        }
    }
    if (!path)
        return cli_usage_error("replay", "needs a TRACE file");
    ms_error err = {0};
    ms_replay_result r;
    if (ms_replay(path, slots, ram, &r, &err))
        return cli_fail(&err);
    printf("requests %lld  slots %lld  engine policy hit %.1f%%  LRU hit %.1f%%  "
           "optimal (Belady) hit %.1f%%\n", (long long)r.requests, (long long)r.slots,
           100 * r.engine_hit, 100 * r.lru_hit, 100 * r.opt_hit);
    return 0;
}

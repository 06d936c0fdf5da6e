/* moestream inspect MODEL_DIR: the L0 report; exit 0 only when it passes. */
#include <stdio.h>

#include "cli.h"

int cmd_inspect(int argc, char **argv)
{
    if (argc != 2)
        return cli_usage_error("inspect", "expected exactly one MODEL_DIR");
    ms_error err = {0};
    if (ms_inspect(argv[1], stdout, &err)) {
        fflush(stdout);
        return cli_fail(&err);
    }
    return 0;
}

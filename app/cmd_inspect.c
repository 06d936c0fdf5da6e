/* moestream inspect MODEL_DIR: the L0 report; exit 0 only when it passes. */
#include <stdio.h>

#include "cli.h"

int cmd_inspect(int argc, char **argv)
{
    cli_args a;
    int rc = cli_parse(CMD_INSPECT, argc, argv, &a);
    if (rc)
        return cli_exit(rc);
    ms_error err = {0};
    if (ms_inspect(a.model, stdout, &err)) {
        fflush(stdout);
        return cli_fail(&err);
    }
    return 0;
}

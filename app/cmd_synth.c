/* moestream synth: write a random-weight checkpoint with a released config. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_synth(int argc, char **argv)
{
    cli_args a;
    int rc = cli_parse(CMD_SYNTH, argc, argv, &a);
    if (rc)
        return cli_exit(rc);
    ms_synth_opts o = {.like = a.like, .config_path = a.synth_config, .out_dir = a.out,
                       .layers = (int)a.layers, .seed = (uint64_t)a.seed,
                       .shard_bytes = a.shard_size, .force = a.force, .log = cli_log,
                       .progress = cli_progress(a.progress)};
    if (!o.out_dir || (!o.like == !o.config_path)) {
        fprintf(stderr, "moestream synth: needs --out DIR and one of --like NAME or --config "
                "FILE; built-in names:");
        for (int i = 0; ms_synth_name(i); i++)
            fprintf(stderr, " %s", ms_synth_name(i));
        fprintf(stderr, "\n");
        return 2;
    }
    ms_error err = {0};
    return ms_synth(&o, &err) ? cli_fail(&err) : 0;
}

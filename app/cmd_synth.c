/* moestream synth: write a random-weight checkpoint with a released config. */
#include <stdio.h>
#include <string.h>

#include "base/sysmem.h"
#include "cli.h"

int cmd_synth(int argc, char **argv)
{
    ms_synth_opts o = {.log = cli_log, .progress = cli_progress(0)};
    for (int i = 1; i < argc; i++) {
        int miss = 0;
        const char *v;
        int64_t iv;
        if ((v = cli_value(argc, argv, &i, "--like", &miss))) o.like = v;
        else if ((v = cli_value(argc, argv, &i, "--config", &miss))) o.config_path = v;
        else if ((v = cli_value(argc, argv, &i, "--out", &miss))) o.out_dir = v;
        else if ((v = cli_value(argc, argv, &i, "--layers", &miss))) {
            if (cli_parse_i64(v, 1, 100000, &iv))
                return cli_usage_error("synth", "--layers expects a positive integer");
            o.layers = (int)iv;
        } else if ((v = cli_value(argc, argv, &i, "--seed", &miss))) {
            if (cli_parse_i64(v, 0, INT64_MAX, &iv))
                return cli_usage_error("synth", "--seed expects an integer >= 0");
            o.seed = (uint64_t)iv;
        } else if ((v = cli_value(argc, argv, &i, "--shard-size", &miss))) {
            if ((o.shard_bytes = ms_parse_size(v)) <= 0)
                return cli_usage_error("synth", "--shard-size expects a size like 4G");
        } else if (miss)
            return cli_usage_error("synth", "%s needs a value", argv[i]);
        else if (!strcmp(argv[i], "--force"))
            o.force = 1;
        else if (!strcmp(argv[i], "--progress"))
            o.progress = cli_progress(1);
        else
            return cli_usage_error("synth", "unexpected argument \"%s\"", argv[i]);
    }
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

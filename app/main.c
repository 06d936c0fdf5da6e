/* moestream: command dispatch. Each command lives in its own file and uses
 * only the public API (include/moestream.h); its options are rows of the
 * one table in options.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_overview(stderr);
        return 2;
    }
    ms_install_fault_handler();
    const char *c = argv[1];
    if (!strcmp(c, "--version") || !strcmp(c, "version")) {
        printf("moestream %s (kernels: %s; --precision fast: %s; --precision int8: %s)\n",
               MS_VERSION, ms_kernel_path(),
               ms_kernels_precision_available(MS_PRECISION_FAST) ? "available" : "not on this CPU",
               ms_kernels_precision_available(MS_PRECISION_INT8) ? "available" : "not on this CPU");
        return 0;
    }
    if (!strcmp(c, "help") || !strcmp(c, "--help") || !strcmp(c, "-h")) {
        if (argc > 2 && !strcmp(argv[2], "--man")) {
            cli_man(stdout);
            return 0;
        }
        for (int i = 0; argc > 2 && i < CLI_N_CMDS; i++)
            if (!strcmp(argv[2], cli_commands[i].name)) {
                cli_help(stdout, i);
                return 0;
            }
        if (argc > 2) {
            fprintf(stderr, "moestream help: no command is called \"%s\"\n", argv[2]);
            return 2;
        }
        cli_overview(stdout);
        return 0;
    }
    for (int i = 0; i < CLI_N_CMDS; i++)
        if (!strcmp(c, cli_commands[i].name))
            return cli_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "moestream: unknown command \"%s\" (moestream help lists them)\n", c);
    return 2;
}

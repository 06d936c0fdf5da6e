/* Shared helpers of the command-line front end (over the public API only). */
#ifndef MS_APP_CLI_H
#define MS_APP_CLI_H

#include <stdint.h>

#include "moestream.h"

/* Prints "moestream: <msg>" on stderr and returns the exit status for it. */
int cli_fail(const ms_error *err);
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Option parsing: cli_arg(argc, argv, &i, "--name") returns the value
 * following argv[i] when argv[i] is --name (advancing i), NULL otherwise;
 * *missing is set when the value is absent. */
const char *cli_value(int argc, char **argv, int *i, const char *name, int *missing);
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_f64(const char *s, double lo, double hi, double *out);

/* Reads decimal token ids separated by white space; caller frees *ids. */
int cli_read_ids(const char *path, int32_t **ids, int64_t *n, ms_error *err);

int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_render(int argc, char **argv);

#endif

/* Shared helpers of the command-line front end (over the public API only). */
#ifndef MS_APP_CLI_H
#define MS_APP_CLI_H

#include <stdint.h>

#include "moestream.h"

/* Prints "moestream: <msg>" on stderr and returns the exit status for it. */
int cli_fail(const ms_error *err);
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The engine's notices function of every command: "moestream: <line>" on
 * stderr (ms_engine_opts.log). */
void cli_log(void *user, const char *line);
/* The progress function of every command: one line on stderr, updated in
 * place and erased when done; only on a terminal unless forced
 * (--progress). NULL when it is not to be shown. */
ms_progress_fn cli_progress(int force);

/* Option parsing: cli_arg(argc, argv, &i, "--name") returns the value
 * following argv[i] when argv[i] is --name (advancing i), NULL otherwise;
 * *missing is set when the value is absent. */
const char *cli_value(int argc, char **argv, int *i, const char *name, int *missing);
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_f64(const char *s, double lo, double hi, double *out);

/* --precision exact|fast into *precision (enum ms_precision); 0, or an exit
 * status after printing the usage error. */
int cli_parse_precision(const char *cmd, const char *v, int *precision);

/* --experts auto|pagecache|cache into *placement (enum ms_placement); 0, or
 * an exit status after printing the usage error. */
int cli_parse_placement(const char *cmd, const char *v, int *placement);

/* --kv f32|bf16|fp8 into *kv (enum ms_kv_format); 0, or an exit status
 * after printing the usage error. */
int cli_parse_kv(const char *cmd, const char *v, int *kv);

/* The text of a file the user names, "-" for standard input (to its end, at
 * most 64 MB); caller frees *text. */
int cli_read_text(const char *path, char **text, ms_error *err);

/* Reads decimal token ids separated by white space; caller frees *ids. */
int cli_read_ids(const char *path, int32_t **ids, int64_t *n, ms_error *err);

/* The prompt of a conversation (role / content / reasoning messages) for
 * the engine's model: its chat template (ms_chat_prompt), thinking and
 * effort passed as template variables (thinking -1, effort NULL: the
 * template's defaults). When the folder has no template, says once on
 * stderr that the family's built-in format is used. */
int cli_chat_prompt(const ms_engine *eng, const ms_chat_msg *m, int n, int thinking,
                    const char *effort, char **text, ms_error *err);
/* The same for an OpenAI request body already as JSON text. */
int cli_chat_prompt_json(const ms_engine *eng, const char *request_json, int thinking,
                         const char *effort, char **text, ms_error *err);

/* Options of run, logits and chat (opts.c). */
typedef struct run_opts {
    const char *model, *prompt_ids, *prompt_text, *prompt_file, *out, *dump, *trace;
    const char *system, *effort, *chat_template, *json_schema;
    int json_any;                                    /* --json: any JSON object */
    int placement, no_prefetch, buffered, precision, kv;
    int64_t ram, io_threads, cache_slots, reads, span, early;
    int64_t n_predict, ctx, threads, feed;          /* n_predict -1: the command's default */
    int ids, ignore_eos, stats, raw, hide_reasoning, thinking, no_reuse, progress;
    int have_temp, have_top_p, have_top_k, have_min_p, have_seed;
    int have_rep, have_presence, have_freq;
    ms_sampling sampling;
} run_opts;

/* Parses argv (argv[0] is the command); returns 0 or an exit status. */
int run_opts_parse(const char *cmd, int argc, char **argv, run_opts *o);
/* Opens the engine and a session as the options say. */
int run_opts_open(const run_opts *o, ms_engine **eng, ms_session **s, ms_error *err);
/* The checkpoint's sampling defaults overridden by the flags given. */
void run_opts_sampling(const run_opts *o, const ms_engine *eng, ms_sampling *sp);
/* Speed, time split and expert-tier statistics, on stderr. */
void run_opts_print_stats(const ms_session *s);

int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_parse(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif

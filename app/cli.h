/* Shared helpers of the command-line front end (over the public API only). */
#ifndef MS_APP_CLI_H
#define MS_APP_CLI_H

#include <stdint.h>

#include "moestream.h"
#include "options.h"

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

/* Numbers of option values: 0, or -1 when s is not one in [lo, hi]. */
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_f64(const char *s, double lo, double hi, double *out);

/* The text of a file the user names, "-" for standard input (to its end, at
 * most 64 MB); caller frees *text. */
int cli_read_text(const char *path, char **text, ms_error *err);

/* A growing byte string, kept NUL-terminated. */
typedef struct cli_buf {
    char *p;
    size_t n, cap;
} cli_buf;
/* Appends s[0..n); -1 when out of memory (b unchanged). */
int cli_buf_add(cli_buf *b, const char *s, size_t n);

/* Pseudo-random prompt ids below the vocabulary (fixed, so that runs of
 * bench and plan compare). */
void cli_synthetic_prompt(int32_t *ids, int64_t n, int32_t vocab);
/* Seconds on the monotonic clock. */
double cli_now(void);

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

/* What the options of run, logits, chat, serve and bench mean (opts.c). */
/* Opens the engine and a session as the options say. */
int cli_open(const cli_args *a, ms_engine **eng, ms_session **s, ms_error *err);
/* The engine's options as the flags say. */
ms_engine_opts cli_engine_opts(const cli_args *a);
/* $XDG_STATE_HOME/moestream[/dir]/name (~/.local/state by default), the
 * folders made; "" when there is no home. */
void cli_state_path(const char *dir, const char *name, char *path, size_t cap);
/* The checkpoint's sampling defaults overridden by the flags given. */
void cli_sampling(const cli_args *a, const ms_engine *eng, ms_sampling *sp);
/* What an opt-in precision does to the products, for --stats and bench ("" when exact). */
const char *cli_precision_note(void);
/* Speed, time split and expert-tier statistics, on stderr. */
void cli_print_stats(const ms_session *s);

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
int cmd_plan(int argc, char **argv);

#endif

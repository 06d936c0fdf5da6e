/* The command line of every command from one table (options.c).
 *
 * Each option is one row: its names (a canonical long name and aliases,
 * llama.cpp's short forms among them), its type and range, its default, its
 * help text, its group and the commands that take it. Parsing, validation,
 * `moestream CMD --help`, `moestream help` and the man page are all made
 * from the rows, so no command can drift from another. A config file
 * (`--config-file FILE`, $MOESTREAM_CONFIG, or ~/.config/moestream/config
 * when present) gives the same options as `name = value` lines, globally
 * or in a `[command]` section; flags on the command line win. */
#ifndef MS_APP_OPTIONS_H
#define MS_APP_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

enum cli_cmd {
    CMD_RUN, CMD_CHAT, CMD_LOGITS, CMD_SERVE, CMD_BENCH, CMD_PLAN, CMD_INSPECT, CMD_TOKENIZE,
    CMD_RENDER, CMD_PARSE, CMD_SYNTH, CMD_REPLAY, CLI_N_CMDS
};

#define CLI_LIST_MAX 32
typedef struct cli_list {
    const char *v[CLI_LIST_MAX];
    int n;
} cli_list;

#define CLI_MAX_OPTS 160

/* Everything any command can be given. Unset strings are NULL, unset
 * numbers without a default 0 (the library's "choose for me"), unset
 * choices without a default -1. */
typedef struct cli_args {
    int cmd;                       /* enum cli_cmd */
    const char *model;             /* the positional argument (MODEL_DIR, TRACE) */
    /* input */
    const char *prompt_text, *prompt_file, *prompt_ids, *request, *messages, *tools;
    /* output */
    const char *out, *dump, *trace, *svg, *expert_usage;
    int ids, stats, progress, raw, hide_reasoning, dry_run, no_config;
    /* template */
    const char *system, *effort, *chat_template, *json_schema, *bos_token, *eos_token, *date,
        *template_name, *family, *format;
    int thinking, json_any, no_generation_prompt, opens_reasoning, partial;
    /* model and placement */
    int placement, precision, kv, no_prefetch, buffered, no_reuse, pipeline;
    const char *stages;
    int64_t micro_batches, stage_timeout;
    int64_t ram, io_threads, cache_slots, reads, span, early, threads;
    /* context and sampling */
    int64_t n_predict, ctx, feed, top_k, seed;
    double temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int ignore_eos;
    /* server */
    const char *host, *api_key, *name, *prompt_cache_dir;
    int64_t port, max_body, queue, max_tokens_cap, timeout, prompt_cache, parallel,
        prompt_cache_disk;
    double keepalive, request_timeout, read_timeout;
    cli_list allow_host, cors;
    /* bench, plan, synth, replay */
    int64_t bench_prompt, bench_rows, context, disk, layers, shard_size, slots;
    int floor, force, products;
    const char *like, *synth_config, *budgets;
    const char *config_file;       /* the config file read, NULL when none */
    unsigned char given[CLI_MAX_OPTS]; /* per row: 0 default, 1 config file, 2 flag */
} cli_args;

/* Parses argv (argv[0] is the command's name) for command `cmd` into *a,
 * over the config file. Returns 0 to go on; CLI_DONE when --help or
 * --dry-run was answered (exit 0); else the exit status of a usage error
 * (2), already printed. */
#define CLI_DONE (-1)
int cli_parse(int cmd, int argc, char **argv, cli_args *a);
static inline int cli_exit(int rc)
{
    return rc == CLI_DONE ? 0 : rc;
}

/* Whether option `name` (any of its names) was given, by a flag or the
 * config file, rather than left at its default. */
int cli_given(const cli_args *a, const char *name);

/* The command `moestream CMD` runs, its entry point and summary. */
typedef struct cli_command {
    const char *name;
    int (*fn)(int, char **);
    const char *positional;        /* "MODEL_DIR", "[MODEL_DIR]", "TRACE" or "" */
    const char *summary;           /* one line */
    const char *more;              /* a paragraph for --help and the man page, or NULL */
} cli_command;
extern const cli_command cli_commands[CLI_N_CMDS];

/* `moestream CMD --help`: the usage and the options of one command, by group. */
void cli_help(FILE *f, int cmd);
/* `moestream help`: every command with its summary. */
void cli_overview(FILE *f);
/* `moestream help --man`: the manual page (troff, man(7) macros). */
void cli_man(FILE *f);

#endif

/* The option table of every command, and what is made from it: parsing and
 * validation of argv and of the config file, `CMD --help`, `help` and the
 * manual page. See options.h. */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"

/* ---- the commands ---------------------------------------------------- */

const cli_command cli_commands[CLI_N_CMDS] = {
    [CMD_RUN] = {"run", cmd_run, "MODEL_DIR", "generate an answer to one prompt",
                 "The prompt goes through the checkpoint's chat template (unless --raw) and its "
                 "tokenizer; the answer streams on stdout as it is made, the reasoning on stderr. "
                 "Exit status: 0 done, 1 error, 2 usage, 3 context full, 130/143 stopped by "
                 "SIGINT/SIGTERM (the output so far is written)."},
    [CMD_CHAT] = {"chat", cmd_chat, "MODEL_DIR", "talk with the model, turn by turn",
                  "On a terminal: a line editor with history (saved under "
                  "$XDG_STATE_HOME/moestream), pastes of any length as one turn, \"\"\" to start "
                  "and end a multi-line message, /help for the commands; Ctrl-C stops an answer "
                  "and keeps the conversation, Ctrl-D ends. Piped input: one turn per line."},
    [CMD_LOGITS] = {"logits", cmd_logits, "MODEL_DIR",
                    "write the logits of every prompt position (float32 rows)", NULL},
    [CMD_SERVE] = {"serve", cmd_serve, "MODEL_DIR",
                   "an OpenAI-compatible HTTP server (chat, completions, tools) with a chat page",
                   "Listens on 127.0.0.1 unless --host says otherwise; the API key can also come "
                   "from $MOESTREAM_API_KEY."},
    [CMD_BENCH] = {"bench", cmd_bench, "MODEL_DIR",
                   "measure prefill and decode speed, bytes read and hit rates (a table)", NULL},
    [CMD_PLAN] = {"plan", cmd_plan, "MODEL_DIR",
                  "predict decode speed and hit rate at a range of memory budgets",
                  "Measures the disk at expert-sized reads and the memory bandwidth, takes a "
                  "routing trace (--trace, or a short run it records), replays it at each budget "
                  "and prints the expected hit rate, bytes read per token and decode speed, with "
                  "the budget it recommends for --ram."},
    [CMD_INSPECT] = {"inspect", cmd_inspect, "MODEL_DIR",
                     "check a checkpoint folder against its family (the L0 report)", NULL},
    [CMD_TOKENIZE] = {"tokenize", cmd_tokenize, "MODEL_DIR",
                      "print the token ids of a text, as HF tokenizers encode it", NULL},
    [CMD_RENDER] = {"render", cmd_render, "[MODEL_DIR]",
                    "print the prompt a chat template makes of a request",
                    "From MODEL_DIR's template or --chat-template-file with --request FILE; or "
                    "a family's built-in format with --family MODEL_TYPE --messages FILE."},
    [CMD_PARSE] = {"parse", cmd_parse, "[MODEL_DIR]",
                   "turn a model's output into the OpenAI message it stands for",
                   "Content, reasoning and tool calls, in the tool-call syntax of MODEL_DIR or "
                   "of --format NAME."},
    [CMD_SYNTH] = {"synth", cmd_synth, "",
                   "write a random-weight checkpoint with a released configuration", NULL},
    [CMD_REPLAY] = {"replay", cmd_replay, "TRACE",
                    "hit rates of a recorded expert routing trace (the engine's, LRU, the best fixed "
                    "set, the optimum)",
                    NULL},
};

/* ---- the table --------------------------------------------------------- */

enum opt_type { T_FLAG, T_INT, T_FLOAT, T_SIZE, T_STR, T_CHOICE, T_LIST };
enum opt_group {
    G_INPUT, G_SAMPLING, G_TEMPLATE, G_CONTEXT, G_MODEL, G_OUTPUT, G_SERVER, G_MEASURE,
    G_SYNTH, G_GENERAL, G_N
};
static const char *const group_name[G_N] = {
    "input", "sampling", "chat template and reasoning", "context", "model and placement",
    "output", "server", "measurement", "checkpoint", "general",
};

typedef struct cli_opt {
    const char *name;     /* canonical: messages, config keys, --dry-run */
    const char *alias;    /* other names, space separated, or NULL */
    int type, group;
    unsigned cmds;        /* bit per enum cli_cmd */
    size_t off;           /* of the field in cli_args */
    const char *meta;     /* the value's name in the help */
    double lo, hi;        /* range of T_INT, T_FLOAT and T_SIZE */
    const char *choices;  /* T_CHOICE: "a|b|c", stored as base + index */
    int base;
    const char *def;      /* parsed like a flag's value before anything else */
    const char *help;
} cli_opt;

#define B(c) (1u << (c))
#define GEN (B(CMD_RUN) | B(CMD_CHAT) | B(CMD_SERVE))            /* generate text */
#define ENG (GEN | B(CMD_LOGITS) | B(CMD_BENCH) | B(CMD_PLAN))   /* open an engine */
#define ALL ((1u << CLI_N_CMDS) - 1)
#define AT(f) offsetof(cli_args, f)
#define BIG 1e12

static const cli_opt opts[] = {
    /* input */
    {"--prompt", "-p", T_STR, G_INPUT, B(CMD_RUN), AT(prompt_text), "TEXT", 0, 0, NULL, 0, NULL,
     "the prompt (\"-\": read standard input)"},
    {"--file", "-f", T_STR, G_INPUT, B(CMD_RUN), AT(prompt_file), "FILE", 0, 0, NULL, 0, NULL,
     "the prompt's text from FILE (\"-\": standard input)"},
    {"--prompt-ids", NULL, T_STR, G_INPUT, B(CMD_RUN) | B(CMD_LOGITS), AT(prompt_ids), "FILE", 0,
     0, NULL, 0, NULL, "the prompt as token ids (decimal, white space between), fed as given"},
    {"--text", "-p --prompt", T_STR, G_INPUT, B(CMD_TOKENIZE), AT(prompt_text), "TEXT", 0, 0,
     NULL, 0, NULL, "the text to tokenize"},
    {"--text-file", "-f --file", T_STR, G_INPUT, B(CMD_TOKENIZE) | B(CMD_PARSE), AT(prompt_file),
     "FILE", 0, 0, NULL, 0, NULL, "the text from FILE (\"-\": standard input)"},
    {"--request", NULL, T_STR, G_INPUT, B(CMD_RENDER), AT(request), "FILE", 0, 0, NULL, 0, NULL,
     "an OpenAI chat request (JSON: messages, tools, ...)"},
    {"--messages", NULL, T_STR, G_INPUT, B(CMD_RENDER), AT(messages), "FILE", 0, 0, NULL, 0, NULL,
     "a JSON array of messages, for --family"},
    {"--tools", NULL, T_STR, G_INPUT, B(CMD_PARSE), AT(tools), "FILE", 0, 0, NULL, 0, NULL,
     "the request's tools (JSON), to check the calls' arguments against"},
    {"--trace", NULL, T_STR, G_INPUT, B(CMD_PLAN), AT(trace), "FILE", 0, 0, NULL, 0, NULL,
     "a routing trace recorded with --trace (default: a short run recorded now)"},

    /* sampling */
    {"--n-predict", "-n", T_INT, G_SAMPLING, B(CMD_RUN), AT(n_predict), "N", 0, INT32_MAX, NULL,
     0, "256", "tokens to generate at most"},
    {"--n-predict", "-n", T_INT, G_SAMPLING, B(CMD_CHAT), AT(n_predict), "N", 0, INT32_MAX, NULL,
     0, "4096", "tokens to generate at most per answer"},
    {"--n-predict", "-n", T_INT, G_SAMPLING, B(CMD_SERVE), AT(n_predict), "N", 0, INT32_MAX,
     NULL, 0, NULL, "max_tokens of requests that give none (default: to the end of the context)"},
    {"--temp", NULL, T_FLOAT, G_SAMPLING, GEN, AT(temp), "T", 0, 100, NULL, 0, NULL,
     "temperature; 0 is greedy (default: the checkpoint's generation_config.json)"},
    {"--top-p", NULL, T_FLOAT, G_SAMPLING, GEN, AT(top_p), "P", 1e-9, 1, NULL, 0, NULL,
     "nucleus sampling (default: the checkpoint's)"},
    {"--top-k", NULL, T_INT, G_SAMPLING, GEN, AT(top_k), "K", 0, INT32_MAX, NULL, 0, NULL,
     "sample among the K likeliest; 0 is all (default: the checkpoint's)"},
    {"--min-p", NULL, T_FLOAT, G_SAMPLING, GEN, AT(min_p), "P", 0, 1, NULL, 0, NULL,
     "drop tokens below P times the likeliest"},
    {"--seed", "-s", T_INT, G_SAMPLING, GEN, AT(seed), "S", 0, 9.2e18, NULL, 0, NULL,
     "the sampler's seed"},
    {"--repeat-penalty", NULL, T_FLOAT, G_SAMPLING, GEN, AT(repeat_penalty), "R", 0, 10, NULL, 0,
     NULL, "divide the logits of tokens already seen by R"},
    {"--presence-penalty", NULL, T_FLOAT, G_SAMPLING, GEN, AT(presence_penalty), "P", -2, 2, NULL,
     0, NULL, "subtract P from tokens already seen"},
    {"--frequency-penalty", NULL, T_FLOAT, G_SAMPLING, GEN, AT(frequency_penalty), "F", -2, 2,
     NULL, 0, NULL, "subtract F per earlier occurrence"},
    {"--ignore-eos", NULL, T_FLAG, G_SAMPLING, GEN, AT(ignore_eos), NULL,
     0, 0, NULL, 0, NULL, "keep generating past the end-of-turn token"},

    /* chat template and reasoning */
    {"--system", NULL, T_STR, G_TEMPLATE, B(CMD_RUN) | B(CMD_CHAT), AT(system), "TEXT", 0, 0,
     NULL, 0, NULL, "a system message before the conversation"},
    {"--think", "--thinking", T_CHOICE, G_TEMPLATE, GEN | B(CMD_RENDER), AT(thinking), "on|off",
     0, 0, "off|on", 0, NULL, "reasoning on or off, for templates that switch it "
     "(default: the template's)"},
    {"--reasoning-effort", NULL, T_STR, G_TEMPLATE, GEN | B(CMD_RENDER), AT(effort), "E", 0, 0,
     NULL, 0, NULL, "gpt-oss: low, medium or high (default: the template's)"},
    {"--chat-template-file", NULL, T_STR, G_TEMPLATE, GEN | B(CMD_RENDER), AT(chat_template),
     "FILE", 0, 0, NULL, 0, NULL, "a Jinja chat template instead of the folder's"},
    {"--raw", NULL, T_FLAG, G_TEMPLATE, B(CMD_RUN), AT(raw), NULL, 0, 0, NULL, 0, NULL,
     "the prompt is text as is: no chat template"},
    {"--json", NULL, T_FLAG, G_TEMPLATE, B(CMD_RUN), AT(json_any), NULL, 0, 0, NULL, 0, NULL,
     "constrain the answer to a JSON object"},
    {"--json-schema", NULL, T_STR, G_TEMPLATE, B(CMD_RUN), AT(json_schema), "FILE", 0, 0, NULL,
     0, NULL, "constrain the answer to the JSON schema in FILE"},
    {"--template-name", NULL, T_STR, G_TEMPLATE, B(CMD_RENDER), AT(template_name), "NAME", 0, 0,
     NULL, 0, NULL, "one of the folder's named templates (e.g. tool_use)"},
    {"--bos-token", NULL, T_STR, G_TEMPLATE, B(CMD_RENDER), AT(bos_token), "S", 0, 0, NULL, 0,
     NULL, "bos_token for the template (default: the tokenizer's)"},
    {"--eos-token", NULL, T_STR, G_TEMPLATE, B(CMD_RENDER), AT(eos_token), "S", 0, 0, NULL, 0,
     NULL, "eos_token for the template (default: the tokenizer's)"},
    {"--date", NULL, T_STR, G_TEMPLATE, B(CMD_RENDER), AT(date), "YYYY-MM-DD", 0, 0, NULL, 0,
     NULL, "today's date as templates see it (default: today)"},
    {"--no-generation-prompt", NULL, T_FLAG, G_TEMPLATE, B(CMD_RENDER), AT(no_generation_prompt),
     NULL, 0, 0, NULL, 0, NULL, "end after the last message (add_generation_prompt false)"},
    {"--family", NULL, T_STR, G_TEMPLATE, B(CMD_RENDER), AT(family), "MODEL_TYPE", 0, 0, NULL, 0,
     NULL, "the family's built-in format instead of a template"},
    {"--format", NULL, T_STR, G_TEMPLATE, B(CMD_PARSE), AT(format), "NAME", 0, 0, NULL, 0, NULL,
     "harmony, qwen3, qwen3_coder, deepseek_v3, deepseek_v3_1, longcat or glm45"},
    {"--opens-reasoning", NULL, T_FLAG, G_TEMPLATE, B(CMD_PARSE), AT(opens_reasoning), NULL, 0,
     0, NULL, 0, NULL, "the text starts inside the reasoning (the prompt opened it)"},
    {"--partial", NULL, T_FLAG, G_TEMPLATE, B(CMD_PARSE), AT(partial), NULL, 0, 0, NULL, 0, NULL,
     "the text may stop mid-message (a stream so far)"},

    /* context */
    {"--ctx", "-c --ctx-size", T_INT, G_CONTEXT, ENG, AT(ctx), "N", 1, 1.1e12,
     NULL, 0, NULL, "context in tokens (default: sized from memory, at most the model's)"},
    {"--kv", NULL, T_CHOICE, G_CONTEXT, ENG & ~B(CMD_PLAN), AT(kv), "F", 0, 0,
     "auto|f32|bf16|fp8", 0, "auto",
     "KV cache format; auto: f32 when the context fits, else bf16, and bf16 under --precision fast (said on stderr)"},
    {"--feed", NULL, T_INT, G_CONTEXT, B(CMD_RUN) | B(CMD_LOGITS), AT(feed), "N", 1, INT32_MAX,
     NULL, 0, NULL, "evaluate the prompt N tokens per call (tests; the result is the same)"},

    /* model and placement */
    {"--ram", NULL, T_SIZE, G_MODEL, ENG, AT(ram), "SIZE", 1, 1.1e15, NULL, 0, NULL,
     "memory for the expert cache, like 6G (default: what the machine or cgroup has)"},
    {"--experts", NULL, T_CHOICE, G_MODEL, ENG, AT(placement), "WHERE", 0, 0,
     "auto|pagecache|cache", 0, "auto",
     "page cache when the model fits in memory, else the engine's own cache"},
    {"--pipeline", NULL, T_FLAG, G_MODEL, ENG & ~B(CMD_PLAN), AT(pipeline), NULL, 0, 0, NULL, 0,
     NULL, "split the layers over the ranks of an MPI job (mpirun -np K moestream-mpi ...)"},
    {"--stages", NULL, T_STR, G_MODEL, ENG & ~B(CMD_PLAN), AT(stages), "LIST", 0, 0, NULL, 0,
     NULL, "--pipeline: the layers of each rank, like 0-11,12-23 (default: balanced by bytes)"},
    {"--micro-batches", NULL, T_INT, G_MODEL, ENG & ~B(CMD_PLAN), AT(micro_batches), "N", 1, 64,
     NULL, 0, NULL, "--pipeline: a call in N parts in flight (default: the number of ranks)"},
    {"--stage-timeout", NULL, T_INT, G_MODEL, ENG & ~B(CMD_PLAN), AT(stage_timeout), "S", 1,
     86400, NULL, 0, "600", "--pipeline: seconds to wait for another rank before giving up"},
    {"--threads", "-t", T_INT, G_MODEL, ENG, AT(threads), "N", 1, 64, NULL, 0, NULL,
     "compute threads (default: the CPUs we may run on)"},
    {"--precision", NULL, T_CHOICE, G_MODEL, ENG, AT(precision), "P", 0, 0, "exact|fast|int8", 0,
     "exact", "fast: bf16 dot products (AVX512-BF16); int8: MXFP4 weights against int8 "
     "activations (AVX512-VNNI or AVX2), as llama.cpp; neither exact, both said in --stats"},
    {"--io-threads", NULL, T_INT, G_MODEL, ENG, AT(io_threads), "N", 1, 256, NULL, 0, NULL,
     "read experts with N pread threads instead of io_uring"},
    {"--cache-slots", NULL, T_INT, G_MODEL, ENG, AT(cache_slots), "N", 1, INT32_MAX, NULL, 0,
     NULL, "an expert cache of exactly N experts (tests, tuning)"},
    {"--reads", NULL, T_INT, G_MODEL, ENG, AT(reads), "N", 1, 1024, NULL, 0, NULL,
     "experts of a layer read at once (default 2)"},
    {"--prefill-span", NULL, T_INT, G_MODEL, ENG, AT(span), "N", 1, 1 << 20, NULL, 0, NULL,
     "prompt positions run through a layer at once (default: sized from memory)"},
    {"--prefetch-early", NULL, T_INT, G_MODEL, ENG, AT(early), "N", 0, 64, NULL, 0, NULL,
     "decode: also prefetch N experts predicted two layers ahead"},
    {"--no-prefetch", NULL, T_FLAG, G_MODEL, ENG, AT(no_prefetch), NULL, 0, 0, NULL, 0, NULL,
     "do not prefetch the next layer's experts"},
    {"--expert-usage", NULL, T_STR, G_MODEL, ENG & ~B(CMD_PLAN), AT(expert_usage), "FILE", 0, 0,
     NULL, 0, NULL,
     "per-expert use counts kept across runs when experts stream (seed the cache at start); "
     "none: off (default: $XDG_STATE_HOME/moestream/expert-usage/MODEL for run, chat and serve; "
     "none for bench and logits)"},
    {"--buffered", NULL, T_FLAG, G_MODEL, ENG, AT(buffered), NULL, 0, 0, NULL, 0, NULL,
     "never read experts with O_DIRECT"},
    {"--no-reuse", NULL, T_FLAG, G_MODEL, B(CMD_CHAT) | B(CMD_SERVE), AT(no_reuse), NULL, 0, 0,
     NULL, 0, NULL, "evaluate every prompt whole: no reuse of the cached prefix"},

    /* output */
    {"--ids", NULL, T_FLAG, G_OUTPUT, B(CMD_RUN) | B(CMD_CHAT), AT(ids), NULL, 0, 0, NULL, 0,
     NULL, "print the generated token ids instead of text"},
    {"--hide-reasoning", NULL, T_FLAG, G_OUTPUT, B(CMD_RUN) | B(CMD_CHAT), AT(hide_reasoning),
     NULL, 0, 0, NULL, 0, NULL, "do not show the reasoning"},
    {"--stats", NULL, T_FLAG, G_OUTPUT, GEN | B(CMD_LOGITS), AT(stats), NULL, 0, 0, NULL, 0,
     NULL, "speed, time split and expert statistics on stderr"},
    {"--out", NULL, T_STR, G_OUTPUT, B(CMD_LOGITS), AT(out), "FILE", 0, 0, NULL, 0, NULL,
     "where the logits go"},
    {"--out", NULL, T_STR, G_OUTPUT, B(CMD_SYNTH), AT(out), "DIR", 0, 0, NULL, 0, NULL,
     "the checkpoint folder to write (empty or absent)"},
    {"--dump", NULL, T_STR, G_OUTPUT, B(CMD_LOGITS), AT(dump), "DIR", 0, 0, NULL, 0, NULL,
     "write every layer's activations into DIR (L1 checks)"},
    {"--trace", NULL, T_STR, G_OUTPUT, ENG & ~B(CMD_PLAN), AT(trace), "FILE", 0, 0, NULL, 0, NULL,
     "record the expert routing into FILE (for replay and plan)"},
    {"--svg", NULL, T_STR, G_OUTPUT, B(CMD_PLAN), AT(svg), "FILE", 0, 0, NULL, 0, NULL,
     "draw decode speed and hit rate against memory into FILE"},
    {"--progress", NULL, T_FLAG, G_OUTPUT, ENG | B(CMD_SYNTH), AT(progress), NULL, 0, 0, NULL, 0,
     NULL, "show the progress line also when stderr is not a terminal"},

    /* server */
    {"--host", NULL, T_STR, G_SERVER, B(CMD_SERVE), AT(host), "ADDR", 0, 0, NULL, 0, "127.0.0.1",
     "the address to listen on"},
    {"--port", NULL, T_INT, G_SERVER, B(CMD_SERVE), AT(port), "N", 0, 65535, NULL, 0, "8080",
     "the port (0: any free one, printed)"},
    {"--api-key", NULL, T_STR, G_SERVER, B(CMD_SERVE), AT(api_key), "KEY", 0, 0, NULL, 0, NULL,
     "require \"Authorization: Bearer KEY\" (default: $MOESTREAM_API_KEY)"},
    {"--name", NULL, T_STR, G_SERVER, B(CMD_SERVE), AT(name), "ID", 0, 0, NULL, 0, NULL,
     "the model id in /v1/models (default: the folder's name)"},
    {"--parallel", NULL, T_INT, G_SERVER, B(CMD_SERVE), AT(parallel), "N", 1, 16, NULL, 0, NULL,
     "sequences decoded together (default: 2 where it fits, else 1)"},
    {"--prompt-cache", NULL, T_INT, G_SERVER, B(CMD_SERVE), AT(prompt_cache), "M", 0, 16, NULL,
     0, NULL, "conversations kept for prefix reuse beyond the slots"},
    {"--prompt-cache-disk", NULL, T_SIZE, G_SERVER, B(CMD_SERVE), AT(prompt_cache_disk), "SIZE",
     1, 1.1e15, NULL, 0, NULL, "also keep conversations on disk, within SIZE, when their "
     "sessions are reused (default: off)"},
    {"--prompt-cache-dir", NULL, T_STR, G_SERVER, B(CMD_SERVE), AT(prompt_cache_dir), "DIR", 0,
     0, NULL, 0, NULL, "where (default: ~/.cache/moestream/prompt-cache/MODEL)"},
    {"--max-body", NULL, T_SIZE, G_SERVER, B(CMD_SERVE), AT(max_body), "SIZE", 1, 1.1e12, NULL, 0,
     "8M", "largest request body"},
    {"--queue", NULL, T_INT, G_SERVER, B(CMD_SERVE), AT(queue), "N", 1, 1 << 20, NULL, 0, "64",
     "requests waiting at most; more get 503"},
    {"--max-tokens-cap", NULL, T_INT, G_SERVER, B(CMD_SERVE), AT(max_tokens_cap), "N", 1,
     INT32_MAX, NULL, 0, NULL, "the most tokens any request may generate"},
    {"--request-timeout", NULL, T_FLOAT, G_SERVER, B(CMD_SERVE), AT(request_timeout), "S", 0.01,
     1e7, NULL, 0, NULL, "stop a generation after S seconds"},
    {"--read-timeout", NULL, T_FLOAT, G_SERVER, B(CMD_SERVE), AT(read_timeout), "S", 0.1, 3600,
     NULL, 0, "30", "drop a client that sends its request slower than this"},
    {"--timeout", NULL, T_INT, G_SERVER, B(CMD_SERVE), AT(timeout), "S", 1, 86400, NULL, 0, "120",
     "drop an idle connection after S seconds"},
    {"--keepalive", NULL, T_FLOAT, G_SERVER, B(CMD_SERVE), AT(keepalive), "S", 0.1, 3600, NULL, 0,
     "10", "seconds between keep-alive comments of a quiet stream"},
    {"--allow-host", NULL, T_LIST, G_SERVER, B(CMD_SERVE), AT(allow_host), "NAME", 0, 0, NULL, 0,
     NULL, "also accept this Host header (repeatable; loopback names always)"},
    {"--cors", NULL, T_LIST, G_SERVER, B(CMD_SERVE), AT(cors), "ORIGIN", 0, 0, NULL, 0, NULL,
     "allow cross-origin requests from ORIGIN (repeatable)"},

    /* measurement */
    {"--prompt", NULL, T_INT, G_MEASURE, B(CMD_BENCH) | B(CMD_PLAN), AT(bench_prompt), "N", 1,
     1 << 20, NULL, 0, "64", "prompt tokens of the prefill phase"},
    {"--n-predict", "-n", T_INT, G_MEASURE, B(CMD_BENCH) | B(CMD_PLAN), AT(n_predict), "N", 1,
     1 << 20, NULL, 0, "32", "decoded tokens"},
    {"--context", NULL, T_INT, G_MEASURE, B(CMD_BENCH), AT(context), "N", 0, 1 << 30, NULL, 0,
     NULL, "also decode at N tokens of context"},
    {"--rows", NULL, T_INT, G_MEASURE, B(CMD_BENCH), AT(bench_rows), "N", 1, 1024, NULL, 0,
     "1", "then decode N sequences together, as serve --parallel N does (one pass over the "
     "weights a step for all), against one"},
    {"--disk", NULL, T_INT, G_MEASURE, B(CMD_BENCH) | B(CMD_PLAN), AT(disk), "N", 1, 100000, NULL,
     0, NULL, "expert-sized reads of the disk measurement"},
    {"--floor", NULL, T_FLAG, G_MEASURE, B(CMD_BENCH), AT(floor), NULL, 0, 0, NULL, 0, NULL,
     "measure the memory bandwidth between phases; print decode's floor"},
    {"--products", NULL, T_FLAG, G_MEASURE, B(CMD_BENCH), AT(products), NULL, 0, 0, NULL, 0,
     NULL, "print each phase's time by kind of product: shape, ms/token, share, GB/s, GFLOP/s"},
    {"--budgets", NULL, T_STR, G_MEASURE, B(CMD_PLAN), AT(budgets), "SIZES", 0, 0, NULL, 0, NULL,
     "memory budgets to predict, like 4G,6G,8G (default: from the expert cache's least to "
     "the whole model)"},
    {"--ram", NULL, T_SIZE, G_MEASURE, B(CMD_REPLAY), AT(ram), "SIZE", 1, 1.1e15, NULL, 0, NULL,
     "a cache of SIZE bytes (default: the budget the trace was recorded with)"},
    {"--slots", NULL, T_INT, G_MEASURE, B(CMD_REPLAY), AT(slots), "N", 1, INT32_MAX, NULL, 0,
     NULL, "a cache of N experts"},

    /* checkpoint */
    {"--like", NULL, T_STR, G_SYNTH, B(CMD_SYNTH), AT(like), "NAME", 0, 0, NULL, 0, NULL,
     "a built-in released configuration (gpt-oss-20b, qwen3-30b-a3b, ...)"},
    {"--config", NULL, T_STR, G_SYNTH, B(CMD_SYNTH), AT(synth_config), "FILE", 0, 0, NULL, 0,
     NULL, "a config.json instead"},
    {"--layers", NULL, T_INT, G_SYNTH, B(CMD_SYNTH), AT(layers), "N", 1, 100000, NULL, 0, NULL,
     "keep the first N layers"},
    {"--seed", NULL, T_INT, G_SYNTH, B(CMD_SYNTH), AT(seed), "S", 0, 9.2e18, NULL, 0, NULL,
     "the weights' random seed"},
    {"--shard-size", NULL, T_SIZE, G_SYNTH, B(CMD_SYNTH), AT(shard_size), "SIZE", 1, 1.1e15, NULL,
     0, NULL, "largest safetensors shard (default: as the release)"},
    {"--force", NULL, T_FLAG, G_SYNTH, B(CMD_SYNTH), AT(force), NULL, 0, 0, NULL, 0, NULL,
     "write into a folder that is not empty"},

    /* general */
    {"--help", "-h", T_FLAG, G_GENERAL, ALL, 0, NULL, 0, 0, NULL, 0, NULL, "this help"},
    {"--config-file", NULL, T_STR, G_GENERAL, ALL, AT(config_file), "FILE", 0, 0, NULL, 0, NULL,
     "options from FILE (default: $MOESTREAM_CONFIG, else ~/.config/moestream/config when "
     "present); flags win"},
    {"--no-config-file", NULL, T_FLAG, G_GENERAL, ALL, AT(no_config), NULL, 0, 0, NULL, 0, NULL,
     "read no config file"},
    {"--dry-run", NULL, T_FLAG, G_GENERAL, ALL, AT(dry_run), NULL, 0, 0, NULL, 0, NULL,
     "print the options as they would be used (and where each came from), then exit"},
};
#define N_OPTS (sizeof opts / sizeof opts[0])
_Static_assert(N_OPTS <= CLI_MAX_OPTS, "cli_args.given has a byte per row");

/* ---- looking options up -------------------------------------------------- */

/* Whether `s` (of length n) is one of the option's names. */
static int has_name(const cli_opt *o, const char *s, size_t n)
{
    if (strlen(o->name) == n && !memcmp(o->name, s, n))
        return 1;
    for (const char *p = o->alias; p && *p;) {
        size_t l = strcspn(p, " ");
        if (l == n && !memcmp(p, s, n))
            return 1;
        p += l + (p[l] == ' ');
    }
    return 0;
}

/* The row of option s[0..n) for command cmd; NULL when it has none. */
static const cli_opt *find(int cmd, const char *s, size_t n)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if ((opts[i].cmds & B(cmd)) && has_name(&opts[i], s, n))
            return &opts[i];
    return NULL;
}

/* The commands that do take an option (for the message of a misplaced one). */
static void takers(const char *s, size_t n, char *buf, size_t cap)
{
    unsigned m = 0;
    for (size_t i = 0; i < N_OPTS; i++)
        if (has_name(&opts[i], s, n))
            m |= opts[i].cmds;
    buf[0] = 0;
    for (int c = 0; c < CLI_N_CMDS; c++)
        if (m & B(c))
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? ", " : "",
                     cli_commands[c].name);
}

int cli_given(const cli_args *a, const char *name)
{
    const cli_opt *o = find(a->cmd, name, strlen(name));
    return o && a->given[o - opts];
}

/* ---- values ------------------------------------------------------------- */

static int parse_bool(const char *v)
{
    static const char *const yes[] = {"1", "yes", "true", "on"}, *const no[] = {"0", "no",
                                                                                  "false", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i]))
            return 1;
        if (!strcasecmp(v, no[i]))
            return 0;
    }
    return -1;
}

/* Stores value v of option o (as the user named it) into a; 0, or writes
 * why not into why. */
static int set_value(const cli_opt *o, const char *as, const char *v, cli_args *a, char *why,
                     size_t cap)
{
    char *field = (char *)a + o->off;
    switch (o->type) {
    case T_FLAG: {
        int b = v ? parse_bool(v) : 1;
        if (b < 0) {
            snprintf(why, cap, "%s is a switch: its value is yes or no, not \"%s\"", as, v);
            return -1;
        }
        if (o->off) /* --help has no field */
            *(int *)field = b;
        return 0;
    }
    case T_INT: {
        int64_t x;
        if (cli_parse_i64(v, (int64_t)o->lo, (int64_t)o->hi, &x)) {
            snprintf(why, cap, "%s expects an integer in [%.0f, %.0f], got \"%s\"", as,
                     o->lo, o->hi, v);
            return -1;
        }
        *(int64_t *)field = x;
        return 0;
    }
    case T_FLOAT: {
        double x;
        if (cli_parse_f64(v, o->lo, o->hi, &x)) {
            snprintf(why, cap, "%s expects a number in [%g, %g], got \"%s\"", as, o->lo,
                     o->hi, v);
            return -1;
        }
        *(double *)field = x;
        return 0;
    }
    case T_SIZE: {
        int64_t x = ms_parse_size(v);
        if (x < (int64_t)o->lo || (double)x > o->hi) {
            snprintf(why, cap, "%s expects a size like 6G, 512M or 4096 (bytes), got \"%s\"",
                     as, v);
            return -1;
        }
        *(int64_t *)field = x;
        return 0;
    }
    case T_STR:
        *(const char **)field = v;
        return 0;
    case T_LIST: {
        cli_list *l = (cli_list *)field;
        if (l->n == CLI_LIST_MAX) {
            snprintf(why, cap, "%s is given more than %d times", as, CLI_LIST_MAX);
            return -1;
        }
        l->v[l->n++] = v;
        return 0;
    }
    case T_CHOICE: {
        int k = 0;
        for (const char *p = o->choices; *p; k++) {
            size_t l = strcspn(p, "|");
            if (strlen(v) == l && !memcmp(p, v, l)) {
                *(int *)field = o->base + k;
                return 0;
            }
            p += l + (p[l] == '|');
        }
        char list[128] = "";
        int n = 1;
        for (const char *p = o->choices; (p = strchr(p, '|')); p++)
            n++;
        k = 0;
        for (const char *p = o->choices; *p; k++) { /* "a, b or c" */
            size_t l = strcspn(p, "|");
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%.*s",
                     k == 0 ? "" : k == n - 1 ? " or " : ", ", (int)l, p);
            p += l + (p[l] == '|');
        }
        snprintf(why, cap, "%s expects %s, got \"%s\"", as, list, v);
        return -1;
    }
    }
    return -1;
}

/* ---- the config file ---------------------------------------------------- */

/* Text of the config file, kept for the strings that point into it. */
static char *config_text;

static void free_config(void)
{
    free(config_text);
}

static int config_error(const char *cmd, const char *path, int line, const char *msg)
{
    fprintf(stderr, "moestream %s: %s:%d: %s\n", cmd, path, line, msg);
    return 2;
}

/* Reads `name = value` lines (or `name` for a switch; # comments; [command]
 * sections) into a. A line outside any section names an option of some
 * command; a command that does not take it ignores it. */
static int read_config(const char *path, int required, cli_args *a)
{
    const char *cmd = cli_commands[a->cmd].name;
    ms_error err = {0};
    size_t len = 0;
    if (!required && access(path, F_OK) != 0)
        return 0;
    if (ms_read_file(path, (size_t)1 << 20, &config_text, &len, &err)) {
        fprintf(stderr, "moestream %s: config file: %s\n", cmd, err.msg);
        return 2;
    }
    atexit(free_config);
    a->config_file = path;
    int section = -1; /* -1: every command; else the command of [name] */
    char *p = config_text;
    for (int line = 1; *p; line++) {
        char *end = p + strcspn(p, "\n"), *next = *end ? end + 1 : end;
        *end = 0;
        char *hash = strchr(p, '#');
        if (hash)
            *hash = 0;
        while (*p && isspace((unsigned char)*p))
            p++;
        char *e = p + strlen(p);
        while (e > p && isspace((unsigned char)e[-1]))
            *--e = 0;
        if (!*p) {
            p = next;
            continue;
        }
        char msg[512];
        if (*p == '[') {
            if (e[-1] != ']')
                return config_error(cmd, path, line, "a section is [command]");
            e[-1] = 0;
            section = -2;
            for (int c = 0; c < CLI_N_CMDS; c++)
                if (!strcmp(p + 1, cli_commands[c].name))
                    section = c;
            if (section == -2) {
                snprintf(msg, sizeof msg, "no command is called \"%s\"", p + 1);
                return config_error(cmd, path, line, msg);
            }
            p = next;
            continue;
        }
        char *eq = strchr(p, '='), *val = NULL;
        if (eq) {
            val = eq + 1;
            for (*eq = 0; eq > p && isspace((unsigned char)eq[-1]);)
                *--eq = 0;
            while (isspace((unsigned char)*val))
                val++;
            size_t vl = strlen(val);
            if (vl >= 2 && ((val[0] == '"' && val[vl - 1] == '"') ||
                            (val[0] == '\'' && val[vl - 1] == '\''))) {
                val[vl - 1] = 0;
                val++;
            }
        }
        char key[128];
        snprintf(key, sizeof key, "--%s", p);
        size_t kl = strlen(key);
        if (section != -1 && section != a->cmd) {
            p = next;
            continue;
        }
        const cli_opt *o = find(a->cmd, key, kl);
        if (!o) {
            char who[256];
            takers(key, kl, who, sizeof who);
            if (*who && section == -1) { /* another command's option */
                p = next;
                continue;
            }
            snprintf(msg, sizeof msg, *who ? "%s is an option of %s, not of %s"
                                           : "unknown option \"%s\"", p, who, cmd);
            return config_error(cmd, path, line, msg);
        }
        if (o->group == G_GENERAL)
            return config_error(cmd, path, line, "config-file, dry-run and help are flags only");
        if (!val && o->type != T_FLAG) {
            snprintf(msg, sizeof msg, "%s needs a value (%s = %s)", p, p, o->meta);
            return config_error(cmd, path, line, msg);
        }
        if (set_value(o, p, val, a, msg, sizeof msg))
            return config_error(cmd, path, line, msg);
        a->given[o - opts] = 1;
        p = next;
    }
    return 0;
}

/* The config file to read: --config-file / --no-config-file among the
 * flags (looked for before the rest), else $MOESTREAM_CONFIG, else the
 * user's when it exists. *required: a missing file is an error. */
static const char *config_path(int argc, char **argv, int *required, char *buf, size_t cap)
{
    *required = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "--no-config-file"))
            return NULL;
        if (!strncmp(argv[i], "--config-file=", 14))
            return argv[i] + 14;
        if (!strcmp(argv[i], "--config-file") && i + 1 < argc)
            return argv[i + 1];
    }
    const char *env = getenv("MOESTREAM_CONFIG");
    if (env && *env)
        return env;
    *required = 0;
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, cap, "%s/moestream/config", xdg);
    else if (home && *home)
        snprintf(buf, cap, "%s/.config/moestream/config", home);
    else
        return NULL;
    return buf;
}

/* ---- argv --------------------------------------------------------------- */

static int usage_error(int cmd, const char *msg)
{
    return cli_usage_error(cli_commands[cmd].name, "%s", msg);
}

static void dry_run(const cli_args *a);

int cli_parse(int cmd, int argc, char **argv, cli_args *a)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    char why[512];
    for (size_t i = 0; i < N_OPTS; i++) {
        if (!(opts[i].cmds & B(cmd)))
            continue;
        if (opts[i].type == T_CHOICE)
            *(int *)((char *)a + opts[i].off) = -1;
        if (opts[i].def && set_value(&opts[i], opts[i].name, opts[i].def, a, why, sizeof why)) {
            fprintf(stderr, "moestream: the default of %s is wrong: %s\n", opts[i].name, why);
            abort(); /* a bug in the table, not the user's */
        }
    }
    int required = 0;
    char buf[1024];
    const char *cfg = config_path(argc, argv, &required, buf, sizeof buf);
    int rc = cfg ? read_config(cfg, required, a) : 0;
    if (rc)
        return rc;
    int help = 0, positional_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (positional_only || arg[0] != '-' || !arg[1]) {
            if (a->model || !*cli_commands[cmd].positional) {
                snprintf(why, sizeof why, "unexpected argument \"%s\"", arg);
                return usage_error(cmd, why);
            }
            a->model = arg;
            continue;
        }
        if (!strcmp(arg, "--")) {
            positional_only = 1;
            continue;
        }
        const char *eq = arg[1] == '-' ? strchr(arg, '=') : NULL;
        size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
        const cli_opt *o = find(cmd, arg, n);
        if (!o) {
            char who[256];
            takers(arg, n, who, sizeof who);
            if (*who)
                snprintf(why, sizeof why, "%.*s is an option of %s, not of %s", (int)n, arg, who,
                         cli_commands[cmd].name);
            else
                snprintf(why, sizeof why, "unknown option %.*s", (int)n, arg);
            return usage_error(cmd, why);
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v && o->type != T_FLAG) {
            if (i + 1 >= argc) {
                snprintf(why, sizeof why, "%.*s needs a value (%.*s %s)", (int)n, arg, (int)n,
                         arg, o->meta);
                return usage_error(cmd, why);
            }
            v = argv[++i];
        }
        if (!o->off) { /* --help */
            help = 1;
            continue;
        }
        char as[64];
        snprintf(as, sizeof as, "%.*s", (int)n, arg);
        if (set_value(o, as, v, a, why, sizeof why))
            return usage_error(cmd, why);
        a->given[o - opts] = 2;
    }
    if (help) {
        cli_help(stdout, cmd);
        return CLI_DONE;
    }
    if (!a->model && cli_commands[cmd].positional[0] && cli_commands[cmd].positional[0] != '[') {
        snprintf(why, sizeof why, "missing %s", cli_commands[cmd].positional);
        return usage_error(cmd, why);
    }
    if (a->dry_run) {
        dry_run(a);
        return CLI_DONE;
    }
    return 0;
}

/* ---- what is printed from the table -------------------------------------- */

/* The value of row o in a, as it would be written on the command line. */
static void show_value(const cli_opt *o, const cli_args *a, char *buf, size_t cap)
{
    const char *field = (const char *)a + o->off;
    switch (o->type) {
    case T_FLAG: snprintf(buf, cap, "%s", *(const int *)field ? "yes" : "no"); break;
    case T_INT:
    case T_SIZE: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)field); break;
    case T_FLOAT: snprintf(buf, cap, "%g", *(const double *)field); break;
    case T_STR: snprintf(buf, cap, "%s", *(const char *const *)field ? *(const char *const *)field
                                                                     : "(none)"); break;
    case T_LIST: {
        const cli_list *l = (const cli_list *)field;
        buf[0] = 0;
        for (int i = 0; i < l->n; i++)
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "", l->v[i]);
        if (!l->n)
            snprintf(buf, cap, "(none)");
        break;
    }
    case T_CHOICE: {
        int k = *(const int *)field - o->base;
        const char *p = o->choices;
        for (; k > 0 && *p; k--)
            p += strcspn(p, "|") + (p[strcspn(p, "|")] == '|');
        if (k < 0)
            snprintf(buf, cap, "(the default)");
        else
            snprintf(buf, cap, "%.*s", (int)strcspn(p, "|"), p);
        break;
    }
    }
}

static void dry_run(const cli_args *a)
{
    static const char *const from[] = {"default", "config file", "command line"};
    printf("moestream %s%s%s\n", cli_commands[a->cmd].name, a->model ? " " : "",
           a->model ? a->model : "");
    if (a->config_file)
        printf("config file: %s\n", a->config_file);
    for (size_t i = 0; i < N_OPTS; i++) {
        const cli_opt *o = &opts[i];
        if (!(o->cmds & B(a->cmd)) || !o->off || o->group == G_GENERAL)
            continue;
        if (!a->given[i] && !o->def)
            continue;
        char v[1024];
        show_value(o, a, v, sizeof v);
        printf("  %-24s %-24s (%s)\n", o->name, v, from[a->given[i]]);
    }
}

/* "-n, --n-predict N" */
static void left_column(const cli_opt *o, char *buf, size_t cap)
{
    buf[0] = 0;
    const char *p = o->alias;
    for (; p && *p == '-' && p[1] != '-';) { /* short aliases first */
        size_t l = strcspn(p, " ");
        snprintf(buf + strlen(buf), cap - strlen(buf), "%.*s, ", (int)l, p);
        p += l + (p[l] == ' ');
    }
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s", o->name);
    for (; p && *p;) {
        size_t l = strcspn(p, " ");
        if (p[1] == '-')
            snprintf(buf + strlen(buf), cap - strlen(buf), ", %.*s", (int)l, p);
        p += l + (p[l] == ' ');
    }
    if (o->meta)
        snprintf(buf + strlen(buf), cap - strlen(buf), " %s", o->meta);
}

/* The help text of a row with its default and range. */
static void help_text(const cli_opt *o, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", o->help);
    if (o->type == T_CHOICE && !strchr(o->meta, '|'))
        snprintf(buf + strlen(buf), cap - strlen(buf), "; %s", o->choices);
    if (o->def)
        snprintf(buf + strlen(buf), cap - strlen(buf), " (default %s)", o->def);
    if (o->type == T_INT && o->hi < 1e9)
        snprintf(buf + strlen(buf), cap - strlen(buf), " [%.0f..%.0f]", o->lo, o->hi);
    if (o->type == T_FLOAT && o->hi < 1e9)
        snprintf(buf + strlen(buf), cap - strlen(buf), " [%g..%g]", o->lo, o->hi);
}

/* Writes text from column `col` wrapped at `width`, continuation lines
 * indented to `col`. */
static void wrap(FILE *f, const char *text, int col, int width)
{
    int x = col;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        int l = (int)strcspn(p, " ");
        if (!l)
            break;
        if (x > col && x + 1 + l > width) {
            fprintf(f, "\n%*s", col, "");
            x = col;
        } else if (x > col) {
            fputc(' ', f);
            x++;
        }
        fprintf(f, "%.*s", l, p);
        x += l;
        p += l;
    }
    fputc('\n', f);
}

void cli_help(FILE *f, int cmd)
{
    const cli_command *c = &cli_commands[cmd];
    fprintf(f, "usage: moestream %s%s%s [options]\n", c->name, *c->positional ? " " : "",
            c->positional);
    fprintf(f, "%c%s.\n", toupper((unsigned char)c->summary[0]), c->summary + 1);
    if (c->more) {
        fputc('\n', f);
        wrap(f, c->more, 0, 88);
    }
    for (int g = 0; g < G_N; g++) {
        int shown = 0;
        for (size_t i = 0; i < N_OPTS; i++) {
            const cli_opt *o = &opts[i];
            if (o->group != g || !(o->cmds & B(cmd)))
                continue;
            if (!shown++)
                fprintf(f, "\n%s:\n", group_name[g]);
            char left[128], text[1024];
            left_column(o, left, sizeof left);
            help_text(o, text, sizeof text);
            int w = fprintf(f, "  %s", left);
            if (w > 30) {
                fputc('\n', f);
                w = 0;
            }
            fprintf(f, "%*s", 32 - w, "");
            wrap(f, text, 32, 100);
        }
    }
}

void cli_overview(FILE *f)
{
    fprintf(f, "moestream %s: runs Mixture-of-Experts models from their Hugging Face checkpoint "
            "folders\n\nusage: moestream COMMAND [ARGS] [options]\n\ncommands:\n", MS_VERSION);
    for (int c = 0; c < CLI_N_CMDS; c++)
        fprintf(f, "  moestream %-9s %-12s %s\n", cli_commands[c].name,
                cli_commands[c].positional, cli_commands[c].summary);
    fprintf(f, "  moestream --version\n\n`moestream COMMAND --help` lists a command's options; "
            "`moestream help --man` writes the manual page.\n");
}

/* troff text with its special characters escaped */
static void man_text(FILE *f, const char *s)
{
    if (*s == '.' || *s == '\'')
        fputs("\\&", f);
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\e", f);
        else if (*s == '-')
            fputs("\\-", f);
        else
            fputc(*s, f);
    }
}

static void man_row(FILE *f, const cli_opt *o)
{
    char left[128], text[1024];
    left_column(o, left, sizeof left);
    help_text(o, text, sizeof text);
    fputs(".TP\n.B ", f);
    man_text(f, left);
    fputs("\n", f);
    man_text(f, text);
    fputs("\n", f);
}

void cli_man(FILE *f)
{
    fprintf(f, ".TH MOESTREAM 1 \"\" \"moestream %s\" \"User Commands\"\n.SH NAME\n"
            "moestream \\- run Mixture\\-of\\-Experts models from their Hugging Face checkpoint "
            "folders\n.SH SYNOPSIS\n", MS_VERSION);
    for (int c = 0; c < CLI_N_CMDS; c++)
        fprintf(f, ".B moestream %s\n%s [\\fIoptions\\fR]\n.br\n", cli_commands[c].name,
                cli_commands[c].positional);
    fputs(".SH DESCRIPTION\nmoestream keeps the dense part of the model in memory and "
          "streams the routed experts from disk, so a model larger than memory runs; the "
          "answers are those of the reference model code.\nOptions can also come from a "
          "config file of \\fIname\\fR = \\fIvalue\\fR lines (see \\fB\\-\\-config\\-file\\fR), "
          "globally or under a [\\fIcommand\\fR] section; flags win.\n.SH COMMANDS\n", f);
    for (int c = 0; c < CLI_N_CMDS; c++) {
        const cli_command *cm = &cli_commands[c];
        fprintf(f, ".SS \"moestream %s %s\"\n", cm->name, cm->positional);
        man_text(f, cm->summary);
        fputs(".\n", f);
        if (cm->more) {
            fputs("\n", f);
            man_text(f, cm->more);
            fputs("\n", f);
        }
        for (size_t i = 0; i < N_OPTS; i++)
            if ((opts[i].cmds & B(c)) && opts[i].group != G_GENERAL)
                man_row(f, &opts[i]);
    }
    fputs(".SH GENERAL OPTIONS\n", f);
    for (size_t i = 0; i < N_OPTS; i++)
        if (opts[i].group == G_GENERAL)
            man_row(f, &opts[i]);
    fputs(".SH ENVIRONMENT\n.TP\n.B MOESTREAM_CONFIG\nthe config file to read.\n.TP\n"
          ".B MOESTREAM_API_KEY\nthe API key of serve.\n.SH FILES\n.TP\n"
          ".I ~/.config/moestream/config\noptions read by every command when present.\n.TP\n"
          ".I ~/.local/state/moestream/chat_history\nthe line history of chat.\n"
          ".SH EXIT STATUS\n0 done, 1 error, 2 usage error, 3 context full (run), 130/143 "
          "stopped by SIGINT/SIGTERM.\n", f);
}

/* moestream: command dispatch. Each command lives in its own file and uses
 * only the public API (include/moestream.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *usage;
} commands[] = {
    {"run", cmd_run,
     "run MODEL_DIR (-p TEXT | -f FILE | --prompt-ids FILE; TEXT or FILE \"-\": stdin) [-n N] "
     "[--temp T] [--top-p P] [--top-k K] "
     "[--min-p P] [--seed S]\n                [--repeat-penalty R] [--presence-penalty P] "
     "[--frequency-penalty F] [--ctx N] [--kv f32|bf16|fp8] [--raw] [--ids] [--ignore-eos]\n"
     "                [--stats] [--threads N] [--precision exact|fast] [--system TEXT] [--think on|off] "
     "[--reasoning-effort E] [--hide-reasoning]\n"
     "                [--chat-template-file FILE] [--ram SIZE] [--experts auto|pagecache|cache] [--io-threads N] "
     "[--no-prefetch] [--buffered] [--trace FILE] [--cache-slots N] [--reads N]\n"
     "                [--prefill-span N] [--prefetch-early N] [--progress]\n"
     "                llama.cpp's names work too: -c/--ctx-size N, -t N, -s N, --n-predict N, "
     "--prompt TEXT, --file FILE\n"
     "                exit status: 0 done, 1 error, 2 usage, 3 context full, 130/143 "
     "stopped by SIGINT/SIGTERM (the output so far is written)"},
    {"chat", cmd_chat,
     "chat MODEL_DIR [--system TEXT] [--think on|off] [--reasoning-effort E] "
     "[--hide-reasoning] [--chat-template-file FILE] [sampling, context and placement options as run]"},
    {"logits", cmd_logits,
     "logits MODEL_DIR --prompt-ids FILE --out FILE [--ctx N] [--kv f32|bf16|fp8] [--feed N] [--dump DIR] "
     "[--threads N]\n                [same placement options as run]"},
    {"inspect", cmd_inspect, "inspect MODEL_DIR"},
    {"tokenize", cmd_tokenize, "tokenize MODEL_DIR (--text TEXT | --text-file FILE)"},
    {"serve", cmd_serve,
     "serve MODEL_DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--max-body SIZE] "
     "[--queue N] [--name ID]\n                [--parallel N] [--prompt-cache M] "
     "[--allow-host NAME] [--cors ORIGIN] [--max-tokens-cap N]\n                "
     "[--request-timeout S] [--read-timeout S] [--timeout S] [--keepalive S] [--ctx N] [--kv F] [-n N] "
     "[sampling, --think, "
     "--reasoning-effort, --chat-template-file and placement options as run]"},
    {"render", cmd_render,
     "render (MODEL_DIR | --chat-template-file FILE) --request FILE [--bos-token S] "
     "[--eos-token S] [--date YYYY-MM-DD]\n                [--no-generation-prompt] "
     "[--template-name NAME] [--thinking on|off] [--reasoning-effort E]\n"
     "       moestream render --family MODEL_TYPE --messages FILE.json [--no-generation-prompt] "
     "[--thinking on|off] [--reasoning-effort E] [--date YYYY-MM-DD]"},
    {"parse", cmd_parse,
     "parse (MODEL_DIR | --format harmony|qwen3|qwen3_coder|deepseek_v3|deepseek_v3_1|longcat) "
     "--text-file FILE\n                [--tools FILE] [--opens-reasoning] [--partial]"},
    {"synth", cmd_synth,
     "synth (--like NAME | --config FILE) --out DIR [--layers N] [--seed S] [--shard-size SIZE] "
     "[--force] [--progress]"},
    {"replay", cmd_replay, "replay TRACE [--ram SIZE | --slots N]"},
    {"bench", cmd_bench,
     "bench MODEL_DIR [--prompt N] [-n N] [--context N] [--disk N] [--floor] "
     "[--precision exact|fast] [--kv f32|bf16|fp8] "
     "[--trace FILE] [placement options]"},
};

static int usage(FILE *out)
{
    fprintf(out, "moestream %s: runs Mixture-of-Experts models from their Hugging Face "
            "checkpoint folders\n\nusage:\n", MS_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  moestream %s\n", commands[i].usage);
    fprintf(out, "  moestream --version\n");
    return out == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(stderr);
    ms_install_fault_handler();
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("moestream %s (kernels: %s; --precision fast: %s)\n", MS_VERSION,
               ms_kernel_path(), ms_kernels_fast_available() ? "available" : "not on this CPU");
        return 0;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return usage(stdout);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            /* CMD --help / -h: that command's usage, on stdout */
            for (int a = 2; a < argc; a++)
                if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
                    printf("usage: moestream %s\n", commands[i].usage);
                    return 0;
                }
            return commands[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "moestream: unknown command \"%s\"\n", argv[1]);
    return usage(stderr);
}

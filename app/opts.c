/* Options shared by run, logits and chat, and what follows from them. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sysmem.h"
#include "cli.h"

int run_opts_parse(const char *cmd, int argc, char **argv, run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->thinking = -1;
    for (int i = 1; i < argc; i++) {
        int miss = 0;
        const char *v;
        int64_t iv;
        double dv;
#define NUM_I(name, lo, hi, dst)                                                  \
        if ((v = cli_value(argc, argv, &i, name, &miss))) {                      \
            if (cli_parse_i64(v, lo, hi, &iv))                                    \
                return cli_usage_error(cmd, "%s expects an integer in [%lld, %lld], got \"%s\"", \
                                       name, (long long)(lo), (long long)(hi), v); \
            dst = iv;                                                             \
            continue;                                                             \
        }
#define NUM_F(name, lo, hi, dst, flag)                                            \
        if ((v = cli_value(argc, argv, &i, name, &miss))) {                      \
            if (cli_parse_f64(v, lo, hi, &dv))                                    \
                return cli_usage_error(cmd, "%s expects a number in [%g, %g], got \"%s\"", \
                                       name, (double)(lo), (double)(hi), v);      \
            dst = (float)dv;                                                      \
            flag = 1;                                                             \
            continue;                                                             \
        }
        if ((v = cli_value(argc, argv, &i, "--prompt-ids", &miss))) { o->prompt_ids = v; continue; }
        if ((v = cli_value(argc, argv, &i, "-p", &miss)) ||
            (v = cli_value(argc, argv, &i, "--prompt", &miss))) {
            o->prompt_text = v; /* "-": standard input */
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "-f", &miss)) ||
            (v = cli_value(argc, argv, &i, "--file", &miss))) {
            o->prompt_file = v; /* "-": standard input */
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--out", &miss))) { o->out = v; continue; }
        if ((v = cli_value(argc, argv, &i, "--dump", &miss))) { o->dump = v; continue; }
        if ((v = cli_value(argc, argv, &i, "--trace", &miss))) { o->trace = v; continue; }
        if ((v = cli_value(argc, argv, &i, "--ram", &miss))) {
            if ((o->ram = ms_parse_size(v)) <= 0)
                return cli_usage_error(cmd, "--ram expects a size like 6G or 512M, got \"%s\"", v);
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--precision", &miss))) {
            if (cli_parse_precision(cmd, v, &o->precision))
                return 2;
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--kv", &miss))) {
            if (cli_parse_kv(cmd, v, &o->kv))
                return 2;
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--experts", &miss))) {
            if (cli_parse_placement(cmd, v, &o->placement))
                return 2;
            continue;
        }
        NUM_I("--io-threads", 1, 256, o->io_threads)
        NUM_I("--cache-slots", 1, INT32_MAX, o->cache_slots)
        NUM_I("--reads", 1, 1024, o->reads)
        NUM_I("--prefill-span", 1, 1 << 20, o->span)
        NUM_I("--prefetch-early", 0, 64, o->early)
        NUM_I("-n", 0, INT32_MAX, o->n_predict)
        NUM_I("--n-predict", 0, INT32_MAX, o->n_predict) /* llama.cpp's names */
        NUM_I("--ctx", 1, INT64_C(1) << 40, o->ctx)
        NUM_I("-c", 1, INT64_C(1) << 40, o->ctx)
        NUM_I("--ctx-size", 1, INT64_C(1) << 40, o->ctx)
        NUM_I("--threads", 1, 64, o->threads)
        NUM_I("-t", 1, 64, o->threads)
        NUM_I("--feed", 1, INT32_MAX, o->feed)
        NUM_F("--temp", 0, 100, o->sampling.temperature, o->have_temp)
        NUM_F("--top-p", 1e-9, 1, o->sampling.top_p, o->have_top_p)
        NUM_F("--min-p", 0, 1, o->sampling.min_p, o->have_min_p)
        NUM_F("--repeat-penalty", 0, 10, o->sampling.repetition_penalty, o->have_rep)
        NUM_F("--presence-penalty", -2, 2, o->sampling.presence_penalty, o->have_presence)
        NUM_F("--frequency-penalty", -2, 2, o->sampling.frequency_penalty, o->have_freq)
        if ((v = cli_value(argc, argv, &i, "--system", &miss))) { o->system = v; continue; }
        if ((v = cli_value(argc, argv, &i, "--json-schema", &miss))) {
            o->json_schema = v;
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--chat-template-file", &miss))) {
            o->chat_template = v;
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--reasoning-effort", &miss))) { o->effort = v; continue; }
        if ((v = cli_value(argc, argv, &i, "--think", &miss))) {
            if (strcmp(v, "on") && strcmp(v, "off"))
                return cli_usage_error(cmd, "--think expects on or off, got \"%s\"", v);
            o->thinking = !strcmp(v, "on");
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--top-k", &miss))) {
            if (cli_parse_i64(v, 0, INT32_MAX, &iv))
                return cli_usage_error(cmd, "--top-k expects an integer >= 0, got \"%s\"", v);
            o->sampling.top_k = (int32_t)iv;
            o->have_top_k = 1;
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--seed", &miss)) ||
            (v = cli_value(argc, argv, &i, "-s", &miss))) {
            if (cli_parse_i64(v, 0, INT64_MAX, &iv))
                return cli_usage_error(cmd, "--seed expects an integer >= 0, got \"%s\"", v);
            o->sampling.seed = (uint64_t)iv;
            o->have_seed = 1;
            continue;
        }
#undef NUM_I
#undef NUM_F
        if (miss)
            return cli_usage_error(cmd, "%s needs a value", argv[i]);
        if (!strcmp(argv[i], "--ids")) o->ids = 1;
        else if (!strcmp(argv[i], "--ignore-eos")) o->ignore_eos = 1;
        else if (!strcmp(argv[i], "--stats")) o->stats = 1;
        else if (!strcmp(argv[i], "--raw")) o->raw = 1;
        else if (!strcmp(argv[i], "--json")) o->json_any = 1;
        else if (!strcmp(argv[i], "--no-prefetch")) o->no_prefetch = 1;
        else if (!strcmp(argv[i], "--buffered")) o->buffered = 1;
        else if (!strcmp(argv[i], "--hide-reasoning")) o->hide_reasoning = 1;
        else if (!strcmp(argv[i], "--no-reuse")) o->no_reuse = 1;
        else if (!strcmp(argv[i], "--progress")) o->progress = 1;
        else if (argv[i][0] == '-')
            return cli_usage_error(cmd, "unknown option %s", argv[i]);
        else if (!o->model) o->model = argv[i];
        else return cli_usage_error(cmd, "unexpected argument \"%s\"", argv[i]);
    }
    if (!o->model)
        return cli_usage_error(cmd, "missing MODEL_DIR");
    return 0;
}

int run_opts_open(const run_opts *o, ms_engine **eng, ms_session **s, ms_error *err)
{
    ms_engine_opts eo = {.n_threads = (int)o->threads, .ctx = o->ctx,
                         .placement = o->placement, .ram = o->ram,
                         .cache_slots = (int)o->cache_slots, .reads = (int)o->reads, .span = (int)o->span,
                         .prefetch_early = (int)o->early,
                         .io_threads = (int)o->io_threads, .no_prefetch = o->no_prefetch,
                         .buffered = o->buffered, .trace_path = o->trace,
                         .precision = o->precision, .chat_template_file = o->chat_template,
                         .kv_format = o->kv, .log = cli_log,
                         .progress = o->progress < 0 ? NULL : cli_progress(o->progress)};
    ms_session_opts so = {.ctx = o->ctx, .dump_dir = o->dump};
    if (ms_engine_open(o->model, &eo, eng, err) || ms_session_open(*eng, &so, s, err))
        return -1;
    return 0;
}

void run_opts_sampling(const run_opts *o, const ms_engine *eng, ms_sampling *sp)
{
    ms_engine_default_sampling(eng, sp);
    if (o->have_temp) sp->temperature = o->sampling.temperature;
    if (o->have_top_p) sp->top_p = o->sampling.top_p;
    if (o->have_top_k) sp->top_k = o->sampling.top_k;
    if (o->have_min_p) sp->min_p = o->sampling.min_p;
    if (o->have_seed) sp->seed = o->sampling.seed;
    if (o->have_rep) sp->repetition_penalty = o->sampling.repetition_penalty;
    if (o->have_presence) sp->presence_penalty = o->sampling.presence_penalty;
    if (o->have_freq) sp->frequency_penalty = o->sampling.frequency_penalty;
}

void run_opts_print_stats(const ms_session *s)
{
    ms_stats st;
    ms_session_stats(s, &st);
    double busy = st.t_attn + st.t_experts + st.t_head + st.t_other;
    fprintf(stderr, "kernels: %s%s\n", ms_kernel_path(),
            strstr(ms_kernel_path(), "fast") ? " (precision fast: activations rounded to bf16 "
                                               "for BF16 and MXFP4 weights; not exact)" : "");
    fprintf(stderr, "context: %lld tokens, KV cache %s%s\n", (long long)ms_session_ctx(s),
            ms_session_kv_format(s),
            strcmp(ms_session_kv_format(s), "f32") ? " (rounded: not the reference)" : "");
    fprintf(stderr, "prefill: %lld tokens in %.3f s (%.2f tok/s)\n",
            (long long)st.n_prefill_tokens, st.t_prefill,
            st.t_prefill > 0 ? (double)st.n_prefill_tokens / st.t_prefill : 0.0);
    fprintf(stderr, "decode:  %lld tokens in %.3f s (%.2f tok/s)\n",
            (long long)st.n_decode_tokens, st.t_decode,
            st.t_decode > 0 ? (double)st.n_decode_tokens / st.t_decode : 0.0);
    if (busy > 0)
        fprintf(stderr, "time split: attention %.3f s (%.0f%%), experts %.3f s (%.0f%%), "
                "head %.3f s (%.0f%%), other %.3f s (%.0f%%)\n",
                st.t_attn, 100 * st.t_attn / busy, st.t_experts, 100 * st.t_experts / busy,
                st.t_head, 100 * st.t_head / busy, st.t_other, 100 * st.t_other / busy);
    int64_t toks = st.n_prefill_tokens + st.n_decode_tokens;
    if (st.expert_requests) {
        double r = 100.0 / (double)st.expert_requests;
        fprintf(stderr, "experts: %lld requests: %.1f%% hits (no read issued), %.1f%% prefetch "
                "hits, %.1f%% misses; %.1f MB read from disk (%.2f MB/token, %.1f MB of it by "
                "prefetch), waiting on I/O %.3f s (%.0f%% of expert time)\n",
                (long long)st.expert_requests, r * (double)st.expert_hits,
                r * (double)st.expert_prefetch_hits, r * (double)st.expert_misses,
                st.bytes_read / 1e6, toks ? st.bytes_read / 1e6 / toks : 0.0,
                st.prefetch_bytes / 1e6, st.t_io_wait,
                st.t_experts > 0 ? 100 * st.t_io_wait / st.t_experts : 0.0);
        if (st.prefetch_predicted)
            fprintf(stderr, "prefetch: accuracy %.1f%% (%lld of %lld predicted), %lld reads "
                    "started, %.1f MB wasted\n",
                    100.0 * st.prefetch_correct / st.prefetch_predicted,
                    (long long)st.prefetch_correct, (long long)st.prefetch_predicted,
                    (long long)st.prefetch_issued, st.prefetch_wasted_bytes / 1e6);
    }
}


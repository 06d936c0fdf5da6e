/* What the options of the commands that open an engine mean: the engine's
 * and the session's options, the sampling, the statistics printed. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "pipeline.h"

void cli_state_path(const char *dir, const char *name, char *path, size_t cap)
{
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char d[900];
    if (xdg && *xdg)
        snprintf(d, sizeof d, "%s/moestream%s%s", xdg, dir ? "/" : "", dir ? dir : "");
    else if (home && *home)
        snprintf(d, sizeof d, "%s/.local/state/moestream%s%s", home, dir ? "/" : "",
                 dir ? dir : "");
    else {
        path[0] = 0;
        return;
    }
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(d, 0700);
            *p = '/';
        }
    mkdir(d, 0700);
    snprintf(path, cap, "%s/%s", d, name);
}

/* The expert usage file: --expert-usage, "none" for none; by default one
 * per model folder (its name and a hash of its real path) for the commands
 * that generate, none for the measuring ones (bench, logits), whose runs
 * should not depend on the ones before. */
static const char *expert_usage(const cli_args *a)
{
    static char path[1200];
    if (a->expert_usage)
        return strcmp(a->expert_usage, "none") ? a->expert_usage : NULL;
    if (a->cmd != CMD_RUN && a->cmd != CMD_CHAT && a->cmd != CMD_SERVE)
        return NULL;
    char real[PATH_MAX];
    if (!a->model || !realpath(a->model, real))
        return NULL;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = real; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    const char *base = strrchr(real, '/');
    char name[300];
    snprintf(name, sizeof name, "%.255s-%08" PRIx32, base && base[1] ? base + 1 : "model", h);
    cli_state_path("expert-usage", name, path, sizeof path);
    return path[0] ? path : NULL;
}

ms_engine_opts cli_engine_opts(const cli_args *a)
{
    return (ms_engine_opts){.n_threads = (int)a->threads, .ctx = a->ctx,
                            .placement = a->placement, .ram = a->ram,
                            .cache_slots = (int)a->cache_slots, .reads = (int)a->reads,
                            .span = (int)a->span, .prefetch_early = (int)a->early,
                            .io_threads = (int)a->io_threads, .no_prefetch = a->no_prefetch,
                            .buffered = a->buffered, .trace_path = a->trace,
                            .expert_usage_file = expert_usage(a),
                            .precision = a->precision, .chat_template_file = a->chat_template,
                            .kv_format = a->kv, .log = cli_log,
                            .progress = a->progress < 0 ? NULL : cli_progress(a->progress)};
}

int cli_open(const cli_args *a, ms_engine **eng, ms_session **s, ms_error *err)
{
    ms_engine_opts eo = cli_engine_opts(a);
    ms_session_opts so = {.ctx = a->ctx, .dump_dir = a->dump};
    if (pipeline_open(a, &eo, err) || ms_engine_open(a->model, &eo, eng, err) ||
        ms_session_open(*eng, &so, s, err))
        return -1;
    return 0;
}

void cli_sampling(const cli_args *a, const ms_engine *eng, ms_sampling *sp)
{
    ms_engine_default_sampling(eng, sp);
    if (cli_given(a, "--temp")) sp->temperature = (float)a->temp;
    if (cli_given(a, "--top-p")) sp->top_p = (float)a->top_p;
    if (cli_given(a, "--top-k")) sp->top_k = (int32_t)a->top_k;
    if (cli_given(a, "--min-p")) sp->min_p = (float)a->min_p;
    if (cli_given(a, "--seed")) sp->seed = (uint64_t)a->seed;
    if (cli_given(a, "--repeat-penalty")) sp->repetition_penalty = (float)a->repeat_penalty;
    if (cli_given(a, "--presence-penalty")) sp->presence_penalty = (float)a->presence_penalty;
    if (cli_given(a, "--frequency-penalty")) sp->frequency_penalty = (float)a->frequency_penalty;
}

const char *cli_precision_note(void)
{
    const char *k = ms_kernel_path();
    if (strstr(k, "fast"))
        return " (precision fast: activations rounded to bf16 for BF16, MXFP4 and FP8 weights "
               "and for attention over a bf16 KV cache; not exact)";
    if (strstr(k, "int8"))
        return " (precision int8: activations quantised to int8 per 32 columns for MXFP4 "
               "weights; not exact)";
    return "";
}

void cli_print_stats(const ms_session *s)
{
    ms_stats st;
    ms_session_stats(s, &st);
    double busy = st.t_attn + st.t_experts + st.t_head + st.t_other;
    fprintf(stderr, "kernels: %s%s\n", ms_kernel_path(), cli_precision_note());
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
    if (st.kv_bytes_read)
        fprintf(stderr, "attention over the KV cache: %.3f s, %lld bytes read, %.0f FLOP\n",
                st.t_attn_kv, (long long)st.kv_bytes_read, st.attn_flops);
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
    if (st.t_stages > 0) /* the expert figures above are this stage's (rank 0) */
        fprintf(stderr, "pipeline: stage 0 waited %.3f s for the other stages\n", st.t_stages);
    pipeline_print_stats();
}


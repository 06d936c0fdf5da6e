/* moestream run / logits: generation and full-prompt logits from token ids. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sysmem.h"
#include "cli.h"

typedef struct run_opts {
    const char *model, *prompt_ids, *prompt_text, *out, *dump, *trace;
    int placement, no_prefetch, buffered;
    int64_t ram, io_threads, cache_slots;
    int64_t n_predict, ctx, threads, feed;
    int ids, ignore_eos, stats, raw;
    int have_temp, have_top_p, have_top_k, have_min_p, have_seed;
    ms_sampling sampling;
} run_opts;

/* Parses the options shared by run and logits; returns 0, or an exit code. */
static int parse(const char *cmd, int argc, char **argv, run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
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
        if ((v = cli_value(argc, argv, &i, "-p", &miss))) { o->prompt_text = v; continue; }
        if ((v = cli_value(argc, argv, &i, "--out", &miss))) { o->out = v; continue; }
        if ((v = cli_value(argc, argv, &i, "--dump", &miss))) { o->dump = v; continue; }
        if ((v = cli_value(argc, argv, &i, "--trace", &miss))) { o->trace = v; continue; }
        if ((v = cli_value(argc, argv, &i, "--ram", &miss))) {
            if ((o->ram = ms_parse_size(v)) <= 0)
                return cli_usage_error(cmd, "--ram expects a size like 6G or 512M, got \"%s\"", v);
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--experts", &miss))) {
            if (!strcmp(v, "auto")) o->placement = MS_PLACE_AUTO;
            else if (!strcmp(v, "pagecache")) o->placement = MS_PLACE_PAGECACHE;
            else if (!strcmp(v, "cache")) o->placement = MS_PLACE_CACHE;
            else return cli_usage_error(cmd, "--experts expects auto, pagecache or cache, got \"%s\"", v);
            continue;
        }
        NUM_I("--io-threads", 1, 256, o->io_threads)
        NUM_I("--cache-slots", 1, INT32_MAX, o->cache_slots)
        NUM_I("-n", 0, INT32_MAX, o->n_predict)
        NUM_I("--ctx", 1, INT64_C(1) << 40, o->ctx)
        NUM_I("--threads", 1, 1024, o->threads)
        NUM_I("--feed", 1, INT32_MAX, o->feed)
        NUM_F("--temp", 0, 100, o->sampling.temperature, o->have_temp)
        NUM_F("--top-p", 1e-9, 1, o->sampling.top_p, o->have_top_p)
        NUM_F("--min-p", 0, 1, o->sampling.min_p, o->have_min_p)
        if ((v = cli_value(argc, argv, &i, "--top-k", &miss))) {
            if (cli_parse_i64(v, 0, INT32_MAX, &iv))
                return cli_usage_error(cmd, "--top-k expects an integer >= 0, got \"%s\"", v);
            o->sampling.top_k = (int32_t)iv;
            o->have_top_k = 1;
            continue;
        }
        if ((v = cli_value(argc, argv, &i, "--seed", &miss))) {
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
        else if (!strcmp(argv[i], "--no-prefetch")) o->no_prefetch = 1;
        else if (!strcmp(argv[i], "--buffered")) o->buffered = 1;
        else if (argv[i][0] == '-')
            return cli_usage_error(cmd, "unknown option %s", argv[i]);
        else if (!o->model) o->model = argv[i];
        else return cli_usage_error(cmd, "unexpected argument \"%s\"", argv[i]);
    }
    if (!o->model)
        return cli_usage_error(cmd, "missing MODEL_DIR");
    if (o->prompt_text && !o->prompt_ids)
        return cli_usage_error(cmd, "-p TEXT needs the tokenizer, which this build does not "
                               "have yet; pass token ids with --prompt-ids FILE");
    if (!o->prompt_ids)
        return cli_usage_error(cmd, "missing --prompt-ids FILE");
    return 0;
}

static int open_all(const run_opts *o, ms_engine **eng, ms_session **s, int32_t **ids,
                    int64_t *n, ms_error *err)
{
    ms_engine_opts eo = {.n_threads = (int)o->threads, .ctx = o->ctx,
                         .placement = o->placement, .ram = o->ram,
                         .cache_slots = (int)o->cache_slots,
                         .io_threads = (int)o->io_threads, .no_prefetch = o->no_prefetch,
                         .buffered = o->buffered, .trace_path = o->trace};
    ms_session_opts so = {.ctx = o->ctx, .dump_dir = o->dump};
    if (cli_read_ids(o->prompt_ids, ids, n, err) || ms_engine_open(o->model, &eo, eng, err) ||
        ms_session_open(*eng, &so, s, err))
        return -1;
    return 0;
}

static void print_stats(const ms_session *s)
{
    ms_stats st;
    ms_session_stats(s, &st);
    double busy = st.t_attn + st.t_experts + st.t_head + st.t_other;
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
        fprintf(stderr, "experts: %lld requests, hit rate %.1f%%, %.1f MB read from disk "
                "(%.2f MB/token), waiting on I/O %.3f s (%.0f%% of expert time)\n",
                (long long)st.expert_requests, 100.0 * st.expert_hits / st.expert_requests,
                st.bytes_read / 1e6, toks ? st.bytes_read / 1e6 / toks : 0.0, st.t_io_wait,
                st.t_experts > 0 ? 100 * st.t_io_wait / st.t_experts : 0.0);
        if (st.prefetch_predicted)
            fprintf(stderr, "prefetch: accuracy %.1f%% (%lld of %lld predicted), %lld reads "
                    "started, %lld used, %.1f MB wasted\n",
                    100.0 * st.prefetch_correct / st.prefetch_predicted,
                    (long long)st.prefetch_correct, (long long)st.prefetch_predicted,
                    (long long)st.prefetch_issued, (long long)st.prefetch_used,
                    st.prefetch_wasted_bytes / 1e6);
    }
}

static int is_stop(const ms_model_info *info, int32_t id)
{
    for (int i = 0; i < info->n_stop; i++)
        if (info->stop_ids[i] == id)
            return 1;
    return 0;
}

/* Feeds the prompt (in pieces of `feed` tokens when set). */
static int prefill(ms_session *s, const int32_t *ids, int64_t n, int64_t feed, float *logits,
                   int64_t vocab, ms_error *err)
{
    int64_t step = feed > 0 ? feed : n;
    for (int64_t off = 0; off < n; off += step) {
        int64_t k = n - off < step ? n - off : step;
        if (ms_session_eval(s, ids + off, k, logits ? logits + off * vocab : NULL, err))
            return -1;
    }
    return 0;
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    int rc = parse("run", argc, argv, &o);
    if (rc)
        return rc;
    ms_error err = {0};
    ms_engine *eng = NULL;
    ms_session *s = NULL;
    ms_sampler *smp = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    rc = 1;
    if (open_all(&o, &eng, &s, &ids, &n, &err))
        goto out;
    const ms_model_info *info = ms_engine_info(eng);
    ms_sampling sp;
    ms_engine_default_sampling(eng, &sp);
    if (o.have_temp) sp.temperature = o.sampling.temperature;
    if (o.have_top_p) sp.top_p = o.sampling.top_p;
    if (o.have_top_k) sp.top_k = o.sampling.top_k;
    if (o.have_min_p) sp.min_p = o.sampling.min_p;
    if (o.have_seed) sp.seed = o.sampling.seed;
    if (ms_sampler_open(&sp, info->vocab_size, &smp, &err) ||
        prefill(s, ids, n, o.feed, NULL, info->vocab_size, &err))
        goto out;
    const char *end = "MAX_TOKENS";
    for (int64_t i = 0; i < o.n_predict; i++) {
        int32_t tok = ms_sampler_next(smp, ms_session_logits(s));
        printf("%s%" PRId32, i ? " " : "", tok);
        fflush(stdout);
        if (!o.ignore_eos && is_stop(info, tok)) {
            end = "STOP";
            break;
        }
        if (i + 1 == o.n_predict)
            break;
        if (ms_session_eval(s, &tok, 1, NULL, &err)) {
            if (err.code == MS_E_CONTEXT_FULL) {
                end = "CONTEXT_FULL";
                fprintf(stderr, "\nmoestream: %s\n", err.msg);
                break;
            }
            printf("\n");
            goto out;
        }
    }
    printf("\n");
    fflush(stdout);
    if (!o.ids)
        fprintf(stderr, "(token ids shown: the text front end needs the tokenizer)\n");
    if (o.stats) {
        fprintf(stderr, "end: %s at position %lld\n", end, (long long)ms_session_pos(s));
        print_stats(s);
    }
    rc = strcmp(end, "CONTEXT_FULL") == 0 ? 3 : 0;
out:
    if (rc == 1)
        rc = cli_fail(&err);
    ms_sampler_close(smp);
    ms_session_close(s);
    ms_engine_close(eng);
    free(ids);
    return rc;
}

int cmd_logits(int argc, char **argv)
{
    run_opts o;
    int rc = parse("logits", argc, argv, &o);
    if (rc)
        return rc;
    if (!o.out)
        return cli_usage_error("logits", "missing --out FILE");
    ms_error err = {0};
    ms_engine *eng = NULL;
    ms_session *s = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    int64_t n = 0;
    FILE *f = NULL;
    rc = 1;
    if (open_all(&o, &eng, &s, &ids, &n, &err))
        goto out;
    int64_t vocab = ms_engine_info(eng)->vocab_size;
    logits = malloc(sizeof *logits * (size_t)(n * vocab));
    if (!logits) {
        snprintf(err.msg, sizeof err.msg, "out of memory for %lld x %lld logits", (long long)n,
                 (long long)vocab);
        goto out;
    }
    if (prefill(s, ids, n, o.feed, logits, vocab, &err))
        goto out;
    f = fopen(o.out, "wb");
    if (!f || fwrite(logits, 4, (size_t)(n * vocab), f) != (size_t)(n * vocab) || fclose(f)) {
        snprintf(err.msg, sizeof err.msg, "%s: cannot write the logits", o.out);
        f = NULL;
        goto out;
    }
    f = NULL;
    if (o.stats)
        print_stats(s);
    rc = 0;
out:
    if (f)
        fclose(f);
    if (rc)
        rc = cli_fail(&err);
    free(logits);
    ms_session_close(s);
    ms_engine_close(eng);
    free(ids);
    return rc;
}

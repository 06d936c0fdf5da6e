/* moestream bench: prefill and decode speed with the expert-tier statistics,
 * the disk's bandwidth at expert-sized reads, (with --floor) the memory
 * floor of decode: weight bytes read per token over the read-stream
 * bandwidth measured between the phases it judges, (with --products)
 * each phase's time by kind of product, and (with --trace) the hit rate of
 * the optimum for the same cache. Prints tables; asserts nothing. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "cli.h"
#include "pipeline.h"

static void row(const char *what, const char *value)
{
    printf("| %-40s | %-32s |\n", what, value);
}

/* The floors' machine figures with the engine's threads: read stream and
 * memcpy in GB/s (two rounds over 256 MiB), FMA peak in GFLOP/s (two
 * rounds), sampled between the phases they judge and folded into the best
 * of the run (the machine's bandwidth swings from minute to minute). */
typedef struct floors {
    double bw, copy, peak;
} floors;

static int sample_floor(const cli_args *o, int threads, floors *fl, ms_error *err)
{
    double r, c, g;
    if (!o->floor)
        return 0;
    if (ms_mem_bandwidth(threads, INT64_C(256) << 20, 2, &r, &c, err) ||
        ms_compute_peak(threads, 2, &g, err))
        return -1;
    fl->bw = r > fl->bw ? r : fl->bw;
    fl->copy = c > fl->copy ? c : fl->copy;
    fl->peak = g > fl->peak ? g : fl->peak;
    return 0;
}

/* Milliseconds the disk holding `path` has spent with requests in flight
 * (io_ticks of /proc/diskstats, the device of path's file system); -1 when
 * that device is not listed there (an overlay, a network file system). */
static int64_t disk_busy_ms(const char *path)
{
    struct stat st;
    if (stat(path, &st))
        return -1;
    FILE *f = fopen("/proc/diskstats", "r");
    char line[512];
    int64_t ms = -1;
    while (f && ms < 0 && fgets(line, sizeof line, f)) {
        unsigned maj, min;
        long long ticks;
        if (sscanf(line, "%u %u %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %lld", &maj, &min,
                   &ticks) == 3 && maj == major(st.st_dev) && min == minor(st.st_dev))
            ms = ticks;
    }
    if (f)
        fclose(f);
    return ms;
}

/* Where a phase's time went, per token: the engine's own timers (stats)
 * between a and b, so that a decode's profile needs no sampler. */
static void print_split(const char *name, int64_t tokens, const ms_stats *a, const ms_stats *b)
{
    double part[4] = {b->t_attn - a->t_attn, b->t_experts - a->t_experts, b->t_head - a->t_head,
                      b->t_other - a->t_other};
    double busy = part[0] + part[1] + part[2] + part[3];
    char what[64], v[160];
    snprintf(what, sizeof what, "  %s: time split, ms/token", name);
    snprintf(v, sizeof v, "attn %.1f (%.0f%%) experts %.1f (%.0f%%) head %.1f (%.0f%%) other %.1f",
             1e3 * part[0] / (double)tokens, busy > 0 ? 100 * part[0] / busy : 0.0,
             1e3 * part[1] / (double)tokens, busy > 0 ? 100 * part[1] / busy : 0.0,
             1e3 * part[2] / (double)tokens, busy > 0 ? 100 * part[2] / busy : 0.0,
             1e3 * part[3] / (double)tokens);
    row(what, v);
}

static void print_phase(const char *name, int64_t tokens, double secs, const ms_stats *a,
                        const ms_stats *b, int64_t busy_ms)
{
    char v[128];
    snprintf(v, sizeof v, "%.3f tok/s (%.1f ms/token)", secs > 0 ? tokens / secs : 0.0,
             tokens ? 1e3 * secs / tokens : 0.0);
    char w[64];
    snprintf(w, sizeof w, "%s, %lld tokens", name, (long long)tokens);
    row(w, v);
    int64_t req = b->expert_requests - a->expert_requests;
    if (!req)
        return;
    snprintf(v, sizeof v, "%.2f MB/token (%.2f by prefetch)",
             (b->bytes_read - a->bytes_read) / 1e6 / tokens,
             (b->prefetch_bytes - a->prefetch_bytes) / 1e6 / tokens);
    snprintf(w, sizeof w, "  %s: bytes read from disk", name);
    row(w, v);
    /* a hit is an expert served with no read issued for it by anyone:
     * prefetched experts are counted apart */
    snprintf(v, sizeof v, "%.1f%% of %lld requests",
             100.0 * (b->expert_hits - a->expert_hits) / req, (long long)req);
    snprintf(w, sizeof w, "  %s: expert cache hit rate", name);
    row(w, v);
    snprintf(v, sizeof v, "%.1f%% / %.1f%%",
             100.0 * (b->expert_prefetch_hits - a->expert_prefetch_hits) / req,
             100.0 * (b->expert_misses - a->expert_misses) / req);
    snprintf(w, sizeof w, "  %s: prefetch hits / misses", name);
    row(w, v);
    snprintf(v, sizeof v, "%.1f ms/token", 1e3 * (b->t_io_wait - a->t_io_wait) / tokens);
    snprintf(w, sizeof w, "  %s: waiting on reads", name);
    row(w, v);
    if (busy_ms >= 0 && secs > 0) { /* how much of the phase the disk was reading */
        snprintf(v, sizeof v, "%.0f%% of the time, %.0f MB/s while busy",
                 100.0 * (double)busy_ms / (1e3 * secs),
                 busy_ms ? (double)(b->bytes_read - a->bytes_read) / 1e3 / (double)busy_ms : 0.0);
        snprintf(w, sizeof w, "  %s: disk busy", name);
        row(w, v);
    }
    int64_t pp = b->prefetch_predicted - a->prefetch_predicted;
    if (pp) {
        snprintf(v, sizeof v, "%.1f%%, %.1f MB wasted",
                 100.0 * (b->prefetch_correct - a->prefetch_correct) / pp,
                 (b->prefetch_wasted_bytes - a->prefetch_wasted_bytes) / 1e6);
        snprintf(w, sizeof w, "  %s: prefetch accuracy", name);
        row(w, v);
    }
}

/* --products: the kinds of product dispatched in a phase, the slowest
 * first; past SHOWN_KINDS the rest in one line. */
enum { MAX_KINDS = 96, SHOWN_KINDS = 16 };

static int by_seconds(const void *a, const void *b)
{
    double x = ((const ms_product_stat *)a)->seconds, y = ((const ms_product_stat *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* One line of the table: `what`, per token of the phase (`tokens` tokens
 * in `phase` seconds) its dispatches (none: < 0), bytes and time, its
 * share of the phase and its rates. */
static void product_line(const char *what, double dispatches, double bytes, double secs,
                         double flops, int64_t tokens, double phase)
{
    char d[32] = "";
    if (dispatches >= 0)
        snprintf(d, sizeof d, "%.2f", dispatches / (double)tokens);
    printf("| %s | %s | %.3f | %.3f | %.1f%% | %.1f | %.1f |\n", what, d,
           bytes / 1e6 / (double)tokens, 1e3 * secs / (double)tokens,
           phase > 0 ? 100 * secs / phase : 0.0, secs > 0 ? bytes / secs / 1e9 : 0.0,
           secs > 0 ? flops / secs / 1e9 : 0.0);
}

static void add_kind(ms_product_stat *sum, const ms_product_stat *k)
{
    sum->dispatches += k->dispatches;
    sum->weight_bytes += k->weight_bytes;
    sum->seconds += k->seconds;
    sum->flops += k->flops;
}

static void print_products(const char *name, int64_t tokens, double phase, ms_product_stat *k,
                           int n)
{
    n = n < MAX_KINDS ? n : MAX_KINDS;
    qsort(k, (size_t)n, sizeof *k, by_seconds);
    printf("\n| %s by product%s: format rows x cols, products a dispatch, tokens (5: 5+) "
           "| dispatches/token | MB/token | ms/token | share | GB/s | GFLOP/s |\n"
           "|---|---|---|---|---|---|---|\n",
           name, pipeline_stages() ? " (this process's layers)" : "");
    ms_product_stat rest = {0}, all = {0};
    for (int i = 0; i < n; i++) {
        add_kind(&all, &k[i]);
        if (i >= SHOWN_KINDS) {
            add_kind(&rest, &k[i]);
            continue;
        }
        char what[128];
        snprintf(what, sizeof what, "%s %lld x %lld, %d, %d", k[i].format, (long long)k[i].rows,
                 (long long)k[i].cols, k[i].products, k[i].tokens);
        product_line(what, (double)k[i].dispatches, (double)k[i].weight_bytes, k[i].seconds,
                     k[i].flops, tokens, phase);
    }
    if (n > SHOWN_KINDS) {
        char what[64];
        snprintf(what, sizeof what, "the %d other kinds", n - SHOWN_KINDS);
        product_line(what, (double)rest.dispatches, (double)rest.weight_bytes, rest.seconds,
                     rest.flops, tokens, phase);
    }
    product_line("all products", -1, (double)all.weight_bytes, all.seconds, all.flops, tokens,
                 phase);
}

/* --rows N: N sessions, each with its own prompt (the synthetic one, moved
 * by a step per row), read together and then decoded together, one
 * ms_session_eval_batch a step, as `serve --parallel N` runs its slots:
 * what a step of N rows costs against one row's decode. */
typedef struct rows_run {
    int rows;
    char name[64]; /* "decode of N rows together" */
    int64_t steps;
    double secs;
    int64_t weight_bytes;
    ms_stats a, b; /* engine-wide: the expert store's counts */
    ms_product_stat kinds[MAX_KINDS];
    int n_kinds;
} rows_run;

static int decode_rows(ms_engine *eng, const cli_args *o, const int32_t *ids, int64_t prompt,
                       int64_t steps, ms_sampler *greedy, rows_run *r, ms_error *err)
{
    const ms_model_info *info = ms_engine_info(eng);
    int rows = (int)o->bench_rows, rc = -1;
    ms_session **ss = calloc((size_t)rows, sizeof *ss);
    int32_t *pids = malloc(sizeof *pids * (size_t)(rows * prompt));
    const int32_t **pp = malloc(sizeof *pp * (size_t)rows);
    int64_t *counts = malloc(sizeof *counts * (size_t)rows);
    int32_t *next = malloc(sizeof *next * (size_t)rows);
    if (!ss || !pids || !pp || !counts || !next) {
        err->code = MS_E_NOMEM;
        snprintf(err->msg, sizeof err->msg, "--rows %d: out of memory", rows);
        goto out;
    }
    int32_t span = info->vocab_size > 256 ? info->vocab_size - 256 : info->vocab_size;
    for (int i = 0; i < rows; i++) {
        if (ms_session_open(eng, &(ms_session_opts){.ctx = o->ctx}, &ss[i], err) ||
            ms_session_fill_synthetic(ss[i], o->context, 1 + (uint64_t)i, err))
            goto out;
        for (int64_t k = 0; k < prompt; k++)
            pids[i * prompt + k] = (int32_t)(((int64_t)ids[k] + 7919 * (int64_t)i) % span);
        pp[i] = pids + i * prompt;
        counts[i] = prompt;
    }
    if (ms_session_eval_many(ss, pp, counts, rows, err))
        goto out;
    *r = (rows_run){.rows = rows, .steps = steps};
    snprintf(r->name, sizeof r->name, "decode of %d rows together", rows);
    ms_engine_stats(eng, &r->a);
    int64_t wb = ms_weight_bytes_read();
    if (o->products)
        ms_product_profile(1);
    double t0 = cli_now();
    for (int64_t t = 0; t < steps; t++) {
        for (int i = 0; i < rows; i++)
            next[i] = ms_sampler_next(greedy, ms_session_logits(ss[i]));
        if (ms_session_eval_batch(ss, next, rows, err))
            goto out;
    }
    r->secs = cli_now() - t0;
    r->weight_bytes = ms_weight_bytes_read() - wb;
    ms_engine_stats(eng, &r->b);
    if (o->products) {
        r->n_kinds = ms_product_stats(r->kinds, MAX_KINDS);
        ms_product_profile(0);
    }
    rc = 0;
out:
    for (int i = 0; ss && i < rows; i++)
        ms_session_close(ss[i]);
    free(ss);
    free(pids);
    free(pp);
    free(counts);
    free(next);
    return rc;
}

static void print_rows(const rows_run *r, double one_secs, int64_t one_tokens, int64_t one_bytes)
{
    int64_t tokens = r->steps * r->rows;
    char what[96], v[128];
    print_phase(r->name, tokens, r->secs, &r->a, &r->b, -1);
    double one = one_secs > 0 ? (double)one_tokens / one_secs : 0;
    snprintf(what, sizeof what, "  %d rows: against one row", r->rows);
    snprintf(v, sizeof v, "%.2fx its tok/s, %.1f ms a step",
             one > 0 && r->secs > 0 ? (double)tokens / r->secs / one : 0.0,
             1e3 * r->secs / (double)r->steps);
    row(what, v);
    snprintf(what, sizeof what, "  %d rows: weight bytes read", r->rows);
    snprintf(v, sizeof v, "%.1f MB/token (one row: %.1f)",
             (double)r->weight_bytes / 1e6 / (double)tokens,
             (double)one_bytes / 1e6 / (double)one_tokens);
    row(what, v);
}

/* --pipeline: every stage's counters at a phase boundary (snap[0]: its
 * layers only; rank 0's counters are the session's). */
#define MAX_STAGES PIPELINE_MAX_RANKS
static int stage_snap(pipeline_stage *snap, ms_error *err)
{
    for (int r = 0; r < pipeline_stages() && r < MAX_STAGES; r++)
        if (pipeline_stage_stats(r, &snap[r], err))
            return -1;
    return 0;
}

/* One row per stage and phase: what it computed and waited, read, hit. */
static void print_stages(const char *name, int64_t tokens, const ms_stats *a, const ms_stats *b,
                         const pipeline_stage *x, const pipeline_stage *y)
{
    char w[96], v[160];
    for (int r = 0; r < pipeline_stages() && r < MAX_STAGES; r++) {
        snprintf(w, sizeof w, "  %s: stage %d (layers %d-%d)", name, r, y[r].first,
                 y[r].end - 1);
        if (r == 0) {
            snprintf(v, sizeof v, "waiting for the other stages %.1f ms/token",
                     1e3 * (b->t_stages - a->t_stages) / (double)tokens);
            row(w, v);
            continue;
        }
        const ms_stats *p = &x[r].st, *q = &y[r].st;
        int64_t req = q->expert_requests - p->expert_requests;
        snprintf(v, sizeof v, "computing %.1f ms/token, waiting %.1f, read %.2f MB/token, "
                 "hit rate %.1f%%", 1e3 * (y[r].t_compute - x[r].t_compute) / (double)tokens,
                 1e3 * (y[r].t_wait - x[r].t_wait) / (double)tokens,
                 (double)(q->bytes_read - p->bytes_read) / 1e6 / (double)tokens,
                 req ? 100.0 * (double)(q->expert_hits - p->expert_hits) / (double)req : 0.0);
        row(w, v);
    }
}

int cmd_bench(int argc, char **argv)
{
    cli_args o;
    int rc = cli_parse(CMD_BENCH, argc, argv, &o);
    if (rc)
        return cli_exit(rc);
    ms_error err = {0};
    int64_t prompt = o.bench_prompt, n = o.n_predict;
    if (!o.ctx)
        o.ctx = o.context + prompt + n + 1;
    ms_engine_opts eo = cli_engine_opts(&o);
    ms_engine *eng = NULL;
    ms_session *s = NULL;
    ms_sampler *greedy = NULL; /* decode picks as `run` does with temperature 0 */
    int32_t *ids = NULL;
    rc = 1;
    if (pipeline_open(&o, &eo, &err) || ms_engine_open(o.model, &eo, &eng, &err))
        goto out;
    const ms_model_info *info = ms_engine_info(eng);
    if (o.bench_rows > info->pass_rows) {
        err.code = MS_E_ARG;
        snprintf(err.msg, sizeof err.msg,
                 "--rows %lld: this engine runs at most %d rows in a pass over the weights",
                 (long long)o.bench_rows, (int)info->pass_rows);
        goto out;
    }
    ms_session_opts so = {.ctx = o.ctx};
    ids = malloc(sizeof *ids * (size_t)(prompt + n));
    if (!ids ||
        ms_sampler_open(&(ms_sampling){.temperature = 0, .top_p = 1}, info->vocab_size, &greedy,
                        &err) ||
        ms_session_open(eng, &so, &s, &err) ||
        ms_session_fill_synthetic(s, o.context, 1, &err))
        goto out;
    cli_synthetic_prompt(ids, prompt, info->vocab_size);
    ms_stats s0, s1, s2;
    int threads = ms_engine_threads(eng);
    floors fl = {0};
    if (sample_floor(&o, threads, &fl, &err))
        goto out;
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s/config.json", o.model);
    int64_t d0 = disk_busy_ms(cfg);
    static pipeline_stage p0[MAX_STAGES], p1[MAX_STAGES], p2[MAX_STAGES];
    if (stage_snap(p0, &err))
        goto out;
    ms_session_stats(s, &s0);
    int64_t wb0 = ms_weight_bytes_read();
    static ms_product_stat pre_kinds[MAX_KINDS];
    int n_pre = 0;
    if (o.products)
        ms_product_profile(1);
    if (ms_session_eval(s, ids, prompt, NULL, &err))
        goto out;
    ms_session_stats(s, &s1);
    if (o.products) {
        n_pre = ms_product_stats(pre_kinds, MAX_KINDS);
        ms_product_profile(1);
    }
    int64_t wb1 = ms_weight_bytes_read(), d1 = disk_busy_ms(cfg);
    if (stage_snap(p1, &err))
        goto out;
    if (sample_floor(&o, threads, &fl, &err))
        goto out;
    for (int64_t i = 0; i < n; i++) {
        int32_t best = ms_sampler_next(greedy, ms_session_logits(s));
        if (ms_session_eval(s, &best, 1, NULL, &err))
            goto out;
    }
    ms_session_stats(s, &s2);
    int64_t wb2 = ms_weight_bytes_read(), d2 = disk_busy_ms(cfg);
    static ms_product_stat dec_kinds[MAX_KINDS];
    int n_dec = 0;
    if (o.products) {
        n_dec = ms_product_stats(dec_kinds, MAX_KINDS);
        ms_product_profile(0);
    }
    if (stage_snap(p2, &err))
        goto out;
    if (sample_floor(&o, threads, &fl, &err))
        goto out;
    static rows_run rr;
    if (o.bench_rows > 1 &&
        decode_rows(eng, &o, ids, prompt, n, greedy, &rr, &err))
        goto out;
    printf("| %-40s | %-32s |\n|%s|%s|\n", "moestream bench", o.model,
           "------------------------------------------", "----------------------------------");
    char v[128];
    row("family", info->family);
    row("experts", ms_engine_placement(eng));
    char kernels[256];
    snprintf(kernels, sizeof kernels, "%s%s", ms_kernel_path(), cli_precision_note());
    row("kernels", kernels);
    snprintf(v, sizeof v, "%s, %lld tokens%s", ms_session_kv_format(s), (long long)ms_session_ctx(s),
             o.context ? " (synthetic context before the prompt)" : "");
    row("KV cache", v);
    snprintf(v, sizeof v, "%lld positions per pass over the layers",
             (long long)info->prefill_span);
    row("prefill span", v);
    print_phase("prefill", prompt, s1.t_prefill - s0.t_prefill, &s0, &s1,
                d0 >= 0 && d1 >= 0 ? d1 - d0 : -1);
    double pkv = s1.t_attn_kv - s0.t_attn_kv, pt = s1.t_prefill - s0.t_prefill;
    snprintf(v, sizeof v, "%.2f ms/token (%.0f%% of prefill)", 1e3 * pkv / (double)prompt,
             pt > 0 ? 100 * pkv / pt : 0.0);
    row("  prefill: attention over the KV cache", v);
    print_split("prefill", prompt, &s0, &s1);
    print_phase("decode", n, s2.t_decode - s1.t_decode, &s1, &s2,
                d1 >= 0 && d2 >= 0 ? d2 - d1 : -1);
    print_split("decode", n, &s1, &s2);
    if (o.bench_rows > 1)
        print_rows(&rr, s2.t_decode - s1.t_decode, n, wb2 - wb1);
    if (pipeline_stages()) {
        print_stages("prefill", prompt, &s0, &s1, p0, p1);
        print_stages("decode", n, &s1, &s2, p1, p2);
        for (int r = 1; r < pipeline_stages() && r < MAX_STAGES; r++) {
            char w[64];
            snprintf(w, sizeof w, "stage %d: experts", r);
            row(w, p2[r].placement);
        }
    }
    if (o.floor) {
        double per = (double)(wb2 - wb1) / (double)n, dec = (s2.t_decode - s1.t_decode) / n;
        double bw = fl.bw;
        snprintf(v, sizeof v, "%.1f GB/s (memcpy %.1f), %d thread%s", bw, fl.copy, threads,
                 threads == 1 ? "" : "s");
        row("memory read stream (best of 6)", v);
        snprintf(v, sizeof v, "%.1f GFLOP/s (%s FMAs), %d thread%s", fl.peak, ms_kernel_path(),
                 threads, threads == 1 ? "" : "s");
        row("compute peak (best of 6)", v);
        snprintf(v, sizeof v, "%.1f MB/token (prefill %.1f)", per / 1e6,
                 (double)(wb1 - wb0) / 1e6 / (double)prompt);
        row("decode: weight bytes read", v);
        snprintf(v, sizeof v, "%.1f ms/token; decode %.2fx floor", 1e3 * per / (bw * 1e9),
                 dec / (per / (bw * 1e9)));
        row("decode floor (bytes / read stream)", v);
        double kvb = (double)(s2.kv_bytes_read - s1.kv_bytes_read) / (double)n;
        double kvt = (s2.t_attn_kv - s1.t_attn_kv) / (double)n;
        snprintf(v, sizeof v, "%.2f ms/token, %.1f MB/token: %.2fx its floor", 1e3 * kvt,
                 kvb / 1e6, kvb > 0 ? kvt / (kvb / (bw * 1e9)) : 0.0);
        row("decode: attention over the KV cache", v);
        /* what bounds attention where its bytes do not: MLA's shared latent
         * does 100+ operations a byte, a GQA cache in bf16 ~8 */
        double kvf = (s2.attn_flops - s1.attn_flops) / (double)n;
        snprintf(v, sizeof v, "%.2f GFLOP/token, %.0f GFLOP/s: %.2fx its floor", kvf / 1e9,
                 kvt > 0 ? kvf / kvt / 1e9 : 0.0,
                 kvf > 0 && fl.peak > 0 ? kvt / (kvf / (fl.peak * 1e9)) : 0.0);
        row("decode: attention's arithmetic (peak)", v);
    }
    ms_expert_info ei;
    if (o.disk && ms_engine_expert_info(eng, &ei) == 0) {
        double disk;
        if (ms_engine_disk_probe(eng, (int)o.disk, 4, &disk, &err))
            goto out;
        snprintf(v, sizeof v, "%.0f MB/s (%lld experts of %.1f MB, read as the cache does)",
                 disk / 1e6, (long long)o.disk, ei.expert_bytes / 1e6);
        row("disk read bandwidth", v);
        double per = (double)(s2.bytes_read - s1.bytes_read) / (double)n;
        snprintf(v, sizeof v, "%.1f ms/token", 1e3 * per / disk);
        row("decode IO floor (bytes/token / disk)", v);
    }
    if (o.products) {
        print_products("prefill", prompt, s1.t_prefill - s0.t_prefill, pre_kinds, n_pre);
        print_products("decode", n, s2.t_decode - s1.t_decode, dec_kinds, n_dec);
        if (o.bench_rows > 1)
            print_products(rr.name, rr.steps * rr.rows, rr.secs, rr.kinds, rr.n_kinds);
    }
    fflush(stdout);
    rc = 0;
out:
    if (rc)
        rc = cli_fail(&err);
    ms_session_close(s);
    ms_engine_close(eng);
    ms_sampler_close(greedy);
    free(ids);
    if (rc == 0 && o.trace) {
        ms_replay_result r;
        /* the trace file is complete once the engine is closed; the replay
         * uses the cache size the engine ran with (trace header) */
        if (ms_replay(o.trace, 0, 0, &r, &err) == 0)
            printf("| %-40s | engine %.1f%% LRU %.1f%% fixed set %.1f%% opt %.1f%% |\n",
                   "replay: hit rate at the same budget", 100 * r.engine_hit, 100 * r.lru_hit,
                   100 * r.fixed_hit, 100 * r.opt_hit);
        else
            fprintf(stderr, "moestream bench: replay: %s\n", err.msg);
    }
    return rc;
}
